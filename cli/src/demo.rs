//! `tunedblas demo`: the whole loop on the CPU reference backend, in the steps the command's
//! help lists; each workload run is a child under the preload, as a host would be.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tunedblas_core::registry::Registry;

use tunedblas_tuner::backends::rocblas::Rocblas;
use tunedblas_tuner::backends::Spec;
use tunedblas_tuner::campaign;
use tunedblas_tuner::pipeline::Method;

use crate::curate::Rules;
use crate::error::{Error, Result};
use crate::verify::{self, Stats};
use crate::workload::{self, Report};

pub struct Options {
    pub dir: Option<PathBuf>,
    pub passes: usize,
}

fn artifact(name: &str) -> Result<PathBuf> {
    tunedblas_tuner::dl::beside_exe(name).ok_or_else(|| {
        Error::failed(format!("{name} is not beside the tunedblas binary; build the workspace first: cargo build --release --workspace"))
    })
}

fn run_workload(
    dir: &Path,
    lib: &Path,
    passes: usize,
    tag: &str,
) -> Result<(Report, Stats, String)> {
    let preload = artifact("libtunedblas.so")?;
    let stats_path = dir.join(format!("stats-{tag}.json"));
    let (profiles, misses) = (dir.join("profiles"), dir.join("misses"));
    let out = crate::verify::child(&profiles, &misses, Some((&preload, &stats_path)))?
        .args(["workload", "--lib"])
        .arg(lib)
        .args(["--passes", &passes.to_string()])
        .env("TUNEDBLAS_CACHE_DIR", dir.join("cache"))
        .output()
        .map_err(|e| Error::failed(format!("cannot start the workload: {e}")))?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(Error::failed(format!(
            "the workload failed ({}):\n{log}",
            out.status
        )));
    }
    let report: Report = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::failed(format!("the workload printed no report ({e}):\n{log}")))?;
    let stats = Stats::read(&stats_path).ok_or_else(|| {
        Error::failed(format!(
            "the interposer wrote no stats to {}:\n{log}",
            stats_path.display()
        ))
    })?;
    Ok((report, stats, log))
}

fn indent(log: &str) -> String {
    log.lines().map(|l| format!("    | {l}\n")).collect()
}

pub fn run(opts: Options) -> Result<()> {
    match opts.dir.clone() {
        Some(dir) => run_in(&dir, opts),
        None => {
            // A folder of our own, removed when the demo ends, however it ends; --dir keeps
            // the files.
            let dir = std::env::temp_dir().join(format!("tunedblas-demo-{}", std::process::id()));
            let result = run_in(&dir, opts);
            let _ = std::fs::remove_dir_all(&dir);
            println!("(removed {}; --dir DIR keeps the files)", dir.display());
            result
        }
    }
}

/// Marks a folder the demo made, so that a later demo may empty it again.
const MARKER: &str = ".tunedblas-demo";

/// Empties `dir` for a new demo: a folder an earlier demo made, or an empty or new one.
/// Anything else is refused, never deleted: `--dir ~/work` must not cost the user ~/work.
fn fresh_folder(dir: &Path) -> Result<()> {
    let empty = std::fs::read_dir(dir).map_or(true, |mut rd| rd.next().is_none());
    if !empty && !dir.join(MARKER).is_file() {
        return Err(Error::failed(format!(
            "{} is not empty and not a folder an earlier demo made: give a new or empty folder",
            dir.display()
        )));
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(dir.join(MARKER), "made by tunedblas demo\n"))
        .map_err(|e| Error::failed(format!("cannot create {}: {e}", dir.display())))
}

fn run_in(dir: &Path, opts: Options) -> Result<()> {
    let started = Instant::now();
    let dir = dir.to_path_buf();
    fresh_folder(&dir)?;
    let lib_dir = dir.join("lib");
    std::fs::create_dir_all(&lib_dir)
        .map_err(|e| Error::failed(format!("cannot create {}: {e}", lib_dir.display())))?;
    // refblas's 5.x flavour stands in for rocBLAS 5 (ROCm 7): large negative Tensile ids.
    let lib = lib_dir.join("librocblas.so.5");
    std::fs::copy(artifact("librocblas_v5.so")?, &lib)
        .map_err(|e| Error::failed(format!("cannot copy refblas: {e}")))?;
    println!("tunedblas demo in {}", dir.display());
    println!("workload: {} linear layers x {} token counts (decode, MTP verify, 256/512-token chunks, chunk+decode)", workload::LAYERS.len(), workload::STEPS.len());

    std::fs::create_dir_all(dir.join("profiles"))
        .map_err(|e| Error::failed(format!("cannot create the profile folder: {e}")))?;
    Registry::new()
        .save_atomic(&dir.join("profiles/profiles.json"))
        .map_err(|e| Error::failed(e.to_string()))?;
    println!("\n1. run the workload under the preload, no profile yet");
    let (before, stats_before, log) = run_workload(&dir, &lib, opts.passes, "before")?;
    print!("{}", indent(&log));

    println!("\n2. tune the recorded shapes: heuristic vs every solution, then heuristic / current / new best interleaved; qualify adoptions on every device");
    let tune = campaign::Options {
        profiles: dir.join("profiles"),
        name: None,
        devices: vec![0],
        shard: None,
        discard: true,
        ranks: None,
        retune: false,
        limits: true,
        method: Method {
            trials: 5,
            max_trials: 15,
            // refblas's GEMMs run on the CPU, whose caches are small: a MiB of operands
            // rotates past them (a graph sample replays one call per operand set at
            // least), and a CPU does not heat up under load: no rest.
            rotate_bytes: 1 << 20,
            rest: 0.0,
            ..Method::default()
        },
        rules: Rules::default(),
        json: false,
        quiet: false,
    };
    let refblas = Rocblas::open(&Spec {
        lib: Some(lib.clone()),
        runtime: None,
        arch: Some("refblas-cpu".into()),
    })?;
    let inputs = crate::shapes::inputs(&refblas, &[dir.join("misses")], &[], &tune)?;
    let summary = campaign::run(&refblas, inputs, &tune)?;
    drop(refblas);

    println!("\n3. verify: replay every row under the preload in a fresh process");
    let report = verify::run(&verify::Options {
        lib: lib.clone(),
        runtime: None,
        workspace: 0,
        profiles: dir.join("profiles"),
        preload: None,
        json: false,
    })?;
    if !report.ok {
        return Err(Error::failed(format!(
            "verification failed: {}",
            report.problems.join("; ")
        )));
    }
    let c = &summary.counts;
    println!(
        "    {} rows ({} tuned, {} Default) for rocBLAS build {}",
        summary.rows,
        c.new + c.replaced,
        c.default,
        &summary.sha256[..12]
    );

    println!("\n4. run the workload again, served from the profile");
    let (after, stats_after, log) = run_workload(&dir, &lib, opts.passes, "after")?;
    print!("{}", indent(&log));

    let hit = |s: &Stats| 100.0 * (s.served + s.default) as f64 / s.calls.max(1) as f64;
    println!("\n                     before      after");
    let (b, a) = (&stats_before, &stats_after);
    for (label, x, y) in [
        ("GEMM calls", b.calls, a.calls),
        ("served tuned", b.served, a.served),
        ("Default rows", b.default, a.default),
        ("missed calls", b.missed_calls, a.missed_calls),
        ("served near", b.near, a.near),
        ("missed shapes", b.missed_shapes, a.missed_shapes),
        ("fallbacks", b.fallbacks, a.fallbacks),
    ] {
        println!("    {label:<13}{x:>10} {y:>10}");
    }
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
        return Err(Error::failed(format!(
            "{} GEMM calls failed",
            before.failures + after.failures
        )));
    }
    println!("\ndone in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
