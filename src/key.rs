//! The problem key: everything that makes one rocBLAS GEMM problem distinct.
//!
//! Two calls with equal keys run the same kernels with the same results, so a tuned solution
//! for one serves the other. The key is independent of which entry point carried the call:
//! `rocblas_sgemm` and `rocblas_gemm_ex` with f32 everywhere are one problem, and the `_64`
//! twins share keys with their 32-bit forms. Sizes are i64 so both widths fit.

use std::hash::{Hash, Hasher};

use crate::abi::{self, Datatype, Operation};

/// How the batch is laid out in memory.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[repr(u8)]
pub enum Batching {
    /// One GEMM (`gemm_ex`, `hgemm`, `sgemm`).
    Single = 0,
    /// `batch` GEMMs at fixed strides (`gemm_strided_batched_ex`, `*gemm_strided_batched`).
    Strided = 1,
    /// `batch` GEMMs through device arrays of pointers (`gemm_batched_ex`).
    PointerArray = 2,
}

/// A transpose letter as TunableOp writes it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[repr(u8)]
pub enum Trans {
    N = b'N',
    T = b'T',
    C = b'C',
}

impl Trans {
    #[inline]
    pub fn from_rocblas(op: Operation) -> Option<Trans> {
        match op {
            abi::OP_NONE => Some(Trans::N),
            abi::OP_TRANSPOSE => Some(Trans::T),
            abi::OP_CONJUGATE_TRANSPOSE => Some(Trans::C),
            _ => None,
        }
    }
    pub fn to_rocblas(self) -> Operation {
        match self {
            Trans::N => abi::OP_NONE,
            Trans::T => abi::OP_TRANSPOSE,
            Trans::C => abi::OP_CONJUGATE_TRANSPOSE,
        }
    }
    pub fn from_letter(c: char) -> Option<Trans> {
        match c.to_ascii_uppercase() {
            'N' => Some(Trans::N),
            'T' => Some(Trans::T),
            'C' => Some(Trans::C),
            _ => None,
        }
    }
    pub fn letter(self) -> char {
        self as u8 as char
    }
}

/// The data types of a problem: inputs a and b, input c, output d, and the compute type.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Types {
    pub a: Datatype,
    pub b: Datatype,
    pub c: Datatype,
    pub d: Datatype,
    pub compute: Datatype,
}

impl Types {
    /// a, b, c and d of one type `io`, computed in `compute`.
    pub const fn uniform(io: Datatype, compute: Datatype) -> Types {
        Types {
            a: io,
            b: io,
            c: io,
            d: io,
            compute,
        }
    }
    /// What `rocblas_hgemm` computes: f16 everywhere, f16 compute.
    pub const HGEMM: Types = Types::uniform(abi::DT_F16_R, abi::DT_F16_R);
    /// What `rocblas_sgemm` computes: f32 everywhere.
    pub const SGEMM: Types = Types::uniform(abi::DT_F32_R, abi::DT_F32_R);
    /// f16 tensors computed in f32: PyTorch's half GEMMs (`GemmTunableOp_Half_*`).
    pub const HALF: Types = Types::uniform(abi::DT_F16_R, abi::DT_F32_R);
    /// int8 inputs, int32 output and compute: the int8 GEMM.
    pub const INT8: Types = Types {
        a: abi::DT_I8_R,
        b: abi::DT_I8_R,
        c: abi::DT_I32_R,
        d: abi::DT_I32_R,
        compute: abi::DT_I32_R,
    };
}

/// One GEMM problem. See the module docs for what is (and is not) part of it.
///
/// `Hash` feeds the hasher one word, [`ProblemKey::lookup_hash`], instead of the ~20 fields
/// a derived impl would feed it one by one: the interposer hashes a key on every call; `==`
/// is [`ProblemKey::same_as`].
#[derive(Clone, Copy, Debug, PartialOrd, Ord)]
pub struct ProblemKey {
    pub batching: Batching,
    pub trans_a: Trans,
    pub trans_b: Trans,
    pub types: Types,
    /// Only the flags that change the kernel or its rounding ([`abi::KERNEL_FLAGS`]).
    pub flags: u32,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub lda: i64,
    pub ldb: i64,
    pub ldc: i64,
    pub ldd: i64,
    /// 1 for a single GEMM.
    pub batch: i64,
    /// 0 unless `batching` is `Strided`.
    pub stride_a: i64,
    pub stride_b: i64,
    pub stride_c: i64,
    pub stride_d: i64,
}

/// Rows and columns of A, B, C and D as stored (column-major, before the transposes) for an
/// m x n x k problem, op(A) being m x k and op(B) k x n: the one GEMM geometry rocBLAS's and
/// cuBLASLt's keys share.
#[inline]
pub fn stored_shapes(trans_a: Trans, trans_b: Trans, m: i64, n: i64, k: i64) -> [(i64, i64); 4] {
    let a = if trans_a == Trans::N { (m, k) } else { (k, m) };
    let b = if trans_b == Trans::N { (k, n) } else { (n, k) };
    [a, b, (m, n), (m, n)]
}

/// `a * b` as 128 bits, folded to 64 by xor of the halves: one multiply instruction that
/// mixes every input bit into the low output bits.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Odd constants for [`ProblemKey::lookup_hash`] (digits of pi).
const SEED: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d1,
    0x082e_fa98_ec4e_6c89,
];

/// Equality is [`ProblemKey::same_as`]: every field, compared without branches (maps and
/// sets of keys, the miss set among them, compare keys on every repeated miss).
impl PartialEq for ProblemKey {
    #[inline]
    fn eq(&self, other: &ProblemKey) -> bool {
        self.same_as(other)
    }
}

impl Eq for ProblemKey {}

impl Hash for ProblemKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.lookup_hash());
    }
}

impl ProblemKey {
    /// A 64-bit hash of every field, for the interposer's lookup table and miss set.
    ///
    /// Pairs of fields share a word (one in each half, exact while sizes fit 32 bits), the
    /// words are folded into four with xor-rotates and those go into two independent 128-bit
    /// multiplies, which the CPU runs side by side. The derived impl fed ~20 fields to FxHash, a dependent chain of one multiply
    /// each, and was most of the interposer's cost per call (docs/benchmarks/history.md). Not for
    /// untrusted input: it does not resist chosen collisions, which only cost probes here.
    #[inline(always)]
    pub fn lookup_hash(&self) -> u64 {
        let t = &self.types;
        let pair = |lo: i64, hi: i64| lo as u64 ^ (hi as u64).rotate_left(32);
        let w = [
            self.batching as u64
                | (self.trans_a as u64) << 8
                | (self.trans_b as u64) << 16
                | (self.flags as u64) << 24 ^ (t.compute as u32 as u64).rotate_left(32),
            t.a as u32 as u64 | (t.b as u32 as u64) << 32,
            t.c as u32 as u64 | (t.d as u32 as u64) << 32,
            pair(self.m, self.n),
            pair(self.k, self.batch),
            pair(self.lda, self.ldb),
            pair(self.ldc, self.ldd),
            pair(self.stride_a, self.stride_b),
            pair(self.stride_c, self.stride_d),
        ];
        // Ten words into four with xor-rotates (cheap, and every field still moves the
        // result), then two independent multiplies.
        let u0 = w[0] ^ w[1].rotate_left(17) ^ w[2].rotate_left(41);
        let u1 = w[3];
        let u2 = w[4] ^ w[5].rotate_left(23);
        let u3 = w[6] ^ w[7].rotate_left(13) ^ w[8].rotate_left(29);
        fold(u0 ^ SEED[0], u1 ^ SEED[1]) ^ fold(u2 ^ SEED[2], u3 ^ SEED[3])
    }

    /// Equality without branches: every field compared and the differences or-ed, so a
    /// lookup that finds its row costs one straight run of loads, not ~20 compare-and-jumps.
    /// Same result as `==`.
    #[inline(always)]
    pub fn same_as(&self, o: &ProblemKey) -> bool {
        let (t, u) = (&self.types, &o.types);
        let small = (self.batching as u32 ^ o.batching as u32)
            | (self.trans_a as u32 ^ o.trans_a as u32)
            | (self.trans_b as u32 ^ o.trans_b as u32)
            | (self.flags ^ o.flags)
            | (t.a ^ u.a) as u32
            | (t.b ^ u.b) as u32
            | (t.c ^ u.c) as u32
            | (t.d ^ u.d) as u32
            | (t.compute ^ u.compute) as u32;
        let big = (self.m ^ o.m)
            | (self.n ^ o.n)
            | (self.k ^ o.k)
            | (self.lda ^ o.lda)
            | (self.ldb ^ o.ldb)
            | (self.ldc ^ o.ldc)
            | (self.ldd ^ o.ldd)
            | (self.batch ^ o.batch)
            | (self.stride_a ^ o.stride_a)
            | (self.stride_b ^ o.stride_b)
            | (self.stride_c ^ o.stride_c)
            | (self.stride_d ^ o.stride_d);
        (small as i64 | big) == 0
    }

    /// A single GEMM with explicit leading dimensions.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn single(
        trans_a: Trans,
        trans_b: Trans,
        types: Types,
        m: i64,
        n: i64,
        k: i64,
        lda: i64,
        ldb: i64,
        ldc: i64,
        ldd: i64,
        flags: u32,
    ) -> ProblemKey {
        ProblemKey {
            batching: Batching::Single,
            trans_a,
            trans_b,
            types,
            flags: flags & abi::KERNEL_FLAGS,
            m,
            n,
            k,
            lda,
            ldb,
            ldc,
            ldd,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            stride_d: 0,
        }
    }

    /// `F.linear(x[M, K], W[N, K])` as PyTorch issues it, packed: gemm_ex(T, N, m = N,
    /// n = M (the token count), k = K, lda = ldb = K, ldc = ldd = N).
    pub fn linear(types: Types, n_out: i64, tokens: i64, k: i64) -> ProblemKey {
        ProblemKey::single(
            Trans::T,
            Trans::N,
            types,
            n_out,
            tokens,
            k,
            k,
            k,
            n_out,
            n_out,
            0,
        )
    }

    /// The same problem run with `flags` (only the kernel flags are kept, as in
    /// [`ProblemKey::single`]).
    pub fn with_flags(mut self, flags: u32) -> ProblemKey {
        self.flags = flags & abi::KERNEL_FLAGS;
        self
    }

    /// Turns this single problem into a batched one.
    #[inline]
    pub fn with_batch(mut self, batching: Batching, batch: i64, strides: [i64; 4]) -> ProblemKey {
        self.batching = batching;
        self.batch = batch;
        if batching == Batching::Strided {
            [self.stride_a, self.stride_b, self.stride_c, self.stride_d] = strides;
        } else {
            [self.stride_a, self.stride_b, self.stride_c, self.stride_d] = [0; 4];
        }
        self
    }

    /// The token count of a linear layer: rocBLAS `n`, the "M" of the seed's tables.
    pub fn token_count(&self) -> i64 {
        self.n
    }

    /// Leading dimensions and strides of the tightly packed column-major layout of this
    /// problem's sizes: what PyTorch passes for contiguous tensors, and what a TunableOp row
    /// that omits them means.
    pub fn packed_lds(trans_a: Trans, trans_b: Trans, m: i64, n: i64, k: i64) -> [i64; 3] {
        let [(rows_a, _), (rows_b, _), ..] = stored_shapes(trans_a, trans_b, m, n, k);
        [rows_a.max(1), rows_b.max(1), m.max(1)]
    }

    /// Rows and columns of A, B, C and D as stored ([`stored_shapes`]).
    #[inline]
    pub fn stored_shapes(&self) -> [(i64, i64); 4] {
        stored_shapes(self.trans_a, self.trans_b, self.m, self.n, self.k)
    }

    /// The leading dimensions of A, B, C and D.
    #[inline]
    pub fn lds(&self) -> [i64; 4] {
        [self.lda, self.ldb, self.ldc, self.ldd]
    }

    /// The strides of A, B, C and D (all 0 unless strided-batched).
    pub fn strides(&self) -> [i64; 4] {
        [self.stride_a, self.stride_b, self.stride_c, self.stride_d]
    }

    /// Strides of packed matrices for the given leading dimensions.
    pub fn packed_strides(&self) -> [i64; 4] {
        let (lds, shapes) = (self.lds(), self.stored_shapes());
        std::array::from_fn(|i| lds[i] * shapes[i].1)
    }

    /// [`ProblemKey::packed_strides`], each `None` where it overflows 64 bits.
    pub fn checked_packed_strides(&self) -> [Option<i64>; 4] {
        let (lds, shapes) = (self.lds(), self.stored_shapes());
        std::array::from_fn(|i| lds[i].checked_mul(shapes[i].1))
    }

    /// Floating-point operations of the whole problem (2 m n k per GEMM).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch.max(1) as f64
    }

    /// True when the sizes are ones rocBLAS could accept: positive dims (zero is a quick
    /// return), leading dimensions at least the rows stored, and no overflow in the extent.
    #[inline]
    pub fn is_sane(&self) -> bool {
        // The rows of A and B as stored ([`stored_shapes`]), written out: this runs on the
        // interposer's miss path, where going through the shapes cost 1-3 instructions more
        // per call (tunedblas-bench --instructions).
        let rows_a = if self.trans_a == Trans::N {
            self.m
        } else {
            self.k
        };
        let rows_b = if self.trans_b == Trans::N {
            self.k
        } else {
            self.n
        };
        self.m >= 0
            && self.n >= 0
            && self.k >= 0
            && self.batch >= 0
            && self.lda >= rows_a.max(1)
            && self.ldb >= rows_b.max(1)
            && self.ldc >= self.m.max(1)
            && self.ldd >= self.m.max(1)
            && self.lda.checked_mul(self.k.max(self.m)).is_some()
            && self.ldc.checked_mul(self.n).is_some()
    }
}

/// The tests' usual layer: [`ProblemKey::linear`] of f16 tensors computed in f32.
#[cfg(test)]
pub(crate) fn half_linear(n_out: i64, tokens: i64, k: i64) -> ProblemKey {
    ProblemKey::linear(Types::HALF, n_out, tokens, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::half_linear as linear;

    #[test]
    fn packed_lds_match_pytorch_linear() {
        let key = linear(10240, 512, 2560);
        assert_eq!(
            ProblemKey::packed_lds(key.trans_a, key.trans_b, key.m, key.n, key.k),
            [key.lda, key.ldb, key.ldc]
        );
    }

    #[test]
    fn only_kernel_flags_are_kept() {
        let mut k = linear(8, 8, 8);
        k = ProblemKey::single(
            k.trans_a,
            k.trans_b,
            k.types,
            8,
            8,
            8,
            8,
            8,
            8,
            8,
            abi::FLAG_CHECK_SOLUTION_INDEX | abi::FLAG_FP16_ALT_IMPL,
        );
        assert_eq!(k.flags, abi::FLAG_FP16_ALT_IMPL);
    }

    /// `rocblas_gemm_flags_pack_int8x4` (0x1) changes the int8 problem (inputs packed four
    /// to a word, other kernels): packed and unpacked calls must not share a row.
    #[test]
    fn packed_int8_is_another_problem() {
        let t = Types::INT8;
        let key =
            |flags| ProblemKey::single(Trans::T, Trans::N, t, 64, 32, 64, 64, 64, 64, 64, flags);
        assert_eq!(key(abi::FLAG_PACK_INT8X4).flags, abi::FLAG_PACK_INT8X4);
        assert_ne!(key(abi::FLAG_PACK_INT8X4), key(0));
        assert_eq!(
            key(abi::FLAG_PACK_INT8X4 | abi::FLAG_CHECK_SOLUTION_INDEX),
            key(abi::FLAG_PACK_INT8X4)
        );
    }

    #[test]
    fn strides_only_for_strided_batching() {
        let k = linear(64, 32, 16).with_batch(Batching::PointerArray, 4, [1, 2, 3, 4]);
        assert_eq!([k.stride_a, k.stride_b, k.stride_c, k.stride_d], [0; 4]);
        let k = linear(64, 32, 16).with_batch(Batching::Strided, 4, [1, 2, 3, 4]);
        assert_eq!(
            [k.stride_a, k.stride_b, k.stride_c, k.stride_d],
            [1, 2, 3, 4]
        );
    }

    #[test]
    fn sanity_rejects_short_leading_dimension_and_overflow() {
        let mut k = linear(64, 32, 16);
        assert!(k.is_sane());
        k.ldc = 10;
        assert!(!k.is_sane());
        let mut k = linear(64, 32, 16);
        k.lda = i64::MAX / 2;
        assert!(!k.is_sane());
    }
}
