//! `tunedblas report`'s page and picture: the figures of [`crate::report::Data`] as a
//! self-contained HTML page (inline SVG and CSS, the data in a JSON script block) and as a
//! PNG with a legend and every token count labelled.

use crate::png::{Canvas, Rgb};
use crate::report::{hex, Data, Headline, Status, BAR_RGB, INK, NEVER_RGB, PAPER, RULE};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const CELL: usize = 18;
const LABEL_W: usize = 230;
const HEAD_H: usize = 60;

fn map_svg(d: &Data) -> String {
    let map_w = LABEL_W + d.columns.len() * CELL + 10;
    let map_h = HEAD_H + d.rows.len() * CELL + 10;
    let mut svg = format!(
        "<svg id=\"map\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{map_w}\" height=\"{map_h}\" role=\"img\" aria-label=\"coverage map\">\n"
    );
    for (j, m) in d.columns.iter().enumerate() {
        let x = LABEL_W + j * CELL + CELL / 2;
        svg.push_str(&format!(
            "<text class=\"col\" x=\"{x}\" y=\"{}\" transform=\"rotate(-60 {x} {})\">{m}</text>\n",
            HEAD_H - 4,
            HEAD_H - 4
        ));
    }
    for (i, row) in d.rows.iter().enumerate() {
        let y = HEAD_H + i * CELL;
        svg.push_str(&format!(
            "<text class=\"row\" x=\"{}\" y=\"{}\">{}</text>\n",
            LABEL_W - 6,
            y + CELL - 5,
            esc(&row.label)
        ));
        for (j, m) in d.columns.iter().enumerate() {
            let x = LABEL_W + j * CELL;
            let Some(c) = row.cells.iter().find(|c| c.m == *m) else {
                svg.push_str(&format!(
                    "<rect class=\"never\" x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\"><title>{} M={m}: never seen</title></rect>\n",
                    CELL - 2,
                    CELL - 2,
                    esc(&row.label)
                ));
                continue;
            };
            let mut seen = Vec::new();
            if c.missed {
                seen.push(format!("missed in production ({} calls)", c.calls));
            }
            if c.predicted {
                seen.push("predicted by coverage".to_string());
            }
            if seen.is_empty() {
                seen.push("a profile row".into());
            }
            svg.push_str(&format!(
                "<rect class=\"cell {}\" x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" data-m=\"{m}\"><title>{} M={m}: {}; seen as {}</title></rect>\n",
                c.status.class(),
                CELL - 2,
                CELL - 2,
                esc(&row.label),
                esc(&c.text),
                seen.join(", ")
            ));
        }
    }
    svg.push_str("</svg>");
    svg
}

fn bars_svg(d: &Data) -> String {
    if d.bars.is_empty() {
        return "<p>No campaign in provenance.json measured a tuned row of this profile.</p>"
            .into();
    }
    let max = d.bars.iter().map(|b| b.speedup).fold(1.0f64, f64::max) * 1.05;
    let bar_w = 420.0;
    let bars_h = d.bars.len() * CELL + 30;
    let mut bars = format!(
        "<svg id=\"bars\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{bars_h}\" role=\"img\" aria-label=\"speedups\">\n",
        LABEL_W + bar_w as usize + 80
    );
    for (i, b) in d.bars.iter().enumerate() {
        let y = i * CELL;
        let w = (b.speedup / max * bar_w).max(1.0);
        bars.push_str(&format!(
            "<text class=\"row\" x=\"{}\" y=\"{}\">{} M={}</text><rect class=\"bar\" x=\"{LABEL_W}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" data-speedup=\"{:.4}\"><title>heuristic {:.4} ms, served {:.4} ms ({})</title></rect><text x=\"{:.1}\" y=\"{}\">{:.2}x</text>\n",
            LABEL_W - 6,
            y + CELL - 5,
            esc(&b.label),
            b.m,
            CELL - 3,
            b.speedup,
            b.heuristic_ms,
            b.served_ms,
            esc(&b.decision),
            LABEL_W as f64 + w + 4.0,
            y + CELL - 5,
            b.speedup
        ));
    }
    let one = LABEL_W as f64 + 1.0 / max * bar_w;
    bars.push_str(&format!(
        "<line x1=\"{one:.1}\" x2=\"{one:.1}\" y1=\"0\" y2=\"{}\" class=\"one\"/><text x=\"{one:.1}\" y=\"{}\" class=\"col\">1.0x (heuristic)</text>\n</svg>",
        d.bars.len() * CELL,
        d.bars.len() * CELL + 16
    ));
    bars
}

/// The headline in words: call-weighted saving and per-shape mean, with what each counts.
pub fn headline_text(h: &Headline) -> String {
    let weighted = match h.saved_share {
        Some(s) => format!(
            "tuning saves {:.1}% of the GEMM time (call-weighted speedup {}) of the {} measured shapes with recorded calls ({} calls; {:.3} of {:.3} ms, calls x (heuristic - served) time)",
            100.0 * s,
            h.weighted_speedup.map_or("-".into(), |x| format!("{x:.2}x")),
            h.weighted_shapes,
            h.weighted_calls,
            h.saved_ms,
            h.heuristic_ms
        ),
        None => "no measured shape has recorded calls: no call-weighted figure".into(),
    };
    let per_shape = h.geomean.map_or_else(
        || "no tuned row was measured".to_string(),
        |g| format!("per-shape speedup of the tuned rows: geometric mean {g:.2}x across {} shapes, each counted once whatever its calls", h.geomean_shapes),
    );
    let weights = match weighed(h) {
        None => String::new(),
        Some((0, _)) => "; weighted by the calls recorded before tuning (provenance.json)".into(),
        Some((_, 0)) => "; weighted by the calls of the given run (--misses)".into(),
        Some((given, before)) => format!(
            "; weighted by the calls of the given run (--misses) for {given} shapes, by the calls recorded before tuning (provenance.json) for the other {before}, which the given run did not count (a miss log counts only what was missed: a rocBLAS log of the served run, ROCBLAS_LAYER=4, counts every call)"
        ),
    };
    let uncounted = if h.uncounted_shapes > 0 {
        format!(
            "; {} measured shapes without recorded calls are not in the call-weighted figure",
            h.uncounted_shapes
        )
    } else {
        String::new()
    };
    format!("{weighted}{weights}; {per_shape}{uncounted}")
}

fn lists_html(d: &Data) -> String {
    let mut o = String::from("<h2>Measurements that decided nothing</h2>\n");
    if d.headline.doubts.is_empty() {
        o.push_str("<p>None: every measured shape was decided.</p>\n");
    } else {
        o.push_str("<ul id=\"doubts\">\n");
        for x in &d.headline.doubts {
            o.push_str(&format!(
                "<li>{} M={}: <b>{}</b>{} &mdash; {}</li>\n",
                esc(&x.label),
                x.m,
                esc(&x.decision),
                x.spread
                    .map_or(String::new(), |s| format!(", spread {:.0}%", 100.0 * s)),
                esc(&x.reason)
            ));
        }
        o.push_str("</ul>\n");
    }
    o.push_str("<h2>Tune next</h2>\n");
    let t = &d.tune_next;
    if t.items.is_empty() {
        o.push_str("<p>Nothing: every seen shape has a row.</p>\n");
        return o;
    }
    o.push_str(&format!(
        "<p>{}.</p>\n<ol id=\"tune-next\">\n",
        esc(crate::report::SPEC_ORDER)
    ));
    for n in &t.items {
        o.push_str(&format!(
            "<li>{} M={} ({}, {} calls, {:.3} MFLOP per call){}</li>\n",
            esc(&n.label),
            n.m,
            n.status.class(),
            n.calls,
            n.flops / 1e6,
            n.spec.as_ref().map_or(String::new(), |s| format!(
                ": <code>--shape {}</code>",
                esc(s)
            ))
        ));
    }
    o.push_str("</ol>\n");
    for c in [&t.command, &t.all_missed].into_iter().flatten() {
        o.push_str(&format!("<pre class=\"cmd\">{}</pre>\n", esc(c)));
    }
    o
}

pub fn html(d: &Data) -> String {
    let svg = map_svg(d);
    let bars_section = bars_svg(d);
    let legend: String = Status::ALL
        .iter()
        .map(|s| {
            format!(
                "<span style=\"background:{}\"></span>{}",
                hex(s.rgb()),
                esc(s.meaning())
            )
        })
        .chain([format!(
            "<span style=\"background:{}\"></span>never seen",
            hex(NEVER_RGB)
        )])
        .collect();
    let data_json = serde_json::to_string(d)
        .unwrap_or_default()
        .replace("</", "<\\/");
    let c = &d.counts;
    format!(
        r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>tunedblas report: {name}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1e1e1e; }}
h1 {{ font-size: 20px; margin: 0 0 4px; }}
.meta {{ color: #555; margin-bottom: 16px; }}
.legend span {{ display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 14px; vertical-align: -1px; }}
svg text {{ font: 11px system-ui, sans-serif; fill: #1e1e1e; }}
svg text.row {{ text-anchor: end; }}
{cell_css}
rect.bar {{ fill: {bar}; }} line.one {{ stroke: #1e1e1e; stroke-dasharray: 3 3; }}
.counts b {{ font-size: 16px; }}
pre.cmd {{ background: #f4f4f4; padding: 6px; white-space: pre-wrap; }}
</style></head>
<body>
<h1>tunedblas profile <code>{name}</code></h1>
<div class="meta">rocBLAS {rocblas} &middot; arch {arch} &middot; build <code>{sha}</code> &middot; rank {rank} &middot; near window {window}</div>
<p class="counts" id="headline">{headline}.</p>
<p class="counts"><b id="n-tuned">{nt}</b> tuned &middot; <b id="n-default">{nd}</b> Default &middot; <b id="n-near">{nn}</b> near &middot; <b id="n-missed">{nm}</b> missed in production &middot; <b id="n-predicted">{np}</b> predicted, over {rows} layers; {nv} (layer, M) positions never seen.
Recorded calls: {near_calls} near-served, {missed_calls} served by the heuristic.</p>
<h2>Coverage</h2>
<div class="legend">{legend}</div>
{svg}
<h2>Speedup per tuned shape</h2>
{bars_section}
{lists}
<script type="application/json" id="report-data">{data_json}</script>
<script>
(function () {{
  var n = function (s) {{ return document.querySelectorAll(s).length; }};
  var map = document.getElementById("map"), r = map.getBoundingClientRect();
  map.setAttribute("data-rendered", JSON.stringify({{
    tuned: n("#map rect.tuned"), "default": n("#map rect.default"), near: n("#map rect.near"),
    missed: n("#map rect.missed"), predicted: n("#map rect.predicted"), never: n("#map rect.never"),
    bars: n("#bars rect.bar"), mapWidth: Math.round(r.width), mapHeight: Math.round(r.height)
  }}));
}})();
</script>
</body></html>
"##,
        name = esc(&d.profile),
        rocblas = esc(d.rocblas.as_deref().unwrap_or("unknown")),
        arch = esc(d.arch.as_deref().unwrap_or("unknown")),
        sha = esc(&d.sha256),
        rank = d.rank,
        window = d.near_window,
        headline = esc(&headline_text(&d.headline)),
        nt = c.tuned,
        nd = c.default,
        nn = c.near,
        nm = c.missed,
        np = c.predicted,
        nv = c.never_seen,
        near_calls = d.claims.near_calls,
        missed_calls = d.claims.missed_calls,
        rows = d.rows.len(),
        cell_css = Status::ALL
            .iter()
            .map(|s| format!("rect.{} {{ fill: {}; }}", s.class(), hex(s.rgb())))
            .chain([format!("rect.never {{ fill: {}; }}", hex(NEVER_RGB))])
            .collect::<Vec<_>>()
            .join(" "),
        lists = lists_html(d),
        bar = hex(BAR_RGB),
    )
}

/// Cell size of the PNG map: at most 24x16, narrower for many token counts, never below
/// 12 wide: every token count keeps its label at twice the font's size, turned up where it
/// does not fit across.
pub fn png_cell(cols: usize) -> (usize, usize) {
    ((1600 / cols.max(1)).clamp(12, 24), 16)
}

/// Every text of the PNG is drawn at this scale at least (the font is 3x5: at 1x digits
/// are 5 pixels tall and unreadable on a screen).
pub const TEXT: usize = 2;
/// The headline's first line, larger.
const BIG: usize = 3;

/// How the column labels are drawn: across when the longest fits its column, else turned
/// up (read bottom to top), both at [`TEXT`] scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Labels {
    Across,
    Up,
}

fn labels_of(d: &Data, cw: usize) -> (Labels, usize) {
    let longest = d
        .columns
        .iter()
        .map(|m| m.to_string().len())
        .max()
        .unwrap_or(1);
    if Canvas::text_width(&"0".repeat(longest), TEXT) + 3 <= cw {
        (Labels::Across, 5 * TEXT)
    } else {
        (Labels::Up, Canvas::text_width(&"0".repeat(longest), TEXT))
    }
}

/// Where column `j`'s label goes: (x, y) of its top-left corner across, or of its bottom-left
/// corner turned up.
pub fn column_label_at(l: &Layout, j: usize) -> (usize, usize) {
    let (cw, _) = l.cell;
    let x0 = l.label_w + j * cw;
    match l.labels {
        Labels::Across => (x0, l.labels_y),
        Labels::Up => (
            x0 + (cw - 2).saturating_sub(5 * TEXT) / 2,
            l.labels_y + l.labels_h,
        ),
    }
}

/// Where the headline has a call-weighted figure: its shapes weighted by the calls of the
/// given run, and those weighted by the calls recorded before tuning.
fn weighed(h: &Headline) -> Option<(usize, usize)> {
    h.saved_share?;
    Some((
        h.given_run_shapes,
        h.weighted_shapes.saturating_sub(h.given_run_shapes),
    ))
}

/// The headline as the PNG says it: what tuning saved, then how it was weighed and the
/// per-shape mean (the HTML page and the terminal have the full sentence).
pub fn headline_lines(h: &Headline) -> (String, String) {
    let first = match h.saved_share {
        Some(s) => format!("TUNING SAVES {:.1}% OF THE GEMM TIME", 100.0 * s),
        None => "NO CALL-WEIGHTED FIGURE: NO MEASURED SHAPE HAS RECORDED CALLS".into(),
    };
    let mut second = Vec::new();
    if let Some(shapes) = weighed(h) {
        let weights = match shapes {
            (0, _) => "CALLS RECORDED BEFORE TUNING".to_string(),
            (_, 0) => "CALLS OF THE GIVEN RUN".to_string(),
            (given, before) => {
                format!("CALLS OF THE GIVEN RUN FOR {given}, RECORDED BEFORE TUNING FOR {before}")
            }
        };
        second.push(format!(
            "SPEEDUP {} OVER {} MEASURED SHAPES, {} CALLS ({weights})",
            h.weighted_speedup
                .map_or("-".into(), |x| format!("{x:.2}X")),
            h.weighted_shapes,
            h.weighted_calls
        ));
    }
    if let Some(g) = h.geomean {
        second.push(format!(
            "PER-SHAPE GEOMEAN {g:.2}X OVER {} TUNED SHAPES",
            h.geomean_shapes
        ));
    }
    (first, second.join("; "))
}

/// The legend: a swatch the size of a map cell per status, then never seen, and how the
/// columns are labelled. Each status swatch adds one cell interior of its colour.
fn legend(c: &mut Canvas, x: usize, y: usize, cw: usize, ch: usize) -> usize {
    let mut yy = y;
    for (rgb, what) in legend_items() {
        c.rect(x, yy, cw - 2, ch - 2, rgb);
        c.text(x + cw + 6, yy + 2, &what, TEXT, INK);
        yy += ch;
    }
    c.text(x, yy + 2, LEGEND_COLUMNS, TEXT, INK);
    yy + ch - y
}

const LEGEND_COLUMNS: &str = "COLUMNS: TOKEN COUNT M (ROCBLAS N), EVERY ONE LABELLED";

fn legend_items() -> Vec<(Rgb, String)> {
    Status::ALL
        .iter()
        .map(|s| (s.rgb(), s.meaning().replace(';', ",").to_uppercase()))
        .chain([(NEVER_RGB, "NEVER SEEN AT THIS M (NO CELL)".to_string())])
        .collect()
}

const LEGEND_ROWS: usize = Status::ALL.len() + 2;

/// The label under the 1.0x line.
pub const ONE_LABEL: &str = "1.0X = HEURISTIC";

/// Where the PNG puts things: the label column's width, the headline, the top of the column
/// labels and of the map, the bars and the 1.0x line's label.
pub struct Layout {
    pub cell: (usize, usize),
    pub label_w: usize,
    /// Top of the headline's two lines.
    pub headline_y: (usize, usize),
    pub labels_y: usize,
    pub labels: Labels,
    pub labels_h: usize,
    pub head: usize,
    pub map_h: usize,
    /// Top of the first bar.
    pub bars_y: usize,
    /// Where the 1.0x line is, and the top-left of its label (none without bars).
    pub one: Option<(usize, (usize, usize))>,
    pub width: usize,
    pub height: usize,
}

const BAR_LEN: usize = 500;

fn bar_max(d: &Data) -> f64 {
    d.bars.iter().map(|b| b.speedup).fold(1.0f64, f64::max) * 1.05
}

pub fn layout(d: &Data) -> Layout {
    let (cw, ch) = png_cell(d.columns.len());
    let label_w = d
        .rows
        .iter()
        .map(|r| Canvas::text_width(&r.label, TEXT))
        .chain(
            d.bars
                .iter()
                .map(|b| Canvas::text_width(&format!("{} M={}", b.label, b.m), TEXT)),
        )
        .max()
        .unwrap_or(0)
        + 16;
    let headline_y = (26, 26 + 5 * BIG + 6);
    let legend_y = headline_y.1 + 5 * TEXT + 12;
    let labels_y = legend_y + LEGEND_ROWS * ch + 6;
    let (labels, labels_h) = labels_of(d, cw);
    let head = labels_y + labels_h + 6;
    let map_h = head + d.rows.len() * ch + 12;
    let bars_y = map_h + 5 * TEXT + 10;
    let one = (!d.bars.is_empty()).then(|| {
        let x = label_w + (BAR_LEN as f64 / bar_max(d)) as usize;
        let y = bars_y + d.bars.len() * ch + 4;
        (
            x,
            (x.saturating_sub(Canvas::text_width(ONE_LABEL, TEXT) / 2), y),
        )
    });
    let (h1, h2) = headline_lines(&d.headline);
    let legend_w = legend_items()
        .iter()
        .map(|(_, t)| Canvas::text_width(t, TEXT) + cw + 6)
        .chain([Canvas::text_width(LEGEND_COLUMNS, TEXT)])
        .max()
        .unwrap_or(0);
    let width = (label_w + d.columns.len() * cw + 20)
        .max(label_w + BAR_LEN + 90)
        .max(legend_w + 24)
        .max(Canvas::text_width(&h1, BIG) + 24)
        .max(Canvas::text_width(&h2, TEXT) + 24);
    let height = if d.bars.is_empty() {
        map_h + 10
    } else {
        bars_y + d.bars.len() * ch + 5 * TEXT + 16
    };
    Layout {
        cell: (cw, ch),
        label_w,
        headline_y,
        labels_y,
        labels,
        labels_h,
        head,
        map_h,
        bars_y,
        one,
        width,
        height,
    }
}

/// The same figures as a PNG: the title and the headline, the legend, the map (each cell's
/// interior in its status colour, 2 px gaps, never-seen positions pale, every column
/// labelled), then the bars, the largest speedup first, with the 1.0x line labelled.
pub fn png(d: &Data) -> Canvas {
    let l = layout(d);
    let (cw, ch) = l.cell;
    let mut c = Canvas::new(l.width, l.height, PAPER);
    let k = &d.counts;
    c.text(
        8,
        8,
        &format!(
            "TUNEDBLAS {} ({} TUNED, {} DEFAULT, {} NEAR, {} MISSED, {} PREDICTED)",
            d.profile, k.tuned, k.default, k.near, k.missed, k.predicted
        ),
        TEXT,
        INK,
    );
    let (h1, h2) = headline_lines(&d.headline);
    c.text(8, l.headline_y.0, &h1, BIG, INK);
    c.text(8, l.headline_y.1, &h2, TEXT, INK);
    legend(&mut c, 8, l.headline_y.1 + 5 * TEXT + 12, cw, ch);
    for (j, m) in d.columns.iter().enumerate() {
        let (x, y) = column_label_at(&l, j);
        match l.labels {
            Labels::Across => c.text(x, y, &m.to_string(), TEXT, INK),
            Labels::Up => {
                c.text_up(x, y, &m.to_string(), TEXT, INK);
                0
            }
        };
    }
    for (i, row) in d.rows.iter().enumerate() {
        let y = l.head + i * ch;
        c.text(8, y + 3, &row.label, TEXT, INK);
        for (j, m) in d.columns.iter().enumerate() {
            let rgb = row
                .cells
                .iter()
                .find(|x| x.m == *m)
                .map_or(NEVER_RGB, |x| x.status.rgb());
            c.rect(l.label_w + j * cw, y, cw - 2, ch - 2, rgb);
        }
    }
    if d.bars.is_empty() {
        return c;
    }
    c.text(
        8,
        l.map_h,
        "SPEEDUP OF EACH TUNED SHAPE OVER THE HEURISTIC, LARGEST FIRST",
        TEXT,
        INK,
    );
    let max = bar_max(d);
    for (i, b) in d.bars.iter().enumerate() {
        let y = l.bars_y + i * ch;
        c.text(8, y + 3, &format!("{} M={}", b.label, b.m), TEXT, INK);
        let w = ((b.speedup / max) * BAR_LEN as f64).max(1.0) as usize;
        c.rect(l.label_w, y, w, ch - 4, BAR_RGB);
        c.text(
            l.label_w + w + 6,
            y + 2,
            &format!("{:.2}X", b.speedup),
            TEXT,
            INK,
        );
    }
    if let Some((x, (lx, ly))) = l.one {
        c.rect(x, l.bars_y - 4, 1, d.bars.len() * ch + 6, RULE);
        c.text(lx, ly, ONE_LABEL, TEXT, INK);
    }
    c
}
