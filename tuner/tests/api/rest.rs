//! The rest between samples (`tunedblas_tuner::rest`) through its public API.

use tunedblas_tuner::rest::*;

#[test]
fn the_rest_is_its_multiple_of_the_busy_time_at_most_a_second() {
    assert!((idle_ms(2.0, 3.6) - 7.2).abs() < 1e-12);
    assert_eq!(idle_ms(1.0, 5000.0), 1000.0);
    for (ratio, ms) in [
        (0.0, 5.0),
        (1.0, 0.0),
        (f64::NAN, 1.0),
        (1.0, f64::INFINITY),
        (-1.0, 2.0),
    ] {
        assert_eq!(idle_ms(ratio, ms), 0.0, "{ratio} x {ms}");
    }
}

#[test]
fn a_rest_outside_0_to_10_is_refused_by_name() {
    assert_eq!(checked(0.0), Ok(0.0));
    assert_eq!(checked(10.0), Ok(10.0));
    for v in [-1.0, 10.5, f64::NAN, f64::INFINITY] {
        let e = checked(v).unwrap_err();
        assert!(e.starts_with("--rest takes a multiple"), "{e}");
    }
    assert_eq!(words(0.0), "samples back to back");
    assert_eq!(words(1.5), "idle 1.5x each sample's time after it");
}
