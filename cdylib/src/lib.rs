//! `libtunedblas.so`: loaded with `LD_PRELOAD` into an inference server, it intercepts the
//! rocBLAS GEMM calls (and cuBLASLt's `cublasLtMatmul`), serves the tuned solution of the
//! profile made for the loaded library build, and records every shape that has no row.
//!
//! # Layout
//!
//! Shared by every backend, at the top:
//! - [`exports`]: every exported symbol, in one file (and nothing else is exported).
//! - [`lifecycle`]: one lifecycle for every backend: settings, lazy start-up, fork, every
//!   way out of the process, and the locks that never block a fork child or signal handler.
//! - [`real`]: how a real function is found (the documented resolution order) and the
//!   `hook_table!` macro each backend declares its typed table of real functions with.
//! - [`libs`]: which library build a handle (and so a call) belongs to, as libraries are
//!   closed, reopened or loaded side by side; one registry per backend.
//! - [`recorder`]: the one miss recorder (in-memory set, miss and counts files).
//! - [`stats`]: per-thread counters; [`log`]: rate-limited stderr lines.
//!
//! One folder per backend, holding only that backend's key building, serving and real
//! calls:
//! - [`rocblas`]: the runtime (profile, misses, near serving), `real.rs` (hook table,
//!   handles, devices), `serve.rs` (the decision and the tuned calls).
//! - [`cublaslt`]: the runtime, `real.rs`, `key.rs` (the key from the descriptors),
//!   `serve.rs` (the decision, the tuned call, rebuilt algorithms).
//!
//! # Where a call goes
//!
//! A rocBLAS GEMM: its export (`exports.rs`) -> a caller's own choice jumps straight to the
//! real function (`rocblas::real::HOOKS`, resolved by `real.rs`); a handle of another build
//! goes to that build's own function (`libs.rs`); every other call to `rocblas::serve`,
//! which decides (table lookup; on a miss the recorder and near serving) and makes the
//! tuned call, its fallback, or the caller's own call through the same real function.
//! `cublasLtMatmul`: its export -> `cublaslt::serve::matmul` -> `cublaslt::key` (the key)
//! -> the decision -> `cublaslt::real::call` with the row's rebuilt algorithm or the
//! caller's.
//!
//! # A new backend
//!
//! A folder `<backend>/` with `mod.rs` (its runtime: a `lifecycle::Lazy`, a
//! `lifecycle::Backend` for exit and fork, a `recorder::Recorder` for its misses),
//! `real.rs` (its `hook_table!` and `libs::Registry`), its key building and `serve.rs`;
//! then its exports in `exports.rs`, one entry in `lifecycle::BACKENDS`, its counters in
//! `stats.rs`, and `tests/build_properties.rs`'s export list.

mod cublaslt;
mod exports;
mod libs;
mod lifecycle;
mod log;
mod real;
mod recorder;
mod rocblas;
mod stats;

#[cfg(test)]
mod alloc_test;
