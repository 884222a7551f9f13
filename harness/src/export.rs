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
use tunedblas_core::identity;
use tunedblas_core::profile;
use tunedblas_core::registry::{Match, Registry};
use tunedblas_core::tunableop::{self, ResultsFile, Solution};
use tunedblas_core::version::{self, Version};

use crate::backend::Error;
use crate::cli::Args;
use crate::Failure;

/// A profile picked by `--profile NAME` or by the build of `--lib`.
#[derive(Clone, Debug, Serialize)]
pub struct Picked {
    pub name: String,
    pub dir: PathBuf,
    pub sha256: String,
    pub rocblas: Option<String>,
    pub arch: Option<String>,
    /// `(rank, file)` of every rank file, in rank order.
    pub ranks: Vec<(usize, PathBuf)>,
}

impl Picked {
    /// The rocBLAS major version, from the registry or the rank files' validator.
    pub fn major(&self) -> Option<u32> {
        self.version().map(|v| v.major)
    }

    /// The rocBLAS version, from the registry or the rank files' validator.
    pub fn version(&self) -> Option<Version> {
        Version::parse(self.rocblas.as_deref()?)
    }

    pub fn short(&self) -> &str {
        &self.sha256[..self.sha256.len().min(12)]
    }

    pub fn rank_file(&self, rank: usize) -> Result<&Path, Error> {
        self.ranks
            .iter()
            .find(|(r, _)| *r == rank)
            .map(|(_, p)| p.as_path())
            .ok_or_else(|| {
                Error::new(format!(
                    "profile '{}' has no rank {rank} file in {}",
                    self.name,
                    self.dir.display()
                ))
            })
    }
}

/// Finds the profile: `--profile NAME`, else the one registered for the build at `--lib`
/// (matched by sha256, as the interposer does).
pub fn pick(a: &Args, root: &Path) -> Result<Picked, Failure> {
    let reg_path = root.join(profile::REGISTRY_FILE);
    let reg = Registry::load(&reg_path).map_err(|e| Error::new(e.to_string()))?;
    let (name, entry) = match (a.value("--profile"), a.path("--lib")) {
        (Some(name), _) => {
            let entry = reg.get(name).ok_or_else(|| {
                Error::new(format!(
                    "no profile '{name}' in {}; `tunedblas profiles list` shows the names",
                    reg_path.display()
                ))
            })?;
            (name.to_string(), entry.clone())
        }
        (None, Some(lib)) => {
            let sha = identity::sha256_file(&lib)
                .map_err(|e| Error::new(format!("cannot hash {}: {e}", lib.display())))?;
            match reg.find_by_sha(&sha) {
                Match::Unique(name, entry) => (name.to_string(), entry.clone()),
                Match::Ambiguous(names) => {
                    return Err(Error::new(format!(
                        "build {} has several profiles ({}); name one with --profile",
                        &sha[..12],
                        names.join(", ")
                    ))
                    .into())
                }
                Match::None => {
                    return Err(Error::new(format!(
                        "no profile in {} for the build of {} ({}); `tunedblas tune` makes one",
                        reg_path.display(),
                        lib.display(),
                        &sha[..12]
                    ))
                    .into())
                }
            }
        }
        (None, None) => {
            return Err(a
                .usage("needs --lib <librocblas.so> or --profile <name>")
                .into())
        }
    };
    let dir = entry.path_in(root);
    let mut ranks: Vec<(usize, PathBuf)> = std::fs::read_dir(&dir)
        .map_err(|e| Error::new(format!("cannot read {}: {e}", dir.display())))?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((profile::rank_of_file(e.file_name().to_str()?)?, e.path())))
        .collect();
    ranks.sort();
    let mut rocblas = entry.rocblas.clone();
    let mut arch = entry.arch.clone();
    if let Some((_, first)) = ranks.first() {
        if let Ok(f) = tunableop::read(first) {
            rocblas = rocblas.or_else(|| f.validator("ROCBLAS_VERSION").map(str::to_string));
            arch = arch.or_else(|| f.validator("GCN_ARCH_NAME").map(str::to_string));
        }
    }
    Ok(Picked {
        name,
        dir,
        sha256: entry.lib_sha256.clone(),
        rocblas,
        arch,
        ranks,
    })
}

fn read(path: &Path) -> Result<ResultsFile, Error> {
    tunableop::read(path).map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, text)
        .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))
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

fn key_text(k: &tunedblas_core::key::ProblemKey) -> String {
    let (op, sig) = tunableop::op_and_signature(k);
    format!("{op},{sig}")
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

fn gemm_tune_text(
    p: &Picked,
    rank: usize,
    betas: &[f64],
    report: &mut Report,
) -> Result<String, Error> {
    // rocBLAS reads the file only from 3.1 (ROCm 5.7) on; an older build ignores the
    // variable without a word, so writing the file would only look like it worked.
    let needs = "ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH is read by rocBLAS 3.1 (ROCm 5.7) and later";
    if let Some(v) = p.version().filter(|v| !v.reads_gemm_override_file()) {
        return Err(Error::new(format!(
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
        report.dropped.push(format!("{}: {why}", key_text(&r.key)));
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

fn bench_text(p: &Picked, rank: usize, report: &mut Report) -> Result<String, Error> {
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
                key_text(&r.key)
            ));
            continue;
        };
        let time = r
            .time_ms
            .map_or(String::new(), |t| format!(", {t} ms when tuned"));
        out.push_str(&format!(
            "\n# {} -> {}{time}\n",
            key_text(&r.key),
            r.solution
        ));
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

/// The validator set for PyTorch: `--validators-from`, else the profile's own, then each
/// `--validator KEY=VALUE`.
fn pytorch_validators(a: &Args, own: &ResultsFile) -> Result<Vec<(String, String)>, Failure> {
    let mut set = match a.path("--validators-from") {
        Some(f) => read(&f)?.validators,
        None => own.validators.clone(),
    };
    for kv in a.values("--validator") {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| a.usage(format!("--validator takes KEY=VALUE, not '{kv}'")))?;
        match set.iter_mut().find(|(key, _)| key == k) {
            Some(e) => e.1 = v.to_string(),
            None => set.push((k.to_string(), v.to_string())),
        }
    }
    Ok(set)
}

fn tunableop_files(
    a: &Args,
    p: &Picked,
    report: &mut Report,
) -> Result<Vec<(usize, String)>, Failure> {
    let first = read(p.rank_file(p.ranks.first().map_or(0, |r| r.0))?)?;
    let validators = pytorch_validators(a, &first)?;
    let problems = pytorch::validator_problems(&validators);
    if !problems.is_empty() {
        return Err(Error::new(format!(
            "PyTorch discards a results file whose validators are not exactly its own: {}. Give --validators-from <a tunableop_results file PyTorch wrote on the target> or --validator KEY=VALUE",
            problems.join("; ")
        ))
        .into());
    }
    let theirs = validators
        .iter()
        .find(|(k, _)| k == "ROCBLAS_VERSION")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    if let Some(ours) = &p.rocblas {
        if !same_version(ours, &theirs) && !a.has("--force") {
            return Err(Error::new(format!(
                "the validators are for rocBLAS {theirs}, but profile '{}' was tuned on rocBLAS {ours} (build {}): its solution ids would be used with another build. Tune that build, or pass --force",
                p.name,
                p.short()
            ))
            .into());
        }
    }
    let mut files = Vec::new();
    for (rank, path) in &p.ranks {
        let e = pytorch::export(&read(path)?, &validators);
        if files.is_empty() {
            report.dropped = e.dropped.clone();
        }
        report.rows += e.rows;
        files.push((*rank, e.text));
    }
    Ok(files)
}

pub fn cmd(rest: &[String]) -> Result<(), Failure> {
    let a = Args::parse(
        "export",
        rest,
        &["--json", "--force"],
        &[
            "--lib",
            "--profile",
            "--profiles",
            "--format",
            "--out",
            "--rank",
            "--beta",
            "--validators-from",
            "--validator",
        ],
    )?;
    let root = crate::profile_store(&a);
    let format = a
        .value("--format")
        .ok_or_else(|| a.usage("needs --format gemm-tune, bench or tunableop"))?
        .to_string();
    let rank: usize = a.parsed("--rank", 0, "a rank number")?;
    let betas: Vec<f64> = a
        .value("--beta")
        .unwrap_or("0")
        .split(',')
        .map(|b| b.trim().parse::<f64>().ok().filter(|b| b.is_finite()))
        .collect::<Option<Vec<f64>>>()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| a.usage("--beta takes numbers like 0 or 0,1"))?;
    let out = a.path("--out");
    if a.has("--json") && out.is_none() {
        return Err(a
            .usage("--json prints a summary: give --out for the export itself")
            .into());
    }
    let p = pick(&a, &root)?;
    let mut report = Report {
        profile: p.name.clone(),
        build: p.sha256.clone(),
        format: format.clone(),
        ..Report::default()
    };
    match format.as_str() {
        "gemm-tune" | "bench" => {
            let text = if format == "bench" {
                bench_text(&p, rank, &mut report)?
            } else {
                gemm_tune_text(&p, rank, &betas, &mut report)?
            };
            match &out {
                Some(path) => {
                    write(path, &text)?;
                    report.files.push(path.clone());
                }
                None => print!("{text}"),
            }
        }
        "tunableop" => {
            let files = tunableop_files(&a, &p, &mut report)?;
            match &out {
                None => {
                    let (_, text) = files.iter().find(|(r, _)| *r == rank).ok_or_else(|| {
                        Error::new(format!("profile '{}' has no rank {rank} file", p.name))
                    })?;
                    print!("{text}");
                }
                Some(path) if path.extension().is_some_and(|e| e == "csv") => {
                    let (_, text) = files.iter().find(|(r, _)| *r == rank).ok_or_else(|| {
                        Error::new(format!("profile '{}' has no rank {rank} file", p.name))
                    })?;
                    write(path, text)?;
                    report.files.push(path.clone());
                }
                Some(dir) => {
                    for (r, text) in &files {
                        let f = dir.join(format!("tunableop_results{r}.csv"));
                        write(&f, text)?;
                        report.files.push(f);
                    }
                }
            }
        }
        other => {
            return Err(a
                .usage(format!(
                    "--format takes gemm-tune, bench or tunableop, not '{other}'"
                ))
                .into())
        }
    }
    if a.has("--json") {
        crate::print_json(&report);
    } else {
        let dest = if report.files.is_empty() {
            "stdout".to_string()
        } else {
            report
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        eprintln!(
            "tunedblas: exported {} rows of profile '{}' (build {}) as {format} to {dest}",
            report.rows,
            p.name,
            p.short()
        );
        if let Some(first) = report.dropped.first() {
            eprintln!(
                "tunedblas: {} rows have no {format} form; the first: {first}",
                report.dropped.len()
            );
        }
    }
    Ok(())
}
