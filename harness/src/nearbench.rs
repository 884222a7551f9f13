//! `tunedblas near-bench` (internal): does near-shape serving pay on this library?
//!
//! For each layer of the demo workload (the seed's seven (N, K) pairs scaled down by 16)
//! and each chunk size: the chunk is tuned exactly as `tunedblas tune` would tune it (its
//! curated row is what a profile would hold), then for every M = chunk + 1..decodes the
//! heuristic is timed against what near serving would run there: the chunk row's solution
//! if `check_solution_index` accepts it for that M, else the heuristic (refused), else for
//! a `Default` chunk row the heuristic too. Samples are interleaved, medians of `trials`.
//! The answer is the ratio near / heuristic: per shape, its geometric mean, and total time.

use std::process::ExitCode;

use serde_json::json;
use tunedblas_core::abi::{FLAG_CHECK_SOLUTION_INDEX, STATUS_SUCCESS};
use tunedblas_core::tunableop::Solution;

use crate::backend::{Library, Problem, Result};
use crate::curate::{self, Rules};
use crate::tune::{self, Method};
use crate::workload::{linear_key, LAYERS};

struct Options {
    lib: std::path::PathBuf,
    chunks: Vec<i64>,
    decodes: i64,
    trials: usize,
    json: bool,
}

fn parse(args: &[String]) -> std::result::Result<Options, String> {
    let mut o = Options {
        lib: Library::beside_exe("librocblas_v4.so").unwrap_or_else(|| "librocblas_v4.so".into()),
        chunks: vec![256, 512],
        decodes: 32,
        trials: 7,
        json: false,
    };
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let mut value = || {
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag {
            "--lib" => o.lib = value()?.into(),
            "--chunks" => {
                o.chunks = value()?
                    .split(',')
                    .map(|c| {
                        c.trim()
                            .parse::<i64>()
                            .map_err(|_| "--chunks takes N,N,..".to_string())
                    })
                    .collect::<std::result::Result<_, _>>()?
            }
            "--decodes" => o.decodes = value()?.parse().map_err(|_| "--decodes takes a number")?,
            "--trials" => o.trials = value()?.parse().map_err(|_| "--trials takes a number")?,
            "--json" => o.json = true,
            other => return Err(format!("near-bench: unknown argument {other:?}")),
        }
        i += 1;
    }
    Ok(o)
}

/// One (layer, chunk, row policy) of the measurement.
struct Case {
    n: i64,
    k: i64,
    chunk: i64,
    /// "curated": the chunk's row as `tune` writes it; "fastest": its fastest solution.
    policy: &'static str,
    row: Option<Solution>,
    /// (M, heuristic ms, near ms, what near ran: "solution", "refused", "heuristic").
    points: Vec<(i64, f64, f64, &'static str)>,
}

fn calls_for(p: &Problem, target_ms: f64) -> Result<usize> {
    let once = p.time(None, 1)?.max(1e-4);
    Ok(((target_ms / once).ceil() as usize).clamp(1, 10_000))
}

/// Times near serving of `row` over chunk + 1..decodes. Where near serving has nothing
/// valid to serve it makes the caller's own call, so that point is the heuristic's time
/// for both (not timed twice: the difference would be noise).
fn near_points(
    lib: &Library,
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
        let p = Problem::new(lib, linear_key(n, m, k), method.rotate_bytes)?;
        p.time(None, 2)?;
        let valid =
            near_id.filter(|&id| p.run(Some(id), FLAG_CHECK_SOLUTION_INDEX) == STATUS_SUCCESS);
        let what = match (near_id, valid) {
            (Some(_), Some(_)) => "solution",
            (Some(_), None) => "refused",
            _ => "heuristic",
        };
        let calls = calls_for(&p, method.sample_ms)?;
        let (mut h, mut s) = (Vec::new(), Vec::new());
        for _ in 0..o.trials.max(1) {
            h.push(p.time(None, calls)?);
            if valid.is_some() {
                s.push(p.time(valid, calls)?);
            }
        }
        let heur = curate::median(&h);
        let near = if valid.is_some() {
            curate::median(&s)
        } else {
            heur
        };
        points.push((m, heur, near, what));
    }
    Ok(points)
}

fn measure(lib: &Library, n: i64, k: i64, chunk: i64, o: &Options) -> Result<Vec<Case>> {
    let method = Method {
        trials: o.trials,
        ..Method::default()
    };
    let tuned = tune::tune(
        lib,
        linear_key(n, chunk, k),
        None,
        &method,
        &Rules::default(),
    )?;
    let curated = tuned.verdict.row.clone();
    let fastest = tuned.leaders.first().map(|l| Solution::Rocblas(l.0));
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

pub fn main(args: &[String]) -> ExitCode {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tunedblas: {e}");
            return ExitCode::from(2);
        }
    };
    let lib = match Library::load(&o.lib, None) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tunedblas: {e}");
            return ExitCode::from(3);
        }
    };
    let mut cases = Vec::new();
    for &(n, k) in &LAYERS {
        for &chunk in &o.chunks {
            match measure(&lib, n, k, chunk, &o) {
                Ok(cs) => {
                    for c in &cs {
                        let ratios = c.points.iter().map(|p| p.2 / p.1);
                        let served = c.points.iter().filter(|p| p.3 == "solution").count();
                        eprintln!(
                            "{n}x{k} chunk {chunk} {}: row {}, near served {served}/{} M, geo-mean near/heuristic {:.3}",
                            c.policy,
                            c.row.as_ref().map_or("none".into(), |r| r.to_string()),
                            c.points.len(),
                            geo_mean(ratios)
                        );
                    }
                    cases.extend(cs);
                }
                Err(e) => {
                    eprintln!("tunedblas: {n}x{k} chunk {chunk}: {e}");
                    return ExitCode::from(1);
                }
            }
        }
    }
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
    if o.json {
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
        return ExitCode::SUCCESS;
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
    ExitCode::SUCCESS
}
