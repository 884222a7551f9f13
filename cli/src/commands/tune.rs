//! `tunedblas tune`: recorded shapes into the profile of exactly one library build, for
//! every library: each shape is tuned with the library it was recorded from.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tunedblas_tuner::backends::{self, Kind, Library, Opened, Spec};
use tunedblas_tuner::campaign;

use crate::args::{self, Args};
use crate::curate;
use crate::error::{Error, Result};

use super::print_json;

const ABOUT: &str = "\
Tunes recorded shapes with the library each came from (rocBLAS, hipBLASLt or cuBLASLt) and
writes the profile of exactly that library build (hashed: the profile is for that file): one
results file per rank, provenance.json, profiles.json. Per shape, for every library: the
candidates the library lists are screened with short probes within a time budget and the
fastest few go on; their numerics are checked against a high-precision reference; after a
warm-up, heuristic, current row and candidates are timed in interleaved trials with the
device resting between samples, and curated; an adoption must hold in a second set of trials
and again in a fresh process, and pass numerics on every device:
";

const INPUTS: &str = "\
INPUT: miss-log folders (TUNEDBLAS_MISS_DIR), PyTorch untuned files, TunableOp results
files (their shapes only: ids are never reused), rocBLAS bench logs (ROCBLAS_LAYER=2) and
profile logs (ROCBLAS_LAYER=4; both give call counts), rocblas-gemm-tune CSV; files or
folders (*.csv, *.log, *.txt, *.yaml). The format of each file is told by its content; the
library of a miss file by its name (<process>-cublaslt-rank0.csv is cuBLASLt's, an untagged
one rocBLAS's). With no INPUT, no --shape and no --retune: the miss folder the interposer
writes ($TUNEDBLAS_MISS_DIR, else ~/.cache/tunedblas/misses), as `tunedblas misses` reads it.
Shapes of the inputs that the build's profile has rows for already (tuned since they were
recorded) are not tuned again: --retune measures every row again, --shape names one. When
that leaves nothing to tune, tune says so and exits 0: coverage is complete.
LIBRARY: --lib names the library file (repeat it for several libraries; each is told by the
entry point it exports); a library without one is loaded by its usual names
($TUNEDBLAS_CUBLASLT, $TUNEDBLAS_HIPBLASLT, libcublasLt.so.13 ...; rocBLAS needs --lib).";

const AFTER: &str = "\
An interrupted campaign resumes: run the same command again (killed, stopped by a closed
output pipe, `| head`, or a shape that could not be tuned: exit 1, the rows of the others
written), also with more shapes (a miss folder that grew: the new ones are added). While one
is unfinished, a tune without some of its shapes refuses and prints the command that
finishes it; --fresh discards it. SIGINT, SIGTERM and SIGHUP wait for a commit under way.
-q: no progress and no per-shape lines.

EXAMPLES:
    tunedblas tune --lib /opt/rocm/lib/librocblas.so.5 ~/.cache/tunedblas/misses
    tunedblas tune --lib librocblas.so.5 --shape f16:TN:5120:512:5120 --devices 0,1,2,3
    tunedblas tune --lib libcublasLt.so.13 --budget 60          # the miss folder's cuBLASLt shapes
    tunedblas tune --lib libhipblaslt.so.1 --workspace 33554432 misses/
    tunedblas tune --lib librocblas.so.5 --retune --shard 0/2   # on machine A; 1/2 on B
";

/// What the command does, with the curation rules as the code applies them.
fn about() -> String {
    format!(
        "{ABOUT}{}\n{INPUTS}",
        curate::Rules::default()
            .describe()
            .iter()
            .map(|r| format!("  - {r}\n"))
            .collect::<String>()
    )
}

const OPTIONS: &str = "\
INPUT...           files or folders of recorded shapes (see INPUT above)
--lib LIB          a library to tune with: librocblas.so, libhipblaslt.so or libcublasLt.so (repeatable)
--shape SPEC       an explicit shape: TYPE:AB:M:N:K[:BATCH] for rocBLAS (f16:TN:4096:256:4096), N,M,K (F.linear out, tokens, in; bf16) for the Lt libraries (repeatable)
--retune           also re-tune every row the build's profile already has
--profiles
--name NAME        profile name for a build that has none (default <library>-<version>)
--arch ARCH        GPU architecture to record where the runtime cannot say, e.g. gfx942
--devices 0,1,2,3  tune in parallel, one worker per device (default 0)
--shard I/N|auto   tune only every N-th shape starting at I (join with `merge`); auto: I and N from JOB_COMPLETION_INDEX/JOB_COMPLETIONS (Kubernetes) or SLURM_ARRAY_TASK_ID/_COUNT (Slurm)
--ranks N          results files to write (default: one per device)
--fresh            discard an unfinished campaign this command cannot resume (one with shapes it lacks)
--no-limits        do not measure the devices' limits
--json             print the result as JSON (progress stays on stderr)
";

pub fn cli() -> clap::Command {
    let c = args::command("tune", about(), AFTER).args(args::table(OPTIONS));
    args::method_options(args::library_options(c))
}

pub fn run(a: &Args) -> Result<()> {
    let opts = campaign::Options {
        profiles: a.profile_store(),
        name: a.value("--name").map(str::to_string),
        devices: a.devices()?,
        shard: a.shard()?,
        discard: a.has("--fresh"),
        ranks: a
            .value("--ranks")
            .map(|_| a.parsed("--ranks", 1usize, "a count"))
            .transpose()?,
        retune: a.has("--retune"),
        limits: !a.has("--no-limits"),
        method: a.method()?,
        rules: a.rules()?,
        json: a.has("--json"),
        quiet: crate::say::quiet(),
    };
    for s in a.values("--shape") {
        backends::check_spec_any(s).map_err(|e| a.usage(e))?;
    }
    let libs: BTreeMap<Kind, PathBuf> = a
        .values("--lib")
        .iter()
        .map(|l| {
            let path = crate::env::find_library(std::path::Path::new(l));
            backends::kind_of(&path).map(|k| (k, path))
        })
        .collect::<Result<_>>()?;
    let mut inputs: Vec<PathBuf> = a.positional.iter().map(PathBuf::from).collect();
    let specs = a.values("--shape");
    // Nothing named: the shapes the interposer recorded, where it records them.
    if inputs.is_empty() && specs.is_empty() && !opts.retune {
        let dir = tunedblas_core::settings::miss_dir();
        if dir.is_dir() {
            if !opts.quiet && !opts.json {
                println!(
                    "no inputs named: tuning the misses recorded in {}",
                    dir.display()
                );
            }
            inputs.push(dir);
        }
    }
    let groups = crate::shapes::by_library(&inputs, &libs)?;
    // --shape and --retune go to the one library named (or the only one recorded).
    let only = match (libs.keys().next(), groups.keys().next()) {
        (Some(k), _) if libs.len() == 1 => Some(*k),
        (None, Some(k)) if groups.len() == 1 => Some(*k),
        _ => None,
    };
    let mut work: BTreeMap<Kind, Vec<PathBuf>> = groups;
    if !specs.is_empty() || opts.retune {
        let kind = only.ok_or_else(|| {
            a.usage(
                "--shape and --retune need one --lib (the library whose shapes or rows they name)",
            )
        })?;
        for s in &specs {
            backends::check_spec(kind, s).map_err(|e| a.usage(e))?;
        }
        work.entry(kind).or_default();
    }
    if work.is_empty() {
        return Err(Error::failed(
            "no shapes to tune: give miss logs, untuned or results files, --shape, or --retune (with none, the miss folder $TUNEDBLAS_MISS_DIR or ~/.cache/tunedblas/misses is read)",
        ));
    }
    let mut failure = None;
    // With one library its error is the command's own, said once by `main`.
    let several = work.len() > 1;
    for kind in work.keys() {
        a.method_for(*kind)?;
    }
    for (kind, files) in work {
        let spec = Spec {
            lib: libs.get(&kind).cloned(),
            ..a.spec()
        };
        let specs: Vec<&str> = if Some(kind) == only {
            specs.clone()
        } else {
            vec![]
        };
        let opts = campaign::Options {
            method: a.method_for(kind)?,
            ..opts.clone()
        };
        let opened = Opened::open(kind, &spec)?;
        let result =
            tunedblas_tuner::with_library!(&opened, l => campaign_of(l, &files, &specs, &opts));
        if let Err(e) = result {
            if several {
                eprintln!("tunedblas tune: {}: {}", kind.name(), e.message);
            }
            failure = Some(e);
        }
    }
    failure.map_or(Ok(()), Err)
}

/// Runs one library's campaign on the shapes of `files` and `specs`, and prints its JSON
/// where asked.
fn campaign_of<L: Library>(
    l: &L,
    files: &[PathBuf],
    specs: &[&str],
    opts: &campaign::Options,
) -> Result<()>
where
    L::Key: crate::shapes::Reads,
{
    let inputs = crate::shapes::inputs(l, files, specs, opts)?;
    let summary = campaign::run(l, inputs, opts)?;
    if opts.json {
        print_json(&summary);
    }
    Ok(())
}
