//! `tunedblas`: the companion command of `libtunedblas.so`. This file is the command
//! table and the dispatch; each command is one file in `commands/` holding its help, its
//! arguments and its run, and every failure is one [`error::Error`] whose kind is the exit
//! code.

mod adopt;
mod args;
pub use tunedblas_tuner::{curate, error, rest, say, store, workload};
mod commands;
mod demo;
mod doctor;
mod env;
mod export;
mod pick;
mod png;
mod profiles;
mod render;
mod report;
mod serving;
mod shapes;
mod style;
mod verify;

use std::process::ExitCode;

use commands::{Command, Run};
use error::{Error, Result};

/// This build's version (the workspace's), as `tunedblas --version`, `tunedblas env` and the
/// interposer's start line say it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Every command, in the order `tunedblas help` lists them.
const COMMANDS: &[Command] = &[
    Command {
        name: "demo",
        usage: "tunedblas demo [--dir DIR] [--passes N]",
        summary: "The whole loop on the built-in CPU reference rocBLAS (refblas): a simulated
        inference workload runs under LD_PRELOAD=libtunedblas.so, its missed shapes are
        tuned, qualified and verified, and the workload runs again, served.",
        run: Run::Declared(commands::demo::cli, commands::demo::run),
        internal: false,
    },
    Command {
        name: "doctor",
        usage: "tunedblas doctor [--lib LIB | --backend rocblas|hipblaslt|cublaslt] [--out DIR] [--budget S]",
        summary: "A five-minute field test on this machine's GPU library: record, tune, verify, serve
        and compare, one PASS/FAIL line per step, and a bundle for a bug report.",
        run: Run::Declared(commands::doctor::cli, commands::doctor::run),
        internal: false,
    },
    Command {
        name: "tune",
        usage: "tunedblas tune [--lib LIB]... [INPUT...] [--shape SPEC]... [options]",
        summary: "Tune recorded shapes, each with the library it came from (rocBLAS, hipBLASLt,
        cuBLASLt), into the profile of exactly that library build.",
        run: Run::Declared(commands::tune::cli, commands::tune::run),
        internal: false,
    },
    Command {
        name: "watch",
        usage: "tunedblas watch --lib LIBROCBLAS [DIR] [--every S] [--hour-budget S] [-- TUNE OPTIONS]",
        summary: "Tune new misses as they come, beside a running server (which picks the rows up without a restart).",
        run: Run::Declared(commands::watch::cli, commands::watch::run),
        internal: false,
    },
    Command {
        name: "qualify",
        usage: "tunedblas qualify --lib LIB [--profiles DIR] [--json]",
        summary: "Check every tuned row's numerics on every device; remove the rows that fail.",
        run: Run::Declared(commands::qualify::cli, commands::qualify::run),
        internal: false,
    },
    Command {
        name: "verify",
        usage: "tunedblas verify --lib LIBROCBLAS [--profiles DIR] [--json] | --stats FILE",
        summary: "Replay every row under the preload (or read a run's counters); exit 1 unless every row is hit.",
        run: Run::Declared(commands::verify::cli, commands::verify::run),
        internal: false,
    },
    Command {
        name: "profiles",
        usage: "tunedblas profiles list|show NAME|which LIB|import --lib LIBROCBLAS FILE...|adopt --lib LIB FILE",
        summary: "Inspect the profile store and see which profile a library would get.",
        run: Run::Declared(commands::profiles::cli, commands::profiles::run),
        internal: false,
    },
    Command {
        name: "merge",
        usage: "tunedblas merge --lib LIB [--profiles DIR] SHARD_STORE...",
        summary: "Join the profiles that `tune --shard i/n` wrote on several machines.",
        run: Run::Declared(commands::merge::cli, commands::merge::run),
        internal: false,
    },
    Command {
        name: "coverage",
        usage: "tunedblas coverage [--config PATH|--shapes FILE] [--profile DIR|NAME] [vLLM flags]",
        summary:
            "Predict the GEMM problems a serving configuration runs; check them against a profile.",
        run: Run::Raw(commands::coverage::help, commands::coverage::run),
        internal: false,
    },
    Command {
        name: "misses",
        usage: "tunedblas misses [DIR|FILE ...] [--top N] [--json] [--out FILE]",
        summary: "Add up the miss logs of every process and rank; rank the gaps by calls x FLOPs.",
        run: Run::Declared(commands::misses::cli, commands::misses::run),
        internal: false,
    },
    Command {
        name: "status",
        usage: "tunedblas status [DIR] [--json] [--prune]",
        summary: "Live counters of every process running under the interposer (served, default,
        near, missed, fallbacks; top missed shapes), from the status files in its miss folder.",
        run: Run::Declared(commands::status::cli, commands::status::run),
        internal: false,
    },
    Command {
        name: "export",
        usage: "tunedblas export --lib LIBROCBLAS --format gemm-tune|bench|tunableop [--out PATH]",
        summary: "The profile as a ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH file, rocblas-bench lines, or
        TunableOp files PyTorch accepts unchanged.",
        run: Run::Declared(commands::export::cli, commands::export::run),
        internal: false,
    },
    Command {
        name: "report",
        usage: "tunedblas report --lib LIBROCBLAS [--out FILE.html] [--png FILE.png]",
        summary: "A self-contained HTML page and a PNG: coverage map and speedups of the profile.",
        run: Run::Declared(commands::report::cli, commands::report::run),
        internal: false,
    },
    Command {
        name: "env",
        usage: "tunedblas env [--lib LIBROCBLAS] [--snippet vllm|systemd|docker] [--json]",
        summary:
            "Effective settings, the profile each rocBLAS here would get, deployment snippets.",
        run: Run::Declared(commands::env::cli, commands::env::run),
        internal: false,
    },
    Command {
        name: "confirm",
        usage: "tunedblas confirm --lib LIB [--rows FILE] [options]",
        summary: "Re-measure a profile's tuned rows against the heuristic in this process.",
        run: Run::Declared(commands::confirm::cli, commands::confirm::run),
        internal: false,
    },
    Command {
        name: "lt",
        usage: "tunedblas lt SUBCOMMAND",
        summary: "Gone: every command takes every library; says what replaces each subcommand.",
        run: Run::Raw(commands::lt::help, commands::lt::run),
        internal: true,
    },
    Command {
        name: "help",
        usage: "tunedblas help [COMMAND]",
        summary: "This text, or a command's options and examples.",
        run: Run::Declared(commands::help::cli, commands::help::run),
        internal: false,
    },
    Command {
        name: "workload",
        usage: "tunedblas workload --lib LIBROCBLAS [--passes N]",
        summary: "The demo's workload, run under the preload by `demo`.",
        run: Run::Declared(commands::workload::cli, commands::workload::run),
        internal: true,
    },
    Command {
        name: "doctor-run",
        usage: "tunedblas doctor-run --backend KIND --lib LIB [--probe | --shapes S;S]",
        summary: "The doctor's workload, run under the preload by `doctor`.",
        run: Run::Declared(commands::doctor_run::cli, commands::doctor_run::run),
        internal: true,
    },
    Command {
        name: "replay",
        usage: "tunedblas replay --lib LIBROCBLAS --rows FILE",
        summary: "A profile's rows replayed under the preload by `verify`.",
        run: Run::Declared(commands::replay::cli, commands::replay::run),
        internal: true,
    },
    Command {
        name: "selftest",
        usage: "tunedblas selftest [--lib LIBCUBLASLT]",
        summary: "cuBLASLt's ABI values and rebuilt algorithms checked on the GPU.",
        run: Run::Declared(commands::selftest::cli, commands::selftest::run),
        internal: true,
    },
];

const OVERVIEW_HEAD: &str =
    "tunedblas - serve the fastest rocBLAS GEMM solution for every shape an inference server runs

USAGE:
";

const OVERVIEW_TAIL: &str = "
PROFILE STORE:
    --profiles DIR, else $TUNEDBLAS_PROFILE_DIR, else the store the installed interposer
    reads (share/tunedblas/profiles beside it, or profiles/ in a source checkout).

    tunedblas --version (or -V) prints the version.

EXIT CODES:
    0 success (tune: also when every shape has a row already); 1 the work failed (the
    message says why; verify: a row was not hit); 2 bad command line, in every command (an
    unknown option or command, a missing or malformed value such as a bad --shape or
    --trials: the message names it); 3 the library cannot be loaded or is not one the
    command takes (a cuBLASLt profile for report or a rocBLAS format, ...); 4 no usable device (coverage --strict: 3 some shapes are missing, 4 only unservable
    ones remain). A closed output pipe (| head) ends any command at once and quietly, by
    SIGPIPE, as it ends cat; a tune so stopped resumes when the same command is rerun.

    -q, --quiet (any command): no progress or notes on stderr; the answer, warnings and
    errors stay.
";

/// `tunedblas help`: every listed command's synopsis and summary, from the table.
fn overview() -> String {
    let mut text = OVERVIEW_HEAD.to_string();
    for c in COMMANDS.iter().filter(|c| !c.internal) {
        text.push_str(&format!("    {}\n        {}\n\n", c.usage, c.summary));
    }
    text.push_str(OVERVIEW_TAIL);
    text
}

/// The synopsis of `command`, for clap's usage line.
pub fn usage_of(command: &str) -> &'static str {
    find(command).map_or("tunedblas COMMAND [options]", |c| c.usage)
}

fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// Whether `args` ask for help (`--help` or `-h` before any `--`).
fn asks_for_help(args: &[String]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--help" || a == "-h")
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

/// Finds the command and runs it, or prints its help.
fn dispatch(args: &[String]) -> Result<()> {
    let Some(name) = args.first() else {
        eprint!("{}", overview());
        return Err(Error::usage("", "no command given"));
    };
    let rest = &args[1..];
    let name = match name.as_str() {
        "--help" | "-h" => "help",
        "--version" | "-V" | "version" => {
            println!("tunedblas {}", VERSION);
            return Ok(());
        }
        other => other,
    };
    let command = find(name).ok_or_else(|| commands::help::unknown_command(name))?;
    unset_fp16_alt_impl_override(name);
    if asks_for_help(rest) {
        print!("{}", command.help());
        return Ok(());
    }
    let (quiet, rest) = take_quiet(rest);
    say::set_quiet(quiet);
    command.run(&rest)
}

/// `-q` / `--quiet` (before any `--`), which every command takes with one meaning (see
/// `say`), taken out of `args`: the commands never see it.
fn take_quiet(args: &[String]) -> (bool, Vec<String>) {
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let is_quiet = |a: &String| a == "-q" || a == "--quiet";
    let quiet = args[..end].iter().any(is_quiet);
    let rest = args[..end]
        .iter()
        .filter(|a| !is_quiet(a))
        .chain(&args[end..])
        .cloned()
        .collect();
    (quiet, rest)
}

/// A closed output pipe (`tunedblas status | head -1`) ends the command at once, quietly, as
/// it ends `cat` or `seq`: the process takes the default action of SIGPIPE at its next write
/// instead of Rust's default of ignoring the signal and panicking in `println!` ("failed
/// printing to stdout", exit 101). This is the one place that decides it for every command
/// and every line, whoever prints it. Nothing is lost that a kill would not lose: a `tune`
/// stops where a kill stops it, its checkpoint synced shape by shape, and the same command
/// run again resumes it. Children get the default action anyway (std resets it at spawn).
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: restores a signal's default action, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The command line as text. An argument that is not UTF-8 (a path in another encoding) is
/// a usage error naming it, where `std::env::args` panicked (exit 101 and a backtrace).
fn arguments() -> Result<Vec<String>> {
    std::env::args_os()
        .skip(1)
        .map(|a| {
            a.into_string().map_err(|a| {
                Error::usage(
                    "",
                    format!(
                        "the argument {} is not UTF-8: give paths in UTF-8 (a folder can also come through TUNEDBLAS_MISS_DIR or TUNEDBLAS_PROFILE_DIR, read as bytes)",
                        a.to_string_lossy()
                    ),
                )
            })
        })
        .collect()
}

fn main() -> ExitCode {
    end_quietly_on_a_closed_pipe();
    match arguments().and_then(|args| dispatch(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.report());
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_its_own_help_and_a_unique_name() {
        let mut names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COMMANDS.len());
        for c in COMMANDS {
            let help = c.help();
            assert!(
                help.starts_with(&format!("tunedblas {}", c.name)),
                "{}: {help}",
                c.name
            );
        }
        let overview = overview();
        assert!(overview.contains("tunedblas coverage") && !overview.contains("doctor-run"));
    }

    #[test]
    fn quiet_is_read_for_every_command_before_the_pass_through_only() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (q, rest) = take_quiet(&v(&["--lib", "x", "-q", "--", "-q"]));
        assert!(q);
        assert_eq!(rest, v(&["--lib", "x", "--", "-q"]));
        let (q, rest) = take_quiet(&v(&["--quiet"]));
        assert!(q && rest.is_empty());
        assert!(!take_quiet(&v(&["--", "--quiet"])).0);
    }

    #[test]
    fn help_is_asked_for_before_the_pass_through_only() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(asks_for_help(&v(&["--lib", "x", "-h"])));
        assert!(!asks_for_help(&v(&["--", "vllm", "--help"])));
    }
}
