//! PyTorch TunableOp's `*` rows for the Lt backends: a row whose signature has `*` in place
//! of a dimension (`GemmTunableOp_BFloat16_TN,tn_2560_*_1536_ld_1536_1536_2560,Gemm_Hipblaslt_7`),
//! served under PyTorch's own rule (`TuningResultsManager::LookupWildcardFallback`,
//! aten/src/ATen/cuda/tunable): after an exact lookup misses, a `*` row of the same op name
//! whose signature matches the call's concrete signature token by token (`*` matches any
//! token, every other token must be equal) serves it.
//!
//! PyTorch writes a `*` for each dimension it was told is dynamic (`dynamic_dims_mask`: M, N,
//! K or the batch) and for the leading dimensions that follow it (lda with M when A is not
//! transposed, else with K; ldb with K or N; ldc with M). The match here is that token match
//! on the problem's fields: an op name fixes types, transposes and the plain epilogue, and
//! the concrete signature of a call under that name always has `ldd == ldc`, packed strides
//! and no SM count, so a pattern never matches a call PyTorch would name otherwise.
//!
//! Where several patterns match, PyTorch's winner depends on its hash map's order (it only
//! writes `*` for M today, so one matches); here the first in the file wins. A `*` row is
//! a hint for shapes it was not tuned on: the serving path checks the algorithm for each
//! concrete problem before use (`LtTable::get_or_wildcard`).

use super::{
    layout_of, LtKey, EPILOGUE_DEFAULT, GEMM_PREFIX, POINTER_MODE_HOST, PYTORCH_TYPES,
    STRIDED_PREFIX,
};
use crate::key::ProblemKey;

/// A dimension of a pattern: `None` is `*`.
pub type Dim = Option<i64>;

/// A `*` signature under one of PyTorch's op names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LtPattern {
    /// Types, transposes and the plain epilogue of the op name; its sizes are unused.
    pub base: LtKey,
    pub m: Dim,
    pub n: Dim,
    pub k: Dim,
    pub batch: Dim,
    /// `[lda, ldb, ldc]`; `None` when the signature has no `_ld_` part (packed).
    pub lds: Option<[Dim; 3]>,
}

fn dim(tok: &str) -> Result<Dim, String> {
    if tok == "*" {
        return Ok(None);
    }
    if tok.is_empty() || !tok.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{tok:?} is neither a size nor *"));
    }
    tok.parse::<i64>()
        .map(Some)
        .map_err(|_| format!("{tok} does not fit in 64 bits"))
}

fn ok(d: Dim, v: i64) -> bool {
    d.is_none_or(|x| x == v)
}

impl LtPattern {
    /// Reads a PyTorch op name and a signature with at least one `*`; an error says why it
    /// is not one (a concrete signature is an error here: [`super::parse_key`] reads it).
    pub fn parse(op: &str, sig: &str) -> Result<LtPattern, String> {
        let op = op.trim();
        let sig = sig.trim();
        let (strided, rest) = if let Some(r) = op.strip_prefix(GEMM_PREFIX) {
            (false, r)
        } else if let Some(r) = op.strip_prefix(STRIDED_PREFIX) {
            (true, r)
        } else {
            return Err(format!("op {op} has no `*` form"));
        };
        let (head, ab) = rest
            .rsplit_once('_')
            .ok_or_else(|| format!("op name {op} has no type and layout parts"))?;
        let (trans_a, trans_b) = layout_of(op, ab)?;
        let (_, io, compute, scale) = PYTORCH_TYPES
            .iter()
            .find(|(n, ..)| *n == head)
            .ok_or_else(|| format!("op {op} has a type the Lt rows do not use"))?;
        let toks: Vec<&str> = sig.split('_').collect();
        if toks.first() != Some(&ab.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "signature {sig} does not start with the layout of {op}"
            ));
        }
        let mut it = toks[1..].iter().copied().peekable();
        let take = |what: &str, it: &mut std::iter::Peekable<_>| -> Result<Dim, String> {
            let t: &str =
                Iterator::next(it).ok_or_else(|| format!("signature {sig} ends before {what}"))?;
            dim(t).map_err(|e| format!("{what} in {sig}: {e}"))
        };
        let (m, n, k) = (
            take("m", &mut it)?,
            take("n", &mut it)?,
            take("k", &mut it)?,
        );
        let mut batch = Some(1);
        if strided {
            if it.next() != Some("B") {
                return Err(format!("strided signature {sig} has no _B_<batch>"));
            }
            batch = take("the batch", &mut it)?;
        }
        let lds = if it.peek() == Some(&"ld") {
            it.next();
            Some([
                take("lda", &mut it)?,
                take("ldb", &mut it)?,
                take("ldc", &mut it)?,
            ])
        } else {
            None
        };
        if it.next().is_some() {
            return Err(format!("signature {sig} has extra tokens"));
        }
        let mut base = LtKey::linear(*io, 1, 1, 1);
        base.compute = *compute;
        base.scale = *scale;
        base.trans_a = trans_a;
        base.trans_b = trans_b;
        let p = LtPattern {
            base,
            m,
            n,
            k,
            batch,
            lds,
        };
        if p.is_concrete() {
            return Err(format!("signature {sig} has no `*`"));
        }
        Ok(p)
    }

    fn is_concrete(&self) -> bool {
        let lds = self.lds.iter().flatten().all(Option::is_some);
        [self.m, self.n, self.k, self.batch]
            .iter()
            .all(Option::is_some)
            && lds
    }

    /// Whether `key` is a problem this pattern names: PyTorch's token match (see the module
    /// docs).
    pub fn matches(&self, key: &LtKey) -> bool {
        let b = &self.base;
        let same_kind = (
            key.a_type,
            key.b_type,
            key.c_type,
            key.d_type,
            key.compute,
            key.scale,
        ) == (b.a_type, b.b_type, b.c_type, b.d_type, b.compute, b.scale)
            && (key.trans_a, key.trans_b) == (b.trans_a, b.trans_b)
            && key.epilogue == EPILOGUE_DEFAULT
            && key.bias_type == -1
            && key.pointer_mode == POINTER_MODE_HOST
            && key.sm_count == 0
            && key.ldd == key.ldc;
        if !same_kind {
            return false;
        }
        if !(ok(self.m, key.m)
            && ok(self.n, key.n)
            && ok(self.k, key.k)
            && ok(self.batch, key.batch))
        {
            return false;
        }
        let strides = [key.stride_a, key.stride_b, key.stride_c, key.stride_d];
        let strides_ok = if key.batch == 1 {
            strides == [0; 4]
        } else {
            strides == key.packed_strides()
        };
        let lds_ok = match self.lds {
            Some([a, b, c]) => ok(a, key.lda) && ok(b, key.ldb) && ok(c, key.ldc),
            None => {
                ProblemKey::packed_lds(key.trans_a, key.trans_b, key.m, key.n, key.k)
                    == [key.lda, key.ldb, key.ldc]
            }
        };
        strides_ok && lds_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cublaslt::{op_and_signature, R_16BF, R_16F};

    #[test]
    fn a_token_matches_what_pytorch_would_match() {
        let p = LtPattern::parse(
            "GemmTunableOp_BFloat16_TN",
            "tn_2560_*_1536_ld_1536_1536_2560",
        )
        .unwrap();
        for tokens in [1, 16, 513, 8192] {
            let key = LtKey::linear(R_16BF, 2560, tokens, 1536);
            assert!(p.matches(&key), "{tokens}");
            // The concrete signature PyTorch would compare, token by token.
            let (op, sig) = op_and_signature(&key);
            assert_eq!(op, "GemmTunableOp_BFloat16_TN");
            let pat: Vec<&str> = "tn_2560_*_1536_ld_1536_1536_2560".split('_').collect();
            let con: Vec<&str> = sig.split('_').collect();
            assert_eq!(pat.len(), con.len());
            assert!(pat.iter().zip(&con).all(|(p, c)| *p == "*" || p == c));
        }
        assert!(
            !p.matches(&LtKey::linear(R_16BF, 2560, 8, 1537)),
            "another K"
        );
        assert!(
            !p.matches(&LtKey::linear(R_16F, 2560, 8, 1536)),
            "another type"
        );
        let mut ldd = LtKey::linear(R_16BF, 2560, 8, 1536);
        ldd.ldd = 4096;
        assert!(!p.matches(&ldd), "PyTorch has no name for ldd != ldc");
        let mut bias = LtKey::linear(R_16BF, 2560, 8, 1536);
        bias.epilogue = crate::cublaslt::EPILOGUE_BIAS;
        bias.bias_type = R_16BF;
        assert!(!p.matches(&bias), "a GemmAndBias call is another op");
    }

    #[test]
    fn leading_dimensions_follow_their_wildcards() {
        // M dynamic with A not transposed: lda and ldc are `*` too.
        let p = LtPattern::parse("GemmTunableOp_Half_NN", "nn_*_64_32_ld_*_32_*").unwrap();
        let mut key = LtKey::linear(R_16F, 100, 64, 32);
        key.trans_a = crate::key::Trans::N;
        key.lda = 100;
        assert!(p.matches(&key));
        key.ldb = 33;
        assert!(!p.matches(&key), "a fixed ldb must be equal");
        let strided = LtPattern::parse(
            "GemmStridedBatchedTunableOp_Half_TN",
            "tn_64_8_32_B_*_ld_32_32_64",
        )
        .unwrap();
        let mut b = LtKey::linear(R_16F, 64, 8, 32).packed_batch(6);
        assert!(strided.matches(&b));
        b.stride_c += 1;
        assert!(!strided.matches(&b), "PyTorch's strided rows are packed");
    }

    #[test]
    fn what_is_not_a_pattern() {
        for (op, sig) in [
            ("GemmTunableOp_BFloat16_TN", "tn_1_2_3"),
            ("GemmTunableOp_BFloat16_TN", "nt_*_2_3"),
            ("GemmTunableOp_BFloat16_TN", "tn_*_2"),
            ("GemmTunableOp_BFloat16_TN", "tn_*_2_3_ld_1_2"),
            ("GemmTunableOp_BFloat16_TN", "tn_*_2_3_x"),
            ("GemmTunableOp_BFloat16_TN", "tn_-1_*_3"),
            ("GemmStridedBatchedTunableOp_Half_TN", "tn_*_2_3"),
            ("ScaledGemmTunableOp_x", "tn_*_2_3"),
            ("GemmTunableOp_Int8_TN", "tn_*_2_3"),
        ] {
            assert!(LtPattern::parse(op, sig).is_err(), "{op},{sig}");
        }
    }
}
