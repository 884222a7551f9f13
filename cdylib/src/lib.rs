//! `libtunedblas.so`: loaded with `LD_PRELOAD` into an inference server, it intercepts the
//! rocBLAS GEMM calls, serves the tuned solution of the profile made for the loaded rocBLAS
//! build, and records every shape that has no row.
//!
//! - [`exports`]: every exported symbol (and nothing else is exported).
//! - [`serve`]: the decision for one call: tuned, `Default`, miss, pass-through, fallback.
//! - [`lifecycle`]: one lifecycle for every backend: settings, lazy start-up, fork, every
//!   way out of the process, and the locks that never block a fork child or signal handler.
//! - [`recorder`]: the one miss recorder (in-memory set, miss and counts files).
//! - [`runtime`]: the rocBLAS backend's runtime: profile selection, misses, near serving.
//! - [`cublaslt`]: serving `cublasLtMatmul` (key from descriptors, rebuilt algorithms).
//! - [`real`]: the typed table of real functions and how they are found.
//! - [`libs`]: which rocBLAS build a handle (and so a call) belongs to, as libraries are
//!   closed, reopened or loaded side by side.
//! - [`stats`]: per-thread counters; [`log`]: rate-limited stderr lines.

mod cublaslt;
mod dynsym;
mod exports;
mod libs;
mod lifecycle;
mod log;
mod real;
mod recorder;
mod runtime;
mod serve;
mod stats;

#[cfg(test)]
mod alloc_test;
