//! Calls into hipBLASLt's C++ extension API (`hipblaslt_ext`): an index back into an
//! algorithm, read back, and checked against a call.
//!
//! The functions are found by their mangled names (src/abi.rs, checked by tests/conformance
//! against what g++ makes of hipBLASLt 7.1.1's `hipblaslt-ext.hpp` and what the real
//! library exports) and called through the exception guard ([`super::guard`]): C++ code
//! that owns the `std::vector`s and turns a thrown exception into a status.

use tunedblas_core::abi::*;

use super::guard::{self, THREW};
use super::real::HIPLT;
use crate::lt::LtCall;

/// A `hipblaslt_ext` function of the served build (the table's own accessor, in its scope),
/// as the address the guard calls it by.
fn cxx(f: Option<super::real::CxxFn>) -> Option<*mut std::ffi::c_void> {
    f.map(|f| f as *mut std::ffi::c_void)
}

fn threw(what: &str) -> String {
    format!("{what} threw a C++ exception")
}

/// The algorithm of hipBLASLt index `index` for this handle's device
/// (`hipblaslt_ext::getAlgosFromIndex`), read back with `getIndexFromAlgo`.
///
/// # Safety
/// `handle` is a caller's live hipBLASLt handle.
pub unsafe fn algo_from_index(
    handle: HipblasLtHandle,
    index: i32,
) -> Result<HipblasLtMatmulAlgo, String> {
    let Some(g) = guard::get() else {
        return Err(guard::why_not().into());
    };
    let (Some(from_index), Some(index_of)) =
        (cxx(HIPLT.algos_from_index()), cxx(HIPLT.index_from_algo()))
    else {
        return Err("this hipBLASLt lacks the hipblaslt_ext functions".into());
    };
    let mut algo = HipblasLtMatmulAlgo::default();
    // SAFETY: the guard calls getAlgosFromIndex with the caller's handle; `algo` is an
    // out-pointer.
    match unsafe { (g.algo_from_index)(from_index, handle, index, &mut algo) } {
        0 => {}
        -1 => return Err("this hipBLASLt build has no algorithm of that index".into()),
        THREW => return Err(threw("getAlgosFromIndex")),
        st => return Err(format!("getAlgosFromIndex returned status {st}")),
    }
    let mut back = 0;
    // SAFETY: an algorithm hipBLASLt just made; `back` is an out-pointer.
    if unsafe { (g.index_of)(index_of, &mut algo, &mut back) } == THREW {
        return Err(threw("getIndexFromAlgo"));
    }
    if back != index {
        return Err(format!(
            "getAlgosFromIndex gave an algorithm whose index reads back as {back}"
        ));
    }
    Ok(algo)
}

/// The workspace `algo` needs for this call's problem, if it can solve it
/// (`hipblaslt_ext::matmulIsAlgoSupported`, as PyTorch TunableOp checks before each use).
///
/// # Safety
/// `x` holds a caller's live handle and descriptors.
pub unsafe fn workspace_if_supported(
    x: &LtCall,
    algo: &mut HipblasLtMatmulAlgo,
) -> Result<usize, String> {
    let Some(g) = guard::get() else {
        return Err(guard::why_not().into());
    };
    let Some(supported) = cxx(HIPLT.is_supported()) else {
        return Err("this hipBLASLt lacks hipblaslt_ext::matmulIsAlgoSupported".into());
    };
    let mut workspace = 0usize;
    // SAFETY: the caller's handle and descriptors; out-pointers to locals.
    let st = unsafe {
        (g.is_supported)(
            supported,
            x.handle,
            x.desc,
            x.alpha,
            x.a_desc,
            x.b_desc,
            x.beta,
            x.c_desc,
            x.d_desc,
            algo,
            &mut workspace,
        )
    };
    match st {
        HIPBLAS_STATUS_SUCCESS => Ok(workspace),
        THREW => Err(threw("matmulIsAlgoSupported")),
        st => Err(format!("matmulIsAlgoSupported returned {st}")),
    }
}
