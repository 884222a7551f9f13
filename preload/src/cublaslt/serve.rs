//! What cuBLASLt supplies to the shared serving path (`crate::lt::serve`): its calls, its
//! key, and the rebuilt algorithm a row names (`tunedblas_lt_algo::build_algo`, checked
//! once per key with `cublasLtMatmulAlgoCheck`).

use tunedblas_core::cublaslt::*;
use tunedblas_lt_algo::build_algo;

use super::real::{CUBLASLT, LT};
use crate::log::debug;
use crate::lt::serve::Library;
use crate::lt::LtCall;

/// cuBLASLt, to the shared serving path.
pub struct Cublaslt;

impl Library for Cublaslt {
    crate::lt::serve::library_statics! {
        matmul: MatmulFn, state: super::STATE, builds: CUBLASLT, hooks: LT, key: super::key
    }

    unsafe fn prepare(x: &LtCall, key: &LtKey, action: &LtAction) -> Result<Prepared, String> {
        match action {
            // SAFETY: per the trait.
            LtAction::Config(cfg) => unsafe { prepare(x, key, cfg) },
            // Not loaded for cuBLASLt (`LtLib::serves`).
            _ => Err("not a cuBLASLt row".into()),
        }
    }
}

/// Rebuilds a row's algorithm and checks it against this call's descriptors.
unsafe fn prepare(x: &LtCall, key: &LtKey, cfg: &AlgoConfig) -> Result<Prepared, String> {
    let (Some(init), Some(set), Some(get), Some(check)) = (
        LT.algo_init(),
        LT.config_set(),
        LT.config_get(),
        LT.algo_check(),
    ) else {
        return Err("this cuBLASLt lacks the algorithm functions".into());
    };
    // SAFETY: the resolved cuBLASLt functions and the caller's live handle.
    let algo = unsafe { build_algo(init, set, get, x.handle, key, cfg) }?;
    let mut result = HeuristicResult::default();
    // SAFETY: the caller's descriptors; result is a valid out-pointer.
    let st = unsafe {
        check(
            x.handle,
            x.desc,
            x.a_desc,
            x.b_desc,
            x.c_desc,
            x.d_desc,
            &algo,
            &mut result,
        )
    };
    if st != STATUS_SUCCESS {
        return Err(format!("cublasLtMatmulAlgoCheck returned {st}"));
    }
    // Alignment the algorithm needs of each pointer (16 bytes when the library won't say).
    let mut min_align = [16u32; 4];
    if let Some(cap) = LT.cap_get() {
        for (i, slot) in min_align.iter_mut().enumerate() {
            let mut v = 0u32;
            let mut written = 0usize;
            // SAFETY: a 4-byte attribute into a u32.
            let st = unsafe {
                cap(
                    &algo,
                    CAP_MIN_ALIGNMENT_A_BYTES + i as i32,
                    (&mut v as *mut u32).cast(),
                    4,
                    &mut written,
                )
            };
            if st == STATUS_SUCCESS && v > 0 {
                *slot = v;
            }
        }
    }
    debug!(
        "cuBLASLt: {} checked: workspace {} bytes, alignment {:?}",
        cfg.solution_name(),
        result.workspace_size,
        min_align
    );
    Ok(Prepared::new(algo, result.workspace_size, min_align, 0))
}
