//! `tunedblas status`: the live counters of every process running under the interposer on
//! this machine, read from the status files it writes beside its miss log
//! (`<host>-<pid>-<start>.status.json`, `cdylib/src/status.rs` writes them).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tunedblas_core::process::{State, Writer};

use crate::args::{self, Args};
use crate::error::{Error, Result};

const ABOUT: &str = "\
Shows what the interposer is doing in every process that runs under it, live: per process
and backend the calls served (a tuned solution), Default (a Default row), near (a nearby
token count's solution), missed (no row), passed through (the caller's own choice) and
fallbacks (a tuned call failed, the caller's own was made), per rank (device) the missed
calls and shapes, and the most called missed shapes. Read from the
<host>-<pid>-<start>.status.json files the interposer writes in its miss folder about once
a second while counters move, and at exit.

Each process is 'running' (its pid is alive and started when the file says: a reused pid is
not the old process), 'exited' (it wrote its final counters), 'gone' (it died without
exiting, e.g. SIGKILL; its counters are those of its last update) or 'elsewhere' (written on
another host).";

const AFTER: &str = "\
EXAMPLES:
    tunedblas status
    tunedblas status /var/cache/tunedblas/misses --json
";

/// The command line of `status`: its arguments and their help.
fn cli() -> clap::Command {
    args::command("status", ABOUT, AFTER)
        .arg(args::positionals(
            "DIR",
            1,
            "the miss folder (default $TUNEDBLAS_MISS_DIR, else the user cache's misses/, as the interposer)",
        ))
        .arg(args::switch("--json", "every process's counters as JSON"))
        .arg(args::switch(
            "--prune",
            "remove the Prometheus files (.prom) of processes not running, so node-exporter's textfile collector stops exporting them",
        ))
}

pub fn help() -> String {
    args::help_text(cli())
}

/// One backend's part of a status file, as the interposer writes it.
#[derive(Deserialize, Serialize, Clone, Debug, Default)]
pub struct Backend {
    pub backend: String,
    pub counters: Counters,
    #[serde(default)]
    pub missed_shapes: u64,
    #[serde(default)]
    pub ranks: Vec<Rank>,
    #[serde(default)]
    pub top_missed: Vec<TopMiss>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default)]
pub struct Counters {
    pub served: u64,
    pub default: u64,
    pub near: u64,
    pub missed: u64,
    pub passed_through: u64,
    pub fallbacks: u64,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default)]
pub struct Rank {
    pub rank: i32,
    pub missed_calls: u64,
    pub missed_shapes: u64,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default)]
pub struct TopMiss {
    pub rank: i32,
    pub calls: u64,
    pub shape: String,
}

/// A status file as written.
#[derive(Deserialize, Serialize, Clone, Debug)]
pub struct File {
    pub format: u32,
    pub host: String,
    pub pid: u32,
    pub start_ticks: u64,
    pub updated_unix_ms: u64,
    #[serde(rename = "final")]
    pub finished: bool,
    pub backends: Vec<Backend>,
}

/// One process as `status` reports it.
#[derive(Serialize, Debug)]
struct Process {
    file: PathBuf,
    state: &'static str,
    /// Seconds since the file was written.
    age_s: f64,
    #[serde(flatten)]
    status: File,
}

/// `running`, `exited`, `gone` or `elsewhere` (by `tunedblas_core::process`, as the
/// interposer names its files).
fn state(f: &File, here: &str) -> &'static str {
    let writer = Writer {
        host: f.host.clone(),
        pid: f.pid,
        start: f.start_ticks,
    };
    match writer.state(here) {
        State::Elsewhere => "elsewhere",
        // A final file from a live process: it left through exec and runs on (or has not
        // quite ended yet); either way it is there.
        State::Running => "running",
        State::Gone if f.finished => "exited",
        State::Gone => "gone",
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Every status file in `dir`, oldest process first; unreadable files are said on stderr.
fn read_dir(dir: &Path) -> Result<Vec<Process>> {
    let rd = match std::fs::read_dir(dir) {
        // Nothing has run under the interposer with this folder yet.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other,
    };
    let rd = rd.map_err(|e| {
        Error::failed(format!(
            "{}: {e} (the interposer's miss folder: set TUNEDBLAS_MISS_DIR or name the folder)",
            dir.display()
        ))
    })?;
    let here = tunedblas_core::process::host_name();
    let now = now_ms();
    let mut out = Vec::new();
    for e in rd.flatten() {
        let path = e.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !name.ends_with(".status.json") {
            continue;
        }
        let parsed = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<File>(&b).map_err(|e| e.to_string()));
        let status = match parsed {
            Ok(s) => s,
            Err(why) => {
                eprintln!("tunedblas status: {}: skipped: {why}", path.display());
                continue;
            }
        };
        out.push(Process {
            file: path,
            state: state(&status, &here),
            age_s: now.saturating_sub(status.updated_unix_ms) as f64 / 1000.0,
            status,
        });
    }
    out.sort_by_key(|p| (p.status.start_ticks, p.status.pid));
    Ok(out)
}

/// Removes the `.prom` files of processes not running: each beside its status file, under
/// the same process name (host, pid, start and the random part that tells apart two
/// processes sharing the first three).
fn prune(procs: &[Process]) -> Result<usize> {
    let mut n = 0;
    for p in procs
        .iter()
        .filter(|p| p.state == "exited" || p.state == "gone")
    {
        let name = p.file.to_string_lossy();
        let prom =
            std::path::PathBuf::from(format!("{}.prom", name.trim_end_matches(".status.json")));
        match std::fs::remove_file(&prom) {
            Ok(()) => n += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::failed(format!("{}: {e}", prom.display()))),
        }
    }
    Ok(n)
}

fn age(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s ago")
    } else if s < 7200.0 {
        format!("{:.0} min ago", s / 60.0)
    } else {
        format!("{:.1} h ago", s / 3600.0)
    }
}

fn render(procs: &[Process]) -> String {
    let mut t = String::new();
    for p in procs {
        let s = &p.status;
        t.push_str(&format!(
            "{} pid {} (started at tick {}): {}, updated {}\n",
            s.host,
            s.pid,
            s.start_ticks,
            p.state,
            age(p.age_s)
        ));
        for b in &s.backends {
            let c = &b.counters;
            let calls = c.served + c.default + c.near + c.missed + c.passed_through + c.fallbacks;
            t.push_str(&format!(
                "  {}: {calls} calls: {} served, {} default, {} near, {} missed ({} shapes), {} passed through, {} fallbacks\n",
                b.backend, c.served, c.default, c.near, c.missed, b.missed_shapes, c.passed_through, c.fallbacks
            ));
            for r in &b.ranks {
                t.push_str(&format!(
                    "    rank {}: {} missed calls, {} shapes\n",
                    r.rank, r.missed_calls, r.missed_shapes
                ));
            }
            if !b.top_missed.is_empty() {
                t.push_str("    most called missed shapes:\n");
                for m in &b.top_missed {
                    t.push_str(&format!(
                        "      {:>10} calls  rank {}  {}\n",
                        m.calls, m.rank, m.shape
                    ));
                }
            }
        }
    }
    t
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::of_declared("status", cli(), args)?;
    let dir = a
        .positional
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(tunedblas_core::settings::miss_dir);
    let procs = read_dir(&dir)?;
    let pruned = if a.has("--prune") {
        Some(prune(&procs)?)
    } else {
        None
    };
    if a.has("--json") {
        crate::commands::print_json(&serde_json::json!({
            "dir": dir,
            "processes": procs,
        }));
        return Ok(());
    }
    if procs.is_empty() {
        println!(
            "no status files in {} (no process has run under the interposer with this miss folder)",
            dir.display()
        );
    } else {
        let running = procs.iter().filter(|p| p.state == "running").count();
        let n = procs.len();
        let plural = if n == 1 { "" } else { "es" };
        println!(
            "{}: {n} process{plural}, {running} running\n",
            dir.display()
        );
        print!("{}", render(&procs));
    }
    if let Some(n) = pruned {
        println!("removed {n} Prometheus files of processes not running");
    }
    Ok(())
}
