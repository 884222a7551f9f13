//! `tunedblas verify`: every row replayed under the preload; all of them must hit.

use crate::args::Args;
use crate::error::{Error, Result};
use crate::verify;

use super::print_json;

pub const HELP: &str = "\
tunedblas verify --lib LIBROCBLAS [--profiles DIR] [--preload LIBTUNEDBLAS] [--json]

Replays every row of the build's profile, on every device, in a child process running
under LD_PRELOAD=libtunedblas.so, and reads the interposer's own counters: it exits 0 only
when rows hit = rows, with no missed call and no fallback.

EXAMPLE:
    tunedblas verify --lib /opt/rocm/lib/librocblas.so.5
";

pub fn help() -> String {
    HELP.into()
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::parse(
        "verify",
        args,
        &["--json"],
        &["--lib", "--profiles", "--preload"],
    )?;
    a.at_most_positional(0)?;
    let report = verify::run(&verify::Options {
        lib: a.lib()?,
        profiles: a.profile_store(),
        preload: a.path("--preload"),
        json: a.has("--json"),
    })?;
    if a.has("--json") {
        print_json(&report);
    }
    if report.ok {
        Ok(())
    } else {
        Err(Error::failed(format!(
            "verify failed: {}",
            report.problems.join("; ")
        )))
    }
}
