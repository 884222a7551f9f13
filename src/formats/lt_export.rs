//! A hipBLASLt profile (a results file of `Gemm_Hipblaslt_<index>` rows) written in the AMD
//! stack's own formats, for hosts where preloading is not allowed or to check rows with
//! AMD's tools:
//!
//! - [`override_file`]: `HIPBLASLT_TUNING_OVERRIDE_FILE`, headed by the `Git Version:` of
//!   the build the rows were tuned on (hipBLASLt ignores the file on any other build, which
//!   is what keeps the indices from being used where they mean something else);
//! - [`bench_lines`]: `hipblaslt-bench` lines, each row and the heuristic on its problem;
//! - [`aiter_table`]: AITER `bf16_tuned_gemm.csv` rows of `libtype hipblaslt`, for vLLM's
//!   AITER path, keyed by the device the rows were tuned on.
//!
//! What the build was is read from the profile's validators: `HIPBLASLT_GIT_VERSION` (a
//! tuning file's header), else the revision in `HIPBLASLT_VERSION` (`<version>-<revision>`,
//! as PyTorch writes it); `GCN_ARCH_NAME` and `AITER_CU_NUM` for the device. A caller that
//! knows better passes them.

use super::lt::Device;
use super::validators::base_arch;
use super::{aiter, hipblaslt_bench, hipblaslt_tuning};
use crate::cublaslt::{op_and_signature, LtAction, LtKey, LtResults};

/// A written file, how many rows it holds and the rows it could not hold, with why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LtExport {
    pub text: String,
    pub rows: usize,
    /// `op,signature: reason`.
    pub dropped: Vec<String>,
}

fn validator<'a>(results: &'a LtResults, key: &str) -> Option<&'a str> {
    results
        .validators
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The hipBLASLt revision the profile's rows were tuned on, where it says.
pub fn git_version(results: &LtResults) -> Option<String> {
    if let Some(g) = validator(results, "HIPBLASLT_GIT_VERSION") {
        return Some(g.to_string());
    }
    validator(results, "HIPBLASLT_VERSION")
        .and_then(|v| v.split_once('-'))
        .map(|(_, g)| g.to_string())
}

/// The device the profile's rows were tuned on, where it says.
pub fn device(results: &LtResults) -> Option<Device> {
    let gfx = validator(results, "GCN_ARCH_NAME")?;
    Some(Device {
        gfx: base_arch(gfx).to_string(),
        cu_num: validator(results, "AITER_CU_NUM").and_then(|v| v.trim().parse().ok()),
    })
}

fn key_text(k: &LtKey) -> String {
    let (op, sig) = op_and_signature(k);
    format!("{op},{sig}")
}

/// The index rows, the others said as dropped (`Default` rows: the heuristic is what runs
/// without a row; `*` rows: these formats have no pattern).
fn index_rows(results: &LtResults, out: &mut LtExport) -> Vec<(LtKey, i32, Option<f64>)> {
    let mut rows = Vec::new();
    for r in &results.rows {
        match r.action {
            LtAction::Index(i) => rows.push((r.key, i, r.time_ms)),
            LtAction::Default => out.dropped.push(format!(
                "{}: Default (the heuristic runs without a row)",
                key_text(&r.key)
            )),
            LtAction::Config(_) => out
                .dropped
                .push(format!("{}: a cuBLASLt configuration", key_text(&r.key))),
        }
    }
    for w in &results.wildcards {
        out.dropped.push(format!(
            "{}: a `*` row (this format has no pattern)",
            w.text
        ));
    }
    rows
}

/// The override file for the build of revision `git` (else the profile's own).
pub fn override_file(results: &LtResults, git: Option<&str>) -> Result<LtExport, String> {
    let git = match git {
        Some(g) => g.to_string(),
        None => git_version(results).ok_or(
            "the profile does not say which hipBLASLt revision its rows were tuned on (no HIPBLASLT_GIT_VERSION, and HIPBLASLT_VERSION has no -<revision>): give it (hipBLASLt compares the file's `Git Version:` with its own)",
        )?,
    };
    let mut out = LtExport::default();
    let mut kept = Vec::new();
    for (key, index, _) in index_rows(results, &mut out) {
        match hipblaslt_tuning::row_lines(&key, index) {
            Ok(_) => kept.push((key, index)),
            Err(why) => out.dropped.push(format!("{}: {why}", key_text(&key))),
        }
    }
    out.rows = kept.len();
    out.text = hipblaslt_tuning::write(&git, &kept)?;
    Ok(out)
}

/// `hipblaslt-bench` lines: per row, the row's index and the heuristic on the same problem.
pub fn bench_lines(results: &LtResults, title: &str) -> LtExport {
    let mut out = LtExport {
        text: format!(
            "#!/bin/sh\n# hipblaslt-bench command lines for {title}, written by tunedblas export\n\
             # Each row's algorithm index, then the library heuristic on the same problem: compare\n\
             # their timings (add -i 100 for steadier ones). Indices belong to the build tuned.\n"
        ),
        ..LtExport::default()
    };
    for (key, index, time) in index_rows(results, &mut out) {
        match (
            hipblaslt_bench::command(&key, Some(index)),
            hipblaslt_bench::command(&key, None),
        ) {
            (Some(row), Some(heuristic)) => {
                let t = time.map_or(String::new(), |t| format!(", {t} ms when tuned"));
                out.text.push_str(&format!(
                    "\n# {} -> Gemm_Hipblaslt_{index}{t}\n{row}\n{heuristic}\n",
                    key_text(&key)
                ));
                out.rows += 1;
            }
            _ => out.dropped.push(format!(
                "{}: a type, epilogue or mode hipblaslt-bench has no option for",
                key_text(&key)
            )),
        }
    }
    out
}

/// AITER `libtype hipblaslt` rows for `device` (else the profile's own).
pub fn aiter_table(results: &LtResults, device: Option<Device>) -> Result<LtExport, String> {
    let device = device.or_else(|| self::device(results)).ok_or(
        "the profile does not say which device its rows were tuned on (no GCN_ARCH_NAME): give gfx and CU count (AITER keys rows by them)",
    )?;
    if device.cu_num.is_none() {
        return Err(format!(
            "AITER keys rows by CU count too, and the profile does not say how many CUs {} has: give it",
            device.gfx
        ));
    }
    let mut out = LtExport::default();
    let mut kept = Vec::new();
    for (key, index, time) in index_rows(results, &mut out) {
        match aiter::inexpressible(&key) {
            None => kept.push((key, index, time.map_or(0.0, |t| t * 1000.0))),
            Some(why) => out.dropped.push(format!("{}: {why}", key_text(&key))),
        }
    }
    out.rows = kept.len();
    out.text = aiter::write(&device, &kept)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cublaslt::{parse_results, R_16BF};

    fn profile() -> LtResults {
        let a = LtKey::linear(R_16BF, 2560, 16, 1536);
        let b = LtKey::linear(R_16BF, 512, 4, 2560);
        let mut nt = LtKey::linear(R_16BF, 64, 8, 64);
        nt.trans_b = crate::key::Trans::T;
        nt.ldb = 8;
        let line = |k: &LtKey, s: &str| {
            let (op, sig) = op_and_signature(k);
            format!("{op},{sig},{s},0.0105\n")
        };
        parse_results(&format!(
            "Validator,PT_VERSION,2.12.0\nValidator,HIPBLASLT_VERSION,100401-cd957402\n\
             Validator,GCN_ARCH_NAME,gfx942:sramecc+:xnack-\nValidator,AITER_CU_NUM,304\n{}{}{}\
             GemmTunableOp_BFloat16_TN,tn_2560_*_1536,Gemm_Hipblaslt_9\n",
            line(&a, "Gemm_Hipblaslt_42"),
            line(&b, "Default"),
            line(&nt, "Gemm_Hipblaslt_5"),
        ))
    }

    #[test]
    fn an_override_file_headed_by_the_builds_revision() {
        let p = profile();
        assert_eq!(git_version(&p).as_deref(), Some("cd957402"));
        let e = override_file(&p, None).unwrap();
        assert_eq!(e.rows, 2);
        assert_eq!(e.dropped.len(), 2, "{:?}", e.dropped);
        let back = hipblaslt_tuning::parse(&e.text);
        assert_eq!(back.git_version.as_deref(), Some("cd957402"));
        assert_eq!(back.entries.len(), 2);
        assert!(override_file(&p, Some(""))
            .unwrap()
            .text
            .starts_with("Git Version: \n"));
        let mut none = p.clone();
        none.validators.clear();
        assert!(override_file(&none, None).is_err());
    }

    #[test]
    fn bench_lines_and_aiter_rows() {
        let p = profile();
        let b = bench_lines(&p, "profile x");
        assert_eq!(b.rows, 2);
        let parsed = hipblaslt_bench::parse(&b.text);
        assert_eq!(
            parsed.entries.len(),
            2,
            "one problem each, with its index and without"
        );
        assert_eq!(parsed.entries[0].calls, 2);
        let a = aiter_table(&p, None).unwrap();
        assert_eq!(a.rows, 1, "{:?}", a.dropped);
        assert!(a.dropped.iter().any(|d| d.contains("not a linear layer")));
        let back = aiter::parse(&a.text);
        assert_eq!(back.entries[0].index, Some(42));
        assert_eq!(
            back.entries[0].device,
            Some(Device {
                gfx: "gfx942".into(),
                cu_num: Some(304)
            })
        );
        assert!(
            a.text.contains(",10.5,"),
            "the time in microseconds: {}",
            a.text
        );
        let mut no_cu = p.clone();
        no_cu.validators.retain(|(k, _)| k != "AITER_CU_NUM");
        assert!(aiter_table(&no_cu, None).unwrap_err().contains("CU count"));
    }
}
