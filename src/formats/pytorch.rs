//! PyTorch TunableOp result files as PyTorch itself accepts them.
//!
//! PyTorch (`aten/src/ATen/cuda/tunable/Tunable.cpp`) reads `tunableop_results<ordinal>.csv`
//! by splitting each line on commas and discards the **whole file** unless its `Validator`
//! lines name exactly the validators that PyTorch build registered, each with exactly its
//! value (`CheckKeysMatching`: a missing key fails, and so does an extra one). On ROCm those
//! are `PT_VERSION`, `ROCM_VERSION` (older) or `HIP_VERSION` (newer), `ROCBLAS_VERSION`,
//! `HIPBLASLT_VERSION` and `GCN_ARCH_NAME`, with values only that PyTorch build knows
//! (its version, the HIP and library versions it was built against, the device's arch
//! name). So an export takes the validator set from a file PyTorch wrote on the target
//! (or from the operator) and checks it, rather than inventing values.
//!
//! Rows: only PyTorch's own op names (`GemmTunableOp_*`, `GemmStridedBatchedTunableOp_*`):
//! the tunedblas extension rows are dropped, as are `*` wildcard rows, which only newer
//! PyTorch reads. Older PyTorch (before 2.7) names problems without leading dimensions
//! (`tn_<m>_<n>_<k>[_B_<batch>]`); for such a target only rows whose leading dimensions
//! are the packed ones are written, in that form. Every row gets a time field, no blank
//! line and no comment is written (old readers index the first field of every line).

use std::collections::BTreeMap;

use crate::key::{Batching, ProblemKey};
use crate::tunableop::{self, ResultsFile};

/// The validators a ROCm build of PyTorch registers (one of the HIP/ROCm pair).
pub const ROCM_VALIDATORS: [&str; 4] = [
    "PT_VERSION",
    "ROCBLAS_VERSION",
    "HIPBLASLT_VERSION",
    "GCN_ARCH_NAME",
];
/// Newer PyTorch names the HIP runtime `HIP_VERSION`, older `ROCM_VERSION`.
pub const HIP_VALIDATORS: [&str; 2] = ["HIP_VERSION", "ROCM_VERSION"];

/// What is wrong with a validator set for a ROCm PyTorch, in words (empty when nothing).
pub fn validator_problems(validators: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let has = |k: &str| validators.iter().any(|(key, _)| key == k);
    let missing: Vec<&str> = ROCM_VALIDATORS
        .iter()
        .copied()
        .filter(|k| !has(k))
        .collect();
    if !missing.is_empty() {
        problems.push(format!("missing {}", missing.join(", ")));
    }
    let hip: Vec<&str> = HIP_VALIDATORS.iter().copied().filter(|k| has(k)).collect();
    match hip.len() {
        0 => problems.push("missing HIP_VERSION (or ROCM_VERSION on older PyTorch)".into()),
        1 => {}
        _ => problems.push("both HIP_VERSION and ROCM_VERSION (PyTorch registers one)".into()),
    }
    let mut seen = BTreeMap::new();
    for (k, v) in validators {
        if !ROCM_VALIDATORS.contains(&k.as_str()) && !HIP_VALIDATORS.contains(&k.as_str()) {
            problems.push(format!("{k} is not a validator PyTorch registers"));
        }
        if let Some(old) = seen.insert(k.as_str(), v.as_str()) {
            if old != v {
                problems.push(format!("{k} is given twice ({old} and {v})"));
            }
        }
        if v.contains(',') || v.contains('\n') || v.is_empty() {
            problems.push(format!("{k}'s value '{v}' is empty or has a comma"));
        }
    }
    problems
}

/// `(major, minor)` of a `PT_VERSION` such as `2.7.0+rocm6.3` or `2.13.0a0+git1234`.
pub fn pt_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.trim().split(['.', '+', 'a', 'b', 'r']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether PyTorch `pt` names problems in the pre-2.7 form (no leading dimensions).
pub fn legacy_signatures(pt: Option<(u32, u32)>) -> bool {
    pt.is_some_and(|v| v < (2, 7))
}

/// The pre-2.7 op name and signature of a key PyTorch can express with packed layouts.
pub fn legacy_op_and_signature(key: &ProblemKey) -> Option<(String, String)> {
    let (op, sig) = tunableop::op_and_signature(key);
    if op.starts_with(tunableop::EXT_OP_PREFIX) {
        return None;
    }
    let packed = ProblemKey::packed_lds(key.trans_a, key.trans_b, key.m, key.n, key.k);
    if [key.lda, key.ldb, key.ldc] != packed {
        return None;
    }
    let ab = sig.get(..2)?;
    let mut legacy = format!("{ab}_{}_{}_{}", key.m, key.n, key.k);
    if key.batching == Batching::Strided {
        legacy.push_str(&format!("_B_{}", key.batch));
    }
    Some((op, legacy))
}

/// A results file for PyTorch and what was left out of it.
#[derive(Debug, Default)]
pub struct Export {
    pub text: String,
    pub rows: usize,
    /// `op,signature: reason` of each row left out.
    pub dropped: Vec<String>,
}

/// Writes `file`'s rows for a PyTorch whose validators are `validators` (see the module
/// docs). The caller checks the validator set with [`validator_problems`] first.
pub fn export(file: &ResultsFile, validators: &[(String, String)]) -> Export {
    let legacy = legacy_signatures(
        validators
            .iter()
            .find(|(k, _)| k == "PT_VERSION")
            .and_then(|(_, v)| pt_version(v)),
    );
    let mut out = Export::default();
    for (k, v) in validators {
        out.text.push_str(&format!("Validator,{k},{v}\n"));
    }
    // PyTorch writes (and reads back) `inf` for a `Default` row it never timed: kept as
    // `inf` (Rust prints infinity so); a missing or nonsense time is written as 0.
    let time = |t: Option<f64>| t.filter(|t| !t.is_nan() && *t >= 0.0).unwrap_or(0.0);
    for row in &file.rows {
        let (op, sig) = tunableop::op_and_signature(&row.key);
        if op.starts_with(tunableop::EXT_OP_PREFIX) {
            out.dropped.push(format!(
                "{op},{sig}: a tunedblas extension row (PyTorch has no name for this problem)"
            ));
            continue;
        }
        let (op, sig) = if legacy {
            match legacy_op_and_signature(&row.key) {
                Some(pair) => pair,
                None => {
                    out.dropped.push(format!(
                        "{op},{sig}: leading dimensions that PyTorch before 2.7 cannot name"
                    ));
                    continue;
                }
            }
        } else {
            (op, sig)
        };
        out.text.push_str(&format!(
            "{op},{sig},{},{}\n",
            tunableop::solution_text(&row.solution),
            time(row.time_ms)
        ));
        out.rows += 1;
    }
    for u in &file.unservable {
        let pytorch_op = u.op_name.starts_with("Gemm") || u.op_name.starts_with("ScaledGemm");
        if pytorch_op && !u.signature.contains('*') && !legacy {
            out.text.push_str(&format!(
                "{},{},{},{}\n",
                u.op_name,
                u.signature,
                u.solution,
                time(u.time_ms)
            ));
            out.rows += 1;
        } else {
            out.dropped.push(format!(
                "{},{}: not a row this PyTorch reads",
                u.op_name, u.signature
            ));
        }
    }
    for w in &file.wildcards {
        out.dropped.push(format!(
            "{},{}: a `*` wildcard row (only newer PyTorch reads them)",
            w.op_name, w.signature
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi;
    use crate::key::{Trans, Types};

    fn v(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn rocm(pt: &str) -> Vec<(String, String)> {
        v(&[
            ("PT_VERSION", pt),
            ("HIP_VERSION", "715"),
            ("HIPBLASLT_VERSION", "100401-8d1ae90e"),
            ("GCN_ARCH_NAME", "gfx1030"),
            ("ROCBLAS_VERSION", "5.6.0.8d1ae90e"),
        ])
    }

    #[test]
    fn validator_sets() {
        assert!(validator_problems(&rocm("2.13.0")).is_empty());
        let mut extra = rocm("2.13.0");
        extra.push(("TUNEDBLAS".into(), "1".into()));
        assert!(validator_problems(&extra)[0].contains("TUNEDBLAS"));
        let short = v(&[("ROCBLAS_VERSION", "4.4.0"), ("GCN_ARCH_NAME", "gfx1030")]);
        let p = validator_problems(&short);
        assert!(
            p[0].contains("PT_VERSION") && p[0].contains("HIPBLASLT_VERSION"),
            "{p:?}"
        );
        assert!(p[1].contains("HIP_VERSION"), "{p:?}");
        assert_eq!(pt_version("2.7.0+rocm6.3"), Some((2, 7)));
        assert_eq!(pt_version("2.13.0a0+git1234"), Some((2, 13)));
        assert_eq!(pt_version("x"), None);
    }

    /// `Default,inf` (PyTorch's own way to write a Default it never timed) comes back out
    /// as `inf`, not as a time of 0.
    #[test]
    fn an_inf_time_is_exported_as_inf() {
        let key = ProblemKey::linear(Types::HALF, 4096, 512, 2560);
        let (op, sig) = tunableop::op_and_signature(&key);
        let file = tunableop::parse(&format!(
            "Validator,PT_VERSION,2.7.0\n{op},{sig},Default,inf\n"
        ));
        assert_eq!(file.rows.len(), 1);
        let out = export(&file, &v(&[("PT_VERSION", "2.7.0")]));
        assert!(
            out.text.contains(&format!("{op},{sig},Default,inf\n")),
            "{}",
            out.text
        );
    }

    #[test]
    fn exported_files_hold_only_pytorch_rows_in_the_target_form() {
        let half = Types::uniform(abi::DT_F16_R, abi::DT_F32_R);
        let packed = ProblemKey::linear(half, 4096, 512, 2560);
        let padded = ProblemKey::single(
            Trans::T,
            Trans::N,
            half,
            4096,
            512,
            2560,
            2568,
            2560,
            4096,
            4096,
            0,
        );
        let hgemm = ProblemKey::single(
            Trans::N,
            Trans::N,
            Types::HGEMM,
            64,
            8,
            64,
            64,
            64,
            64,
            64,
            0,
        );
        let text = [packed, padded, hgemm]
            .iter()
            .map(|k| {
                let (op, sig) = tunableop::op_and_signature(k);
                format!("{op},{sig},Gemm_Rocblas_-1086326047,0.5\n")
            })
            .collect::<String>()
            + "GemmTunableOp_Half_TN,tn_*_512_2560_ld_2560_2560_*,Default,0.1\n"
            + "GemmTunableOp_Half_TN,tn_1_2_3_ld_3_3_1,Gemm_Hipblaslt_5,0.2\n";
        let file = tunableop::parse(&text);
        let new = export(&file, &rocm("2.13.0"));
        assert_eq!(new.rows, 3, "{new:?}");
        assert_eq!(new.dropped.len(), 2, "{:?}", new.dropped);
        assert!(
            new.dropped[0].starts_with("TunedblasGemm_"),
            "{:?}",
            new.dropped
        );
        assert!(!new.text.contains("Tunedblas") && !new.text.contains('*'));
        assert!(!new.text.contains("\n\n"));
        let back = tunableop::parse(&new.text);
        assert_eq!(back.validators, rocm("2.13.0"));
        assert_eq!(back.rows.len(), 2);
        assert_eq!(back.rows[0].key, packed);

        let old = export(&file, &rocm("2.6.0"));
        assert_eq!(old.rows, 1, "{old:?}");
        assert!(
            old.text
                .contains("GemmTunableOp_Half_TN,tn_4096_512_2560,Gemm_Rocblas_-1086326047,0.5\n"),
            "{}",
            old.text
        );
        let back = tunableop::parse(&old.text);
        assert_eq!(
            back.rows[0].key, packed,
            "the legacy form reads back to the same problem"
        );
    }
}
