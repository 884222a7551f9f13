//! `tunedblas misses`: the miss logs of every process and rank, added up, grouped into
//! chunk + decode families and ranked by calls x FLOPs. The logic is in
//! `tunedblas_core::misses`; this is the command line and the files (`render::misses`
//! lays the answer out).

use std::collections::BTreeMap;
use std::path::PathBuf;

use tunedblas_core::misses::{self, Source};
use tunedblas_core::tunableop;

use crate::args::{self, Args};
use crate::error::{Error, Result};
use crate::render::misses::{self as render, Summary};

const ABOUT: &str = "\
Adds up the miss logs of every process and rank (<host>-<pid>-<start>-rank<d>.csv and
.counts.csv), groups the shapes of one layer into chunk + decode families (token counts up
to --window above a multiple of --align) and decode batches, and ranks the groups by calls x
FLOPs: the gaps worth tuning first.

With --lib (or --profile), shapes the profile for that build has a row for now (tuned since
they were recorded) are left out, and counted in one line: what is listed is still to do.";

const AFTER: &str = "\
--prune removes only files of processes that no longer run on this host: files of running
processes, and of other hosts (a shared folder), are never removed. The listing that
follows is of what remains.

EXAMPLE:
    tunedblas misses ~/.cache/tunedblas/misses --out gaps.csv --top 10
";

const OPTIONS: &str = "\
DIR|FILE...          miss folders or files (default $TUNEDBLAS_MISS_DIR, else the user cache's misses/)
--lib LIB            leave out the shapes the profile of this build has rows for
--profile NAME       the same, with the profile named
--profiles
--align N            chunk sizes are multiples of N (default 256)
--window N           decode tokens counted with a chunk: up to N above it (default 32)
--top N              groups listed (default 20)
--json               everything as JSON
--out FILE           every missed shape, most expensive first, as PyTorch untuned-file lines (op_name,param_signature), which `tunedblas tune` reads
--prune DAYS|served  DAYS: remove the miss files (log, counts, status) of ended processes last written more than DAYS days ago; served (with --lib or --profile): of ended processes all of whose shapes the profile has rows for
";

pub fn cli() -> clap::Command {
    args::command("misses", ABOUT, AFTER).args(args::table(OPTIONS))
}

/// `--align`, `--window`, `--top`: a positive number, else `default`.
fn number(a: &Args, flag: &str, default: i64) -> Result<i64> {
    match a.value(flag) {
        None => Ok(default),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| a.usage(format!("{flag} takes a positive number, not '{v}'"))),
    }
}

/// `--prune DAYS|served`; `served` needs the profile whose rows serve.
fn prune_rule(a: &Args, served_by: Option<&crate::pick::Picked>) -> Result<Option<Prune>> {
    Ok(match a.value("--prune") {
        None => None,
        Some("served") if served_by.is_none() => {
            return Err(a.usage("--prune served needs --lib or --profile (the rows that serve)"))
        }
        Some("served") => Some(Prune::Served),
        Some(days) => Some(Prune::OlderThan(
            days.parse::<f64>()
                .ok()
                .filter(|d| *d >= 0.0)
                .ok_or_else(|| {
                    a.usage(format!(
                        "--prune takes a number of days or 'served', not '{days}'"
                    ))
                })?,
        )),
    })
}

/// Reads the miss files under the inputs into one source per (process, rank). A file that
/// cannot be read as a miss file (a FIFO or a device planted under a miss-file name, one
/// over the size limit, bytes that are not text) is left out with a problem line naming it:
/// a miss folder is written by every process on the machine, and one such file blocked or
/// exhausted the command, or ended it.
fn read_sources(inputs: &[PathBuf]) -> Result<(Vec<Source>, usize, Vec<String>)> {
    let mut files: Vec<PathBuf> = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let rd = std::fs::read_dir(input)
                .map_err(|e| Error::failed(format!("{}: {e}", input.display())))?;
            let mut here: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
            here.sort();
            files.extend(here);
        } else if input.is_file() {
            files.push(input.clone());
        } else {
            return Err(Error::failed(format!(
                "{}: no such miss folder or file (set TUNEDBLAS_MISS_DIR or name the folder)",
                input.display()
            )));
        }
    }
    let mut by_source: BTreeMap<(String, Option<i32>), Source> = BTreeMap::new();
    let mut read = 0;
    let mut unread = Vec::new();
    for f in files {
        let Some(name) = f.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some((process, rank, counts)) = misses::parse_file_name(name) else {
            continue;
        };
        let limit = tunedblas_core::profile::MAX_RESULTS_FILE_BYTES;
        let text = match crate::export::regular_text(&f, limit) {
            Ok(text) => text,
            Err(e) => {
                unread.push(format!("{}: {e}; left out", f.display()));
                continue;
            }
        };
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
    Ok((by_source.into_values().collect(), read, unread))
}

/// Runs `tunedblas misses` with the arguments after the command name.
pub fn run(a: &Args) -> Result<()> {
    let mut inputs: Vec<PathBuf> = a.positional.iter().map(PathBuf::from).collect();
    if inputs.is_empty() {
        inputs.push(tunedblas_core::settings::miss_dir());
    }
    // The profile whose rows are taken out of the list (`--lib` / `--profile`).
    let served_by = match (a.has("--lib"), a.has("--profile")) {
        (false, false) => None,
        _ => Some(a.picked()?),
    };
    let rule = prune_rule(a, served_by.as_ref())?;
    let (align, window) = (number(a, "--align", 256)?, number(a, "--window", 32)?);
    let top = number(a, "--top", 20)? as usize;
    if let Some(rule) = rule {
        let removed = prune(&inputs, rule, served_by.as_ref())?;
        crate::say::note!("tunedblas misses: pruned the files of {removed} ended processes");
    }
    let (sources, files, mut problems) = read_sources(&inputs)?;
    let (mut all, parsed) = misses::aggregate(&sources);
    problems.extend(parsed);
    let served = match &served_by {
        Some(p) => drop_served(&mut all, p)?,
        None => 0,
    };
    let groups = misses::group(&all, align, window);
    let out = a.path("--out");
    if let Some(out) = &out {
        std::fs::write(out, untuned_text(&all, &groups))
            .map_err(|e| Error::failed(format!("{}: {e}", out.display())))?;
    }
    let summary = Summary {
        inputs: inputs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        files,
        processes: sources.iter().map(|s| s.process.as_str()).collect(),
        ranks: sources.iter().filter_map(|s| s.rank).collect(),
        all: &all,
        problems: &problems,
        groups: &groups,
    };
    if a.has("--json") {
        let mut v = render::json(&summary);
        if let Some(p) = &served_by {
            v["served_by"] = serde_json::json!({ "profile": p.name, "shapes": served });
        }
        super::print_json(&v);
    } else {
        if let Some(p) = &served_by {
            println!(
                "{served} recorded shapes have rows in profile '{}' (build {}) now: not listed",
                p.name,
                p.short()
            );
        }
        print!("{}", render::text(&summary, top, out.as_deref()));
    }
    Ok(())
}

/// Takes out of `all` the shapes profile `p` has a row for on any rank; returns how many.
fn drop_served(all: &mut Vec<misses::Miss>, p: &crate::pick::Picked) -> Result<usize> {
    let rows = profile_rows(p)?;
    let before = all.len();
    all.retain(|m| !rows.contains(&m.key));
    Ok(before - all.len())
}

/// Every missed shape, most expensive group first, as PyTorch untuned-file lines.
fn untuned_text(all: &[misses::Miss], groups: &[misses::Group]) -> String {
    let mut lines = String::new();
    for g in groups {
        let mut members = g.members.clone();
        members.sort_by(|&a, &b| all[b].cost().total_cmp(&all[a].cost()));
        for i in members {
            let (op, sig) = tunableop::op_and_signature(&all[i].key);
            lines.push_str(&format!("{op},{sig}\n"));
        }
    }
    lines
}

/// What `--prune` removes (only ever files of processes that ended, on this host).
#[derive(Clone, Copy, Debug)]
enum Prune {
    /// Last written more than this many days ago.
    OlderThan(f64),
    /// Every shape has a row in the profile now.
    Served,
}

/// Removes the miss files (log and counts) and status files of ended processes of this host
/// that `rule` selects, in the folders among `inputs`; returns how many processes' files went.
fn prune(
    inputs: &[PathBuf],
    rule: Prune,
    served_by: Option<&crate::pick::Picked>,
) -> Result<usize> {
    use tunedblas_core::process::{self, State, Writer};
    let here = process::host_name();
    let rows = match served_by {
        Some(p) => profile_rows(p)?,
        None => Default::default(),
    };
    let mut removed = 0;
    for dir in inputs.iter().filter(|d| d.is_dir()) {
        let rd =
            std::fs::read_dir(dir).map_err(|e| Error::failed(format!("{}: {e}", dir.display())))?;
        // Each process's files: (log or counts path), by `<host>-<pid>-<start>`.
        let mut by_process: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for e in rd.flatten() {
            let path = e.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            // Its status files (`tunedblas status`) go with its miss files.
            let process = name
                .strip_suffix(".status.json")
                .or_else(|| name.strip_suffix(".prom"))
                .map(str::to_string)
                .or_else(|| misses::parse_file_name(name).map(|(p, _, _)| p));
            if let Some(process) = process {
                by_process.entry(process).or_default().push(path);
            }
        }
        for (name, files) in by_process {
            let ended = Writer::parse(&name).is_some_and(|w| w.state(&here) == State::Gone);
            if !ended || !selected(&files, rule, &rows) {
                continue;
            }
            for f in &files {
                std::fs::remove_file(f)
                    .map_err(|e| Error::failed(format!("cannot remove {}: {e}", f.display())))?;
            }
            removed += 1;
        }
    }
    Ok(removed)
}

/// Whether `rule` selects one process's miss files.
fn selected(
    files: &[PathBuf],
    rule: Prune,
    rows: &std::collections::HashSet<tunedblas_core::key::ProblemKey>,
) -> bool {
    match rule {
        Prune::OlderThan(days) => files.iter().all(|f| {
            std::fs::metadata(f)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs_f64() > days * 86_400.0)
        }),
        Prune::Served => files
            .iter()
            .filter(|f| {
                let name = f.to_string_lossy();
                name.ends_with(".csv") && !name.ends_with(".counts.csv")
            })
            .all(|f| {
                std::fs::read_to_string(f)
                    .map(|t| {
                        tunedblas_core::misses::file::parse(&t)
                            .keys()
                            .all(|k| rows.contains(k))
                    })
                    .unwrap_or(false)
            }),
    }
}

/// The keys the profile `p` has rows for, on any rank.
fn profile_rows(
    p: &crate::pick::Picked,
) -> Result<std::collections::HashSet<tunedblas_core::key::ProblemKey>> {
    let mut rows = std::collections::HashSet::new();
    for (_, file) in &p.ranks {
        let f = crate::export::read(file)?;
        rows.extend(f.rows.iter().map(|r| r.key));
    }
    Ok(rows)
}
