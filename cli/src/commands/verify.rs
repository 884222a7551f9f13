//! `tunedblas verify`: every row replayed under the preload; all of them must hit.

use crate::args::{self, Args};
use crate::error::{Error, Result};
use crate::verify;

use super::print_json;

const ABOUT: &str = "\
Replays every row of the build's profile, on every device, in a child process running
under LD_PRELOAD=libtunedblas.so that calls the library as a linked host does (rocBLAS's
gemm_ex; hipBLASLt's and cuBLASLt's descriptors, layouts and matmul, the heuristic's first
answer as the algorithm, as PyTorch calls), and reads the interposer's own counters: it
exits 0 only when rows hit = rows, with no missed call and no fallback.

With --stats FILE, checks a run that already happened instead (a server, a benchmark) by
the TUNEDBLAS_STATS file it wrote, for every backend: rocBLAS's FILE and, beside it, the
cuBLASLt and hipBLASLt files (FILE.cublaslt.json, FILE.hipblaslt.json; FILE itself where only
one of those ran), and the fork children's beside each (FILE.<pid>). Each must show every
row hit, no missed call and no fallback. Calls served a nearby token count's row are
served, not missed: their shapes are said, to be tuned for rows of their own.

A server whose processes share one TUNEDBLAS_STATS keeps only the last one's counters (the
interposer says so when it replaces another process's file): put %p in the path for one
file per process (TUNEDBLAS_STATS=run/stats-%p.json) and give them all
(--stats run/stats-*.json).";

const AFTER: &str = "\
EXAMPLES:
    tunedblas verify --lib /opt/rocm/lib/librocblas.so.5
    tunedblas verify --lib libhipblaslt.so.1 --workspace 33554432
    tunedblas verify --lib libcublasLt.so.13
    LD_PRELOAD=libtunedblas.so TUNEDBLAS_STATS=s.json vllm serve ...
    tunedblas verify --stats s.json
    TUNEDBLAS_STATS=run/stats-%p.json vllm serve ...   # one file per process
    tunedblas verify --stats run/stats-*.json
";

const OPTIONS: &str = "\
--lib LIB               the library whose build's profile is replayed: rocBLAS, hipBLASLt or cuBLASLt (required without --stats)
--workspace BYTES       the workspace each replayed hipBLASLt or cuBLASLt call is given (cuBLASLt's default 1048576; hipBLASLt: what your callers pass): a row needing more is not served
--stats FILE            check the TUNEDBLAS_STATS file of a run under the profile, for every backend, instead of replaying (more files after it: each process's)
FILE...                 with --stats: more stats files of the run (TUNEDBLAS_STATS with %p writes one per process)
--profiles
--preload LIBTUNEDBLAS  the interposer to run under (default: the libtunedblas.so beside this binary)
--json                  the result as JSON
";

pub fn cli() -> clap::Command {
    args::library_options(args::command("verify", ABOUT, AFTER).args(args::table(OPTIONS)))
}

pub fn run(a: &Args) -> Result<()> {
    if a.path("--stats").is_none() && !a.positional.is_empty() {
        return Err(a.usage("stats files are given with --stats FILE..."));
    }
    if let Some(path) = a.path("--stats") {
        if a.value("--lib").is_some() {
            return Err(a.usage(
                "--stats checks a run that already happened: it takes no --lib (its files say which rows were loaded)",
            ));
        }
        let mut checks = verify::check_stats(&path)?;
        for more in &a.positional {
            checks.extend(verify::check_stats(std::path::Path::new(more))?);
        }
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
    let lib = crate::env::find_library(&a.lib()?);
    let kind = tunedblas_tuner::backends::kind_of(&lib)?;
    let workspace = match kind {
        tunedblas_tuner::backends::Kind::Rocblas => 0,
        k => a.method_for(k)?.workspace,
    };
    let report = verify::run(&verify::Options {
        lib,
        runtime: a.spec().runtime,
        workspace,
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
