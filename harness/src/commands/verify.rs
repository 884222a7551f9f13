//! `tunedblas verify`: every row replayed under the preload; all of them must hit.

use crate::args::{self, Args};
use crate::error::{Error, Result};
use crate::verify;

use super::print_json;

const ABOUT: &str = "\
Replays every row of the build's profile, on every device, in a child process running
under LD_PRELOAD=libtunedblas.so, and reads the interposer's own counters: it exits 0 only
when rows hit = rows, with no missed call and no fallback. With --stats, reads the counters
a run of your own server wrote instead (TUNEDBLAS_STATS=FILE, any library): the same check,
nothing replayed.";

const AFTER: &str = "\
EXAMPLES:
    tunedblas verify --lib /opt/rocm/lib/librocblas.so.5
    TUNEDBLAS_STATS=s.json <server>; tunedblas verify --stats s.json
";

fn cli() -> clap::Command {
    args::command("verify", ABOUT, AFTER)
        .arg(args::lib_option(
            "the rocBLAS build whose profile is replayed (required without --stats)",
        ))
        .arg(args::profiles_option())
        .arg(args::option(
            "--preload",
            "LIBTUNEDBLAS",
            "the interposer to run under (default: the libtunedblas.so beside this binary)",
        ))
        .arg(args::option(
            "--stats",
            "FILE",
            "check a run's TUNEDBLAS_STATS file instead of replaying",
        ))
        .arg(args::switch("--json", "the result as JSON"))
}

pub fn help() -> String {
    args::help_text(cli())
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::of_declared("verify", cli(), args)?;
    if let Some(stats) = a.path("--stats") {
        return verify::stats(&stats);
    }
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
