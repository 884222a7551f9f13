//! Qualification: a row's solution must compute the same D as a high-precision reference
//! on up-cast inputs, on every device, before it is served.
//!
//! Half types (f16, bf16) pass with relative L2 error < 0.002 and allclose(atol = rtol =
//! 0.01), the seed's tolerances; f32 and f64 get tighter ones. The reference accumulates in
//! f64, which is at least as strict as the f32 GEMM the seed used.

use serde::Serialize;
use tunedblas_core::abi::*;
use tunedblas_core::key::{ProblemKey, Trans};

use crate::backend::{Library, Problem, ALPHA, BETA};
use crate::error::Result;

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

/// `op(X)` of one batch packed so that each row's `k` elements are contiguous: `rows` x `k`.
fn pack(x: &[f64], offset: i64, ld: i64, transposed: bool, rows: i64, k: i64) -> Vec<f64> {
    let mut out = Vec::with_capacity((rows * k) as usize);
    for r in 0..rows {
        for l in 0..k {
            let idx = offset + if transposed { l + r * ld } else { r + l * ld };
            out.push(x[idx as usize]);
        }
    }
    out
}

/// D = ALPHA op(A) op(B) + BETA C over the key's layout, column-major, in f64. Elements of
/// D outside the m x n block of each batch keep C's value (they are never compared).
///
/// Large prefill shapes cost billions of multiply-adds on the host, so op(A) and op(B) are
/// packed with `k` contiguous and the columns are shared out over every core.
pub fn reference(key: &ProblemKey, a: &[f64], b: &[f64], c: &[f64]) -> Vec<f64> {
    let mut d = c.to_vec();
    if d.is_empty() {
        d.push(0.0);
    }
    let (sa, sb, sc) = if key.batch > 1 {
        (key.stride_a, key.stride_b, key.stride_c)
    } else {
        (0, 0, 0)
    };
    let (m, n, k) = (key.m, key.n, key.k);
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    for batch in 0..key.batch.max(1) {
        // op(A) is m x k: A itself when transposed (T), else read across its columns.
        let pa = pack(a, batch * sa, key.lda, key.trans_a != Trans::N, m, k);
        // op(B)^T is n x k: B itself when not transposed (N).
        let pb = pack(b, batch * sb, key.ldb, key.trans_b == Trans::N, n, k);
        let next = std::sync::atomic::AtomicI64::new(0);
        let columns: Vec<(i64, Vec<f64>)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads.min(n.max(1) as usize))
                .map(|_| {
                    let (pa, pb, next) = (&pa, &pb, &next);
                    scope.spawn(move || {
                        let mut done = Vec::new();
                        loop {
                            let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if j >= n {
                                break done;
                            }
                            let bj = &pb[(j * k) as usize..((j + 1) * k) as usize];
                            let col: Vec<f64> = (0..m)
                                .map(|i| {
                                    let ai = &pa[(i * k) as usize..((i + 1) * k) as usize];
                                    ai.iter().zip(bj).map(|(x, y)| x * y).sum::<f64>()
                                })
                                .collect();
                            done.push((j, col));
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().expect("reference worker"))
                .collect()
        });
        for (j, col) in columns {
            for (i, acc) in col.into_iter().enumerate() {
                let ci = (batch * sc + i as i64 + j * key.ldc) as usize;
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
                // NaN is not close either.
                if !matches!(
                    diff.partial_cmp(&limit),
                    Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
                ) {
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

/// The reference D of `key` for the operands every [`Problem`] uploads (the fill is
/// deterministic, so one reference serves every device).
fn reference_for(p: &Problem) -> Vec<f64> {
    let t = p.key.types;
    reference(
        &p.key,
        &decode(t.a, &p.input(0)),
        &decode(t.b, &p.input(1)),
        &decode(t.c, &p.input(2)),
    )
}

/// Runs `solution` (None: the heuristic) once on the current device and measures it
/// against `want`.
fn check_against(
    lib: &Library,
    key: ProblemKey,
    solution: Option<i32>,
    want: &[f64],
) -> Result<(Numerics, Tolerance)> {
    let p = Problem::new(lib, key, 0)?;
    let got = decode(key.types.d, &p.run_and_read(solution)?);
    let tol = tolerance(key.types.d);
    Ok((compare(&key, &got, want, &tol), tol))
}

/// Checks `solution` on every device in `devices` against one reference; Err(reason)
/// names the first failure.
pub fn qualify(
    lib: &Library,
    key: ProblemKey,
    solution: i32,
    devices: &[i32],
) -> std::result::Result<(), String> {
    let mut want: Option<Vec<f64>> = None;
    for &dev in devices {
        lib.set_device(dev).map_err(|e| e.message)?;
        if want.is_none() {
            let p = Problem::new(lib, key, 0).map_err(|e| format!("on device {dev}: {e}"))?;
            want = Some(reference_for(&p));
        }
        let want = want.as_deref().expect("computed above");
        match check_against(lib, key, Some(solution), want) {
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

    /// The plain triple loop straight off rocBLAS's definition, to check the packed,
    /// threaded reference against.
    fn naive(key: &ProblemKey, a: &[f64], b: &[f64], c: &[f64]) -> Vec<f64> {
        let mut d = c.to_vec();
        for batch in 0..key.batch {
            for j in 0..key.n {
                for i in 0..key.m {
                    let mut acc = 0.0;
                    for l in 0..key.k {
                        let ai = match key.trans_a {
                            Trans::N => i + l * key.lda,
                            _ => l + i * key.lda,
                        } + batch * key.stride_a;
                        let bi = match key.trans_b {
                            Trans::N => l + j * key.ldb,
                            _ => j + l * key.ldb,
                        } + batch * key.stride_b;
                        acc += a[ai as usize] * b[bi as usize];
                    }
                    let ci = (batch * key.stride_c + i + j * key.ldc) as usize;
                    d[ci] = ALPHA * acc + BETA * c[ci];
                }
            }
        }
        d
    }

    #[test]
    fn packed_threaded_reference_matches_the_definition() {
        for (ta, tb) in [
            (Trans::N, Trans::N),
            (Trans::N, Trans::T),
            (Trans::T, Trans::N),
            (Trans::T, Trans::T),
        ] {
            let (m, n, k) = (7, 5, 9);
            // Padded leading dimensions and a batch of 3 with gaps between matrices.
            let (lda, ldb, ldc) = (
                if ta == Trans::N { m + 2 } else { k + 1 },
                if tb == Trans::N { k + 3 } else { n + 1 },
                m + 1,
            );
            let key = ProblemKey::single(ta, tb, Types::SGEMM, m, n, k, lda, ldb, ldc, ldc, 0)
                .with_batch(
                    tunedblas_core::key::Batching::Strided,
                    3,
                    [lda * 12, ldb * 12, ldc * n + 4, ldc * n + 4],
                );
            let len = |stride: i64| (stride * 3) as usize;
            let fill = |n: usize, seed: f64| -> Vec<f64> {
                (0..n).map(|i| ((i as f64 + seed) * 0.37).sin()).collect()
            };
            let (a, b, c) = (
                fill(len(key.stride_a), 1.0),
                fill(len(key.stride_b), 2.0),
                fill(len(key.stride_c), 3.0),
            );
            let want = naive(&key, &a, &b, &c);
            let got = reference(&key, &a, &b, &c);
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() < 1e-12, "{ta:?}{tb:?} D[{i}]: {g} vs {w}");
            }
        }
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
