//! `tunedblas workload` (internal): the demo's simulated inference workload, run by `demo`
//! in a child process under the preload; prints what it measured as one JSON line.

use crate::args::{self, Args};
use crate::error::Result;
use crate::workload;

const ABOUT: &str = "\
(internal: `demo` runs it under the preload) Runs the demo workload's GEMMs N times the way
a linked host calls rocBLAS, and prints calls, GEMM time and failures as one JSON line.";

const OPTIONS: &str = "\
--lib LIB   the rocBLAS build (required)
--passes N  passes of the workload (default 3)
";

pub fn cli() -> clap::Command {
    args::command("workload", ABOUT, "").args(args::table(OPTIONS))
}

pub fn run(a: &Args) -> Result<()> {
    let r = workload::run(&a.lib()?, a.parsed("--passes", 3, "a number")?)?;
    println!("{}", serde_json::to_string(&r).expect("plain struct"));
    Ok(())
}
