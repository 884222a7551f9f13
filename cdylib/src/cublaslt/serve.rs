//! The serving decision for one `cublasLtMatmul` call, the tuned call with its fallback,
//! and the rebuilt algorithm a row names (`tunedblas_lt_algo::build_algo`, checked once
//! per key with `cublasLtMatmulAlgoCheck`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use tunedblas_core::cublaslt::*;
use tunedblas_lt_algo::build_algo;

use super::key::read_key;
use super::real::{call, LtCall, CUBLASLT, LT};
use super::{get, latch_off, SERVING};
use crate::log::{debug, info};
use crate::stats::{bump, Counter};

enum Decision {
    Pass,
    /// The row's rebuilt algorithm (kept in its entry) and the entry. By reference: the
    /// algorithm and key by value made the decision 216 bytes.
    Tuned(&'static MatmulAlgo, &'static LtEntry),
}

/// Serves one intercepted `cublasLtMatmul`. See the module docs.
///
/// # Safety
/// The arguments are a caller's `cublasLtMatmul` arguments.
pub unsafe fn matmul(x: &LtCall) -> LtStatus {
    if let Some(other) = CUBLASLT.other_build(x.handle) {
        // A handle of another cuBLASLt build: its own function, untouched.
        let Some(real) = other.matmul() else {
            return STATUS_NOT_INITIALIZED;
        };
        if get().is_some() {
            bump(Counter::LtCalls);
            bump(Counter::LtPassedThrough);
        }
        // SAFETY: the caller's own arguments, to the build its handle came from.
        return unsafe { call(real, x, x.algo) };
    }
    let Some(real) = LT.matmul() else {
        // No cuBLASLt in this process: the caller could not have made a valid call.
        return STATUS_NOT_INITIALIZED;
    };
    let decision = match catch_unwind(AssertUnwindSafe(|| decide(x))) {
        Ok(d) => d,
        Err(_) => {
            latch_off("a panic while choosing an algorithm");
            Decision::Pass
        }
    };
    match decision {
        Decision::Pass => unsafe { call(real, x, x.algo) },
        Decision::Tuned(algo, entry) => {
            let status = unsafe { call(real, x, algo) };
            if status == STATUS_SUCCESS {
                bump(Counter::LtServed);
                return status;
            }
            if entry.quarantine() {
                // SAFETY: the caller's descriptors, as when the key was read for the lookup.
                let key = unsafe { read_key(x) };
                let (op, sig) = key.as_ref().map_or_else(Default::default, op_and_signature);
                info!(
                    "cuBLASLt: {} for {op},{sig} failed with status {status}; the row is quarantined for this process and the caller's own algorithm is used (re-tune this build)",
                    entry.action.solution_text()
                );
            }
            bump(Counter::LtFallbacks);
            unsafe { call(real, x, x.algo) }
        }
    }
}

fn decide(x: &LtCall) -> Decision {
    let Some(rt) = get() else {
        return Decision::Pass;
    };
    bump(Counter::LtCalls);
    if !SERVING.load(Ordering::Relaxed) {
        bump(Counter::LtPassedThrough);
        return Decision::Pass;
    }
    // SAFETY: the descriptors are the caller's, valid for the duration of the call.
    let Some(key) = (unsafe { read_key(x) }) else {
        bump(Counter::LtPassedThrough);
        return Decision::Pass;
    };
    match rt.table().and_then(|t| t.get(&key)) {
        Some(e) if e.is_quarantined() => {
            bump(Counter::LtPassedThrough);
            Decision::Pass
        }
        Some(e) => {
            e.mark_hit();
            match e.action {
                LtAction::Default => {
                    bump(Counter::LtDefault);
                    Decision::Pass
                }
                LtAction::Config(cfg) => {
                    // SAFETY: as above; runs once per key.
                    let prepared = e.prepared.get_or_init(|| unsafe { prepare(x, &key, &cfg) });
                    match prepared {
                        Some(p)
                            if p.fits(
                                [x.a as usize, x.b as usize, x.c as usize, x.d as usize],
                                x.workspace,
                                x.workspace_bytes,
                            ) =>
                        {
                            Decision::Tuned(&p.algo, e)
                        }
                        Some(_) => {
                            // Less workspace or alignment than the tuned algorithm needs.
                            bump(Counter::LtPassedThrough);
                            Decision::Pass
                        }
                        None => {
                            e.quarantine();
                            bump(Counter::LtFallbacks);
                            Decision::Pass
                        }
                    }
                }
            }
        }
        None => {
            if rt.miss(&key) {
                let (op, sig) = op_and_signature(&key);
                debug!(
                    "cuBLASLt: miss {op},{sig} (caller's workspace {} bytes, algo {})",
                    x.workspace_bytes,
                    if x.algo.is_null() { "NULL" } else { "given" }
                );
            }
            bump(Counter::LtMissed);
            Decision::Pass
        }
    }
}

/// Rebuilds a row's algorithm and checks it against this call's descriptors.
unsafe fn prepare(x: &LtCall, key: &LtKey, cfg: &AlgoConfig) -> Option<Prepared> {
    let report = |why: String| {
        let (op, sig) = op_and_signature(key);
        info!(
            "cuBLASLt: {} for {op},{sig} cannot be used: {why}; the caller's own algorithm runs instead (re-tune this build)",
            cfg.solution_name()
        );
    };
    let (Some(init), Some(set), Some(get), Some(check)) = (
        LT.algo_init(),
        LT.config_set(),
        LT.config_get(),
        LT.algo_check(),
    ) else {
        report("this cuBLASLt lacks the algorithm functions".into());
        return None;
    };
    // SAFETY: the resolved cuBLASLt functions and the caller's live handle.
    let algo = match unsafe { build_algo(init, set, get, x.handle, key, cfg) } {
        Ok(a) => a,
        Err(why) => {
            report(why);
            return None;
        }
    };
    let mut result = HeuristicResult::default();
    // SAFETY: the caller's descriptors; result is a valid out-pointer.
    let st = unsafe {
        check(
            x.handle,
            x.desc,
            x.a_desc,
            x.b_desc,
            x.c_desc,
            x.d_desc,
            &algo,
            &mut result,
        )
    };
    if st != STATUS_SUCCESS {
        report(format!("cublasLtMatmulAlgoCheck returned {st}"));
        return None;
    }
    // Alignment the algorithm needs of each pointer (16 bytes when the library won't say).
    let mut min_align = [16u32; 4];
    if let Some(cap) = LT.cap_get() {
        for (i, slot) in min_align.iter_mut().enumerate() {
            let mut v = 0u32;
            let mut written = 0usize;
            // SAFETY: a 4-byte attribute into a u32.
            let st = unsafe {
                cap(
                    &algo,
                    CAP_MIN_ALIGNMENT_A_BYTES + i as i32,
                    (&mut v as *mut u32).cast(),
                    4,
                    &mut written,
                )
            };
            if st == STATUS_SUCCESS && v > 0 {
                *slot = v;
            }
        }
    }
    debug!(
        "cuBLASLt: {} checked: workspace {} bytes, alignment {:?}",
        cfg.solution_name(),
        result.workspace_size,
        min_align
    );
    Some(Prepared {
        algo,
        workspace: result.workspace_size,
        min_align,
    })
}
