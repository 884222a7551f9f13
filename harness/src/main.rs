//! `tunedblas`: the companion harness of `libtunedblas.so`. A thin dispatcher: each
//! subcommand lives in its own module.

mod backend;
mod campaign;
mod cli;
mod coverage;
mod curate;
mod demo;
mod env;
mod export;
mod misses;
mod nearbench;
mod png;
mod profiles;
mod progress;
mod qualify;
mod report;
mod shapes;
mod store;
mod style;
mod tune;
mod verify;
mod workload;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cli::{Args, Usage};

const HELP: &str = "\
tunedblas - serve the fastest rocBLAS GEMM solution for every shape an inference server runs

USAGE:
    tunedblas demo [--dir DIR] [--passes N]
        The whole loop on the built-in CPU reference rocBLAS (refblas): a simulated
        inference workload runs under LD_PRELOAD=libtunedblas.so, its missed shapes are
        tuned, qualified and verified, and the workload runs again, served.

    tunedblas tune --lib LIBROCBLAS [INPUT...] [--shape SPEC]... [options]
        Tune recorded shapes into the profile of exactly that library build.
    tunedblas qualify --lib LIBROCBLAS [--profiles DIR] [--json]
        Check every row's numerics on every device; remove the rows that fail.
    tunedblas verify --lib LIBROCBLAS [--profiles DIR] [--json]
        Replay every row under the preload; exit 1 unless every row is hit.
    tunedblas profiles list|show NAME|which LIBROCBLAS|import --lib LIBROCBLAS FILE...
        Inspect the profile store and see which profile a library would get.
    tunedblas merge --lib LIBROCBLAS [--profiles DIR] SHARD_STORE...
        Join the profiles that `tune --shard i/n` wrote on several machines.

    tunedblas coverage [--config PATH|--shapes FILE] [--profile DIR|NAME] [vLLM flags]
        Predict the GEMM problems a serving configuration runs; check them against a profile.

    tunedblas misses [DIR|FILE ...] [--top N] [--json] [--out FILE]
        Add up the miss logs of every process and rank; rank the gaps by calls x FLOPs.

    tunedblas export --lib LIBROCBLAS --format gemm-tune|bench|tunableop [--out PATH]
        The profile as a ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH file, rocblas-bench lines, or
        TunableOp files PyTorch accepts unchanged.

    tunedblas report --lib LIBROCBLAS [--out FILE.html] [--png FILE.png]
        A self-contained HTML page and a PNG: coverage map and speedups of the profile.

    tunedblas env [--lib LIBROCBLAS] [--snippet vllm|systemd|docker] [--json]
        Effective settings, the profile each rocBLAS here would get, deployment snippets.

    tunedblas help [SUBCOMMAND]
        This text, or a subcommand's options and examples.

PROFILE STORE:
    --profiles DIR, else $TUNEDBLAS_PROFILE_DIR, else the store the installed interposer
    reads (share/tunedblas/profiles beside it, or profiles/ in a source checkout).

EXIT CODES:
    0 success; 1 the work failed (the message says why; verify: a row was not hit);
    2 bad command line; 3 the library cannot be loaded or is not rocBLAS; 4 no usable device
    (coverage --strict: 3 some shapes are missing, 4 only unservable ones remain)
";

const HELP_TUNE: &str = "\
tunedblas tune --lib LIBROCBLAS [INPUT...] [--shape SPEC]... [options]

Tunes shapes for the rocBLAS build at LIBROCBLAS (hashed: the profile is for exactly that
file) and writes its profile: one results file per rank, provenance.json, profiles.json.
Per shape: every solution rocBLAS offers for it is probed, hopeless ones are pruned, the
rest timed; then heuristic, current row and new best are re-timed interleaved and curated:
";

const HELP_TUNE_OPTIONS: &str = "
INPUT: miss-log folders (TUNEDBLAS_MISS_DIR), PyTorch untuned files, TunableOp results
files (their shapes only: ids are never reused), rocBLAS bench logs (ROCBLAS_LAYER=2) and
profile logs (ROCBLAS_LAYER=4; both give call counts), rocblas-gemm-tune CSV; files or
folders (*.csv, *.log, *.txt, *.yaml). The format of each file is told by its content.

OPTIONS:
    --shape TYPE:AB:M:N:K[:BATCH]  an explicit shape, e.g. f16:TN:4096:256:4096 (repeatable)
    --retune              also re-tune every row the build's profile already has
    --profiles DIR        the profile store (see `tunedblas help`)
    --name NAME           profile name for a build that has none (default rocblas-<version>)
    --arch ARCH           GPU architecture to record, e.g. gfx1030
    --hip PATH            libamdhip64.so when it is not found by name
    --devices 0,1,2,3     tune in parallel, one worker per device (default 0)
    --shard I/N           tune only every N-th shape starting at I (join with `merge`)
    --trials N            interleaved rounds (default 7; twice that for launch-bound shapes,
                          timed as many back-to-back calls); --max-trials N: extend up to
                          N rounds while undecidable (default 21)
    --margin PCT          adoption margin in percent (default 3)
    --no-default-rows     write no row when nothing beats the heuristic
    --prune X             prune candidates slower than X times the best probe (default 1.5)
    --rotate-mib N        operand bytes each timed sample rotates through (default 512)
    --ranks N             results files to write (default: one per device)
    --fresh               discard an unfinished campaign with other shapes
    --json                print the result as JSON (progress stays on stderr)

An interrupted campaign resumes: run the same command again.

EXAMPLES:
    tunedblas tune --lib /opt/rocm/lib/librocblas.so.5 ~/.cache/tunedblas/misses
    tunedblas tune --lib librocblas.so.5 --shape f16:TN:5120:512:5120 --devices 0,1,2,3
    ROCBLAS_LAYER=6 ROCBLAS_LOG_BENCH_PATH=$PWD/bench.log ROCBLAS_LOG_PROFILE_PATH=$PWD/prof.yaml <server>
    tunedblas tune --lib librocblas.so.5 bench.log prof.yaml
    tunedblas tune --lib librocblas.so.5 --retune --shard 0/2   # on machine A; 1/2 on B
";

const HELP_DEMO: &str = "\
tunedblas demo [--dir DIR] [--passes N]

The whole loop on the built-in CPU reference rocBLAS (refblas), in under two minutes:
  1. a simulated inference workload (decode steps, MTP verify, 256/512-token prefill chunks,
     chunk + decode mixes over 7 linear layers) runs under LD_PRELOAD=libtunedblas.so with
     no profile: every shape is recorded as a miss;
  2. `tune` tunes the recorded shapes and qualifies the adoptions on every device;
  3. `verify` replays every row under the preload;
  4. the workload runs again, served; hit rate and GEMM time before and after are printed
     side by side.
DIR keeps every file (profiles, miss logs, stats; default a fresh temporary folder); N is
the workload's passes (default 3).

EXAMPLES:
    tunedblas demo
    tunedblas demo --dir /tmp/tb-demo --passes 5
";

const HELP_QUALIFY: &str = "\
tunedblas qualify --lib LIBROCBLAS [--profiles DIR] [--json]

Runs every rocBLAS row of the build's profile on every device and compares D with a
reference computed in f64 on the same inputs: half types need relative L2 < 0.002 and
allclose(atol = rtol = 0.01); f32 and f64 tighter. Failing rows are removed from every
rank file, with the reason printed and recorded in provenance.json.

EXAMPLE:
    tunedblas qualify --lib /opt/rocm/lib/librocblas.so.5
";

const HELP_VERIFY: &str = "\
tunedblas verify --lib LIBROCBLAS [--profiles DIR] [--preload LIBTUNEDBLAS] [--json]

Replays every row of the build's profile, on every device, in a child process running
under LD_PRELOAD=libtunedblas.so, and reads the interposer's own counters: it exits 0 only
when rows hit = rows, with no missed call and no fallback.

EXAMPLE:
    tunedblas verify --lib /opt/rocm/lib/librocblas.so.5
";

const HELP_PROFILES: &str = "\
tunedblas profiles list [--profiles DIR] [--json]
    Every profile: name, build, rocBLAS version, rows, status.
tunedblas profiles show NAME [--profiles DIR] [--json]
    One profile: registry entry, rank files, campaigns from provenance.json.
tunedblas profiles which LIBROCBLAS [--profiles DIR] [--json]
    The profile a process loading that file would get, and why (the interposer's rule).
tunedblas profiles import --lib LIBROCBLAS FILE... [--profiles DIR]
    Adds the shapes of other builds' results files to this build's shape list (ids are
    never reused); `tune --retune` then tunes them.

EXAMPLES:
    tunedblas profiles which /opt/rocm/lib/librocblas.so.5
    tunedblas profiles import --lib librocblas.so.5 old-build/tunableop_results0.csv
";

const HELP_MERGE: &str = "\
tunedblas merge --lib LIBROCBLAS [--profiles DIR] SHARD_STORE...

Joins campaigns run with `tune --shard I/N` on several machines: each SHARD_STORE is the
profile store a shard wrote. Their profiles must be for the build at LIBROCBLAS; rows are
combined into this store's profile and every shard's campaign is recorded.

EXAMPLE:
    tunedblas merge --lib librocblas.so.5 shard0/profiles shard1/profiles
";

const HELP_EXPORT: &str = "\
tunedblas export (--lib LIBROCBLAS | --profile NAME) --format FORMAT [--out PATH] [options]

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
              gets its older signature form.

OPTIONS:
    --profiles DIR   the profile store (see `tunedblas help`)
    --out PATH       where to write (default stdout); --json prints a summary of it
    --rank N         the rank file to export (default 0)
    --force          export for PyTorch validators that name another rocBLAS version

EXAMPLES:
    tunedblas export --lib /opt/rocm/lib/librocblas.so.4 --format gemm-tune --out override.csv
    ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH=$PWD/override.csv python serve.py
    tunedblas export --lib librocblas.so.5 --format bench --out check.sh
    tunedblas export --lib $TORCH/lib/librocblas.so --format tunableop \\
        --validators-from old/tunableop_results0.csv --out ./tunableop
";

const HELP_REPORT: &str = "\
tunedblas report (--lib LIBROCBLAS | --profile NAME) [--out FILE.html] [--png FILE.png] [options]

Writes a self-contained HTML page (inline SVG and CSS; it loads nothing from the network)
and the same figures as a PNG, for terminals and issues:
  - a coverage map: one row per (N, K) layer shape, one column per token count M seen in
    the profile or the recorded misses; each cell tuned (a rocBLAS solution row or a
    matching `*` row), Default (the heuristic was best), near (no row, but the layer's
    nearest row within TUNEDBLAS_NEAR tokens is tried) or missing;
  - a speedup bar per tuned shape: heuristic time over served time, from the latest
    campaign in provenance.json that measured it.

OPTIONS:
    --profiles DIR   the profile store (see `tunedblas help`)
    --out FILE.html  default tunedblas-report-<profile>.html
    --png FILE.png   default: the HTML file's name with .png; --no-png for none
    --misses DIR     miss logs (or any tune input) whose shapes count as missing cells
    --rank N         the rank file to show (default 0)
    --json           the figures as JSON on stdout

EXAMPLE:
    tunedblas report --lib /opt/rocm/lib/librocblas.so.5 --misses ~/.cache/tunedblas/misses
";

const HELP_ENV: &str = "\
tunedblas env [--lib LIBROCBLAS]... [--profiles DIR] [--snippet vllm|systemd|docker] [--json]

Prints what the interposer would do here: where libtunedblas.so is, every TUNEDBLAS_*
setting with its effective value and whether it comes from the environment or the
default, and, for each rocBLAS found ($ROCM_PATH/lib, /opt/rocm/lib, LD_LIBRARY_PATH, or
--lib), the profile a process loading it would get and why. Then copy-paste snippets with
this installation's paths: a vLLM launcher script, a systemd unit and a Dockerfile.

EXAMPLES:
    tunedblas env
    tunedblas env --lib ~/venv/lib/python3.12/site-packages/torch/lib/librocblas.so
    tunedblas env --snippet vllm > vllm-tuned && chmod +x vllm-tuned
";

fn subcommand_help(cmd: &str) -> Option<String> {
    Some(match cmd {
        "tune" => format!(
            "{HELP_TUNE}{}{HELP_TUNE_OPTIONS}",
            curate::Rules::default()
                .describe()
                .iter()
                .map(|r| format!("  - {r}\n"))
                .collect::<String>()
        ),
        "qualify" => HELP_QUALIFY.into(),
        "verify" => HELP_VERIFY.into(),
        "profiles" => HELP_PROFILES.into(),
        "merge" => HELP_MERGE.into(),
        "coverage" => coverage::help(),
        "misses" => misses::HELP.into(),
        "export" => HELP_EXPORT.into(),
        "env" => HELP_ENV.into(),
        "report" => HELP_REPORT.into(),
        "demo" => HELP_DEMO.into(),
        _ => return None,
    })
}

/// The profile store: `--profiles`, `$TUNEDBLAS_PROFILE_DIR`, or the installed one.
fn profile_store(a: &Args) -> PathBuf {
    a.path("--profiles")
        .or_else(|| std::env::var_os("TUNEDBLAS_PROFILE_DIR").map(PathBuf::from))
        .unwrap_or_else(store::default_root)
}

fn lib_arg(a: &Args) -> Result<PathBuf, Usage> {
    a.path("--lib")
        .ok_or_else(|| a.usage("needs --lib <path to librocblas.so>"))
}

fn devices_arg(a: &Args) -> Result<Vec<i32>, Usage> {
    match a.value("--devices") {
        None => Ok(vec![]),
        Some(list) => list
            .split(',')
            .map(|d| d.trim().parse::<i32>().ok().filter(|d| *d >= 0))
            .collect::<Option<Vec<i32>>>()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| a.usage(format!("--devices takes a list like 0,1,2,3, not '{list}'"))),
    }
}

fn shard_arg(a: &Args) -> Result<Option<(usize, usize)>, Usage> {
    let Some(s) = a.value("--shard") else {
        return Ok(None);
    };
    s.split_once('/')
        .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .filter(|(i, n)| *n > 0 && i < n)
        .map(Some)
        .ok_or_else(|| {
            a.usage(format!(
                "--shard takes I/N with 0 <= I < N, like 0/4, not '{s}'"
            ))
        })
}

fn print_json<T: serde::Serialize>(v: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("plain serialisable data")
    );
}

enum Failure {
    Usage(Usage),
    Work(backend::Error),
}
impl From<Usage> for Failure {
    fn from(u: Usage) -> Self {
        Failure::Usage(u)
    }
}
impl From<backend::Error> for Failure {
    fn from(e: backend::Error) -> Self {
        Failure::Work(e)
    }
}

fn tune_cmd(rest: &[String]) -> Result<(), Failure> {
    let a = Args::parse(
        "tune",
        rest,
        &["--retune", "--no-default-rows", "--fresh", "--json"],
        &[
            "--lib",
            "--hip",
            "--profiles",
            "--name",
            "--arch",
            "--shape",
            "--devices",
            "--shard",
            "--trials",
            "--max-trials",
            "--margin",
            "--prune",
            "--rotate-mib",
            "--ranks",
        ],
    )?;
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
        ..defaults
    };
    if method.trials == 0 || method.prune < 1.0 {
        return Err(a
            .usage("--trials must be positive and --prune at least 1")
            .into());
    }
    let margin: f64 = a.parsed("--margin", 3.0, "a percentage like 3")?;
    if !(0.0..100.0).contains(&margin) {
        return Err(a.usage("--margin takes a percentage from 0 to 100").into());
    }
    let opts = campaign::Options {
        lib: lib_arg(&a)?,
        hip: a.path("--hip"),
        profiles: profile_store(&a),
        name: a.value("--name").map(str::to_string),
        arch: a.value("--arch").map(str::to_string),
        inputs: a.positional.iter().map(PathBuf::from).collect(),
        specs: a
            .values("--shape")
            .into_iter()
            .map(str::to_string)
            .collect(),
        retune: a.has("--retune"),
        devices: devices_arg(&a)?,
        shard: shard_arg(&a)?,
        fresh: a.has("--fresh"),
        ranks: a
            .value("--ranks")
            .map(|_| a.parsed("--ranks", 1usize, "a count"))
            .transpose()?,
        method,
        rules: curate::Rules {
            margin: margin / 100.0,
            keep_default: !a.has("--no-default-rows"),
        },
        json: a.has("--json"),
        quiet: false,
    };
    let summary = campaign::run(&opts)?;
    if opts.json {
        print_json(&summary);
    }
    Ok(())
}

fn qualify_cmd(rest: &[String]) -> Result<(), Failure> {
    let a = Args::parse(
        "qualify",
        rest,
        &["--json"],
        &["--lib", "--hip", "--profiles"],
    )?;
    let report = profiles::qualify_profile(
        &lib_arg(&a)?,
        a.path("--hip").as_deref(),
        &profile_store(&a),
        a.has("--json"),
    )?;
    if a.has("--json") {
        print_json(&report);
    }
    Ok(())
}

fn verify_cmd(rest: &[String]) -> Result<(), Failure> {
    let a = Args::parse(
        "verify",
        rest,
        &["--json"],
        &["--lib", "--profiles", "--preload"],
    )?;
    let report = verify::run(&verify::Options {
        lib: lib_arg(&a)?,
        profiles: profile_store(&a),
        preload: a.path("--preload"),
        json: a.has("--json"),
    })?;
    if a.has("--json") {
        print_json(&report);
    }
    if report.ok {
        Ok(())
    } else {
        Err(backend::Error::new(format!("verify failed: {}", report.problems.join("; "))).into())
    }
}

fn profiles_cmd(rest: &[String]) -> Result<(), Failure> {
    let a = Args::parse("profiles", rest, &["--json"], &["--profiles", "--lib"])?;
    let root = profile_store(&a);
    let json = a.has("--json");
    match a.positional.first().map(String::as_str) {
        Some("list") => profiles::list(&root, json)?,
        Some("show") => {
            let name = a
                .positional
                .get(1)
                .ok_or_else(|| a.usage("show needs a profile NAME"))?;
            profiles::show(&root, name, json)?
        }
        Some("which") => {
            let lib = a
                .positional
                .get(1)
                .map(PathBuf::from)
                .or_else(|| a.path("--lib"))
                .ok_or_else(|| a.usage("which needs a library file"))?;
            // A bare soname (librocblas.so.0) is found where `env` looks.
            let lib = env::find_library(&lib);
            profiles::which(&root, &lib, json)?
        }
        Some("import") => {
            let files: Vec<PathBuf> = a.positional[1..].iter().map(PathBuf::from).collect();
            if files.is_empty() {
                return Err(a.usage("import needs one or more results files").into());
            }
            profiles::import(&root, &lib_arg(&a)?, &files, json)?
        }
        Some(other) => {
            return Err(a
                .usage(format!(
                    "unknown action '{other}': list, show, which or import"
                ))
                .into())
        }
        None => profiles::list(&root, json)?,
    }
    Ok(())
}

fn merge_cmd(rest: &[String]) -> Result<(), Failure> {
    let a = Args::parse(
        "merge",
        rest,
        &["--json"],
        &["--lib", "--profiles", "--arch"],
    )?;
    if a.positional.is_empty() {
        return Err(a.usage("needs one or more shard stores to merge").into());
    }
    let shards: Vec<PathBuf> = a.positional.iter().map(PathBuf::from).collect();
    let report = profiles::merge(&profile_store(&a), &lib_arg(&a)?, &shards, a.has("--json"))?;
    if a.has("--json") {
        print_json(&report);
    }
    Ok(())
}

fn demo_cmd(rest: &[String]) -> Result<(), Failure> {
    let a = Args::parse("demo", rest, &[], &["--dir", "--passes"])?;
    let passes: usize = a.parsed("--passes", 3, "a positive number")?;
    if passes == 0 {
        return Err(a.usage("--passes takes a positive number").into());
    }
    Ok(demo::run(demo::Options {
        dir: a.path("--dir"),
        passes,
    })?)
}

/// Internal subcommands the harness runs as children under the preload.
fn internal(cmd: &str, rest: &[String]) -> Option<Result<(), Failure>> {
    let run = || -> Result<(), Failure> {
        let a = Args::parse(cmd, rest, &[], &["--lib", "--passes", "--rows"])?;
        let lib = lib_arg(&a)?;
        match cmd {
            "workload" => {
                let r = workload::run(&lib, a.parsed("--passes", 3, "a number")?)?;
                println!("{}", serde_json::to_string(&r).expect("plain struct"));
            }
            _ => {
                let rows = a.path("--rows").ok_or_else(|| a.usage("needs --rows"))?;
                verify::replay(&lib, Path::new(&rows))?;
            }
        }
        Ok(())
    };
    matches!(cmd, "workload" | "replay").then(run)
}

/// rocBLAS applies `ROCBLAS_INTERNAL_FP16_ALT_IMPL` to every call of the process; the keys
/// the interposer records already carry its effect in their flags
/// (`tunedblas_core::rocblas::effective_flags`), so the harness must run each key with its
/// own flags: the variable is removed before rocBLAS is loaded, and the commands that run
/// GEMMs say so.
fn unset_fp16_alt_impl_override(cmd: &str) {
    let var = tunedblas_core::rocblas::FP16_ALT_IMPL_VAR;
    let Some(value) = std::env::var_os(var) else {
        return;
    };
    // Single-threaded here, before anything reads the environment.
    std::env::remove_var(var);
    if matches!(cmd, "tune" | "qualify" | "verify" | "demo") {
        eprintln!(
            "tunedblas: {var}={} is ignored here: each shape runs with its own flags (shapes recorded under it carry fp16_alt_impl already)",
            value.to_string_lossy()
        );
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{HELP}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    unset_fp16_alt_impl_override(cmd);
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        print!("{}", subcommand_help(cmd).unwrap_or_else(|| HELP.into()));
        return ExitCode::SUCCESS;
    }
    let result = match cmd.as_str() {
        "coverage" => return coverage::main(rest),
        "misses" => return misses::main(rest),
        // Internal: the near-shape serving measurement of BENCHMARKS.md.
        "near-bench" => return nearbench::main(rest),
        "demo" => demo_cmd(rest),
        "tune" => tune_cmd(rest),
        "qualify" => qualify_cmd(rest),
        "verify" => verify_cmd(rest),
        "profiles" => profiles_cmd(rest),
        "merge" => merge_cmd(rest),
        "export" => export::cmd(rest),
        "env" => env::cmd(rest),
        "report" => report::cmd(rest),
        "help" | "--help" | "-h" => {
            match rest.first() {
                Some(sub) => match subcommand_help(sub) {
                    Some(h) => print!("{h}"),
                    None => {
                        eprintln!("tunedblas: no subcommand '{sub}'\n\n{HELP}");
                        return ExitCode::from(2);
                    }
                },
                None => print!("{HELP}"),
            }
            Ok(())
        }
        other => match internal(other, rest) {
            Some(r) => r,
            None => {
                eprintln!("tunedblas: unknown command '{other}'\n\n{HELP}");
                return ExitCode::from(2);
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(u)) => {
            eprintln!("tunedblas {}\n(see `tunedblas help {cmd}`)", u.0);
            ExitCode::from(2)
        }
        Err(Failure::Work(e)) => {
            eprintln!("tunedblas: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
