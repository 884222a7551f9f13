//! Where a campaign's shapes come from: our miss logs, PyTorch untuned files, TunableOp
//! result files (re-tune), rocBLAS bench logs (`ROCBLAS_LAYER=2`) and profile logs
//! (`ROCBLAS_LAYER=4`, with call counts), rocblas-gemm-tune CSV, and explicit shape specs.
//! The format of each file is told by its content ([`formats::detect`]).
//!
//! All three file kinds share TunableOp's first two fields (`op_name,params_signature`), so
//! one reader takes any of them, file or folder. Solutions in result files are never carried
//! over: a row's id is only meaningful for the build it was tuned on, and the campaign's
//! current rows come from this build's own profile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tunedblas_core::cublaslt::LtKey;
use tunedblas_core::formats;
use tunedblas_core::key::ProblemKey;
use tunedblas_core::tunableop::{self, KeyParse};
use tunedblas_tuner::backends::{rocblas, Kind, Library, ShapeKey};
use tunedblas_tuner::campaign::{self, Inputs};

use crate::error::{Error, Result};

/// Shapes from every input, deduplicated (calls summed), plus what was skipped and why.
#[derive(Debug)]
pub struct Collected<K> {
    /// Each shape with the calls recorded for it (miss-log counts), 0 when unknown.
    pub shapes: Vec<(K, u64)>,
    /// `file:line: reason` of lines that named no servable problem.
    pub skipped: Vec<String>,
    /// The inputs, as given (for provenance).
    pub sources: Vec<String>,
    /// Result files read as shape lists: (file, its ROCBLAS_VERSION validator, rows). Their
    /// solution ids are not carried over.
    pub imported: Vec<(String, Option<String>, usize)>,
}

impl<K: PartialEq> Collected<K> {
    fn add(&mut self, key: K, calls: u64) {
        match self.shapes.iter_mut().find(|s| s.0 == key) {
            Some(s) => s.1 = s.1.saturating_add(calls),
            None => self.shapes.push((key, calls)),
        }
    }
}

/// What a library's shape inputs hold beyond TunableOp-style `op,signature` lines: the
/// files of its own tools, each told by its content ([`formats::detect`]).
pub trait Reads: ShapeKey {
    /// Whether TunableOp results files read as shape lists are recorded in the campaign's
    /// provenance (their ids are this library's, of another build).
    const RECORDS_IMPORTS: bool;
    /// One `op,signature` line's key, or why it names none.
    fn line(op: &str, sig: &str) -> std::result::Result<Self, String>;
    /// A file of the library's own tools, added to `out`; false where `text` is not one.
    fn other(out: &mut Collected<Self>, file: &Path, text: &str, quiet: bool) -> bool;
}

impl Reads for ProblemKey {
    const RECORDS_IMPORTS: bool = true;
    fn line(op: &str, sig: &str) -> std::result::Result<ProblemKey, String> {
        match tunableop::parse_key(op, sig) {
            KeyParse::Key(k) => Ok(k),
            KeyParse::Unservable => Err(format!("an op rocBLAS does not serve ({op})")),
            KeyParse::Invalid(why) => Err(why),
            KeyParse::Wildcard(_) => Err("a `*` wildcard row names no concrete shape".into()),
        }
    }
    /// A rocBLAS bench or profile log or a rocblas-gemm-tune CSV.
    fn other(out: &mut Collected<ProblemKey>, file: &Path, text: &str, _quiet: bool) -> bool {
        let format = formats::detect(text);
        let Some(parsed) = formats::parse(format, text) else {
            return false;
        };
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
            out.add(e.key, e.calls);
        }
        if format == formats::Format::GemmTune && with_ids > 0 {
            // Its solution indices belong to the build it was tuned on: shapes only.
            out.imported
                .push((file.display().to_string(), None, with_ids));
        }
        true
    }
}

impl Reads for LtKey {
    const RECORDS_IMPORTS: bool = false;
    fn line(op: &str, sig: &str) -> std::result::Result<LtKey, String> {
        LtKey::parse(&format!("{op},{sig}")).ok_or_else(|| format!("{op},{sig}"))
    }
    /// hipBLASLt tuning files, HIPBLASLT_LOG_MASK=32 logs and AITER tables (the core reads
    /// them; their indices are not carried over).
    fn other(out: &mut Collected<LtKey>, file: &Path, text: &str, quiet: bool) -> bool {
        let Some(parsed) = formats::parse_lt(formats::detect(text), text) else {
            return false;
        };
        for s in &parsed.skipped {
            out.skipped
                .push(format!("{}:{} ({})", file.display(), s.line, s.reason));
        }
        if !quiet {
            for (why, n) in &parsed.unservable {
                eprintln!(
                    "tunedblas tune: {}: {n} rows: {why}; their shapes are tuned where they name a plain GEMM",
                    file.display()
                );
            }
        }
        for e in parsed.entries {
            let (op, sig) = tunedblas_core::cublaslt::op_and_signature(&e.key);
            match LtKey::line(&op, &sig) {
                Ok(k) => out.add(k, 0),
                Err(line) => out.skipped.push(format!("{}: {line}", file.display())),
            }
        }
        true
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

/// Reads every input (files or folders of TunableOp-style CSV, or of the library's own
/// tools' files) and every `--shape` spec, for the library whose keys are `K`. A miss log's
/// `x.counts.csv` gives the calls per shape; its `x.csv` (first sights) adds none.
pub fn collect<K: Reads>(inputs: &[PathBuf], specs: &[&str], quiet: bool) -> Result<Collected<K>> {
    let mut out = Collected {
        shapes: Vec::new(),
        skipped: Vec::new(),
        sources: Vec::new(),
        imported: Vec::new(),
    };
    for input in inputs {
        out.sources.push(input.display().to_string());
        for f in csv_files(input)? {
            let is_counts = f.to_string_lossy().ends_with(".counts.csv");
            let text = std::fs::read(&f)
                .map_err(|e| Error::failed(format!("cannot read {}: {e}", f.display())))?;
            let text = String::from_utf8_lossy(&text);
            if K::other(&mut out, &f, &text, quiet) {
                continue;
            }
            let mut rows_with_solutions = 0;
            let mut version = None;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if let Some(v) = line.strip_prefix("Validator,ROCBLAS_VERSION,") {
                    version = Some(v.trim().to_string());
                }
                if line.is_empty() || line.starts_with("Validator,") || line.starts_with("op_name,")
                {
                    continue;
                }
                let fields: Vec<&str> = line.splitn(4, ',').map(str::trim).collect();
                if fields.len() < 2 {
                    out.skipped
                        .push(format!("{}:{}: not op_name,signature", f.display(), n + 1));
                    continue;
                }
                let third = fields.get(2).copied();
                if !is_counts && third.is_some_and(|s| tunableop::Solution::parse(s).is_ok()) {
                    rows_with_solutions += 1;
                }
                match K::line(fields[0], fields[1]) {
                    Ok(k) => {
                        let calls = match is_counts {
                            true => third.and_then(|c| c.parse().ok()).unwrap_or(0),
                            false => 0,
                        };
                        out.add(k, calls);
                    }
                    Err(why) => out
                        .skipped
                        .push(format!("{}:{}: {why}", f.display(), n + 1)),
                }
            }
            if K::RECORDS_IMPORTS && rows_with_solutions > 0 {
                out.imported
                    .push((f.display().to_string(), version, rows_with_solutions));
            }
        }
    }
    for spec in specs {
        out.sources.push(format!("--shape {spec}"));
        out.add(K::parse_spec(spec).map_err(Error::failed)?, 0);
    }
    Ok(out)
}

/// `TYPE:AB:M:N:K[:BATCH]`, packed layout: `f16:TN:4096:256:4096` is what PyTorch issues
/// for a linear layer with 256 tokens (see [`rocblas::parse_spec`]).
pub fn parse_spec(spec: &str) -> Result<ProblemKey> {
    rocblas::parse_spec(spec).map_err(Error::failed)
}

/// The input files of each library: a folder's miss files by the library their names say
/// (the interposer tags the Lt libraries' files, `<process>-cublaslt-rank0.csv`); a file
/// named on its own by its name too, else the one library given with `--lib`, else rocBLAS.
pub fn by_library(
    inputs: &[PathBuf],
    libs: &BTreeMap<Kind, PathBuf>,
) -> Result<BTreeMap<Kind, Vec<PathBuf>>> {
    let mut out: BTreeMap<Kind, Vec<PathBuf>> = BTreeMap::new();
    for input in inputs {
        let is_dir = input.is_dir();
        for f in csv_files(input)? {
            let name = f
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned());
            let kind = match Kind::of_miss_file(&name) {
                Kind::Rocblas if !is_dir && libs.len() == 1 => *libs.keys().next().expect("one"),
                k => k,
            };
            out.entry(kind).or_default().push(f);
        }
    }
    Ok(out)
}

/// What a campaign of `lib` takes of `files` and `specs`: the shapes named on the command
/// line are tuned again even where the profile has a row; the skipped lines are said.
pub fn inputs<L: Library>(
    lib: &L,
    files: &[PathBuf],
    specs: &[&str],
    opts: &campaign::Options,
) -> Result<Inputs<L::Key>>
where
    L::Key: Reads,
{
    let collected = collect::<L::Key>(files, specs, opts.quiet)?;
    if !opts.quiet && !collected.skipped.is_empty() {
        eprintln!(
            "tunedblas: skipped {} input lines that name no {} shape; the first: {}",
            collected.skipped.len(),
            lib.kind().name(),
            collected.skipped[0]
        );
    }
    let named = specs
        .iter()
        .map(|s| L::Key::parse_spec(s).map_err(|e| Error::usage("tune", e)))
        .collect::<Result<Vec<_>>>()?;
    let record = match L::Key::RECORDS_IMPORTS {
        true => {
            serde_json::json!({ "imported": collected.imported.iter().map(|(file, version, rows)| serde_json::json!({
            "file": file,
            "rocblas": version,
            "rows": rows,
            "ids": "not reused: tuned on another build, or current rows come from this build's profile",
        })).collect::<Vec<_>>() })
        }
        false => serde_json::Value::Null,
    };
    Ok(Inputs {
        shapes: collected.shapes,
        named,
        sources: collected.sources,
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("tunedblas-shapes-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Writes `text` to `dir/name`, and gives the path.
    fn put(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn specs_make_packed_keys() {
        let k = parse_spec("f16:TN:4096:256:1024").unwrap();
        assert_eq!((k.m, k.n, k.k), (4096, 256, 1024));
        assert_eq!((k.lda, k.ldb, k.ldc), (1024, 1024, 4096));
        let b = parse_spec("f32:NN:64:64:64:8").unwrap();
        assert_eq!(b.batching, tunedblas_core::key::Batching::Strided);
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
        put(
            &d,
            "bench.log",
            format!("{bench}\nnoise\n{bench}\n./rocblas-bench -f gemm_ex -m x\n"),
        );
        put(&d, "profile.yaml", "- { rocblas_function: \"rocblas_sgemm\", transA: 'N', transB: 'N', M: 8, N: 8, K: 8, alpha: 1.0, lda: 8, ldb: 8, beta: 0.0, ldc: 8, call_count: 5 }\n");
        put(
            &d,
            "tune.csv",
            format!(
                "{}\nT,N,512,16,1,256,1,0,256,256,512,f16_r,f16_r,f32_r,9\n",
                tunedblas_core::formats::gemm_tune::HEADER
            ),
        );
        let c = collect::<ProblemKey>(std::slice::from_ref(&d), &[], false).unwrap();
        let calls: HashMap<ProblemKey, u64> = c.shapes.iter().copied().collect();
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
        put(&d, "h-1-rank0.csv", format!("{op1},{sig1}\n{op2},{sig2}\n"));
        put(
            &d,
            "h-1-rank0.counts.csv",
            format!("op_name,param_signature,calls\n{op1},{sig1},40\n{op2},{sig2},2\n"),
        );
        put(&d, "untuned.csv", format!("{op1},{sig1}\ngarbage line\n"));
        let results = put(
            &d,
            "other-build.csv",
            format!("Validator,ROCBLAS_VERSION,9.9\n{op2},{sig2},Gemm_Rocblas_77,0.1\n"),
        );
        let c = collect::<ProblemKey>(std::slice::from_ref(&d), &[], false).unwrap();
        let calls: HashMap<ProblemKey, u64> = c.shapes.iter().copied().collect();
        assert_eq!(c.shapes.len(), 2, "{:?}", c.shapes);
        assert_eq!(calls[&k1], 40, "counted once, from the sidecar");
        assert_eq!(calls[&k2], 2);
        assert_eq!(c.skipped.len(), 1, "{:?}", c.skipped);
        assert!(c.skipped[0].contains("untuned.csv:2"), "{:?}", c.skipped);
        assert_eq!(c.imported.len(), 1, "{:?}", c.imported);
        assert_eq!(c.imported[0].1.as_deref(), Some("9.9"));
        let only = collect::<ProblemKey>(&[results], &["f16:NN:8:8:8"], false).unwrap();
        assert_eq!(only.shapes.len(), 2);
        assert_eq!(only.shapes[0].0, k2);
        let e = collect::<ProblemKey>(&[d.join("absent")], &[], false).unwrap_err();
        assert!(e.message.contains("absent"), "{e}");
    }

    #[test]
    fn miss_files_go_to_the_library_their_names_say() {
        let d = tmp("by-library");
        for name in [
            "h-1-rank0.csv",
            "h-1-rank0.counts.csv",
            "h-2-cublaslt-rank0.csv",
            "h-2-cublaslt-rank0.counts.csv",
            "h-3-hipblaslt-rank1.csv",
            "h-4.status.json",
        ] {
            put(&d, name, "");
        }
        let names = |v: &[PathBuf]| -> Vec<String> {
            v.iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        let g = by_library(std::slice::from_ref(&d), &BTreeMap::new()).unwrap();
        assert_eq!(
            names(&g[&Kind::Rocblas]),
            ["h-1-rank0.counts.csv", "h-1-rank0.csv"]
        );
        assert_eq!(
            names(&g[&Kind::Cublaslt]),
            ["h-2-cublaslt-rank0.counts.csv", "h-2-cublaslt-rank0.csv"]
        );
        assert_eq!(names(&g[&Kind::Hipblaslt]), ["h-3-hipblaslt-rank1.csv"]);
        // A file named on its own with one --lib goes to that library, unless its name says.
        let untuned = put(&d, "untuned.csv", "");
        let one = BTreeMap::from([(Kind::Cublaslt, PathBuf::from("libcublasLt.so"))]);
        let g = by_library(&[untuned.clone(), d.join("h-3-hipblaslt-rank1.csv")], &one).unwrap();
        assert_eq!(names(&g[&Kind::Cublaslt]), ["untuned.csv"]);
        assert_eq!(names(&g[&Kind::Hipblaslt]), ["h-3-hipblaslt-rank1.csv"]);
        assert_eq!(
            by_library(&[untuned], &BTreeMap::new())
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            [&Kind::Rocblas]
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
