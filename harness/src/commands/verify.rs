//! `tunedblas verify`: every row replayed under the preload; all of them must hit.

use crate::args::{self, Args};
use crate::error::{Error, Result};
use crate::verify;

use super::print_json;

const ABOUT: &str = "\
Replays every row of the build's profile, on every device, in a child process running
under LD_PRELOAD=libtunedblas.so, and reads the interposer's own counters: it exits 0 only
when rows hit = rows, with no missed call and no fallback.

With --stats FILE, checks a run that already happened instead (a server, a benchmark) by
the TUNEDBLAS_STATS file it wrote, for every backend: rocBLAS's FILE and, beside it, the
cuBLASLt and hipBLASLt files (FILE.cublaslt.json, FILE.hipblaslt.json; FILE itself where only
one of those ran). Each must show every row hit, no missed call and no fallback. Calls
served a nearby token count's row are served, not missed: their shapes are said, to be
tuned for rows of their own.";

const AFTER: &str = "\
EXAMPLES:
    tunedblas verify --lib /opt/rocm/lib/librocblas.so.5
    LD_PRELOAD=libtunedblas.so TUNEDBLAS_STATS=s.json vllm serve ...
    tunedblas verify --stats s.json
";

#[rustfmt::skip]
const OPTIONS: &[args::Row] = &[
    ("--lib", "LIB", "the rocBLAS build whose profile is replayed (required without --stats)"),
    ("--stats", "FILE", "check the TUNEDBLAS_STATS file of a run under the profile, for every backend, instead of replaying"),
    ("--profiles", "DIR", args::PROFILES),
    ("--preload", "LIBTUNEDBLAS", "the interposer to run under (default: the libtunedblas.so beside this binary)"),
    ("--json", "", "the result as JSON"),
];

pub fn cli() -> clap::Command {
    args::command("verify", ABOUT, AFTER).args(args::table(OPTIONS))
}

pub fn run(a: &Args) -> Result<()> {
    if let Some(path) = a.path("--stats") {
        if a.value("--lib").is_some() {
            return Err(a.usage(
                "--stats checks a run that already happened: it takes no --lib (its files say which rows were loaded)",
            ));
        }
        let checks = verify::check_stats(&path)?;
        if a.has("--json") {
            print_json(&checks);
        } else {
            verify::print_stats_checks(&checks);
        }
        let failed: Vec<String> = checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| {
                format!(
                    "{} ({}): {}",
                    c.file.display(),
                    c.backend,
                    c.problems.join("; ")
                )
            })
            .collect();
        return if failed.is_empty() {
            Ok(())
        } else {
            Err(Error::failed(format!(
                "not verified: {}",
                failed.join("; ")
            )))
        };
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
