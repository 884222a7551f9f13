//! `tunedblas replay` (internal): replays a profile's rows, run by `verify` in a child
//! process under the preload.

use crate::args::{self, Args};
use crate::error::Result;
use crate::verify;

const ABOUT: &str = "\
(internal: `verify` runs it under the preload) Calls every problem listed in FILE once, as
a linked host would.";

const OPTIONS: &str = "\
--lib LIB          the library (required)
--rows FILE        the problems to call (required)
--workspace BYTES  the workspace each Lt call is given
";

pub fn cli() -> clap::Command {
    args::library_options(args::command("replay", ABOUT, "")).args(args::table(OPTIONS))
}

pub fn run(a: &Args) -> Result<()> {
    let rows = a.path("--rows").ok_or_else(|| a.usage("needs --rows"))?;
    let spec = tunedblas_tuner::backends::Spec {
        lib: Some(a.lib()?),
        ..a.spec()
    };
    let workspace = a.parsed("--workspace", 1usize << 20, "bytes")?;
    verify::replay(&a.lib()?, &rows, Some((&spec, workspace)))
}
