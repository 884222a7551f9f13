//! Serving `cublasLtMatmul`: the cuBLASLt backend of the interposer.
//!
//! The export in `exports.rs` hands every call to [`serve::matmul`]. It reads the problem from the
//! caller's matmul and layout descriptors (`cublasLtMatmulDescGetAttribute`,
//! `cublasLtMatrixLayoutGetAttribute`), looks the key up in the profile of the *loaded*
//! `libcublasLt.so` (chosen by its sha256, like rocBLAS's), and:
//!
//! - a `Gemm_Cublaslt_...` row: the algorithm is rebuilt from its configuration with
//!   `cublasLtMatmulAlgoInit` + `ConfigSetAttribute` and checked with
//!   `cublasLtMatmulAlgoCheck` once per key (on the key's first call, with that call's
//!   descriptors); each call whose workspace and pointer alignment suit it then runs with
//!   it instead of the caller's `algo`. A failed rebuild, check or call quarantines the row
//!   for the process and the caller's own call is made.
//! - a `Default` row: the caller's call, unchanged.
//! - no row: the caller's call, and the key is recorded as a miss
//!   (`<host>-<pid>-cublaslt-rank<device>.csv` in the miss folder).
//!
//! PyTorch always passes an `algo` (its own first heuristic answer, asked with
//! `requestedAlgoCount = 1`), so a non-NULL `algo` is not treated as a deliberate choice:
//! a row exists only because that very heuristic answer was measured and beaten.
//!
//! Every cuBLASLt and CUDA function is found at run time (PyTorch loads cuBLASLt in a local
//! scope, where `dlsym(RTLD_NEXT)` returns NULL: `crate::real` then finds the loaded
//! `libcublasLt.so*` itself). Nothing here needs CUDA to build, and a process that never
//! calls `cublasLtMatmul` never runs any of it.
//!
//! - [`real`]: the real cuBLASLt functions, the call itself, handles and their builds.
//! - [`key`]: the key of a call, read from its descriptors.
//! - [`serve`]: the decision, the tuned call and its fallback, rebuilt algorithms.
//! - this file: the runtime (profile, misses, counters, stats) and its lifecycle hooks.

pub mod key;
pub mod real;
pub mod serve;

use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tunedblas_core::cublaslt::*;

use tunedblas_core::misslog::{self, Sight};
use tunedblas_core::profile::{self, Request, Selection};

use crate::lifecycle::{self, Backend, Config, Lazy, Pass};
use crate::log::info;
use crate::recorder::Recorder;
use crate::stats::{self, Counter};
use real::{current_device, CUBLASLT, LT};

// ---------------------------------------------------------------------------------------
// Start-up: the shared lifecycle's lazy state machine (lifecycle.rs), a runtime apart from
// rocBLAS's so a process using one library never pays for identifying the other.
// ---------------------------------------------------------------------------------------

static RUNTIME: Lazy<LtRuntime> = Lazy::new();
/// `tunedblas_cublaslt_serving(0)` turns serving off (calls pass through, nothing is
/// recorded) without restarting the process: for A/B trials inside one process.
pub(crate) static SERVING: AtomicBool = AtomicBool::new(true);

/// What the lifecycle does for cuBLASLt at exit and fork.
pub static BACKEND: Backend = Backend { finish, after_fork };

pub(crate) struct LtRuntime {
    loaded: LtLoaded,
    single: Option<Arc<LtTable>>,
    /// The process's cuBLASLt misses: one recorder, kept when the runtime starts again for
    /// another build.
    misses: &'static Recorder<LtKey>,
    stats_path: Option<PathBuf>,
}

impl LtRuntime {
    #[inline]
    fn table(&self) -> Option<&LtTable> {
        match &self.single {
            Some(t) => Some(t),
            None => self.loaded.table_for(current_device()),
        }
    }

    /// Records a call whose key has no row; true on the key's first sight.
    fn miss(&self, key: &LtKey) -> bool {
        let device = current_device();
        let hash = misslog::key_hash(key);
        let (sight, _) = self.misses.record_sight(device, key, hash, || true);
        sight == Sight::First
    }
}

#[inline]
pub(crate) fn get() -> Option<&'static LtRuntime> {
    RUNTIME.get(init)
}

/// The served cuBLASLt build was unloaded and another took its place (`libs.rs`): what the
/// old runtime counted is written, and the next call starts the runtime again for the new
/// build (identity, profile); misses carry over.
pub fn library_changed() {
    if let Some(rt) = RUNTIME.peek() {
        rt.misses.flush(lifecycle::EXIT_WAIT);
    }
    RUNTIME.restart();
}

/// The cuBLASLt misses, once the runtime was built (for the live status).
pub fn status_misses() -> Option<&'static misslog::MissSet<LtKey>> {
    RUNTIME.peek().map(|rt| &rt.misses.set)
}

pub(crate) fn latch_off(why: &str) {
    if RUNTIME.latch_off() {
        info!("cuBLASLt: internal error ({why}); passing every call through from now on");
    }
}

fn init() -> Option<LtRuntime> {
    let cfg = Config::for_start()?;
    let (loaded, line) = select_and_load(&cfg);
    info!("{line}");
    for p in loaded.problems.iter().take(20) {
        info!("{p}");
    }
    crate::status::start(&cfg.miss_dir);
    let single = (loaded.distinct <= 1).then(|| {
        loaded
            .tables
            .iter()
            .flatten()
            .next()
            .cloned()
            .unwrap_or_default()
    });
    Some(LtRuntime {
        loaded,
        single,
        misses: {
            static RECORDER: std::sync::atomic::AtomicPtr<Recorder<LtKey>> =
                std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
            crate::recorder::shared(&RECORDER, || {
                Recorder::new(
                    cfg.miss_dir.clone(),
                    op_and_signature,
                    "-cublaslt",
                    "cuBLASLt: ",
                )
            })
        },
        stats_path: cfg.stats_path,
    })
}

/// Identifies the loaded cuBLASLt build and loads its profile. Returns the startup line.
fn select_and_load(cfg: &Config) -> (LtLoaded, String) {
    let none = |why: String| (LtLoaded::default(), why);
    let Some(anchor) = LT.matmul.get() else {
        return none(
            "cuBLASLt: cublasLtMatmul not found in this process; passing calls through".into(),
        );
    };
    let (path, id) = match crate::libs::identify_loaded(anchor as *const _, "cuBLASLt") {
        Ok(found) => found,
        Err(why) => return none(format!("cuBLASLt: {why}")),
    };
    let req = Request {
        profile_dir: &cfg.profile_dir,
        sha256: &id.sha256,
        explicit: cfg.explicit.as_deref(),
        allow_mismatch: cfg.allow_mismatch,
    };
    // profile::select words its reasons for rocBLAS; the rules are the same for any library.
    let words = |s: String| s.replace("rocBLAS", "cuBLASLt");
    match profile::select(&req) {
        Selection::Chosen { name, dir, reason } => {
            let loaded = load_tables(&dir);
            let device = current_device();
            let rows = loaded.table_for(device).map_or(0, LtTable::len);
            let line = format!(
                "cuBLASLt: profile {name} {} ({rows} rows, rank {device}; {}) {}",
                words(reason),
                path.display(),
                crate::log::VERSION_TAG
            );
            (loaded, line)
        }
        Selection::None { why } => none(format!(
            "cuBLASLt: {} ({}); misses go to {} (`tunedblas status` shows them live) {}",
            words(why),
            path.display(),
            cfg.miss_dir.display(),
            crate::log::VERSION_TAG
        )),
    }
}

/// `tunedblas_cublaslt_serving(on)`: 1 serves, 0 passes every call through, a negative
/// value only asks. Returns the previous setting.
pub fn set_serving(on: c_int) -> c_int {
    let was = if on < 0 {
        SERVING.load(Ordering::Relaxed)
    } else {
        SERVING.swap(on != 0, Ordering::Relaxed)
    };
    c_int::from(was)
}

// ---------------------------------------------------------------------------------------
// The end of the process, and fork.
// ---------------------------------------------------------------------------------------

/// At a way out of the process ([`crate::lifecycle`]): counts, stats and (leaving) the
/// summary.
fn finish(pass: Pass) {
    let Some(rt) = RUNTIME.peek() else { return };
    rt.misses.flush(lifecycle::EXIT_WAIT);
    if let Some(path) = &rt.stats_path {
        // The rocBLAS side owns the file when it ran too; then ours goes beside it.
        let suffix = if crate::rocblas::started() {
            ".cublaslt.json"
        } else {
            ""
        };
        let _ = write_stats(rt, path, suffix);
    }
    if pass == Pass::Late {
        return;
    }
    let t = stats::total;
    info!(
        "cuBLASLt: {} calls: {} served, {} default, {} missed ({} shapes), {} passed through, {} fallbacks",
        t(Counter::LtCalls),
        t(Counter::LtServed),
        t(Counter::LtDefault),
        t(Counter::LtMissed),
        rt.misses.set.len(),
        t(Counter::LtPassedThrough),
        t(Counter::LtFallbacks),
    );
}

/// In a fork child: the child's misses are its own.
unsafe fn after_fork() {
    // SAFETY: as below.
    unsafe { CUBLASLT.after_fork() };
    if let Some(rt) = RUNTIME.peek() {
        // SAFETY: the lifecycle calls this from the fork child handler only.
        unsafe { rt.misses.after_fork() };
    }
}

fn write_stats(rt: &LtRuntime, path: &std::path::Path, suffix: &str) -> std::io::Result<()> {
    let mut tables: Vec<&Arc<LtTable>> = Vec::new();
    for t in rt.loaded.tables.iter().flatten() {
        if !tables.iter().any(|s| Arc::ptr_eq(s, t)) {
            tables.push(t);
        }
    }
    let mut rows = 0;
    let mut unhit = Vec::new();
    let mut quarantined = Vec::new();
    for t in tables {
        for (k, e) in t.iter() {
            rows += 1;
            let (op, sig) = op_and_signature(k);
            if !e.was_hit() {
                unhit.push(format!("{op},{sig}"));
            }
            if e.is_quarantined() {
                quarantined.push(format!("{op},{sig}"));
            }
        }
    }
    let t = stats::total;
    let json = serde_json::json!({
        "library": "cublaslt",
        "calls": t(Counter::LtCalls),
        "served": t(Counter::LtServed),
        "default": t(Counter::LtDefault),
        "missed_calls": t(Counter::LtMissed),
        "missed_shapes": rt.misses.set.len(),
        "over_capacity_calls": rt.misses.over_cap_calls(),
        "passed_through": t(Counter::LtPassedThrough),
        "fallbacks": t(Counter::LtFallbacks),
        "rows": rows,
        "rows_hit": rows - unhit.len(),
        "rows_not_hit": unhit,
        "rows_quarantined": quarantined,
    });
    lifecycle::write_stats(path, suffix, &json)
}
