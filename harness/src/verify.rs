//! `tunedblas verify`: proves a profile is served. Every row is replayed, on every device,
//! by a child process running under `LD_PRELOAD=libtunedblas.so` that loads the library the
//! way a host does; the interposer's own counters must show every row hit, no miss and no
//! fallback.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use tunedblas_core::key::ProblemKey;

use crate::error::{Error, Result};
use crate::store::Store;
use tunedblas_tuner::backends::rocblas::{Lib as Library, Problem};
use tunedblas_tuner::backends::Library as _;

pub struct Options {
    pub lib: PathBuf,
    pub profiles: PathBuf,
    /// The interposer; default: `libtunedblas.so` beside this binary.
    pub preload: Option<PathBuf>,
    pub json: bool,
}

/// The interposer's `TUNEDBLAS_STATS` file.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Stats {
    pub calls: u64,
    pub served: u64,
    pub default: u64,
    pub missed_calls: u64,
    pub missed_shapes: u64,
    #[serde(default)]
    pub passed_through: u64,
    pub fallbacks: u64,
    #[serde(default)]
    pub rows: u64,
    #[serde(default)]
    pub rows_hit: u64,
    #[serde(default)]
    pub rows_not_hit: Vec<String>,
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

pub fn run(opts: &Options) -> Result<Report> {
    let lib = Library::at(&opts.lib, None)?;
    let devices = lib.device_count()?;
    let build = lib.build().clone();
    drop(lib);
    let store = Store::open(&opts.profiles)?;
    let folder = store.existing_folder(&build)?;
    let rows = store.read_rows(&folder)?;
    if rows.rows.is_empty() {
        if !opts.json {
            println!(
                "verify '{}' for build {}: the profile has no rows, nothing to replay -> OK",
                folder.name,
                build.short()
            );
        }
        return Ok(Report {
            profile: folder.name,
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
    std::fs::write(&list, rows.to_text())
        .map_err(|e| Error::failed(format!("cannot write {}: {e}", list.display())))?;
    let stats_path = scratch.join("stats.json");
    let exe = std::env::current_exe()
        .map_err(|e| Error::failed(format!("cannot find the tunedblas binary: {e}")))?;
    let out = Command::new(exe)
        .arg("replay")
        .arg("--lib")
        .arg(&opts.lib)
        .arg("--rows")
        .arg(&list)
        .env("LD_PRELOAD", preload_path(opts.preload.as_deref())?)
        .env("TUNEDBLAS_PROFILE_DIR", &opts.profiles)
        .env("TUNEDBLAS_MISS_DIR", scratch.join("misses"))
        .env("TUNEDBLAS_STATS", &stats_path)
        .env_remove("TUNEDBLAS_PROFILE")
        .env_remove("TUNEDBLAS_DISABLE")
        .env_remove("TUNEDBLAS_ALLOW_MISMATCH")
        .output()
        .map_err(|e| Error::failed(format!("cannot start the replay: {e}")))?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let stats: Option<Stats> = std::fs::read(&stats_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let replayed: Option<Replayed> = serde_json::from_slice(&out.stdout).ok();
    let _ = std::fs::remove_dir_all(&scratch);
    let (Some(stats), Some(replayed)) = (stats, replayed) else {
        return Err(Error::failed(format!(
            "the replay under the preload did not finish ({}):\n{log}",
            out.status
        )));
    };
    let mut problems = Vec::new();
    if stats.rows != rows.rows.len() as u64 {
        problems.push(format!(
            "the interposer loaded {} rows, the profile has {}: it chose another profile or could not read this one:\n{log}",
            stats.rows,
            rows.rows.len()
        ));
    }
    if stats.rows_hit != stats.rows {
        problems.push(format!(
            "{} of {} rows were never hit: {}",
            stats.rows - stats.rows_hit,
            stats.rows,
            stats.rows_not_hit.join("; ")
        ));
    }
    if stats.missed_calls > 0 {
        problems.push(format!("{} calls missed", stats.missed_calls));
    }
    if stats.fallbacks > 0 {
        problems.push(format!(
            "{} calls fell back to the heuristic: a row's solution was refused",
            stats.fallbacks
        ));
    }
    problems.extend(replayed.failures.iter().cloned());
    let report = Report {
        profile: folder.name,
        rows: rows.rows.len(),
        devices,
        ok: problems.is_empty(),
        problems,
        stats,
    };
    if !opts.json {
        println!(
            "verify '{}' for build {}: {} rows replayed on {} device{}: rows hit {}/{}, {} missed calls, {} fallbacks -> {}",
            report.profile,
            build.short(),
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

/// The child: runs every row of `rows` once per device through the library's global
/// entry points (where the preload sits) and prints a [`Replayed`] as JSON.
pub fn replay(lib_path: &Path, rows_path: &Path) -> Result<()> {
    let lib = Library::open_as_host(lib_path)?;
    let rows = tunedblas_core::tunableop::read(rows_path)
        .map_err(|e| Error::failed(format!("cannot read {}: {e}", rows_path.display())))?;
    let keys: Vec<ProblemKey> = rows.rows.iter().map(|r| r.key).collect();
    let mut r = Replayed {
        calls: 0,
        failures: Vec::new(),
    };
    for dev in 0..lib.device_count()? {
        lib.set_device(dev)?;
        for key in &keys {
            r.calls += 1;
            let outcome = Problem::once(&lib, *key).map(|p| p.run_flags(0, None, 0));
            match outcome {
                Ok(0) => {}
                Ok(st) => r.failures.push(format!(
                    "{} on device {dev}: rocBLAS status {st}",
                    crate::shapes::shape_label(key)
                )),
                Err(e) => r.failures.push(format!(
                    "{} on device {dev}: {e}",
                    crate::shapes::shape_label(key)
                )),
            }
        }
    }
    println!("{}", serde_json::to_string(&r).expect("plain struct"));
    Ok(())
}

/// `verify --stats FILE`: the counters a run wrote (`TUNEDBLAS_STATS`, any library): every
/// row hit, no missed shape, no fallback.
pub fn stats(path: &Path) -> Result<()> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::failed(format!("{}: {e}", path.display())))?;
    let s: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::failed(format!("{}: {e}", path.display())))?;
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    let unhit = s["rows_not_hit"].as_array().map_or(0, Vec::len);
    println!(
        "verify: {} calls, {} served, {} default, {} missed shapes, {} fallbacks, {} of {} rows hit",
        n("calls"),
        n("served"),
        n("default"),
        n("missed_shapes"),
        n("fallbacks"),
        n("rows_hit"),
        n("rows")
    );
    if unhit > 0 || n("missed_shapes") > 0 || n("fallbacks") > 0 || n("rows") == 0 {
        return Err(Error::failed(format!(
            "not verified: {unhit} rows never hit, {} shapes missed, {} fallbacks",
            n("missed_shapes"),
            n("fallbacks")
        )));
    }
    Ok(())
}
