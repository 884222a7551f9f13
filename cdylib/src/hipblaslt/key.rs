//! The key of a `hipblasLtMatmul` call: what its descriptor and layouts were made with
//! ([`super::objects`]), the descriptor's attributes, in hipBLASLt's numbers, mapped into
//! the Lt key (`tunedblas_core::hipblaslt`).

use std::ffi::c_void;

use tunedblas_core::abi::*;
use tunedblas_core::cublaslt::{epilogue_has_bias, key_from_attrs, LayoutAttrs, LtKey};
use tunedblas_core::hipblaslt::HipMatmul;

use super::objects::{DESCS, LAYOUTS};
use super::real::HIPLT;
use crate::log::debug;
use crate::lt::key::attr;
use crate::lt::LtCall;

/// A layout as its create and set-attribute calls left it (fields by attribute number).
fn layout(l: *mut c_void) -> Option<LayoutAttrs> {
    let f = LAYOUTS.get(l)?;
    let at = |a: i32| f[a as usize];
    Some(LayoutAttrs {
        batch: at(HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT) as i32,
        stride: at(HIPBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) as i64,
        dtype: at(HIPBLASLT_MATRIX_LAYOUT_TYPE) as i32,
        order: at(HIPBLASLT_MATRIX_LAYOUT_ORDER) as i32,
        rows: at(HIPBLASLT_MATRIX_LAYOUT_ROWS),
        cols: at(HIPBLASLT_MATRIX_LAYOUT_COLS),
        ld: at(HIPBLASLT_MATRIX_LAYOUT_LD) as i64,
    })
}

/// The fields a new layout starts with, by attribute number (batch 1, stride 0,
/// column-major).
pub fn new_layout(dtype: i32, rows: u64, cols: u64, ld: i64) -> [u64; 7] {
    let mut f = [0u64; 7];
    f[HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT as usize] = 1;
    f[HIPBLASLT_MATRIX_LAYOUT_TYPE as usize] = dtype as u32 as u64;
    f[HIPBLASLT_MATRIX_LAYOUT_ORDER as usize] = HIPBLASLT_ORDER_COL as u64;
    f[HIPBLASLT_MATRIX_LAYOUT_ROWS as usize] = rows;
    f[HIPBLASLT_MATRIX_LAYOUT_COLS as usize] = cols;
    f[HIPBLASLT_MATRIX_LAYOUT_LD as usize] = ld as u64;
    f
}

/// A layout attribute the caller set, as the field it is kept in: the value read with the
/// attribute's own size (4 bytes: batch count, type, order; 8: the rest), sign-extended
/// where the attribute is signed. `None` for an attribute not kept or a size that is not
/// the attribute's (the library refuses those too).
///
/// # Safety
/// `buf` points to `size` readable bytes (the caller's own set-attribute arguments).
pub unsafe fn layout_field(attr: i32, buf: *const c_void, size: usize) -> Option<(usize, u64)> {
    if buf.is_null() || !(0..7).contains(&attr) {
        return None;
    }
    let four = matches!(
        attr,
        HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT
            | HIPBLASLT_MATRIX_LAYOUT_TYPE
            | HIPBLASLT_MATRIX_LAYOUT_ORDER
    );
    // SAFETY: per the contract.
    let v = unsafe { crate::lt::objects::field_value(buf, size, four, true) }?;
    Some((attr as usize, v))
}

/// Where a descriptor's kept fields hold what: 0 compute type, 1 scale type, and this: 1
/// once an attribute the key does not hold was set.
pub const DESC_UNSERVED: usize = 2;

/// The matmul descriptor attributes the key holds (read back at each call) or that cannot
/// change the kernel (the bias vector's address); setting any other one (scale pointers
/// and modes, compute input types, amax, the epilogue's aux buffer, ...) makes the
/// descriptor's calls pass through: a tuned index checked once per key must not run a
/// problem the key does not describe.
pub fn keyed_desc_attribute(attr: i32) -> bool {
    matches!(
        attr,
        HIPBLASLT_MATMUL_DESC_TRANSA
            | HIPBLASLT_MATMUL_DESC_TRANSB
            | HIPBLASLT_MATMUL_DESC_EPILOGUE
            | HIPBLASLT_MATMUL_DESC_BIAS_POINTER
            | HIPBLASLT_MATMUL_DESC_BIAS_DATA_TYPE
            | HIPBLASLT_MATMUL_DESC_POINTER_MODE
    )
}

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
    let known = || {
        let types = DESCS.get(x.desc)?;
        let c = layout(x.c_desc)?;
        let d = if x.d_desc == x.c_desc {
            c
        } else {
            layout(x.d_desc)?
        };
        Some((types, [layout(x.a_desc)?, layout(x.b_desc)?, c, d]))
    };
    let Some((types, [a, b, c, d])) = known() else {
        debug!("hipBLASLt: passing a call through: a descriptor or layout not made through the interposer");
        return None;
    };
    if types[DESC_UNSERVED] != 0 {
        debug!("hipBLASLt: passing a call through: its descriptor has an attribute the key does not hold");
        return None;
    }
    if x.c != x.d.cast_const() {
        // An algorithm is checked with C and D at one address (matmulIsAlgoSupported sees
        // no pointers): a call writing D elsewhere keeps its own.
        debug!("hipBLASLt: passing a call through: C and D differ");
        return None;
    }
    let dg = HIPLT.desc_get()?;
    unsafe {
        let mut hip = HipMatmul {
            compute: types[0] as i32,
            scale: types[1] as i32,
            trans_a: attr::<i32>(dg, x.desc, HIPBLASLT_MATMUL_DESC_TRANSA)?,
            trans_b: attr::<i32>(dg, x.desc, HIPBLASLT_MATMUL_DESC_TRANSB)?,
            epilogue: attr::<u32>(dg, x.desc, HIPBLASLT_MATMUL_DESC_EPILOGUE)?,
            bias_type: -1,
            pointer_mode: attr::<i32>(dg, x.desc, HIPBLASLT_MATMUL_DESC_POINTER_MODE)?,
        };
        if epilogue_has_bias(hip.epilogue) {
            // Unset (HIPBLASLT_DATATYPE_INVALID, 255) means the bias has D's type.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_attributes_are_read_with_their_own_sizes() {
        let ld: i64 = 4096;
        let p = (&ld as *const i64).cast();
        assert_eq!(
            unsafe { layout_field(HIPBLASLT_MATRIX_LAYOUT_LD, p, 8) },
            Some((6, 4096))
        );
        assert_eq!(
            unsafe { layout_field(HIPBLASLT_MATRIX_LAYOUT_LD, p, 4) },
            None
        );
        // A larger buffer: its first bytes, as the library reads it.
        let wide: [i64; 2] = [2048, -1];
        let p = wide.as_ptr().cast();
        assert_eq!(
            unsafe { layout_field(HIPBLASLT_MATRIX_LAYOUT_LD, p, 16) },
            Some((6, 2048))
        );
        assert_eq!(
            unsafe { layout_field(HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT, p, 8) },
            Some((0, 2048))
        );
        let batch: i32 = 3;
        let p = (&batch as *const i32).cast();
        assert_eq!(
            unsafe { layout_field(HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT, p, 4) },
            Some((0, 3))
        );
        assert_eq!(unsafe { layout_field(7, p, 4) }, None);
        assert_eq!(unsafe { layout_field(0, std::ptr::null(), 4) }, None);
        let f = new_layout(HIP_R_16BF, 64, 32, 80);
        LAYOUTS.created(0x7000 as *mut c_void, f);
        let l = layout(0x7000 as *mut c_void).unwrap();
        assert_eq!(l, LayoutAttrs::col(HIP_R_16BF, 64, 32, 80));
    }
}
