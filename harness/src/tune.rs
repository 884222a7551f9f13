//! Tuning one shape: enumerate the library's solutions for exactly this problem, prune the
//! hopeless ones with short probes, time the survivors, then re-measure heuristic, current
//! row and new best in one session, interleaved, and hand the rounds to the curation rules.
//!
//! Every timed sample is many back-to-back calls between two events with no sync in
//! between (launch-bound mode): a small-M GEMM runs in microseconds, and a sync per call
//! would measure the sync. Calls rotate through operand sets larger than the caches.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use tunedblas_core::key::ProblemKey;
use tunedblas_core::tunableop::Solution;

use crate::backend::{Library, Problem};
use crate::curate::{self, Decision, Evidence, Round, Rules, Verdict};
use crate::error::Result;

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Method {
    /// Interleaved rounds of the final comparison (and of the survivors' timing).
    pub trials: usize,
    /// Undecidable after `trials`: keep adding rounds up to this many.
    pub max_trials: usize,
    /// A timed sample lasts about this long (ms).
    pub sample_ms: f64,
    /// Candidates slower than this factor times the best probe are pruned.
    pub prune: f64,
    /// Operand bytes the calls of a sample rotate through.
    pub rotate_bytes: usize,
    /// Samples are HIP graph replays of their calls (`--timing graph`) instead of the calls
    /// back to back between events.
    #[serde(default)]
    pub graph: bool,
    /// `--rest`: idle after each sample for this multiple of its device time (0: back to
    /// back, the default here: whether an AMD GPU's clock wanders under back-to-back GEMMs
    /// as the H200's did has not been measured).
    #[serde(default)]
    pub rest: f64,
}

impl Default for Method {
    fn default() -> Self {
        Method {
            trials: 7,
            max_trials: 21,
            sample_ms: 2.0,
            prune: 1.5,
            rotate_bytes: crate::backend::DEFAULT_ROTATE_BYTES,
            graph: false,
            rest: 0.0,
        }
    }
}

/// What tuning one shape found, with the evidence behind the verdict.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Tuned {
    /// Solutions the library offered for this exact problem.
    pub offered: usize,
    /// Candidates that survived the probes.
    pub survivors: usize,
    /// Calls per timed sample (1 = one call between events).
    pub calls_per_sample: usize,
    /// One call is much shorter than a sample: timed as many back-to-back calls, with twice
    /// the rounds (launch-bound timings are the noisiest).
    #[serde(default)]
    pub launch_bound: bool,
    /// Operand sets rotated through.
    pub operand_sets: usize,
    /// Fastest survivors with their median ms, best first (at most 5).
    pub leaders: Vec<(i32, f64)>,
    /// The final interleaved rounds: heuristic, current, new best.
    pub rounds: Vec<Round>,
    /// Relative (max - min) / median of the heuristic's own samples.
    pub heuristic_spread: f64,
    /// Wall time spent on probes and on full timing (s).
    pub probe_s: f64,
    pub timing_s: f64,
    /// Estimated wall time pruning saved (s): the pruned candidates' full timing.
    pub pruning_saved_s: f64,
    /// The timing mode the samples were taken in: `events`, `graph`, or `events (graph:
    /// why it could not be used)`.
    #[serde(default)]
    pub timing: String,
    pub verdict: Verdict,
    /// Graph timing failed after some samples: they are of two modes (not recorded; the
    /// shape is timed again with events).
    #[serde(skip)]
    pub mixed_timing: bool,
}

/// A probed solution and its probe time (ms).
type Probe = (i32, f64);

fn calls_for(p: &Problem, target_ms: f64) -> Result<usize> {
    let once = p.time(None, 1)?.max(1e-4);
    Ok(((target_ms / once).ceil() as usize).clamp(1, 10_000))
}

/// Tunes `key`; `current` is this build's row for it, if any.
pub fn tune(
    lib: &Library,
    key: ProblemKey,
    current: Option<&Solution>,
    method: &Method,
    rules: &Rules,
) -> Result<Tuned> {
    let t = tune_once(lib, key, current, method, rules)?;
    if !t.mixed_timing {
        return Ok(t);
    }
    // Graph timing failed part way: the samples before were graph replays, those after
    // calls back to back; compared, they would favour the one timed first. The shape is
    // timed again, every sample with events.
    let events = Method {
        graph: false,
        ..*method
    };
    let mut again = tune_once(lib, key, current, &events, rules)?;
    again.timing = format!("events (re-timed: {})", t.timing);
    Ok(again)
}

fn tune_once(
    lib: &Library,
    key: ProblemKey,
    current: Option<&Solution>,
    method: &Method,
    rules: &Rules,
) -> Result<Tuned> {
    let mut p = Problem::new(lib, key, method.rotate_bytes)?;
    if method.graph {
        p.use_graphs()?;
    }
    p.set_rest(method.rest);
    let offered = p.solutions()?;
    p.time(None, 2)?; // warm-up: lazy initialisation, code and caches
    let calls = calls_for(&p, method.sample_ms)?;
    let launch_bound = calls >= 8;
    let block = method.trials.max(1) * if launch_bound { 2 } else { 1 };

    // Probe: one short sample each; whatever is far behind the best is hopeless.
    let started = Instant::now();
    let probe_calls = calls.div_ceil(4);
    let mut probes: Vec<Probe> = Vec::new();
    for &s in &offered {
        if let Ok(ms) = p.time(Some(s), probe_calls) {
            probes.push((s, ms));
        }
    }
    let floor = probes.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
    let (keep, pruned): (Vec<&Probe>, Vec<&Probe>) =
        probes.iter().partition(|x| x.1 <= floor * method.prune);
    let probe_s = started.elapsed().as_secs_f64();
    // Each probe captured a graph of its own size (graph timing): only the survivors' are
    // replayed again, at the full sample size.
    p.clear_graphs();
    let pruning_saved_s = pruned
        .iter()
        .map(|x| x.1 * (calls * method.trials) as f64 / 1e3)
        .sum();

    // Time the survivors, interleaved, to find the new best.
    let started = Instant::now();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); keep.len()];
    for _ in 0..method.trials.max(1) {
        for (i, &&(s, _)) in keep.iter().enumerate() {
            samples[i].push(p.time(Some(s), calls)?);
        }
    }
    let mut leaders: Vec<(i32, f64)> = keep
        .iter()
        .zip(&samples)
        .map(|(&&(s, _), v)| (s, curate::median(v)))
        .collect();
    leaders.sort_by(|a, b| a.1.total_cmp(&b.1));
    leaders.truncate(5);
    let new = leaders.first().map(|x| x.0);
    // What a tuning returns, with the rounds of the final comparison and its verdict.
    let finish = |rounds: Vec<Round>, heuristic_spread: f64, verdict: Verdict| Tuned {
        offered: offered.len(),
        survivors: keep.len(),
        calls_per_sample: calls,
        launch_bound,
        operand_sets: p.sets(),
        leaders,
        rounds,
        heuristic_spread,
        probe_s,
        timing_s: started.elapsed().as_secs_f64(),
        pruning_saved_s,
        timing: p.timing(),
        verdict,
        mixed_timing: p.timing_mixed(),
    };

    // The current row's solution; one that no longer runs on this build is dropped.
    let current_id = match current {
        Some(Solution::Rocblas(id)) => Some(*id),
        _ => None,
    };
    if let Some(id) = current_id {
        if let Err(e) = p.time(Some(id), 1) {
            let mut verdict = curate::decide(
                &Evidence {
                    rounds: vec![],
                    current: None,
                    new: None,
                },
                rules,
            );
            verdict.decision = Decision::Drop;
            verdict.row = rules.keep_default.then_some(Solution::Default);
            verdict.reason = format!("the current row's solution {id} fails on this build: {e}");
            return Ok(finish(vec![], f64::NAN, verdict));
        }
    }

    // The final comparison: heuristic, current, new best, A B C A B C ..., extended while
    // undecidable.
    let mut rounds = Vec::new();
    let verdict = loop {
        for _ in 0..block {
            let heuristic = p.time(None, calls)?;
            let current = match current_id {
                Some(id) => Some(p.time(Some(id), calls)?),
                None => None,
            };
            let new = match new {
                Some(s) => Some(p.time(Some(s), calls)?),
                None => None,
            };
            rounds.push(Round {
                heuristic,
                current,
                new,
            });
        }
        let v = curate::decide(
            &Evidence {
                rounds: rounds.clone(),
                current: current.cloned(),
                new,
            },
            rules,
        );
        if v.decision != Decision::Undecidable || rounds.len() >= method.max_trials.max(block) {
            break v;
        }
    };
    let h: Vec<f64> = rounds.iter().map(|r| r.heuristic).collect();
    let (lo, hi) = h
        .iter()
        .fold((f64::INFINITY, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    let spread = (hi - lo) / curate::median(&h);
    Ok(finish(rounds, spread, verdict))
}
