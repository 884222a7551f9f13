//! The cuBLASLt self-test (a GPU check; `tunedblas selftest`, and `doctor`'s first step):
//! the ABI values tunedblas relies on, read back from the real library through the
//! descriptors a problem makes, the key the interposer would build from them, and every
//! heuristic answer rebuilt from its readable configuration computing bit-identical results.

use tunedblas_core::cublaslt::*;

use super::{Cublaslt, CublasltSession};
use crate::backends::lt::LtProblem;
use crate::bench::Bench;
use crate::error::Result;
use crate::pipeline::Method;

/// Runs every check, calling `check(what, passed)` for each.
pub fn run(lib: &Cublaslt, check: &mut dyn FnMut(&str, bool)) -> Result<()> {
    let session = crate::backends::Library::session(lib, 0)?;
    let key = LtKey::linear(R_16BF, 2560, 256, 1536);
    let p = LtProblem::new(&session, key, &Method::default())?;
    let geti = |f: GetAttributeFn, o, attr: i32, size: usize| -> Option<i64> {
        let (mut v, mut w) = (0i64, 0usize);
        // SAFETY: a live object; an 8-byte buffer for an attribute of `size` <= 8 bytes.
        (unsafe { f(o, attr, (&mut v as *mut i64).cast(), size, &mut w) } == 0 && w == size)
            .then_some(v)
    };
    let (d, l) = ((lib.desc_get, p.desc), (lib.layout_get, p.layouts[0]));
    #[rustfmt::skip]
    let expected = [
        ("DESC_COMPUTE_TYPE is 68 (COMPUTE_32F)", d, DESC_COMPUTE_TYPE, 4, COMPUTE_32F as i64),
        ("DESC_SCALE_TYPE is 0 (R_32F)", d, DESC_SCALE_TYPE, 4, 0),
        ("DESC_TRANSA reads back T", d, DESC_TRANSA, 4, OP_T as i64),
        ("DESC_TRANSB reads back N", d, DESC_TRANSB, 4, OP_N as i64),
        ("DESC_EPILOGUE defaults to DEFAULT (1)", d, DESC_EPILOGUE, 4, EPILOGUE_DEFAULT as i64),
        ("DESC_POINTER_MODE defaults to host", d, DESC_POINTER_MODE, 4, 0),
        ("DESC_SM_COUNT_TARGET is a 4-byte 0", d, DESC_SM_COUNT_TARGET, 4, 0),
        ("LAYOUT_TYPE is bf16 (14)", l, LAYOUT_TYPE, 4, R_16BF as i64),
        ("LAYOUT_ROWS is 8 bytes", l, LAYOUT_ROWS, 8, 1536),
        ("LAYOUT_COLS is 8 bytes", l, LAYOUT_COLS, 8, 2560),
        ("LAYOUT_LD is 8 bytes", l, LAYOUT_LD, 8, 1536),
        ("LAYOUT_ORDER defaults to column", l, LAYOUT_ORDER, 4, 0),
        ("LAYOUT_BATCH_COUNT defaults to 1", l, LAYOUT_BATCH_COUNT, 4, 1),
        ("LAYOUT_STRIDED_BATCH_OFFSET is 8 bytes", l, LAYOUT_STRIDED_BATCH_OFFSET, 8, 0),
    ];
    for (what, (get, object), attr, size, want) in expected {
        check(what, geti(get, object, attr, size) == Some(want));
    }
    // The key the interposer would build from these descriptors.
    let mm = MatmulAttrs {
        trans_a: OP_T,
        ..MatmulAttrs::default()
    };
    let l = |r, c, ld| LayoutAttrs::col(R_16BF, r, c, ld);
    let built = key_from_attrs(
        &mm,
        &l(1536, 2560, 1536),
        &l(1536, 256, 1536),
        &l(2560, 256, 2560),
        &l(2560, 256, 2560),
    );
    check(
        "key_from_attrs gives F.linear(2560, 256, 1536)",
        built == Ok(key),
    );
    rebuilds(lib, &session, &p, check)
}

/// Every heuristic answer: readable configuration -> rebuilt -> same results, bit for bit.
fn rebuilds(
    lib: &Cublaslt,
    s: &CublasltSession,
    p: &LtProblem<'_, CublasltSession>,
    check: &mut dyn FnMut(&str, bool),
) -> Result<()> {
    let answers = p.answers(16)?;
    check("the heuristic answers", !answers.is_empty());
    let mut same = 0;
    for a in &answers {
        let algo = a.algo;
        let cfg = lib.config_of(&algo)?;
        match s.rebuild(p, &cfg) {
            Ok(rebuilt) => {
                let (x, y) = (p.output(&algo)?, p.output(&rebuilt)?);
                let identical =
                    x.len() == y.len() && x.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits());
                let finite = y.iter().all(|v| v.is_finite());
                let words: Vec<usize> = (0..8)
                    .filter(|&i| rebuilt.data[i] != algo.data[i])
                    .collect();
                println!(
                    "selftest:   {} rebuilt: {}; struct words that differ from the heuristic's: {words:?}",
                    cfg.solution_name(),
                    if identical && finite { "identical results" } else { "DIFFERENT results" },
                );
                same += usize::from(identical && finite);
            }
            Err(e) => println!("selftest:   {} cannot be rebuilt: {e}", cfg.solution_name()),
        }
    }
    check(
        &format!(
            "{same} of {} answers rebuilt to identical results",
            answers.len()
        ),
        same == answers.len(),
    );
    Ok(())
}
