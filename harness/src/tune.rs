//! Tuning one shape: every solution the library offers for it, timed against the heuristic
//! in the same session, interleaved, medians over several trials.
//!
//! This is the measuring core; curation rules, qualification and campaigns build on it.

use tunedblas_core::key::ProblemKey;

use crate::backend::{Library, Problem, Result};

/// Timings of one shape.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Median ms per call of the heuristic.
    pub heuristic_ms: f64,
    /// (solution, median ms per call), fastest first.
    pub candidates: Vec<(i32, f64)>,
    /// Relative spread (max-min)/median of the heuristic's trials: the noise floor.
    pub spread: f64,
}

impl Measured {
    pub fn best(&self) -> Option<(i32, f64)> {
        self.candidates.first().copied()
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Calls per timed sample so one sample lasts about `target_ms` (launch-bound shapes get
/// many back-to-back calls between two events instead of one call per sync).
fn calls_for(p: &Problem, target_ms: f64) -> Result<usize> {
    let once = p.time(None, 1)?.max(1e-4);
    Ok(((target_ms / once).ceil() as usize).clamp(1, 1000))
}

/// Measures the heuristic and every offered solution of `key`, interleaved over `trials`.
pub fn measure(lib: &Library, key: ProblemKey, trials: usize) -> Result<Measured> {
    let p = Problem::new(lib, key)?;
    let solutions = p.solutions()?;
    p.run(None, 0); // warm-up: caches, lazy initialisation
    let calls = calls_for(&p, 2.0)?;
    // Prune: one short probe each; anything over 1.5x the best probe is hopeless.
    let mut probes: Vec<(i32, f64)> = Vec::new();
    for &s in &solutions {
        if let Ok(ms) = p.time(Some(s), calls) {
            probes.push((s, ms));
        }
    }
    let floor = probes.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
    let survivors: Vec<i32> = probes
        .iter()
        .filter(|x| x.1 <= floor * 1.5)
        .map(|x| x.0)
        .collect();
    let mut heur = Vec::with_capacity(trials);
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(trials); survivors.len()];
    for _ in 0..trials.max(1) {
        heur.push(p.time(None, calls)?);
        for (i, &s) in survivors.iter().enumerate() {
            samples[i].push(p.time(Some(s), calls)?);
        }
    }
    let heuristic_ms = median(&mut heur.clone());
    let spread = (heur.iter().cloned().fold(f64::MIN, f64::max)
        - heur.iter().cloned().fold(f64::MAX, f64::min))
        / heuristic_ms;
    let mut candidates: Vec<(i32, f64)> = survivors
        .iter()
        .zip(samples.iter_mut())
        .map(|(&s, v)| (s, median(v)))
        .collect();
    candidates.sort_by(|a, b| a.1.total_cmp(&b.1));
    Ok(Measured {
        heuristic_ms,
        candidates,
        spread,
    })
}
