//! Serving `hipblasLtMatmul`: the hipBLASLt backend of the interposer (AMD's Lt library,
//! where PyTorch sends plain GEMMs on MI200/MI300/MI350 and RDNA4, README "AMD GPUs").
//!
//! hipBLASLt mirrors cuBLASLt, so this backend is the shared Lt runtime and serving path
//! (`crate::lt`) with hipBLASLt's pieces:
//!
//! - [`objects`]: what the key needs, kept from the calls that make and set the objects
//!   (hipBLASLt will not tell most of it back): each matmul descriptor's types, transposes,
//!   epilogue and pointer mode, each layout's type, order, rows, columns and leading
//!   dimension, in the Lt key's numbers (`tunedblas_core::hipblaslt`), so PyTorch's own
//!   `GemmTunableOp_*` / `GemmStridedBatchedTunableOp_*` rows are its keys; the descriptor
//!   and layout calls go to the hipBLASLt their caller links (`crate::lt::callers`);
//! - [`key`]: the key of a call from those, and its call key;
//! - [`ext`]: `hipblaslt_ext::getAlgosFromIndex` / `matmulIsAlgoSupported` /
//!   `getIndexFromAlgo`, the C++ calls that turn a `Gemm_Hipblaslt_<index>` row back into
//!   an algorithm, made through [`guard`] (C++ that turns an exception into a status);
//! - [`serve`]: the rebuilt, checked algorithm a row names;
//! - [`real`]: the hook table, handles and their builds, the device (`hipGetDevice`);
//! - this file: its runtime, counters and lifecycle hooks.
//!
//! The profile is the one made for the sha256 of the loaded `libhipblaslt.so` (indices are
//! build-specific). A row's algorithm is rebuilt and checked once per key; a call with less
//! workspace than it needs, or a pointer not 16-byte aligned, runs the caller's algorithm;
//! after a failed rebuild, check or call the caller's own call is made, and a second
//! failure quarantines the row (`crate::lt::serve`).
//! Keys without a row are recorded as `<host>-<pid>-<start>-hipblaslt-rank<device>.csv`.

pub mod ext;
pub mod guard;
pub mod key;
pub mod objects;
pub mod real;
pub mod serve;

use tunedblas_core::cublaslt::LtLib;

use crate::lifecycle::{Backend, Pass};
use crate::lt::{Counters, Lt, LtSpec};
use crate::stats::Counter;
use real::{current_device, HIPBLASLT, HIPLT};

/// What the lifecycle does for hipBLASLt at exit and fork.
pub static BACKEND: Backend = Backend { finish, after_fork };

/// hipBLASLt's runtime, recorder and serving switch.
pub static STATE: Lt = Lt::new(&SPEC);

/// What tells hipBLASLt apart in the shared Lt runtime.
pub static SPEC: LtSpec = LtSpec {
    lib: LtLib::Hipblaslt,
    matmul_name: "hipblasLtMatmul",
    counters: Counters {
        served: Counter::HipLtServed,
        default: Counter::HipLtDefault,
        missed: Counter::HipLtMissed,
        passed_through: Counter::HipLtPassedThrough,
        fallbacks: Counter::HipLtFallbacks,
    },
    miss_tag: "-hipblaslt",
    json_name: "hipblaslt",
    // The table's own accessor, in the served build's scope (`Hook::get` resolves in the
    // usual order and caches what it finds in the table: with a second build loaded, the
    // runtime then identified, and served, that one).
    anchor: || HIPLT.matmul().map(|f| f as *mut std::ffi::c_void),
    device: current_device,
    loaded: |tables| {
        // The exception guard, only where a row will need it.
        if tables.tables.iter().flatten().any(|t| {
            t.iter()
                .any(|(_, e)| matches!(e.action, tunedblas_core::cublaslt::LtAction::Index(_)))
        }) {
            guard::load();
        }
    },
};

fn finish(pass: Pass) {
    // rocBLAS or cuBLASLt own the stats file when they ran too.
    STATE.finish(
        pass,
        crate::rocblas::started() || crate::cublaslt::STATE.started(),
    );
}

/// In a fork child: the child's handles and misses are its own. (Its descriptors and
/// layouts are the parent's, copied: `objects` keeps them as they are.)
unsafe fn after_fork() {
    // SAFETY: the lifecycle calls this from the fork child handler only.
    unsafe {
        HIPBLASLT.after_fork();
        STATE.after_fork();
    }
}
