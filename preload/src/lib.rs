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
//! - [`status`]: the live status files beside the miss log (JSON for `tunedblas status`,
//!   Prometheus text), written by a writer thread, at count flushes and at every way out.
//!
//! One folder per backend, holding only that backend's key building, serving and real
//! calls:
//! - [`rocblas`]: the runtime (profile, misses), `real.rs` (hook table, handles, devices),
//!   `serve.rs` (the decision, and `make_call!`: the tuned call of all 14 GEMM entry
//!   points), `near.rs` (near-shape serving: its state and its serve path), `dynsym.rs`
//!   (the `_64` exports shown to the loader only where the served build has them).
//! - [`lt`]: what the two Lt backends share: their runtime (`LtRuntime`: identity,
//!   profile, misses, stats, summary), the serving path (`serve.rs`: the decision, the
//!   tuned call, the fallback) and reading descriptors (`key.rs`).
//! - [`cublaslt`]: its `LtSpec` and lifecycle hooks, `real.rs`, `key.rs` (the key from the
//!   descriptors), `serve.rs` (what cuBLASLt supplies to `lt::serve`: rebuilt algorithms).
//! - [`hipblaslt`]: the same for hipBLASLt, plus `objects.rs` (what hipBLASLt will not read
//!   back, kept from its create and set calls) and `ext.rs` (the `hipblaslt_ext` C++
//!   calls that turn a `Gemm_Hipblaslt_<index>` row into an algorithm).
//!
//! # Where a call goes
//!
//! A rocBLAS GEMM: its export (`exports.rs`) -> a caller's own choice jumps straight to the
//! real function (`rocblas::real::HOOKS`, resolved in the order `real.rs` documents); a
//! handle of another build goes to that build's own function, untouched (`libs.rs`); every
//! other call to the entry's serving function (`gemm_ex`: its `serve_it`, which keeps the
//! caller's arguments where they are; the other 13: `rocblas::serve::gemm_batched_ex`,
//! `typed_gemm`, ...) -> `serve::decide` (table lookup; on a miss the recorder and
//! `rocblas::near`) -> `serve::make_call!`, which calls the real function with the tuned
//! solution (`algo = solution_index`; hgemm/sgemm re-issued as `gemm_ex`), falls back to
//! the caller's own call if that fails, or makes the caller's own call.
//! `cublasLtMatmul` and `hipblasLtMatmul`: the export -> `lt::serve::matmul` for that
//! library (`cublaslt::serve::Cublaslt`, `hipblaslt::serve::Hipblaslt`) -> its key
//! (`cublaslt::key`, `hipblaslt::key`) -> the decision -> the library's call with the row's
//! rebuilt algorithm or the caller's. hipBLASLt's descriptor and layout creates, sets and
//! destroys pass through `hipblaslt::objects` on their way to the real functions.
//!
//! # A new backend
//!
//! A folder `<backend>/` with `mod.rs` (its runtime: a `lifecycle::Lazy`, a
//! `lifecycle::Backend` for exit and fork, a `recorder::Recorder` for its misses),
//! `real.rs` (its `hook_table!` and `libs::BuildRegistry`), its key building and `serve.rs`;
//! then its exports in `exports.rs`, one entry in `lifecycle::BACKENDS`, its counters in
//! `stats.rs`, and `tests/build_properties.rs`'s export list. A library shaped like
//! cuBLASLt (hipBLASLt was the second) needs less: a `lt::LtSpec` (its counters, names, how
//! to find its matmul and device), a `lt::serve::Library` impl (its calls, its key, how a
//! row's algorithm is rebuilt), `real.rs` and its exports; `lt::LtRuntime` and
//! `lt::serve::matmul` do the rest.

mod copies;
mod cublaslt;
mod exports;
mod files;
mod hipblaslt;
mod libs;
mod lifecycle;
mod log;
mod lt;
mod real;
mod recorder;
mod reload;
mod rocblas;
mod stats;
mod status;
mod tally;

#[cfg(test)]
mod alloc_test;
