//! The tuning engine of `tunedblas`: one pipeline, for every library, from a recorded shape
//! to a row of the profile of exactly the library build that was loaded.
//!
//! The steps, in order: the library's candidates ([`backends`]), screened by short probes
//! within a time budget per shape and pruned to the fastest few ([`bench::Screen`]); their
//! numerics against a high-precision reference ([`numerics`]); a warm-up, then interleaved
//! trials of the heuristic, the current row and the candidates with the device resting
//! between samples ([`pipeline`], [`timer`], [`rest`]); curation by margin, paired wins and
//! spread ([`curate`]); a second set of trials in this process and a third in a fresh
//! process ([`campaign`]); qualification on every device; limits per shape measured in the
//! same run ([`limits`]); the locked, resumable store with shard and merge ([`checkpoint`],
//! [`store`]). Every library is one small module of [`backends`] (rocBLAS, hipBLASLt,
//! cuBLASLt; refblas and the stand-ins are the same modules loaded from the CPU libraries),
//! and every library tunes with one worker per device.

pub mod backends;
pub mod bench;
pub mod campaign;
pub mod checkpoint;
pub mod curate;
pub mod dl;
pub mod error;
pub mod held;
pub mod limits;
pub mod numerics;
pub mod pipeline;
pub mod progress;
pub mod rest;
pub mod runtime;
pub mod say;
pub mod store;
pub mod timer;
pub mod workload;
