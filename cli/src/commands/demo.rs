//! `tunedblas demo`: the whole loop on refblas, before and after side by side.

use crate::args::{self, Args};
use crate::demo;
use crate::error::Result;

const ABOUT: &str = "\
The whole loop on the built-in CPU reference rocBLAS (refblas), in under two minutes:
  1. a simulated inference workload (decode steps, MTP verify, 256/512-token prefill chunks,
     chunk + decode mixes over 7 linear layers) runs under LD_PRELOAD=libtunedblas.so with
     no profile: every shape is recorded as a miss;
  2. `tune` tunes the recorded shapes and qualifies the adoptions on every device;
  3. `verify` replays every row under the preload;
  4. the workload runs again, served; hit rate and GEMM time before and after are printed
     side by side.";

const AFTER: &str = "\
EXAMPLES:
    tunedblas demo
    tunedblas demo --dir /tmp/tb-demo --passes 5
";

const OPTIONS: &str = "\
--dir DIR   keep every file here (profiles, miss logs, stats; default a fresh temporary folder)
--passes N  passes of the workload (default 3)
";

pub fn cli() -> clap::Command {
    args::command("demo", ABOUT, AFTER).args(args::table(OPTIONS))
}

pub fn run(a: &Args) -> Result<()> {
    let passes: usize = a.parsed("--passes", 3, "a positive number")?;
    if passes == 0 {
        return Err(a.usage("--passes takes a positive number"));
    }
    demo::run(demo::Options {
        dir: a.path("--dir"),
        passes,
    })
}
