//! Calls into hipBLASLt's C++ extension API (`hipblaslt_ext`), which takes and fills
//! `std::vector`s.
//!
//! Nothing is guessed: the functions are found by their mangled names (src/abi.rs, checked
//! by tests/conformance against what g++ makes of hipBLASLt 7.1.1's `hipblaslt-ext.hpp`
//! and what the real library exports), and a vector is libstdc++'s: three pointers (first
//! element, one past the last, one past the storage), which the conformance suite checks
//! with the real libstdc++ headers. Storage is allocated and freed with libstdc++'s own
//! `operator new` / `operator delete`, as `std::allocator` does, so the library may grow or
//! free what we pass and we may free what it grew.
//!
//! A C++ exception thrown through these calls cannot be caught from Rust (the process
//! would abort); hipBLASLt's extension functions report errors by status.

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

    /// Frees the storage (libstdc++'s `operator delete`).
    fn free(&mut self) {
        if !self.start.is_null() {
            if let Some(delete) = HIPLT.cxx_delete() {
                // SAFETY: storage made by `operator new` (ours or the library's).
                unsafe { delete(self.start.cast()) };
            }
        }
        *self = Self::EMPTY;
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
    let (Some(from_index), Some(index_of), Some(new)) = (
        HIPLT.algos_from_index(),
        HIPLT.index_from_algo(),
        HIPLT.cxx_new(),
    ) else {
        return Err("this hipBLASLt lacks the hipblaslt_ext functions (or libstdc++'s operator new is not loaded)".into());
    };
    // SAFETY: operator new of 4 bytes, checked below.
    let p = unsafe { new(std::mem::size_of::<i32>()) } as *mut i32;
    if p.is_null() {
        return Err("operator new failed".into());
    }
    // SAFETY: 4 fresh bytes.
    unsafe { p.write(index) };
    let mut indices = CxxVec {
        start: p,
        // SAFETY: one past the one element.
        finish: unsafe { p.add(1) },
        end_of_storage: unsafe { p.add(1) },
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
    indices.free();
    results.free();
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
