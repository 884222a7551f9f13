//! Serving `cublasLtMatmul`: the cuBLASLt backend of the interposer.
//!
//! The export in `exports.rs` hands every call to [`serve::matmul`]. It knows the problem
//! from what the caller's matmul and layout descriptors were made and set with (the
//! descriptor and layout calls are wrapped too, [`objects`]; no attribute getter runs), looks
//! the call up in the profile of the *loaded* `libcublasLt.so` (chosen by its sha256, like
//! rocBLAS's), and:
//!
//! - a `Gemm_Cublaslt_...` row: the algorithm is rebuilt from its configuration with
//!   `cublasLtMatmulAlgoInit` + `ConfigSetAttribute` and checked with
//!   `cublasLtMatmulAlgoCheck` once per key (on the key's first call, with that call's
//!   descriptors); each call whose workspace and pointer alignment suit it then runs with
//!   it instead of the caller's `algo`. After a failed rebuild, check or call the caller's
//!   own call is made, and a second failure quarantines the row for the process
//!   (`crate::lt::serve`).
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
//! - [`objects`]: each descriptor's and layout's attributes as they were made and set.
//! - [`key`]: the key of a call from those (through the getters for objects not made through
//!   the interposer), and its call key.
//! - [`serve`]: what cuBLASLt supplies to the shared serving path (`crate::lt::serve`):
//!   its calls, and rebuilt algorithms.
//! - this file: its runtime (the shared `crate::lt::LtRuntime`), counters and lifecycle
//!   hooks.

pub mod key;
pub mod objects;
pub mod real;
pub mod serve;

use tunedblas_core::cublaslt::*;

use crate::lifecycle::{Backend, Pass};
use crate::lt::{Counters, Lt, LtSpec};
use crate::stats::Counter;
use real::{current_device, CUBLASLT, LT};

/// What the lifecycle does for cuBLASLt at exit and fork.
pub static BACKEND: Backend = Backend { finish, after_fork };

/// cuBLASLt's runtime, recorder and serving switch (a runtime apart from rocBLAS's, so a
/// process using one library never pays for identifying the other).
pub static STATE: Lt = Lt::new(&SPEC);

/// What tells cuBLASLt apart in the shared Lt runtime.
pub static SPEC: LtSpec = LtSpec {
    lib: LtLib::Cublaslt,
    matmul_name: "cublasLtMatmul",
    counters: Counters {
        served: Counter::LtServed,
        default: Counter::LtDefault,
        missed: Counter::LtMissed,
        passed_through: Counter::LtPassedThrough,
        fallbacks: Counter::LtFallbacks,
    },
    miss_tag: "-cublaslt",
    json_name: "cublaslt",
    // The table's own accessor, in the served build's scope (see hipBLASLt's `SPEC`).
    anchor: || LT.matmul().map(|f| f as *mut std::ffi::c_void),
    device: current_device,
    loaded: |_| {},
};

fn finish(pass: Pass) {
    // The rocBLAS side owns the stats file when it ran too; then ours goes beside it.
    STATE.finish(pass, crate::rocblas::started());
}

/// In a fork child: the child's handles and misses are its own.
unsafe fn after_fork() {
    // SAFETY: the lifecycle calls this from the fork child handler only.
    unsafe {
        CUBLASLT.after_fork();
        STATE.after_fork();
    }
}
