//! cuBLASLt's descriptors and layouts as their create and set calls left them
//! (`crate::lt::objects`), so a call's key needs no attribute getter: the 25 getters a
//! served `cublasLtMatmul` made, at 13-19 ns each on an H200, were a third to a half of
//! what it added (issue 29).
//!
//! The words are exactly what the getters would read, with cuBLASLt's defaults where a
//! create leaves them. An object not made through the interposer, or one given an
//! attribute the key reads with a size not read here (the library took it, so its value is
//! not known), is read through the getters, as before (`key.rs`).

use std::ffi::c_void;

use tunedblas_core::cublaslt::*;

use crate::lt::objects::{desc, field_value, layout, new_desc, Change, Descs, Layouts, GETTERS};

pub static DESCS: Descs = Descs::new();
pub static LAYOUTS: Layouts = Layouts::new();

/// cuBLASLt's objects, to the wrapped create, set and destroy calls (`exports.rs`).
pub struct Kept;

impl crate::lt::objects::Kinds for Kept {
    const LIBRARY: &'static str = "cuBLASLt";
    const DESCS: &'static Descs = &DESCS;
    const LAYOUTS: &'static Layouts = &LAYOUTS;

    fn new_desc(compute: i32, scale: i32) -> (MatmulAttrs, u64) {
        (new_desc(compute, scale), 0)
    }

    /// The descriptor attributes the key reads, all 4 bytes (the epilogue unsigned); one
    /// set with another size sends the descriptor to the getters.
    unsafe fn desc_set(attr: i32, buf: *const c_void, size: usize) -> Change {
        let (i, signed, field) = match attr {
            DESC_COMPUTE_TYPE => (desc::COMPUTE, true, Some(DescField::COMPUTE)),
            DESC_SCALE_TYPE => (desc::SCALE, true, Some(DescField::SCALE)),
            DESC_POINTER_MODE => (desc::POINTER_MODE, true, Some(DescField::POINTER_MODE)),
            DESC_TRANSA => (desc::TRANSA, true, Some(DescField::TRANS_A)),
            DESC_TRANSB => (desc::TRANSB, true, Some(DescField::TRANS_B)),
            DESC_EPILOGUE => (desc::EPILOGUE, false, None),
            DESC_BIAS_DATA_TYPE => (desc::BIAS_TYPE, true, None),
            DESC_SM_COUNT_TARGET => (desc::SM_COUNT, true, Some(DescField::SM_COUNT)),
            _ => return Change::None,
        };
        // SAFETY: per the contract.
        match (size, unsafe { field_value(buf, size, true, signed) }, field) {
            (4, Some(v), Some(f)) => Change::Field(i, v, f),
            (4, Some(v), None) => Change::Word(i, v),
            _ => Change::Flag(GETTERS),
        }
    }

    /// The transposes, 4 bytes as `desc_set` reads them.
    #[inline(always)]
    unsafe fn desc_field(attr: i32, buf: *const c_void, size: usize) -> Option<(DescField, i32)> {
        let field = match attr {
            DESC_TRANSA => DescField::TRANS_A,
            DESC_TRANSB => DescField::TRANS_B,
            _ => return None,
        };
        // SAFETY: per the contract, 4 bytes checked.
        (size == 4 && !buf.is_null())
            .then(|| (field, unsafe { buf.cast::<i32>().read_unaligned() }))
    }

    /// The layout attributes the key reads, each at its own size; one set with another
    /// size sends the layout to the getters.
    unsafe fn layout_set(attr: i32, buf: *const c_void, size: usize) -> Change {
        let (i, four, signed) = match attr {
            LAYOUT_TYPE => (layout::TYPE, true, false),
            LAYOUT_ORDER => (layout::ORDER, true, true),
            LAYOUT_ROWS => (layout::ROWS, false, false),
            LAYOUT_COLS => (layout::COLS, false, false),
            LAYOUT_LD => (layout::LD, false, true),
            LAYOUT_BATCH_COUNT => (layout::BATCH, true, true),
            LAYOUT_STRIDED_BATCH_OFFSET => (layout::STRIDE, false, true),
            LAYOUT_BATCH_MODE => (layout::BATCH_MODE, true, true),
            _ => return Change::None,
        };
        // SAFETY: per the contract.
        match (size, unsafe { field_value(buf, size, four, signed) }) {
            (4, Some(v)) if four => Change::Word(i, v),
            (8, Some(v)) if !four => Change::Word(i, v),
            _ => Change::Flag(GETTERS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lt::objects::{key_of, Kinds};

    fn set(obj: *mut c_void, change: Change, layouts: bool) {
        if layouts {
            LAYOUTS.changed(obj, change)
        } else {
            DESCS.changed(obj, change)
        }
    }

    /// Kept words read back as the getters would: created with cuBLASLt's defaults,
    /// changed by the sets the key reads (at their own sizes), a set of another size
    /// sending the object to the getters, and a batch of pointer arrays not served.
    #[test]
    fn kept_words_read_back_as_the_getters_would() {
        let [d, a, b, c] = [0x9000, 0x9100, 0x9200, 0x9300].map(|p| p as *mut c_void);
        let (mm, flags) = Kept::new_desc(COMPUTE_32F, R_32F);
        DESCS.created(Kept::LIBRARY, d, mm, flags, 0);
        for (l, (rows, cols)) in [a, b, c].into_iter().zip([(32, 64), (32, 8), (64, 8)]) {
            LAYOUTS.created(
                Kept::LIBRARY,
                l,
                LayoutAttrs::col(R_16BF, rows, cols, rows as i64),
                0,
            );
        }
        let t: i32 = OP_T;
        set(
            d,
            unsafe { Kept::desc_set(DESC_TRANSA, (&t as *const i32).cast(), 4) },
            false,
        );
        let words = |o| LAYOUTS.get(o).unwrap();
        let key = key_of(
            &DESCS.get(d).unwrap(),
            [&words(a), &words(b), &words(c), &words(c)],
        );
        assert_eq!(key, Ok(LtKey::linear(R_16BF, 64, 8, 32)));
        assert_ne!(DESCS.call_word(d), 0, "packed");
        // A batch: count and stride kept; a batch mode of pointer arrays is not served.
        let (n, stride, mode): (i32, i64, i32) = (4, 1024, 1);
        unsafe {
            set(
                a,
                Kept::layout_set(LAYOUT_BATCH_COUNT, (&n as *const i32).cast(), 4),
                true,
            );
            set(
                a,
                Kept::layout_set(
                    LAYOUT_STRIDED_BATCH_OFFSET,
                    (&stride as *const i64).cast(),
                    8,
                ),
                true,
            );
        }
        assert_eq!(
            (words(a)[layout::BATCH], words(a)[layout::STRIDE]),
            (4, 1024)
        );
        assert_eq!(LAYOUTS.call_word(a), 0, "batches are not packed");
        unsafe {
            set(
                a,
                Kept::layout_set(LAYOUT_BATCH_MODE, (&mode as *const i32).cast(), 4),
                true,
            )
        };
        let key = key_of(
            &DESCS.get(d).unwrap(),
            [&words(a), &words(b), &words(c), &words(c)],
        );
        assert!(key.is_err(), "arrays of pointers");
        // An attribute the key does not read changes nothing; one of another size sends
        // the object to the getters.
        assert_eq!(
            unsafe { Kept::desc_set(17, (&stride as *const i64).cast(), 8) },
            Change::None
        );
        let ld = unsafe { Kept::layout_set(LAYOUT_LD, (&n as *const i32).cast(), 4) };
        assert_eq!(ld, Change::Flag(GETTERS));
        set(b, ld, true);
        assert_eq!(words(b)[layout::FLAGS], GETTERS);
        assert_eq!(LAYOUTS.call_word(b), 0);
        for o in [a, b, c] {
            LAYOUTS.taken(o);
        }
        DESCS.taken(d);
    }
}
