//! `tunedblas tune`: recorded shapes into the profile of exactly one library build.

use std::path::PathBuf;

use crate::args::{self, Args};
use crate::campaign;
use crate::curate;
use crate::error::Result;
use crate::tune;

use super::print_json;

const ABOUT: &str = "\
Tunes shapes for the rocBLAS build at LIBROCBLAS (hashed: the profile is for exactly that
file) and writes its profile: one results file per rank, provenance.json, profiles.json.
Per shape: every solution rocBLAS offers for it is probed, hopeless ones are pruned, the
rest timed; then heuristic, current row and new best are re-timed interleaved and curated:
";

const INPUTS: &str = "\
INPUT: miss-log folders (TUNEDBLAS_MISS_DIR), PyTorch untuned files, TunableOp results
files (their shapes only: ids are never reused), rocBLAS bench logs (ROCBLAS_LAYER=2) and
profile logs (ROCBLAS_LAYER=4; both give call counts), rocblas-gemm-tune CSV; files or
folders (*.csv, *.log, *.txt, *.yaml). The format of each file is told by its content.
With no INPUT, no --shape and no --retune: the miss folder the interposer writes
($TUNEDBLAS_MISS_DIR, else ~/.cache/tunedblas/misses), as `tunedblas misses` reads it.
Shapes of the inputs that the build's profile has rows for already (tuned since they were
recorded) are not tuned again: --retune measures every row again, --shape names one. When
that leaves nothing to tune, tune says so and exits 0: coverage is complete.";

const AFTER: &str = "\
An interrupted campaign resumes: run the same command again (killed, or stopped by a closed
output pipe, `| head`, which ends it at once and quietly). While one is unfinished, a tune
of other shapes refuses and prints the command that finishes it; --fresh discards it.
-q (every command takes it): no progress and no per-shape lines, the qualification and the
counts only.

EXAMPLES:
    tunedblas tune --lib /opt/rocm/lib/librocblas.so.5 ~/.cache/tunedblas/misses
    tunedblas tune --lib librocblas.so.5 --shape f16:TN:5120:512:5120 --devices 0,1,2,3
    ROCBLAS_LAYER=6 ROCBLAS_LOG_BENCH_PATH=$PWD/bench.log ROCBLAS_LOG_PROFILE_PATH=$PWD/prof.yaml <server>
    tunedblas tune --lib librocblas.so.5 bench.log prof.yaml
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

fn cli() -> clap::Command {
    use args::{option, switch};
    args::command("tune", about(), AFTER)
        .arg(args::positionals(
            "INPUT",
            usize::MAX,
            "files or folders of recorded shapes (see INPUT above)",
        ))
        .arg(args::lib_option("the rocBLAS build to tune (required)"))
        .arg(
            option(
                "--shape",
                "TYPE:AB:M:N:K[:BATCH]",
                "an explicit shape, e.g. f16:TN:4096:256:4096 (repeatable)",
            )
            // A malformed shape is a mistake on the command line, as a malformed --trials is.
            .value_parser(|spec: &str| {
                crate::shapes::parse_spec(spec)
                    .map(|_| spec.to_string())
                    .map_err(|e| e.message)
            }),
        )
        .arg(switch("--retune", "also re-tune every row the build's profile already has"))
        .arg(args::profiles_option())
        .arg(option(
            "--name",
            "NAME",
            "profile name for a build that has none (default rocblas-<version>)",
        ))
        .arg(option("--arch", "ARCH", "GPU architecture to record, e.g. gfx1030"))
        .arg(option("--hip", "PATH", "libamdhip64.so when it is not found by name"))
        .arg(option(
            "--devices",
            "0,1,2,3",
            "tune in parallel, one worker per device (default 0)",
        ))
        .arg(option(
            "--shard",
            "I/N|auto",
            "tune only every N-th shape starting at I (join with `merge`); auto: I and N from JOB_COMPLETION_INDEX/JOB_COMPLETIONS (Kubernetes) or SLURM_ARRAY_TASK_ID/_COUNT (Slurm)",
        ))
        .arg(option(
            "--trials",
            "N",
            "interleaved rounds (default 7; twice that for launch-bound shapes, timed as many back-to-back calls)",
        ))
        .arg(option(
            "--max-trials",
            "N",
            "extend up to N rounds while undecidable (default 21)",
        ))
        .arg(option(
            "--margin",
            "PCT",
            "adoption margin in percent (default 3; 1 or more, or 0)",
        ))
        .arg(switch(
            "--no-default-rows",
            "write no row when nothing beats the heuristic",
        ))
        .arg(option(
            "--prune",
            "X",
            "prune candidates slower than X times the best probe (default 1.5)",
        ))
        .arg(option(
            "--rotate-mib",
            "N",
            "operand bytes each timed sample rotates through (default 512)",
        ))
        .arg(option(
            "--timing",
            "MODE",
            "events (default): a sample is back-to-back calls between two events; graph: the sample's calls are captured once into a HIP graph (hipStreamBeginCapture) and replayed between two events, with no launch gaps between calls; falls back to events, said once per shape, where capture fails (not yet measured on an AMD GPU); one device per campaign",
        ).value_parser(["events", "graph"]))
        .arg(option(
            "--rest",
            "R",
            "after each timed sample, leave the device idle for R times the sample's device time, at most a second (default 0: back to back; R at most 10). On an H200 back-to-back compute-heavy GEMMs ran into the power cap and spread up to 9%, resting 1x kept them at most 1% (`tunedblas lt` rests 1x by default); not measured on an AMD GPU",
        ))
        .arg(option("--ranks", "N", "results files to write (default: one per device)"))
        .arg(switch("--fresh", "discard an unfinished campaign with other shapes"))
        .arg(switch("--json", "print the result as JSON (progress stays on stderr)"))
        .arg(option(
            "--noisy",
            "PCT",
            "a shape whose spread is over PCT% (50) is undecidable, not Default: no row is written, so it comes back as a miss",
        ))
}

pub fn help() -> String {
    args::help_text(cli())
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::of_declared("tune", cli(), args)?;
    let defaults = tune::Method::default();
    let trials = a.parsed("--trials", defaults.trials, "a number of rounds")?;
    let method = tune::Method {
        trials,
        max_trials: a.parsed(
            "--max-trials",
            defaults.max_trials.max(trials),
            "a number of rounds",
        )?,
        prune: a.parsed("--prune", defaults.prune, "a factor like 1.5")?,
        rotate_bytes: a.parsed::<usize>("--rotate-mib", defaults.rotate_bytes >> 20, "MiB")? << 20,
        graph: match a.value("--timing") {
            None | Some("events") => false,
            Some("graph") => true,
            Some(o) => return Err(a.usage(format!("--timing takes events or graph, not '{o}'"))),
        },
        rest: crate::rest::checked(a.parsed("--rest", defaults.rest, "a multiple like 1")?)
            .map_err(|e| a.usage(e))?,
        ..defaults
    };
    if method.trials == 0 || method.prune < 1.0 {
        return Err(a.usage("--trials must be positive and --prune at least 1"));
    }
    let margin = a.margin(3.0)?;
    let noisy: f64 = a.parsed("--noisy", 50.0, "a percentage like 50")?;
    if noisy <= 0.0 {
        return Err(a.usage("--noisy takes a positive percentage"));
    }
    let opts = campaign::Options {
        lib: a.lib()?,
        hip: a.path("--hip"),
        profiles: a.profile_store(),
        name: a.value("--name").map(str::to_string),
        arch: a.value("--arch").map(str::to_string),
        inputs: a.positional.iter().map(PathBuf::from).collect(),
        specs: a
            .values("--shape")
            .into_iter()
            .map(str::to_string)
            .collect(),
        retune: a.has("--retune"),
        devices: a.devices()?,
        shard: a.shard()?,
        fresh: a.has("--fresh"),
        ranks: a
            .value("--ranks")
            .map(|_| a.parsed("--ranks", 1usize, "a count"))
            .transpose()?,
        method,
        rules: curate::Rules {
            margin,
            keep_default: !a.has("--no-default-rows"),
            noisy: noisy / 100.0,
        },
        json: a.has("--json"),
        quiet: crate::say::quiet(),
    };
    // In ROCm's HIP a hipMemcpy or hipMalloc on any thread invalidates every capture in
    // the process, so one worker's uploads would break another's graphs.
    if opts.method.graph && opts.devices.len() > 1 {
        return Err(a.usage(
            "--timing graph tunes one device per campaign (another worker's copies would break its captures): \
             run one campaign per device, each with --shard, and join them with `tunedblas merge`",
        ));
    }
    let summary = campaign::run(&opts)?;
    if opts.json {
        print_json(&summary);
    }
    Ok(())
}
