//! `tunedblas lt overhead`: the host time an LD_PRELOADed interposer adds to a cuBLASLt
//! GEMM, measured side by side in one process: the library's own symbols against the
//! symbols a linked host resolves (the interposer's, when it is preloaded; the same
//! functions otherwise, which makes the control run).
//!
//! Two measurements, interleaved round by round (which goes first alternates), each behind
//! a delay kernel so the queue never blocks the host:
//! - `cublasLtMatmul` alone, on one descriptor and three layouts made once through the
//!   linked host's symbols (so an interposer knows them, as it knows PyTorch's);
//! - the whole per-GEMM sequence PyTorch's `F.linear` makes through cuBLASLt: a matmul
//!   descriptor made, its two transposes set, three layouts made, the matmul, all four
//!   destroyed, once through the library's symbols and once through the linked host's.

use tunedblas_core::cublaslt::*;

use super::cuda::{lt_check, Lt, Result};
use super::problem::{Delay, DelayKind, Problem};
use super::{delay, err, load, num, numeric, op_and_signature, parse_shape, write_json, CliResult};
use crate::args::Args;

pub fn cmd_overhead(a: &Args) -> CliResult<()> {
    let (n, m, k) =
        parse_shape(a.value("--shape").unwrap_or("2560,1,1536")).map_err(|e| a.usage(e))?;
    let (cuda, lt) = load(a)?;
    let calls: usize = num(a, "--calls", 200)?;
    let reps: usize = num(a, "--reps", 30)?;
    let workspace: usize = num(a, "--workspace", 1 << 20)?;
    let key = LtKey::linear(R_16BF, n, m, k);
    // The objects a linked host makes: through the interposer's symbols when preloaded.
    let linked = lt.with_global_objects()?;
    let p = Problem::new(&cuda, &linked, key, 1, workspace)?;
    let base = p.heuristic(1)?;
    let algo = base
        .first()
        .map_or(std::ptr::null(), |r| &r.algo as *const MatmulAlgo);
    // The caller's algorithm is the heuristic's first answer, as PyTorch passes it; a profile
    // row naming that same configuration serves the same kernel, so a served run differs from
    // the library's only by the host work (bench/lt/overhead.sh writes that row).
    let solution = match base.first() {
        Some(r) => Some(p.config_of(&r.algo)?.solution_name()),
        None => None,
    };
    let d = delay(&cuda, &lt, DelayKind::Spin)?;
    let matmul = |f: MatmulFn, calls, reps| p.host_us(f, algo, calls, reps, &d);
    let linear =
        |objs: &Lt, f: MatmulFn, calls, reps| linear_us(&p, objs, f, algo, calls, reps, &d);
    // Warm every path (the interposer identifies the library on its first call).
    matmul(lt.global_matmul, 20, 2)?;
    matmul(lt.matmul, 20, 2)?;
    linear(&linked, lt.global_matmul, 20, 2)?;
    linear(&lt, lt.matmul, 20, 2)?;
    let (mut direct, mut global) = (Vec::new(), Vec::new());
    let (mut linear_direct, mut linear_global) = (Vec::new(), Vec::new());
    for i in 0..reps {
        // Alternate which goes first.
        if i % 2 == 0 {
            direct.extend(matmul(lt.matmul, calls, 1)?);
            global.extend(matmul(lt.global_matmul, calls, 1)?);
            linear_direct.extend(linear(&lt, lt.matmul, calls, 1)?);
            linear_global.extend(linear(&linked, lt.global_matmul, calls, 1)?);
        } else {
            global.extend(matmul(lt.global_matmul, calls, 1)?);
            direct.extend(matmul(lt.matmul, calls, 1)?);
            linear_global.extend(linear(&linked, lt.global_matmul, calls, 1)?);
            linear_direct.extend(linear(&lt, lt.matmul, calls, 1)?);
        }
    }
    let interposed = lt.global_matmul as usize != lt.matmul as usize
        || linked.desc_create as usize != lt.desc_create as usize;
    let med = numeric::median;
    let (dm, gm) = (med(&direct), med(&global));
    let (ld, lg) = (med(&linear_direct), med(&linear_global));
    let sig = op_and_signature(&key).1;
    let how = if interposed {
        "through the preload"
    } else {
        "as linked, not interposed"
    };
    println!(
        "overhead {sig}: cublasLtMatmul: library {dm:.3} us/call, {how} {gm:.3} us/call, difference {:+.3} us/call",
        gm - dm
    );
    println!(
        "overhead {sig}: F.linear (descriptor made, 2 attributes set, 3 layouts made, the matmul, 4 destroyed): library {ld:.3} us, {how} {lg:.3} us, difference {:+.3} us",
        lg - ld
    );
    if let Some(sol) = &solution {
        let (op, sig) = op_and_signature(&key);
        println!("overhead {sig}: the caller's algorithm (the heuristic's first answer) as a profile row: {op},{sig},{sol}");
    }
    Ok(write_json(
        a.path("--log"),
        &serde_json::json!({
            "shape": [n, m, k], "interposed": interposed, "calls": calls, "reps": reps,
            "heuristic_solution": solution,
            "direct_us": direct, "global_us": global,
            "direct_median_us": dm, "global_median_us": gm, "difference_us": gm - dm,
            "linear_direct_us": linear_direct, "linear_global_us": linear_global,
            "linear_direct_median_us": ld, "linear_global_median_us": lg,
            "linear_difference_us": lg - ld,
        }),
    )?)
}

/// Host microseconds per `F.linear` as PyTorch issues it through cuBLASLt, every object
/// made and destroyed through `objs`' functions and the matmul through `f` (median of
/// `reps` batches of `calls`), behind a delay as [`Problem::host_us`] measures.
fn linear_us(
    p: &Problem,
    objs: &Lt,
    f: MatmulFn,
    algo: *const MatmulAlgo,
    calls: usize,
    reps: usize,
    delay: &Delay,
) -> Result<Vec<f64>> {
    let key = p.key;
    let layouts = key.layouts();
    let (ta, tb) = (op_of(key.trans_a), op_of(key.trans_b));
    let mut out = Vec::with_capacity(reps);
    for _ in 0..reps {
        delay.enqueue_ms(p.stream, calls as f64 * 0.04 + 0.2)?;
        let t = std::time::Instant::now();
        for _ in 0..calls {
            let mut desc = std::ptr::null_mut();
            let mut l = [std::ptr::null_mut(); 3];
            // SAFETY: the library's functions of these C types (cublasLt.h), with
            // out-pointers to locals and attribute values of the attributes' own sizes.
            unsafe {
                lt_check(
                    "cublasLtMatmulDescCreate",
                    (objs.desc_create)(&mut desc, key.compute, key.scale),
                )?;
                let set = |attr, v: &i32| (objs.desc_set)(desc, attr, (v as *const i32).cast(), 4);
                lt_check("cublasLtMatmulDescSetAttribute", set(DESC_TRANSA, &ta))?;
                lt_check("cublasLtMatmulDescSetAttribute", set(DESC_TRANSB, &tb))?;
                for (o, x) in l.iter_mut().zip(&layouts) {
                    lt_check(
                        "cublasLtMatrixLayoutCreate",
                        (objs.layout_create)(o, x.dtype, x.rows, x.cols, x.ld),
                    )?;
                }
                let st = p.launch_objects(f, desc, l, algo);
                for o in l {
                    (objs.layout_destroy)(o);
                }
                (objs.desc_destroy)(desc);
                if st != STATUS_SUCCESS {
                    return err(format!("cublasLtMatmul returned {st}"));
                }
            }
        }
        out.push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
        p.cuda.sync_stream(p.stream)?;
    }
    Ok(out)
}
