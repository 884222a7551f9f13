//! `tunedblas replay` (internal): replays a profile's rows, run by `verify` in a child
//! process under the preload.

use crate::args::{self, Args};
use crate::error::Result;
use crate::verify;

const ABOUT: &str = "\
(internal: `verify` runs it under the preload) Calls every problem listed in FILE once, as
a linked host would.";

pub fn cli() -> clap::Command {
    args::command("replay", ABOUT, "")
        .arg(args::lib_option("the rocBLAS build (required)"))
        .arg(args::option(
            "--rows",
            "FILE",
            "the problems to call (required)",
        ))
}

pub fn run(a: &Args) -> Result<()> {
    let rows = a.path("--rows").ok_or_else(|| a.usage("needs --rows"))?;
    verify::replay(&a.lib()?, &rows)
}
