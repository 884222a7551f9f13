//! `--rest`: the device left idle after each timed sample, for a multiple of the time the
//! sample kept it busy. Back to back, compute-heavy GEMMs drive a GPU into its power cap
//! and its clock wanders under the samples (measured on the H200:
//! docs/benchmarks/history.md, issue 15); idle in between, it runs each sample at full
//! clock. Every library's default is [`crate::pipeline::DEFAULT_REST`].

/// The largest `--rest`: ten times the sample's time idle after it.
pub const MAX_REST: f64 = 10.0;

/// A `--rest` value as given, or what to say of it.
pub fn checked(v: f64) -> Result<f64, String> {
    if (0.0..=MAX_REST).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "--rest takes a multiple of the sample's time from 0 to {MAX_REST}, not {v}"
        ))
    }
}

/// What a rest does, for a campaign's opening lines.
pub fn words(rest: f64) -> String {
    if rest > 0.0 {
        format!("idle {rest}x each sample's time after it")
    } else {
        "samples back to back".into()
    }
}

/// Sleeps `ratio` times `device_ms` (at most a second): the rest after a sample that kept
/// the device busy `device_ms`. The caller has read the sample's result, so nothing is
/// queued: no kernel, not even a delay ahead of the next sample, runs during the rest.
pub fn after(ratio: f64, device_ms: f64) {
    let idle_ms = idle_ms(ratio, device_ms);
    if idle_ms > 0.0 {
        std::thread::sleep(std::time::Duration::from_secs_f64(idle_ms * 1e-3));
    }
}

/// The idle milliseconds [`after`] sleeps: `ratio` times `device_ms`, at most a second;
/// none where that is not a positive number.
pub fn idle_ms(ratio: f64, device_ms: f64) -> f64 {
    let idle_ms = ratio * device_ms;
    if idle_ms.is_finite() && idle_ms > 0.0 {
        idle_ms.min(1000.0)
    } else {
        0.0
    }
}
