//! `tunedblas export`: a profile in the formats other tools read.
//!
//! - `gemm-tune`: a rocblas-gemm-tune CSV for `ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH`, for hosts
//!   where preloading is not allowed. rocBLAS never checks that such a file belongs to the
//!   loaded build, so the file says which build it is for in comment lines.
//! - `bench`: `rocblas-bench` command lines, each row followed by the heuristic, so anyone
//!   can check a row with AMD's own tool.
//! - `tunableop`: PyTorch TunableOp result files that PyTorch accepts unchanged: its exact
//!   validator set (taken from a file PyTorch wrote on the target, or given), its signature
//!   form, one file per rank, no tunedblas extension rows.
//!
//! The formats themselves are in the core (`tunedblas_core::formats`).

use std::path::{Path, PathBuf};

use serde::Serialize;
use tunedblas_core::formats::{bench, gemm_tune, pytorch};
use tunedblas_core::tunableop::{self, ResultsFile, Solution};
use tunedblas_core::version;

use crate::error::Error;
use crate::pick::Picked;
use tunedblas_tuner::backends::ShapeKey as _;

/// A results file, or why it cannot be read.
pub fn read(path: &Path) -> Result<ResultsFile, Error> {
    tunableop::read(path).map_err(|e| Error::failed(format!("cannot read {}: {e}", path.display())))
}

/// A results file's text, of any library, read as the interposer reads one (a regular
/// file, at most its size limit), or why it cannot be read.
pub fn read_text(path: &Path) -> Result<String, Error> {
    let limit = tunedblas_core::profile::MAX_RESULTS_FILE_BYTES;
    tunedblas_core::profile::read_regular(path, limit)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| Error::failed(format!("cannot read {}: {e}", path.display())))
}

/// A file given to the command read as text, as the interposer reads a profile's files (a
/// regular file of at most `limit` bytes: a FIFO or device planted in its place is refused,
/// never opened to block or exhaust), or why not, in words without the path. Unlike
/// [`read_text`] a file that is not UTF-8 is refused, not read lossily.
pub fn regular_text(path: &Path, limit: u64) -> Result<String, String> {
    let bytes = tunedblas_core::profile::read_regular(path, limit).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "not text (UTF-8)".to_string())
}

/// Writes `bytes` to `path`, making its folder first (the export's and the report's files).
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::failed(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, bytes)
        .map_err(|e| Error::failed(format!("cannot write {}: {e}", path.display())))
}

/// What an export wrote.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub profile: String,
    pub build: String,
    pub format: String,
    pub files: Vec<PathBuf>,
    pub rows: usize,
    /// `op,signature: reason` of the rows the format cannot hold.
    pub dropped: Vec<String>,
}

impl Report {
    /// A file written with `rows` rows.
    pub fn wrote(&mut self, path: &Path, rows: usize) {
        self.files.push(path.to_path_buf());
        self.rows += rows;
    }
}

fn build_words(p: &Picked) -> String {
    format!(
        "rocBLAS build sha256 {} (rocBLAS {}; arch {})",
        p.sha256,
        p.version()
            .map(|v| v.label())
            .or_else(|| p.rocblas.clone())
            .unwrap_or_else(|| "unknown".into()),
        p.arch.as_deref().unwrap_or("unknown")
    )
}

pub fn gemm_tune_text(
    p: &Picked,
    rank: usize,
    betas: &[f64],
    report: &mut Report,
) -> Result<String, Error> {
    // rocBLAS reads the file only from 3.1 (ROCm 5.7) on; an older build ignores the
    // variable without a word, so writing the file would only look like it worked.
    let needs = "ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH is read by rocBLAS 3.1 (ROCm 5.7) and later";
    if let Some(v) = p.version().filter(|v| !v.reads_gemm_override_file()) {
        return Err(Error::failed(format!(
            "profile '{}' is for rocBLAS {v} ({}), which does not read ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH ({}): it would ignore an override file without a word. Serve this profile with the interposer (LD_PRELOAD=libtunedblas.so), or check its rows with --format bench",
            p.name,
            v.rocm(),
            needs.trim_start_matches("ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH is ")
        )));
    }
    let file = read(p.rank_file(rank)?)?;
    let mut rows = Vec::new();
    for r in &file.rows {
        let why = match (&r.solution, gemm_tune::inexpressible(&r.key)) {
            (_, Some(why)) => why,
            (Solution::Default, None) => {
                "Default: the heuristic is already what rocBLAS runs".to_string()
            }
            (Solution::Rocblas(id), None) => match gemm_tune::override_index(*id, p.major()) {
                Ok(index) => {
                    rows.push((r.key, index));
                    continue;
                }
                Err(why) => why,
            },
            (Solution::Other(s), None) => format!("{s} is not a rocBLAS solution"),
        };
        report.dropped.push(format!("{}: {why}", r.key.text()));
    }
    report.rows = rows.len() * betas.len();
    let mut comments = vec![
        format!("rocblas-gemm-tune CSV written by tunedblas export from profile {} (rank {rank})", p.name),
        format!("valid ONLY for {}", build_words(p)),
        "solution indices are build-specific and rocBLAS does not check this file against the loaded build".into(),
        "use: ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH=<absolute path of this file> (no LD_PRELOAD needed)".into(),
        match p.version() {
            Some(v) => format!("rocBLAS {v} reads that variable ({needs})"),
            None => format!("the build's rocBLAS version is unknown: {needs}; older builds ignore the file"),
        },
        format!(
            "Tensile matches beta exactly: rows are written for beta = {}",
            betas.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(" and ")
        ),
        format!("{} rows; {} profile rows have no override form:", report.rows, report.dropped.len()),
    ];
    comments.extend(report.dropped.iter().map(|d| format!("  not written: {d}")));
    Ok(gemm_tune::file_text(&comments, &rows, betas))
}

pub fn bench_text(p: &Picked, rank: usize, report: &mut Report) -> Result<String, Error> {
    let file = read(p.rank_file(rank)?)?;
    let mut out = format!(
        "#!/bin/sh\n# rocblas-bench command lines for profile {} (rank {rank}), written by tunedblas export\n\
# valid for {}\n\
# Run from the folder holding AMD's rocblas-bench (rocBLAS clients). Each row is followed by\n\
# the library heuristic on the same problem: compare their timings (add -i 100 for steadier ones).\n",
        p.name,
        build_words(p)
    );
    if p.major().is_none() {
        out.push_str(&format!(
            "# The rocBLAS version is unknown: lines for a D laid out unlike C use {} (rocBLAS 4.0 and later); rocblas-bench of rocBLAS 3.x and older (ROCm 5.7 and older) calls it {}.\n",
            bench::own_d_switch(None),
            bench::own_d_switch(Some(3))
        ));
    }
    for r in &file.rows {
        let Some(heuristic) = bench::command(&r.key, None, p.major()) else {
            report.dropped.push(format!(
                "{}: a data type rocblas-bench has no name for",
                r.key.text()
            ));
            continue;
        };
        let time = r
            .time_ms
            .map_or(String::new(), |t| format!(", {t} ms when tuned"));
        out.push_str(&format!("\n# {} -> {}{time}\n", r.key.text(), r.solution));
        match &r.solution {
            Solution::Rocblas(id) => {
                out.push_str(&bench::command(&r.key, Some(*id), p.major()).unwrap_or_default());
                out.push('\n');
                out.push_str(&heuristic);
                out.push_str("   # the heuristic\n");
            }
            _ => {
                out.push_str(&heuristic);
                out.push_str("   # the heuristic (the row says Default)\n");
            }
        }
        report.rows += 1;
    }
    Ok(out)
}

/// Whether two `ROCBLAS_VERSION` strings name the same build (`2.47.0.` and `2.47.0` do; a
/// `-` for the last `.`, as some files have it, too).
fn same_version(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.trim().replace('-', ".");
    version::same_build(a, b) || norm(a) == norm(b)
}

/// Where the validators PyTorch will compare come from (`export --format tunableop`).
pub struct Validators {
    /// `--validators-from`: a results file PyTorch wrote on the target; else the profile's own.
    pub from: Option<PathBuf>,
    /// `--validator KEY=VALUE`, applied last.
    pub set: Vec<(String, String)>,
    /// `--force`: export even for validators that name another rocBLAS version.
    pub force: bool,
}

/// The validator set for PyTorch: `from`, else the profile's own, then each given one.
fn pytorch_validators(v: &Validators, own: &ResultsFile) -> Result<Vec<(String, String)>, Error> {
    let mut set = match &v.from {
        Some(f) => {
            let text = read_text(f)?;
            // A key named twice with two values is no file PyTorch wrote, and which one it
            // would keep is not ours to guess: the version check would look at one (our
            // reader keeps the first), PyTorch perhaps at the other.
            let mut seen: Vec<(&str, &str)> = Vec::new();
            for line in tunedblas_core::tunableop::lines(&text) {
                let Some((k, value)) = line
                    .text
                    .strip_prefix("Validator,")
                    .and_then(|r| r.split_once(','))
                else {
                    continue;
                };
                let (k, value) = (k.trim(), value.trim());
                if let Some((_, other)) = seen.iter().find(|(key, v)| *key == k && *v != value) {
                    return Err(Error::failed(format!(
                        "{} names validator {k} twice ({other} and {value}): give a file PyTorch wrote",
                        f.display()
                    )));
                }
                seen.push((k, value));
            }
            tunedblas_core::tunableop::parse(&text).validators
        }
        None => own.validators.clone(),
    };
    for (k, value) in &v.set {
        match set.iter_mut().find(|(key, _)| key == k) {
            Some(e) => e.1 = value.clone(),
            None => set.push((k.clone(), value.clone())),
        }
    }
    Ok(set)
}

/// One rank's PyTorch results file, and how many rows it holds.
pub struct RankFile {
    pub rank: usize,
    pub text: String,
    pub rows: usize,
}

/// The profile as PyTorch results files, one for every rank. The report counts the rows of
/// the files the caller writes (`Report::wrote`), not of every rank.
pub fn tunableop_files(
    v: &Validators,
    p: &Picked,
    report: &mut Report,
) -> Result<Vec<RankFile>, Error> {
    let first = read(p.rank_file(p.ranks.first().map_or(0, |r| r.0))?)?;
    let validators = pytorch_validators(v, &first)?;
    let problems = pytorch::validator_problems(&validators);
    if !problems.is_empty() {
        return Err(Error::failed(format!(
            "PyTorch discards a results file whose validators are not exactly its own: {}. Give --validators-from <a tunableop_results file PyTorch wrote on the target> or --validator KEY=VALUE",
            problems.join("; ")
        )));
    }
    let theirs = validators
        .iter()
        .find(|(k, _)| k == "ROCBLAS_VERSION")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    if let Some(ours) = &p.rocblas {
        if !same_version(ours, &theirs) && !v.force {
            return Err(Error::failed(format!(
                "the validators are for rocBLAS {theirs}, but profile '{}' was tuned on rocBLAS {ours} (build {}): its solution ids would be used with another build. Tune that build, or pass --force",
                p.name,
                p.short()
            )));
        }
    }
    let mut files = Vec::new();
    for (rank, path) in &p.ranks {
        let e = pytorch::export(&read(path)?, &validators);
        if files.is_empty() {
            report.dropped = e.dropped.clone();
        }
        files.push(RankFile {
            rank: *rank,
            text: e.text,
            rows: e.rows,
        });
    }
    Ok(files)
}

/// A hipBLASLt profile in the AMD stack's formats (`tunedblas_core::formats::lt_export`):
/// the text and its row count.
pub fn lt_text(
    p: &Picked,
    rank: usize,
    format: &str,
    git_version: Option<&str>,
    device: Option<tunedblas_core::formats::lt::Device>,
    report: &mut Report,
) -> Result<(String, usize), Error> {
    use tunedblas_core::formats::lt_export;
    let results = tunedblas_core::cublaslt::parse_results(&read_text(p.rank_file(rank)?)?);
    let title = format!(
        "profile {} (rank {rank}, hipBLASLt build {})",
        p.name,
        p.short()
    );
    let e = match format {
        "hipblaslt-override" => lt_export::override_file(&results, git_version),
        "hipblaslt-bench" => Ok(lt_export::bench_lines(&results, &title)),
        _ => lt_export::aiter_table(&results, device),
    }
    .map_err(|why| {
        Error::failed(format!(
            "cannot write profile '{}' as {format}: {why}",
            p.name
        ))
    })?;
    report.dropped = e.dropped;
    Ok((e.text, e.rows))
}
