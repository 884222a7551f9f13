//! `tunedblas qualify`: every row's numerics against an f64 reference, on every device.

use crate::args::Args;
use crate::error::Result;
use crate::profiles;

use super::print_json;

pub const HELP: &str = "\
tunedblas qualify --lib LIBROCBLAS [--profiles DIR] [--json]

Runs every rocBLAS row of the build's profile on every device and compares D with a
reference computed in f64 on the same inputs: half types need relative L2 < 0.002 and
allclose(atol = rtol = 0.01); f32 and f64 tighter. Failing rows are removed from every
rank file, with the reason printed and recorded in provenance.json.

EXAMPLE:
    tunedblas qualify --lib /opt/rocm/lib/librocblas.so.5
";

pub fn help() -> String {
    HELP.into()
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::parse(
        "qualify",
        args,
        &["--json"],
        &["--lib", "--hip", "--profiles"],
    )?;
    a.at_most_positional(0)?;
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
