//! `tunedblas qualify`: every row's numerics against an f64 reference, on every device.

use crate::args::{self, Args};
use crate::error::Result;
use crate::profiles;

use super::print_json;

const ABOUT: &str = "\
Runs every tuned row of the build's profile (rocBLAS, hipBLASLt or cuBLASLt) on every device
and compares D with a high-precision reference on the same inputs, as tuning judges every
candidate: half types need relative L2 < 0.002 and allclose(atol = rtol = 0.01); f32 and
f64 tighter (loosened to twice the heuristic's own error where that is larger). Failing rows
are removed from every rank file, with the reason printed and recorded in provenance.json.";

const AFTER: &str = "\
EXAMPLE:
    tunedblas qualify --lib /opt/rocm/lib/librocblas.so.5
";

const OPTIONS: &str = "\
--lib LIB   the library build whose profile is checked (required)
--profiles
--json      the result as JSON
";

pub fn cli() -> clap::Command {
    let c = args::command("qualify", ABOUT, AFTER).args(args::table(OPTIONS));
    args::library_options(c)
}

pub fn run(a: &Args) -> Result<()> {
    let opened = a.opened()?;
    let report = tunedblas_tuner::with_library!(&opened, l => {
        profiles::qualify_profile(l, &a.profile_store(), a.has("--json"))?
    });
    if a.has("--json") {
        print_json(&report);
    }
    Ok(())
}
