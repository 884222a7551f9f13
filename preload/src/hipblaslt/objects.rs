//! hipBLASLt's descriptors and layouts as their create and set calls left them
//! (`crate::lt::objects`), in cuBLASLt's numbers.
//!
//! hipBLASLt 7.1.1 takes a matmul descriptor's compute and scale types at
//! `hipblasLtMatmulDescCreate` and has no attribute to read them; and its
//! `hipblasLtMatrixLayoutGetAttribute` answers only the batch count and stride: type, order,
//! rows, columns and leading dimension return `HIPBLAS_STATUS_INVALID_VALUE` (measured on
//! the real library, tests/conformance/hipblaslt.rs). Yet all of them make the key. So the
//! interposer wraps the creates, the set-attribute calls and the destroys, and keeps them;
//! the descriptor's transposes, epilogue, pointer mode and bias type too, so a call's key
//! needs no getter either (issue 29). A descriptor given an attribute the key does not hold
//! is marked, and its calls pass through.

use std::ffi::c_void;

use tunedblas_core::abi::*;
use tunedblas_core::cublaslt::{DescField, MatmulAttrs};
use tunedblas_core::hipblaslt::{compute_type, operation};

use crate::lt::objects::{
    desc, field_value, layout, new_desc, signed, Change, Descs, Layouts, GETTERS, UNSERVED,
    UNSERVED_COMPUTE,
};

pub static DESCS: Descs = Descs::new();
pub static LAYOUTS: Layouts = Layouts::new();

/// hipBLASLt's objects, to the wrapped create, set and destroy calls (`exports.rs`).
pub struct Kept;

impl crate::lt::objects::Kinds for Kept {
    const LIBRARY: &'static str = "hipBLASLt";
    const DESCS: &'static Descs = &DESCS;
    const LAYOUTS: &'static Layouts = &LAYOUTS;

    /// The compute type in cuBLASLt's numbers (one tunedblas does not serve is marked).
    fn new_desc(compute: i32, scale: i32) -> (MatmulAttrs, u64) {
        match compute_type(compute) {
            Some(c) => (new_desc(c, scale), 0),
            None => (new_desc(compute, scale), UNSERVED_COMPUTE),
        }
    }

    /// The attributes the key holds, mapped to cuBLASLt's numbers (transposes; a bias type
    /// outside 0..255, hipBLASLt's unset, is D's); the bias vector's address cannot change
    /// the kernel; any other attribute marks the descriptor. hipBLASLt reads a larger
    /// buffer's first bytes, and so is the value read here.
    unsafe fn desc_set(attr: i32, buf: *const c_void, size: usize) -> Change {
        let (i, is_signed, field) = match attr {
            HIPBLASLT_MATMUL_DESC_TRANSA => (desc::TRANSA, true, Some(DescField::TRANS_A)),
            HIPBLASLT_MATMUL_DESC_TRANSB => (desc::TRANSB, true, Some(DescField::TRANS_B)),
            HIPBLASLT_MATMUL_DESC_EPILOGUE => (desc::EPILOGUE, false, None),
            HIPBLASLT_MATMUL_DESC_BIAS_DATA_TYPE => (desc::BIAS_TYPE, true, None),
            HIPBLASLT_MATMUL_DESC_POINTER_MODE => {
                (desc::POINTER_MODE, true, Some(DescField::POINTER_MODE))
            }
            HIPBLASLT_MATMUL_DESC_BIAS_POINTER => return Change::None,
            _ => return Change::Flag(UNSERVED),
        };
        // SAFETY: per the contract.
        let Some(v) = (unsafe { field_value(buf, size, true, is_signed) }) else {
            return Change::Flag(GETTERS);
        };
        let v = match i {
            desc::TRANSA | desc::TRANSB => signed(operation(v as i32)),
            desc::BIAS_TYPE if !(0..255).contains(&(v as i32)) => signed(-1),
            _ => v,
        };
        match field {
            Some(f) => Change::Field(i, v, f),
            None => Change::Word(i, v),
        }
    }

    /// The transposes in cuBLASLt's numbers, a larger buffer's first 4 bytes as
    /// `desc_set` reads them.
    #[inline(always)]
    unsafe fn desc_field(attr: i32, buf: *const c_void, size: usize) -> Option<(DescField, i32)> {
        let field = match attr {
            HIPBLASLT_MATMUL_DESC_TRANSA => DescField::TRANS_A,
            HIPBLASLT_MATMUL_DESC_TRANSB => DescField::TRANS_B,
            _ => return None,
        };
        // SAFETY: per the contract, 4 bytes checked.
        (size >= 4 && !buf.is_null()).then(|| {
            (
                field,
                operation(unsafe { buf.cast::<i32>().read_unaligned() }),
            )
        })
    }

    /// Each layout attribute at its hipBLASLt number, read with its own size (4 bytes:
    /// batch count, type, order; 8: the rest); a buffer smaller than that was refused.
    unsafe fn layout_set(attr: i32, buf: *const c_void, size: usize) -> Change {
        let (i, four) = match attr {
            HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT => (layout::BATCH, true),
            HIPBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET => (layout::STRIDE, false),
            HIPBLASLT_MATRIX_LAYOUT_TYPE => (layout::TYPE, true),
            HIPBLASLT_MATRIX_LAYOUT_ORDER => (layout::ORDER, true),
            HIPBLASLT_MATRIX_LAYOUT_ROWS => (layout::ROWS, false),
            HIPBLASLT_MATRIX_LAYOUT_COLS => (layout::COLS, false),
            HIPBLASLT_MATRIX_LAYOUT_LD => (layout::LD, false),
            _ => return Change::None,
        };
        // SAFETY: per the contract.
        match unsafe { field_value(buf, size, four, true) } {
            Some(v) => Change::Word(i, v),
            None => Change::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lt::objects::{key_of, Kinds};
    use tunedblas_core::cublaslt::{LayoutAttrs, LtKey, R_16BF};

    #[test]
    fn set_attributes_are_kept_in_cublaslts_numbers_with_their_own_sizes() {
        let ld: i64 = 4096;
        let p = (&ld as *const i64).cast();
        let set = |a, p, n| unsafe { Kept::layout_set(a, p, n) };
        assert_eq!(
            set(HIPBLASLT_MATRIX_LAYOUT_LD, p, 8),
            Change::Word(layout::LD, 4096)
        );
        assert_eq!(set(HIPBLASLT_MATRIX_LAYOUT_LD, p, 4), Change::None);
        // A larger buffer: its first bytes, as the library reads it.
        let wide: [i64; 2] = [2048, -1];
        let p = wide.as_ptr().cast();
        assert_eq!(
            set(HIPBLASLT_MATRIX_LAYOUT_LD, p, 16),
            Change::Word(layout::LD, 2048)
        );
        assert_eq!(
            set(HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT, p, 8),
            Change::Word(layout::BATCH, 2048)
        );
        assert_eq!(set(7, p, 4), Change::None);
        let t = HIPBLAS_OP_T;
        let dset = |a, n| unsafe { Kept::desc_set(a, (&t as *const i32).cast(), n) };
        assert_eq!(
            dset(HIPBLASLT_MATMUL_DESC_TRANSA, 4),
            Change::Field(desc::TRANSA, 1, DescField::TRANS_A)
        );
        assert_eq!(dset(HIPBLASLT_MATMUL_DESC_TRANSB, 2), Change::Flag(GETTERS));
        assert_eq!(dset(HIPBLASLT_MATMUL_DESC_BIAS_POINTER, 8), Change::None);
        assert_eq!(dset(5, 8), Change::Flag(UNSERVED), "a scale pointer");
        let unset = 255;
        let b = unsafe {
            Kept::desc_set(
                HIPBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                (&unset as *const i32).cast(),
                4,
            )
        };
        assert_eq!(b, Change::Word(desc::BIAS_TYPE, signed(-1)));
        // F.linear as PyTorch makes it through hipBLASLt: the key of its kept words.
        let [d, a, b, c, odd] = [0xa000, 0xa100, 0xa200, 0xa300, 0xa400].map(|p| p as *mut c_void);
        let (mm, flags) = Kept::new_desc(HIPBLAS_COMPUTE_32F, HIP_R_32F);
        DESCS.created(Kept::LIBRARY, d, mm, flags, 0);
        DESCS.changed(d, dset(HIPBLASLT_MATMUL_DESC_TRANSA, 4));
        for (l, (rows, cols)) in [a, b, c].into_iter().zip([(32, 64), (32, 8), (64, 8)]) {
            LAYOUTS.created(
                Kept::LIBRARY,
                l,
                LayoutAttrs::col(HIP_R_16BF, rows, cols, rows as i64),
                0,
            );
        }
        let w = |o| LAYOUTS.get(o).unwrap();
        let key = key_of(&DESCS.get(d).unwrap(), [&w(a), &w(b), &w(c), &w(c)]);
        assert_eq!(key, Ok(LtKey::linear(R_16BF, 64, 8, 32)));
        let (mm, flags) = Kept::new_desc(100, HIP_R_32F);
        DESCS.created(Kept::LIBRARY, odd, mm, flags, 0);
        assert!(key_of(&DESCS.get(odd).unwrap(), [&w(a), &w(b), &w(c), &w(c)]).is_err());
        assert_eq!(DESCS.call_word(odd), 0);
        for o in [a, b, c] {
            LAYOUTS.taken(o);
        }
        DESCS.taken(d);
        DESCS.taken(odd);
    }
}
