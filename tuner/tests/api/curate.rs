//! Curation (`tunedblas_tuner::curate`): what a shape's trials decide, through its public
//! API: adopt only a win by the margin that the paired rounds agree on, keep or drop the
//! current row, and never mistake noise for a result.

use tunedblas_tuner::curate::*;

/// Deterministic jitter in [-1, 1): a tiny LCG, so the distributions are reproducible.
fn jitter(seed: &mut u64) -> f64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

/// `n` rounds with true means (heuristic, current, new) and relative noise `noise`,
/// independent per contender (per-call sync noise).
fn rounds(n: usize, h: f64, c: Option<f64>, nw: Option<f64>, noise: f64) -> Vec<Round> {
    let mut seed = 42;
    (0..n)
        .map(|_| Round {
            heuristic: h * (1.0 + noise * jitter(&mut seed)),
            current: c.map(|c| c * (1.0 + noise * jitter(&mut seed))),
            new: nw.map(|x| x * (1.0 + noise * jitter(&mut seed))),
        })
        .collect()
}

fn decide_with(rounds: Vec<Round>, current: Option<RowChoice>, new: Option<&str>) -> Verdict {
    decide(
        &Evidence {
            rounds,
            current,
            new: new.map(str::to_string),
        },
        &Rules::default(),
    )
}

#[test]
fn a_clear_win_with_no_current_row_is_adopted() {
    let v = decide_with(rounds(7, 1.0, None, Some(0.85), 0.01), None, Some("17"));
    assert_eq!(v.decision, Decision::Adopt, "{v:?}");
    assert_eq!(v.row, Some(RowChoice::Mine("17".into())));
    assert!((v.delta.unwrap() + 0.15).abs() < 0.02, "{v:?}");
}

#[test]
fn a_win_below_the_margin_gives_default() {
    let v = decide_with(rounds(7, 1.0, None, Some(0.985), 0.002), None, Some("17"));
    assert_eq!(v.decision, Decision::Default, "{v:?}");
    assert_eq!(v.row, Some(RowChoice::Default));
    let rules = Rules {
        keep_default: false,
        ..Rules::default()
    };
    let v = decide(
        &Evidence {
            rounds: rounds(7, 1.0, None, Some(0.985), 0.002),
            current: None,
            new: Some("17".into()),
        },
        &rules,
    );
    assert_eq!(v.decision, Decision::Default);
    assert_eq!(v.row, None, "keep_default off writes no row");
}

/// A shape whose best candidate times even with the heuristic (median ratio 1.0) but with
/// an 80% spread: that cannot show that nothing beats the heuristic, so no `Default` row is
/// written (it would pin the shape and keep it from coming back as a miss).
#[test]
fn a_very_noisy_shape_is_undecidable_not_default() {
    let noisy = |ratios: &[f64]| -> Vec<Round> {
        ratios
            .iter()
            .map(|&r| Round {
                heuristic: 1.0,
                current: None,
                new: Some(r),
            })
            .collect()
    };
    let wide = [0.2, 0.7, 1.0, 1.0, 1.0, 1.3, 1.8];
    let v = decide_with(noisy(&wide), None, Some("17"));
    assert_eq!(v.decision, Decision::Undecidable, "{v:?}");
    assert_eq!(v.row, None, "{v:?}");
    assert!(v.reason.contains("too noisy"), "{}", v.reason);
    // A Default row already there stays.
    let v = decide_with(noisy(&wide), Some(RowChoice::Default), Some("17"));
    assert_eq!(v.decision, Decision::Undecidable, "{v:?}");
    assert_eq!(v.row, Some(RowChoice::Default));
    // The same median with a usual spread is Default.
    let narrow = [0.99, 0.995, 1.0, 1.0, 1.0, 1.005, 1.01];
    let v = decide_with(noisy(&narrow), None, Some("17"));
    assert_eq!(v.decision, Decision::Default, "{v:?}");
}

/// Trap 1 of the seed: the "new best" is the current row's own solution id, and this
/// session happened to time it 8% faster than the current row's time. Same kernel:
/// not an adopt.
#[test]
fn trap_same_solution_id_is_never_adopted() {
    let rs: Vec<Round> = rounds(7, 1.0, Some(0.90), Some(0.82), 0.005);
    let v = decide_with(
        rs,
        Some(RowChoice::Mine("-1086326047".into())),
        Some("-1086326047"),
    );
    assert_ne!(v.decision, Decision::Adopt, "{v:?}");
    assert_eq!(v.decision, Decision::Keep, "{v:?}");
    assert_eq!(v.row, Some(RowChoice::Mine("-1086326047".into())));
    assert!(v.reason.contains("own solution"), "{}", v.reason);
}

/// Trap 2 of the seed: a launch-bound small-M GEMM timed with a sync per call. The
/// medians differ by 10%, but the rounds disagree on which is faster: nothing may be
/// decided, and a current row stays.
#[test]
fn trap_launch_bound_noise_is_undecidable() {
    let heur = [1.0, 1.2, 0.85, 1.1, 0.9, 1.15, 0.95];
    let new = [0.9, 0.95, 1.0, 0.85, 0.95, 0.8, 1.05];
    let rs = |cur: Option<f64>| -> Vec<Round> {
        heur.iter()
            .zip(new)
            .map(|(&h, n)| Round {
                heuristic: h,
                current: cur.map(|c| c * h),
                new: Some(n),
            })
            .collect()
    };
    let v = decide_with(rs(None), None, Some("5"));
    assert_eq!(v.decision, Decision::Undecidable, "{v:?}");
    assert_eq!(v.row, None, "nothing was there, nothing is written");
    assert!((v.delta.unwrap() + 0.10).abs() < 0.01, "{v:?}");
    assert!(v.spread > 0.1, "{v:?}");
    let v = decide_with(rs(Some(0.99)), Some(RowChoice::Mine("3".into())), Some("5"));
    assert_eq!(v.decision, Decision::Undecidable, "{v:?}");
    assert_eq!(v.row, Some(RowChoice::Mine("3".into())));
}

/// Two identical kernels under +-20% per-call noise: over many sessions the rules
/// (almost) never adopt one over the other.
#[test]
fn noise_alone_rarely_adopts() {
    let mut seed = 1;
    let mut adopts = 0;
    for _ in 0..500 {
        let rs: Vec<Round> = (0..7)
            .map(|_| Round {
                heuristic: 1.0 + 0.2 * jitter(&mut seed),
                current: None,
                new: Some(1.0 + 0.2 * jitter(&mut seed)),
            })
            .collect();
        if decide_with(rs, None, Some("5")).decision == Decision::Adopt {
            adopts += 1;
        }
    }
    assert!(adopts <= 3, "{adopts} false adopts in 500 noisy sessions");
}

/// The same 10% measured in launch-bound mode (many calls per event pair) has a small
/// spread and is decided.
#[test]
fn launch_bound_mode_decides_the_same_difference() {
    let v = decide_with(rounds(7, 1.0, None, Some(0.90), 0.01), None, Some("5"));
    assert_eq!(v.decision, Decision::Adopt, "{v:?}");
}

#[test]
fn a_new_best_must_beat_the_current_row_too() {
    // Beats the heuristic by 12% but the current row by only 1%.
    let v = decide_with(
        rounds(7, 1.0, Some(0.89), Some(0.88), 0.003),
        Some(RowChoice::Mine("3".into())),
        Some("9"),
    );
    assert_eq!(v.decision, Decision::Keep, "{v:?}");
    assert_eq!(v.row, Some(RowChoice::Mine("3".into())));
    // Beats both by the margin: replaced.
    let v = decide_with(
        rounds(7, 1.0, Some(0.95), Some(0.80), 0.003),
        Some(RowChoice::Mine("3".into())),
        Some("9"),
    );
    assert_eq!(v.decision, Decision::Adopt, "{v:?}");
    assert_eq!(v.row, Some(RowChoice::Mine("9".into())));
}

#[test]
fn a_row_slower_than_the_heuristic_is_dropped() {
    let v = decide_with(
        rounds(7, 1.0, Some(1.10), Some(1.02), 0.003),
        Some(RowChoice::Mine("3".into())),
        Some("9"),
    );
    assert_eq!(v.decision, Decision::Drop, "{v:?}");
    assert_eq!(v.row, Some(RowChoice::Default));
    assert!(v.reason.contains("+10"), "{}", v.reason);
}

#[test]
fn a_slower_row_inside_the_spread_stays() {
    let v = decide_with(
        rounds(7, 1.0, Some(1.06), Some(1.02), 0.15),
        Some(RowChoice::Mine("3".into())),
        Some("9"),
    );
    assert_eq!(v.decision, Decision::Undecidable, "{v:?}");
    assert_eq!(v.row, Some(RowChoice::Mine("3".into())));
}

#[test]
fn foreign_solutions_are_left_alone() {
    let v = decide_with(
        rounds(5, 1.0, None, Some(0.5), 0.01),
        Some(RowChoice::Foreign("Gemm_Hipblaslt_1_2".into())),
        Some("9"),
    );
    assert_eq!(v.decision, Decision::Keep);
    assert_eq!(v.row, Some(RowChoice::Foreign("Gemm_Hipblaslt_1_2".into())));
}

#[test]
fn paired_ratios_cancel_common_drift() {
    // Both contenders drift together by up to 30% between rounds; the ratio is steady.
    let mut seed = 7;
    let rs: Vec<Round> = (0..7)
        .map(|_| {
            let drift = 1.0 + 0.3 * jitter(&mut seed);
            Round {
                heuristic: drift,
                current: None,
                new: Some(0.9 * drift),
            }
        })
        .collect();
    let v = decide_with(rs, None, Some("4"));
    assert_eq!(v.decision, Decision::Adopt, "{v:?}");
    assert!(v.spread < 0.01, "{v:?}");
}

#[test]
fn verdicts_round_trip_through_json() {
    let v = decide_with(
        rounds(5, 1.0, None, Some(0.8), 0.01),
        None,
        Some("Gemm_Rocblas_-1086326047"),
    );
    let text = serde_json::to_string(&v).unwrap();
    assert!(text.contains("Gemm_Rocblas_-1086326047"), "{text}");
    let back: Verdict = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (back.decision, &back.row, &back.reason),
        (v.decision, &v.row, &v.reason)
    );
    assert!((back.heuristic_ms - v.heuristic_ms).abs() < 1e-12);
    // Nothing runnable: no spread (infinite), which JSON writes as null; it must read
    // back (a checkpoint line that did not would have the shape tuned again on resume).
    let v = decide_with(rounds(5, 1.0, None, None, 0.01), None, None);
    assert!(v.spread.is_infinite(), "{v:?}");
    let back: Verdict = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
    assert!(
        !back.spread.is_finite() && back.decision == v.decision,
        "{back:?}"
    );
}

#[test]
fn a_lower_median_from_a_few_lucky_rounds_is_not_adopted() {
    // 5% faster in every round: adopted; a median as low from five lucky rounds of eight,
    // slower in the others: the paired rounds do not agree.
    let heur = [1.00, 1.01, 0.99, 1.00, 1.02, 1.00, 0.98, 1.00];
    let with = |new: &[f64]| -> Vec<Round> {
        heur.iter()
            .zip(new)
            .map(|(&h, &n)| Round {
                heuristic: h,
                current: None,
                new: Some(n),
            })
            .collect()
    };
    let fast: Vec<f64> = heur.iter().map(|x| x * 0.95).collect();
    assert_eq!(
        decide_with(with(&fast), None, Some("x")).decision,
        Decision::Adopt
    );
    let lucky = [0.90, 0.90, 0.91, 0.92, 0.93, 1.10, 1.12, 1.15];
    let v = decide_with(with(&lucky), None, Some("x"));
    assert!(
        v.delta.unwrap() < -0.03,
        "the median alone would adopt it: {v:?}"
    );
    assert_ne!(v.decision, Decision::Adopt, "{v:?}");
    // 2% faster in every round: under a 3% margin.
    let slight: Vec<f64> = heur.iter().map(|x| x * 0.98).collect();
    assert_eq!(
        decide_with(with(&slight), None, Some("x")).decision,
        Decision::Default
    );
}
