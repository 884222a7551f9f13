//! The numerics (`tunedblas_tuner::numerics`) through their public API: the f64 reference
//! of every layout, the element formats, and the judge that holds a candidate's output to
//! the reference and to the heuristic's own error.

use tunedblas_tuner::numerics::*;

/// The bits `encode` writes for `x` as bf16 or f16, and the value `decode` reads from f16 bits.
fn bits(t: Elem, x: f32) -> u16 {
    let mut v = Vec::new();
    encode(t, x as f64, &mut v);
    u16::from_le_bytes([v[0], v[1]])
}
fn bf16_bits(x: f32) -> u16 {
    bits(Elem::Bf16, x)
}
fn f16_bits(x: f32) -> u16 {
    bits(Elem::F16, x)
}
fn f16_value(h: u16) -> f64 {
    decode(Elem::F16, &h.to_le_bytes())[0]
}

#[test]
fn bf16_and_f16_round_to_nearest_even() {
    let bf = |x: f32| decode(Elem::Bf16, &bf16_bits(x).to_le_bytes())[0];
    assert_eq!(bf16_bits(1.0), 0x3f80);
    assert_eq!(bf(-2.5), -2.5);
    // 1 + 2^-8 is exactly half way between two bf16 values: ties go to even (1.0).
    assert_eq!(bf16_bits(1.0 + 2f32.powi(-8)), 0x3f80);
    assert_eq!(bf16_bits(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
    assert!(bf(f32::NAN).is_nan());
    for x in [1.0f32, -0.333, 65504.0, 6.1e-5, 3.0e-7, 0.0] {
        let back = f16_value(f16_bits(x));
        assert!(
            (back - x as f64).abs() <= x.abs() as f64 * 1e-3 + 6e-8,
            "{x} -> {back}"
        );
    }
    assert_eq!(f16_bits(1.0), 0x3c00);
    assert_eq!(f16_bits(1e6), 0x7c00);
    assert!(f16_value(f16_bits(f32::NAN)).is_nan());
}

#[test]
fn half_decoding() {
    assert_eq!(f16_value(0x3c00), 1.0);
    assert_eq!(f16_value(0xc000), -2.0);
    assert_eq!(f16_value(0x3555), 0.333251953125);
    assert_eq!(f16_value(0x0001), 2f64.powi(-24));
    assert!(f16_value(0x7c00).is_infinite());
    assert!((f16_value(f16_bits(0.1)) - 0.1).abs() < 1e-4);
}

#[test]
fn random_inputs_are_in_range_reproducible_and_never_zero() {
    let a = random(Elem::Bf16, 1000, 7);
    assert_eq!(a, random(Elem::Bf16, 1000, 7));
    assert_ne!(a, random(Elem::Bf16, 1000, 8));
    let v = decode(Elem::Bf16, &a);
    assert_eq!(v.len(), 1000);
    assert!(
        v.iter().all(|x| (-1.0..=1.0).contains(x) && *x != 0.0),
        "bf16 rounding may reach 1.0"
    );
    assert!(v.iter().any(|x| *x > 0.5) && v.iter().any(|x| *x < -0.5));
    for t in [Elem::F16, Elem::F32, Elem::F64] {
        assert_eq!(random(t, 10, 1).len(), 10 * t.bytes());
    }
}

#[test]
fn errors_and_statistics() {
    let g = Layout::dense(2, 1, 1);
    let t = Elem::F32.tolerance();
    assert_eq!(distance(&g, &[1.0, 2.0], &[1.0, 2.0], &t).rel_l2, 0.0);
    assert!((distance(&g, &[1.1, 0.0], &[1.0, 0.0], &t).rel_l2 - 0.1).abs() < 1e-12);
    let nan = distance(&g, &[f64::NAN, 0.0], &[1.0, 0.0], &t);
    assert!(nan.rel_l2.is_infinite() || nan.rel_l2.is_nan());
    assert_eq!(nan.not_close, 1, "NaN is not close");
    assert!(
        distance(&g, &[1.0], &[1.0, 2.0], &t).rel_l2.is_nan(),
        "a short output fails"
    );
    assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    assert!((spread(&[1.0, 1.1, 0.9]) - 0.2).abs() < 1e-12);
}

/// The plain triple loop straight off the BLAS definition, to check the packed,
/// threaded reference against.
fn naive(g: &Layout, a: &[f64], b: &[f64], c: &[f64]) -> Vec<f64> {
    let mut d = vec![0.0; g.elems(3)];
    for batch in 0..g.batch {
        for j in 0..g.n {
            for i in 0..g.m {
                let mut acc = 0.0;
                for l in 0..g.k {
                    let ai = if g.trans_a {
                        l + i * g.ld[0]
                    } else {
                        i + l * g.ld[0]
                    };
                    let bi = if g.trans_b {
                        j + l * g.ld[1]
                    } else {
                        l + j * g.ld[1]
                    };
                    acc += a[(ai + batch * g.stride[0]) as usize]
                        * b[(bi + batch * g.stride[1]) as usize];
                }
                let ci = (batch * g.stride[2] + i + j * g.ld[2]) as usize;
                let di = (batch * g.stride[3] + i + j * g.ld[3]) as usize;
                d[di] = g.alpha * acc + g.beta * c[ci];
            }
        }
    }
    d
}

#[test]
fn packed_threaded_reference_matches_the_definition() {
    for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
        let (m, n, k) = (7, 5, 9);
        // Padded leading dimensions, D laid out apart from C, a batch of 3 with gaps.
        let ld = [
            if ta { k + 1 } else { m + 2 },
            if tb { n + 1 } else { k + 3 },
            m + 1,
            m + 3,
        ];
        let g = Layout {
            trans_a: ta,
            trans_b: tb,
            ld,
            stride: [ld[0] * 12, ld[1] * 12, ld[2] * n + 4, ld[3] * n + 2],
            batch: 3,
            beta: 0.5,
            ..Layout::dense(m, n, k)
        };
        let fill = |w: usize, seed: f64| -> Vec<f64> {
            (0..g.elems(w))
                .map(|i| ((i as f64 + seed) * 0.37).sin())
                .collect()
        };
        let (a, b, c) = (fill(0, 1.0), fill(1, 2.0), fill(2, 3.0));
        let want = naive(&g, &a, &b, &c);
        let got = reference(&g, &a, &b, &c);
        assert_eq!(got.len(), want.len());
        for (i, (x, w)) in got.iter().zip(&want).enumerate() {
            assert!((x - w).abs() < 1e-12, "{ta:?}{tb:?} D[{i}]: {x} vs {w}");
        }
    }
}

#[test]
fn the_judge_holds_outputs_to_the_reference_and_the_heuristics_own_error() {
    // A (2x3, N) = [1 2 3; 4 5 6] column-major, B (3x1) = ones, C = [10; 20].
    let g = Layout {
        beta: 0.5,
        ..Layout::dense(2, 1, 3)
    };
    let d = reference(
        &g,
        &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0],
        &[1.0; 3],
        &[10.0, 20.0],
    );
    assert_eq!(d, vec![6.0 + 5.0, 15.0 + 10.0]);
    let judge = Judge::new(g, Some(d.clone()), d.clone()).unwrap();
    assert_eq!(judge.check(&d), Ok(0.0));
    let off = judge.check(&[d[0], d[1] * 1.01]).unwrap_err();
    assert!(
        off.contains("1 elements outside allclose") && off.contains("D[1]"),
        "{off}"
    );
    assert!(
        judge.check(&[d[0], f64::NAN]).is_err(),
        "an unwritten element"
    );
    // Half types accept a 0.1% error; a heuristic off by far more fails the shape.
    let half = Layout {
        types: [Elem::F16; 4],
        ..g
    };
    let judge = Judge::new(half, Some(d.clone()), d.clone()).unwrap();
    assert!(judge.check(&[d[0] * 1.001, d[1]]).is_ok());
    assert!(Judge::new(g, Some(d.clone()), vec![d[0], d[1] * 2.0]).is_err());
    // Without a reference the heuristic's output is one, unless it left an element NaN.
    assert!(Judge::new(g, None, vec![f64::NAN, 1.0]).is_err());
    assert!(Judge::new(g, None, d.clone()).unwrap().check(&d).is_ok());
}
