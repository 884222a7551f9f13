//! `tunedblas replay` (internal): replays a profile's rows, run by `verify` in a child
//! process under the preload.

use crate::args::Args;
use crate::error::Result;
use crate::verify;

const HELP: &str = "\
tunedblas replay --lib LIBROCBLAS --rows FILE   (internal: `verify` runs it under the preload)

Calls every problem listed in FILE once, as a linked host would.
";

pub fn help() -> String {
    HELP.into()
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::parse("replay", args, &[], &["--lib", "--rows"])?;
    a.at_most_positional(0)?;
    let rows = a.path("--rows").ok_or_else(|| a.usage("needs --rows"))?;
    verify::replay(&a.lib()?, &rows)
}
