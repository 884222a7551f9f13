//! refblas: a CPU reference rocBLAS.
//!
//! It speaks the rocBLAS GEMM ABI (and the few HIP runtime calls the harness needs) with real
//! arithmetic and several real solutions per problem, so the interposer and the harness run
//! against it exactly as they would against rocBLAS on a machine without an AMD GPU.
//!
//! All logic lives in this rlib; the two cdylib crates `refblas/v4` and `refblas/v5` invoke
//! [`export_rocblas!`] once to emit the C exports bound to their [`Flavour`], giving
//! `librocblas_v4.so` (SONAME `librocblas.so.4`) and `librocblas_v5.so` (`librocblas.so.5`).
//!
//! - [`numeric`]: f16 / bf16 conversions (the core's, which the tuner shares).
//! - [`combo`]: supported type combinations and their arithmetic.
//! - [`kernels`]: the GEMM kernels; [`solutions`]: which can solve what, and the heuristic.
//! - [`flavour`]: rocBLAS 4.x vs 5.x identity and solution-index encoding.
//! - [`gemm`]: argument checks, solution resolution, execution, get_solutions.
//! - [`handle`], [`hip`], [`info`]: handles, the HIP subset, version and status strings;
//!   [`graph`]: streams, stream capture and graph replay.
//! - [`trace`]: `REFBLAS_TRACE`, one line per executed GEMM.
//! - [`exports`]: the C shims and the export macro.
//!
//! Environment: `REFBLAS_TRACE=<file>`, `REFBLAS_NO_COMPUTE=1` (or `=return`: return at once, no
//! checks), `REFBLAS_DEVICES=<n>` (default 4), `REFBLAS_FAULTY_SOLUTION=<id>` (that solution
//! leaves D unwritten), `REFBLAS_NO_GRAPHS=1` (stream capture refused), `REFBLAS_GRAPH_FAIL_AFTER=N` (refused after N), and the injected faults `REFBLAS_FAIL_SOLUTIONS=<id,...>` and
//! `REFBLAS_FAIL_ALL=<status>` ([`gemm::Faults`]), each read once.

pub mod combo;
pub mod exports;
pub mod flavour;
pub mod gemm;
pub mod graph;
pub mod handle;
pub mod hip;
pub mod info;
pub mod kernels;
pub mod solutions;
pub mod trace;

/// The shared rocBLAS ABI (re-exported for the export macro).
pub use tunedblas_core::abi;
pub use tunedblas_core::half as numeric;

pub use combo::Combo;
pub use flavour::Flavour;
pub use gemm::{GemmCall, GemmOutcome, Layout};
pub use solutions::{Kernel, Shape};

#[cfg(test)]
mod tests;
