//! `tunedblas replay` (internal): replays a profile's rows, run by `verify` in a child
//! process under the preload.

use crate::args::{self, Args};
use crate::error::Result;
use crate::verify;

const ABOUT: &str = "\
(internal: `verify` runs it under the preload) Calls every problem listed in FILE once, as
a linked host would.";

fn cli() -> clap::Command {
    args::command("replay", ABOUT, "")
        .arg(args::lib_option("the rocBLAS build (required)"))
        .arg(args::option(
            "--rows",
            "FILE",
            "the problems to call (required)",
        ))
}

pub fn help() -> String {
    args::help_text(cli())
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::of_declared("replay", cli(), args)?;
    let rows = a.path("--rows").ok_or_else(|| a.usage("needs --rows"))?;
    verify::replay(&a.lib()?, &rows)
}
