//! Shape families: problems that are equal in everything but the token count.
//!
//! A linear layer `F.linear(x[M,K], W[N,K])` is `gemm_ex(T, N, m=N, n=M, k=K, ...)`: the
//! weight fixes everything but rocBLAS's `n`, which is the number of tokens in the step and
//! changes from one step to the next. Coverage prediction, miss grouping and near-shape
//! serving all ask the same question, "which rows exist for this layer at other token
//! counts?", so the family is defined once, here.
//!
//! The family key is the problem key with `n` set to 0 and every field that only follows
//! `n` in a packed layout (`ldb` of a transposed B, and the strides of packed batches) set to
//! [`FOLLOWS`]. [`instantiate`] puts a token count back. Fields that do not follow `n` (a
//! padded `ldb`, explicit strides) stay as they are, so only genuinely same-layout problems
//! share a family.

use crate::key::{Batching, ProblemKey, Trans};

/// Marks a field of a family key that is recomputed from the token count.
pub const FOLLOWS: i64 = -1;

/// The family of `key`: the same problem with the token count (rocBLAS `n`) taken out.
pub fn family_of(key: &ProblemKey) -> ProblemKey {
    let n = key.n;
    let mut f = *key;
    f.n = 0;
    let ldb_follows = key.trans_b != Trans::N && key.ldb == n.max(1);
    if ldb_follows {
        f.ldb = FOLLOWS;
    }
    if key.batching == Batching::Strided {
        let cols_b = if key.trans_b == Trans::N { n } else { key.k };
        // Only strides that depend on n can follow it.
        let b_depends = key.trans_b == Trans::N || ldb_follows;
        if b_depends && Some(key.stride_b) == key.ldb.checked_mul(cols_b) {
            f.stride_b = FOLLOWS;
        }
        if Some(key.stride_c) == key.ldc.checked_mul(n) {
            f.stride_c = FOLLOWS;
        }
        if Some(key.stride_d) == key.ldd.checked_mul(n) {
            f.stride_d = FOLLOWS;
        }
    }
    f
}

/// The member of `family` with `tokens` tokens. `None` if a recomputed field overflows.
pub fn instantiate(family: &ProblemKey, tokens: i64) -> Option<ProblemKey> {
    let mut k = *family;
    k.n = tokens;
    if k.ldb == FOLLOWS {
        k.ldb = tokens.max(1);
    }
    if k.stride_b == FOLLOWS {
        let cols_b = if k.trans_b == Trans::N { tokens } else { k.k };
        k.stride_b = k.ldb.checked_mul(cols_b)?;
    }
    if k.stride_c == FOLLOWS {
        k.stride_c = k.ldc.checked_mul(tokens)?;
    }
    if k.stride_d == FOLLOWS {
        k.stride_d = k.ldd.checked_mul(tokens)?;
    }
    Some(k)
}

/// True when `a` and `b` differ at most in their token count.
pub fn same_family(a: &ProblemKey, b: &ProblemKey) -> bool {
    family_of(a) == family_of(b)
}

/// A short human name for a family: `N x K` plus what else sets it apart from a plain
/// f16 TN linear layer (`GemmTunableOp_Half_TN` with packed leading dimensions).
pub fn describe(family: &ProblemKey) -> String {
    let mut s = format!("{}x{}", family.m, family.k);
    let probe = instantiate(family, 1).unwrap_or(*family);
    let (op, _) = crate::tunableop::op_and_signature(&probe);
    if op != "GemmTunableOp_Half_TN" {
        s.push(' ');
        s.push_str(&op);
    }
    if family.batch != 1 {
        s.push_str(&format!(" batch {}", family.batch));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi;
    use crate::key::Types;

    use crate::key::half_linear as linear;

    #[test]
    fn linear_layers_at_different_token_counts_share_a_family() {
        let a = linear(10240, 512, 2560);
        let b = linear(10240, 533, 2560);
        assert!(same_family(&a, &b));
        assert!(!same_family(&a, &linear(10240, 512, 320)));
        assert!(!same_family(&a, &linear(3584, 512, 2560)));
        assert_eq!(instantiate(&family_of(&a), 533), Some(b));
    }

    #[test]
    fn a_transposed_b_follows_the_token_count_only_when_packed() {
        let t = Types::uniform(abi::DT_F16_R, abi::DT_F32_R);
        // NT: B is n x k, ldb = n when packed.
        let packed = ProblemKey::single(Trans::N, Trans::T, t, 64, 100, 32, 64, 100, 64, 64, 0);
        let f = family_of(&packed);
        assert_eq!(f.ldb, FOLLOWS);
        let other = instantiate(&f, 130).unwrap();
        assert_eq!(other.ldb, 130);
        assert!(same_family(&packed, &other));
        // A padded ldb is part of the layout: 100 and 130 tokens with ldb 256 share it, a
        // key with ldb 100 does not.
        let padded = ProblemKey::single(Trans::N, Trans::T, t, 64, 100, 32, 64, 256, 64, 64, 0);
        let f = family_of(&padded);
        assert_eq!(f.ldb, 256);
        assert!(!same_family(&padded, &packed));
    }

    #[test]
    fn packed_strides_follow_explicit_ones_do_not() {
        let base = linear(64, 32, 16);
        let packed = base.with_batch(Batching::Strided, 4, base.packed_strides());
        let f = family_of(&packed);
        assert_eq!([f.stride_c, f.stride_d], [FOLLOWS, FOLLOWS]);
        assert_eq!(f.stride_a, packed.stride_a, "A does not depend on n");
        let wider = instantiate(&f, 48).unwrap();
        let expect = linear(64, 48, 16);
        assert_eq!(
            wider,
            expect.with_batch(Batching::Strided, 4, expect.packed_strides())
        );
        let odd = base.with_batch(Batching::Strided, 4, [1 << 20, 1 << 20, 1 << 20, 1 << 20]);
        assert_eq!(instantiate(&family_of(&odd), 48).unwrap().stride_c, 1 << 20);
    }

    #[test]
    fn description_names_the_layer_and_anything_unusual() {
        assert_eq!(describe(&family_of(&linear(3584, 7, 2560))), "3584x2560");
        let t = Types::uniform(abi::DT_BF16_R, abi::DT_F32_R);
        let k = ProblemKey::single(Trans::T, Trans::N, t, 8, 1, 4, 4, 4, 8, 8, 0);
        assert_eq!(describe(&family_of(&k)), "8x4 GemmTunableOp_BFloat16_TN");
    }
}
