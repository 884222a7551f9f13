//! `tunedblas export`: a profile in the formats other tools read.

use std::path::Path;

use crate::args::{self, Args};
use crate::error::{Error, Result};
use crate::export;

use super::print_json;

const ABOUT: &str = "\
Writes the profile of the build at LIBROCBLAS (matched by sha256) in another tool's format:
  gemm-tune   a rocblas-gemm-tune CSV for ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH, for hosts where
              LD_PRELOAD is not allowed. Valid ONLY for that build (its comment lines say
              which): rocBLAS does not check. Tensile matches beta exactly (--beta 0,1 writes
              both); rows with flags, ldd != ldc, mixed c/d types or Default have no form.
  bench       rocblas-bench command lines: each row, then the heuristic on the same problem,
              to check a row with AMD's own tool.
  tunableop   PyTorch TunableOp results files PyTorch accepts unchanged: one per rank
              (--out DIR), or one rank (--out FILE.csv, or stdout; --rank N). PyTorch drops a
              file whose validators differ from its own in any key or value, so they come
              from --validators-from FILE (a tunableop_results file PyTorch wrote on the
              target) and --validator KEY=VALUE. Extension rows are left out; PyTorch < 2.7
              gets its older signature form.";

const AFTER: &str = "\
EXAMPLES:
    tunedblas export --lib /opt/rocm/lib/librocblas.so.4 --format gemm-tune --out override.csv
    ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH=$PWD/override.csv python serve.py
    tunedblas export --lib librocblas.so.5 --format bench --out check.sh
    tunedblas export --lib $TORCH/lib/librocblas.so --format tunableop \\
        --validators-from old/tunableop_results0.csv --out ./tunableop
";

const OPTIONS: &str = "\
--lib LIB               the rocBLAS build whose profile is exported
--profile NAME          the profile to export, by name (instead of --lib)
--profiles
--format FORMAT         gemm-tune, bench, tunableop, hipblaslt-override, hipblaslt-bench or aiter (required)
--git-version REV       (hipblaslt-override) the hipBLASLt revision the rows were tuned on
--arch GFX:CUS          (aiter) the device the rows were tuned on, like gfx942:304
--out PATH              where to write (default stdout)
--rank N                the rank file to export (default 0)
--beta B,..             (gemm-tune) the betas to write rows for (default 0)
--validators-from FILE  (tunableop) a tunableop_results file PyTorch wrote on the target
--validator KEY=VALUE   (tunableop) a validator to write (repeatable)
--force                 export for PyTorch validators that name another rocBLAS version
--overwrite             (tunableop) replace results files already at --out (refused otherwise)
--json                  a summary of the export as JSON (with --out)
";

pub fn cli() -> clap::Command {
    args::command("export", ABOUT, AFTER).args(args::table(OPTIONS))
}

/// `--validators-from`, `--validator KEY=VALUE`... and `--force`.
fn validators(a: &Args) -> Result<export::Validators> {
    let mut set = Vec::new();
    for kv in a.values("--validator") {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| a.usage(format!("--validator takes KEY=VALUE, not '{kv}'")))?;
        set.push((k.to_string(), v.to_string()));
    }
    Ok(export::Validators {
        from: a.path("--validators-from"),
        set,
        force: a.has("--force"),
    })
}

/// `text` of `rows` rows to `out`, else to stdout.
fn emit(out: Option<&Path>, text: &str, rows: usize, report: &mut export::Report) -> Result<()> {
    match out {
        Some(path) => {
            export::write(path, text)?;
            report.wrote(path, rows);
        }
        None => {
            print!("{text}");
            report.rows += rows;
        }
    }
    Ok(())
}

pub fn run(a: &Args) -> Result<()> {
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
        return Err(a.usage("--json prints a summary: give --out for the export itself"));
    }
    let p = a.picked()?;
    match format.as_str() {
        // PyTorch's TunableOp files name rocBLAS (and hipBLASLt index) solutions; a
        // cuBLASLt configuration has no form there.
        "gemm-tune" | "bench" | "tunableop" => {
            p.expect_library("rocblas", &format!("--format {format}"))?
        }
        "hipblaslt-override" | "hipblaslt-bench" | "aiter" => {
            p.expect_library("hipblaslt", &format!("--format {format}"))?
        }
        _ => {}
    }
    let mut report = export::Report {
        profile: p.name.clone(),
        build: p.sha256.clone(),
        format: format.clone(),
        ..export::Report::default()
    };
    match format.as_str() {
        "gemm-tune" | "bench" => {
            let text = if format == "bench" {
                export::bench_text(&p, rank, &mut report)?
            } else {
                export::gemm_tune_text(&p, rank, &betas, &mut report)?
            };
            // The text fns count the rows.
            emit(out.as_deref(), &text, 0, &mut report)?;
        }
        "tunableop" => {
            let files = export::tunableop_files(&validators(a)?, &p, &mut report)?;
            let of_rank = || {
                files.iter().find(|f| f.rank == rank).ok_or_else(|| {
                    Error::failed(format!("profile '{}' has no rank {rank} file", p.name))
                })
            };
            // A results file already there is most likely PyTorch's own (the folder
            // --validators-from read): it is replaced only when asked, before anything is
            // written.
            let targets: Vec<_> = match &out {
                Some(dir) if dir.extension().is_none_or(|e| e != "csv") => files
                    .iter()
                    .map(|f| dir.join(format!("tunableop_results{}.csv", f.rank)))
                    .collect(),
                Some(file) => vec![file.clone()],
                None => vec![],
            };
            if let Some(there) = targets.iter().find(|t| t.exists()) {
                if !a.has("--overwrite") {
                    return Err(Error::failed(format!(
                        "{} exists (PyTorch's own results?): give another --out, or --overwrite to replace it",
                        there.display()
                    )));
                }
            }
            match &out {
                Some(dir) if dir.extension().is_none_or(|e| e != "csv") => {
                    for (f, file) in files.iter().zip(&targets) {
                        export::write(file, &f.text)?;
                        report.wrote(file, f.rows);
                    }
                }
                _ => {
                    let f = of_rank()?;
                    emit(out.as_deref(), &f.text, f.rows, &mut report)?;
                }
            }
        }
        "hipblaslt-override" | "hipblaslt-bench" | "aiter" => {
            // `--arch gfx942:304`, read as `profiles adopt` reads it.
            let device = crate::adopt::device(a.value("--arch")).map_err(|e| a.usage(e))?;
            let (text, rows) = export::lt_text(&p, rank, &format, a.value("--git-version"), device, &mut report)?;
            emit(out.as_deref(), &text, rows, &mut report)?;
        }
        other => {
            return Err(a.usage(format!(
                "--format takes gemm-tune, bench, tunableop, hipblaslt-override, hipblaslt-bench or aiter, not '{other}'"
            )))
        }
    }
    if a.has("--json") {
        print_json(&report);
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
        crate::say::note!(
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
