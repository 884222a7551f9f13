//! `tunedblas report`: a profile at a glance, as a self-contained HTML page (inline CSS and
//! SVG, no network) and the same figures as a PNG, for terminals and issues.
//!
//! - The coverage map: one row per (N, K) layer shape (rocBLAS m and k, with layout, type
//!   and batch), one column per token count M (rocBLAS n) seen anywhere: in the profile or
//!   among recorded misses (`--misses`). A cell is *tuned* (a rocBLAS solution row, or a
//!   `*` wildcard row that matches), *Default* (the heuristic was best), *near* (no row, but
//!   the interposer would try the same layer's row at the nearest token count within the
//!   `TUNEDBLAS_NEAR` window, validated at run time) or *missing* (nothing).
//! - Speedup bars: per tuned shape, the heuristic's time over the served solution's, from
//!   the latest campaign in `provenance.json` that measured the shape.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::Value;
use tunedblas_core::family::{family_of, instantiate};
use tunedblas_core::key::{Batching, ProblemKey};
use tunedblas_core::near::{self, NearIndex};
use tunedblas_core::profile;
use tunedblas_core::registry::Provenance;
use tunedblas_core::table::Action;
use tunedblas_core::tunableop::{self, KeyParse, Solution};

use crate::error::Error;
use crate::pick::Picked;
use crate::png::{Canvas, Rgb};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Tuned,
    Default,
    Near,
    Missing,
}

impl Status {
    fn class(self) -> &'static str {
        match self {
            Status::Tuned => "tuned",
            Status::Default => "default",
            Status::Near => "near",
            Status::Missing => "missing",
        }
    }
    fn rgb(self) -> Rgb {
        match self {
            Status::Tuned => TUNED_RGB,
            Status::Default => DEFAULT_RGB,
            Status::Near => NEAR_RGB,
            Status::Missing => MISSING_RGB,
        }
    }
}

pub const TUNED_RGB: Rgb = [46, 157, 74];
pub const DEFAULT_RGB: Rgb = [154, 163, 173];
pub const NEAR_RGB: Rgb = [176, 214, 150];
pub const MISSING_RGB: Rgb = [240, 168, 140];
const BAR_RGB: Rgb = [59, 111, 212];
const INK: Rgb = [30, 30, 30];
const PAPER: Rgb = [255, 255, 255];
const RULE: Rgb = [200, 200, 200];

fn hex(c: Rgb) -> String {
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

#[derive(Clone, Debug, Serialize)]
pub struct MapRow {
    pub label: String,
    /// One per column: the status and, for rows, the solution text.
    pub cells: Vec<(Status, Option<String>)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Bar {
    pub label: String,
    pub m: i64,
    pub speedup: f64,
    pub heuristic_ms: f64,
    pub served_ms: f64,
    pub decision: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    pub tuned: usize,
    pub default: usize,
    pub near: usize,
    pub missing: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Data {
    pub profile: String,
    pub sha256: String,
    pub rocblas: Option<String>,
    pub arch: Option<String>,
    pub rank: usize,
    /// Token counts M (rocBLAS n), ascending.
    pub columns: Vec<i64>,
    pub rows: Vec<MapRow>,
    pub counts: Counts,
    pub bars: Vec<Bar>,
    /// The near-serving window the map assumed (0: near serving off).
    pub near_window: i64,
}

/// The (N, K) row a key belongs to: its family, everything but the token count.
fn row_key(k: &ProblemKey) -> ProblemKey {
    family_of(k)
}

/// The near-serving window the interposer would use here (`TUNEDBLAS_NEAR`).
pub fn near_window() -> i64 {
    match std::env::var("TUNEDBLAS_NEAR")
        .ok()
        .filter(|v| !v.is_empty())
        .as_deref()
    {
        None => near::DEFAULT_WINDOW,
        Some("off" | "no" | "false") => 0,
        Some(v) => v.parse::<i64>().map_or(near::DEFAULT_WINDOW, |w| w.max(0)),
    }
}

fn row_label(k: &ProblemKey) -> String {
    let mut s = format!(
        "{}{} {} N={} K={}",
        k.trans_a.letter(),
        k.trans_b.letter(),
        tunableop::short_type_name(k.types.a),
        k.m,
        k.k
    );
    if k.types.compute != k.types.a && k.types.compute != tunedblas_core::abi::DT_F32_R {
        s.push_str(&format!(
            " c{}",
            tunableop::short_type_name(k.types.compute)
        ));
    }
    if k.types.compute == k.types.a && k.types.a == tunedblas_core::abi::DT_F16_R {
        s.push_str(" f16acc");
    }
    match k.batching {
        Batching::Single => {}
        Batching::Strided => s.push_str(&format!(" B={}", k.batch)),
        Batching::PointerArray => s.push_str(&format!(" ptrB={}", k.batch)),
    }
    if k.flags != 0 {
        s.push_str(&format!(" fl{:#x}", k.flags));
    }
    s
}

/// Builds the figures from the profile's rank file, its provenance and extra missed keys;
/// `window` is the near-serving window (0: none).
pub fn build(p: &Picked, rank: usize, missed: &[ProblemKey], window: i64) -> Result<Data, Error> {
    let path = p.rank_file(rank)?;
    let file = tunableop::read(path)
        .map_err(|e| Error::failed(format!("cannot read {}: {e}", path.display())))?;
    let mut columns = BTreeSet::new();
    let mut grid: BTreeMap<ProblemKey, BTreeMap<i64, Solution>> = BTreeMap::new();
    for r in &file.rows {
        columns.insert(r.key.n);
        grid.entry(row_key(&r.key))
            .or_default()
            .insert(r.key.n, r.solution.clone());
    }
    for k in missed {
        columns.insert(k.n);
        grid.entry(row_key(k)).or_default();
    }
    let columns: Vec<i64> = columns.into_iter().collect();
    // What the interposer would do for a key without a row: a matching `*` row, or the
    // nearest row of the layer.
    let loaded = profile::load_tables(&p.dir);
    let table = loaded.table_for(rank as i32);
    let index = table.map(NearIndex::new);
    let fallback = |family: &ProblemKey, m: i64| -> Option<(Status, String)> {
        let key = instantiate(family, m)?;
        if let Some(e) = table.and_then(|t| t.get_wildcard(&key)) {
            return Some(match e.action {
                Action::Solution(id) => {
                    (Status::Tuned, format!("Gemm_Rocblas_{id} (wildcard row)"))
                }
                Action::Default => (Status::Default, "Default (wildcard row)".into()),
            });
        }
        let (near_m, action) = index.as_ref()?.nearest(&key, window)?;
        let what = match action {
            Action::Solution(id) => format!("Gemm_Rocblas_{id}"),
            Action::Default => "Default".into(),
        };
        Some((
            Status::Near,
            format!("near: the M={near_m} row ({what}), if it validates"),
        ))
    };
    let mut counts = Counts::default();
    let rows: Vec<MapRow> = grid
        .iter()
        .map(|(rk, cells)| MapRow {
            label: row_label(rk),
            cells: columns
                .iter()
                .map(|m| {
                    let (status, text) = match cells.get(m) {
                        Some(s @ Solution::Rocblas(_)) => (Status::Tuned, Some(s.to_string())),
                        Some(s) => (Status::Default, Some(s.to_string())),
                        None => match fallback(rk, *m) {
                            Some((st, t)) => (st, Some(t)),
                            None => (Status::Missing, None),
                        },
                    };
                    match status {
                        Status::Tuned => counts.tuned += 1,
                        Status::Default => counts.default += 1,
                        Status::Near => counts.near += 1,
                        Status::Missing => counts.missing += 1,
                    }
                    (status, text)
                })
                .collect(),
        })
        .collect();

    // Latest measurement of each shape.
    let mut measured: HashMap<ProblemKey, Value> = HashMap::new();
    if let Ok(prov) = Provenance::load(&p.dir.join("provenance.json")) {
        for c in prov.campaigns() {
            for s in c
                .get("shapes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some((op, sig)) = s
                    .get("shape")
                    .and_then(Value::as_str)
                    .and_then(|t| t.split_once(','))
                else {
                    continue;
                };
                if let KeyParse::Key(k) = tunableop::parse_key(op, sig) {
                    measured.insert(k, s.clone());
                }
            }
        }
    }
    let mut bars = Vec::new();
    let mut keys: Vec<&tunableop::Row> = file.rows.iter().collect();
    keys.sort_by_key(|r| (row_key(&r.key), r.key.n));
    for r in keys {
        let (Solution::Rocblas(_), Some(s)) = (&r.solution, measured.get(&r.key)) else {
            continue;
        };
        let num = |f: &str| {
            s.get(f)
                .and_then(Value::as_f64)
                .filter(|v| v.is_finite() && *v > 0.0)
        };
        let decision = s
            .get("decision")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let served = if decision == "adopt" {
            num("new_ms")
        } else {
            num("current_ms")
        };
        if let (Some(h), Some(served)) = (num("heuristic_ms"), served) {
            bars.push(Bar {
                label: row_label(&row_key(&r.key)),
                m: r.key.n,
                speedup: h / served,
                heuristic_ms: h,
                served_ms: served,
                decision,
            });
        }
    }
    Ok(Data {
        profile: p.name.clone(),
        sha256: p.sha256.clone(),
        rocblas: p.rocblas.clone(),
        arch: p.arch.clone(),
        rank,
        columns,
        rows,
        counts,
        bars,
        near_window: window,
    })
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Geometric mean of the bars' speedups.
pub fn geomean(bars: &[Bar]) -> Option<f64> {
    (!bars.is_empty())
        .then(|| (bars.iter().map(|b| b.speedup.ln()).sum::<f64>() / bars.len() as f64).exp())
}

const CELL: usize = 18;
const LABEL_W: usize = 230;
const HEAD_H: usize = 60;

pub fn html(d: &Data) -> String {
    let cols = d.columns.len();
    let map_w = LABEL_W + cols * CELL + 10;
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
        for (j, (status, sol)) in row.cells.iter().enumerate() {
            let x = LABEL_W + j * CELL;
            svg.push_str(&format!(
                "<rect class=\"cell {}\" x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" data-m=\"{}\"><title>{} M={}: {}</title></rect>\n",
                status.class(),
                CELL - 2,
                CELL - 2,
                d.columns[j],
                esc(&row.label),
                d.columns[j],
                esc(sol.as_deref().unwrap_or("no row"))
            ));
        }
    }
    svg.push_str("</svg>");

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
    let bars_section = if d.bars.is_empty() {
        "<p>No campaign in provenance.json measured a tuned row of this profile.</p>".to_string()
    } else {
        bars
    };
    let gm = geomean(&d.bars).map_or("-".into(), |g| format!("{g:.2}x"));
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
rect.tuned {{ fill: {tuned}; }} rect.default {{ fill: {default}; }} rect.near {{ fill: {near}; }} rect.missing {{ fill: {missing}; }}
rect.bar {{ fill: {bar}; }} line.one {{ stroke: #1e1e1e; stroke-dasharray: 3 3; }}
.counts b {{ font-size: 16px; }}
pre#rendered {{ color: #888; font-size: 11px; }}
</style></head>
<body>
<h1>tunedblas profile <code>{name}</code></h1>
<div class="meta">rocBLAS {rocblas} &middot; arch {arch} &middot; build <code>{sha}</code> &middot; rank {rank}</div>
<p class="counts"><b id="n-tuned">{nt}</b> tuned &middot; <b id="n-default">{nd}</b> Default &middot; <b id="n-near">{nn}</b> near &middot; <b id="n-missing">{nm}</b> missing, over {rows} (N, K) rows and {cols} token counts M.
Speedup over the heuristic: geometric mean <b id="geomean">{gm}</b> across {nb} measured shapes.</p>
<h2>Coverage</h2>
<div class="legend"><span style="background:{tuned}"></span>tuned (a rocBLAS solution row)<span style="background:{default}"></span>Default (the heuristic was best)<span style="background:{near}"></span>near (no row; the nearest row of the layer within {window} tokens is tried)<span style="background:{missing}"></span>missing (no row)</div>
{svg}
<h2>Speedup per tuned shape</h2>
{bars_section}
<pre id="rendered"></pre>
<script>
(function () {{
  var n = function (s) {{ return document.querySelectorAll(s).length; }};
  var r = document.getElementById("map").getBoundingClientRect();
  document.getElementById("rendered").textContent = JSON.stringify({{
    tuned: n("#map rect.tuned"), "default": n("#map rect.default"), near: n("#map rect.near"), missing: n("#map rect.missing"),
    bars: n("#bars rect.bar"), mapWidth: Math.round(r.width), mapHeight: Math.round(r.height)
  }});
}})();
</script>
</body></html>
"##,
        name = esc(&d.profile),
        rocblas = esc(d.rocblas.as_deref().unwrap_or("unknown")),
        arch = esc(d.arch.as_deref().unwrap_or("unknown")),
        sha = esc(&d.sha256),
        rank = d.rank,
        nt = d.counts.tuned,
        nd = d.counts.default,
        nn = d.counts.near,
        nm = d.counts.missing,
        window = d.near_window,
        rows = d.rows.len(),
        cols = cols,
        nb = d.bars.len(),
        tuned = hex(TUNED_RGB),
        default = hex(DEFAULT_RGB),
        near = hex(NEAR_RGB),
        missing = hex(MISSING_RGB),
        bar = hex(BAR_RGB),
    )
}

/// Cell size of the PNG map: at most 24x16, narrower for many token counts.
pub fn png_cell(cols: usize) -> (usize, usize) {
    ((1600 / cols.max(1)).clamp(4, 24), 16)
}

/// The same figures as a PNG: the map (each cell's interior in its status colour, 2 px
/// gaps), then the bars.
pub fn png(d: &Data) -> Canvas {
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
    let head = 40;
    let map_h = head + d.rows.len() * ch + 20;
    let bar_len = 500;
    let width = (label_w + d.columns.len() * cw + 20).max(label_w + bar_len + 90);
    let height = map_h + d.bars.len() * ch + 40;
    let mut c = Canvas::new(width, height, PAPER);
    c.text(
        8,
        8,
        &format!(
            "TUNEDBLAS {} ({} TUNED, {} DEFAULT, {} NEAR, {} MISSING)",
            d.profile, d.counts.tuned, d.counts.default, d.counts.near, d.counts.missing
        ),
        2,
        INK,
    );
    // Column labels where they fit.
    let every = (Canvas::text_width("00000", 1) / cw).max(1) + 1;
    for (j, m) in d.columns.iter().enumerate() {
        if j % every == 0 {
            c.text(label_w + j * cw, head - 10, &m.to_string(), 1, INK);
        }
    }
    for (i, row) in d.rows.iter().enumerate() {
        let y = head + i * ch;
        c.text(8, y + 4, &row.label, 2, INK);
        for (j, (status, _)) in row.cells.iter().enumerate() {
            c.rect(label_w + j * cw, y, cw - 2, ch - 2, status.rgb());
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

#[cfg(test)]
mod tests {
    use super::*;
    use tunedblas_core::key::Types;

    fn key(n_out: i64, tokens: i64, k: i64) -> ProblemKey {
        ProblemKey::linear(Types::HALF, n_out, tokens, k)
    }

    fn data() -> Data {
        data_with(0)
    }

    fn data_with(window: i64) -> Data {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tunedblas-report-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::from("Validator,ROCBLAS_VERSION,4.4.0\n");
        for (k, sol) in [
            (key(64, 8, 32), "Gemm_Rocblas_3"),
            (key(64, 16, 32), "Default"),
            (key(128, 8, 64), "Gemm_Rocblas_5"),
            (key(128, 32, 64), "Gemm_Rocblas_2"),
        ] {
            let (op, sig) = tunableop::op_and_signature(&k);
            text.push_str(&format!("{op},{sig},{sol},0.1\n"));
        }
        std::fs::write(dir.join("tunableop_results0.csv"), text).unwrap();
        let shape = |k: &ProblemKey| {
            let (op, sig) = tunableop::op_and_signature(k);
            format!("{op},{sig}")
        };
        let prov = serde_json::json!({"campaigns": [{"shapes": [
            {"shape": shape(&key(64, 8, 32)), "decision": "adopt", "heuristic_ms": 2.0, "new_ms": 1.0},
            {"shape": shape(&key(128, 8, 64)), "decision": "keep", "heuristic_ms": 1.5, "current_ms": 1.0, "new_ms": 0.9},
        ]}]});
        std::fs::write(dir.join("provenance.json"), prov.to_string()).unwrap();
        let p = Picked {
            name: "test".into(),
            dir: dir.clone(),
            sha256: "ab".repeat(32),
            rocblas: Some("4.4.0".into()),
            arch: None,
            ranks: vec![(0, dir.join("tunableop_results0.csv"))],
        };
        build(&p, 0, &[key(64, 99, 32), key(256, 8, 8)], window).unwrap()
    }

    #[test]
    fn the_map_and_bars_follow_the_profile() {
        let d = data();
        assert_eq!(d.columns, vec![8, 16, 32, 99]);
        assert_eq!(d.rows.len(), 3, "two profile layers and one only missed");
        assert_eq!(
            (d.counts.tuned, d.counts.default, d.counts.missing),
            (3, 1, 8)
        );
        let first: Vec<Status> = d.rows[0].cells.iter().map(|c| c.0).collect();
        assert_eq!(
            first,
            [
                Status::Tuned,
                Status::Default,
                Status::Missing,
                Status::Missing
            ]
        );
        assert_eq!(d.bars.len(), 2, "Gemm_Rocblas_2 was never measured");
        assert_eq!(d.bars[0].speedup, 2.0);
        assert_eq!(d.bars[1].speedup, 1.5, "kept: served by the current row");
        let page = html(&d);
        assert_eq!(page.matches("class=\"cell tuned\"").count(), 3);
        assert_eq!(page.matches("class=\"cell missing\"").count(), 8);
        assert_eq!(page.matches("class=\"bar\"").count(), 2);
        for remote in ["src=", "href=", "url(", "@import"] {
            assert!(!page.contains(remote), "self-contained: no {remote}");
        }
        assert!(page.contains("<b id=\"geomean\">1.73x</b>"), "sqrt(2*1.5)");
    }

    #[test]
    fn near_cells_are_the_missing_ones_within_the_window_of_a_row() {
        // Layer 64x32 has rows at M=8 and 16: M=32 is 16 away, M=99 83 away. Layer
        // 128x64 has rows at 8 and 32: M=16 is 8 away, M=99 67. Layer 256x8 has none.
        let d = data_with(20);
        let first: Vec<Status> = d.rows[0].cells.iter().map(|c| c.0).collect();
        assert_eq!(
            first,
            [
                Status::Tuned,
                Status::Default,
                Status::Near,
                Status::Missing
            ]
        );
        let second: Vec<Status> = d.rows[1].cells.iter().map(|c| c.0).collect();
        assert_eq!(
            second,
            [Status::Tuned, Status::Near, Status::Tuned, Status::Missing]
        );
        assert_eq!((d.counts.near, d.counts.missing), (2, 6));
        assert!(
            d.rows[0].cells[2].1.as_deref().unwrap().contains("M=16"),
            "{:?}",
            d.rows[0]
        );
        let page = html(&d);
        assert_eq!(page.matches("class=\"cell near\"").count(), 2);
    }

    #[test]
    fn the_png_has_one_cell_interior_per_status_cell() {
        let d = data();
        let canvas = png(&d);
        let (w, h, px) = crate::png::tests::decode(&canvas.png());
        assert_eq!((w, h), (canvas.width, canvas.height));
        let (cw, ch) = png_cell(d.columns.len());
        let count = |rgb: Rgb| px.chunks(3).filter(|p| *p == rgb).count();
        assert_eq!(count(TUNED_RGB), 3 * (cw - 2) * (ch - 2));
        assert_eq!(count(DEFAULT_RGB), (cw - 2) * (ch - 2));
        assert_eq!(count(MISSING_RGB), 8 * (cw - 2) * (ch - 2));
    }
}
