//! `tunedblas misses`: the miss logs of every process and rank, added up, grouped into
//! chunk + decode families and ranked by calls x FLOPs. The logic is in
//! `tunedblas_core::misses`; this is the command line and the files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;
use tunedblas_core::identity;
use tunedblas_core::misses::{self, GroupKind, Source};
use tunedblas_core::tunableop;

pub const HELP: &str = "\
tunedblas misses [DIR|FILE ...] [--align N] [--window N] [--top N] [--json] [--out FILE]

Adds up the miss logs of every process and rank (<host>-<pid>-<start>-rank<d>.csv and .counts.csv;
default folder: $TUNEDBLAS_MISS_DIR, else the user cache's misses/), groups the shapes of
one layer into chunk + decode families (token counts up to --window (32) above a multiple
of --align (256)) and decode batches, and ranks the groups by calls x FLOPs: the gaps
worth tuning first. --out writes every missed shape in that order as PyTorch untuned-file
lines (op_name,param_signature), which `tunedblas tune` reads.

EXAMPLE:
    tunedblas misses ~/.cache/tunedblas/misses --out gaps.csv --top 10
";

struct Options {
    inputs: Vec<PathBuf>,
    align: i64,
    window: i64,
    top: usize,
    json: bool,
    out: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        inputs: Vec::new(),
        align: 256,
        window: 32,
        top: 20,
        json: false,
        out: None,
    };
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let mut value = || -> Result<String, String> {
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let number = |v: String| -> Result<i64, String> {
            v.parse::<i64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{flag} takes a positive number"))
        };
        match flag {
            "--align" => o.align = number(value()?)?,
            "--window" => o.window = number(value()?)?,
            "--top" => o.top = number(value()?)? as usize,
            "--json" => o.json = true,
            "--out" => o.out = Some(PathBuf::from(value()?)),
            f if f.starts_with("--") => return Err(format!("misses: unknown flag {f:?}")),
            path => o.inputs.push(PathBuf::from(path)),
        }
        i += 1;
    }
    if o.inputs.is_empty() {
        o.inputs.push(
            std::env::var_os("TUNEDBLAS_MISS_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| identity::user_cache_dir().join("misses")),
        );
    }
    Ok(o)
}

/// Reads the miss files under the inputs into one source per (process, rank).
fn read_sources(inputs: &[PathBuf]) -> Result<(Vec<Source>, usize), String> {
    let mut files: Vec<PathBuf> = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let rd = std::fs::read_dir(input).map_err(|e| format!("{}: {e}", input.display()))?;
            let mut here: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
            here.sort();
            files.extend(here);
        } else if input.is_file() {
            files.push(input.clone());
        } else {
            return Err(format!(
                "{}: no such miss folder or file (set TUNEDBLAS_MISS_DIR or name the folder)",
                input.display()
            ));
        }
    }
    let mut by_source: BTreeMap<(String, Option<i32>), Source> = BTreeMap::new();
    let mut read = 0;
    for f in files {
        let Some(name) = f.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some((process, rank, counts)) = misses::parse_file_name(name) else {
            continue;
        };
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        read += 1;
        let s = by_source
            .entry((process.clone(), rank))
            .or_insert_with(|| Source {
                process,
                rank,
                ..Source::default()
            });
        if counts {
            s.counts = Some(text);
        } else {
            s.first_sights = Some(text);
        }
    }
    Ok((by_source.into_values().collect(), read))
}

fn seen_in(processes: usize, ranks: &std::collections::BTreeSet<i32>) -> String {
    let ranks: Vec<String> = ranks.iter().map(i32::to_string).collect();
    format!(
        "{processes} process{}{}",
        if processes == 1 { "" } else { "es" },
        if ranks.is_empty() {
            String::new()
        } else {
            format!(", rank {}", ranks.join(","))
        }
    )
}

fn write_out(path: &Path, lines: &[String]) -> Result<(), String> {
    let mut text = String::new();
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `tunedblas misses` with the arguments after the command name.
pub fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tunedblas: {e}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    let (sources, files) = match read_sources(&o.inputs) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tunedblas: {e}");
            return ExitCode::from(1);
        }
    };
    let (all, problems) = misses::aggregate(&sources);
    let groups = misses::group(&all, o.align, o.window);
    let where_ = o
        .inputs
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");

    if let Some(out) = &o.out {
        let mut lines = Vec::new();
        for g in &groups {
            let mut members = g.members.clone();
            members.sort_by(|&a, &b| all[b].cost().total_cmp(&all[a].cost()));
            for i in members {
                let (op, sig) = tunableop::op_and_signature(&all[i].key);
                lines.push(format!("{op},{sig}"));
            }
        }
        if let Err(e) = write_out(out, &lines) {
            eprintln!("tunedblas: {e}");
            return ExitCode::from(1);
        }
    }

    let total_calls: u64 = all.iter().map(|m| m.calls).sum();
    let processes: std::collections::BTreeSet<&str> =
        sources.iter().map(|s| s.process.as_str()).collect();
    let ranks: std::collections::BTreeSet<i32> = sources.iter().filter_map(|s| s.rank).collect();
    let lower_bounds = all.iter().filter(|m| !m.counted).count();

    if o.json {
        let groups_json: Vec<serde_json::Value> = groups
            .iter()
            .map(|g| {
                let kind = match g.kind {
                    GroupKind::ChunkDecode { base } => json!({"chunk_decode": base}),
                    GroupKind::Decode => json!("decode"),
                    GroupKind::Other => json!("other"),
                };
                let shapes: Vec<serde_json::Value> = g
                    .members
                    .iter()
                    .map(|&i| {
                        let m = &all[i];
                        let (op, sig) = tunableop::op_and_signature(&m.key);
                        json!({
                            "op": op, "signature": sig, "m": m.key.n, "calls": m.calls,
                            "calls_are_lower_bound": !m.counted,
                            "processes": m.processes.len(),
                            "ranks": m.ranks.iter().collect::<Vec<_>>(),
                            "cost": m.cost(),
                        })
                    })
                    .collect();
                json!({
                    "family": g.label(),
                    "kind": kind,
                    "tokens": g.tokens(&all),
                    "calls": g.calls,
                    "cost": g.cost,
                    "shapes": shapes,
                })
            })
            .collect();
        let v = json!({
            "inputs": where_,
            "files": files,
            "processes": processes.len(),
            "ranks": ranks.iter().collect::<Vec<_>>(),
            "shapes": all.len(),
            "calls": total_calls,
            "problems": problems,
            "groups": groups_json,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("plain values")
        );
        return ExitCode::SUCCESS;
    }

    println!(
        "misses in {where_}: {} shapes, {total_calls} calls, from {} ({files} files)",
        all.len(),
        seen_in(processes.len(), &ranks)
    );
    if lower_bounds > 0 {
        println!(
            "{lower_bounds} shapes were logged by a process that never wrote its counts (killed?): their calls are lower bounds, marked +"
        );
    }
    for p in problems.iter().take(10) {
        println!("skipped: {p}");
    }
    if groups.is_empty() {
        println!("no misses recorded");
        return ExitCode::SUCCESS;
    }
    println!(
        "\ngaps worth tuning first ({} of {} groups; calls x FLOPs summed over each group):",
        o.top.min(groups.len()),
        groups.len()
    );
    println!(
        "  {:<4} {:<22} {:<22} {:>6} {:>10} {:>12}  seen in",
        "rank", "shape", "tokens (M)", "shapes", "calls", "FLOP x calls"
    );
    for (i, g) in groups.iter().take(o.top).enumerate() {
        let members: Vec<&misses::Miss> = g.members.iter().map(|&i| &all[i]).collect();
        let lower = if members.iter().any(|m| !m.counted) {
            "+"
        } else {
            ""
        };
        let procs: std::collections::BTreeSet<&String> =
            members.iter().flat_map(|m| m.processes.iter()).collect();
        let rk: std::collections::BTreeSet<i32> = members
            .iter()
            .flat_map(|m| m.ranks.iter().copied())
            .collect();
        let mut tokens = g.tokens(&all);
        if tokens.len() > 22 {
            tokens = format!("{}...", &tokens[..19]);
        }
        println!(
            "  {:<4} {:<22} {:<22} {:>6} {:>10} {:>12}  {}",
            i + 1,
            g.label(),
            tokens,
            members.len(),
            format!("{}{lower}", g.calls),
            format!("{:.3e}", g.cost),
            seen_in(procs.len(), &rk)
        );
    }
    if let Some(out) = &o.out {
        println!(
            "\n{} shapes written to {} in this order (PyTorch untuned-file lines)",
            all.len(),
            out.display()
        );
    }
    ExitCode::SUCCESS
}
