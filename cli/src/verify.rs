//! `tunedblas verify`: proves a profile is served. Every row is replayed, on every device,
//! by a child process running under `LD_PRELOAD=libtunedblas.so` that loads the library the
//! way a host does; the interposer's own counters must show every row hit, no miss and no
//! fallback.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::Store;
use tunedblas_tuner::backends::{Kind, Library as _};

pub struct Options {
    pub lib: PathBuf,
    /// The runtime `--hip` / `--cudart` name, for the Lt libraries.
    pub runtime: Option<PathBuf>,
    /// The workspace the replay gives each Lt call (a row needing more is not served).
    pub workspace: usize,
    pub profiles: PathBuf,
    /// The interposer; default: `libtunedblas.so` beside this binary.
    pub preload: Option<PathBuf>,
    pub json: bool,
}

/// The interposer's `TUNEDBLAS_STATS` file, as every backend writes it (`preload/src/tally.rs`
/// says what each count means): rocBLAS's (no `library`), cuBLASLt's or hipBLASLt's.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Stats {
    /// `cublaslt` or `hipblaslt`; absent in rocBLAS's file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    pub calls: u64,
    pub served: u64,
    pub default: u64,
    /// Calls served a nearby token count's row (rocBLAS): served, not missed.
    #[serde(default)]
    pub near: u64,
    #[serde(default)]
    pub near_shapes: u64,
    /// Calls with no row that were not served near.
    pub missed_calls: u64,
    pub missed_shapes: u64,
    #[serde(default)]
    pub hit_rate: Option<f64>,
    #[serde(default)]
    pub passed_through: u64,
    pub fallbacks: u64,
    #[serde(default)]
    pub rows: u64,
    #[serde(default)]
    pub rows_hit: u64,
    #[serde(default)]
    pub rows_not_hit: Vec<String>,
    #[serde(default)]
    pub rows_quarantined: Vec<String>,
    #[serde(default)]
    pub wildcard_rows: u64,
    #[serde(default)]
    pub wildcard_rows_not_hit: Vec<String>,
}

impl Stats {
    /// The stats file at `path`, where it is one.
    pub fn read(path: &Path) -> Option<Stats> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// `rocblas`, `cublaslt` or `hipblaslt`.
    pub fn backend(&self) -> &str {
        self.library.as_deref().unwrap_or("rocblas")
    }

    /// What keeps a run under the profile from being verified: a row never hit, a missed
    /// call, a fallback, a quarantined row. Near-served calls are served.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.rows_hit != self.rows {
            problems.push(format!(
                "{} of {} rows were never hit: {}",
                self.rows - self.rows_hit.min(self.rows),
                self.rows,
                self.rows_not_hit.join("; ")
            ));
        }
        if self.missed_calls > 0 {
            problems.push(format!(
                "{} calls missed ({} shapes with no row, not served near)",
                self.missed_calls, self.missed_shapes
            ));
        }
        problems.extend(self.refusals());
        problems
    }

    /// The rows whose solution the interposer refused: calls that fell back, and rows
    /// quarantined. Never right, whatever else a run may leave unserved (doctor's check).
    pub fn refusals(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.fallbacks > 0 {
            problems.push(format!(
                "{} calls fell back to the caller's own call: a row's solution was refused",
                self.fallbacks
            ));
        }
        if !self.rows_quarantined.is_empty() {
            problems.push(format!(
                "{} rows quarantined (they failed and are no longer served): {}",
                self.rows_quarantined.len(),
                self.rows_quarantined.join("; ")
            ));
        }
        problems
    }

    /// The counts in a line, as the exit summary words them.
    fn line(&self) -> String {
        let counters = crate::commands::status::Counters {
            served: self.served,
            default: self.default,
            near: self.near,
            missed: self.missed_calls,
            passed_through: self.passed_through,
            fallbacks: self.fallbacks,
        };
        let hit = self.hit_rate.map(|r| (r * 1000.0).round() as u64);
        let line = counters.line(
            self.calls,
            Some(self.near_shapes),
            Some(self.missed_shapes),
            hit,
        );
        format!("{line}; {} of {} rows hit", self.rows_hit, self.rows)
    }
}

/// One stats file checked by `verify --stats`.
#[derive(Debug, Serialize)]
pub struct StatsCheck {
    pub file: PathBuf,
    pub backend: String,
    pub stats: Stats,
    pub ok: bool,
    pub problems: Vec<String>,
    /// What is not wrong but worth knowing (near-served shapes, `*` rows never matched).
    pub notes: Vec<String>,
}

/// The stats files of one run: `path` and, beside it, the Lt backends' own
/// (`<path>.cublaslt.json`, `<path>.hipblaslt.json`, written there when rocBLAS ran too),
/// and for each, its fork children's (`<name>.<pid>`).
pub fn stats_files(path: &Path) -> Vec<PathBuf> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let listed: Vec<std::ffi::OsString> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let base = path.file_name().unwrap_or_default().to_os_string();
    let mut files = Vec::new();
    for suffix in ["", ".cublaslt.json", ".hipblaslt.json"] {
        let mut name = base.clone();
        name.push(suffix);
        let own = dir.join(&name);
        let mut others: Vec<(u64, PathBuf)> = listed
            .iter()
            .filter_map(|f| {
                let pid = f
                    .to_str()?
                    .strip_prefix(name.to_str()?)?
                    .strip_prefix('.')?;
                let pid = pid
                    .parse()
                    .ok()
                    .filter(|_| pid.bytes().all(|b| b.is_ascii_digit()))?;
                Some((pid, dir.join(f)))
            })
            .collect();
        others.sort();
        // The path itself is always checked (a missing one is said), the others where
        // they are.
        if suffix.is_empty() || own.is_file() {
            files.push(own);
        }
        files.extend(others.into_iter().map(|(_, p)| p));
    }
    files
}

/// `verify --stats`: every backend's `TUNEDBLAS_STATS` file of a run under the profile
/// (production, or any workload): every row hit, no missed call, no fallback. A call served
/// near is served (its shape is said, to be tuned for a row of its own).
pub fn check_stats(path: &Path) -> Result<Vec<StatsCheck>> {
    let mut out = Vec::new();
    for file in stats_files(path) {
        let text =
            std::fs::read(&file).map_err(|e| Error::failed(format!("{}: {e}", file.display())))?;
        let stats: Stats = serde_json::from_slice(&text).map_err(|e| {
            Error::failed(format!(
                "{}: not a TUNEDBLAS_STATS file of the interposer: {e}",
                file.display()
            ))
        })?;
        let mut problems = stats.problems();
        if stats.rows == 0 {
            problems.insert(
                0,
                "no profile row was loaded: the run had no profile for this build (its start line says why)".into(),
            );
        }
        let mut notes = Vec::new();
        if stats.near > 0 {
            notes.push(format!(
                "{} calls of {} shapes were served a nearby token count's row (counted as served; `tunedblas tune` on the miss folder gives them rows of their own)",
                stats.near, stats.near_shapes
            ));
        }
        if !stats.wildcard_rows_not_hit.is_empty() {
            notes.push(format!(
                "{} of {} `*` rows matched no call: {}",
                stats.wildcard_rows_not_hit.len(),
                stats.wildcard_rows,
                stats.wildcard_rows_not_hit.join("; ")
            ));
        }
        out.push(StatsCheck {
            file,
            backend: stats.backend().to_string(),
            ok: problems.is_empty(),
            problems,
            notes,
            stats,
        });
    }
    Ok(out)
}

/// Prints each file's check as `verify` does.
pub fn print_stats_checks(checks: &[StatsCheck]) {
    for c in checks {
        println!(
            "verify {} ({}): {} -> {}",
            c.file.display(),
            c.backend,
            c.stats.line(),
            if c.ok { "OK" } else { "FAILED" }
        );
        for p in &c.problems {
            println!("  - {p}");
        }
        for n in &c.notes {
            println!("  note: {n}");
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub profile: String,
    pub rows: usize,
    pub devices: i32,
    pub stats: Stats,
    pub ok: bool,
    /// What is wrong, in words (empty when ok).
    pub problems: Vec<String>,
}

/// What the replay child prints.
#[derive(Debug, Deserialize, Serialize)]
pub struct Replayed {
    pub calls: u64,
    pub failures: Vec<String>,
}

pub fn preload_path(given: Option<&Path>) -> Result<PathBuf> {
    match given {
        Some(p) if p.is_file() => Ok(p.to_path_buf()),
        Some(p) => Err(Error::failed(format!(
            "--preload {}: no such file",
            p.display()
        ))),
        None => tunedblas_tuner::dl::beside_exe("libtunedblas.so").ok_or_else(|| {
            Error::failed(
                "libtunedblas.so is not beside the tunedblas binary; pass --preload <path>",
            )
        }),
    }
}

/// This `tunedblas` as a child with the profile store `profiles` and the miss folder
/// `misses`, and nothing of the caller's interposer settings (a profile it names, the
/// interposer turned off, a mismatch allowed, a preload or a stats file of its own); under
/// the interposer `preload`, its counters written to `stats`, where given. `verify`'s
/// replay, `demo`'s workload and every `doctor` child are started here.
pub fn child(profiles: &Path, misses: &Path, preload: Option<(&Path, &Path)>) -> Result<Command> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::failed(format!("cannot find the tunedblas binary: {e}")))?;
    let mut c = Command::new(exe);
    c.env("TUNEDBLAS_PROFILE_DIR", profiles)
        .env("TUNEDBLAS_MISS_DIR", misses);
    for v in [
        "LD_PRELOAD",
        "TUNEDBLAS_PROFILE",
        "TUNEDBLAS_ALLOW_MISMATCH",
        "TUNEDBLAS_DISABLE",
        "TUNEDBLAS_STATS",
    ] {
        c.env_remove(v);
    }
    if let Some((preload, stats)) = preload {
        c.env("LD_PRELOAD", preload).env("TUNEDBLAS_STATS", stats);
    }
    Ok(c)
}

/// The replay of one build's profile: what the parent knows before the child runs.
struct Plan {
    kind: Kind,
    profile: String,
    short: String,
    devices: i32,
    /// The rows the child calls, as a results file, and how many.
    text: String,
    rows: usize,
}

/// The profile of `opts.lib`'s build, whichever library it is.
fn plan(opts: &Options) -> Result<Plan> {
    let kind = tunedblas_tuner::backends::kind_of(&opts.lib)?;
    let spec = tunedblas_tuner::backends::Spec {
        lib: Some(opts.lib.clone()),
        runtime: opts.runtime.clone(),
        arch: None,
    };
    let opened = tunedblas_tuner::backends::Opened::open(kind, &spec)?;
    tunedblas_tuner::with_library!(&opened, l => {
        // No device is said first (exit 4), before what the store holds.
        let devices = l.runtime().device_count()?;
        // Read only: a mistyped --profiles must not become an empty store.
        let store = Store::existing(&opts.profiles)?;
        let folder = store.existing_folder(l.build())?;
        let text = store.read_text(&folder)?;
        let rows = l
            .read(&text)
            .iter()
            .filter(|(_, s, _)| !matches!(l.row(s), tunedblas_tuner::curate::RowChoice::Foreign(_)))
            .count();
        Ok(Plan {
            kind,
            profile: folder.name,
            short: l.build().short().to_string(),
            devices,
            text,
            rows,
        })
    })
}

pub fn run(opts: &Options) -> Result<Report> {
    let plan = plan(opts)?;
    let (devices, build_short) = (plan.devices, plan.short.clone());
    if plan.rows == 0 {
        if !opts.json {
            println!(
                "verify '{}' for build {build_short}: the profile has no rows, nothing to replay -> OK",
                plan.profile,
            );
        }
        return Ok(Report {
            profile: plan.profile,
            rows: 0,
            devices,
            stats: Stats::default(),
            ok: true,
            problems: vec![],
        });
    }
    let scratch = std::env::temp_dir().join(format!("tunedblas-verify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)
        .map_err(|e| Error::failed(format!("cannot create {}: {e}", scratch.display())))?;
    let list = scratch.join("rows.csv");
    std::fs::write(&list, &plan.text)
        .map_err(|e| Error::failed(format!("cannot write {}: {e}", list.display())))?;
    let stats_path = scratch.join("stats.json");
    let preload = preload_path(opts.preload.as_deref())?;
    let mut child = child(
        &opts.profiles,
        &scratch.join("misses"),
        Some((&preload, &stats_path)),
    )?;
    child
        .arg("replay")
        .arg("--lib")
        .arg(&opts.lib)
        .arg("--rows")
        .arg(&list);
    if plan.kind != Kind::Rocblas {
        child.arg("--workspace").arg(opts.workspace.to_string());
        if let Some(rt) = &opts.runtime {
            child
                .arg(if plan.kind == Kind::Cublaslt {
                    "--cudart"
                } else {
                    "--hip"
                })
                .arg(rt);
        }
    }
    let out = child
        .output()
        .map_err(|e| Error::failed(format!("cannot start the replay: {e}")))?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    // This backend's stats file: the path itself, or beside it where another backend ran
    // too ([`stats_files`]).
    let stats: Option<Stats> = stats_files(&stats_path)
        .iter()
        .filter_map(|f| Stats::read(f))
        .find(|s| s.backend() == plan.kind.tag());
    let replayed: Option<Replayed> = serde_json::from_slice(&out.stdout).ok();
    let _ = std::fs::remove_dir_all(&scratch);
    let (Some(stats), Some(replayed)) = (stats, replayed) else {
        return Err(Error::failed(format!(
            "the replay under the preload did not finish ({}):\n{log}",
            out.status
        )));
    };
    let mut problems = Vec::new();
    if stats.rows != plan.rows as u64 {
        problems.push(format!(
            "the interposer loaded {} rows, the profile has {}: it chose another profile or could not read this one:\n{log}",
            stats.rows, plan.rows
        ));
    }
    problems.extend(stats.problems());
    // Every replayed call has its row: one passed through was found but not served (its
    // algorithm needs more workspace than the callers give, or the library refused it).
    if stats.passed_through > 0 {
        problems.push(format!(
            "{} of {} replayed calls were passed through, not served: their rows cannot serve callers like these (for hipBLASLt and cuBLASLt, a row needing more workspace than --workspace)",
            stats.passed_through, replayed.calls
        ));
    }
    problems.extend(replayed.failures.iter().cloned());
    let report = Report {
        profile: plan.profile,
        rows: plan.rows,
        devices,
        ok: problems.is_empty(),
        problems,
        stats,
    };
    if !opts.json {
        println!(
            "verify '{}' for build {build_short} ({}): {} rows replayed on {} device{}: rows hit {}/{}, {} missed calls, {} fallbacks -> {}",
            report.profile,
            plan.kind.name(),
            report.rows,
            devices,
            if devices == 1 { "" } else { "s" },
            report.stats.rows_hit,
            report.stats.rows,
            report.stats.missed_calls,
            report.stats.fallbacks,
            if report.ok { "OK" } else { "FAILED" }
        );
        for p in &report.problems {
            println!("  - {p}");
        }
    }
    Ok(report)
}
