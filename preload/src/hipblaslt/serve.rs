//! What hipBLASLt supplies to the shared serving path (`crate::lt::serve`): its calls, its
//! key, and the algorithm a `Gemm_Hipblaslt_<index>` row names, rebuilt once per key with
//! `hipblaslt_ext::getAlgosFromIndex` and checked with `matmulIsAlgoSupported` against the
//! key's first call (its descriptors, alpha and beta), as PyTorch TunableOp checks it.

use tunedblas_core::abi::{
    HipblasLtMatmulAlgo, HipblasLtMatmulFn, HIPBLASLT_POINTER_MODE_HOST, HIP_R_16BF, HIP_R_16F,
    HIP_R_32F, HIP_R_64F,
};
use tunedblas_core::cublaslt::{LtAction, LtKey, MatmulAlgo, Prepared};

use super::ext;
use super::real::{HIPBLASLT, HIPLT};
use crate::log::debug;
use crate::lt::serve::Library;
use crate::lt::LtCall;

/// Alignment asked of each pointer before a tuned algorithm runs on it: hipBLASLt cannot
/// say what an algorithm needs, and tuning ran on aligned buffers, so a misaligned call
/// keeps the caller's own algorithm.
const MIN_ALIGN: u32 = 16;

/// hipBLASLt, to the shared serving path.
pub struct Hipblaslt;

impl Library for Hipblaslt {
    crate::lt::serve::library_statics! {
        matmul: HipblasLtMatmulFn, state: super::STATE, builds: HIPBLASLT, hooks: HIPLT,
        key: super::key
    }

    unsafe fn prepare(x: &LtCall, key: &LtKey, action: &LtAction) -> Result<Prepared, String> {
        let &LtAction::Index(index) = action else {
            // Not loaded for hipBLASLt (`LtLib::serves`).
            return Err("not a hipBLASLt row".into());
        };
        // SAFETY: the caller's live handle.
        let mut algo = unsafe { ext::algo_from_index(x.handle, index) }?;
        // SAFETY: the caller's live handle and descriptors.
        let workspace = unsafe { ext::workspace_if_supported(x, &mut algo) }?;
        debug!(
            "hipBLASLt: {} checked: workspace {workspace} bytes",
            action.solution_text()
        );
        Ok(Prepared::new(
            into_lt_algo(algo),
            workspace,
            [MIN_ALIGN; 4],
            // SAFETY: the caller's arguments.
            unsafe { Self::call_class(x, key) },
        ))
    }

    #[inline(always)]
    /// Tensile kernels may be specialised on alpha = 1, beta = 0 or beta = 1, and hipBLASLt
    /// does not check an explicit algorithm against the values of a call: an algorithm
    /// checked with one call's values serves only calls with the same three facts. Device
    /// pointers (a key of its own) are one class.
    unsafe fn call_class(x: &LtCall, key: &LtKey) -> u8 {
        if key.pointer_mode != HIPBLASLT_POINTER_MODE_HOST {
            return 0x40;
        }
        if x.alpha.is_null() || x.beta.is_null() {
            return 0x80;
        }
        if key.scale == HIP_R_32F {
            // PyTorch's scale type: 1.0 and +-0.0 told by their bits, as the general case
            // below tells them.
            // SAFETY: host scalars of the scale type, per the caller's descriptor.
            let (a, b) = unsafe {
                (
                    x.alpha.cast::<u32>().read_unaligned(),
                    x.beta.cast::<u32>().read_unaligned(),
                )
            };
            let one = 1f32.to_bits();
            return u8::from(a == one) | u8::from(b << 1 == 0) << 1 | u8::from(b == one) << 2;
        }
        // SAFETY: host scalars of the scale type, per the caller's descriptor.
        let (alpha, beta) = unsafe {
            match key.scale {
                HIP_R_64F => (
                    x.alpha.cast::<f64>().read_unaligned(),
                    x.beta.cast::<f64>().read_unaligned(),
                ),
                HIP_R_32F => (
                    f64::from(x.alpha.cast::<f32>().read_unaligned()),
                    f64::from(x.beta.cast::<f32>().read_unaligned()),
                ),
                // f16 and bf16 scales: told by their bits (1.0 and +-0.0).
                HIP_R_16F | HIP_R_16BF => {
                    let one = if key.scale == HIP_R_16F {
                        0x3c00
                    } else {
                        0x3f80
                    };
                    let (a, b) = (
                        x.alpha.cast::<u16>().read_unaligned(),
                        x.beta.cast::<u16>().read_unaligned(),
                    );
                    let f = |v: u16| {
                        if v == one {
                            1.0
                        } else if v & 0x7fff == 0 {
                            0.0
                        } else {
                            2.0
                        }
                    };
                    (f(a), f(b))
                }
                _ => return 0x80,
            }
        };
        u8::from(alpha == 1.0) | u8::from(beta == 0.0) << 1 | u8::from(beta == 1.0) << 2
    }
}

/// A hipBLASLt algorithm (24 bytes) kept in the Lt table's algorithm slot (64 bytes, 8-byte
/// aligned like it): the serving path hands its address to `hipblasLtMatmul`.
fn into_lt_algo(algo: HipblasLtMatmulAlgo) -> MatmulAlgo {
    const {
        assert!(std::mem::size_of::<HipblasLtMatmulAlgo>() <= std::mem::size_of::<MatmulAlgo>());
        assert!(std::mem::align_of::<HipblasLtMatmulAlgo>() <= std::mem::align_of::<MatmulAlgo>());
    }
    let mut slot = MatmulAlgo::default();
    // SAFETY: the slot is large and aligned enough (checked above).
    unsafe {
        (&mut slot as *mut MatmulAlgo)
            .cast::<HipblasLtMatmulAlgo>()
            .write(algo)
    };
    slot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_algorithm_kept_in_the_slot_reads_back_whole() {
        let mut a = HipblasLtMatmulAlgo::default();
        a.data
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8 + 1);
        a.max_workspace_bytes = 4096;
        let slot = into_lt_algo(a);
        // SAFETY: written by into_lt_algo.
        let back = unsafe { *(&slot as *const MatmulAlgo).cast::<HipblasLtMatmulAlgo>() };
        assert_eq!(back, a);
    }
}
