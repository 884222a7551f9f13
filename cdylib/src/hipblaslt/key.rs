//! The key of a `hipblasLtMatmul` call: the types its descriptor was made with
//! ([`super::descs`]), its attributes and the four layouts, in hipBLASLt's numbers, mapped
//! into the Lt key (`tunedblas_core::hipblaslt`).

use tunedblas_core::abi::*;
use tunedblas_core::cublaslt::{epilogue_has_bias, key_from_attrs, LtKey};
use tunedblas_core::hipblaslt::HipMatmul;

use super::descs;
use super::real::HIPLT;
use crate::log::debug;
use crate::lt::key::{attr, read_layouts, LayoutIds};
use crate::lt::LtCall;

/// hipBLASLt's layout attribute numbers.
const LAYOUT: LayoutIds = LayoutIds {
    batch_count: HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
    stride: HIPBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
    dtype: HIPBLASLT_MATRIX_LAYOUT_TYPE,
    order: HIPBLASLT_MATRIX_LAYOUT_ORDER,
    rows: HIPBLASLT_MATRIX_LAYOUT_ROWS,
    cols: HIPBLASLT_MATRIX_LAYOUT_COLS,
    ld: HIPBLASLT_MATRIX_LAYOUT_LD,
    batch_mode: None,
};

/// The key of a call, or `None` when it is not one tunedblas serves.
///
/// # Safety
/// `x` holds a caller's live descriptors.
pub unsafe fn read_key(x: &LtCall) -> Option<LtKey> {
    if [x.desc, x.a_desc, x.b_desc, x.c_desc, x.d_desc]
        .iter()
        .any(|p| p.is_null())
    {
        return None;
    }
    let Some((compute, scale)) = descs::types_of(x.desc) else {
        debug!(
            "hipBLASLt: passing a call through: its descriptor was not made through the interposer"
        );
        return None;
    };
    let dg = HIPLT.desc_get()?;
    let lg = HIPLT.layout_get()?;
    unsafe {
        let mut hip = HipMatmul {
            compute,
            scale,
            trans_a: attr::<i32>(dg, x.desc, HIPBLASLT_MATMUL_DESC_TRANSA)?,
            trans_b: attr::<i32>(dg, x.desc, HIPBLASLT_MATMUL_DESC_TRANSB)?,
            epilogue: attr::<u32>(dg, x.desc, HIPBLASLT_MATMUL_DESC_EPILOGUE)?,
            bias_type: -1,
            pointer_mode: attr::<i32>(dg, x.desc, HIPBLASLT_MATMUL_DESC_POINTER_MODE)?,
        };
        let [a, b, c, d] = read_layouts(lg, [x.a_desc, x.b_desc, x.c_desc, x.d_desc], &LAYOUT)?;
        if epilogue_has_bias(hip.epilogue) {
            // Unset (or an invalid value) means the bias has D's type.
            let t = attr::<i32>(dg, x.desc, HIPBLASLT_MATMUL_DESC_BIAS_DATA_TYPE)?;
            hip.bias_type = if (0..255).contains(&t) { t } else { d.dtype };
        }
        let key = hip
            .to_lt()
            .and_then(|mm| key_from_attrs(&mm, &a, &b, &c, &d));
        match key {
            Ok(k) => Some(k),
            Err(why) => {
                debug!("hipBLASLt: passing a call through: {why}");
                None
            }
        }
    }
}
