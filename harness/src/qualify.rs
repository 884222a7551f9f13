//! Qualification: a row's solution must compute the same D as a high-precision reference
//! on up-cast inputs, on every device, before it is served.
//!
//! Half types (f16, bf16) pass with relative L2 error < 0.002 and allclose(atol = rtol =
//! 0.01), the seed's tolerances; f32 and f64 get tighter ones. The reference accumulates in
//! f64, which is at least as strict as the f32 GEMM the seed used.

use serde::Serialize;
use tunedblas_core::abi::*;
use tunedblas_core::key::{ProblemKey, Trans};

use crate::backend::{Library, Problem, Result, ALPHA, BETA};

/// The thresholds for one output type.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Tolerance {
    pub rel_l2: f64,
    pub atol: f64,
    pub rtol: f64,
}

pub fn tolerance(d_type: Datatype) -> Tolerance {
    match d_type {
        DT_F64_R => Tolerance {
            rel_l2: 1e-12,
            atol: 1e-10,
            rtol: 1e-10,
        },
        DT_F32_R => Tolerance {
            rel_l2: 1e-5,
            atol: 1e-4,
            rtol: 1e-4,
        },
        _ => Tolerance {
            rel_l2: 0.002,
            atol: 0.01,
            rtol: 0.01,
        },
    }
}

/// How far a result is from the reference.
#[derive(Clone, Debug, Serialize)]
pub struct Numerics {
    pub rel_l2: f64,
    /// Elements outside allclose, and the worst one's (index, got, want).
    pub not_close: usize,
    pub worst: Option<(usize, f64, f64)>,
}

impl Numerics {
    pub fn passes(&self, t: &Tolerance) -> bool {
        self.rel_l2 < t.rel_l2 && self.not_close == 0
    }

    pub fn describe(&self, t: &Tolerance) -> String {
        let mut s = format!("relative L2 {:.2e} (limit {:.0e})", self.rel_l2, t.rel_l2);
        if self.not_close > 0 {
            if let Some((i, got, want)) = self.worst {
                s.push_str(&format!(
                    ", {} elements outside allclose(atol={}, rtol={}), worst D[{i}] = {got} vs {want}",
                    self.not_close, t.atol, t.rtol
                ));
            }
        }
        s
    }
}

fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let man = (h & 0x3ff) as f64;
    sign * match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + man / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Decodes `bytes` of type `t` (little-endian) into f64.
pub fn decode(t: Datatype, bytes: &[u8]) -> Vec<f64> {
    match t {
        DT_F64_R => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        DT_F32_R => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        DT_F16_R => bytes
            .chunks_exact(2)
            .map(|c| f16_to_f64(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        DT_BF16_R => bytes
            .chunks_exact(2)
            .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16) as f64)
            .collect(),
        _ => Vec::new(),
    }
}

/// D = ALPHA op(A) op(B) + BETA C over the key's layout, column-major, in f64. Elements of
/// D outside the m x n block of each batch keep C's value (they are never compared).
pub fn reference(key: &ProblemKey, a: &[f64], b: &[f64], c: &[f64]) -> Vec<f64> {
    let mut d = vec![0.0; c.len().max(1)];
    let (sa, sb, sc) = if key.batch > 1 {
        (key.stride_a, key.stride_b, key.stride_c)
    } else {
        (0, 0, 0)
    };
    let at = |batch: i64, i: i64, l: i64| -> f64 {
        let idx = batch * sa
            + if key.trans_a == Trans::N {
                i + l * key.lda
            } else {
                l + i * key.lda
            };
        a[idx as usize]
    };
    let bt = |batch: i64, l: i64, j: i64| -> f64 {
        let idx = batch * sb
            + if key.trans_b == Trans::N {
                l + j * key.ldb
            } else {
                j + l * key.ldb
            };
        b[idx as usize]
    };
    for batch in 0..key.batch.max(1) {
        for j in 0..key.n {
            for i in 0..key.m {
                let mut acc = 0.0;
                for l in 0..key.k {
                    acc += at(batch, i, l) * bt(batch, l, j);
                }
                let ci = (batch * sc + i + j * key.ldc) as usize;
                d[ci] = ALPHA * acc + BETA * c[ci];
            }
        }
    }
    d
}

/// Compares `got` (D as read back, laid out with ldd/stride_d) with `want` (laid out with
/// ldc/stride_c) over each batch's m x n block.
pub fn compare(key: &ProblemKey, got: &[f64], want: &[f64], tol: &Tolerance) -> Numerics {
    let (mut err2, mut ref2, mut not_close, mut worst) = (0.0, 0.0, 0, None);
    let mut worst_excess = 0.0;
    let (sc, sd) = if key.batch > 1 {
        (key.stride_c, key.stride_d)
    } else {
        (0, 0)
    };
    for batch in 0..key.batch.max(1) {
        for j in 0..key.n {
            for i in 0..key.m {
                let gi = (batch * sd + i + j * key.ldd) as usize;
                let wi = (batch * sc + i + j * key.ldc) as usize;
                let (g, w) = (got[gi], want[wi]);
                let diff = (g - w).abs();
                err2 += if diff.is_finite() {
                    diff * diff
                } else {
                    f64::INFINITY
                };
                ref2 += w * w;
                let limit = tol.atol + tol.rtol * w.abs();
                if !(diff <= limit) {
                    not_close += 1;
                    let excess = if diff.is_finite() {
                        diff - limit
                    } else {
                        f64::INFINITY
                    };
                    if worst.is_none() || excess > worst_excess {
                        worst_excess = excess;
                        worst = Some((gi, g, w));
                    }
                }
            }
        }
    }
    Numerics {
        rel_l2: (err2 / ref2.max(f64::MIN_POSITIVE)).sqrt(),
        not_close,
        worst,
    }
}

/// Runs `solution` (None: the heuristic) on `key` once and measures it against the
/// reference.
pub fn check(
    lib: &Library,
    key: ProblemKey,
    solution: Option<i32>,
) -> Result<(Numerics, Tolerance)> {
    let p = Problem::new(lib, key, 0)?;
    let t = key.types;
    let got = decode(t.d, &p.run_and_read(solution)?);
    let want = reference(
        &key,
        &decode(t.a, &p.input(0)),
        &decode(t.b, &p.input(1)),
        &decode(t.c, &p.input(2)),
    );
    let tol = tolerance(t.d);
    Ok((compare(&key, &got, &want, &tol), tol))
}

/// Checks `solution` on every device in `devices`; Err(reason) names the first failure.
pub fn qualify(
    lib: &Library,
    key: ProblemKey,
    solution: i32,
    devices: &[i32],
) -> std::result::Result<(), String> {
    for &dev in devices {
        lib.set_device(dev).map_err(|e| e.msg)?;
        match check(lib, key, Some(solution)) {
            Ok((n, tol)) if n.passes(&tol) => {}
            Ok((n, tol)) => {
                return Err(format!("on device {dev}: {}", n.describe(&tol)));
            }
            Err(e) => return Err(format!("on device {dev}: {e}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunedblas_core::key::Types;

    #[test]
    fn half_decoding() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x3555), 0.333251953125);
        assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
        assert!(f16_to_f64(0x7c00).is_infinite());
        let h = crate::backend::f32_to_f16(0.1);
        assert!((f16_to_f64(h) - 0.1).abs() < 1e-4);
    }

    #[test]
    fn reference_and_compare_agree_on_a_hand_computed_gemm() {
        // A (2x3, N) = [1 2 3; 4 5 6] column-major, B (3x1, N) = [1; 1; 1], C = [10; 20].
        let key = ProblemKey::single(Trans::N, Trans::N, Types::SGEMM, 2, 1, 3, 2, 3, 2, 2, 0);
        let a = [1.0, 4.0, 2.0, 5.0, 3.0, 6.0];
        let d = reference(&key, &a, &[1.0, 1.0, 1.0], &[10.0, 20.0]);
        assert_eq!(d, vec![6.0 + 5.0, 15.0 + 10.0]);
        let tol = tolerance(DT_F32_R);
        assert!(compare(&key, &d, &d, &tol).passes(&tol));
        let off = [d[0], d[1] * 1.01];
        let n = compare(&key, &off, &d, &tol);
        assert!(!n.passes(&tol));
        assert_eq!(n.not_close, 1);
        assert_eq!(n.worst.unwrap().0, 1);
        // Half tolerance accepts a 0.1% error.
        let half = tolerance(DT_F16_R);
        let near = [d[0] * 1.001, d[1]];
        assert!(compare(&key, &near, &d, &half).passes(&half));
    }
}
