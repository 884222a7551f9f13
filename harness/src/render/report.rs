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
    let uncounted = if h.uncounted_shapes > 0 {
        format!(
            "; {} measured shapes without recorded calls are not in the call-weighted figure",
            h.uncounted_shapes
        )
    } else {
        String::new()
    };
    format!("{weighted}; {per_shape}{uncounted}")
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
    o.push_str("<ol id=\"tune-next\">\n");
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
/// 6 wide (every M keeps its label).
pub fn png_cell(cols: usize) -> (usize, usize) {
    ((1600 / cols.max(1)).clamp(6, 24), 16)
}

/// Draws every token count's label over its column: across where it fits, else its digits
/// stacked downwards. Returns the height the labels take.
fn column_labels(c: &mut Canvas, d: &Data, x0: usize, y0: usize, cw: usize) -> usize {
    let longest = d
        .columns
        .iter()
        .map(|m| m.to_string().len())
        .max()
        .unwrap_or(1);
    if Canvas::text_width(&"0".repeat(longest), 1) + 3 <= cw {
        for (j, m) in d.columns.iter().enumerate() {
            c.text(x0 + j * cw, y0, &m.to_string(), 1, INK);
        }
        return 8;
    }
    for (j, m) in d.columns.iter().enumerate() {
        for (i, ch) in m.to_string().chars().enumerate() {
            c.text(
                x0 + j * cw + (cw - 2).saturating_sub(3) / 2,
                y0 + i * 6,
                &ch.to_string(),
                1,
                INK,
            );
        }
    }
    longest * 6 + 2
}

/// The legend: a swatch the size of a map cell per status, then never seen, and how the
/// columns are labelled. Each status swatch adds one cell interior of its colour.
fn legend(c: &mut Canvas, x: usize, y: usize, cw: usize, ch: usize) -> usize {
    let mut yy = y;
    let items: Vec<(Rgb, &str)> = Status::ALL
        .iter()
        .map(|s| (s.rgb(), s.meaning()))
        .chain([(NEVER_RGB, "never seen at this M (no cell)")])
        .collect();
    for (rgb, what) in items {
        c.rect(x, yy, cw - 2, ch - 2, rgb);
        c.text(
            x + cw + 6,
            yy + 3,
            &what.replace(';', ",").to_uppercase(),
            1,
            INK,
        );
        yy += ch;
    }
    c.text(
        x,
        yy + 3,
        "COLUMNS: TOKEN COUNT M (ROCBLAS N), EVERY ONE LABELLED, DIGITS STACKED WHERE NARROW",
        1,
        INK,
    );
    yy + ch - y
}

const LEGEND_ROWS: usize = Status::ALL.len() + 2;

/// Where the PNG puts things: the label column's width, the top of the column labels and
/// of the map.
pub struct Layout {
    pub cell: (usize, usize),
    pub label_w: usize,
    pub labels_y: usize,
    pub head: usize,
    pub map_h: usize,
    pub width: usize,
    pub height: usize,
}

pub fn layout(d: &Data) -> Layout {
    let (cw, ch) = png_cell(d.columns.len());
    let label_w = d
        .rows
        .iter()
        .map(|r| Canvas::text_width(&r.label, 2))
        .chain(
            d.bars
                .iter()
                .map(|b| Canvas::text_width(&format!("{} M={}", b.label, b.m), 2)),
        )
        .max()
        .unwrap_or(0)
        + 16;
    let longest = d
        .columns
        .iter()
        .map(|m| m.to_string().len())
        .max()
        .unwrap_or(1);
    let labels_y = 30 + LEGEND_ROWS * ch;
    let head = labels_y + longest * 6 + 10;
    let map_h = head + d.rows.len() * ch + 20;
    let legend_w = Canvas::text_width(Status::Near.meaning(), 1) + cw + 30;
    let width = (label_w + d.columns.len() * cw + 20)
        .max(label_w + BAR_LEN + 90)
        .max(legend_w + 16);
    let height = map_h + d.bars.len() * ch + 40;
    Layout {
        cell: (cw, ch),
        label_w,
        labels_y,
        head,
        map_h,
        width,
        height,
    }
}

const BAR_LEN: usize = 500;

/// The same figures as a PNG: the legend, the map (each cell's interior in its status
/// colour, 2 px gaps, never-seen positions pale), then the bars.
pub fn png(d: &Data) -> Canvas {
    let Layout {
        cell: (cw, ch),
        label_w,
        labels_y,
        head,
        map_h,
        width,
        height,
    } = layout(d);
    let bar_len = BAR_LEN;
    let mut c = Canvas::new(width, height, PAPER);
    let k = &d.counts;
    c.text(
        8,
        8,
        &format!(
            "TUNEDBLAS {} ({} TUNED, {} DEFAULT, {} NEAR, {} MISSED, {} PREDICTED)",
            d.profile, k.tuned, k.default, k.near, k.missed, k.predicted
        ),
        2,
        INK,
    );
    legend(&mut c, 8, 28, cw, ch);
    column_labels(&mut c, d, label_w, labels_y, cw);
    for (i, row) in d.rows.iter().enumerate() {
        let y = head + i * ch;
        c.text(8, y + 4, &row.label, 2, INK);
        for (j, m) in d.columns.iter().enumerate() {
            let rgb = row
                .cells
                .iter()
                .find(|x| x.m == *m)
                .map_or(NEVER_RGB, |x| x.status.rgb());
            c.rect(label_w + j * cw, y, cw - 2, ch - 2, rgb);
        }
    }
    let max = d.bars.iter().map(|b| b.speedup).fold(1.0f64, f64::max) * 1.05;
    for (i, b) in d.bars.iter().enumerate() {
        let y = map_h + i * ch;
        c.text(8, y + 4, &format!("{} M={}", b.label, b.m), 2, INK);
        let w = ((b.speedup / max) * bar_len as f64).max(1.0) as usize;
        c.rect(label_w, y, w, ch - 4, BAR_RGB);
        c.text(
            label_w + w + 6,
            y + 2,
            &format!("{:.2}X", b.speedup),
            2,
            INK,
        );
    }
    if !d.bars.is_empty() {
        let one = label_w + (bar_len as f64 / max) as usize;
        c.rect(one, map_h - 4, 1, d.bars.len() * ch + 4, RULE);
    }
    c
}
