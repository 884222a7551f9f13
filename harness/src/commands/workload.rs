//! `tunedblas workload` (internal): the demo's simulated inference workload, run by `demo`
//! in a child process under the preload; prints what it measured as one JSON line.

use crate::args::Args;
use crate::error::Result;
use crate::workload;

const HELP: &str = "\
tunedblas workload --lib LIBROCBLAS [--passes N]   (internal: `demo` runs it under the preload)

Runs the demo workload's GEMMs N times (default 3) the way a linked host calls rocBLAS,
and prints calls, GEMM time and failures as one JSON line.
";

pub fn help() -> String {
    HELP.into()
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::parse("workload", args, &[], &["--lib", "--passes"])?;
    a.at_most_positional(0)?;
    let r = workload::run(&a.lib()?, a.parsed("--passes", 3, "a number")?)?;
    println!("{}", serde_json::to_string(&r).expect("plain struct"));
    Ok(())
}
