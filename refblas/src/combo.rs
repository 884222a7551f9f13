//! The type combinations refblas computes, and for each one the arithmetic that models what
//! rocBLAS does: how elements widen into the accumulator, how the result narrows back, and
//! whether the accumulator itself lives in f16.

use crate::numeric::{round_f16, Bf16, F16};
use std::ffi::c_void;
use tunedblas_core::abi::{Datatype, DT_BF16_R, DT_F16_R, DT_F32_R, DT_F64_R};

/// One supported `(a = b = c = d type, compute type)` pair. Anything else is
/// `rocblas_status_not_implemented`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combo {
    /// f16 data, f32 compute (PyTorch's fp16 GEMMs: "HPA", high-precision accumulate).
    HalfF32,
    /// f16 data, f16 compute (`rocblas_hgemm`, llama.cpp on RDNA).
    HalfF16,
    /// bf16 data, f32 compute.
    Bf16F32,
    /// f32 throughout (`rocblas_sgemm`).
    F32,
    /// f64 throughout.
    F64,
}

impl Combo {
    pub const ALL: [Combo; 5] = [
        Combo::HalfF32,
        Combo::HalfF16,
        Combo::Bf16F32,
        Combo::F32,
        Combo::F64,
    ];

    /// The combination for these datatypes, if refblas computes it.
    pub fn from_types(
        a: Datatype,
        b: Datatype,
        c: Datatype,
        d: Datatype,
        compute: Datatype,
    ) -> Option<Combo> {
        if a != b || a != c || a != d {
            return None;
        }
        Some(match (a, compute) {
            (DT_F16_R, DT_F32_R) => Combo::HalfF32,
            (DT_F16_R, DT_F16_R) => Combo::HalfF16,
            (DT_BF16_R, DT_F32_R) => Combo::Bf16F32,
            (DT_F32_R, DT_F32_R) => Combo::F32,
            (DT_F64_R, DT_F64_R) => Combo::F64,
            _ => return None,
        })
    }

    /// Position in [`Combo::ALL`]; solution IDs are derived from it.
    pub fn ordinal(self) -> usize {
        Combo::ALL.iter().position(|&c| c == self).unwrap()
    }

    /// `(data type, compute type)` as rocBLAS datatypes.
    pub fn types(self) -> (Datatype, Datatype) {
        match self {
            Combo::HalfF32 => (DT_F16_R, DT_F32_R),
            Combo::HalfF16 => (DT_F16_R, DT_F16_R),
            Combo::Bf16F32 => (DT_BF16_R, DT_F32_R),
            Combo::F32 => (DT_F32_R, DT_F32_R),
            Combo::F64 => (DT_F64_R, DT_F64_R),
        }
    }
}

/// The accumulator types: f32 (also used, with rounding, for f16 compute) and f64.
pub trait Acc:
    Copy
    + Default
    + PartialEq
    + std::fmt::Debug
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + Send
    + Sync
    + 'static
{
    const ZERO: Self;
    fn to_f64(self) -> f64;
}

impl Acc for f32 {
    const ZERO: f32 = 0.0;
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Acc for f64 {
    const ZERO: f64 = 0.0;
    fn to_f64(self) -> f64 {
        self
    }
}

/// The arithmetic of one [`Combo`]: kernels are generic over it, so every kernel serves every
/// combination with the same summation order.
pub trait Policy: 'static {
    /// Element storage type (what a, b, c and d point to).
    type E: Copy + Send + Sync + 'static;
    /// Accumulator type.
    type A: Acc;
    const COMBO: Combo;
    fn load(e: Self::E) -> Self::A;
    fn store(a: Self::A) -> Self::E;
    /// Applied to the accumulator at each kernel's block boundaries: the identity unless the
    /// compute type is f16, where it rounds to f16 (so f16 compute really loses precision,
    /// and where the rounding happens depends on the kernel, as on a GPU).
    #[inline]
    fn settle(a: Self::A) -> Self::A {
        a
    }
    /// Rounds a value to the output (storage) type and back: what storing a partial result in
    /// D and reading it again does.
    #[inline]
    fn round_out(a: Self::A) -> Self::A {
        Self::load(Self::store(a))
    }
    /// Reads alpha or beta, which are of the compute type.
    ///
    /// # Safety
    /// `p` must point to a readable value of the compute type.
    unsafe fn scalar(p: *const c_void) -> Self::A;
}

pub struct HalfF32;
pub struct HalfF16;
pub struct Bf16F32;
pub struct F32;
pub struct F64;

/// One [`Policy`] impl: element and accumulator types, how an element widens (`load`) and
/// narrows (`store`), what type alpha and beta have and how it widens, and, for f16 compute,
/// the rounding.
macro_rules! policy {
    ($name:ident: $e:ty => $a:ty, load $load:expr, store $store:expr,
     scalar $s:ty => $widen:expr $(, settle $settle:expr)?) => {
        impl Policy for $name {
            type E = $e;
            type A = $a;
            const COMBO: Combo = Combo::$name;
            #[inline]
            fn load(e: $e) -> $a {
                $load(e)
            }
            #[inline]
            fn store(a: $a) -> $e {
                $store(a)
            }
            $(
                #[inline]
                fn settle(a: $a) -> $a {
                    $settle(a)
                }
            )?
            unsafe fn scalar(p: *const c_void) -> $a {
                $widen((p as *const $s).read_unaligned())
            }
        }
    };
}

use std::convert::identity as same;
policy!(HalfF32: F16 => f32, load F16::to_f32, store F16::from_f32, scalar f32 => same);
policy!(HalfF16: F16 => f32, load F16::to_f32, store F16::from_f32, scalar F16 => F16::to_f32,
        settle round_f16);
policy!(Bf16F32: Bf16 => f32, load Bf16::to_f32, store Bf16::from_f32, scalar f32 => same);
policy!(F32: f32 => f32, load same, store same, scalar f32 => same);
policy!(F64: f64 => f64, load same, store same, scalar f64 => same);

#[cfg(test)]
mod tests {
    use super::*;
    use tunedblas_core::abi::DT_I8_R;

    #[test]
    fn supported_and_unsupported_types() {
        for c in Combo::ALL {
            let (t, ct) = c.types();
            assert_eq!(Combo::from_types(t, t, t, t, ct), Some(c));
        }
        // Mixed output, int8, bf16 compute, f32 data with f64 compute: not implemented here.
        let unsupported = [
            [DT_F16_R, DT_F16_R, DT_F32_R, DT_F32_R, DT_F32_R],
            [DT_I8_R, DT_I8_R, DT_I8_R, DT_I8_R, DT_F32_R],
            [DT_BF16_R, DT_BF16_R, DT_BF16_R, DT_BF16_R, DT_BF16_R],
            [DT_F32_R, DT_F32_R, DT_F32_R, DT_F32_R, DT_F64_R],
            [DT_F32_R, DT_F16_R, DT_F32_R, DT_F32_R, DT_F32_R],
        ];
        for [a, b, c, d, compute] in unsupported {
            assert_eq!(
                Combo::from_types(a, b, c, d, compute),
                None,
                "{a} {b} {c} {d} {compute}"
            );
        }
    }
}
