//! The rocBLAS backend's mapping from call arguments to problem keys.
//!
//! Every GEMM entry point the interposer wraps, and every call the harness issues, goes
//! through these few functions, so a key means the same thing everywhere. They return `None`
//! for calls that are not a real problem to tune (rocBLAS quick-returns: m, n or batch 0) or
//! whose arguments rocBLAS itself would reject (unknown operation, negative sizes, short
//! leading dimensions): those are passed through and never recorded.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::abi::{self, Datatype, Operation};
use crate::key::{Batching, ProblemKey, Trans, Types};

/// The environment variable rocBLAS reads (once per process) to override every call's
/// `fp16_alt_impl` flag. rocBLAS 2.47 and 4.4 both read it.
pub const FP16_ALT_IMPL_VAR: &str = "ROCBLAS_INTERNAL_FP16_ALT_IMPL";

/// What a value of [`FP16_ALT_IMPL_VAR`] does, as rocBLAS reads it (`std::atoi(value) == 0`
/// clears the flag, anything else sets it; unset leaves each call's flag): `None` for unset,
/// else whether the flag is forced on.
pub fn fp16_alt_impl_override(value: Option<&[u8]>) -> Option<bool> {
    let v = value?;
    // atoi: leading white space, an optional sign, digits; anything else reads as 0.
    let mut rest = v.iter().skip_while(|b| b.is_ascii_whitespace()).peekable();
    if matches!(rest.peek(), Some(b'+' | b'-')) {
        rest.next();
    }
    Some(rest.take_while(|b| b.is_ascii_digit()).any(|&b| b != b'0'))
}

/// The flags rocBLAS runs a call with: the caller's, with `fp16_alt_impl` forced as the
/// override says, for f16 and bf16 inputs (the only ones the flag changes).
#[inline]
pub fn apply_fp16_alt_impl(types: &Types, flags: u32, forced: Option<bool>) -> u32 {
    let half = matches!(types.a, abi::DT_F16_R | abi::DT_BF16_R);
    match forced {
        Some(true) if half => flags | abi::FLAG_FP16_ALT_IMPL,
        Some(false) if half => flags & !abi::FLAG_FP16_ALT_IMPL,
        _ => flags,
    }
}

/// This process's [`FP16_ALT_IMPL_VAR`], read once: 0 not yet, 1 unset, 2 off, 3 on.
static FP16_ALT: AtomicU8 = AtomicU8::new(0);

#[cold]
fn read_fp16_alt_impl() -> u8 {
    // getenv, not std::env: no allocation and no lock on the interposer's first call.
    let name = c"ROCBLAS_INTERNAL_FP16_ALT_IMPL";
    // SAFETY: a NUL-terminated name; the value, if any, is NUL-terminated and is read at once.
    let value = unsafe {
        let p = libc::getenv(name.as_ptr());
        (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_bytes())
    };
    let state = match fp16_alt_impl_override(value) {
        None => 1,
        Some(false) => 2,
        Some(true) => 3,
    };
    FP16_ALT.store(state, Ordering::Relaxed);
    state
}

/// [`apply_fp16_alt_impl`] with this process's [`FP16_ALT_IMPL_VAR`] (read on first use,
/// as rocBLAS reads it once): the flags a call's key must carry, since rocBLAS runs another
/// kernel for the same call when the variable says so.
#[inline]
pub fn effective_flags(types: &Types, flags: u32) -> u32 {
    let state = match FP16_ALT.load(Ordering::Relaxed) {
        0 => read_fp16_alt_impl(),
        s => s,
    };
    let forced = match state {
        2 => Some(false),
        3 => Some(true),
        _ => None,
    };
    apply_fp16_alt_impl(types, flags, forced)
}

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
/// `None` only for an operation rocBLAS does not have. The key's flags are the ones rocBLAS
/// runs the call with ([`effective_flags`]).
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
        effective_flags(&types, flags),
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
    fn fp16_alt_impl_variable_read_as_rocblas_reads_it() {
        assert_eq!(fp16_alt_impl_override(None), None);
        for (v, on) in [
            ("1", true),
            ("0", false),
            ("", false),
            ("yes", false),
            (" 2", true),
            ("-1", true),
            ("+0", false),
            ("00", false),
            ("10x", true),
        ] {
            assert_eq!(
                fp16_alt_impl_override(Some(v.as_bytes())),
                Some(on),
                "{v:?}"
            );
        }
    }

    /// rocBLAS runs an f16/bf16 call with fp16_alt_impl when ROCBLAS_INTERNAL_FP16_ALT_IMPL
    /// says so, whatever the caller passed: the key must say what runs.
    #[test]
    fn the_override_goes_into_f16_and_bf16_keys() {
        let alt = FLAG_FP16_ALT_IMPL;
        let half = Types::HALF;
        let bf16 = Types::uniform(DT_BF16_R, DT_F32_R);
        assert_eq!(apply_fp16_alt_impl(&half, 0, Some(true)), alt);
        assert_eq!(apply_fp16_alt_impl(&bf16, 0, Some(true)), alt);
        assert_eq!(apply_fp16_alt_impl(&half, alt | 0x2, Some(false)), 0x2);
        assert_eq!(apply_fp16_alt_impl(&half, alt, None), alt);
        assert_eq!(
            apply_fp16_alt_impl(&Types::SGEMM, 0, Some(true)),
            0,
            "f32 has no alt impl"
        );
        assert_eq!(apply_fp16_alt_impl(&Types::HGEMM, 0, Some(true)), alt);
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
