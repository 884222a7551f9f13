//! `tunedblas demo`: the whole loop on the CPU reference backend.
//!
//! 1. A simulated inference workload runs under `LD_PRELOAD=libtunedblas.so` with no
//!    profile: every shape is passed through and recorded as a miss.
//! 2. The recorded shapes are tuned against the heuristic in one session.
//! 3. A profile for exactly this library build (by sha256) is written.
//! 4. The workload runs again and is served from it. Before and after are printed side by
//!    side.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tunedblas_core::identity;
use tunedblas_core::key::ProblemKey;
use tunedblas_core::registry::{Entry, Registry};
use tunedblas_core::tunableop::{self, KeyParse, ResultsFile, Row, Solution};

use crate::backend::{Error, Library, Result};
use crate::tune;
use crate::workload::{self, Report};

/// Adopt a tuned solution only when it beats the heuristic by this much (and by more than
/// the measured spread): the seed's 3% rule.
const MARGIN: f64 = 0.03;

pub struct Options {
    pub dir: Option<PathBuf>,
    pub passes: usize,
}

fn artifact(name: &str) -> Result<PathBuf> {
    Library::beside_exe(name).ok_or_else(|| {
        Error(format!("{name} is not beside the tunedblas binary; build the workspace first: cargo build --release --workspace"))
    })
}

/// Counters the interposer wrote at exit (`TUNEDBLAS_STATS`).
#[derive(serde::Deserialize, Default, Debug)]
struct Stats {
    calls: u64,
    served: u64,
    default: u64,
    missed_calls: u64,
    missed_shapes: u64,
    fallbacks: u64,
}

fn run_workload(
    dir: &Path,
    lib: &Path,
    passes: usize,
    tag: &str,
) -> Result<(Report, Stats, String)> {
    let preload = artifact("libtunedblas.so")?;
    let exe = std::env::current_exe()
        .map_err(|e| Error(format!("cannot find the tunedblas binary: {e}")))?;
    let stats_path = dir.join(format!("stats-{tag}.json"));
    let out = Command::new(exe)
        .args(["workload", "--lib"])
        .arg(lib)
        .args(["--passes", &passes.to_string()])
        .env("LD_PRELOAD", &preload)
        .env("TUNEDBLAS_PROFILE_DIR", dir.join("profiles"))
        .env("TUNEDBLAS_MISS_DIR", dir.join("misses"))
        .env("TUNEDBLAS_CACHE_DIR", dir.join("cache"))
        .env("TUNEDBLAS_STATS", &stats_path)
        .env_remove("TUNEDBLAS_PROFILE")
        .env_remove("TUNEDBLAS_DISABLE")
        .output()
        .map_err(|e| Error(format!("cannot start the workload: {e}")))?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(Error(format!(
            "the workload failed ({}):\n{log}",
            out.status
        )));
    }
    let report: Report = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error(format!("the workload printed no report ({e}):\n{log}")))?;
    let stats = std::fs::read(&stats_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| {
            Error(format!(
                "the interposer wrote no stats to {}:\n{log}",
                stats_path.display()
            ))
        })?;
    Ok((report, stats, log))
}

/// Distinct keys in every miss log under `dir` (PyTorch untuned-file lines).
pub fn recorded_misses(dir: &Path) -> Vec<ProblemKey> {
    let mut keys = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    for f in files.iter().filter(|f| {
        let name = f.to_string_lossy();
        name.ends_with(".csv") && !name.ends_with(".counts.csv")
    }) {
        for line in std::fs::read_to_string(f).unwrap_or_default().lines() {
            let mut fields = line.splitn(3, ',');
            let (Some(op), Some(sig)) = (fields.next(), fields.next()) else {
                continue;
            };
            if let KeyParse::Key(k) = tunableop::parse_key(op.trim(), sig.trim()) {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
    }
    keys
}

fn indent(log: &str) -> String {
    log.lines().map(|l| format!("    | {l}\n")).collect()
}

pub fn run(opts: Options) -> Result<()> {
    let started = Instant::now();
    let dir = opts.dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tunedblas-demo-{}", std::process::id()))
    });
    let _ = std::fs::remove_dir_all(&dir);
    let lib_dir = dir.join("lib");
    std::fs::create_dir_all(&lib_dir)
        .map_err(|e| Error(format!("cannot create {}: {e}", lib_dir.display())))?;
    // refblas's 5.x flavour stands in for rocBLAS 5 (ROCm 7): large negative Tensile ids.
    let lib = lib_dir.join("librocblas.so.5");
    std::fs::copy(artifact("librocblas_v5.so")?, &lib)
        .map_err(|e| Error(format!("cannot copy refblas: {e}")))?;
    println!("tunedblas demo in {}", dir.display());
    println!("workload: {} linear layers x {} token counts (decode, MTP verify, 256/512-token chunks, chunk+decode)", workload::LAYERS.len(), workload::STEPS.len());

    std::fs::create_dir_all(dir.join("profiles"))
        .map_err(|e| Error(format!("cannot create the profile folder: {e}")))?;
    Registry::new()
        .save_atomic(&dir.join("profiles/profiles.json"))
        .map_err(|e| Error(e.to_string()))?;
    println!("\n1. run the workload under the preload, no profile yet");
    let (before, stats_before, log) = run_workload(&dir, &lib, opts.passes, "before")?;
    print!("{}", indent(&log));

    let keys = recorded_misses(&dir.join("misses"));
    println!(
        "\n2. tune the {} recorded shapes (heuristic vs every solution, interleaved, median of 5)",
        keys.len()
    );
    let tuning = Library::load(&lib, None)?;
    let version = tuning.version().unwrap_or_else(|| "unknown".into());
    let mut rows = Vec::new();
    let (mut adopted, mut defaults) = (0, 0);
    for (i, key) in keys.iter().enumerate() {
        let m = tune::measure(&tuning, *key, 5)?;
        let (op, sig) = tunableop::op_and_signature(key);
        let best = m.best();
        let (solution, ms, verdict) = match best {
            Some((s, ms)) if ms < m.heuristic_ms * (1.0 - MARGIN.max(m.spread)) => {
                adopted += 1;
                (
                    Solution::Rocblas(s),
                    ms,
                    format!("{:+.0}%", (ms / m.heuristic_ms - 1.0) * 100.0),
                )
            }
            _ => {
                defaults += 1;
                (
                    Solution::Default,
                    m.heuristic_ms,
                    "no solution beats it by 3% and the spread".to_string(),
                )
            }
        };
        println!(
            "    [{:>2}/{}] {op},{sig}: heuristic {:.3} ms, best solution {:.3} ms -> {} ({verdict})",
            i + 1,
            keys.len(),
            m.heuristic_ms,
            best.map_or(f64::NAN, |b| b.1),
            tunableop::solution_text(&solution)
        );
        rows.push(Row::new(*key, solution, Some(ms)));
    }

    println!("\n3. write the profile for this build");
    let sha = identity::sha256_file(&lib)
        .map_err(|e| Error(format!("cannot hash {}: {e}", lib.display())))?;
    let name = format!("refblas-{version}");
    let profile_dir = dir.join("profiles").join(&name);
    std::fs::create_dir_all(&profile_dir)
        .map_err(|e| Error(format!("cannot create {}: {e}", profile_dir.display())))?;
    let mut results = ResultsFile::default();
    results.set_validator("ROCBLAS_VERSION", &version);
    results.set_validator("GCN_ARCH_NAME", "refblas-cpu");
    results.rows = rows;
    std::fs::write(
        profile_dir.join("tunableop_results0.csv"),
        results.to_text(),
    )
    .map_err(|e| Error(format!("cannot write the profile: {e}")))?;
    let mut registry = Registry::new();
    let mut entry = Entry::new(&name, &sha);
    entry.rocblas = Some(version.clone());
    entry.rows_per_rank = Some(results.rows.len() as u64);
    entry.status = Some("demo".into());
    registry.insert(&name, entry).map_err(Error)?;
    registry
        .save_atomic(&dir.join("profiles/profiles.json"))
        .map_err(|e| Error(e.to_string()))?;
    println!(
        "    {} rows ({adopted} tuned, {defaults} Default) for rocBLAS build {} -> {}",
        results.rows.len(),
        &sha[..12],
        profile_dir.display()
    );

    println!("\n4. run the workload again, served from the profile");
    let (after, stats_after, log) = run_workload(&dir, &lib, opts.passes, "after")?;
    print!("{}", indent(&log));

    let hit = |s: &Stats| 100.0 * (s.served + s.default) as f64 / s.calls.max(1) as f64;
    println!("\n                     before      after");
    println!(
        "    GEMM calls   {:>10} {:>10}",
        stats_before.calls, stats_after.calls
    );
    println!(
        "    served tuned {:>10} {:>10}",
        stats_before.served, stats_after.served
    );
    println!(
        "    Default rows {:>10} {:>10}",
        stats_before.default, stats_after.default
    );
    println!(
        "    missed calls {:>10} {:>10}",
        stats_before.missed_calls, stats_after.missed_calls
    );
    println!(
        "    missed shapes{:>10} {:>10}",
        stats_before.missed_shapes, stats_after.missed_shapes
    );
    println!(
        "    fallbacks    {:>10} {:>10}",
        stats_before.fallbacks, stats_after.fallbacks
    );
    println!(
        "    hit rate     {:>9.0}% {:>9.0}%",
        hit(&stats_before),
        hit(&stats_after)
    );
    println!(
        "    GEMM time ms {:>10.1} {:>10.1}   ({:.2}x)",
        before.gemm_ms,
        after.gemm_ms,
        before.gemm_ms / after.gemm_ms.max(1e-9)
    );
    if before.failures + after.failures > 0 {
        return Err(Error(format!(
            "{} GEMM calls failed",
            before.failures + after.failures
        )));
    }
    println!("\ndone in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
