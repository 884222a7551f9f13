//! Where a campaign's shapes come from: our miss logs, PyTorch untuned files, TunableOp
//! result files (re-tune), rocBLAS bench logs (`ROCBLAS_LAYER=2`) and profile logs
//! (`ROCBLAS_LAYER=4`, with call counts), rocblas-gemm-tune CSV, and explicit shape specs.
//! The format of each file is told by its content ([`formats::detect`]).
//!
//! All three file kinds share TunableOp's first two fields (`op_name,params_signature`), so
//! one reader takes any of them, file or folder. Solutions in result files are never carried
//! over: a row's id is only meaningful for the build it was tuned on, and the campaign's
//! current rows come from this build's own profile.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tunedblas_core::abi;
use tunedblas_core::formats;
use tunedblas_core::key::{Batching, ProblemKey, Trans, Types};
use tunedblas_core::tunableop::{self, KeyParse};

use crate::error::{Error, Result};

/// One shape to tune.
#[derive(Clone, Debug)]
pub struct Shape {
    pub key: ProblemKey,
    /// Calls recorded for it (miss-log counts), 0 when unknown.
    pub calls: u64,
}

/// Shapes from every input, deduplicated, plus what was skipped and why.
#[derive(Debug, Default)]
pub struct Collected {
    pub shapes: Vec<Shape>,
    /// `file:line: reason` of lines that named no servable problem.
    pub skipped: Vec<String>,
    /// The inputs, as given (for provenance).
    pub sources: Vec<String>,
    /// Result files read as shape lists: (file, its ROCBLAS_VERSION validator, rows). Their
    /// solution ids are not carried over.
    pub imported: Vec<(String, Option<String>, usize)>,
}

impl Collected {
    fn add(&mut self, key: ProblemKey, calls: u64, index: &mut HashMap<ProblemKey, usize>) {
        match index.get(&key) {
            Some(&i) => self.shapes[i].calls += calls,
            None => {
                index.insert(key, self.shapes.len());
                self.shapes.push(Shape { key, calls });
            }
        }
    }
}

fn csv_files(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::failed(format!(
            "{}: {e}; give a miss-log folder, an untuned or results CSV, or --shape",
            path.display()
        ))
    })?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Error::failed(format!("cannot read {}: {e}", path.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|x| ["csv", "log", "txt", "yaml", "yml"].iter().any(|e| x == *e))
                && p.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Reads every input (files or folders of TunableOp-style CSV) and every `--shape` spec.
pub fn collect(inputs: &[PathBuf], specs: &[&str]) -> Result<Collected> {
    let mut out = Collected::default();
    let mut index = HashMap::new();
    for input in inputs {
        out.sources.push(input.display().to_string());
        let files = csv_files(input)?;
        // Miss logs: `x.csv` lists first sights, `x.counts.csv` the calls per shape.
        let counted: Vec<&PathBuf> = files
            .iter()
            .filter(|f| f.to_string_lossy().ends_with(".counts.csv"))
            .collect();
        for f in &files {
            let is_counts = counted.contains(&f);
            let has_counts = !is_counts && {
                let name = f.to_string_lossy();
                let sidecar = format!("{}.counts.csv", name.trim_end_matches(".csv"));
                counted.iter().any(|c| c.to_string_lossy() == sidecar)
            };
            let text = std::fs::read(f)
                .map_err(|e| Error::failed(format!("cannot read {}: {e}", f.display())))?;
            let text = String::from_utf8_lossy(&text);
            if let Some(parsed) = formats::parse(formats::detect(&text), &text) {
                add_foreign(&mut out, &mut index, f, &text, parsed);
                continue;
            }
            let mut rows_with_solutions = 0;
            let mut version = None;
            for (n, line) in text.lines().enumerate() {
                if let Some(v) = line.trim().strip_prefix("Validator,ROCBLAS_VERSION,") {
                    version = Some(v.trim().to_string());
                }
                let line = line.trim();
                if line.is_empty() || line.starts_with("Validator,") || line.starts_with("op_name,")
                {
                    continue;
                }
                let fields: Vec<&str> = line.splitn(4, ',').collect();
                if fields.len() < 2 {
                    out.skipped
                        .push(format!("{}:{}: not op_name,signature", f.display(), n + 1));
                    continue;
                }
                if !is_counts
                    && fields
                        .get(2)
                        .is_some_and(|s| tunableop::Solution::parse(s.trim()).is_ok())
                {
                    rows_with_solutions += 1;
                }
                match tunableop::parse_key(fields[0].trim(), fields[1].trim()) {
                    KeyParse::Key(k) => {
                        let calls = if is_counts {
                            fields
                                .get(2)
                                .and_then(|c| c.trim().parse().ok())
                                .unwrap_or(0)
                        } else {
                            0
                        };
                        // A log with a counts sidecar contributes its keys once, from there.
                        if has_counts && !is_counts {
                            out.add(k, 0, &mut index);
                        } else {
                            out.add(k, calls, &mut index);
                        }
                    }
                    KeyParse::Unservable => out.skipped.push(format!(
                        "{}:{}: an op rocBLAS does not serve ({})",
                        f.display(),
                        n + 1,
                        fields[0].trim()
                    )),
                    KeyParse::Invalid(why) => {
                        out.skipped
                            .push(format!("{}:{}: {why}", f.display(), n + 1))
                    }
                    KeyParse::Wildcard(_) => out.skipped.push(format!(
                        "{}:{}: a `*` wildcard row names no concrete shape",
                        f.display(),
                        n + 1
                    )),
                }
            }
            if rows_with_solutions > 0 {
                out.imported
                    .push((f.display().to_string(), version, rows_with_solutions));
            }
        }
    }
    for spec in specs {
        out.sources.push(format!("--shape {spec}"));
        out.add(parse_spec(spec)?, 0, &mut index);
    }
    Ok(out)
}

/// Adds what a rocBLAS bench or profile log or a rocblas-gemm-tune CSV names.
fn add_foreign(
    out: &mut Collected,
    index: &mut HashMap<ProblemKey, usize>,
    file: &Path,
    text: &str,
    parsed: formats::Parsed,
) {
    let format = formats::detect(text);
    for s in parsed.skipped {
        out.skipped
            .push(format!("{}:{}: {}", file.display(), s.line, s.reason));
    }
    let with_ids = parsed
        .entries
        .iter()
        .filter(|e| e.solution.is_some())
        .count();
    for e in parsed.entries {
        out.add(e.key, e.calls, index);
    }
    if format == formats::Format::GemmTune && with_ids > 0 {
        // Its solution indices belong to the build it was tuned on: shapes only.
        out.imported
            .push((file.display().to_string(), None, with_ids));
    }
}

/// `TYPE:AB:M:N:K[:BATCH]`, packed layout: `f16:TN:4096:256:4096` is what PyTorch issues
/// for a linear layer with 256 tokens. TYPE is f16 or bf16 (f32 compute), f32 or f64.
pub fn parse_spec(spec: &str) -> Result<ProblemKey> {
    let bad = |why: &str| {
        Error::failed(format!(
            "--shape {spec}: {why}; the form is TYPE:AB:M:N:K[:BATCH], e.g. f16:TN:4096:256:4096"
        ))
    };
    let parts: Vec<&str> = spec.split(':').collect();
    if !(5..=6).contains(&parts.len()) {
        return Err(bad("wrong number of fields"));
    }
    let types = match parts[0] {
        "f16" | "h" => Types::uniform(abi::DT_F16_R, abi::DT_F32_R),
        "bf16" => Types::uniform(abi::DT_BF16_R, abi::DT_F32_R),
        "f32" | "s" => Types::SGEMM,
        "f64" | "d" => Types::uniform(abi::DT_F64_R, abi::DT_F64_R),
        _ => return Err(bad("TYPE must be f16, bf16, f32 or f64")),
    };
    let ab: Vec<Trans> = parts[1].chars().filter_map(Trans::from_letter).collect();
    if ab.len() != 2 || parts[1].len() != 2 {
        return Err(bad("AB must be two letters of N and T"));
    }
    let num = |s: &str, what: &str| -> Result<i64> {
        s.parse::<i64>()
            .ok()
            .filter(|v| (1..=1 << 24).contains(v))
            .ok_or_else(|| bad(&format!("{what} must be a whole number from 1 to 16777216")))
    };
    let (m, n, k) = (
        num(parts[2], "M")?,
        num(parts[3], "N")?,
        num(parts[4], "K")?,
    );
    let [lda, ldb, ldc] = ProblemKey::packed_lds(ab[0], ab[1], m, n, k);
    let key = ProblemKey::single(ab[0], ab[1], types, m, n, k, lda, ldb, ldc, ldc, 0);
    Ok(match parts.get(5) {
        None => key,
        Some(b) => {
            let batch = num(b, "BATCH")?;
            key.with_batch(Batching::Strided, batch, key.packed_strides())
        }
    })
}

/// `TN f16 4096x1024` style label: layout, type, (rocBLAS m x k), the seed's (N, K).
pub fn shape_label(k: &ProblemKey) -> String {
    format!(
        "{}{} {} {}x{}{}",
        k.trans_a.letter(),
        k.trans_b.letter(),
        tunableop::short_type_name(k.types.a),
        k.m,
        k.k,
        if k.batch > 1 {
            format!(" b{}", k.batch)
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("tunedblas-shapes-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn specs_make_packed_keys() {
        let k = parse_spec("f16:TN:4096:256:1024").unwrap();
        assert_eq!((k.m, k.n, k.k), (4096, 256, 1024));
        assert_eq!((k.lda, k.ldb, k.ldc), (1024, 1024, 4096));
        let b = parse_spec("f32:NN:64:64:64:8").unwrap();
        assert_eq!(b.batching, Batching::Strided);
        assert_eq!(b.stride_c, 64 * 64);
        for bad in [
            "f16:TN:1:2",
            "f8:TN:1:2:3",
            "f16:XN:1:2:3",
            "f16:TN:0:2:3",
            "f16:TN:a:2:3",
        ] {
            let e = parse_spec(bad).unwrap_err();
            assert!(e.message.contains(bad), "{e}");
        }
    }

    #[test]
    fn rocblas_logs_and_gemm_tune_csv_give_shapes_with_calls() {
        let d = tmp("rocblas-formats");
        let k = parse_spec("f16:TN:512:16:256").unwrap();
        let bench = tunedblas_core::formats::bench::command(&k, None, None).unwrap();
        std::fs::write(
            d.join("bench.log"),
            format!("{bench}\nnoise\n{bench}\n./rocblas-bench -f gemm_ex -m x\n"),
        )
        .unwrap();
        std::fs::write(
            d.join("profile.yaml"),
            "- { rocblas_function: \"rocblas_sgemm\", transA: 'N', transB: 'N', M: 8, N: 8, K: 8, alpha: 1.0, lda: 8, ldb: 8, beta: 0.0, ldc: 8, call_count: 5 }\n",
        )
        .unwrap();
        std::fs::write(
            d.join("tune.csv"),
            format!(
                "{}\nT,N,512,16,1,256,1,0,256,256,512,f16_r,f16_r,f32_r,9\n",
                tunedblas_core::formats::gemm_tune::HEADER
            ),
        )
        .unwrap();
        let c = collect(std::slice::from_ref(&d), &[]).unwrap();
        let calls: HashMap<ProblemKey, u64> = c.shapes.iter().map(|s| (s.key, s.calls)).collect();
        assert_eq!(c.shapes.len(), 2, "{:?}", c.shapes);
        assert_eq!(
            calls[&k], 2,
            "two bench lines; the gemm-tune row adds no calls"
        );
        assert_eq!(calls[&parse_spec("f32:NN:8:8:8").unwrap()], 5);
        let bad: Vec<&String> = c
            .skipped
            .iter()
            .filter(|s| s.contains("bench.log:"))
            .collect();
        assert_eq!(bad.len(), 2, "{:?}", c.skipped);
        assert!(
            bad[0].contains("bench.log:2:") && bad[1].contains("bench.log:4:"),
            "{bad:?}"
        );
        assert_eq!(
            c.imported.len(),
            1,
            "the gemm-tune CSV carries ids: {:?}",
            c.imported
        );
    }

    #[test]
    fn miss_logs_untuned_and_results_files_all_give_shapes() {
        let d = tmp("mixed");
        let k1 = parse_spec("f16:TN:512:16:256").unwrap();
        let k2 = parse_spec("f16:TN:512:32:256").unwrap();
        let (op1, sig1) = tunableop::op_and_signature(&k1);
        let (op2, sig2) = tunableop::op_and_signature(&k2);
        // A miss log with its counts sidecar, and an untuned file naming k1 again.
        std::fs::write(
            d.join("h-1-rank0.csv"),
            format!("{op1},{sig1}\n{op2},{sig2}\n"),
        )
        .unwrap();
        std::fs::write(
            d.join("h-1-rank0.counts.csv"),
            format!("op_name,param_signature,calls\n{op1},{sig1},40\n{op2},{sig2},2\n"),
        )
        .unwrap();
        let untuned = d.join("untuned.csv");
        std::fs::write(&untuned, format!("{op1},{sig1}\ngarbage line\n")).unwrap();
        let results = d.join("other-build.csv");
        std::fs::write(
            &results,
            format!("Validator,ROCBLAS_VERSION,9.9\n{op2},{sig2},Gemm_Rocblas_77,0.1\n"),
        )
        .unwrap();
        let c = collect(std::slice::from_ref(&d), &[]).unwrap();
        let calls: HashMap<ProblemKey, u64> = c.shapes.iter().map(|s| (s.key, s.calls)).collect();
        assert_eq!(c.shapes.len(), 2, "{:?}", c.shapes);
        assert_eq!(calls[&k1], 40, "counted once, from the sidecar");
        assert_eq!(calls[&k2], 2);
        assert_eq!(c.skipped.len(), 1, "{:?}", c.skipped);
        assert!(c.skipped[0].contains("untuned.csv:2"), "{:?}", c.skipped);
        assert_eq!(c.imported.len(), 1, "{:?}", c.imported);
        assert_eq!(c.imported[0].1.as_deref(), Some("9.9"));
        let only = collect(&[results], &["f16:NN:8:8:8"]).unwrap();
        assert_eq!(only.shapes.len(), 2);
        assert_eq!(only.shapes[0].key, k2);
        let e = collect(&[d.join("absent")], &[]).unwrap_err();
        assert!(e.message.contains("absent"), "{e}");
    }
}
