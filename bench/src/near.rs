//! `tunedblas-bench near-bench`: does near-shape serving pay on this library? The
//! measurement of BENCHMARKS.md.
//!
//! For each layer of the demo workload (the seed's seven (N, K) pairs scaled down by 16)
//! and each chunk size: the chunk is tuned exactly as `tunedblas tune` would tune it (its
//! curated row is what a profile would hold), then for every M = chunk + 1..decodes the
//! heuristic is timed against what near serving would run there: the chunk row's solution
//! if `check_solution_index` accepts it for that M, else the heuristic (refused), else for
//! a `Default` chunk row the heuristic too. Samples are interleaved, medians of `trials`.
//! The answer is the ratio near / heuristic: per shape, its geometric mean, and total time.

use serde_json::{json, Value};
use tunedblas_core::abi::{FLAG_CHECK_SOLUTION_INDEX, STATUS_SUCCESS};
use tunedblas_core::tunableop::Solution;

use tunedblas_tuner::backends::rocblas::{Rocblas, RocblasProblem};
use tunedblas_tuner::bench::Bench;
use tunedblas_tuner::curate::Rules;
use tunedblas_tuner::error::Result;
use tunedblas_tuner::numerics::median;
use tunedblas_tuner::pipeline::{self, Method};
use tunedblas_tuner::workload::{linear_key, LAYERS};

use crate::opts::{self, Opts};

const ABOUT: &str = "\
Tunes each demo layer at each chunk size, then times the heuristic against what near
serving would run for M = chunk + 1..decodes, medians of interleaved trials.";

#[rustfmt::skip]
const OPTIONS: &[opts::OptionRow] = &[
    ("--lib", "LIB", "the library (default: refblas beside this binary)"),
    ("--chunks", "N,N,..", "chunk sizes (default 256,512)"),
    ("--decodes", "N", "decode tokens above each chunk (default 32)"),
    ("--trials", "N", "interleaved trials (default 7)"),
    ("--json", "", "the measurement as JSON"),
];

pub fn help() -> String {
    opts::help("near-bench", ABOUT, OPTIONS)
}

fn parse(args: &[String]) -> std::result::Result<(Options, bool), String> {
    let a = Opts::parse("near-bench", OPTIONS, args)?;
    let chunks = match a.value("--chunks") {
        None => vec![256, 512],
        Some(list) => list
            .split(',')
            .map(|c| c.trim().parse::<i64>().ok())
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| format!("near-bench: --chunks takes N,N,.., not '{list}'"))?,
    };
    let lib = a.path("--lib").unwrap_or_else(|| {
        tunedblas_tuner::dl::beside_exe("librocblas_v4.so")
            .unwrap_or_else(|| "librocblas_v4.so".into())
    });
    let o = Options {
        lib,
        chunks,
        decodes: a.parsed("--decodes", 32, "a number")?,
        trials: a.parsed("--trials", 7, "a number")?,
    };
    Ok((o, a.has("--json")))
}

/// `tunedblas-bench near-bench [options]`: the summary lines, or everything as JSON.
pub fn run(args: &[String]) -> std::result::Result<(), String> {
    let (o, as_json) = parse(args)?;
    let cases = measure_all(&o).map_err(|e| e.to_string())?;
    let summaries = summaries(&cases);
    if as_json {
        let v = json!({
            "library": o.lib.display().to_string(),
            "chunks": o.chunks, "decodes": o.decodes, "trials": o.trials,
            "summary": summaries,
            "cases": cases.iter().map(|c| json!({
                "n": c.n, "k": c.k, "chunk": c.chunk, "rows": c.policy,
                "row": c.row.as_ref().map(|r| r.to_string()),
                "points": c.points.iter().map(|p| json!({"m": p.0, "heuristic_ms": p.1, "near_ms": p.2, "near_ran": p.3})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("plain values")
        );
        return Ok(());
    }
    println!(
        "M = chunk + 1..{} for chunks {:?}, {} layers, medians of {} interleaved trials",
        o.decodes,
        o.chunks,
        LAYERS.len(),
        o.trials
    );
    for s in &summaries {
        println!(
            "{} chunk rows: {} points, near served the chunk's solution at {} ({} faster, {} slower by > 3%), refused {}; near/heuristic total time {:.3} ({:.3} where served), geometric mean {:.3} ({:.3} where served)",
            s["rows"].as_str().unwrap_or(""),
            s["points"],
            s["served"],
            s["faster_by_3pct"],
            s["slower_by_3pct"],
            s["refused"],
            s["total_ratio_all"].as_f64().unwrap_or(1.0),
            s["total_ratio_served"].as_f64().unwrap_or(1.0),
            s["geo_mean_ratio_all"].as_f64().unwrap_or(1.0),
            s["geo_mean_ratio_served"].as_f64().unwrap_or(1.0),
        );
    }
    Ok(())
}

/// What to measure.
struct Options {
    pub lib: std::path::PathBuf,
    /// Chunk sizes whose rows near serving would stretch.
    pub chunks: Vec<i64>,
    /// Decode requests added to each chunk: M = chunk + 1..decodes.
    pub decodes: i64,
    pub trials: usize,
}

/// One (layer, chunk, row policy) of the measurement.
struct Case {
    pub n: i64,
    pub k: i64,
    pub chunk: i64,
    /// "curated": the chunk's row as `tune` writes it; "fastest": its fastest solution.
    pub policy: &'static str,
    pub row: Option<Solution>,
    /// (M, heuristic ms, near ms, what near ran: "solution", "refused", "heuristic").
    pub points: Vec<(i64, f64, f64, &'static str)>,
}

fn calls_for(p: &RocblasProblem, target_ms: f64) -> Result<usize> {
    let once = p.time(&None, 1)?.max(1e-4);
    Ok(((target_ms / once).ceil() as usize).clamp(1, 10_000))
}

/// Times near serving of `row` over chunk + 1..decodes. Where near serving has nothing
/// valid to serve it makes the caller's own call, so that point is the heuristic's time
/// for both (not timed twice: the difference would be noise).
fn near_points(
    lib: &Rocblas,
    n: i64,
    k: i64,
    chunk: i64,
    row: &Option<Solution>,
    o: &Options,
    method: &Method,
) -> Result<Vec<(i64, f64, f64, &'static str)>> {
    let near_id = match row {
        Some(Solution::Rocblas(id)) => Some(*id),
        _ => None,
    };
    let mut points = Vec::new();
    for d in 1..=o.decodes {
        let m = chunk + d;
        let p = RocblasProblem::new(lib, linear_key(n, m, k), method)?;
        p.time(&None, 2)?;
        let valid = near_id
            .filter(|&id| p.run_flags(0, Some(id), FLAG_CHECK_SOLUTION_INDEX) == STATUS_SUCCESS);
        let what = match (near_id, valid) {
            (Some(_), Some(_)) => "solution",
            (Some(_), None) => "refused",
            _ => "heuristic",
        };
        let calls = calls_for(&p, method.sample_ms)?;
        let (mut h, mut s) = (Vec::new(), Vec::new());
        for _ in 0..o.trials.max(1) {
            h.push(p.time(&None, calls)?);
            if valid.is_some() {
                s.push(p.time(&valid, calls)?);
            }
        }
        let heur = median(&h);
        let near = if valid.is_some() { median(&s) } else { heur };
        points.push((m, heur, near, what));
    }
    Ok(points)
}

fn measure(lib: &Rocblas, n: i64, k: i64, chunk: i64, o: &Options) -> Result<Vec<Case>> {
    let method = Method {
        trials: o.trials,
        ..Method::default()
    };
    let p = RocblasProblem::new(lib, linear_key(n, chunk, k), &method)?;
    let tuned = pipeline::tune_shape(&p, None, &method, &Rules::default())?;
    drop(p);
    let parse = |s: &str| Solution::parse(s).ok();
    let curated = tuned.verdict.row.as_ref().and_then(|r| parse(r.text()));
    let fastest = tuned.leaders.first().and_then(|l| parse(&l.0));
    let mut cases = Vec::new();
    for (policy, row) in [("curated", curated), ("fastest", fastest)] {
        let points = near_points(lib, n, k, chunk, &row, o, &method)?;
        cases.push(Case {
            n,
            k,
            chunk,
            policy,
            row,
            points,
        });
    }
    Ok(cases)
}

fn geo_mean(v: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x.ln(), n + 1));
    if n == 0 {
        1.0
    } else {
        (sum / n as f64).exp()
    }
}

/// Measures every layer at every chunk size; each case is said on stderr as it finishes.
fn measure_all(o: &Options) -> Result<Vec<Case>> {
    let lib = Rocblas::at(&o.lib, None)?;
    let mut cases = Vec::new();
    for &(n, k) in &LAYERS {
        for &chunk in &o.chunks {
            let cs = measure(&lib, n, k, chunk, o)
                .map_err(|e| e.context(format!("{n}x{k} chunk {chunk}")))?;
            for c in &cs {
                let ratios = c.points.iter().map(|p| p.2 / p.1);
                let served = c.points.iter().filter(|p| p.3 == "solution").count();
                tunedblas_tuner::say::note!(
                    "{n}x{k} chunk {chunk} {}: row {}, near served {served}/{} M, geo-mean near/heuristic {:.3}",
                    c.policy,
                    c.row.as_ref().map_or("none".into(), |r| r.to_string()),
                    c.points.len(),
                    geo_mean(ratios)
                );
            }
            cases.extend(cs);
        }
    }
    Ok(cases)
}

/// Per row policy: points, how often near served, wins and losses, time ratios.
fn summaries(cases: &[Case]) -> Vec<Value> {
    let mut summaries = Vec::new();
    for policy in ["curated", "fastest"] {
        let pts: Vec<&(i64, f64, f64, &str)> = cases
            .iter()
            .filter(|c| c.policy == policy)
            .flat_map(|c| c.points.iter())
            .collect();
        let served: Vec<&&(i64, f64, f64, &str)> =
            pts.iter().filter(|p| p.3 == "solution").collect();
        let refused = pts.iter().filter(|p| p.3 == "refused").count();
        let total_h: f64 = pts.iter().map(|p| p.1).sum();
        let total_n: f64 = pts.iter().map(|p| p.2).sum();
        let served_h: f64 = served.iter().map(|p| p.1).sum();
        let served_n: f64 = served.iter().map(|p| p.2).sum();
        let wins = served.iter().filter(|p| p.2 < p.1 * 0.97).count();
        let losses = served.iter().filter(|p| p.2 > p.1 * 1.03).count();
        summaries.push(json!({
            "rows": policy,
            "points": pts.len(),
            "served": served.len(),
            "refused": refused,
            "faster_by_3pct": wins,
            "slower_by_3pct": losses,
            "geo_mean_ratio_all": geo_mean(pts.iter().map(|p| p.2 / p.1)),
            "geo_mean_ratio_served": geo_mean(served.iter().map(|p| p.2 / p.1)),
            "total_ratio_all": total_n / total_h,
            "total_ratio_served": if served_h > 0.0 { served_n / served_h } else { 1.0 },
        }));
    }
    summaries
}
