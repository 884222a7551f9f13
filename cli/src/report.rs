//! `tunedblas report`'s figures (the command's help says what each shows; `render::report`
//! draws them). The map has a cell only where a layer was seen at a token count, never a
//! cross product of every layer with every M, and a cell is *near* by the interposer's own
//! rule ([`NearIndex::servable`]), so the page says what the interposer would do.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::Value;
use tunedblas_core::family::{family_of, instantiate};
use tunedblas_core::key::{Batching, ProblemKey};
use tunedblas_core::near::{self, NearChoice, NearIndex};
use tunedblas_core::profile;
use tunedblas_core::registry::Provenance;
use tunedblas_core::table::Action;
use tunedblas_core::tunableop::{self, KeyParse, Solution};

use crate::error::Error;
use crate::pick::Picked;
use crate::png::Rgb;
pub use crate::render::report::{headline_text, html, png, png_cell};
use tunedblas_tuner::checkpoint::shell_word;

/// What a cell shows. A (layer, M) pair with no cell was never seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Tuned,
    Default,
    Near,
    Missed,
    Predicted,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Tuned,
        Status::Default,
        Status::Near,
        Status::Missed,
        Status::Predicted,
    ];
    pub fn class(self) -> &'static str {
        match self {
            Status::Tuned => "tuned",
            Status::Default => "default",
            Status::Near => "near",
            Status::Missed => "missed",
            Status::Predicted => "predicted",
        }
    }
    pub fn rgb(self) -> Rgb {
        match self {
            Status::Tuned => TUNED_RGB,
            Status::Default => DEFAULT_RGB,
            Status::Near => NEAR_RGB,
            Status::Missed => MISSED_RGB,
            Status::Predicted => PREDICTED_RGB,
        }
    }
    /// What the colour means, for legends.
    pub fn meaning(self) -> &'static str {
        match self {
            Status::Tuned => "tuned: a rocBLAS solution row",
            Status::Default => "Default: the heuristic was best",
            Status::Near => {
                "near: no row; the interposer tries a nearby row of the layer once it validates"
            }
            Status::Missed => "missed in production: no row, the heuristic serves it",
            Status::Predicted => "predicted by coverage: no row, not seen in production",
        }
    }
}

pub const TUNED_RGB: Rgb = [46, 157, 74];
pub const DEFAULT_RGB: Rgb = [154, 163, 173];
pub const NEAR_RGB: Rgb = [176, 214, 150];
pub const MISSED_RGB: Rgb = [240, 168, 140];
pub const PREDICTED_RGB: Rgb = [246, 214, 120];
pub const NEVER_RGB: Rgb = [242, 242, 242];
pub(crate) const BAR_RGB: Rgb = [59, 111, 212];
pub(crate) const INK: Rgb = [30, 30, 30];
pub(crate) const PAPER: Rgb = [255, 255, 255];
pub(crate) const RULE: Rgb = [200, 200, 200];

pub(crate) fn hex(c: Rgb) -> String {
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

/// One seen (layer, M) pair.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub m: i64,
    pub status: Status,
    /// Seen in production: in the miss logs.
    pub missed: bool,
    /// Issued by the serving configuration (`--coverage`).
    pub predicted: bool,
    /// Calls the miss logs recorded (0: none recorded).
    pub calls: u64,
    /// The row, or why there is none and what the interposer does instead.
    pub text: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct MapRow {
    pub label: String,
    /// The seen token counts, ascending; a column without a cell was never seen here.
    pub cells: Vec<Cell>,
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
    pub missed: usize,
    pub predicted: usize,
    /// (layer, M) positions of the map with no cell.
    pub never_seen: usize,
}

/// What the report says the interposer does on the recorded workload, in the terms of its
/// `TUNEDBLAS_STATS` counters (checked against them by tests/report_claims.rs).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Claims {
    /// Rows of the rank file (`rows`).
    pub rows: usize,
    /// Missed shapes without a row of their own that near serving does not take
    /// (`missed_shapes`: the interposer counts shapes served near apart).
    pub missed_shapes: usize,
    /// Shapes without a row that near serving takes (`near_keys_served`).
    pub near_keys: usize,
    /// Their recorded calls (`near`).
    pub near_calls: u64,
    /// Recorded calls of the missed shapes the heuristic serves (`missed_calls`).
    pub missed_calls: u64,
}

/// A measured shape whose measurement decided nothing, or not cleanly.
#[derive(Clone, Debug, Serialize)]
pub struct Doubt {
    pub label: String,
    pub m: i64,
    pub decision: String,
    pub spread: Option<f64>,
    pub reason: String,
}

/// The headline: per-shape and call-weighted figures, and what each counts.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Headline {
    /// Geometric mean of the per-shape speedups of tuned rows ([`Data::bars`]).
    pub geomean: Option<f64>,
    pub geomean_shapes: usize,
    /// Sum over measured shapes with recorded calls of calls x heuristic time.
    pub heuristic_ms: f64,
    /// Sum over the same shapes of calls x (heuristic - served) time.
    pub saved_ms: f64,
    /// `saved_ms / heuristic_ms`: the share of those shapes' GEMM time tuning saved.
    pub saved_share: Option<f64>,
    /// `heuristic_ms / (heuristic_ms - saved_ms)`: the same as a speedup, comparable with
    /// an end-to-end measurement of the GEMMs of those shapes.
    pub weighted_speedup: Option<f64>,
    pub weighted_shapes: usize,
    pub weighted_calls: u64,
    /// Of those, the shapes weighted by the calls the given run (`--misses`: a served run's
    /// miss logs or rocBLAS logs) counted; the others by the calls recorded before tuning
    /// (`provenance.json`).
    pub given_run_shapes: usize,
    /// Measured shapes without recorded calls (not in the call-weighted figure).
    pub uncounted_shapes: usize,
    /// Undecidable, noisy (spread over the noisy limit), rejected or failed shapes.
    pub doubts: Vec<Doubt>,
}

/// One entry of "tune next".
#[derive(Clone, Debug, Serialize)]
pub struct Next {
    pub label: String,
    pub m: i64,
    pub status: Status,
    pub calls: u64,
    pub flops: f64,
    /// `--shape` spec, where the problem has one (packed layout).
    pub spec: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct TuneNext {
    /// Ranked: recorded calls x FLOPs, then FLOPs (predicted shapes have no calls).
    pub items: Vec<Next>,
    /// Tunes the top items (the ones with a spec).
    pub command: Option<String>,
    /// Tunes every recorded miss.
    pub all_missed: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Data {
    pub profile: String,
    pub sha256: String,
    pub rocblas: Option<String>,
    pub arch: Option<String>,
    pub rank: usize,
    /// Token counts M (rocBLAS n) some layer has a cell at, ascending.
    pub columns: Vec<i64>,
    pub rows: Vec<MapRow>,
    pub counts: Counts,
    pub claims: Claims,
    pub bars: Vec<Bar>,
    pub headline: Headline,
    pub tune_next: TuneNext,
    /// The near-serving window the map assumed (0: near serving off).
    pub near_window: i64,
}

/// What was seen beyond the profile: misses with their calls, predicted problems, and
/// where they came from (for the tune command).
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub missed: Vec<(ProblemKey, u64)>,
    pub predicted: Vec<ProblemKey>,
    pub miss_inputs: Vec<String>,
    /// The `--lib` argument of the tune command (a placeholder when not known).
    pub lib: String,
    /// The `--profiles` the report read, as given: the tune commands write there too.
    pub profiles: Option<String>,
}

/// The near-serving window the interposer would use here (`TUNEDBLAS_NEAR`), read by the
/// interposer's own rule (a value it refuses leaves the default, as it does there).
pub fn near_window() -> i64 {
    let value = std::env::var("TUNEDBLAS_NEAR")
        .ok()
        .filter(|v| !v.is_empty());
    tunedblas_core::settings::near_window(value.as_deref(), near::DEFAULT_WINDOW).0
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

/// How a `--shape` spec reads beside the report's labels: `tune --shape` takes rocBLAS's
/// m, n, k, so the label's N comes first and the token count M second.
pub const SPEC_ORDER: &str =
    "--shape is TYPE:AB:m:n:k in rocBLAS's order, as `tunedblas tune` takes it: m = N, n = the token count M, k = K";

/// The `--shape` spec of a key, where one names exactly it.
pub fn spec_of(k: &ProblemKey) -> Option<String> {
    let ab = format!("{}{}", k.trans_a.letter(), k.trans_b.letter());
    let batch = match k.batching {
        Batching::Single => String::new(),
        Batching::Strided => format!(":{}", k.batch),
        Batching::PointerArray => return None,
    };
    ["f16", "bf16", "f32", "f64"].iter().find_map(|t| {
        let spec = format!("{t}:{ab}:{}:{}:{}{batch}", k.m, k.n, k.k);
        (crate::shapes::parse_spec(&spec).ok().as_ref() == Some(k)).then_some(spec)
    })
}

/// What the interposer does with a seen key that has no exact row: a matching `*` row, the
/// near rule's choice, or the heuristic (with why).
fn without_row(
    table: Option<&tunedblas_core::table::Table>,
    index: Option<&NearIndex>,
    key: &ProblemKey,
    window: i64,
    missed: bool,
) -> (Status, String) {
    if let Some(e) = table.and_then(|t| t.get_wildcard(key)) {
        return match e.action {
            Action::Solution(id) => (Status::Tuned, format!("Gemm_Rocblas_{id} (a * row)")),
            Action::Default => (Status::Default, "Default (a * row)".into()),
        };
    }
    let choice = match (table, index) {
        (Some(t), Some(ix)) => ix.servable(t, key, window),
        _ => NearChoice::Nothing,
    };
    let why = match choice {
        NearChoice::Try(from, id) => {
            return (
                Status::Near,
                format!(
                    "near: the M={from} row's Gemm_Rocblas_{id}, served once rocBLAS validates it for this exact problem (checked at run time, which this report cannot do; where it fails the heuristic serves and the calls count as missed)"
                ),
            )
        }
        NearChoice::DefaultRow(from) => {
            format!("no row; the nearest row of the layer (M={from}) says Default, so the heuristic serves it")
        }
        NearChoice::Quarantined(from) => {
            format!("no row; the nearest row of the layer (M={from}) is quarantined")
        }
        NearChoice::Nothing if window <= 0 => "no row; near serving is off".into(),
        NearChoice::Nothing => format!("no row of the layer within {window} tokens"),
    };
    let status = if missed {
        Status::Missed
    } else {
        Status::Predicted
    };
    (status, why)
}

/// Per layer and token count: (row, missed calls, missed, predicted).
type Sighting = (Option<Solution>, u64, bool, bool);

/// Builds the figures from the profile's rank file, its provenance and what was seen;
/// `window` is the near-serving window (0: none).
pub fn build(p: &Picked, rank: usize, seen: &Seen, window: i64) -> Result<Data, Error> {
    let path = p.rank_file(rank)?;
    let file = crate::export::read(path)?;
    let mut grid: BTreeMap<ProblemKey, BTreeMap<i64, Sighting>> = BTreeMap::new();
    fn at<'g>(
        grid: &'g mut BTreeMap<ProblemKey, BTreeMap<i64, Sighting>>,
        k: &ProblemKey,
    ) -> &'g mut Sighting {
        grid.entry(family_of(k))
            .or_default()
            .entry(k.n)
            .or_insert((None, 0, false, false))
    }
    for r in &file.rows {
        at(&mut grid, &r.key).0 = Some(r.solution.clone());
    }
    for (k, calls) in &seen.missed {
        let s = at(&mut grid, k);
        s.1 = s.1.saturating_add(*calls);
        s.2 = true;
    }
    for k in &seen.predicted {
        at(&mut grid, k).3 = true;
    }
    let loaded = profile::load_tables(&p.dir);
    let table = loaded.table_for(rank as i32);
    let index = table.map(NearIndex::new);
    let mut counts = Counts::default();
    let mut claims = Claims {
        rows: file.rows.len(),
        ..Claims::default()
    };
    let mut rows = Vec::new();
    for (family, cells) in &grid {
        let mut out = Vec::new();
        for (&m, (row, calls, missed, predicted)) in cells {
            let (status, text) = match row {
                Some(s @ Solution::Rocblas(_)) => (Status::Tuned, s.to_string()),
                Some(s) => (Status::Default, s.to_string()),
                None => match instantiate(family, m) {
                    Some(key) => without_row(table, index.as_ref(), &key, window, *missed),
                    None => (Status::Missed, "no row".into()),
                },
            };
            match status {
                Status::Tuned => counts.tuned += 1,
                Status::Default => counts.default += 1,
                Status::Near => counts.near += 1,
                Status::Missed => counts.missed += 1,
                Status::Predicted => counts.predicted += 1,
            }
            if *missed && status == Status::Near {
                claims.near_keys += 1;
                claims.near_calls = claims.near_calls.saturating_add(*calls);
            } else if *missed && status == Status::Missed {
                claims.missed_shapes += 1;
                claims.missed_calls = claims.missed_calls.saturating_add(*calls);
            }
            out.push(Cell {
                m,
                status,
                missed: *missed,
                predicted: *predicted,
                calls: *calls,
                text,
            });
        }
        rows.push(MapRow {
            label: row_label(family),
            cells: out,
        });
    }
    let columns: Vec<i64> = grid
        .values()
        .flat_map(|c| c.keys().copied())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    counts.never_seen =
        rows.len() * columns.len() - rows.iter().map(|r| r.cells.len()).sum::<usize>();
    let measured = measurements(p);
    let bars = bars(&file.rows, &measured);
    let mut given_calls: HashMap<ProblemKey, u64> = HashMap::new();
    for (k, calls) in &seen.missed {
        let c = given_calls.entry(*k).or_default();
        *c = c.saturating_add(*calls);
    }
    let headline = headline(&bars, &measured, &given_calls);
    let tune_next = tune_next(&grid_keys(&rows, &grid), seen);
    Ok(Data {
        profile: p.name.clone(),
        sha256: p.sha256.clone(),
        rocblas: p.rocblas.clone(),
        arch: p.arch.clone(),
        rank,
        columns,
        rows,
        counts,
        claims,
        bars,
        headline,
        tune_next,
        near_window: window,
    })
}

/// The cells worth tuning (missed, near, predicted), with their keys and labels.
fn grid_keys<T>(
    rows: &[MapRow],
    grid: &BTreeMap<ProblemKey, T>,
) -> Vec<(ProblemKey, String, Cell)> {
    grid.keys()
        .zip(rows)
        .flat_map(|(family, row)| {
            row.cells.iter().filter_map(move |c| {
                let todo = matches!(c.status, Status::Missed | Status::Near | Status::Predicted);
                let key = instantiate(family, c.m)?;
                todo.then(|| (key, row.label.clone(), c.clone()))
            })
        })
        .collect()
}

/// A shape as the latest campaign in provenance.json measured it.
#[derive(Clone, Debug)]
struct Measured {
    decision: String,
    reason: String,
    calls: u64,
    heuristic_ms: Option<f64>,
    current_ms: Option<f64>,
    new_ms: Option<f64>,
    spread: Option<f64>,
}

impl Measured {
    /// The time of what the profile serves now, per the decision.
    fn served_ms(&self) -> Option<f64> {
        match self.decision.as_str() {
            "adopt" => self.new_ms,
            "keep" | "undecidable" => self.current_ms.or(self.heuristic_ms),
            "default" | "drop" => self.heuristic_ms,
            _ => None,
        }
    }
}

fn measurements(p: &Picked) -> HashMap<ProblemKey, Measured> {
    let mut measured = HashMap::new();
    let Ok(prov) = Provenance::load(&p.dir.join("provenance.json")) else {
        return measured;
    };
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
            let KeyParse::Key(k) = tunableop::parse_key(op, sig) else {
                continue;
            };
            let num = |f: &str| {
                s.get(f)
                    .and_then(Value::as_f64)
                    .filter(|v| v.is_finite() && *v > 0.0)
            };
            let word = |f: &str| s.get(f).and_then(Value::as_str).unwrap_or("").to_string();
            measured.insert(
                k,
                Measured {
                    decision: word("decision"),
                    reason: word("reason"),
                    calls: s.get("calls").and_then(Value::as_u64).unwrap_or(0),
                    heuristic_ms: num("heuristic_ms"),
                    current_ms: num("current_ms"),
                    new_ms: num("new_ms"),
                    spread: s.get("spread").and_then(Value::as_f64),
                },
            );
        }
    }
    measured
}

/// A speedup bar per tuned row that a campaign measured, the largest speedup first.
fn bars(rows: &[tunableop::Row], measured: &HashMap<ProblemKey, Measured>) -> Vec<Bar> {
    let mut keys: Vec<&tunableop::Row> = rows.iter().collect();
    keys.sort_by_key(|r| (family_of(&r.key), r.key.n));
    let mut bars: Vec<Bar> = keys
        .into_iter()
        .filter_map(|r| {
            let (Solution::Rocblas(_), Some(s)) = (&r.solution, measured.get(&r.key)) else {
                return None;
            };
            let (h, served) = (s.heuristic_ms?, s.served_ms()?);
            Some(Bar {
                label: row_label(&family_of(&r.key)),
                m: r.key.n,
                speedup: h / served,
                heuristic_ms: h,
                served_ms: served,
                decision: s.decision.clone(),
            })
        })
        .collect();
    // Stable: equal speedups keep the layer order.
    bars.sort_by(|a, b| b.speedup.total_cmp(&a.speedup));
    bars
}

/// The spread above which a measurement is too noisy to trust (the campaign's default).
fn noisy_limit() -> f64 {
    crate::curate::Rules::default().noisy
}

/// The headline: each measured shape weighted by the calls the given run counted where it
/// counted the shape (`given`: what `--misses` recorded, e.g. a served run's rocBLAS log),
/// else by the calls recorded before tuning (`provenance.json`).
fn headline(
    bars: &[Bar],
    measured: &HashMap<ProblemKey, Measured>,
    given: &HashMap<ProblemKey, u64>,
) -> Headline {
    let mut h = Headline {
        geomean: geomean(bars),
        geomean_shapes: bars.len(),
        ..Headline::default()
    };
    let mut keys: Vec<(&ProblemKey, &Measured)> = measured.iter().collect();
    keys.sort_by_key(|(k, _)| (family_of(k), k.n));
    for (k, s) in keys {
        let noisy = s.spread.is_some_and(|x| x > noisy_limit());
        if noisy || matches!(s.decision.as_str(), "undecidable" | "rejected" | "failed") {
            h.doubts.push(Doubt {
                label: row_label(&family_of(k)),
                m: k.n,
                decision: if noisy && s.decision != "undecidable" {
                    format!("{} (noisy)", s.decision)
                } else {
                    s.decision.clone()
                },
                spread: s.spread,
                reason: s.reason.clone(),
            });
        }
        let (Some(heur), Some(served)) = (s.heuristic_ms, s.served_ms()) else {
            continue;
        };
        let calls = match given.get(k) {
            Some(&c) if c > 0 => {
                h.given_run_shapes += 1;
                c
            }
            _ => s.calls,
        };
        if calls == 0 {
            h.uncounted_shapes += 1;
            continue;
        }
        h.weighted_shapes += 1;
        h.weighted_calls = h.weighted_calls.saturating_add(calls);
        h.heuristic_ms += calls as f64 * heur;
        h.saved_ms += calls as f64 * (heur - served);
    }
    h.saved_share = (h.heuristic_ms > 0.0).then(|| h.saved_ms / h.heuristic_ms);
    let served = h.heuristic_ms - h.saved_ms;
    h.weighted_speedup = (h.heuristic_ms > 0.0 && served > 0.0).then(|| h.heuristic_ms / served);
    h
}

/// How many entries "tune next" lists and its command names.
const TOP: usize = 10;

fn tune_next(todo: &[(ProblemKey, String, Cell)], seen: &Seen) -> TuneNext {
    let mut items: Vec<Next> = todo
        .iter()
        .map(|(k, label, c)| Next {
            label: label.clone(),
            m: c.m,
            status: c.status,
            calls: c.calls,
            flops: k.flops(),
            spec: spec_of(k),
        })
        .collect();
    items.sort_by(|a, b| {
        let w = |n: &Next| n.calls as f64 * n.flops;
        w(b).total_cmp(&w(a))
            .then(b.flops.total_cmp(&a.flops))
            .then((&a.label, a.m).cmp(&(&b.label, b.m)))
    });
    items.truncate(TOP);
    // `tune` as the report was asked: the same library and store, so the rows land in the
    // profile this report shows.
    let mut tune = String::from("tunedblas tune --lib ");
    tune.push_str(&if seen.lib.is_empty() {
        "LIBROCBLAS".to_string()
    } else {
        shell_word(&seen.lib)
    });
    if let Some(store) = &seen.profiles {
        tune.push_str(&format!(" --profiles {}", shell_word(store)));
    }
    let specs: Vec<String> = items
        .iter()
        .filter_map(|n| n.spec.as_ref().map(|s| format!("--shape {s}")))
        .collect();
    let command = (!specs.is_empty()).then(|| format!("{tune} {}", specs.join(" ")));
    let inputs: Vec<String> = seen.miss_inputs.iter().map(|i| shell_word(i)).collect();
    let all_missed = (!inputs.is_empty() && todo.iter().any(|t| t.2.missed))
        .then(|| format!("{tune} {}", inputs.join(" ")));
    TuneNext {
        items,
        command,
        all_missed,
    }
}

/// Geometric mean of the bars' speedups.
pub fn geomean(bars: &[Bar]) -> Option<f64> {
    (!bars.is_empty())
        .then(|| (bars.iter().map(|b| b.speedup.ln()).sum::<f64>() / bars.len() as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunedblas_core::key::Types;

    fn key(n_out: i64, tokens: i64, k: i64) -> ProblemKey {
        ProblemKey::linear(Types::HALF, n_out, tokens, k)
    }

    fn shape(k: &ProblemKey) -> String {
        let (op, sig) = tunableop::op_and_signature(k);
        format!("{op},{sig}")
    }

    /// A batched 64x64 layer that ran at M=8 only.
    fn batched(tokens: i64) -> ProblemKey {
        let k = key(64, tokens, 64);
        k.with_batch(Batching::Strided, 4, k.packed_strides())
    }

    fn profile(rows: &[(ProblemKey, &str)], prov: Value) -> Picked {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tunedblas-report-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::from("Validator,ROCBLAS_VERSION,4.4.0\n");
        for (k, sol) in rows {
            text.push_str(&format!("{},{sol},0.1\n", shape(k)));
        }
        std::fs::write(dir.join("tunableop_results0.csv"), text).unwrap();
        std::fs::write(dir.join("provenance.json"), prov.to_string()).unwrap();
        Picked {
            library: "rocblas".into(),
            name: "test".into(),
            dir: dir.clone(),
            sha256: "ab".repeat(32),
            rocblas: Some("4.4.0".into()),
            arch: None,
            ranks: vec![(0, dir.join("tunableop_results0.csv"))],
        }
    }

    fn rows() -> Vec<(ProblemKey, &'static str)> {
        vec![
            (key(64, 8, 32), "Gemm_Rocblas_3"),
            (key(64, 16, 32), "Default"),
            (key(128, 8, 64), "Gemm_Rocblas_5"),
            (key(128, 32, 64), "Gemm_Rocblas_2"),
        ]
    }

    fn prov() -> Value {
        serde_json::json!({"campaigns": [{"shapes": [
            {"shape": shape(&key(64, 8, 32)), "calls": 100, "decision": "adopt", "heuristic_ms": 2.0, "new_ms": 1.0, "spread": 0.02},
            {"shape": shape(&key(128, 8, 64)), "calls": 0, "decision": "keep", "heuristic_ms": 1.5, "current_ms": 1.0, "new_ms": 0.9, "spread": 0.01},
            {"shape": shape(&key(64, 16, 32)), "calls": 300, "decision": "default", "heuristic_ms": 1.0, "spread": 0.02},
            {"shape": shape(&key(128, 32, 64)), "calls": 50, "decision": "undecidable", "reason": "inside the spread", "heuristic_ms": 1.0, "current_ms": 1.0, "spread": 0.04},
            {"shape": shape(&key(128, 16, 64)), "calls": 10, "decision": "default", "reason": "nothing beat it", "heuristic_ms": 1.0, "spread": 0.8},
        ]}]})
    }

    fn seen(missed: &[(ProblemKey, u64)]) -> Seen {
        Seen {
            missed: missed.to_vec(),
            predicted: Vec::new(),
            miss_inputs: vec!["misses/".into()],
            lib: "librocblas.so.4".into(),
            profiles: None,
        }
    }

    /// The report on the test profile of a run that missed `missed`, near serving within
    /// `near` token counts.
    fn report(missed: &[(ProblemKey, u64)], near: i64) -> Data {
        build(&profile(&rows(), prov()), 0, &seen(missed), near).unwrap()
    }

    fn statuses(d: &Data, i: usize) -> Vec<(i64, Status)> {
        d.rows[i].cells.iter().map(|c| (c.m, c.status)).collect()
    }

    /// Issue 16: the map crossed every layer with every M seen anywhere.
    #[test]
    fn cells_only_where_a_layer_was_seen() {
        let missed = [(key(64, 99, 32), 5), (key(256, 8, 8), 3), (batched(8), 7)];
        let d = report(&missed, 0);
        assert_eq!(d.columns, vec![8, 16, 32, 99]);
        assert_eq!(d.rows.len(), 4);
        let labels: Vec<&str> = d.rows.iter().map(|r| r.label.as_str()).collect();
        let by_label = |l: &str| {
            labels
                .iter()
                .position(|x| *x == l)
                .unwrap_or_else(|| panic!("{l} in {labels:?}"))
        };
        let l64 = by_label("TN f16 N=64 K=32");
        assert_eq!(
            statuses(&d, l64),
            [
                (8, Status::Tuned),
                (16, Status::Default),
                (99, Status::Missed)
            ]
        );
        let b = by_label("TN f16 N=64 K=64 B=4");
        assert_eq!(
            statuses(&d, b),
            [(8, Status::Missed)],
            "a batched layer only at the M it ran"
        );
        assert_eq!(
            statuses(&d, by_label("TN f16 N=256 K=8")),
            [(8, Status::Missed)]
        );
        assert_eq!(
            (d.counts.tuned, d.counts.default, d.counts.missed),
            (3, 1, 3)
        );
        assert_eq!(d.counts.never_seen, 4 * 4 - 7);
        assert_eq!(d.claims.missed_shapes, 3);
        assert_eq!(d.claims.missed_calls, 15);
        let page = html(&d);
        assert_eq!(page.matches("class=\"cell missed\"").count(), 3);
        assert_eq!(page.matches("class=\"never\"").count(), 9);
        assert!(page.contains("missed in production (7 calls)"));
    }

    /// Issue 16: a cell was "near" whenever any row of the layer was within the window,
    /// also where the interposer serves the heuristic (the nearest row says Default).
    #[test]
    fn near_is_the_interposers_decision() {
        // 64x32: rows at 8 (tuned) and 16 (Default). M=20 is nearest 16: Default, so the
        // interposer passes it; M=10 is nearest 8: tried. 128x64: M=28 is nearest 32.
        let missed = [
            (key(64, 20, 32), 4),
            (key(64, 10, 32), 6),
            (key(128, 28, 64), 2),
        ];
        let d = report(&missed, 32);
        assert_eq!(
            statuses(&d, 0),
            [
                (8, Status::Tuned),
                (10, Status::Near),
                (16, Status::Default),
                (20, Status::Missed)
            ]
        );
        assert!(
            d.rows[0].cells[3].text.contains("says Default"),
            "{:?}",
            d.rows[0]
        );
        assert!(
            d.rows[0].cells[1].text.contains("validates"),
            "the cell says what is decided at run time"
        );
        assert_eq!(
            (
                d.claims.near_keys,
                d.claims.near_calls,
                d.claims.missed_calls
            ),
            (2, 8, 4)
        );
        let off = report(&missed, 0);
        assert_eq!(off.counts.near, 0, "window 0: near serving is off");
    }

    /// Issue 16: the headline counted tuned shapes only, per shape.
    #[test]
    fn the_headline_is_call_weighted_and_lists_what_decided_nothing() {
        let d = report(&[], 0);
        let h = &d.headline;
        assert_eq!(d.bars.len(), 3, "three tuned rows measured");
        // Calls x heuristic: 100*2 + 300*1 + 50*1 + 10*1 = 560; saved: 100*(2-1) = 100.
        assert_eq!((h.weighted_shapes, h.weighted_calls), (4, 460));
        assert!((h.heuristic_ms - 560.0).abs() < 1e-9 && (h.saved_ms - 100.0).abs() < 1e-9);
        assert_eq!(
            h.uncounted_shapes, 1,
            "the kept shape has no recorded calls"
        );
        let doubts: Vec<(i64, &str)> = h
            .doubts
            .iter()
            .map(|x| (x.m, x.decision.as_str()))
            .collect();
        assert_eq!(doubts, [(16, "default (noisy)"), (32, "undecidable")]);
        let page = html(&d);
        assert!(
            page.contains("tuning saves 17.9% of the GEMM time"),
            "{}",
            headline_text(h)
        );
        assert!(
            page.contains("geometric mean 1.44x across 3 shapes"),
            "{}",
            headline_text(h)
        );
        assert!(page.contains("undecidable") && page.contains("spread 80%"));
    }

    /// Issue 16: the page ended with a visible test hook; the data is machine-readable in a
    /// JSON script block instead.
    #[test]
    fn the_page_shows_no_test_hook_and_embeds_its_data() {
        let d = report(&[(key(64, 99, 32), 5)], 0);
        let page = html(&d);
        assert!(!page.contains("<pre id=\"rendered\">"), "no visible hook");
        let json = page
            .split("<script type=\"application/json\" id=\"report-data\">")
            .nth(1)
            .and_then(|r| r.split("</script>").next())
            .expect("a JSON data block");
        let v: Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["counts"]["missed"], 1);
        for remote in ["src=", "href=", "url(", "@import"] {
            assert!(!page.contains(remote), "self-contained: no {remote}");
        }
    }

    /// Issue 16: the PNG had no legend and labelled every third M.
    #[test]
    fn the_png_has_a_legend_and_labels_every_column() {
        let missed: Vec<(ProblemKey, u64)> =
            (1..=120).map(|m| (key(64, 1000 + m, 32), 1)).collect();
        let d = report(&missed, 0);
        let canvas = png(&d);
        let (w, h, px) = crate::png::tests::decode(&canvas.png());
        assert_eq!((w, h), (canvas.width, canvas.height));
        let l = crate::render::report::layout(&d);
        let (cw, ch) = l.cell;
        let area = (cw - 2) * (ch - 2);
        let count = |rgb: Rgb| px.chunks(3).filter(|p| *p == rgb).count();
        // One cell interior per cell, plus the legend's swatch of each status.
        assert_eq!(count(TUNED_RGB), (3 + 1) * area);
        assert_eq!(count(DEFAULT_RGB), (1 + 1) * area);
        assert_eq!(count(MISSED_RGB), (120 + 1) * area);
        assert_eq!(
            count(PREDICTED_RGB),
            area,
            "the legend names predicted cells too"
        );
        assert_eq!(count(NEVER_RGB), (d.counts.never_seen + 1) * area);
        // Every column has ink in the label band above the map.
        let ink = |x: usize, y: usize| px[(y * w + x) * 3..(y * w + x) * 3 + 3] == INK;
        for j in 0..d.columns.len() {
            let x0 = l.label_w + j * cw;
            assert!(
                (l.labels_y..l.head).any(|y| (x0..x0 + cw).any(|x| ink(x, y))),
                "column {j} (M={}) is labelled",
                d.columns[j]
            );
        }
    }

    /// Whether `px` (a `w`-wide picture) holds `text` drawn at `scale` with its corner at
    /// (x, y) (top-left across; bottom-left turned up), in ink on paper, exactly.
    fn drawn(
        px: &[u8],
        w: usize,
        (x, y): (usize, usize),
        text: &str,
        scale: usize,
        up: bool,
    ) -> bool {
        let len = crate::png::Canvas::text_width(text, scale);
        let (bw, bh, top) = if up {
            (5 * scale, len, y - len)
        } else {
            (len, 5 * scale, y)
        };
        let mut want = crate::png::Canvas::new(x + bw, top + bh, PAPER);
        if up {
            want.text_up(x, y, text, scale, INK);
        } else {
            want.text(x, y, text, scale, INK);
        }
        (top..top + bh).all(|yy| {
            (x..x + bw).all(|xx| {
                px[(yy * w + xx) * 3..][..3] == want.pixels[(yy * want.width + xx) * 3..][..3]
            })
        })
    }

    /// Issue 26: the headline ("saves 17.9%") was in the page, not in the PNG.
    #[test]
    fn the_png_says_the_headline() {
        let d = report(&[], 0);
        let (w, _, px) = crate::png::tests::decode(&png(&d).png());
        let l = crate::render::report::layout(&d);
        let (first, second) = crate::render::report::headline_lines(&d.headline);
        assert_eq!(first, "TUNING SAVES 17.9% OF THE GEMM TIME");
        assert!(
            second.starts_with(
                "SPEEDUP 1.22X OVER 4 MEASURED SHAPES, 460 CALLS (CALLS RECORDED BEFORE TUNING)"
            ) && second.ends_with("PER-SHAPE GEOMEAN 1.44X OVER 3 TUNED SHAPES"),
            "{second}"
        );
        assert!(drawn(&px, w, (8, l.headline_y.0), &first, 3, false));
        assert!(drawn(&px, w, (8, l.headline_y.1), &second, 2, false));
    }

    /// Issue 26: the bars came in the layers' order, the 1.0x line had no label, and the
    /// column digits were drawn 3x5 pixels, stacked one above the other where narrow.
    #[test]
    fn bars_are_sorted_the_one_line_is_labelled_and_the_digits_are_readable() {
        // The 64x32 layer's row gains 1.11x, the 128x64 layer's 1.5x and 1.0x: in the
        // layers' order the bars would read 1.11, 1.5, 1.0.
        let mut v = prov();
        v["campaigns"][0]["shapes"][0]["new_ms"] = 1.8.into();
        let p = profile(&rows(), v);
        let missed: Vec<(ProblemKey, u64)> =
            (1..=120).map(|m| (key(64, 1000 + m, 32), 1)).collect();
        let d = build(&p, 0, &seen(&missed), 0).unwrap();
        let speedups: Vec<f64> = d.bars.iter().map(|b| b.speedup).collect();
        assert_eq!(speedups.len(), 3);
        assert!(speedups.windows(2).all(|x| x[0] >= x[1]), "{speedups:?}");
        assert_eq!(d.bars[0].m, 8);
        assert!(d.bars[0].label.contains("N=128"), "{:?}", d.bars[0]);
        let canvas = png(&d);
        let (w, _, px) = crate::png::tests::decode(&canvas.png());
        let l = crate::render::report::layout(&d);
        // Each bar's right end, top to bottom: longest first.
        let ends: Vec<usize> = (0..d.bars.len())
            .map(|i| {
                let y = l.bars_y + i * l.cell.1 + 2;
                (0..w)
                    .filter(|&x| px[(y * w + x) * 3..][..3] == BAR_RGB)
                    .max()
                    .unwrap()
            })
            .collect();
        assert!(ends.windows(2).all(|x| x[0] >= x[1]), "{ends:?}");
        let (_, at) = l.one.expect("a 1.0x line");
        assert!(drawn(
            &px,
            w,
            at,
            crate::render::report::ONE_LABEL,
            2,
            false
        ));
        // 121 token counts of four digits: too narrow across, so each is turned up, at
        // twice the font's size, whole in its column.
        assert_eq!(l.labels, crate::render::report::Labels::Up);
        for (j, m) in d.columns.iter().enumerate() {
            let at = crate::render::report::column_label_at(&l, j);
            assert!(drawn(&px, w, at, &m.to_string(), 2, true), "M={m}");
            assert!(
                at.0 + 10 <= l.label_w + (j + 1) * l.cell.0,
                "M={m} in its column"
            );
        }
        // A few short token counts fit across.
        let few = build(&p, 0, &seen(&[]), 0).unwrap();
        let l = crate::render::report::layout(&few);
        let (w, _, px) = crate::png::tests::decode(&png(&few).png());
        assert_eq!(l.labels, crate::render::report::Labels::Across);
        for (j, m) in few.columns.iter().enumerate() {
            let at = crate::render::report::column_label_at(&l, j);
            assert!(drawn(&px, w, at, &m.to_string(), 2, false), "M={m}");
        }
    }

    /// Issue 26: the headline was weighted by the calls recorded before tuning even when
    /// the calls of a later run were given.
    #[test]
    fn the_headline_is_weighted_by_the_given_run_where_it_counted_the_shape() {
        // The given run counted the 64x32 layer at 8 tokens 7 times (provenance: 100).
        let d = report(&[(key(64, 8, 32), 7)], 0);
        let h = &d.headline;
        assert_eq!((h.weighted_shapes, h.given_run_shapes), (4, 1));
        assert_eq!(h.weighted_calls, 7 + 300 + 50 + 10);
        // Calls x heuristic: 7*2 + 300 + 50 + 10 = 374; saved: 7*(2-1) = 7.
        assert!((h.heuristic_ms - 374.0).abs() < 1e-9, "{h:?}");
        assert!((h.saved_ms - 7.0).abs() < 1e-9, "{h:?}");
        let text = headline_text(h);
        assert!(
            text.contains("weighted by the calls of the given run (--misses) for 1 shapes, by the calls recorded before tuning (provenance.json) for the other 3"),
            "{text}"
        );
        let (_, png) = crate::render::report::headline_lines(h);
        assert!(
            png.contains("(CALLS OF THE GIVEN RUN FOR 1, RECORDED BEFORE TUNING FOR 3)"),
            "{png}"
        );
        // Every measured shape counted by the given run: weighted by it alone.
        let all = [
            (key(64, 8, 32), 1),
            (key(128, 8, 64), 1),
            (key(64, 16, 32), 1),
            (key(128, 32, 64), 1),
            (key(128, 16, 64), 1),
        ];
        let d = report(&all, 0);
        assert_eq!(d.headline.weighted_calls, 5);
        assert_eq!(d.headline.uncounted_shapes, 0);
        assert!(headline_text(&d.headline)
            .contains("weighted by the calls of the given run (--misses);"));
        let (_, png) = crate::render::report::headline_lines(&d.headline);
        assert!(png.contains("(CALLS OF THE GIVEN RUN)"), "{png}");
    }

    /// Issue 16: no list of what to tune next.
    #[test]
    fn tune_next_ranks_by_calls_and_gives_the_command() {
        let p = profile(&rows(), prov());
        let missed = [
            (key(64, 99, 32), 5),
            (key(256, 8, 8), 3),
            (key(4096, 8, 4096), 1),
            (batched(8), 2),
        ];
        let mut s = seen(&missed);
        s.predicted = vec![key(512, 64, 512)];
        let d = build(&p, 0, &s, 0).unwrap();
        let t = &d.tune_next;
        let order: Vec<(i64, i64, Status)> = t
            .items
            .iter()
            .map(|n| (n.flops as i64, n.calls as i64, n.status))
            .collect();
        assert_eq!(order[0].1, 1, "4096x4096 at 8 tokens: most calls x FLOPs");
        assert_eq!(order.last().unwrap().2, Status::Predicted, "no calls: last");
        assert_eq!(t.items[0].spec.as_deref(), Some("f16:TN:4096:8:4096"));
        assert_eq!(
            t.command.as_deref().unwrap().split(" --shape ").next(),
            Some("tunedblas tune --lib librocblas.so.4")
        );
        assert!(t
            .command
            .as_deref()
            .unwrap()
            .contains("--shape f16:TN:64:8:64:4"));
        assert_eq!(
            t.all_missed.as_deref(),
            Some("tunedblas tune --lib librocblas.so.4 misses/")
        );
        // Issue 26: the report's own store, so the rows land in the profile it shows;
        // words the shell would split are quoted.
        s.profiles = Some("my profiles/x".into());
        s.miss_inputs = vec!["it's here".into()];
        let d2 = build(&p, 0, &s, 0).unwrap();
        assert_eq!(
            d2.tune_next.all_missed.as_deref(),
            Some("tunedblas tune --lib librocblas.so.4 --profiles 'my profiles/x' 'it'\\''s here'")
        );
        assert!(
            html(&d).contains("tunedblas tune --lib librocblas.so.4 --shape f16:TN:4096:8:4096")
        );
        for n in &t.items {
            assert_eq!(
                crate::shapes::parse_spec(n.spec.as_ref().unwrap())
                    .unwrap()
                    .flops(),
                n.flops
            );
        }
    }
}
