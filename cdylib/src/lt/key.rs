//! Reading a problem from Lt descriptors, for either library: one attribute at a time
//! through the library's `GetAttribute`, each into a value of exactly the size the library
//! stores. The attribute *numbers* differ between cuBLASLt and hipBLASLt ([`LayoutIds`]).

use std::ffi::c_void;

use tunedblas_core::cublaslt::*;

/// One attribute of a descriptor, as a `T` of exactly the size the library stores.
#[inline]
pub unsafe fn attr<T: Copy + Default>(
    f: GetAttributeFn,
    obj: *mut c_void,
    which: i32,
) -> Option<T> {
    let mut v = T::default();
    let mut written = 0usize;
    // SAFETY: `v` has size_of::<T>() bytes; the library writes at most that.
    let st = unsafe {
        f(
            obj,
            which,
            (&mut v as *mut T).cast(),
            std::mem::size_of::<T>(),
            &mut written,
        )
    };
    (st == STATUS_SUCCESS).then_some(v)
}

/// A library's numbers for the matrix layout attributes.
pub struct LayoutIds {
    pub batch_count: i32,
    pub stride: i32,
    pub dtype: i32,
    pub order: i32,
    pub rows: i32,
    pub cols: i32,
    pub ld: i32,
    /// cuBLASLt 13's batch mode (arrays of pointers are not served); hipBLASLt has none.
    pub batch_mode: Option<i32>,
}

/// A layout's attributes: six reads for a single matrix (each read is a library call, the
/// bulk of the interposer's cost per call), two or three more for a batch.
///
/// # Safety
/// `f` is the library's layout `GetAttribute`, `l` a live layout of that library.
pub unsafe fn read_layout(
    f: GetAttributeFn,
    l: *mut c_void,
    ids: &LayoutIds,
) -> Option<LayoutAttrs> {
    unsafe {
        let batch = attr::<i32>(f, l, ids.batch_count)?;
        let stride = if batch > 1 {
            // Batches through arrays of pointers (CUDA 13's batch mode) are not served;
            // a library without the attribute has only strided batches.
            if let Some(mode) = ids.batch_mode {
                if attr::<i32>(f, l, mode).is_some_and(|m| m != 0) {
                    return None;
                }
            }
            attr::<i64>(f, l, ids.stride)?
        } else {
            0
        };
        Some(LayoutAttrs {
            dtype: attr::<u32>(f, l, ids.dtype)? as i32,
            order: attr::<i32>(f, l, ids.order)?,
            rows: attr::<u64>(f, l, ids.rows)?,
            cols: attr::<u64>(f, l, ids.cols)?,
            ld: attr::<i64>(f, l, ids.ld)?,
            batch,
            stride,
        })
    }
}

/// The four layouts of a call (C and D share one read when the caller passed one
/// descriptor for both, as PyTorch does).
///
/// # Safety
/// As [`read_layout`], for each layout.
pub unsafe fn read_layouts(
    f: GetAttributeFn,
    [a, b, c, d]: [*mut c_void; 4],
    ids: &LayoutIds,
) -> Option<[LayoutAttrs; 4]> {
    unsafe {
        let la = read_layout(f, a, ids)?;
        let lb = read_layout(f, b, ids)?;
        let lc = read_layout(f, c, ids)?;
        let ld = if d == c { lc } else { read_layout(f, d, ids)? };
        Some([la, lb, lc, ld])
    }
}
