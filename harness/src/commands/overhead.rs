//! `tunedblas overhead` (internal: issue 29's measurement, bench/lt/overhead.sh): the host
//! microseconds an LD_PRELOADed interposer adds per cuBLASLt call and per `F.linear`.

use serde_json::json;
use tunedblas_core::cublaslt::op_and_signature;
use tunedblas_tuner::backends::{cublaslt, lt, Spec};

use crate::args::{self, Args};
use crate::error::{Error, Result};

#[rustfmt::skip]
const OPTIONS: &[args::Row] = &[
    ("--lib", "LIB", "libcublasLt.so (else $TUNEDBLAS_CUBLASLT, else libcublasLt.so.13/.12)"),
    ("--shape", "N,M,K", "F.linear(out N, tokens M, in K) in bf16 (2560,1,1536)"),
    ("--calls", "C", "calls per timed batch (200)"),
    ("--reps", "R", "batches each way, alternating which goes first (30)"),
    ("--workspace", "BYTES", "workspace given each call (1048576)"),
    ("--log", "FILE", "every batch as JSON"),
];

pub fn cli() -> clap::Command {
    let c = args::command(
        "overhead",
        "Host microseconds per cublasLtMatmul call, the library's own symbol against the one a linked host resolves (an LD_PRELOADed interposer's), on objects made through the linked host's symbols; and per F.linear as PyTorch issues it (a descriptor, two attributes, three layouts, the matmul, four destroys), all through the library's symbols against all through the linked host's. The differences are the interposer's cost per call and per GEMM (needs an NVIDIA GPU).",
        "EXAMPLE:\n    LD_PRELOAD=libtunedblas.so tunedblas overhead --shape 2560,1,1536 --log o.json\n",
    )
    .args(args::table(OPTIONS));
    args::library_options(c)
}

pub fn run(a: &Args) -> Result<()> {
    let key =
        lt::parse_spec(a.value("--shape").unwrap_or("2560,1,1536")).map_err(|e| a.usage(e))?;
    let spec = Spec {
        lib: a.path("--lib"),
        ..a.spec()
    };
    let o = cublaslt::overhead::measure(
        &spec,
        key,
        a.parsed("--calls", 200, "a count")?,
        a.parsed("--reps", 30, "a count")?,
        a.parsed("--workspace", 1 << 20, "bytes")?,
    )?;
    let [(dm, gm), (ld, lg)] = o.medians();
    let (op, sig) = op_and_signature(&key);
    let how = match o.interposed {
        true => "through the preload",
        false => "as linked, not interposed",
    };
    println!(
        "overhead {sig}: cublasLtMatmul: library {dm:.3} us/call, {how} {gm:.3} us/call, difference {:+.3} us/call",
        gm - dm
    );
    println!(
        "overhead {sig}: F.linear (descriptor made, 2 attributes set, 3 layouts made, the matmul, 4 destroyed): library {ld:.3} us, {how} {lg:.3} us, difference {:+.3} us",
        lg - ld
    );
    if let Some(sol) = &o.heuristic_solution {
        println!("overhead {sig}: the caller's algorithm (the heuristic's first answer) as a profile row: {op},{sig},{sol}");
    }
    if let Some(log) = a.path("--log") {
        let v = json!({
            "shape": [key.n, key.m, key.k], "run": o,
            "direct_median_us": dm, "global_median_us": gm, "difference_us": gm - dm,
            "linear_direct_median_us": ld, "linear_global_median_us": lg,
            "linear_difference_us": lg - ld,
        });
        std::fs::write(&log, serde_json::to_vec_pretty(&v).expect("plain values"))
            .map_err(|e| Error::failed(format!("{}: {e}", log.display())))?;
    }
    Ok(())
}
