//! `tunedblas qualify`: every row's numerics against an f64 reference, on every device.

use crate::args::{self, Args};
use crate::error::Result;
use crate::profiles;

use super::print_json;

const ABOUT: &str = "\
Runs every rocBLAS row of the build's profile on every device and compares D with a
reference computed in f64 on the same inputs: half types need relative L2 < 0.002 and
allclose(atol = rtol = 0.01); f32 and f64 tighter. Failing rows are removed from every
rank file, with the reason printed and recorded in provenance.json.";

const AFTER: &str = "\
EXAMPLE:
    tunedblas qualify --lib /opt/rocm/lib/librocblas.so.5
";

fn cli() -> clap::Command {
    args::command("qualify", ABOUT, AFTER)
        .arg(args::lib_option(
            "the rocBLAS build whose profile is checked (required)",
        ))
        .arg(args::option(
            "--hip",
            "PATH",
            "libamdhip64.so when it is not found by name",
        ))
        .arg(args::profiles_option())
        .arg(args::switch("--json", "the result as JSON"))
}

pub fn help() -> String {
    args::help_text(cli())
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::of_declared("qualify", cli(), args)?;
    let report = profiles::qualify_profile(
        &a.lib()?,
        a.path("--hip").as_deref(),
        &a.profile_store(),
        a.has("--json"),
    )?;
    if a.has("--json") {
        print_json(&report);
    }
    Ok(())
}
