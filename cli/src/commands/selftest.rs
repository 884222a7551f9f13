//! `tunedblas selftest` (internal: a GPU check, `doctor`'s first step): cuBLASLt's ABI
//! values read back and every heuristic answer rebuilt to identical results.

use tunedblas_tuner::backends::{cublaslt, Spec};

use crate::args::{self, Args};
use crate::error::{Error, Result};

pub fn cli() -> clap::Command {
    let c = args::command(
        "selftest",
        "The ABI values tunedblas relies on, read back from the real cuBLASLt, and every heuristic answer rebuilt from its readable configuration computing bit-identical results (needs an NVIDIA GPU).",
        "EXAMPLE:\n    tunedblas selftest --lib libcublasLt.so.13\n",
    )
    .args(args::table(
        "--lib LIB  libcublasLt.so (else $TUNEDBLAS_CUBLASLT, else libcublasLt.so.13/.12)",
    ));
    args::library_options(c)
}

pub fn run(a: &Args) -> Result<()> {
    let lib = cublaslt::Cublaslt::open(&Spec {
        lib: a.path("--lib"),
        ..a.spec()
    })?;
    let mut failures = Vec::new();
    cublaslt::selftest::run(&lib, &mut |what, ok| {
        println!("selftest: {what}: {}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failures.push(what.to_string());
        }
    })?;
    if !failures.is_empty() {
        return Err(Error::failed(format!(
            "selftest failed: {}",
            failures.join("; ")
        )));
    }
    println!("selftest: passed");
    Ok(())
}
