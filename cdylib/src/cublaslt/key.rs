//! The key of a `cublasLtMatmul` call, read from the caller's matmul and layout
//! descriptors (`cublasLtMatmulDescGetAttribute`, `cublasLtMatrixLayoutGetAttribute`).

use std::ffi::c_void;

use tunedblas_core::cublaslt::*;

use super::real::LT;
use crate::log::debug;
use crate::lt::LtCall;

/// One attribute of a descriptor, as a `T` of exactly the size the library stores.
#[inline]
unsafe fn attr<T: Copy + Default>(f: GetAttributeFn, obj: *mut c_void, which: i32) -> Option<T> {
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

/// A layout's attributes: six reads for a single matrix (each read is a library call, the
/// bulk of the interposer's cost per call), two or three more for a batch.
unsafe fn read_layout(f: GetAttributeFn, l: MatrixLayout) -> Option<LayoutAttrs> {
    unsafe {
        let batch = attr::<i32>(f, l, LAYOUT_BATCH_COUNT)?;
        let stride = if batch > 1 {
            // Batches through arrays of pointers (CUDA 13's batch mode) are not served;
            // a library without the attribute has only strided batches.
            if attr::<i32>(f, l, LAYOUT_BATCH_MODE).is_some_and(|m| m != 0) {
                return None;
            }
            attr::<i64>(f, l, LAYOUT_STRIDED_BATCH_OFFSET)?
        } else {
            0
        };
        Some(LayoutAttrs {
            dtype: attr::<u32>(f, l, LAYOUT_TYPE)? as i32,
            order: attr::<i32>(f, l, LAYOUT_ORDER)?,
            rows: attr::<u64>(f, l, LAYOUT_ROWS)?,
            cols: attr::<u64>(f, l, LAYOUT_COLS)?,
            ld: attr::<i64>(f, l, LAYOUT_LD)?,
            batch,
            stride,
        })
    }
}

/// The key of a call, or `None` when it is not one tunedblas serves.
pub unsafe fn read_key(x: &LtCall) -> Option<LtKey> {
    if [x.desc, x.a_desc, x.b_desc, x.c_desc, x.d_desc]
        .iter()
        .any(|p| p.is_null())
    {
        return None;
    }
    let dg = LT.desc_get()?;
    let lg = LT.layout_get()?;
    unsafe {
        let mut mm = MatmulAttrs {
            compute: attr::<i32>(dg, x.desc, DESC_COMPUTE_TYPE)?,
            scale: attr::<i32>(dg, x.desc, DESC_SCALE_TYPE)?,
            pointer_mode: attr::<i32>(dg, x.desc, DESC_POINTER_MODE)?,
            trans_a: attr::<i32>(dg, x.desc, DESC_TRANSA)?,
            trans_b: attr::<i32>(dg, x.desc, DESC_TRANSB)?,
            epilogue: attr::<u32>(dg, x.desc, DESC_EPILOGUE)?,
            bias_type: -1,
            sm_count: attr::<i32>(dg, x.desc, DESC_SM_COUNT_TARGET).unwrap_or(0),
        };
        let a = read_layout(lg, x.a_desc)?;
        let b = read_layout(lg, x.b_desc)?;
        let c = read_layout(lg, x.c_desc)?;
        // PyTorch passes one descriptor for C and D.
        let d = if x.d_desc == x.c_desc {
            c
        } else {
            read_layout(lg, x.d_desc)?
        };
        if epilogue_has_bias(mm.epilogue) {
            // -1 (unset) means the bias has D's type.
            let t = attr::<i32>(dg, x.desc, DESC_BIAS_DATA_TYPE)?;
            mm.bias_type = if t < 0 { d.dtype } else { t };
        }
        match key_from_attrs(&mm, &a, &b, &c, &d) {
            Ok(k) => Some(k),
            Err(why) => {
                debug!("cuBLASLt: passing a call through: {why}");
                None
            }
        }
    }
}
