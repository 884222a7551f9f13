//! `tunedblas-bench overhead` (issue 29's measurement, bench/lt/overhead.sh): the host time an LD_PRELOADed interposer adds to a cuBLASLt
//! GEMM, measured side by side in one process: the library's own symbols against the
//! symbols a linked host resolves (the interposer's, when it is preloaded; the same
//! functions otherwise, which makes the control run).
//!
//! Two measurements, interleaved round by round (which goes first alternates), each behind
//! the spin kernel so the queue never blocks the host:
//! - `cublasLtMatmul` alone, on one descriptor and three layouts made once through the
//!   linked host's symbols (so an interposer knows them, as it knows PyTorch's);
//! - the whole per-GEMM sequence PyTorch's `F.linear` makes through cuBLASLt: a matmul
//!   descriptor made, its two transposes set, three layouts made, the matmul, all four
//!   destroyed, once through the library's symbols and once through the linked host's.

use std::time::Instant;

use serde::Serialize;
use serde_json::json;
use tunedblas_core::cublaslt::*;
use tunedblas_tuner::backends::cublaslt::{Cublaslt, CublasltSession, Spin};
use tunedblas_tuner::backends::lt::{self, LtApi, LtMatmulFn, LtProblem, Obj};
use tunedblas_tuner::backends::{Library, Spec};
use tunedblas_tuner::bench::Bench;
use tunedblas_tuner::error::{Error, Result};
use tunedblas_tuner::numerics::median;
use tunedblas_tuner::pipeline::Method;
use tunedblas_tuner::timer::Delay;

use crate::opts::{self, Opts};

const ABOUT: &str = "Host microseconds per cublasLtMatmul call, the library's own symbol against the one a linked host resolves (an LD_PRELOADed interposer's), on objects made through the linked host's symbols; and per F.linear as PyTorch issues it (a descriptor, two attributes, three layouts, the matmul, four destroys), all through the library's symbols against all through the linked host's. The differences are the interposer's cost per call and per GEMM (needs an NVIDIA GPU).

EXAMPLE:
    LD_PRELOAD=libtunedblas.so tunedblas-bench overhead --shape 2560,1,1536 --log o.json";

#[rustfmt::skip]
const OPTIONS: &[opts::OptionRow] = &[
    ("--lib", "LIB", "libcublasLt.so (else $TUNEDBLAS_CUBLASLT, else libcublasLt.so.13/.12)"),
    ("--cudart", "PATH", "the CUDA runtime of cuBLASLt (else $TUNEDBLAS_CUDART, else libcudart.so.13/.12)"),
    ("--shape", "N,M,K", "F.linear(out N, tokens M, in K) in bf16 (2560,1,1536)"),
    ("--calls", "C", "calls per timed batch (200)"),
    ("--reps", "R", "batches each way, alternating which goes first (30)"),
    ("--workspace", "BYTES", "workspace given each call (1048576)"),
    ("--log", "FILE", "every batch as JSON"),
];

pub fn help() -> String {
    opts::help("overhead", ABOUT, OPTIONS)
}

/// `tunedblas-bench overhead [options]`: measures and prints the three lines
/// bench/lt/overhead.sh and bench/cublaslt/h200.sh read (`overhead SIG: ...`).
pub fn run(args: &[String]) -> std::result::Result<(), String> {
    let a = Opts::parse("overhead", OPTIONS, args)?;
    let key = lt::parse_spec(a.value("--shape").unwrap_or("2560,1,1536"))?;
    let spec = Spec {
        lib: a.path("--lib"),
        runtime: a.path("--cudart"),
        arch: None,
    };
    let o = measure(
        &spec,
        key,
        a.parsed("--calls", 200, "a count")?,
        a.parsed("--reps", 30, "a count")?,
        a.parsed("--workspace", 1 << 20, "bytes")?,
    )
    .map_err(|e| e.to_string())?;
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
            .map_err(|e| format!("{}: {e}", log.display()))?;
    }
    Ok(())
}

/// What one run measured, host microseconds per call.
#[derive(Debug, Serialize)]
pub struct Overhead {
    pub interposed: bool,
    pub calls: usize,
    pub reps: usize,
    /// The heuristic's first answer (the caller's algorithm, as PyTorch passes it), as a
    /// profile row names it.
    pub heuristic_solution: Option<String>,
    pub direct_us: Vec<f64>,
    pub global_us: Vec<f64>,
    pub linear_direct_us: Vec<f64>,
    pub linear_global_us: Vec<f64>,
}

impl Overhead {
    /// (library, linked host) medians of the matmul alone and of the F.linear sequence.
    pub fn medians(&self) -> [(f64, f64); 2] {
        [
            (median(&self.direct_us), median(&self.global_us)),
            (
                median(&self.linear_direct_us),
                median(&self.linear_global_us),
            ),
        ]
    }
}

/// Measures `key` on device 0: `reps` rounds of `calls` calls each way.
pub fn measure(
    spec: &Spec,
    key: LtKey,
    calls: usize,
    reps: usize,
    workspace: usize,
) -> Result<Overhead> {
    let mut lib = Cublaslt::open(spec)?;
    let own = lib.api;
    // The objects a linked host makes: through the interposer's symbols when preloaded.
    lib.api = own.with_global_objects("cublasLt")?;
    let linked = lib.api;
    let global = lib.global_matmul;
    let s = lib.session(0)?;
    let spin = s
        .spin
        .as_ref()
        .ok_or_else(|| Error::failed("the spin kernel cannot be loaded here"))?;
    let m = Method {
        workspace,
        rest: 0.0,
        ..Method::default()
    };
    let p = LtProblem::new(&s, key, &m)?;
    let first = p.answers(1)?.first().copied();
    let algo = first
        .as_ref()
        .map_or(std::ptr::null(), |r| (&r.algo as *const MatmulAlgo).cast());
    // A profile row naming the caller's own configuration serves the same kernel, so a
    // served run differs from the library's only by the host work (bench/lt/overhead.sh
    // writes that row).
    let heuristic_solution = match &first {
        Some(r) => Some(lib.config_of(&r.algo)?.solution_name()),
        None => None,
    };
    let matmul = |f: LtMatmulFn, calls, reps| {
        // SAFETY: `algo` is null (the heuristic) or the heuristic's first answer, alive here.
        host_us(&p, spin, (calls, 2), reps, |i| unsafe {
            p.launch_with(f, algo, i)
        })
    };
    let linear = |objs: &LtApi, f: LtMatmulFn, calls, reps| {
        host_us(&p, spin, (calls, 3), reps, |i| linear(&p, objs, f, algo, i))
    };
    // Warm every path (the interposer identifies the library on its first call).
    matmul(global, 20, 2)?;
    matmul(own.matmul, 20, 2)?;
    linear(&linked, global, 20, 2)?;
    linear(&own, own.matmul, 20, 2)?;
    let mut o = Overhead {
        interposed: global as usize != own.matmul as usize
            || linked.desc_create as usize != own.desc_create as usize,
        calls,
        reps,
        heuristic_solution,
        direct_us: Vec::new(),
        global_us: Vec::new(),
        linear_direct_us: Vec::new(),
        linear_global_us: Vec::new(),
    };
    for i in 0..reps {
        // Alternate which goes first.
        for library_first in [i % 2 == 0, i % 2 != 0] {
            if library_first {
                o.direct_us.extend(matmul(own.matmul, calls, 1)?);
                o.linear_direct_us
                    .extend(linear(&own, own.matmul, calls, 1)?);
            } else {
                o.global_us.extend(matmul(global, calls, 1)?);
                o.linear_global_us
                    .extend(linear(&linked, global, calls, 1)?);
            }
        }
    }
    Ok(o)
}

/// Host microseconds per call of `call(i)` for `i` in `0..calls`, one value per batch of
/// `reps`, each behind a spin covering `weight` matmul calls' host time per call, so the
/// queue never blocks the host.
fn host_us(
    p: &LtProblem<'_, CublasltSession<'_>>,
    spin: &Spin,
    (calls, weight): (usize, usize),
    reps: usize,
    call: impl Fn(usize) -> i32,
) -> Result<Vec<f64>> {
    let stream = p.timer().stream;
    let mut out = Vec::with_capacity(reps);
    for _ in 0..reps {
        spin.enqueue(stream, calls * weight)?;
        let t = Instant::now();
        for i in 0..calls {
            match call(i) {
                STATUS_SUCCESS => {}
                st => return Err(Error::failed(format!("cublasLtMatmul returned {st}"))),
            }
        }
        out.push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
        p.timer().sync()?;
    }
    Ok(out)
}

/// One `F.linear` as PyTorch issues it through cuBLASLt, every object made and destroyed
/// through `objs`' functions and the matmul through `f`.
fn linear(
    p: &LtProblem<'_, CublasltSession<'_>>,
    objs: &LtApi,
    f: LtMatmulFn,
    algo: *const std::ffi::c_void,
    set: usize,
) -> i32 {
    let key = p.key;
    let (ta, tb) = (op_of(key.trans_a), op_of(key.trans_b));
    let mut desc: Obj = std::ptr::null_mut();
    let mut l: [Obj; 3] = [std::ptr::null_mut(); 3];
    // SAFETY: the library's functions of these C types (cublasLt.h), with out-pointers to
    // locals and attribute values of the attributes' own sizes.
    unsafe {
        let st = (objs.desc_create)(&mut desc, key.compute, key.scale);
        if st != STATUS_SUCCESS {
            return st;
        }
        let set_op = |attr, v: &i32| (objs.desc_set)(desc, attr, (v as *const i32).cast(), 4);
        let mut st = set_op(DESC_TRANSA, &ta).max(set_op(DESC_TRANSB, &tb));
        for (o, x) in l.iter_mut().zip(&key.layouts()) {
            st = st.max((objs.layout_create)(o, x.dtype, x.rows, x.cols, x.ld));
        }
        if st == STATUS_SUCCESS {
            st = p.call(f, desc, [l[0], l[1], l[2], l[2]], p.out.ptr, algo, set);
        }
        for o in l.into_iter().filter(|o| !o.is_null()) {
            (objs.layout_destroy)(o);
        }
        (objs.desc_destroy)(desc);
        st
    }
}
