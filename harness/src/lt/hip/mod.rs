//! `tunedblas lt tune` on hipBLASLt (AMD GPUs): the recorded hipBLASLt misses tuned with the
//! pipeline cuBLASLt's tuning uses (`lt/pipeline.rs`), every algorithm the library lists for
//! a problem as a candidate, the rows written as `Gemm_Hipblaslt_<index>` (PyTorch
//! TunableOp's own form) into the profile of the loaded library's sha256, in the same store,
//! checkpoint and campaign lock.
//!
//! Adoptions are confirmed as cuBLASLt's are: a second set of trials in this process, then
//! a fresh process (`lt recheck --backend hipblaslt`, which also rechecks any profile's
//! index rows, PyTorch's included). Samples are HIP graph replays where capture works (as
//! cuBLASLt's are CUDA graph replays), else back-to-back calls between events. What differs
//! from cuBLASLt, and why: no delay kernel ahead of events timing (it would need a device
//! code object); there is no wider search (`getAllAlgos` already
//! lists every algorithm) and no alignment preference (hipBLASLt has none). No AMD GPU is at hand where
//! this was written: it runs in CI on the stand-in hipBLASLt and HIP runtime
//! (`tests/hosts/fake_hipblaslt.cpp`, `fake_hip.c`), on no real device yet.

mod guard;
mod lib;
mod problem;
mod runtime;
mod tune;

use std::path::Path;

use tunedblas_core::cublaslt::{LtKey, LtLib};

use super::timing::Timing;
use super::tune::Options;
use super::CliResult;
use crate::args::Args;
use lib::HipLt;
use problem::HipProblem;
use runtime::HipRt;

/// Bytes of last-level cache the input sets rotate beyond (three times over): the 256 MiB
/// Infinity Cache of MI300-class GPUs, the largest AMD ships (the HIP runtime's attribute
/// numbers differ between releases, so it is not asked).
const CACHE_BYTES: usize = 256 << 20;

/// True when `tune` is asked to tune hipBLASLt: `--backend hipblaslt`, or `--lib` naming a
/// hipBLASLt file.
pub fn wanted(a: &Args) -> CliResult<bool> {
    match a.value("--backend") {
        Some("hipblaslt") => Ok(true),
        Some("cublaslt") => Ok(false),
        Some(o) => Err(a.usage(format!("--backend takes cublaslt or hipblaslt, not '{o}'"))),
        None => Ok(a
            .value("--lib")
            .and_then(|l| Path::new(l).file_name())
            .is_some_and(|f| f.to_string_lossy().contains("hipblaslt"))),
    }
}

/// What the cuBLASLt-only options would change, refused by name rather than ignored; and
/// the workspace, which hipBLASLt's tuning cannot default.
fn refuse_cuda_only(a: &Args) -> CliResult<()> {
    for (opt, why) in [
        ("--cudart", "hipBLASLt runs on the HIP runtime: pass --hip"),
        ("--explore", "getAllAlgos already lists every algorithm"),
        ("--budget", "getAllAlgos already lists every algorithm"),
        ("--keep", "getAllAlgos already lists every algorithm"),
        (
            "--alignment",
            "hipBLASLt's heuristic takes no alignment preference",
        ),
        (
            "--delay",
            "no delay kernel runs ahead of hipBLASLt's samples (it would need a device code object)",
        ),
        (
            "--copy-mib",
            "the bandwidth limit is measured on cuBLASLt only",
        ),
        (
            "--candidates",
            "every algorithm getAllAlgos lists is a candidate",
        ),
    ] {
        if a.value(opt).is_some() {
            return Err(a.usage(format!("{opt} is for cuBLASLt: {why}")));
        }
    }
    // hipBLASLt's heuristic and the algorithms it may use depend on the workspace the
    // caller gives, which differs between frameworks and releases: it is not guessed.
    if a.value("--workspace").is_none() {
        return Err(a.usage(
            "needs --workspace BYTES for hipBLASLt: the workspace your callers give hipblasLtMatmul \
             (a row needing more is passed through by the interposer, and the heuristic tuned against \
             must be the one your callers get)",
        ));
    }
    Ok(())
}

/// hipBLASLt and the HIP runtime it runs on (a library that cannot be loaded is exit 3),
/// then the device (none: exit 4, as `tunedblas` says of rocBLAS), then the handle.
fn load(a: &Args) -> CliResult<(HipRt, HipLt)> {
    let cannot_load = |e: crate::lt::cuda::Error| crate::error::Error::not_rocblas(e.0);
    let mut lt = HipLt::load(a.path("--lib").as_deref()).map_err(cannot_load)?;
    let rt = HipRt::load(a.path("--hip").as_deref(), lt.dl, &lt.path).map_err(cannot_load)?;
    if let Err(e) = rt.device_count() {
        return Err(crate::error::Error::no_device(format!(
            "{} (HIP runtime {})",
            e.0,
            rt.path.display()
        )));
    }
    lt.create_handle()?;
    Ok((rt, lt))
}

pub fn cmd_tune(a: &Args) -> CliResult<()> {
    refuse_cuda_only(a)?;
    let mut opts = super::options(a)?;
    opts.l2_bytes = CACHE_BYTES;
    let target = super::campaign::Target::of(a)?;
    let keys = super::tune_keys(a, LtLib::Hipblaslt)?;
    let (rt, lt) = load(a)?;
    let sha = tunedblas_core::identity::sha256_file(&lt.path).map_err(|e| {
        crate::error::Error::failed(format!("cannot hash {}: {e}", lt.path.display()))
    })?;
    crate::say::note!(
        "tunedblas lt: tuning {} shapes on hipBLASLt {} ({}) {}, HIP runtime {}; every algorithm getAllAlgos lists, \
         timed with {}; {}; confirmed {}",
        keys.len(),
        lt.version(),
        lt.path.display(),
        &sha[..12],
        rt.runtime_version(),
        timing_said(&rt, opts.timing),
        crate::rest::words(opts.rest),
        if opts.fresh { "in a fresh process" } else { "in this process only" }
    );
    let lib = super::campaign::Library {
        name: "hipblaslt",
        validators: vec![
            ("TUNEDBLAS_BACKEND".into(), "hipblaslt".into()),
            ("HIPBLASLT_VERSION".into(), lt.version().to_string()),
            (
                "HIP_RUNTIME_VERSION".into(),
                rt.runtime_version().to_string(),
            ),
        ],
        record: serde_json::json!({
            "kind": "hipblaslt-tune",
            "library": lt.path.display().to_string(),
            "hipblaslt_version": lt.version(),
            "hip_runtime": rt.path.display().to_string(),
            "options": {
                "trials": opts.trials, "margin": opts.margin, "win_share": opts.win_share,
                "workspace": opts.workspace, "sample_ms": opts.sample_ms, "timing": opts.timing,
                "rest": opts.rest, "fresh": opts.fresh,
            },
        }),
        arch: None,
        entry: vec![("hipblaslt_version", lt.version().into())],
        child_args: child_args(&rt, &lt, &opts),
        sha,
    };
    super::campaign::run(a, &target, lib, &keys, &opts, |key| {
        let p = problem(&rt, &lt, key, &opts)?;
        let out = tune::tune_shape(&p, &opts)?;
        if !p.timing_mixed() {
            return Ok(out);
        }
        // Graph timing failed part way: graph and events samples would be compared, so the
        // shape is timed again, every sample with events.
        let events = Options {
            timing: Timing::Events,
            ..opts.clone()
        };
        let mut again = tune::tune_shape(&problem(&rt, &lt, key, &events)?, &events)?;
        again.timing = format!("events (re-timed: {})", out.timing);
        Ok(again)
    })
}

/// The arguments that make a `recheck` child load this runtime and library and time as
/// this campaign does.
fn child_args(rt: &HipRt, lt: &HipLt, opts: &Options) -> Vec<std::ffi::OsString> {
    vec![
        "--backend".into(),
        "hipblaslt".into(),
        "--lib".into(),
        lt.path.clone().into(),
        "--hip".into(),
        rt.path.clone().into(),
        "--timing".into(),
        opts.timing.name().into(),
    ]
}

/// One key's problem, in the campaign's timing mode.
fn problem<'a>(
    rt: &'a HipRt,
    lt: &'a HipLt,
    key: &LtKey,
    opts: &Options,
) -> crate::lt::cuda::Result<HipProblem<'a>> {
    let sets = super::problem::Problem::sets_for(key, opts.l2_bytes);
    let mut p = HipProblem::new(rt, lt, *key, sets, opts.workspace)?;
    if opts.timing == Timing::Graph {
        p.use_graphs();
    }
    Ok(p)
}

/// How samples will be timed, for the start line.
fn timing_said(rt: &HipRt, t: Timing) -> &'static str {
    match (t, rt.graph.is_some()) {
        (Timing::Graph, true) => "HIP graph replays",
        (Timing::Graph, false) => "events (this HIP runtime has no graph calls)",
        (Timing::Events, _) => "events",
    }
}

/// `tunedblas lt recheck --backend hipblaslt`: every `Gemm_Hipblaslt_<index>` row of a
/// profile (or `--rows` file: tune's fresh-process child, or a PyTorch TunableOp file)
/// re-measured against the heuristic in this process.
pub fn cmd_recheck(a: &Args) -> CliResult<()> {
    refuse_cuda_only(a)?;
    let mut opts = super::options(a)?;
    opts.l2_bytes = CACHE_BYTES;
    let rows = super::profile_rows(a)?;
    super::say_other_rows(&rows, LtLib::Hipblaslt);
    let (rt, lt) = load(a)?;
    let mut out = Vec::new();
    for r in &rows {
        let tunedblas_core::cublaslt::LtAction::Index(index) = r.action else {
            continue;
        };
        let p = problem(&rt, &lt, &r.key, &opts)?;
        out.push(super::say_recheck(tune::recheck(&p, index, &opts)?));
    }
    super::report_rechecks(a, &opts, out)
}
