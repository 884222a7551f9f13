//! `tunedblas near-bench` (internal): does near-shape serving pay on this library? The
//! measurement of BENCHMARKS.md.

use serde_json::json;

use crate::args::{self, Args};
use crate::error::Result;
use crate::nearbench::{self, Options};
use crate::workload::LAYERS;

const ABOUT: &str = "\
(internal: the near-shape serving measurement of BENCHMARKS.md) Tunes each demo layer at
each chunk size, then times the heuristic against what near serving would run for M = chunk
+ 1..decodes, medians of interleaved trials.";

#[rustfmt::skip]
const OPTIONS: &[args::Row] = &[
    ("--lib", "LIB", "the library (default: refblas beside this binary)"),
    ("--chunks", "N,N,..", "chunk sizes (default 256,512)"),
    ("--decodes", "N", "decode tokens above each chunk (default 32)"),
    ("--trials", "N", "interleaved trials (default 7)"),
    ("--json", "", "the measurement as JSON"),
];

fn cli() -> clap::Command {
    args::command("near-bench", ABOUT, "").args(args::table(OPTIONS))
}

pub fn help() -> String {
    args::help_text(cli())
}

fn parse(args: &[String]) -> Result<(Options, bool)> {
    let a = Args::of_declared("near-bench", cli(), args)?;
    let chunks = match a.value("--chunks") {
        None => vec![256, 512],
        Some(list) => list
            .split(',')
            .map(|c| c.trim().parse::<i64>().ok())
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| a.usage(format!("--chunks takes N,N,.., not '{list}'")))?,
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

pub fn run(args: &[String]) -> Result<()> {
    let (o, as_json) = parse(args)?;
    let cases = nearbench::measure_all(&o)?;
    let summaries = nearbench::summaries(&cases);
    if as_json {
        super::print_json(&json!({
            "library": o.lib.display().to_string(),
            "chunks": o.chunks, "decodes": o.decodes, "trials": o.trials,
            "summary": summaries,
            "cases": cases.iter().map(|c| json!({
                "n": c.n, "k": c.k, "chunk": c.chunk, "rows": c.policy,
                "row": c.row.as_ref().map(|r| r.to_string()),
                "points": c.points.iter().map(|p| json!({"m": p.0, "heuristic_ms": p.1, "near_ms": p.2, "near_ran": p.3})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }));
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
