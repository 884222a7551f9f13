//! `tunedblas status`: the live counters of every process running under the interposer on
//! this machine, read from the status files it writes beside its miss log
//! (`<host>-<pid>-<start>.status.json`, `preload/src/status.rs` writes them).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tunedblas_core::process::{State, Writer};

use crate::args::{self, Args};
use crate::error::{Error, Result};

const ABOUT: &str = "\
Shows what the interposer is doing in every process that runs under it, live: per process
and backend the calls served (a tuned solution), Default (a Default row), near (a nearby
token count's solution), missed (no row, not served near), passed through (the caller's own
choice) and fallbacks (a tuned call failed, the caller's own was made), the hit rate
((served + Default + near) / every call not passed through), per rank (device) the missed
calls and shapes, and the most called missed shapes; then per backend the total over every
process listed. Read from the <host>-<pid>-<start>.status.json files the interposer writes in
its miss folder about once a second while counters move, and at exit: every figure is the
file's own (the totals are their sums), so it says what the summary line and the Prometheus
file say.

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
const OPTIONS: &str = "\
DIR      the miss folder (default $TUNEDBLAS_MISS_DIR, else the user cache's misses/, as the interposer)
--json   every process's counters as JSON
--prune  remove the Prometheus files (.prom) of processes not running, so node-exporter's textfile collector stops exporting them
";

pub fn cli() -> clap::Command {
    args::command("status", ABOUT, AFTER).args(args::table(OPTIONS))
}

/// One backend's part of a status file, as the interposer writes it (`preload/src/tally.rs`
/// says what each figure means). `calls`, `near_shapes` and `hit_rate` are absent from the
/// files of interposers older than issue 26.
#[derive(Deserialize, Serialize, Clone, Debug, Default)]
pub struct BackendStatus {
    pub backend: String,
    pub counters: Counters,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    #[serde(default)]
    pub missed_shapes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_shapes: Option<u64>,
    /// A fraction, to a thousandth; `None` where no call was decided (or an older file).
    #[serde(default)]
    pub hit_rate: Option<f64>,
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

impl Counters {
    fn sum(&self) -> u64 {
        [
            self.default,
            self.near,
            self.missed,
            self.passed_through,
            self.fallbacks,
        ]
        .into_iter()
        .fold(self.served, u64::saturating_add)
    }

    /// Adds another file's counters (read from files anyone may write: without wrapping).
    fn add(&mut self, o: &Counters) {
        for (mine, theirs) in [
            (&mut self.served, o.served),
            (&mut self.default, o.default),
            (&mut self.near, o.near),
            (&mut self.missed, o.missed),
            (&mut self.passed_through, o.passed_through),
            (&mut self.fallbacks, o.fallbacks),
        ] {
            *mine = mine.saturating_add(theirs);
        }
    }

    /// The counts in a line, as the interposer's exit summary words them (`verify` too):
    /// the shapes near-served and missed where known, the hit rate in tenths of a percent.
    pub fn line(
        &self,
        calls: u64,
        near_shapes: Option<u64>,
        missed_shapes: Option<u64>,
        hit_permille: Option<u64>,
    ) -> String {
        let shapes = |n: Option<u64>| n.map_or(String::new(), |n| format!(" ({n} shapes)"));
        format!(
            "{calls} calls: {} served, {} default, {} near{}, {} missed{}, {} passed through, {} fallbacks; {}",
            self.served,
            self.default,
            self.near,
            shapes(near_shapes),
            self.missed,
            shapes(missed_shapes),
            self.passed_through,
            self.fallbacks,
            match hit_permille {
                Some(p) => format!("hit rate {}.{}%", p / 10, p % 10),
                None => "no hit rate (no call decided)".into(),
            }
        )
    }

    /// The hit rate in tenths of a percent, by the interposer's own rule and rounding
    /// (`preload/src/tally.rs`, `hit_permille`): for the totals, which no file holds.
    fn hit_permille(&self) -> Option<u64> {
        let (hit, decided) = (
            u128::from(self.served) + u128::from(self.default) + u128::from(self.near),
            u128::from(self.missed) + u128::from(self.fallbacks),
        );
        let decided = hit + decided;
        (decided > 0).then(|| ((hit * 1000 + decided / 2) / decided) as u64)
    }
}

impl BackendStatus {
    /// The calls as the file says them (older files: the sum of their outcomes).
    fn calls(&self) -> u64 {
        self.calls.unwrap_or_else(|| self.counters.sum())
    }

    /// The file's hit rate in tenths of a percent: the interposer wrote it to a thousandth.
    fn hit_permille(&self) -> Option<u64> {
        self.hit_rate.map(|r| (r * 1000.0).round() as u64)
    }
}

/// One backend over every process listed: the sums of their files' figures.
#[derive(Serialize, Debug, Default)]
struct Total {
    backend: String,
    processes: usize,
    counters: Counters,
    calls: u64,
    /// Over the summed counters, as the interposer computes a process's.
    hit_rate: Option<f64>,
}

/// Per backend, in the order they first appear.
fn totals(procs: &[Process]) -> Vec<Total> {
    let mut out: Vec<Total> = Vec::new();
    for b in procs.iter().flat_map(|p| &p.status.backends) {
        let i = match out.iter().position(|t| t.backend == b.backend) {
            Some(i) => i,
            None => {
                out.push(Total {
                    backend: b.backend.clone(),
                    ..Total::default()
                });
                out.len() - 1
            }
        };
        let t = &mut out[i];
        t.processes += 1;
        t.counters.add(&b.counters);
        t.calls = t.calls.saturating_add(b.calls());
    }
    for t in &mut out {
        t.hit_rate = t.counters.hit_permille().map(|p| p as f64 / 1000.0);
    }
    out
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
    pub backends: Vec<BackendStatus>,
    /// A library the process loaded itself, whose calls never reached the interposer (a
    /// caller looking its functions up in its own `dlopen` handle: Python ctypes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unseen: Option<String>,
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

/// The name of the user `uid`, where the system knows it.
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: a zeroed passwd is a valid out-structure; the buffer outlives the call and
    // its size is given.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r left a NUL-terminated name in `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// What to do when `what` (the miss folder or its status files) cannot be read: the
/// interposer keeps its files to the user it runs as (folder 0700 by default, files 0600,
/// by design: RELIABILITY.md), so a service's folder is read as that user, not by naming
/// another folder.
fn denied_advice(dir: &Path, owner_of: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(owner_of) else {
        return "run tunedblas status as the user the served process runs as".into();
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let mode = meta.mode() & 0o7777;
    if meta.uid() == me {
        return format!(
            "it is yours, but its mode {mode:04o} does not let you read it (chmod u+rwx {})",
            dir.display()
        );
    }
    let owner = user_name(meta.uid()).unwrap_or_else(|| meta.uid().to_string());
    let exe = std::env::current_exe()
        .ok()
        .map_or_else(|| "tunedblas".into(), |p| p.display().to_string());
    format!(
        "it belongs to user '{owner}' (mode {mode:04o}): the interposer keeps its files to the user it runs as; read them as that user: sudo -u {owner} {exe} status {}",
        dir.display()
    )
}

/// Every status file in `dir`, oldest process first; unreadable files are said on stderr.
fn read_dir(dir: &Path) -> Result<Vec<Process>> {
    let rd = match std::fs::read_dir(dir) {
        // Nothing has run under the interposer with this folder yet.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other,
    };
    let rd = rd.map_err(|e| {
        let advice = if e.kind() == std::io::ErrorKind::PermissionDenied {
            denied_advice(dir, dir)
        } else {
            "the interposer's miss folder: set TUNEDBLAS_MISS_DIR or name the folder".into()
        };
        Error::failed(format!("{}: {e}: {advice}", dir.display()))
    })?;
    let here = tunedblas_core::process::host_name();
    let now = now_ms();
    let mut out = Vec::new();
    let mut denied: Vec<PathBuf> = Vec::new();
    for e in rd.flatten() {
        let path = e.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !name.ends_with(".status.json") {
            continue;
        }
        // A status file is small; a FIFO, a device or a huge file planted under the name
        // (a miss folder is written by every process) blocked or exhausted the command.
        let limit = tunedblas_core::profile::MAX_JSON_FILE_BYTES;
        let bytes = match tunedblas_core::profile::read_regular(&path, limit) {
            Err(tunedblas_core::profile::ReadError::Io(e))
                if e.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                denied.push(path);
                continue;
            }
            other => other.map_err(|e| e.to_string()),
        };
        let parsed =
            bytes.and_then(|b| serde_json::from_slice::<File>(&b).map_err(|e| e.to_string()));
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
    if let Some(first) = denied.first() {
        let what = format!(
            "{}: {} of {} status files cannot be read: {}",
            dir.display(),
            denied.len(),
            denied.len() + out.len(),
            denied_advice(dir, first)
        );
        if out.is_empty() {
            return Err(Error::failed(what));
        }
        eprintln!("tunedblas status: {what}");
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
        if let Some(lib) = &s.unseen {
            t.push_str(&format!(
                "  {lib} was loaded but no call reached the interposer: the process opened it with its own dlopen, so its calls bypass every preload (README, \"What the interposer does\", Resolution)\n"
            ));
        }
        for b in &s.backends {
            let line = b.counters.line(
                b.calls(),
                b.near_shapes,
                Some(b.missed_shapes),
                b.hit_permille(),
            );
            t.push_str(&format!("  {}: {line}\n", b.backend));
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
    let totals = totals(procs);
    if !totals.is_empty() {
        let n = procs.len();
        t.push_str(&format!(
            "\ntotal over {n} process{}:\n",
            if n == 1 { "" } else { "es" }
        ));
    }
    for x in &totals {
        let c = &x.counters;
        t.push_str(&format!(
            "  {} ({} process{}): {}\n",
            x.backend,
            x.processes,
            if x.processes == 1 { "" } else { "es" },
            c.line(x.calls, None, None, c.hit_permille())
        ));
    }
    t
}

pub fn run(a: &Args) -> Result<()> {
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
            "totals": totals(&procs),
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
