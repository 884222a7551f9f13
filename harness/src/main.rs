//! `tunedblas`: the companion harness of `libtunedblas.so`.

mod backend;
mod cli;
mod curate;
mod demo;
mod tune;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

const HELP: &str = "\
tunedblas - serve the fastest rocBLAS GEMM solution for every shape an inference server runs

USAGE:
    tunedblas demo [--dir DIR] [--passes N]
        Record -> tune -> serve on the built-in CPU reference rocBLAS (refblas): a simulated
        workload runs under LD_PRELOAD=libtunedblas.so, its missed shapes are tuned, a
        profile for that exact library build is written, and the workload runs again.
        DIR keeps every file (default: a fresh temporary folder); N passes (default 3).

    tunedblas help
        This text.

EXIT CODES:
    0 success, 1 the work failed (the message says why), 2 bad command line
";

fn flag_value(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{HELP}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let passes = match flag_value(rest, "--passes").map(|v| v.parse::<usize>()) {
        None => 3,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("tunedblas: --passes takes a positive number");
            return ExitCode::from(2);
        }
    };
    let result = match cmd.as_str() {
        "demo" => demo::run(demo::Options {
            dir: flag_value(rest, "--dir").map(PathBuf::from),
            passes,
        }),
        // Internal: the demo's workload process (runs under the preload).
        "workload" => {
            let Some(lib) = flag_value(rest, "--lib") else {
                eprintln!("tunedblas: workload needs --lib <librocblas.so>");
                return ExitCode::from(2);
            };
            workload::run(std::path::Path::new(&lib), passes).map(|r| {
                println!("{}", serde_json::to_string(&r).expect("plain struct"));
            })
        }
        "help" | "--help" | "-h" => {
            print!("{HELP}");
            Ok(())
        }
        other => {
            eprintln!("tunedblas: unknown command '{other}'\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tunedblas: {e}");
            ExitCode::from(1)
        }
    }
}
