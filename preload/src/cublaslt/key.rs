//! The key of a `cublasLtMatmul` call: from the words its descriptor and layouts were made
//! and set with ([`super::objects`]), or, for objects not made through the interposer (or
//! given a kept attribute in a form not read there), through
//! `cublasLtMatmulDescGetAttribute` and `cublasLtMatrixLayoutGetAttribute`; and its call
//! key, the four words a served call is looked up by.

use tunedblas_core::cublaslt::*;

use super::objects::{DESCS, LAYOUTS};
use super::real::LT;
use crate::log::debug;
use crate::lt::key::{attr, read_layouts, LayoutIds};
use crate::lt::objects::{desc, key_of, layout, GETTERS};
use crate::lt::LtCall;

/// cuBLASLt's layout attribute numbers.
const LAYOUT: LayoutIds = LayoutIds {
    batch_count: LAYOUT_BATCH_COUNT,
    stride: LAYOUT_STRIDED_BATCH_OFFSET,
    dtype: LAYOUT_TYPE,
    order: LAYOUT_ORDER,
    rows: LAYOUT_ROWS,
    cols: LAYOUT_COLS,
    ld: LAYOUT_LD,
    batch_mode: Some(LAYOUT_BATCH_MODE),
};

/// The call key of a call (`crate::lt::key::call_key`).
#[inline(always)]
pub fn call_key(x: &LtCall) -> CallKey {
    crate::lt::key::call_key(&DESCS, &LAYOUTS, x)
}

/// The key of a call, or `None` when it is not one tunedblas serves.
///
/// # Safety
/// `x` holds a caller's live descriptors.
pub unsafe fn read_key(x: &LtCall) -> Option<LtKey> {
    let kept = crate::lt::key::kept(&DESCS, &LAYOUTS, x).filter(|(d, l)| {
        d[desc::FLAGS] & GETTERS == 0 && l.iter().all(|l| l[layout::FLAGS] & GETTERS == 0)
    });
    let key = match kept {
        Some((d, [a, b, c, dd])) => key_of(&d, [&a, &b, &c, &dd]),
        // SAFETY: per the contract.
        None => unsafe { read_key_through_getters(x)? },
    };
    match key {
        Ok(k) => Some(k),
        Err(why) => {
            debug!("cuBLASLt: passing a call through: {why}");
            None
        }
    }
}

/// The key read through the library's getters (`None`: a read failed, or a batch of
/// pointer arrays).
///
/// # Safety
/// `x` holds a caller's live descriptors.
unsafe fn read_key_through_getters(x: &LtCall) -> Option<Result<LtKey, &'static str>> {
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
        let [a, b, c, d] = read_layouts(lg, [x.a_desc, x.b_desc, x.c_desc, x.d_desc], &LAYOUT)?;
        if epilogue_has_bias(mm.epilogue) {
            // -1 (unset) means the bias has D's type.
            let t = attr::<i32>(dg, x.desc, DESC_BIAS_DATA_TYPE)?;
            mm.bias_type = if t < 0 { d.dtype } else { t };
        }
        Some(key_from_attrs(&mm, &a, &b, &c, &d))
    }
}
