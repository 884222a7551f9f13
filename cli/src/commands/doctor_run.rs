//! `tunedblas doctor-run` (internal): the doctor's workload in a child process, under the
//! preload or not; prints what it loaded and measured as JSON.

use tunedblas_tuner::backends::{Kind, Spec};

use crate::args::{self, Args};
use crate::doctor::child;
use crate::error::Result;

const OPTIONS: &str = "\
--lib LIB          the library (required)
--backend KIND     rocblas, hipblaslt or cublaslt
--probe            load the library and say what loaded; run nothing
--shapes S;S;...   shapes as --shape gives them to this library
--calls N          calls per timed sample (default 10)
--samples N        timed samples per shape (default 5)
--workspace BYTES  workspace given the Lt libraries (default 1048576)
--save DIR         write each shape's output there
--compare DIR      compare each shape's output with the one saved there
";

pub fn cli() -> clap::Command {
    let c = args::command(
        "doctor-run",
        "(internal: `doctor` runs it) Loads the library as a linked host does and runs the given F.linear shapes through the global GEMM entry points (an LD_PRELOADed interposer's), printing a JSON report.",
        "",
    )
    .args(args::table(OPTIONS));
    let c = args::choices(c, "--backend", ["rocblas", "hipblaslt", "cublaslt"]);
    args::library_options(c)
}

pub fn run(a: &Args) -> Result<()> {
    let kind = a
        .value("--backend")
        .and_then(Kind::parse)
        .ok_or_else(|| a.usage("--backend is required"))?;
    let spec = Spec {
        lib: Some(a.lib()?),
        ..a.spec()
    };
    if a.has("--probe") {
        let loaded = child::probe(kind, &spec)?;
        println!("{}", serde_json::to_string(&loaded).expect("plain data"));
        return Ok(());
    }
    let plan = child::Plan {
        kind,
        spec,
        shapes: a
            .value("--shapes")
            .unwrap_or("")
            .split(';')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        calls: a.parsed("--calls", 10, "a count")?,
        samples: a.parsed("--samples", 5, "a count")?.max(1),
        workspace: a.parsed("--workspace", 1usize << 20, "bytes")?,
        save: a.path("--save"),
        compare: a.path("--compare"),
    };
    let report = child::run(&plan)?;
    println!("{}", serde_json::to_string(&report).expect("plain data"));
    Ok(())
}
