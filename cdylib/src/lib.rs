//! `libtunedblas.so`: loaded with `LD_PRELOAD` into an inference server, it intercepts the
//! rocBLAS GEMM calls, serves the tuned solution of the profile made for the loaded rocBLAS
//! build, and records every shape that has no row.
//!
//! - [`exports`]: every exported symbol (and nothing else is exported).
//! - [`serve`]: the decision for one call: tuned, `Default`, miss, pass-through, fallback.
//! - [`runtime`]: lazy start-up, profile selection, miss recording, exit and fork.
//! - [`cublaslt`]: serving `cublasLtMatmul` (key from descriptors, rebuilt algorithms).
//! - [`real`]: the typed table of real functions and how they are found.
//! - [`stats`]: per-thread counters; [`log`]: rate-limited stderr lines.

mod cublaslt;
mod exports;
mod log;
mod real;
mod runtime;
mod serve;
mod stats;

#[cfg(test)]
mod alloc_test;
