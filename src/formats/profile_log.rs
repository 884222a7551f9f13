//! rocBLAS profile logs (`ROCBLAS_LAYER=4`).
//!
//! At exit rocBLAS writes one YAML flow map per distinct problem, with the number of calls
//! (to `ROCBLAS_LOG_PROFILE_PATH`, else `ROCBLAS_LOG_PATH`, else stderr). The GEMM maps, with
//! the keys in the order rocBLAS writes them (`log_profile` in `rocblas_gemm*_imp.hpp`;
//! strings double-quoted, characters single-quoted, alpha/beta as a value category):
//!
//! ```text
//! - { rocblas_function: "rocblas_gemm_ex", atomics_mode: atomics_allowed, a_type: "f16_r",
//!     b_type: "f16_r", c_type: "f16_r", d_type: "f16_r", compute_type: "f32_r",
//!     transA: 'T', transB: 'N', M: 4096, N: 512, K: 4096, alpha: 1.0, lda: 4096, ldb: 4096,
//!     beta: 0.0, ldc: 4096, ldd: 4096, algo: 0, solution_index: 0, flags: none,
//!     call_count: 40 }
//! ```
//!
//! (one line each). `rocblas_gemm_strided_batched_ex` adds `stride_a` ... `stride_d` and
//! `batch_count`, `rocblas_gemm_batched_ex` adds `batch_count`; `rocblas_hgemm` /
//! `rocblas_sgemm` (and `*_strided_batched`) have no types, no `ldd` and no flags. The `_64`
//! API logs the same names with a `_64` suffix. `flags` is a name (`none`,
//! `fp16_alt_impl`, ...); rocBLAS prints a combination of flags as `invalid`, which names no
//! problem, so such entries are skipped with that reason. Keys may also be quoted, as in
//! the example rocblas-gemm-tune prints (`{'rocblas_function': 'rocblas_sgemm', ...}`).

use super::{datatype, flags_from_text, int, int_field, trans_field, Fields, Parsed, ParsedShape};
use crate::abi;
use crate::key::{Batching, Types};

/// True for a `- { ... }` entry naming a rocBLAS function.
pub fn is_entry(line: &str) -> bool {
    let t = line.trim_start();
    t.strip_prefix('-')
        .is_some_and(|r| r.trim_start().starts_with('{'))
        && t.contains("rocblas_function")
}

/// Removes one pair of matching quotes.
fn unquote(s: &str) -> &str {
    let s = s.trim();
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return &s[1..s.len() - 1];
        }
    }
    s
}

/// The `key: value` pairs of a flow map's body, split on commas outside quotes.
fn pairs(body: &str) -> Result<Vec<(&str, &str)>, String> {
    let mut items = Vec::new();
    let mut quote: Option<char> = None;
    let mut start = 0;
    for (i, c) in body.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, ',') => {
                items.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if quote.is_some() {
        return Err("an unterminated quote".into());
    }
    items.push(&body[start..]);
    items
        .into_iter()
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            // A quoted key may be followed by ':'; split at the first ':' after it.
            let item = item.trim();
            let key_end = if item.starts_with('"') || item.starts_with('\'') {
                let q = item.chars().next().unwrap_or('"');
                item[1..].find(q).map_or(0, |p| p + 2)
            } else {
                0
            };
            let colon = item[key_end..]
                .find(':')
                .map(|p| p + key_end)
                .ok_or_else(|| format!("'{item}' is not key: value"))?;
            Ok((unquote(&item[..colon]), unquote(&item[colon + 1..])))
        })
        .collect()
}

/// Reads a profile log. Never panics.
pub fn parse(text: &str) -> Parsed {
    let mut out = Parsed::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t == "---" || t == "..." {
            continue;
        }
        if !is_entry(t) {
            out.skip(
                n,
                "not a profile-log entry (- { rocblas_function: ..., call_count: N })",
            );
            continue;
        }
        let (Some(open), Some(close)) = (t.find('{'), t.rfind('}')) else {
            out.skip(n, "an entry without a closing }");
            continue;
        };
        if close < open {
            out.skip(n, "an entry without a closing }");
            continue;
        }
        match entry(&t[open + 1..close]) {
            Ok(Some((key, calls))) => out.add(ParsedShape {
                key,
                calls,
                line: n,
                solution: None,
            }),
            Ok(None) => {}
            Err(why) => out.skip(n, why),
        }
    }
    out
}

/// One entry's problem and call count; `Ok(None)` never happens for a GEMM.
fn entry(body: &str) -> Result<Option<(crate::key::ProblemKey, u64)>, String> {
    let kv = pairs(body)?;
    let get = |name: &str| kv.iter().rev().find(|(k, _)| *k == name).map(|(_, v)| *v);
    let func = get("rocblas_function").ok_or("no rocblas_function")?;
    let base = func.strip_suffix("_64").unwrap_or(func);
    let num = |name: &str| int_field(get(name), &format!("{name}:"));
    let letter = |name: &str| trans_field(get(name), &format!("{name}:"));
    let mut f = Fields {
        ta: letter("transA")?,
        tb: letter("transB")?,
        m: num("M")?,
        n: num("N")?,
        k: num("K")?,
        lda: num("lda")?,
        ldb: num("ldb")?,
        ldc: num("ldc")?,
        ldd: num("ldd")?,
        strides: [
            num("stride_a")?,
            num("stride_b")?,
            num("stride_c")?,
            num("stride_d")?,
        ],
        batch: num("batch_count")?,
        flags: 0,
    };
    if let Some(v) = get("flags") {
        f.flags = flags_from_text(v)?;
    }
    let ex_types = || -> Result<Types, String> {
        let ty = |name: &str| -> Result<abi::Datatype, String> {
            let v = get(name).ok_or_else(|| format!("no {name}"))?;
            datatype(v).ok_or_else(|| format!("{name}: '{v}' is not a rocBLAS datatype"))
        };
        Ok(Types {
            a: ty("a_type")?,
            b: ty("b_type")?,
            c: ty("c_type")?,
            d: ty("d_type")?,
            compute: ty("compute_type")?,
        })
    };
    let (types, batching) = match base {
        "rocblas_gemm_ex" => (ex_types()?, Batching::Single),
        "rocblas_gemm_batched_ex" => (ex_types()?, Batching::PointerArray),
        "rocblas_gemm_strided_batched_ex" => (ex_types()?, Batching::Strided),
        "rocblas_hgemm" => (Types::HGEMM, Batching::Single),
        "rocblas_sgemm" => (Types::SGEMM, Batching::Single),
        "rocblas_hgemm_strided_batched" => (Types::HGEMM, Batching::Strided),
        "rocblas_sgemm_strided_batched" => (Types::SGEMM, Batching::Strided),
        other if other.contains("gemm") => {
            return Err(format!("{other} is not intercepted by tunedblas"))
        }
        other => return Err(format!("{other} is not a GEMM")),
    };
    if batching == Batching::Single {
        f.batch = Some(1);
    }
    let key = f.key(types, batching)?;
    let calls = match get("call_count") {
        None => 0,
        Some(v) => int(v)
            .and_then(|c| u64::try_from(c).ok())
            .ok_or_else(|| format!("call_count: '{v}' is not a count"))?,
    };
    Ok(Some((key, calls)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testutil::never_panics;
    use crate::key::ProblemKey;

    /// Golden entries written from the fields rocBLAS's profile logging prints.
    const LOG: &str = r#"- { rocblas_function: "rocblas_gemm_ex", atomics_mode: atomics_allowed, a_type: "f16_r", b_type: "f16_r", c_type: "f16_r", d_type: "f16_r", compute_type: "f32_r", transA: 'T', transB: 'N', M: 4096, N: 512, K: 2560, alpha: 1.0, lda: 2560, ldb: 2560, beta: 0.0, ldc: 4096, ldd: 4096, algo: 0, solution_index: 0, flags: none, call_count: 40 }
- { rocblas_function: "rocblas_gemm_ex_64", atomics_mode: atomics_allowed, a_type: "f16_r", b_type: "f16_r", c_type: "f16_r", d_type: "f16_r", compute_type: "f32_r", transA: 'T', transB: 'N', M: 4096, N: 512, K: 2560, alpha: 1.0, lda: 2560, ldb: 2560, beta: 0.0, ldc: 4096, ldd: 4096, algo: 0, solution_index: 0, flags: none, call_count: 2 }
- { rocblas_function: "rocblas_gemm_strided_batched_ex", atomics_mode: atomics_allowed, a_type: "bf16_r", b_type: "bf16_r", c_type: "bf16_r", d_type: "bf16_r", compute_type: "f32_r", transA: 'N', transB: 'T', M: 64, N: 32, K: 16, alpha: 1.0, lda: 64, stride_a: 1024, ldb: 32, stride_b: 512, beta: 0.0, ldc: 64, stride_c: 2048, ldd: 64, stride_d: 2048, batch_count: 8, algo: 0, solution_index: 0, flags: fp16_alt_impl, call_count: 7 }
- { rocblas_function: "rocblas_gemm_batched_ex", atomics_mode: atomics_allowed, a_type: "f16_r", b_type: "f16_r", c_type: "f16_r", d_type: "f16_r", compute_type: "f16_r", transA: 'N', transB: 'N', M: 8, N: 8, K: 8, alpha: 1.0, lda: 8, ldb: 8, beta: 0.0, ldc: 8, ldd: 8, batch_count: 3, algo: 0, solution_index: 0, flags: none, call_count: 1 }
- { rocblas_function: "rocblas_hgemm", atomics_mode: atomics_allowed, transA: 'N', transB: 'N', M: 128, N: 7, K: 64, alpha: 1.0, lda: 128, ldb: 64, beta: 0.0, ldc: 128, call_count: 5 }
- {'rocblas_function': 'rocblas_sgemm', 'transA': 'T', 'transB': 'N', 'M': 512, 'N': 8320, 'K': 512, 'alpha': 1, 'lda': 512, 'ldb': 512, 'beta': 0, 'ldc': 512, 'device': 0, 'cold_iters': 5, 'iters': 20}
- { rocblas_function: "rocblas_gemm_ex", atomics_mode: atomics_allowed, a_type: "f16_r", b_type: "f16_r", c_type: "f16_r", d_type: "f16_r", compute_type: "f32_r", transA: 'T', transB: 'N', M: 16, N: 16, K: 16, alpha: 1.0, lda: 16, ldb: 16, beta: 0.0, ldc: 16, ldd: 16, algo: 0, solution_index: 0, flags: invalid, call_count: 3 }
- { rocblas_function: "rocblas_dgemm", atomics_mode: atomics_allowed, transA: 'N', transB: 'N', M: 8, N: 8, K: 8, alpha: 1.0, lda: 8, ldb: 8, beta: 0.0, ldc: 8, call_count: 1 }
- { rocblas_function: "rocblas_saxpy", atomics_mode: atomics_allowed, N: 100, alpha: 1.0, incx: 1, incy: 1, call_count: 9 }
stray output on stderr
"#;

    #[test]
    fn golden_profile_log() {
        let p = parse(LOG);
        assert_eq!(p.entries.len(), 5, "{:#?}", p);
        let e = &p.entries[0];
        assert_eq!(e.key, ProblemKey::linear(Types::HALF, 4096, 512, 2560));
        assert_eq!(e.calls, 42, "the _64 entry is the same problem");
        let sb = &p.entries[1];
        assert_eq!((sb.key.batch, sb.key.stride_c, sb.calls), (8, 2048, 7));
        assert_eq!(sb.key.flags, abi::FLAG_FP16_ALT_IMPL);
        assert_eq!(p.entries[2].key.batching, Batching::PointerArray);
        assert_eq!(
            (p.entries[3].key.types, p.entries[3].calls),
            (Types::HGEMM, 5)
        );
        let s = &p.entries[4];
        assert_eq!((s.key.types, s.key.n, s.calls), (Types::SGEMM, 8320, 0));
        let lines: Vec<usize> = p.skipped.iter().map(|s| s.line).collect();
        assert_eq!(lines, vec![7, 8, 9, 10], "{:?}", p.skipped);
        assert!(p.skipped[0].reason.contains("invalid"));
        assert!(p.skipped[1].reason.contains("rocblas_dgemm"));
        assert!(p.skipped[2].reason.contains("not a GEMM"));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        never_panics(0x1234_5678, Some("- { rocblas_function: "), LOG, |t| {
            let _ = parse(t);
        });
    }
}
