//! Serving `cublasLtMatmul`: the cuBLASLt backend of the interposer.
//!
//! The export in `exports.rs` hands every call to [`matmul`]. It reads the problem from the
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
//! scope, where `dlsym(RTLD_NEXT)` returns NULL: `real.rs` then finds the loaded
//! `libcublasLt.so*` itself). Nothing here needs CUDA to build, and a process that never
//! calls `cublasLtMatmul` never runs any of it.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tunedblas_core::cublaslt::*;
use tunedblas_core::identity::{self, HashCache, MapCheck};
use tunedblas_core::misslog::{self, Sight};
use tunedblas_core::profile::{self, Request, Selection};
use tunedblas_lt_algo::build_algo;

use crate::lifecycle::{self, Backend, Config, Lazy, Pass};
use crate::log::{debug, info};
use crate::recorder::Recorder;
use crate::stats::{self, bump, Counter};
use std::ffi::CString;

const CUBLASLT_LIBS: &[&str] = &["libcublasLt.so"];
const CUDA_LIBS: &[&str] = &["libcuda.so"];

/// `cuCtxGetDevice(CUdevice*)`: the device of the calling thread's current context.
type CtxGetDeviceFn = unsafe extern "C" fn(*mut c_int) -> c_int;

crate::real::hook_table! {
    pub struct LtHooks; static LT; libs = CUBLASLT_LIBS;
    matmul: MatmulFn = c"cublasLtMatmul",
    desc_get: GetAttributeFn = c"cublasLtMatmulDescGetAttribute",
    layout_get: GetAttributeFn = c"cublasLtMatrixLayoutGetAttribute",
    algo_init: AlgoInitFn = c"cublasLtMatmulAlgoInit",
    config_set: AlgoSetAttributeFn = c"cublasLtMatmulAlgoConfigSetAttribute",
    config_get: AlgoGetAttributeFn = c"cublasLtMatmulAlgoConfigGetAttribute",
    cap_get: AlgoGetAttributeFn = c"cublasLtMatmulAlgoCapGetAttribute",
    algo_check: AlgoCheckFn = c"cublasLtMatmulAlgoCheck",
    create: LtCreateFn = c"cublasLtCreate",
    destroy: LtDestroyFn = c"cublasLtDestroy",
    ctx_get_device: CtxGetDeviceFn = c"cuCtxGetDevice" in CUDA_LIBS,
}

/// `cublasLtCreate(cublasLtHandle_t*)`.
pub type LtCreateFn = unsafe extern "C" fn(*mut LtHandle) -> LtStatus;
/// `cublasLtDestroy(cublasLtHandle_t)`.
pub type LtDestroyFn = unsafe extern "C" fn(LtHandle) -> LtStatus;

/// One `cublasLtMatmul` call's arguments.
#[derive(Clone, Copy)]
pub struct LtCall {
    pub handle: LtHandle,
    pub desc: MatmulDesc,
    pub alpha: *const c_void,
    pub a: *const c_void,
    pub a_desc: MatrixLayout,
    pub b: *const c_void,
    pub b_desc: MatrixLayout,
    pub beta: *const c_void,
    pub c: *const c_void,
    pub c_desc: MatrixLayout,
    pub d: *mut c_void,
    pub d_desc: MatrixLayout,
    pub algo: *const MatmulAlgo,
    pub workspace: *mut c_void,
    pub workspace_bytes: usize,
    pub stream: CudaStream,
}

// ---------------------------------------------------------------------------------------
// Start-up: the shared lifecycle's lazy state machine (lifecycle.rs), a runtime apart from
// rocBLAS's so a process using one library never pays for identifying the other.
// ---------------------------------------------------------------------------------------

static RUNTIME: Lazy<LtRuntime> = Lazy::new();
/// `tunedblas_cublaslt_serving(0)` turns serving off (calls pass through, nothing is
/// recorded) without restarting the process: for A/B trials inside one process.
static SERVING: AtomicBool = AtomicBool::new(true);

/// What the lifecycle does for cuBLASLt at exit and fork.
pub static BACKEND: Backend = Backend { finish, after_fork };

struct LtRuntime {
    loaded: LtLoaded,
    single: Option<Arc<LtTable>>,
    /// The process's cuBLASLt misses: one recorder, kept when the runtime starts again for
    /// another build.
    misses: &'static Recorder<LtKey>,
    stats_path: Option<PathBuf>,
}

/// The device of the calling thread's current CUDA context, 0 if unknown.
pub fn current_device() -> i32 {
    match LT.ctx_get_device() {
        Some(f) => {
            let mut d = 0;
            // SAFETY: out-pointer to an int.
            if unsafe { f(&mut d) } == 0 {
                d
            } else {
                0
            }
        }
        None => 0,
    }
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
fn get() -> Option<&'static LtRuntime> {
    RUNTIME.get(init)
}

/// `cublasLtCreate` from a caller at return address `ret`: in the build it links
/// (`libs.rs`).
pub fn create_handle(out: *mut LtHandle, ret: *const c_void) -> LtStatus {
    crate::libs::CUBLASLT
        .create(out, ret, LT.create.get())
        .unwrap_or(STATUS_NOT_INITIALIZED)
}

/// `cublasLtDestroy`: in the build the handle came from.
pub fn destroy_handle(h: LtHandle) -> LtStatus {
    let destroy = match crate::libs::CUBLASLT.destroyed(h) {
        Some(other) => other.destroy(),
        None => LT.destroy(),
    };
    match destroy {
        // SAFETY: the caller's own handle.
        Some(f) => unsafe { f(h) },
        None => STATUS_NOT_INITIALIZED,
    }
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

fn latch_off(why: &str) {
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
    let Some(path) = identity::library_of_address(anchor as usize) else {
        return none("cuBLASLt: cannot tell which file cuBLASLt was loaded from; passing calls through and recording misses".into());
    };
    if identity::check_mapped_file(anchor as usize, &path) == MapCheck::Replaced {
        return none(format!(
            "cuBLASLt: {} was replaced on disk after this process loaded it; restart the process to serve tuned rows",
            path.display()
        ));
    }
    let cache = HashCache::new(identity::user_cache_dir().join("sha256"));
    let id = match cache.identify(&path) {
        Ok(id) => id,
        Err(e) => {
            return none(format!(
                "cuBLASLt: cannot hash {}: {e}; passing calls through",
                path.display()
            ))
        }
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
                "cuBLASLt: profile {name} {} ({rows} rows, rank {device}; {})",
                words(reason),
                path.display()
            );
            (loaded, line)
        }
        Selection::None { why } => none(format!("cuBLASLt: {} ({})", words(why), path.display())),
    }
}

// ---------------------------------------------------------------------------------------
// The serving decision.
// ---------------------------------------------------------------------------------------

enum Decision {
    Pass,
    /// The row's rebuilt algorithm (kept in its entry) and the entry. By reference: the
    /// algorithm and key by value made the decision 216 bytes.
    Tuned(&'static MatmulAlgo, &'static LtEntry),
}

/// Serves one intercepted `cublasLtMatmul`. See the module docs.
///
/// # Safety
/// The arguments are a caller's `cublasLtMatmul` arguments.
pub unsafe fn matmul(x: &LtCall) -> LtStatus {
    if let Some(other) = crate::libs::CUBLASLT.other_build(x.handle) {
        // A handle of another cuBLASLt build: its own function, untouched.
        let Some(real) = other.matmul() else {
            return STATUS_NOT_INITIALIZED;
        };
        if get().is_some() {
            bump(Counter::LtCalls);
            bump(Counter::LtPassedThrough);
        }
        // SAFETY: the caller's own arguments, to the build its handle came from.
        return unsafe { call(real, x, x.algo) };
    }
    let Some(real) = LT.matmul() else {
        // No cuBLASLt in this process: the caller could not have made a valid call.
        return STATUS_NOT_INITIALIZED;
    };
    let decision = match catch_unwind(AssertUnwindSafe(|| decide(x))) {
        Ok(d) => d,
        Err(_) => {
            latch_off("a panic while choosing an algorithm");
            Decision::Pass
        }
    };
    match decision {
        Decision::Pass => unsafe { call(real, x, x.algo) },
        Decision::Tuned(algo, entry) => {
            let status = unsafe { call(real, x, algo) };
            if status == STATUS_SUCCESS {
                bump(Counter::LtServed);
                return status;
            }
            if entry.quarantine() {
                // SAFETY: the caller's descriptors, as when the key was read for the lookup.
                let key = unsafe { read_key(x) };
                let (op, sig) = key.as_ref().map_or_else(Default::default, op_and_signature);
                info!(
                    "cuBLASLt: {} for {op},{sig} failed with status {status}; the row is quarantined for this process and the caller's own algorithm is used (re-tune this build)",
                    entry.action.solution_text()
                );
            }
            bump(Counter::LtFallbacks);
            unsafe { call(real, x, x.algo) }
        }
    }
}

#[inline]
unsafe fn call(f: MatmulFn, x: &LtCall, algo: *const MatmulAlgo) -> LtStatus {
    // SAFETY: forwarding the caller's arguments (with possibly another algo).
    unsafe {
        f(
            x.handle,
            x.desc,
            x.alpha,
            x.a,
            x.a_desc,
            x.b,
            x.b_desc,
            x.beta,
            x.c,
            x.c_desc,
            x.d,
            x.d_desc,
            algo,
            x.workspace,
            x.workspace_bytes,
            x.stream,
        )
    }
}

fn decide(x: &LtCall) -> Decision {
    let Some(rt) = get() else {
        return Decision::Pass;
    };
    bump(Counter::LtCalls);
    if !SERVING.load(Ordering::Relaxed) {
        bump(Counter::LtPassedThrough);
        return Decision::Pass;
    }
    // SAFETY: the descriptors are the caller's, valid for the duration of the call.
    let Some(key) = (unsafe { read_key(x) }) else {
        bump(Counter::LtPassedThrough);
        return Decision::Pass;
    };
    match rt.table().and_then(|t| t.get(&key)) {
        Some(e) if e.is_quarantined() => {
            bump(Counter::LtPassedThrough);
            Decision::Pass
        }
        Some(e) => {
            e.mark_hit();
            match e.action {
                LtAction::Default => {
                    bump(Counter::LtDefault);
                    Decision::Pass
                }
                LtAction::Config(cfg) => {
                    // SAFETY: as above; runs once per key.
                    let prepared = e.prepared.get_or_init(|| unsafe { prepare(x, &key, &cfg) });
                    match prepared {
                        Some(p)
                            if p.fits(
                                [x.a as usize, x.b as usize, x.c as usize, x.d as usize],
                                x.workspace,
                                x.workspace_bytes,
                            ) =>
                        {
                            Decision::Tuned(&p.algo, e)
                        }
                        Some(_) => {
                            // Less workspace or alignment than the tuned algorithm needs.
                            bump(Counter::LtPassedThrough);
                            Decision::Pass
                        }
                        None => {
                            e.quarantine();
                            bump(Counter::LtFallbacks);
                            Decision::Pass
                        }
                    }
                }
            }
        }
        None => {
            if rt.miss(&key) {
                let (op, sig) = op_and_signature(&key);
                debug!(
                    "cuBLASLt: miss {op},{sig} (caller's workspace {} bytes, algo {})",
                    x.workspace_bytes,
                    if x.algo.is_null() { "NULL" } else { "given" }
                );
            }
            bump(Counter::LtMissed);
            Decision::Pass
        }
    }
}

/// One attribute of a descriptor, as a `T` of exactly the size the library stores.
#[inline]
unsafe fn attr<T: Copy + Default>(f: GetAttributeFn, obj: *mut c_void, which: i32) -> Option<T> {
    let mut v = T::default();
    let mut written = 0usize;
    // SAFETY: `v` has size_of::<T>() bytes; the library writes at most that.
    let st = unsafe {
        f(
            obj,
            which,
            (&mut v as *mut T).cast(),
            std::mem::size_of::<T>(),
            &mut written,
        )
    };
    (st == STATUS_SUCCESS).then_some(v)
}

/// A layout's attributes: six reads for a single matrix (each read is a library call, the
/// bulk of the interposer's cost per call), two or three more for a batch.
unsafe fn read_layout(f: GetAttributeFn, l: MatrixLayout) -> Option<LayoutAttrs> {
    unsafe {
        let batch = attr::<i32>(f, l, LAYOUT_BATCH_COUNT)?;
        let stride = if batch > 1 {
            // Batches through arrays of pointers (CUDA 13's batch mode) are not served;
            // a library without the attribute has only strided batches.
            if attr::<i32>(f, l, LAYOUT_BATCH_MODE).is_some_and(|m| m != 0) {
                return None;
            }
            attr::<i64>(f, l, LAYOUT_STRIDED_BATCH_OFFSET)?
        } else {
            0
        };
        Some(LayoutAttrs {
            dtype: attr::<u32>(f, l, LAYOUT_TYPE)? as i32,
            order: attr::<i32>(f, l, LAYOUT_ORDER)?,
            rows: attr::<u64>(f, l, LAYOUT_ROWS)?,
            cols: attr::<u64>(f, l, LAYOUT_COLS)?,
            ld: attr::<i64>(f, l, LAYOUT_LD)?,
            batch,
            stride,
        })
    }
}

/// The key of a call, or `None` when it is not one tunedblas serves.
unsafe fn read_key(x: &LtCall) -> Option<LtKey> {
    if [x.desc, x.a_desc, x.b_desc, x.c_desc, x.d_desc]
        .iter()
        .any(|p| p.is_null())
    {
        return None;
    }
    let dg = LT.desc_get()?;
    let lg = LT.layout_get()?;
    unsafe {
        let mut mm = MatmulAttrs {
            compute: attr::<i32>(dg, x.desc, DESC_COMPUTE_TYPE)?,
            scale: attr::<i32>(dg, x.desc, DESC_SCALE_TYPE)?,
            pointer_mode: attr::<i32>(dg, x.desc, DESC_POINTER_MODE)?,
            trans_a: attr::<i32>(dg, x.desc, DESC_TRANSA)?,
            trans_b: attr::<i32>(dg, x.desc, DESC_TRANSB)?,
            epilogue: attr::<u32>(dg, x.desc, DESC_EPILOGUE)?,
            bias_type: -1,
            sm_count: attr::<i32>(dg, x.desc, DESC_SM_COUNT_TARGET).unwrap_or(0),
        };
        let a = read_layout(lg, x.a_desc)?;
        let b = read_layout(lg, x.b_desc)?;
        let c = read_layout(lg, x.c_desc)?;
        // PyTorch passes one descriptor for C and D.
        let d = if x.d_desc == x.c_desc {
            c
        } else {
            read_layout(lg, x.d_desc)?
        };
        if epilogue_has_bias(mm.epilogue) {
            // -1 (unset) means the bias has D's type.
            let t = attr::<i32>(dg, x.desc, DESC_BIAS_DATA_TYPE)?;
            mm.bias_type = if t < 0 { d.dtype } else { t };
        }
        match key_from_attrs(&mm, &a, &b, &c, &d) {
            Ok(k) => Some(k),
            Err(why) => {
                debug!("cuBLASLt: passing a call through: {why}");
                None
            }
        }
    }
}

/// Rebuilds a row's algorithm and checks it against this call's descriptors.
unsafe fn prepare(x: &LtCall, key: &LtKey, cfg: &AlgoConfig) -> Option<Prepared> {
    let report = |why: String| {
        let (op, sig) = op_and_signature(key);
        info!(
            "cuBLASLt: {} for {op},{sig} cannot be used: {why}; the caller's own algorithm runs instead (re-tune this build)",
            cfg.solution_name()
        );
    };
    let (Some(init), Some(set), Some(get), Some(check)) = (
        LT.algo_init(),
        LT.config_set(),
        LT.config_get(),
        LT.algo_check(),
    ) else {
        report("this cuBLASLt lacks the algorithm functions".into());
        return None;
    };
    // SAFETY: the resolved cuBLASLt functions and the caller's live handle.
    let algo = match unsafe { build_algo(init, set, get, x.handle, key, cfg) } {
        Ok(a) => a,
        Err(why) => {
            report(why);
            return None;
        }
    };
    let mut result = HeuristicResult::default();
    // SAFETY: the caller's descriptors; result is a valid out-pointer.
    let st = unsafe {
        check(
            x.handle,
            x.desc,
            x.a_desc,
            x.b_desc,
            x.c_desc,
            x.d_desc,
            &algo,
            &mut result,
        )
    };
    if st != STATUS_SUCCESS {
        report(format!("cublasLtMatmulAlgoCheck returned {st}"));
        return None;
    }
    // Alignment the algorithm needs of each pointer (16 bytes when the library won't say).
    let mut min_align = [16u32; 4];
    if let Some(cap) = LT.cap_get() {
        for (i, slot) in min_align.iter_mut().enumerate() {
            let mut v = 0u32;
            let mut written = 0usize;
            // SAFETY: a 4-byte attribute into a u32.
            let st = unsafe {
                cap(
                    &algo,
                    CAP_MIN_ALIGNMENT_A_BYTES + i as i32,
                    (&mut v as *mut u32).cast(),
                    4,
                    &mut written,
                )
            };
            if st == STATUS_SUCCESS && v > 0 {
                *slot = v;
            }
        }
    }
    debug!(
        "cuBLASLt: {} checked: workspace {} bytes, alignment {:?}",
        cfg.solution_name(),
        result.workspace_size,
        min_align
    );
    Some(Prepared {
        algo,
        workspace: result.workspace_size,
        min_align,
    })
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
        let suffix = if crate::runtime::started() {
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
