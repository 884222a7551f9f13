//! Limits per shape (`tunedblas_tuner::limits`) through their public API.

use tunedblas_tuner::limits::*;
use tunedblas_tuner::numerics::{Elem, Layout};

/// `F.linear(out n, tokens m, in k)` in `t`: D (n x m) = W^T x, as the Lt key lays it out.
fn linear(t: Elem, n: i64, m: i64, k: i64) -> Layout {
    Layout {
        trans_a: true,
        ld: [k, k, n, n],
        types: [t; 4],
        ..Layout::dense(n, m, k)
    }
}

fn limits(rate: Option<f64>) -> Limits {
    Limits {
        timing: "graph".into(),
        copy_bytes_per_s: 4.0e12,
        copy_bytes: 1 << 30,
        copy_spread: 0.0,
        floor_ms: 0.002,
        floor_spread: 0.0,
        matmul_flops_per_s: rate,
        matmul_side: rate.map(|_| 8192),
        matmul_spread: rate.map(|_| 0.0),
    }
}

#[test]
fn bytes_moved_counts_a_b_and_d() {
    // 10240x16x2560 in bf16: W 10240x2560, x 16x2560, y 16x10240 (C is not read).
    let l = limits(None);
    let (_, memory, _, _) = l.bound(&linear(Elem::Bf16, 10240, 16, 2560));
    let bytes = 2.0 * (10240.0 * 2560.0 + 16.0 * 2560.0 + 16.0 * 10240.0);
    assert!((memory - bytes / 4.0e12 * 1e3).abs() < 1e-15);
    // beta != 0 reads C too (rocBLAS's problems).
    let mut g = linear(Elem::F32, 64, 64, 64);
    let (_, without_c, _, _) = l.bound(&g);
    g.beta = 0.5;
    let (_, with_c, _, _) = l.bound(&g);
    assert!((with_c - without_c - 64.0 * 64.0 * 4.0 / 4.0e12 * 1e3).abs() < 1e-15);
}

#[test]
fn limit_is_the_largest_of_bandwidth_matmul_rate_and_floor() {
    assert!((pct_of(0.013, 0.026) - 50.0).abs() < 1e-9);
    assert_eq!(pct_of(0.002, 0.0), 0.0, "a broken time gives no share");
    // No matmul rate: bandwidth or floor only; a 16x16x16 problem is under the floor.
    let l = limits(None);
    let (ms, memory, compute, b) = l.bound(&linear(Elem::Bf16, 10240, 16, 2560));
    assert_eq!((b, ms, compute), (Bound::Memory, memory, None));
    assert_eq!(l.bound(&linear(Elem::Bf16, 16, 16, 16)).3, Bound::Launch);
    // 800 TFLOP/s: 2 x 2048 x 10240 x 2560 flops take 134 us, 59 MB take 14.7 us.
    let l = limits(Some(8e14));
    let (ms, _, _, b) = l.bound(&linear(Elem::Bf16, 10240, 2048, 2560));
    assert_eq!(b, Bound::Compute);
    assert!((ms - 2.0 * 2048.0 * 10240.0 * 2560.0 / 8e14 * 1e3).abs() < 1e-12);
    // The 16-bit rate is no limit for f32 inputs: memory binds instead.
    let (_, _, compute, b) = l.bound(&linear(Elem::F32, 10240, 2048, 2560));
    assert_eq!((compute, b), (None, Bound::Memory));
}

#[test]
fn a_shape_is_set_against_the_faster_of_heuristic_and_best() {
    let l = limits(None);
    let g = linear(Elem::Bf16, 512, 1, 2560);
    let (limit, _, _, _) = l.bound(&g);
    // The best other ran faster: it is the best, and both shares are given.
    let s = l.of_shape(&g, ("heur", 0.0065), Some(("best", 0.0059)));
    assert_eq!((s.best.as_str(), s.bound), ("best", Bound::Launch));
    assert!((s.best_pct - 100.0 * limit / 0.0059).abs() < 1e-9);
    assert!((s.heuristic_pct - 100.0 * limit / 0.0065).abs() < 1e-9);
    // Nothing beat the heuristic: it is the best.
    let s = l.of_shape(&g, ("heur", 0.0065), Some(("slower", 0.007)));
    assert_eq!(s.best, "heur");
    assert!(l.line().contains("copy 4000 GB/s") && l.line().contains("matmul not measured"));
}
