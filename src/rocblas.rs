//! The rocBLAS backend's mapping from call arguments to problem keys.
//!
//! Every GEMM entry point the interposer wraps, and every call the harness issues, goes
//! through these few functions, so a key means the same thing everywhere. They return `None`
//! for calls that are not a real problem to tune (rocBLAS quick-returns: m, n or batch 0) or
//! whose arguments rocBLAS itself would reject (unknown operation, negative sizes, short
//! leading dimensions): those are passed through and never recorded.

use crate::abi::{Datatype, Operation};
use crate::key::{Batching, ProblemKey, Trans, Types};

/// The sizes and leading dimensions of one GEMM call, widened to i64.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub lda: i64,
    pub ldb: i64,
    pub ldc: i64,
    pub ldd: i64,
}

/// Whether a call with this key is a problem rocBLAS would run: no quick return (m, n and
/// batch positive) and arguments it would accept ([`ProblemKey::is_sane`]).
#[inline]
pub fn is_real_problem(key: &ProblemKey) -> bool {
    key.m > 0 && key.n > 0 && key.batch > 0 && key.is_sane()
}

/// A single GEMM (`gemm_ex`, and `hgemm`/`sgemm` with their fixed [`Types`]).
#[inline]
pub fn single_key(
    trans_a: Operation,
    trans_b: Operation,
    types: Types,
    d: Dims,
    flags: u32,
) -> Option<ProblemKey> {
    single_key_unchecked(trans_a, trans_b, types, d, flags).filter(is_real_problem)
}

/// [`single_key`] without the [`is_real_problem`] check, for the interposer's hot path: it
/// looks the key up first and checks only what the table does not know (see `Entry::servable`).
/// `None` only for an operation rocBLAS does not have.
#[inline]
pub fn single_key_unchecked(
    trans_a: Operation,
    trans_b: Operation,
    types: Types,
    d: Dims,
    flags: u32,
) -> Option<ProblemKey> {
    Some(ProblemKey::single(
        Trans::from_rocblas(trans_a)?,
        Trans::from_rocblas(trans_b)?,
        types,
        d.m,
        d.n,
        d.k,
        d.lda,
        d.ldb,
        d.ldc,
        d.ldd,
        flags,
    ))
}

/// A batched GEMM: `strides` are ignored for pointer arrays.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn batched_key(
    trans_a: Operation,
    trans_b: Operation,
    types: Types,
    d: Dims,
    batching: Batching,
    batch: i64,
    strides: [i64; 4],
    flags: u32,
) -> Option<ProblemKey> {
    let key = single_key(trans_a, trans_b, types, d, flags)?;
    (batch > 0).then(|| key.with_batch(batching, batch, strides))
}

/// The [`Types`] of a `gemm_ex`-family call.
#[inline]
pub fn ex_types(a: Datatype, b: Datatype, c: Datatype, d: Datatype, compute: Datatype) -> Types {
    Types {
        a,
        b,
        c,
        d,
        compute,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::*;

    fn dims(m: i64, n: i64, k: i64) -> Dims {
        Dims {
            m,
            n,
            k,
            lda: k,
            ldb: k,
            ldc: m,
            ldd: m,
        }
    }

    #[test]
    fn quick_return_and_invalid_calls_have_no_key() {
        let t = Types::SGEMM;
        assert!(single_key(OP_TRANSPOSE, OP_NONE, t, dims(0, 4, 4), 0).is_none());
        assert!(single_key(OP_TRANSPOSE, OP_NONE, t, dims(4, 0, 4), 0).is_none());
        assert!(single_key(99, OP_NONE, t, dims(4, 4, 4), 0).is_none());
        assert!(single_key(OP_TRANSPOSE, OP_NONE, t, dims(-1, 4, 4), 0).is_none());
        let mut short = dims(4, 4, 4);
        short.ldc = 2;
        assert!(single_key(OP_TRANSPOSE, OP_NONE, t, short, 0).is_none());
        let k0 = Dims {
            lda: 1,
            ldb: 1,
            ..dims(4, 4, 0)
        };
        assert!(
            single_key(OP_TRANSPOSE, OP_NONE, t, k0, 0).is_some(),
            "k = 0 is real"
        );
    }

    #[test]
    fn sgemm_and_gemm_ex_f32_share_a_key() {
        let typed = single_key(OP_NONE, OP_NONE, Types::SGEMM, dims(8, 8, 8), 0);
        let ex = single_key(
            OP_NONE,
            OP_NONE,
            ex_types(DT_F32_R, DT_F32_R, DT_F32_R, DT_F32_R, DT_F32_R),
            dims(8, 8, 8),
            0,
        );
        assert_eq!(typed, ex);
    }

    #[test]
    fn batch_zero_is_quick_return() {
        let t = Types::HGEMM;
        assert!(batched_key(
            OP_NONE,
            OP_NONE,
            t,
            dims(8, 8, 8),
            Batching::Strided,
            0,
            [0; 4],
            0
        )
        .is_none());
        let k = batched_key(
            OP_NONE,
            OP_NONE,
            t,
            dims(8, 8, 8),
            Batching::Strided,
            3,
            [1, 2, 3, 4],
            0,
        )
        .unwrap();
        assert_eq!((k.batch, k.stride_c), (3, 3));
    }
}
