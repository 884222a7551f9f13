//! `tunedblas tune`: a campaign from recorded shapes to a curated, qualified profile for the
//! exact library build that was loaded.
//!
//! Shapes are tuned one worker per device. Each finished shape is appended to a checkpoint
//! in the profile folder and synced before the next starts, so a killed campaign resumes
//! where it stopped; the profile itself is written once, at the end, in one store
//! transaction with its record. One campaign per profile runs at a time (the folder's
//! `.campaign.lock`): a second `tune` of it waits, then reads what the first left.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tunedblas_core::key::ProblemKey;
use tunedblas_core::tunableop::{self, KeyParse, ResultsFile, Row, Solution};

use crate::backend::Library;
use crate::curate::{Decision, Rules};
use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::qualify;
use crate::shapes::{self, shape_label, Shape};
use crate::store::{self, Build, Folder, Store};
use crate::tune::{self, Method, Tuned};

pub struct Options {
    pub lib: PathBuf,
    pub hip: Option<PathBuf>,
    pub profiles: PathBuf,
    pub name: Option<String>,
    pub arch: Option<String>,
    pub inputs: Vec<PathBuf>,
    pub specs: Vec<String>,
    /// Also re-tune every row the build's profile has.
    pub retune: bool,
    pub devices: Vec<i32>,
    /// (i, n): tune only the shapes with index % n == i.
    pub shard: Option<(usize, usize)>,
    /// Discard an unfinished campaign with other inputs instead of refusing.
    pub fresh: bool,
    /// Rank files to write; None: one per device the runtime sees.
    pub ranks: Option<usize>,
    pub method: Method,
    pub rules: Rules,
    pub json: bool,
    /// Print nothing but errors (the caller reports).
    pub quiet: bool,
}

/// One finished shape: what the checkpoint holds, one JSON line each.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    /// `op_name,params_signature` of the shape.
    pub shape: String,
    pub calls: u64,
    pub device: i32,
    pub tuned: Option<Tuned>,
    /// Why the shape could not be tuned.
    pub error: Option<String>,
    /// Why an adopted solution failed qualification (the adoption is then undone).
    pub rejected: Option<String>,
}

/// The key of an `op_name,params_signature` line.
fn parse_shape(text: &str) -> Option<ProblemKey> {
    let (op, sig) = text.trim().split_once(',')?;
    match tunableop::parse_key(op, sig) {
        KeyParse::Key(k) => Some(k),
        _ => None,
    }
}

impl Outcome {
    pub fn key(&self) -> Option<ProblemKey> {
        parse_shape(&self.shape)
    }

    /// The decision as reported: a qualification failure or an error wins.
    pub fn decision_word(&self) -> &'static str {
        if self.error.is_some() {
            "failed"
        } else if self.rejected.is_some() {
            "rejected"
        } else {
            self.tuned
                .as_ref()
                .map_or("failed", |t| t.verdict.decision.word())
        }
    }
}

/// The first checkpoint line: what the campaign was started with. A rerun resumes the
/// checkpoint when `build` and `shapes` are the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub started: String,
    /// The library build (its sha256, and for `lt tune` the rank).
    pub build: String,
    /// Every shape of this campaign (after sharding), in order.
    pub shapes: Vec<String>,
    /// The command line that started it and the folder it ran in, so that a `tune` with
    /// other inputs, which must refuse, can say exactly what to rerun (absent in
    /// checkpoints of older builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
}

impl Header {
    /// The header of a campaign this process starts now, with its own command line.
    pub fn new(build: String, shapes: Vec<String>) -> Header {
        Header {
            started: store::utc_now(),
            build,
            shapes,
            command: Some(invocation(std::env::args())),
            dir: std::env::current_dir().ok(),
        }
    }

    /// What to run to finish this campaign: its command, in its folder.
    fn rerun(&self) -> Option<String> {
        let command = self.command.as_deref()?;
        Some(match &self.dir {
            Some(d) => format!("cd {} && {command}", shell_word(&d.to_string_lossy())),
            None => command.to_string(),
        })
    }
}

/// A command line as a shell reads it back: `tunedblas` and the arguments, each quoted
/// where it needs to be (the program's own path is left out: the user's shell finds it).
fn invocation(args: impl Iterator<Item = String>) -> String {
    std::iter::once("tunedblas".to_string())
        .chain(args.skip(1).map(|a| shell_word(&a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `w` as one POSIX shell word: unchanged when it is plain, else single-quoted.
fn shell_word(w: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:,=+@%".contains(c);
    if !w.is_empty() && w.chars().all(plain) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// Counts of a finished campaign.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    pub shapes: usize,
    pub new: usize,
    pub replaced: usize,
    pub kept: usize,
    pub dropped: usize,
    pub default: usize,
    pub undecidable: usize,
    pub rejected: usize,
    pub failed: usize,
}

/// What `tune` produced.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub profile: String,
    pub dir: PathBuf,
    pub sha256: String,
    pub rocblas: String,
    pub rows: usize,
    pub counts: Counts,
    pub resumed: usize,
    pub seconds: f64,
    pub pruning_saved_s: f64,
    pub outcomes: Vec<Outcome>,
}

fn key_text(k: &ProblemKey) -> String {
    let (op, sig) = tunableop::op_and_signature(k);
    format!("{op},{sig}")
}

fn checkpoint_path(dir: &Path) -> PathBuf {
    dir.join(".campaign.partial.jsonl")
}

/// Reads an unfinished campaign's checkpoint: its header and the shapes it finished. A
/// torn last line (killed mid-write) is ignored; that shape is simply tuned again.
fn read_checkpoint<O: DeserializeOwned>(path: &Path) -> Result<Option<(Header, Vec<O>)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::failed(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let mut lines = text.lines();
    let Some(header) = lines
        .next()
        .and_then(|l| serde_json::from_str::<Header>(l).ok())
    else {
        return Ok(None);
    };
    let done = lines
        .filter_map(|l| serde_json::from_str::<O>(l).ok())
        .collect();
    Ok(Some((header, done)))
}

/// The refusal of a campaign whose profile folder holds another one, unfinished: what to
/// rerun to finish that one, or how to discard it.
fn unfinished(path: &Path, old: &Header, done: usize) -> Error {
    let what = format!(
        "an unfinished campaign of other shapes ({done} of {} done) is in {}",
        old.shapes.len(),
        path.display()
    );
    let finish = match old.rerun() {
        Some(cmd) => format!("to finish it, rerun the command that started it:\n    {cmd}"),
        None => "to finish it, rerun the command that started it (with the same inputs)".into(),
    };
    Error::failed(format!(
        "{what}\n{finish}\nor discard it: add --fresh to this command"
    ))
}

/// Appends one line and syncs it: after this returns the shape survives a kill.
fn append_line(file: &mut std::fs::File, line: &str, path: &Path) -> Result<()> {
    file.write_all(format!("{line}\n").as_bytes())
        .and_then(|_| file.sync_data())
        .map_err(|e| {
            Error::failed(format!(
                "cannot write the checkpoint {}: {e}",
                path.display()
            ))
        })
}

fn fmt_ms(x: Option<f64>) -> String {
    x.filter(|v| v.is_finite())
        .map_or("-".into(), |v| format!("{v:.4}"))
}

fn table_header() -> String {
    format!(
        "{:<24} {:<6} {:>8} {:>8} {:>8} {:>7} {:>6} {:<11} reason",
        "shape", "M", "heur ms", "cur ms", "new ms", "delta", "spread", "decision"
    )
}

fn outcome_line(o: &Outcome) -> String {
    let key = o.key();
    let label = key.as_ref().map_or(o.shape.clone(), shape_label);
    let m = key.map_or(0, |k| k.n);
    match (&o.tuned, &o.error) {
        (_, Some(e)) => format!("{label:<24} {m:<6} {:>42} failed      {e}", ""),
        (Some(t), None) => {
            let v = &t.verdict;
            format!(
                "{label:<24} {m:<6} {:>8} {:>8} {:>8} {:>7} {:>6} {:<11} {}",
                fmt_ms(Some(v.heuristic_ms)),
                fmt_ms(v.current_ms),
                fmt_ms(v.new_ms),
                v.delta
                    .filter(|d| d.is_finite())
                    .map_or("-".into(), |d| format!("{:+.1}%", d * 100.0)),
                if v.spread.is_finite() {
                    format!("{:.1}%", v.spread * 100.0)
                } else {
                    "-".into()
                },
                o.decision_word(),
                o.rejected.as_deref().unwrap_or(&v.reason)
            )
        }
        (None, None) => format!("{label:<24} {m:<6} {:>42} failed", ""),
    }
}

/// Tunes shapes on one device until the queue is empty.
fn worker(
    lib: &Library,
    device: i32,
    queue: &[Shape],
    next: &AtomicUsize,
    current: &HashMap<ProblemKey, Solution>,
    opts: &Options,
    tx: mpsc::Sender<Outcome>,
) {
    let ready = lib.set_device(device);
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(shape) = queue.get(i) else { break };
        let mut outcome = Outcome {
            shape: key_text(&shape.key),
            calls: shape.calls,
            device,
            tuned: None,
            error: None,
            rejected: None,
        };
        match &ready {
            Err(e) => outcome.error = Some(e.message.clone()),
            Ok(()) => match tune::tune(
                lib,
                shape.key,
                current.get(&shape.key),
                &opts.method,
                &opts.rules,
            ) {
                Ok(t) => outcome.tuned = Some(t),
                Err(e) => outcome.error = Some(e.message),
            },
        }
        if tx.send(outcome).is_err() {
            break;
        }
    }
}

/// The shapes of a campaign: the inputs, plus the profile's own rows with `--retune`,
/// sorted, then sharded. No shapes at all is an error, unless the profile has rows for
/// every shape of the inputs already: then there is nothing to do.
fn plan(opts: &Options, folder: &Folder, results: &ResultsFile) -> Result<shapes::Collected> {
    let spec_refs: Vec<&str> = opts.specs.iter().map(String::as_str).collect();
    let mut inputs = opts.inputs.clone();
    // Nothing named: the shapes the interposer recorded, where it records them (as `misses`).
    if inputs.is_empty() && spec_refs.is_empty() && !opts.retune {
        let dir = tunedblas_core::settings::miss_dir();
        if dir.is_dir() {
            if !opts.quiet && !opts.json {
                println!(
                    "no inputs named: tuning the misses recorded in {}",
                    dir.display()
                );
            }
            inputs.push(dir);
        }
    }
    let imported = folder.dir.join(store::IMPORTED_FILE);
    if opts.retune && imported.is_file() {
        inputs.push(imported);
    }
    let mut collected = shapes::collect(&inputs, &spec_refs)?;
    // Shapes from the inputs that the profile serves already (tuned since they were
    // recorded) are not tuned again unless asked: --retune, or by name with --shape.
    let mut served = 0;
    if !opts.retune {
        let named: HashSet<ProblemKey> = shapes::collect(&[], &spec_refs)?
            .shapes
            .iter()
            .map(|s| s.key)
            .collect();
        let rows: HashSet<ProblemKey> = results.rows.iter().map(|r| r.key).collect();
        let before = collected.shapes.len();
        collected
            .shapes
            .retain(|s| named.contains(&s.key) || !rows.contains(&s.key));
        served = before - collected.shapes.len();
    }
    if opts.retune {
        let known: HashSet<ProblemKey> = collected.shapes.iter().map(|s| s.key).collect();
        for r in results.rows.iter().filter(|r| !known.contains(&r.key)) {
            collected.shapes.push(Shape {
                key: r.key,
                calls: 0,
            });
        }
        collected.sources.push(format!("--retune {}", folder.name));
    }
    if !opts.quiet && !collected.skipped.is_empty() {
        eprintln!(
            "tunedblas: skipped {} input lines that name no servable shape; the first: {}",
            collected.skipped.len(),
            collected.skipped[0]
        );
    }
    collected.shapes.sort_by_key(|s| key_text(&s.key));
    if let Some((i, n)) = opts.shard {
        let all = std::mem::take(&mut collected.shapes);
        collected.shapes = all
            .into_iter()
            .enumerate()
            .filter(|(j, _)| j % n == i)
            .map(|(_, s)| s)
            .collect();
    }
    if collected.shapes.is_empty() && served == 0 {
        return Err(Error::failed(
            "no shapes to tune: give miss logs, untuned or results files, --shape, or --retune (with none, the miss folder $TUNEDBLAS_MISS_DIR or ~/.cache/tunedblas/misses is read)",
        ));
    }
    if served > 0 && !opts.quiet && !opts.json {
        // Said once, whether some shapes are left to tune or none (a success: coverage
        // is complete, which a nightly `tune` must not report as a failure).
        println!(
            "{}{served} shapes of the inputs have rows in profile '{}' already{} (--retune measures them again)",
            if collected.shapes.is_empty() { "nothing to tune: all " } else { "" },
            folder.name,
            if collected.shapes.is_empty() { "" } else { ": not tuned again" },
        );
    }
    Ok(collected)
}

/// The append-only, synced record of finished shapes that makes a campaign resumable: one
/// [`Header`] line, then one JSON line per finished shape (`tune`'s [`Outcome`], `lt
/// tune`'s own), in the profile folder. Hold [`lock_campaign`] while it is open.
pub struct Checkpoint {
    path: PathBuf,
    file: std::fs::File,
    pub started: String,
}

impl Checkpoint {
    /// Opens the checkpoint in the profile folder `dir` for `header`: resumes it when it
    /// was started with the same build and shapes (returning what it finished), else starts
    /// afresh, which an unfinished campaign with other shapes allows only with `fresh`.
    pub fn open<O: DeserializeOwned>(
        dir: &Path,
        header: Header,
        fresh: bool,
    ) -> Result<(Checkpoint, Vec<O>)> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::failed(format!("cannot create {}: {e}", dir.display())))?;
        let path = checkpoint_path(dir);
        let (started, done) = match read_checkpoint(&path)? {
            Some((old, done)) if old.build == header.build && old.shapes == header.shapes => {
                (old.started, done)
            }
            Some((old, done)) if !fresh => return Err(unfinished(&path, &old, done.len())),
            _ => (header.started.clone(), vec![]),
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::failed(format!("cannot open {}: {e}", path.display())))?;
        if done.is_empty() {
            file.set_len(0)
                .map_err(|e| Error::failed(format!("cannot reset {}: {e}", path.display())))?;
            let h = Header {
                started: started.clone(),
                ..header
            };
            append_line(
                &mut file,
                &serde_json::to_string(&h).expect("plain struct"),
                &path,
            )?;
        }
        Ok((
            Checkpoint {
                path,
                file,
                started,
            },
            done,
        ))
    }

    pub fn append<O: Serialize>(&mut self, o: &O) -> Result<()> {
        append_line(
            &mut self.file,
            &serde_json::to_string(o).expect("plain struct"),
            &self.path,
        )
    }

    /// The finished checkpoint becomes the campaign's full record in `campaigns/`, under a
    /// name no earlier record has (two campaigns can start in one second).
    pub fn retire(self, dir: &Path) {
        let dir = dir.join("campaigns");
        let _ = std::fs::create_dir_all(&dir);
        let stem = self.started.replace(':', "");
        let mut record = dir.join(format!("{stem}.jsonl"));
        // No other campaign of this folder runs meanwhile (the campaign lock).
        for n in 2..1000 {
            if !record.exists() {
                break;
            }
            record = dir.join(format!("{stem}-{n}.jsonl"));
        }
        if std::fs::rename(&self.path, &record).is_err() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Takes the profile folder's campaign lock (`.campaign.lock`, `flock`), waiting while
/// another `tune` of the profile holds it; released when the returned file is dropped, or
/// by the kernel when the process dies. A campaign owns the folder's one checkpoint, so
/// two at once would mix their shapes in it; waiting instead lets both finish, in turn.
pub fn lock_campaign(folder: &Folder, quiet: bool) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(&folder.dir)
        .map_err(|e| Error::failed(format!("cannot create {}: {e}", folder.dir.display())))?;
    let path = folder.dir.join(".campaign.lock");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| Error::failed(format!("cannot open {}: {e}", path.display())))?;
    let flock = |how| loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    match flock(libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            if !quiet {
                eprintln!(
                    "tunedblas: another tune of '{}' is running; waiting for it to finish ({})",
                    folder.name,
                    path.display()
                );
            }
            flock(libc::LOCK_EX)
                .map_err(|e| Error::failed(format!("cannot lock {}: {e}", path.display())))?;
        }
        Err(e) => {
            return Err(Error::failed(format!(
                "cannot lock {}: {e}",
                path.display()
            )))
        }
    }
    Ok(file)
}

/// Qualifies every adoption on every device; a failure undoes the adoption.
fn qualify_adoptions(lib: &Library, done: &mut [Outcome], devices: &[i32]) {
    for o in done.iter_mut() {
        let adopted = o
            .tuned
            .as_ref()
            .filter(|t| t.verdict.decision == Decision::Adopt)
            .and_then(|t| match t.verdict.row {
                Some(Solution::Rocblas(id)) => Some(id),
                _ => None,
            });
        if let (Some(id), Some(key), None) = (adopted, o.key(), &o.rejected) {
            if let Err(why) = qualify::qualify(lib, key, id, devices) {
                o.rejected = Some(format!("solution {id} failed qualification {why}"));
            }
        }
    }
}

/// Applies the verdicts to the profile's rows; returns the counts and the estimated time
/// pruning saved.
fn apply(
    done: &[Outcome],
    current: &HashMap<ProblemKey, Solution>,
    results: &mut ResultsFile,
) -> (Counts, f64) {
    let mut counts = Counts {
        shapes: done.len(),
        ..Counts::default()
    };
    let mut saved = 0.0;
    for o in done {
        let Some(key) = o.key() else { continue };
        let Some(t) = &o.tuned else {
            counts.failed += 1;
            continue;
        };
        saved += t.pruning_saved_s;
        if o.rejected.is_some() {
            counts.rejected += 1;
            continue; // what was there stays
        }
        let v = &t.verdict;
        match v.decision {
            Decision::Adopt if matches!(current.get(&key), Some(Solution::Rocblas(_))) => {
                counts.replaced += 1
            }
            Decision::Adopt => counts.new += 1,
            Decision::Keep => counts.kept += 1,
            Decision::Drop => counts.dropped += 1,
            Decision::Default => counts.default += 1,
            Decision::Undecidable => counts.undecidable += 1,
        }
        let time = match v.decision {
            Decision::Adopt => v.new_ms,
            Decision::Keep | Decision::Undecidable => v.current_ms.or(Some(v.heuristic_ms)),
            _ => Some(v.heuristic_ms),
        };
        results.rows.retain(|r| r.key != key);
        if let Some(sol) = &v.row {
            results.rows.push(Row::new(key, sol.clone(), time));
        }
    }
    results.rows.sort_by_key(|r| key_text(&r.key));
    (counts, saved)
}

/// What provenance.json records of a campaign.
struct Record<'a> {
    opts: &'a Options,
    build: &'a Build,
    collected: &'a shapes::Collected,
    started: &'a str,
    devices: &'a [i32],
    qualified_on: &'a [i32],
    counts: &'a Counts,
    rows_after: usize,
    done: &'a [Outcome],
}

impl Record<'_> {
    fn json(&self) -> Value {
        let build = self.build;
        json!({
            "kind": "tune",
            "started": self.started,
            "finished": store::utc_now(),
            "library": build.path.file_name().map(|f| f.to_string_lossy().into_owned()),
            "sources": self.collected.sources,
            "imported": self.collected.imported.iter().map(|(file, version, rows)| json!({
                "file": file,
                "rocblas": version,
                "rows": rows,
                "ids": if version.as_deref() == Some(build.version.as_str()) {
                    "not reused: current rows come from this build's profile"
                } else {
                    "not reused: tuned on another build"
                },
            })).collect::<Vec<Value>>(),
            "shard": self.opts.shard.map(|(i, n)| format!("{i}/{n}")),
            "devices": self.devices,
            "qualified_on": self.qualified_on,
            "method": self.opts.method,
            "rules": {
                "margin": self.opts.rules.margin,
                "keep_default": self.opts.rules.keep_default,
                "text": self.opts.rules.describe(),
            },
            "counts": self.counts,
            "rows_after": self.rows_after,
            "shapes": self.done.iter().map(|o| {
                let v = o.tuned.as_ref().map(|t| &t.verdict);
                json!({
                    "shape": o.shape,
                    "calls": o.calls,
                    "decision": o.decision_word(),
                    "reason": o.error.clone().or(o.rejected.clone()).or(v.map(|v| v.reason.clone())),
                    "heuristic_ms": v.map(|v| v.heuristic_ms),
                    "current_ms": v.and_then(|v| v.current_ms),
                    "new_ms": v.and_then(|v| v.new_ms),
                    "delta": v.and_then(|v| v.delta),
                    "spread": v.map(|v| v.spread).filter(|s| s.is_finite()),
                    "row": v.and_then(|v| v.row.as_ref()).map(|s| s.to_string()),
                })
            }).collect::<Vec<Value>>(),
        })
    }
}

fn check_devices(opts: &Options, device_count: i32) -> Result<Vec<i32>> {
    let devices = if opts.devices.is_empty() {
        vec![0]
    } else {
        opts.devices.clone()
    };
    if let Some(d) = devices.iter().find(|&&d| d < 0 || d >= device_count) {
        return Err(Error::no_device(format!(
            "--devices names device {d}, but the runtime sees {device_count} (0..{})",
            device_count - 1
        )));
    }
    Ok(devices)
}

/// The campaign's opening lines: what, where, resumed from where, and the rules.
fn announce(
    opts: &Options,
    build: &Build,
    devices: &[i32],
    folder: &Folder,
    total: usize,
    resumed: usize,
    to_go: usize,
) {
    println!(
        "tuning {} shapes for rocBLAS {} (build {}) on device{} {} -> {}",
        total,
        build.version,
        build.short(),
        if devices.len() > 1 { "s" } else { "" },
        devices
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(","),
        folder.dir.display()
    );
    if resumed > 0 {
        println!(
            "resuming: {resumed} of {} shapes were finished before; {} to go",
            total, to_go
        );
    }
    if opts.method.rest > 0.0 {
        println!("timing: {}", crate::rest::words(opts.method.rest));
    }
    println!("rules:");
    for r in opts.rules.describe() {
        println!("  - {r}");
    }
    println!("\n          {}", table_header());
}

/// The shapes left to tune and what the workers tune them with.
struct Work<'a> {
    lib: &'a Library,
    devices: &'a [i32],
    queue: &'a [Shape],
    /// The profile's rows before the campaign, for the current-row timings.
    current: &'a HashMap<ProblemKey, Solution>,
    opts: &'a Options,
    /// Shapes in the campaign, and those finished before a resume, for the progress lines.
    total: usize,
    resumed: usize,
    human: bool,
}

/// Tunes the queue, one worker per device, checkpointing each outcome as it arrives.
fn tune_queue(w: &Work, checkpoint: &mut Checkpoint, done: &mut Vec<Outcome>) -> Result<()> {
    let Work {
        lib,
        devices,
        queue,
        current,
        opts,
        ..
    } = *w;
    let mut progress = Progress::new(w.total, w.resumed, !opts.quiet);
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| -> Result<()> {
        for &d in devices {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || worker(lib, d, queue, next, current, opts, tx));
        }
        drop(tx);
        for outcome in rx {
            checkpoint.append(&outcome)?;
            progress.advance(&outcome.key().map_or(outcome.shape.clone(), |k| {
                format!("{} M={}", shape_label(&k), k.n)
            }));
            if w.human {
                progress.println(&format!(
                    "[{:>3}/{}] {}",
                    progress.done(),
                    w.total,
                    outcome_line(&outcome)
                ));
            }
            done.push(outcome);
        }
        Ok(())
    })?;
    progress.finish();
    Ok(())
}

/// Runs a campaign; see the module docs.
pub fn run(opts: &Options) -> Result<Summary> {
    let started = Instant::now();
    let lib = Library::load(&opts.lib, opts.hip.as_deref())?;
    let device_count = lib.device_count()?;
    let devices = check_devices(opts, device_count)?;
    let mut build = Build::of(&lib.file, lib.version(), opts.arch.as_deref())?;
    let store = Store::open(&opts.profiles)?;
    let folder = store.folder_for(&build, opts.name.as_deref())?;
    // One campaign per profile at a time, from here to the end: the next one reads the
    // rows and the checkpoint this one leaves.
    let _campaign = lock_campaign(&folder, opts.quiet)?;
    let results = store.read_rows(&folder)?;
    if opts.arch.is_none() {
        if let Some(a) = results.validator("GCN_ARCH_NAME") {
            build.arch = a.to_string();
        }
    }
    let current: HashMap<ProblemKey, Solution> = results
        .rows
        .iter()
        .map(|r| (r.key, r.solution.clone()))
        .collect();
    let collected = plan(opts, &folder, &results)?;
    let shapes = &collected.shapes;
    if shapes.is_empty() {
        return Ok(Summary {
            profile: folder.name.clone(),
            dir: folder.dir.clone(),
            sha256: build.sha256.clone(),
            rocblas: build.version.clone(),
            rows: results.rows.len(),
            counts: Counts::default(),
            resumed: 0,
            seconds: started.elapsed().as_secs_f64(),
            pruning_saved_s: 0.0,
            outcomes: vec![],
        });
    }
    let header = Header::new(
        build.sha256.clone(),
        shapes.iter().map(|s| key_text(&s.key)).collect(),
    );
    let (mut checkpoint, mut done): (Checkpoint, Vec<Outcome>) =
        Checkpoint::open(&folder.dir, header, opts.fresh)?;
    let resumed = done.len();
    let finished: HashSet<String> = done.iter().map(|o| o.shape.clone()).collect();
    let queue: Vec<Shape> = shapes
        .iter()
        .filter(|s| !finished.contains(&key_text(&s.key)))
        .cloned()
        .collect();

    let human = !opts.json && !opts.quiet;
    if human {
        announce(
            opts,
            &build,
            &devices,
            &folder,
            shapes.len(),
            resumed,
            queue.len(),
        );
    }

    // Tune, one worker per device; this thread checkpoints and reports.
    let work = Work {
        lib: &lib,
        devices: &devices,
        queue: &queue,
        current: &current,
        opts,
        total: shapes.len(),
        resumed,
        human,
    };
    tune_queue(&work, &mut checkpoint, &mut done)?;

    let qualified_on: Vec<i32> = (0..device_count).collect();
    let rejected_before = done.iter().filter(|o| o.rejected.is_some()).count();
    qualify_adoptions(&lib, &mut done, &qualified_on);
    if !opts.json {
        print_qualification(&done, rejected_before, device_count);
    }
    // Report in the seed's order: by (N, K) pair, then token count.
    done.sort_by_key(|o| {
        o.key()
            .map(|k| (k.types, k.trans_a, k.trans_b, k.m, k.k, k.n, k.batch))
    });
    let ranks = opts.ranks.unwrap_or(device_count.max(1) as usize);
    // The verdicts go into the rows as they are now (a merge or import may have changed
    // them while this campaign tuned), with the record, in one transaction.
    let (counts, saved, rows_after) = store.transaction(|tx| {
        let folder = tx.folder_for(&build, Some(&folder.name))?;
        let mut results = tx.rows(&folder)?;
        let (counts, saved) = apply(&done, &current, &mut results);
        tx.write_rows(&folder, &build, &mut results, ranks, "tuned")?;
        let record = Record {
            opts,
            build: &build,
            collected: &collected,
            started: &checkpoint.started,
            devices: &devices,
            qualified_on: &qualified_on,
            counts: &counts,
            rows_after: results.rows.len(),
            done: &done,
        };
        tx.record(&folder, &build, record.json())?;
        if opts.retune {
            // Tuned now, and recorded in provenance; shapes imported since stay waiting.
            let tuned: HashSet<ProblemKey> = done.iter().filter_map(Outcome::key).collect();
            let waiting = tx
                .imported(&folder)?
                .into_iter()
                .filter(|l| !matches!(parse_shape(l), Some(k) if tuned.contains(&k)))
                .collect();
            tx.set_imported(&folder, waiting);
        }
        Ok((counts, saved, results.rows.len()))
    })?;
    checkpoint.retire(&folder.dir);

    let summary = Summary {
        profile: folder.name.clone(),
        dir: folder.dir.clone(),
        sha256: build.sha256.clone(),
        rocblas: build.version.clone(),
        rows: rows_after,
        counts,
        resumed,
        seconds: started.elapsed().as_secs_f64(),
        pruning_saved_s: saved,
        outcomes: done,
    };
    if !opts.json {
        print_summary(&summary);
    }
    Ok(summary)
}

/// What qualification did to the adoptions, after the per-shape lines printed as each shape
/// finished: one line, and one more per adoption it rejected (the shape and why). Nothing
/// when there was nothing to qualify.
fn print_qualification(done: &[Outcome], rejected_before: usize, devices: i32) {
    let adopted = |o: &&Outcome| {
        o.tuned
            .as_ref()
            .is_some_and(|t| t.verdict.decision == Decision::Adopt)
    };
    let adoptions = done.iter().filter(adopted).count();
    if adoptions == 0 {
        return;
    }
    let rejected: Vec<&Outcome> = done
        .iter()
        .filter(adopted)
        .filter(|o| o.rejected.is_some())
        .collect();
    println!(
        "\nqualification on {devices} device{} against an f64 reference: {} of {adoptions} adoptions pass{}",
        if devices == 1 { "" } else { "s" },
        adoptions - rejected.len(),
        if rejected.len() > rejected_before {
            format!(", {} rejected (their rows stay as they were):", rejected.len())
        } else {
            String::new()
        }
    );
    for o in rejected {
        let label = o.key().map_or(o.shape.clone(), |k| {
            format!("{} M={}", shape_label(&k), k.n)
        });
        println!("  {label}: {}", o.rejected.as_deref().unwrap_or(""));
    }
}

/// The campaign's counts, the profile written and the time taken. The per-shape lines were
/// printed as each shape finished (not with --quiet); they are not printed again.
pub fn print_summary(s: &Summary) {
    let c = &s.counts;
    println!(
        "\n{} shapes: {} new, {} replaced, {} kept, {} dropped, {} default, {} undecidable, {} rejected by qualification, {} failed",
        c.shapes, c.new, c.replaced, c.kept, c.dropped, c.default, c.undecidable, c.rejected, c.failed
    );
    println!(
        "profile '{}' ({} rows per rank) for rocBLAS {} build {} in {}",
        s.profile,
        s.rows,
        s.rocblas,
        &s.sha256[..12],
        s.dir.display()
    );
    println!(
        "{:.1} s ({:.2} s per shape); pruning saved about {:.1} s",
        s.seconds,
        s.seconds / c.shapes.max(1) as f64,
        s.pruning_saved_s
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_to_rerun_reads_back_as_the_same_words() {
        let args = ["/opt/bin/tunedblas", "tune", "--lib", "/a b/lib.so", "it's"];
        assert_eq!(
            invocation(args.iter().map(|s| s.to_string())),
            r"tunedblas tune --lib '/a b/lib.so' 'it'\''s'"
        );
        assert_eq!(shell_word("f16:TN:8:8:8"), "f16:TN:8:8:8");
        assert_eq!(shell_word(""), "''");
        let h = Header {
            dir: Some("/x y".into()),
            ..Header::new("b".into(), vec![])
        };
        assert!(h.rerun().unwrap().starts_with("cd '/x y' && tunedblas"));
    }
}
