//! A small simulated inference workload: the GEMMs one dense transformer layer stack puts
//! on the wire for decode steps, MTP verify batches and chunked prefill, including the
//! 256/512-token chunks a dynamic-prefill controller schedules (FACTS.md section 5).
//!
//! The (N, K) pairs are the seed's seven dense shapes scaled down by 16 so the CPU reference
//! backend runs them in seconds; the token counts are the real ones. `tunedblas demo` runs
//! it, and `tunedblas-bench near-bench` measures near-shape serving on its layers.

use std::path::Path;
use std::time::Instant;

use tunedblas_core::abi;
use tunedblas_core::key::{ProblemKey, Types};

use crate::backends::rocblas::{Rocblas, RocblasProblem};
use crate::error::Result;

/// The seed's (N, K) pairs, divided by 16.
#[rustfmt::skip]
pub const LAYERS: [(i64, i64); 7] =
    [(640, 160), (224, 160), (32, 160), (160, 96), (256, 160), (640, 20), (21, 640)];

/// One step of the server: a token count and why it occurs.
#[rustfmt::skip]
pub const STEPS: [(i64, &str); 10] = [
    (1, "decode"), (2, "decode"), (4, "decode"), (8, "decode"),
    (3, "MTP verify"), (6, "MTP verify"), (12, "MTP verify"),
    (256, "dynamic-prefill rung"), (512, "dynamic-prefill shared cap"), (517, "chunk + 5 decodes"),
];

/// `F.linear(x[M,K], W[N,K])` in fp16 as PyTorch issues it: gemm_ex(T, N, m=N, n=M, k=K).
pub fn linear_key(n_out: i64, tokens: i64, k: i64) -> ProblemKey {
    ProblemKey::linear(Types::HALF, n_out, tokens, k)
}

/// Every (key, reason) of one pass over the workload.
pub fn keys() -> Vec<(ProblemKey, &'static str)> {
    STEPS
        .iter()
        .flat_map(|&(m, why)| LAYERS.iter().map(move |&(n, k)| (linear_key(n, m, k), why)))
        .collect()
}

/// What a workload run measured.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub calls: usize,
    pub gemm_ms: f64,
    pub failures: usize,
}

/// Runs `passes` passes of the workload in this process, calling rocBLAS the way a linked
/// host does (so a preloaded interposer serves it).
pub fn run(lib_path: &Path, passes: usize) -> Result<Report> {
    let lib = Rocblas::open_as_host(lib_path)?;
    let problems: Vec<RocblasProblem> = keys()
        .into_iter()
        .map(|(k, _)| RocblasProblem::once(&lib, k))
        .collect::<Result<_>>()?;
    let mut report = Report::default();
    for _ in 0..passes {
        for p in &problems {
            let t = Instant::now();
            let status = p.run_flags(0, None, 0);
            report.gemm_ms += t.elapsed().as_secs_f64() * 1e3;
            report.calls += 1;
            if status != abi::STATUS_SUCCESS {
                report.failures += 1;
            }
        }
    }
    Ok(report)
}
