//! Tuning one hipBLASLt shape: the heuristic's first answer (what PyTorch runs without
//! TunableOp) against every algorithm `getAllAlgos` lists for the problem's types that
//! `matmulIsAlgoSupported` accepts for this exact problem within the callers' workspace,
//! each named by its index (`Gemm_Hipblaslt_<index>`, the row PyTorch TunableOp writes and
//! the interposer rebuilds with `getAlgosFromIndex`), then the shared pipeline.

use tunedblas_core::cublaslt::LtAction;
use tunedblas_core::hipblaslt::SOLUTION_PREFIX;

use tunedblas_core::abi::{HIPBLAS_STATUS_INVALID_VALUE, HIPBLAS_STATUS_NOT_SUPPORTED};

use super::lib::check;
use super::problem::HipProblem;
use crate::lt::cuda::Result;
use crate::lt::pipeline::{self, Cand};
use crate::lt::tune::{Options, Outcome, Recheck};

pub fn tune_shape(p: &HipProblem, opts: &Options) -> Result<Outcome> {
    let base = p.heuristic()?;
    let base_index = p.index_of(&base.algo)?;
    let mut dropped = Vec::new();
    let mut cands: Vec<Cand<_>> = Vec::new();
    let (mut listed, mut unsupported, mut no_index) = (0, 0, 0);
    for mut r in p.all_algos()? {
        listed += 1;
        let index = match p.index_of(&r.algo) {
            Ok(i) if i >= 0 => i,
            _ => {
                no_index += 1;
                continue;
            }
        };
        let action = LtAction::Index(index);
        if index == base_index || cands.iter().any(|c| c.action == action) {
            continue;
        }
        // The algorithm as matmulIsAlgoSupported updates it is the one timed and served.
        match p.supported(&mut r.algo) {
            Ok(ws) if ws <= p.workspace_bytes => cands.push(Cand {
                action,
                algo: r.algo,
                workspace: ws,
            }),
            Ok(ws) => dropped.push(format!(
                "{SOLUTION_PREFIX}{index}: needs {ws} bytes of workspace, callers give {} (--workspace)",
                p.workspace_bytes
            )),
            Err(HIPBLAS_STATUS_INVALID_VALUE | HIPBLAS_STATUS_NOT_SUPPORTED) => unsupported += 1,
            Err(st) => dropped.push(format!(
                "{SOLUTION_PREFIX}{index}: {}",
                check("matmulIsAlgoSupported", st).unwrap_err().0
            )),
        }
    }
    if unsupported > 0 {
        dropped.push(format!(
            "{unsupported} of the {listed} algorithms listed: not supported for this problem (matmulIsAlgoSupported)"
        ));
    }
    if no_index > 0 {
        dropped.push(format!(
            "{no_index} of the {listed} algorithms listed: no index (getIndexFromAlgo), so no row can name them"
        ));
    }
    let name = LtAction::Index(base_index).solution_text();
    let mut out = pipeline::decide(
        p,
        (&base.algo, &name, base.workspace_size),
        cands,
        opts,
        dropped,
    )?;
    out.timing = p.timing();
    Ok(out)
}

/// The row of `index` re-measured against the heuristic, the algorithm rebuilt from its
/// index as the interposer rebuilds it and checked as it checks it.
pub fn recheck(p: &HipProblem, index: i32, opts: &Options) -> Result<Recheck> {
    let base = p.heuristic()?;
    let mut r = Recheck::new(&p.key, LtAction::Index(index).solution_text());
    let algo = p
        .algo_from_index(index)
        .and_then(|mut algo| match p.supported(&mut algo) {
            Ok(ws) if ws <= p.workspace_bytes => Ok(algo),
            Ok(ws) => Err(crate::lt::cuda::Error(format!(
                "needs {ws} bytes of workspace, callers give {} (--workspace)",
                p.workspace_bytes
            ))),
            Err(st @ (HIPBLAS_STATUS_INVALID_VALUE | HIPBLAS_STATUS_NOT_SUPPORTED)) => {
                Err(crate::lt::cuda::Error(format!(
                    "matmulIsAlgoSupported refuses it for this problem (hipBLAS status {st})"
                )))
            }
            Err(st) => Err(check("matmulIsAlgoSupported", st).unwrap_err()),
        });
    match algo {
        Ok(algo) => pipeline::measure_pair(p, &base.algo, &algo, opts, &mut r)?,
        Err(e) => r.error = Some(e.0),
    }
    Ok(r)
}
