//! `tunedblas replay` (internal): replays a profile's rows, run by `verify` in a child
//! process under the preload, and prints a [`Replayed`] as JSON.

use crate::args::{self, Args};
use crate::error::{Error, Result};
use crate::verify::Replayed;

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
    let kind = tunedblas_tuner::backends::kind_of(&a.lib()?)?;
    let text = std::fs::read_to_string(&rows)
        .map_err(|e| Error::failed(format!("cannot read {}: {e}", rows.display())))?;
    // Every library's rows are called as the doctor's workload calls them: through the
    // symbols a host resolves, the heuristic's first answer as the algorithm (rocBLAS:
    // `rocblas_gemm_ex` with the standard algorithm).
    let (calls, failures) = crate::doctor::child::replay(kind, &spec, &text, workspace)?;
    crate::commands::print_json(&Replayed { calls, failures });
    Ok(())
}
