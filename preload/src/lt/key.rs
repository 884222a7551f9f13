//! Reading a call's problem, for either library: its call key and its objects' kept words
//! (`super::objects`), and, for cuBLASLt objects not made through the interposer, one
//! attribute at a time through the library's `GetAttribute`, each into a value of exactly
//! the size the library stores. The attribute *numbers* differ between cuBLASLt and
//! hipBLASLt ([`LayoutIds`]).

use std::ffi::c_void;

use tunedblas_core::cublaslt::*;

use super::objects::{desc, layout, Descs, Layouts};
use super::LtCall;

/// A call's call key: its descriptor's word and its layouts' (C's read once when D is the
/// same layout, as PyTorch passes it). An object unknown or not packed gives a word of 0,
/// and such a key matches no row (the call is looked up the long way).
#[inline(always)]
pub fn call_key(descs: &Descs, layouts: &Layouts, x: &LtCall) -> CallKey {
    let c = layouts.call_word(x.c_desc);
    [
        descs.call_word(x.desc),
        layouts.call_word(x.a_desc),
        layouts.call_word(x.b_desc),
        c,
        if x.d_desc == x.c_desc {
            c
        } else {
            layouts.call_word(x.d_desc)
        },
    ]
}

/// A layout's words and a descriptor's, as kept.
type Kept = ([u64; desc::WORDS], [[u64; layout::WORDS]; 4]);

/// The kept words of a call's descriptor and four layouts, if all are known.
#[inline]
pub fn kept(descs: &Descs, layouts: &Layouts, x: &LtCall) -> Option<Kept> {
    let d = descs.get(x.desc)?;
    let c = layouts.get(x.c_desc)?;
    let dd = if x.d_desc == x.c_desc {
        c
    } else {
        layouts.get(x.d_desc)?
    };
    Some((d, [layouts.get(x.a_desc)?, layouts.get(x.b_desc)?, c, dd]))
}

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
