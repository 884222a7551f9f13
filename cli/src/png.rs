//! A tiny RGB canvas, enough for the report's figures: filled rectangles and a 3x5 pixel
//! font, written as a PNG by the `png` crate. The figures are large flat areas, which
//! deflate shrinks about forty-fold (798x454: 1.1 MB stored, tens of KB compressed).

/// An RGB colour.
pub type Rgb = [u8; 3];

pub struct Canvas {
    pub width: usize,
    pub height: usize,
    /// Row-major RGB bytes.
    pub pixels: Vec<u8>,
}

/// Glyphs of the 3x5 font: 5 rows of 3 bits (bit 2 = left column).
fn glyph(c: char) -> [u8; 5] {
    match c.to_ascii_uppercase() {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 3, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 2, 2],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        'A' => [2, 5, 7, 5, 5],
        'B' => [6, 5, 6, 5, 6],
        'C' => [3, 4, 4, 4, 3],
        'D' => [6, 5, 5, 5, 6],
        'E' => [7, 4, 6, 4, 7],
        'F' => [7, 4, 6, 4, 4],
        'G' => [3, 4, 5, 5, 3],
        'H' => [5, 5, 7, 5, 5],
        'I' => [7, 2, 2, 2, 7],
        'J' => [1, 1, 1, 5, 2],
        'K' => [5, 5, 6, 5, 5],
        'L' => [4, 4, 4, 4, 7],
        'M' => [5, 7, 5, 5, 5],
        'N' => [5, 7, 7, 7, 5],
        'O' => [2, 5, 5, 5, 2],
        'P' => [6, 5, 6, 4, 4],
        'Q' => [2, 5, 5, 6, 3],
        'R' => [6, 5, 6, 5, 5],
        'S' => [3, 4, 2, 1, 6],
        'T' => [7, 2, 2, 2, 2],
        'U' => [5, 5, 5, 5, 7],
        'V' => [5, 5, 5, 5, 2],
        'W' => [5, 5, 7, 7, 5],
        'X' => [5, 5, 2, 5, 5],
        'Y' => [5, 5, 2, 2, 2],
        'Z' => [7, 1, 2, 4, 7],
        '.' => [0, 0, 0, 0, 2],
        ',' => [0, 0, 0, 2, 4],
        ':' => [0, 2, 0, 2, 0],
        ';' => [0, 2, 0, 2, 4],
        '-' => [0, 0, 7, 0, 0],
        '+' => [0, 2, 7, 2, 0],
        '=' => [0, 7, 0, 7, 0],
        '%' => [5, 1, 2, 4, 5],
        '/' => [1, 1, 2, 4, 4],
        '(' => [1, 2, 2, 2, 1],
        ')' => [4, 2, 2, 2, 4],
        '_' => [0, 0, 0, 0, 7],
        '*' => [0, 5, 2, 5, 0],
        _ => [0, 0, 0, 0, 0],
    }
}

impl Canvas {
    pub fn new(width: usize, height: usize, background: Rgb) -> Canvas {
        let mut pixels = Vec::with_capacity(width * height * 3);
        for _ in 0..width * height {
            pixels.extend_from_slice(&background);
        }
        Canvas {
            width,
            height,
            pixels,
        }
    }

    /// Fills a rectangle, clipped to the canvas.
    pub fn rect(&mut self, x: usize, y: usize, w: usize, h: usize, c: Rgb) {
        for yy in y.min(self.height)..(y + h).min(self.height) {
            for xx in x.min(self.width)..(x + w).min(self.width) {
                let i = (yy * self.width + xx) * 3;
                self.pixels[i..i + 3].copy_from_slice(&c);
            }
        }
    }

    /// The lit pixels of `text` in the 3x5 font: (character, row, column).
    fn lit(text: &str) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        text.chars().enumerate().flat_map(|(i, ch)| {
            let rows = glyph(ch);
            (0..5).flat_map(move |row| {
                (0..3)
                    .filter(move |col| rows[row] & (4 >> col) != 0)
                    .map(move |col| (i, row, col))
            })
        })
    }

    /// Draws `text` with its top-left corner at (x, y), each font pixel `scale` pixels.
    /// Returns the x after the text.
    pub fn text(&mut self, x: usize, y: usize, text: &str, scale: usize, c: Rgb) -> usize {
        for (i, row, col) in Canvas::lit(text) {
            self.rect(x + (i * 4 + col) * scale, y + row * scale, scale, scale, c);
        }
        x + Canvas::text_width(text, scale)
    }

    /// Draws `text` turned a quarter left, read bottom to top (a column label where the
    /// digits would not fit across): its glyphs' tops face left, its first character's
    /// bottom-left corner is at (x, y_bottom). Takes `5 * scale` pixels across and
    /// [`Canvas::text_width`] up.
    pub fn text_up(&mut self, x: usize, y_bottom: usize, text: &str, scale: usize, c: Rgb) {
        for (i, row, col) in Canvas::lit(text) {
            if let Some(y) = y_bottom.checked_sub((i * 4 + col + 1) * scale) {
                self.rect(x + row * scale, y, scale, scale, c);
            }
        }
    }

    pub fn text_width(text: &str, scale: usize) -> usize {
        text.chars().count() * 4 * scale
    }

    /// The image as a PNG file (8-bit RGB), compressed: each row with the filter that
    /// suits it, then deflate at its high setting (a report is written once, read often).
    pub fn png(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, self.width as u32, self.height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::High);
        encoder.set_filter(png::Filter::Adaptive);
        let mut writer = encoder
            .write_header()
            .expect("a canvas is a valid 8-bit RGB image");
        writer
            .write_image_data(&self.pixels)
            .expect("the canvas holds width x height pixels");
        writer.finish().expect("written to memory");
        out
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// Decodes a PNG (any reader's view of it: the `png` crate's decoder, which checks
    /// every CRC and the zlib checksum): (width, height, RGB pixels).
    pub fn decode(bytes: &[u8]) -> (usize, usize, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().expect("a valid PNG header");
        let mut pixels = vec![0; reader.output_buffer_size().expect("a sane size")];
        let info = reader.next_frame(&mut pixels).expect("a valid PNG image");
        assert_eq!(
            (info.color_type, info.bit_depth),
            (png::ColorType::Rgb, png::BitDepth::Eight)
        );
        pixels.truncate(info.buffer_size());
        (info.width as usize, info.height as usize, pixels)
    }

    #[test]
    fn a_canvas_round_trips_through_png() {
        let mut c = Canvas::new(300, 400, [255, 255, 255]);
        c.rect(10, 20, 30, 40, [1, 2, 3]);
        c.rect(290, 390, 50, 50, [9, 9, 9]); // clipped
        let end = c.text(100, 100, "M=512 1.25X", 2, [0, 0, 0]);
        assert_eq!(end, 100 + Canvas::text_width("M=512 1.25X", 2));
        let (w, h, px) = decode(&c.png());
        assert_eq!((w, h), (300, 400));
        assert_eq!(px, c.pixels);
        let count = |rgb: [u8; 3]| px.chunks(3).filter(|p| *p == rgb).count();
        assert_eq!(count([1, 2, 3]), 30 * 40);
        assert_eq!(count([9, 9, 9]), 10 * 10);
        assert!(count([0, 0, 0]) > 50, "the text drew pixels");
    }

    #[test]
    fn text_turned_up_is_the_same_glyphs_read_bottom_to_top() {
        let mut across = Canvas::new(40, 10, [255, 255, 255]);
        across.text(0, 0, "1024", 2, [0, 0, 0]);
        let mut up = Canvas::new(10, 40, [255, 255, 255]);
        up.text_up(0, 32, "1024", 2, [0, 0, 0]);
        // Turning `up` a quarter right gives `across`: (x, y) of `across` is
        // (y, 31 - x) of `up`.
        for y in 0..10 {
            for x in 0..32 {
                let a = &across.pixels[(y * 40 + x) * 3..][..3];
                let u = &up.pixels[((31 - x) * 10 + y) * 3..][..3];
                assert_eq!(a, u, "({x}, {y})");
            }
        }
    }

    #[test]
    fn a_figure_of_flat_areas_is_stored_compressed() {
        // The report's size and kind of picture: flat cells, bars and text.
        let mut c = Canvas::new(798, 454, [255, 255, 255]);
        for i in 0..40 {
            c.rect(10 + i * 19, 30, 17, 300, [(i * 6) as u8, 160, 90]);
            c.text(10 + i * 19, 340, &format!("{i}"), 2, [0, 0, 0]);
        }
        let raw = 798 * 454 * 3;
        let png = c.png();
        assert!(png.len() < raw / 20, "{} bytes for {raw} raw", png.len());
        assert_eq!(decode(&png).2, c.pixels);
    }
}
