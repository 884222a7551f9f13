//! Calls into hipBLASLt's C++ extension API (`hipblaslt_ext`), which takes and fills
//! `std::vector`s.
//!
//! Nothing is guessed: the functions are found by their mangled names (src/abi.rs, checked
//! by tests/conformance against what g++ makes of hipBLASLt 7.1.1's `hipblaslt-ext.hpp`
//! and what the real library exports), and a vector is libstdc++'s: three pointers (first
//! element, one past the last, one past the storage), which the conformance suite checks
//! with the real libstdc++ headers.
//!
//! Memory: the index vector points at our own memory (hipBLASLt only reads it); the
//! result vector starts empty and hipBLASLt grows it with *its* `operator new` (the
//! process's, which a program may replace), so we never free it with another one: its
//! storage (one result, 48 bytes, once per row) is left to the process.
//!
//! A C++ exception thrown through these calls cannot be caught from Rust: the process
//! would abort. hipBLASLt 7.1.1 reports its own errors by status; what could still throw
//! is the standard library inside it (an allocation failure).

use tunedblas_core::abi::*;

use super::real::HIPLT;
use crate::lt::LtCall;

/// libstdc++'s `std::vector<T>`: `_M_start`, `_M_finish`, `_M_end_of_storage`.
#[repr(C)]
pub struct CxxVec<T> {
    start: *mut T,
    finish: *mut T,
    end_of_storage: *mut T,
}

impl<T: Copy> CxxVec<T> {
    const EMPTY: CxxVec<T> = CxxVec {
        start: std::ptr::null_mut(),
        finish: std::ptr::null_mut(),
        end_of_storage: std::ptr::null_mut(),
    };

    /// The elements, if the three pointers make sense.
    fn items(&self) -> Option<&[T]> {
        if self.start.is_null() {
            return Some(&[]);
        }
        let (s, f, e) = (
            self.start as usize,
            self.finish as usize,
            self.end_of_storage as usize,
        );
        let size = std::mem::size_of::<T>();
        if f < s || e < f || (f - s) % size != 0 || s % std::mem::align_of::<T>() != 0 {
            return None;
        }
        // SAFETY: [start, finish) holds (f - s) / size initialised elements of T.
        Some(unsafe { std::slice::from_raw_parts(self.start, (f - s) / size) })
    }
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
    let (Some(from_index), Some(index_of)) = (HIPLT.algos_from_index(), HIPLT.index_from_algo())
    else {
        return Err("this hipBLASLt lacks the hipblaslt_ext functions".into());
    };
    let mut one = [index];
    let mut indices = CxxVec {
        start: one.as_mut_ptr(),
        // SAFETY: one past the one element.
        finish: unsafe { one.as_mut_ptr().add(1) },
        end_of_storage: unsafe { one.as_mut_ptr().add(1) },
    };
    let mut results: CxxVec<HipblasLtMatmulHeuristicResult> = CxxVec::EMPTY;
    // SAFETY: both vectors are libstdc++ vectors by reference; the handle is the caller's.
    let st = unsafe {
        from_index(
            handle,
            (&mut indices as *mut CxxVec<i32>).cast(),
            (&mut results as *mut CxxVec<HipblasLtMatmulHeuristicResult>).cast(),
        )
    };
    let found = match results.items() {
        None => Err("getAlgosFromIndex returned a vector that is not one".to_string()),
        Some(_) if st != HIPBLAS_STATUS_SUCCESS => {
            Err(format!("getAlgosFromIndex returned status {st}"))
        }
        Some([]) => Err("this hipBLASLt build has no algorithm of that index".into()),
        Some([first, ..]) => Ok(first.algo),
    };
    // `indices` is ours (a local); `results` is hipBLASLt's and stays allocated (above).
    let _ = &mut indices;
    let mut algo = found?;
    // SAFETY: an algorithm hipBLASLt just made.
    let back = unsafe { index_of(&mut algo) };
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
    let Some(supported) = HIPLT.is_supported() else {
        return Err("this hipBLASLt lacks hipblaslt_ext::matmulIsAlgoSupported".into());
    };
    let mut workspace = 0usize;
    // SAFETY: the caller's handle and descriptors; out-pointers to locals.
    let st = unsafe {
        supported(
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
    if st == HIPBLAS_STATUS_SUCCESS {
        Ok(workspace)
    } else {
        Err(format!("matmulIsAlgoSupported returned {st}"))
    }
}
