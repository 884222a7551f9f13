//! The hipBLASLt backend's pure part. hipBLASLt mirrors cuBLASLt's C API (the same 16
//! arguments to `hipblasLtMatmul`, descriptors read through `GetAttribute`), so a hipBLASLt
//! call gets the *same* key, names and lookup table as a cuBLASLt one
//! ([`crate::cublaslt`]): PyTorch names a GEMM the same way whichever library runs it, and
//! a ROCm TunableOp file's `GemmTunableOp_*` rows read as they are. What differs is
//! numbering, mapped here into the key's (cuBLAS) numbers:
//!
//! - transposes: hipBLAS's `HIPBLAS_OP_N/T/C` are 111/112/113 (cuBLAS 0/1/2);
//! - compute types: `hipblasComputeType_t` counts from 0 (cuBLAS's from 64);
//! - attribute numbers of the descriptors ([`crate::abi`]);
//! - data types, epilogues, orders and pointer modes have cuBLASLt's numbers already.
//!
//! A tuned hipBLASLt row names an algorithm by its *index* (`Gemm_Hipblaslt_<index>`,
//! [`crate::cublaslt::LtAction::Index`]), as PyTorch TunableOp writes it; the interposer
//! turns it back into an algorithm with `hipblaslt_ext::getAlgosFromIndex` and checks it
//! with `hipblaslt_ext::matmulIsAlgoSupported` (`preload/src/hipblaslt/`). Indices belong
//! to one hipBLASLt build: the profile is chosen by the sha256 of the loaded library.

use crate::abi::*;
use crate::cublaslt::{self as lt, ComputeType, MatmulAttrs};

/// The solution prefix PyTorch TunableOp writes for a hipBLASLt algorithm.
pub const SOLUTION_PREFIX: &str = "Gemm_Hipblaslt_";

/// A `hipblasComputeType_t` as the key's (cuBLAS) compute type.
pub fn compute_type(hip: i32) -> Option<ComputeType> {
    Some(match hip {
        HIPBLAS_COMPUTE_16F => lt::COMPUTE_16F,
        HIPBLAS_COMPUTE_16F_PEDANTIC => lt::COMPUTE_16F_PEDANTIC,
        HIPBLAS_COMPUTE_32F => lt::COMPUTE_32F,
        HIPBLAS_COMPUTE_32F_PEDANTIC => lt::COMPUTE_32F_PEDANTIC,
        HIPBLAS_COMPUTE_32F_FAST_16F => lt::COMPUTE_32F_FAST_16F,
        HIPBLAS_COMPUTE_32F_FAST_16BF => lt::COMPUTE_32F_FAST_16BF,
        HIPBLAS_COMPUTE_32F_FAST_TF32 => lt::COMPUTE_32F_FAST_TF32,
        HIPBLAS_COMPUTE_64F => lt::COMPUTE_64F,
        HIPBLAS_COMPUTE_64F_PEDANTIC => lt::COMPUTE_64F_PEDANTIC,
        HIPBLAS_COMPUTE_32I => lt::COMPUTE_32I,
        HIPBLAS_COMPUTE_32I_PEDANTIC => lt::COMPUTE_32I_PEDANTIC,
        _ => return None, // the 8-bit float modes: not served
    })
}

/// The key's compute type back as a `hipblasComputeType_t` (for a harness building the
/// descriptor of a key).
pub fn hip_compute_type(key: ComputeType) -> Option<i32> {
    (0..=HIPBLAS_COMPUTE_32I_PEDANTIC).find(|&h| compute_type(h) == Some(key))
}

/// The key's transpose as a `hipblasOperation_t` (for a harness building the descriptor of
/// a key).
pub fn hip_operation(t: crate::key::Trans) -> i32 {
    match t {
        crate::key::Trans::N => HIPBLAS_OP_N,
        crate::key::Trans::T => HIPBLAS_OP_T,
        crate::key::Trans::C => HIPBLAS_OP_C,
    }
}

/// A `hipblasOperation_t` as the key's (cuBLAS) operation; an unknown value stays unknown
/// (the key then refuses the call).
pub fn operation(hip: i32) -> i32 {
    match hip {
        HIPBLAS_OP_N => lt::OP_N,
        HIPBLAS_OP_T => lt::OP_T,
        HIPBLAS_OP_C => lt::OP_C,
        _ => -1,
    }
}

/// What the interposer read of a hipBLASLt matmul: the types given at
/// `hipblasLtMatmulDescCreate` and the descriptor's attributes, in hipBLASLt's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HipMatmul {
    pub compute: i32,
    pub scale: i32,
    pub trans_a: i32,
    pub trans_b: i32,
    pub epilogue: u32,
    pub bias_type: i32,
    pub pointer_mode: i32,
}

impl HipMatmul {
    /// In the key's numbers, or why the call is not served.
    pub fn to_lt(&self) -> Result<MatmulAttrs, &'static str> {
        let compute =
            compute_type(self.compute).ok_or("a compute type tunedblas does not serve")?;
        Ok(MatmulAttrs {
            compute,
            scale: self.scale,
            pointer_mode: self.pointer_mode,
            trans_a: operation(self.trans_a),
            trans_b: operation(self.trans_b),
            epilogue: self.epilogue,
            bias_type: self.bias_type,
            // hipBLASLt has no SM count target.
            sm_count: 0,
        })
    }
}

/// Reads `Gemm_Hipblaslt_<index>`, and the older `Gemm_Hipblaslt_<TA><TB>_<index>` (PyTorch
/// 2.2 to 2.5 named the layout too, e.g. `Gemm_Hipblaslt_NT_12345`); `None` when the text is
/// not a hipBLASLt solution at all.
pub fn parse_index(text: &str) -> Option<Result<i32, String>> {
    let v = text.trim().strip_prefix(SOLUTION_PREFIX)?;
    let v = match v.as_bytes() {
        [a, b, b'_', ..] if b"NT".contains(a) && b"NT".contains(b) => &v[3..],
        _ => v,
    };
    Some(
        v.parse::<i32>()
            .map_err(|_| format!("{text}: the hipBLASLt index {v:?} is not a 32-bit integer")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cublaslt::{key_from_attrs, op_and_signature, LayoutAttrs, LtKey, R_16BF};
    use crate::key::Trans;

    /// PyTorch's hipBLASLt path for a bf16 F.linear names the same row as its cuBLASLt
    /// path: a ROCm TunableOp file's rows are this backend's keys as they are.
    #[test]
    fn a_pytorch_linear_through_hipblaslt_has_pytorchs_name() {
        let (n_out, tokens, k) = (2560u64, 512u64, 1536u64);
        let hip = HipMatmul {
            compute: HIPBLAS_COMPUTE_32F,
            scale: HIP_R_32F,
            trans_a: HIPBLAS_OP_T,
            trans_b: HIPBLAS_OP_N,
            epilogue: HIPBLASLT_EPILOGUE_DEFAULT as u32,
            bias_type: -1,
            pointer_mode: HIPBLASLT_POINTER_MODE_HOST,
        };
        let a = LayoutAttrs::col(HIP_R_16BF, k, n_out, k as i64);
        let b = LayoutAttrs::col(HIP_R_16BF, k, tokens, k as i64);
        let c = LayoutAttrs::col(HIP_R_16BF, n_out, tokens, n_out as i64);
        let key = key_from_attrs(&hip.to_lt().unwrap(), &a, &b, &c, &c).unwrap();
        assert_eq!(
            key,
            LtKey::linear(R_16BF, n_out as i64, tokens as i64, k as i64)
        );
        let (op, sig) = op_and_signature(&key);
        assert_eq!(op, "GemmTunableOp_BFloat16_TN");
        assert_eq!(sig, "tn_2560_512_1536_ld_1536_1536_2560");
    }

    #[test]
    fn hipblas_numbers_map_one_to_one() {
        for h in 0..=HIPBLAS_COMPUTE_32I_PEDANTIC {
            let c = compute_type(h).unwrap();
            assert_eq!(hip_compute_type(c), Some(h));
        }
        assert_eq!(compute_type(100), None);
        assert_eq!(operation(HIPBLAS_OP_T), lt::OP_T);
        for t in [Trans::N, Trans::T, Trans::C] {
            assert_eq!(operation(hip_operation(t)), lt::op_of(t));
        }
        // cuBLAS's own numbers are not hipBLAS's: a 0 is no transpose.
        assert_eq!(operation(0), -1);
        let hip = HipMatmul {
            compute: 100,
            scale: HIP_R_32F,
            trans_a: HIPBLAS_OP_N,
            trans_b: HIPBLAS_OP_N,
            epilogue: 1,
            bias_type: -1,
            pointer_mode: 0,
        };
        assert!(hip.to_lt().is_err());
    }

    #[test]
    fn indices_parse_as_pytorch_writes_them() {
        assert_eq!(parse_index("Gemm_Hipblaslt_123"), Some(Ok(123)));
        assert_eq!(parse_index(" Gemm_Hipblaslt_-5 "), Some(Ok(-5)));
        assert_eq!(parse_index("Gemm_Hipblaslt_NT_12345"), Some(Ok(12345)));
        assert!(matches!(parse_index("Gemm_Hipblaslt_NX_1"), Some(Err(_))));
        assert!(matches!(parse_index("Gemm_Hipblaslt_1_2"), Some(Err(_))));
        assert!(matches!(
            parse_index("Gemm_Hipblaslt_99999999999"),
            Some(Err(_))
        ));
        assert_eq!(parse_index("Gemm_Rocblas_3"), None);
    }
}
