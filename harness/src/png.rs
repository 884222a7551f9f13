//! A tiny RGB canvas and PNG writer, enough for the report's figures: filled rectangles,
//! a 3x5 pixel font, and an encoder using stored (uncompressed) deflate blocks, so it needs
//! no compression library. The files are larger than a compressor's, and every PNG reader
//! takes them.

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

    /// Draws `text` with its top-left corner at (x, y), each font pixel `scale` pixels.
    /// Returns the x after the text.
    pub fn text(&mut self, x: usize, y: usize, text: &str, scale: usize, c: Rgb) -> usize {
        let mut cx = x;
        for ch in text.chars() {
            for (row, bits) in glyph(ch).iter().enumerate() {
                for col in 0..3 {
                    if bits & (4 >> col) != 0 {
                        self.rect(cx + col * scale, y + row * scale, scale, scale, c);
                    }
                }
            }
            cx += 4 * scale;
        }
        cx
    }

    pub fn text_width(text: &str, scale: usize) -> usize {
        text.chars().count() * 4 * scale
    }

    /// The image as a PNG file (8-bit RGB, no interlace, stored deflate blocks).
    pub fn png(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity((self.width * 3 + 1) * self.height);
        for row in self.pixels.chunks(self.width * 3) {
            raw.push(0); // filter: none
            raw.extend_from_slice(row);
        }
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&(self.width as u32).to_be_bytes());
        ihdr.extend_from_slice(&(self.height as u32).to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // depth 8, RGB, deflate, filter 0, no interlace
        chunk(&mut out, b"IHDR", &ihdr);
        chunk(&mut out, b"IDAT", &zlib_stored(&raw));
        chunk(&mut out, b"IEND", &[]);
        out
    }
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// CRC-32 (IEEE, reflected), as PNG chunks use.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (n, e) in table.iter_mut().enumerate() {
        let mut c = n as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *e = c;
    }
    let mut c = 0xffff_ffffu32;
    for &b in bytes {
        c = table[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    c ^ 0xffff_ffff
}

fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in bytes.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

/// A zlib stream of stored deflate blocks (no compression).
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = if data.is_empty() {
        vec![&[]]
    } else {
        data.chunks(65535).collect()
    };
    for (i, block) in blocks.iter().enumerate() {
        out.push(u8::from(i + 1 == blocks.len())); // BFINAL, BTYPE 00
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// Decodes a PNG written by [`Canvas::png`] (stored blocks only), checking every CRC
    /// and the Adler-32: (width, height, RGB pixels).
    pub fn decode(png: &[u8]) -> (usize, usize, Vec<u8>) {
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let mut at = 8;
        let (mut w, mut h, mut z) = (0, 0, Vec::new());
        while at < png.len() {
            let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
            let kind = &png[at + 4..at + 8];
            let data = &png[at + 8..at + 8 + len];
            let crc = u32::from_be_bytes(png[at + 8 + len..at + 12 + len].try_into().unwrap());
            assert_eq!(crc, crc32(&png[at + 4..at + 8 + len]), "chunk CRC");
            match kind {
                b"IHDR" => {
                    w = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
                    h = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                    assert_eq!(&data[8..], &[8, 2, 0, 0, 0]);
                }
                b"IDAT" => z.extend_from_slice(data),
                _ => {}
            }
            at += 12 + len;
        }
        assert_eq!(&z[..2], &[0x78, 0x01]);
        let mut raw = Vec::new();
        let mut p = 2;
        loop {
            let last = z[p] & 1 == 1;
            assert_eq!(z[p] & 6, 0, "stored block");
            let len = u16::from_le_bytes([z[p + 1], z[p + 2]]) as usize;
            let nlen = u16::from_le_bytes([z[p + 3], z[p + 4]]);
            assert_eq!(nlen, !(len as u16));
            raw.extend_from_slice(&z[p + 5..p + 5 + len]);
            p += 5 + len;
            if last {
                break;
            }
        }
        assert_eq!(
            u32::from_be_bytes(z[p..p + 4].try_into().unwrap()),
            adler32(&raw)
        );
        let mut pixels = Vec::new();
        for row in raw.chunks(w * 3 + 1) {
            assert_eq!(row[0], 0);
            pixels.extend_from_slice(&row[1..]);
        }
        assert_eq!(pixels.len(), w * h * 3);
        (w, h, pixels)
    }

    #[test]
    fn crc_and_adler_match_known_values() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
    }

    #[test]
    fn a_canvas_round_trips_through_png() {
        // Tall enough for several stored blocks.
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
}
