//! Tuning one shape, the same steps for every library: the candidates, screened by short
//! probes within the shape's time budget and pruned to the fastest few; their numerics
//! against a high-precision reference; a warm-up until the device has settled; interleaved
//! trials of the heuristic, the current row and the candidates, resting between samples;
//! curation by margin, paired wins and spread ([`crate::curate`]); and a second, independent
//! set of trials in this process that must confirm an adoption. The campaign
//! ([`crate::campaign`]) then confirms it in a fresh process and qualifies it on every
//! device.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::bench::{Bench, Cand, Screen, ScreenStats};
use crate::curate::{self, pct, Decision, Evidence, Round, RowChoice, Rules, Verdict};
use crate::error::{Error, Result};
use crate::numerics::{median, spread, Judge};
use crate::timer::Mode;

/// How shapes are measured: one set of defaults for every library, each explained.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Method {
    /// Interleaved rounds of the trials, and again of the confirmation (15: with paired
    /// ratios trimmed of one extreme at each end, one outlier cannot decide).
    pub trials: usize,
    /// Undecidable after `trials`: rounds are added up to this many.
    pub max_trials: usize,
    /// Device time one timed sample spans, ms (1: long against a launch, short enough that
    /// 15 rounds of ten candidates take seconds).
    pub sample_ms: f64,
    /// Device time of one screening probe, ms (a quarter of a sample: thousands of
    /// candidates fit a budget).
    pub probe_ms: f64,
    /// Candidates slower than this factor times the best probe are pruned (1.5: a probe is
    /// noisy, but not by half).
    pub prune: f64,
    /// The fastest candidates of the screening that go on to the trials (8).
    pub keep: usize,
    /// Seconds of screening per shape (20; 0: no limit). hipBLASLt lists over a thousand
    /// algorithms for a problem on an MI300 and the cuBLASLt configuration space is larger
    /// still; probing them all would take minutes per shape. The candidates a library
    /// ranks best are offered first, so what the budget leaves out is the least promising.
    pub budget_s: f64,
    /// Operand bytes the calls of a sample rotate through (0: three times the device's
    /// last-level cache, so no call finds its inputs in a cache the previous one warmed).
    pub rotate_bytes: usize,
    /// Samples are graph replays of their calls (the default) or calls back to back.
    pub mode: Mode,
    /// Idle after each sample for this multiple of its device time (1: see
    /// [`crate::rest`]).
    pub rest: f64,
    /// Workspace bytes callers give the library (the Lt libraries; a candidate needing
    /// more is never adopted: the interposer would pass its calls through).
    pub workspace: usize,
    /// Adopt only what a fresh process confirms by the margin.
    pub fresh: bool,
}

/// The default `--rest`: as long idle as busy. Back-to-back 1-ms samples of the
/// compute-heavy shapes kept an H200's tensor cores busy for seconds; it capped its power in
/// software, its SM clock wandered, and those shapes' samples spread up to 9%. Resting 1x
/// kept the clock at 1980 MHz and the spreads at most 1.0%; 3x did no better
/// (docs/benchmarks/history.md, "the rest between samples"). Not yet measured on an AMD
/// GPU.
pub const DEFAULT_REST: f64 = 1.0;

impl Default for Method {
    fn default() -> Self {
        Method {
            trials: 15,
            max_trials: 45,
            sample_ms: 1.0,
            probe_ms: 0.25,
            prune: 1.5,
            keep: 8,
            budget_s: 20.0,
            rotate_bytes: 0,
            mode: Mode::Graph,
            rest: DEFAULT_REST,
            workspace: 1 << 20,
            fresh: true,
        }
    }
}

impl Method {
    /// The screening's time limit, where there is one.
    pub fn budget(&self) -> Option<Duration> {
        (self.budget_s > 0.0).then(|| Duration::from_secs_f64(self.budget_s))
    }

    /// Input sets a sample rotates through: enough to cover `rotate_bytes` (at least one,
    /// at most 64), sets of `set_bytes` each.
    pub fn sets(&self, set_bytes: usize, cache_bytes: usize) -> usize {
        let rotate = match self.rotate_bytes {
            0 => 3 * cache_bytes,
            r => r,
        };
        rotate.div_ceil(set_bytes.max(1)).clamp(1, 64)
    }
}

/// What tuning one shape found, with the evidence behind the verdict.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Tuned {
    /// What callers run without a row.
    pub heuristic: String,
    pub screen: ScreenStats,
    /// Candidates dropped after the screening, with why (pruned, wrong numerics).
    pub dropped: Vec<String>,
    /// Candidates that went on to the trials.
    pub survivors: usize,
    pub calls_per_sample: usize,
    pub input_sets: usize,
    /// Fastest candidates of the trials with their median ms, best first (at most 5).
    pub leaders: Vec<(String, f64)>,
    /// The rounds the verdict was reached on: heuristic, current, new best.
    pub rounds: Vec<Round>,
    /// The new best against the heuristic in the confirmation trials (adoptions only).
    pub confirm_delta: Option<f64>,
    /// ... and in a fresh process (the campaign's).
    #[serde(default)]
    pub fresh_delta: Option<f64>,
    /// Relative (max - min) / median of the heuristic's own samples.
    #[serde(deserialize_with = "crate::numerics::null_as_nan")]
    pub heuristic_spread: f64,
    /// Device ms the heuristic ran before the trials, until settled.
    #[serde(deserialize_with = "crate::numerics::null_as_nan")]
    pub warm_up_ms: f64,
    /// `graph`, `events`, or `events (graph: why it could not be used)`.
    pub timing: String,
    /// The shape against its limit (where the limits were measured).
    #[serde(default)]
    pub limit: Option<crate::limits::ShapeLimit>,
    pub seconds: f64,
    pub verdict: Verdict,
    /// Graph timing failed after some samples: they are of two modes (the shape is timed
    /// again with events).
    #[serde(skip)]
    pub mixed: bool,
}

/// Device time of sustained work before timed trials. After host-side work (numerics, the
/// screening's bookkeeping) the GPU has idled and its clocks run high for the first tens of
/// milliseconds of load: without this, the first trials of memory-heavy shapes ran up to 13%
/// faster than the rest on an H200.
pub const WARM_UP_MS: f64 = 200.0;

/// The warm-up goes on past [`WARM_UP_MS`], up to this much device time, until the device
/// has settled: under sustained tensor-core load the card's clocks come down after a few
/// hundred milliseconds, a drift windows of a few 1-ms samples do not see.
pub const WARM_UP_MAX_MS: f64 = 1200.0;

/// Settled: the median of the samples of the last [`SETTLE_WINDOW_MS`] of device time
/// within [`SETTLE_TOLERANCE`] of the median of the window before.
const SETTLE_WINDOW_MS: f64 = 100.0;
const SETTLE_TOLERANCE: f64 = 0.01;

/// Whether samples (oldest first, each `sample_ms` of device time) have stopped drifting.
pub fn settled(samples: &[f64], sample_ms: f64) -> bool {
    let w = ((SETTLE_WINDOW_MS / sample_ms.max(1e-6)).ceil() as usize).max(5);
    if samples.len() < 2 * w {
        return false;
    }
    let last = median(&samples[samples.len() - w..]);
    let before = median(&samples[samples.len() - 2 * w..samples.len() - w]);
    (last / before - 1.0).abs() <= SETTLE_TOLERANCE
}

/// Runs samples of `algo` for at least [`WARM_UP_MS`] of device time, then until they
/// settle or [`WARM_UP_MAX_MS`] has passed (at most 5000 samples). Device ms spent.
pub fn warm_up<B: Bench>(b: &B, algo: &B::Algo, calls: usize) -> Result<f64> {
    let ops = calls.max(b.sets()) as f64;
    let (mut spent, mut samples) = (0.0, Vec::new());
    for _ in 0..5000 {
        let sample_ms = spent / samples.len().max(1) as f64;
        if spent >= WARM_UP_MAX_MS || (spent >= WARM_UP_MS && settled(&samples, sample_ms)) {
            break;
        }
        let ms = b.time(algo, calls)?;
        samples.push(ms);
        spent += ms * ops;
    }
    Ok(spent)
}

/// Interleaved rounds `first..first + n`: round `t` times every algorithm once, starting at
/// a rotating offset so none always runs first; round `t` ends with the algorithm round
/// `t + 1` does not start with, so rounds that go on never time one twice in a row.
pub fn rounds<B: Bench>(
    b: &B,
    algos: &[&B::Algo],
    calls: usize,
    first: usize,
    n: usize,
) -> Result<Vec<Vec<f64>>> {
    let mut out = vec![Vec::with_capacity(n); algos.len()];
    for t in first..first + n {
        for j in 0..algos.len() {
            let i = (j + t) % algos.len();
            out[i].push(b.time(algos[i], calls)?);
        }
    }
    Ok(out)
}

/// Interleaved rounds run and dropped ahead of the recorded ones: after the warm-up had
/// settled, the first two recorded rounds of the heaviest shapes still ran 4-6% faster than
/// the rest on an H200. The trials' own interleaved work is the warm-up that matches them.
pub const WARM_ROUNDS: usize = 2;

/// [`rounds`] after [`WARM_ROUNDS`] unrecorded rounds of the same interleaving.
pub fn warmed_trials<B: Bench>(
    b: &B,
    algos: &[&B::Algo],
    calls: usize,
    n: usize,
) -> Result<Vec<Vec<f64>>> {
    rounds(b, algos, calls, 0, WARM_ROUNDS)?;
    rounds(b, algos, calls, WARM_ROUNDS, n)
}

/// Calls per sample spanning `ms` of the heuristic's work (measured once `once` per call).
fn calls_for(ms: f64, once: f64) -> usize {
    ((ms / once.max(1e-5)).ceil() as usize).clamp(1, 10_000)
}

/// The rounds of (heuristic, current, new) out of the trials of `[heuristic, current?,
/// candidates...]`.
fn as_rounds(t: &[Vec<f64>], current: bool, new: Option<usize>) -> Vec<Round> {
    let first_cand = 1 + usize::from(current);
    (0..t[0].len())
        .map(|r| Round {
            heuristic: t[0][r],
            current: current.then(|| t[1][r]),
            new: new.map(|i| t[first_cand + i][r]),
        })
        .collect()
}

/// Tunes the shape `b` is; `current` is the profile's row for it, if any.
pub fn tune_shape<B: Bench>(
    b: &B,
    current: Option<&RowChoice>,
    m: &Method,
    rules: &Rules,
) -> Result<Tuned> {
    let t0 = Instant::now();
    let heur = b.heuristic()?;
    for _ in 0..3 {
        b.time(&heur.algo, 4)?; // lazy initialisation, code and caches; graphs captured
    }
    let once = b.time(&heur.algo, 8)?;
    let calls = calls_for(m.sample_ms, once).clamp(2, 400);
    let probe_calls = calls_for(m.probe_ms, once).min(400);

    // Screening: one short probe each, within the budget; the fastest few go on.
    let probe = |a: &B::Algo| b.probe(a, probe_calls);
    let heur_probe = probe(&heur.algo)?;
    let mut screen = Screen::new(&probe, m.budget(), &heur.name);
    b.candidates(&mut screen)?;
    b.timer().clear_graphs();
    let Screen {
        mut found, stats, ..
    } = screen;
    found.sort_by(|x, y| x.1.total_cmp(&y.1));
    let floor = found.first().map_or(heur_probe, |f| f.1.min(heur_probe));
    let mut dropped = Vec::new();
    let mut kept: Vec<Cand<B::Algo>> = Vec::new();
    for (c, ms) in found {
        if ms > m.prune * floor {
            dropped.push(format!(
                "{}: probe {ms:.4} ms, over {}x the best",
                c.name, m.prune
            ));
        } else if kept.len() >= m.keep.max(1) {
            dropped.push(format!(
                "{}: probe {ms:.4} ms, not among the {} fastest",
                c.name, m.keep
            ));
        } else {
            kept.push(c);
        }
    }

    // Numerics: every candidate against the reference; a wrong one is out.
    let judge =
        Judge::new(b.layout(), b.reference()?, b.output(&heur.algo)?).map_err(Error::failed)?;
    let mut cands = Vec::new();
    for c in kept {
        match judge.check(&b.output(&c.algo)?) {
            Ok(_) => cands.push(c),
            Err(why) => dropped.push(format!("{}: {why}", c.name)),
        }
    }

    // What every verdict is reported with.
    let (survivors, heuristic) = (cands.len(), heur.name.clone());
    let done = move |verdict, leaders, rounds, confirm_delta, heuristic_spread, warm_up_ms| Tuned {
        heuristic,
        screen: stats,
        dropped,
        survivors,
        calls_per_sample: calls,
        input_sets: b.sets(),
        leaders,
        rounds,
        confirm_delta,
        fresh_delta: None,
        heuristic_spread,
        warm_up_ms,
        timing: b.timer().mode_name(),
        limit: None,
        seconds: t0.elapsed().as_secs_f64(),
        verdict,
        mixed: b.timer().mixed(),
    };

    // The current row: one that no longer runs (or computes wrong results) on this build
    // goes.
    let cur_algo = match current {
        Some(RowChoice::Mine(name)) => match b
            .resolve(name)
            .and_then(|a| Ok((judge.check(&b.output(&a).map_err(|e| e.message)?)?, a)))
        {
            Ok((_, a)) => Some(a),
            Err(e) => {
                let mut v = curate::decide(&Evidence::default(), rules);
                v.decision = Decision::Drop;
                v.row = rules.keep_default.then_some(RowChoice::Default);
                v.reason = format!("the current row's solution {name} fails on this build: {e}");
                return Ok(done(v, vec![], vec![], None, f64::NAN, 0.0));
            }
        },
        _ => None,
    };

    // Warm-up, then the interleaved trials of heuristic, current row and candidates.
    let mut algos: Vec<&B::Algo> = vec![&heur.algo];
    algos.extend(cur_algo.iter());
    algos.extend(cands.iter().map(|c| &c.algo));
    let warm_up_ms = warm_up(b, &heur.algo, calls)?;
    let t = warmed_trials(b, &algos, calls, m.trials.max(1))?;
    let first = algos.len() - cands.len();
    let mut leaders: Vec<(usize, f64)> = (0..cands.len())
        .map(|i| (i, median(&t[first + i])))
        .collect();
    leaders.sort_by(|x, y| x.1.total_cmp(&y.1));
    let best = leaders.first().map(|x| x.0);
    let mut rounds_of = as_rounds(&t, cur_algo.is_some(), best);
    let evidence = |rounds: &[Round]| Evidence {
        rounds: rounds.to_vec(),
        current: current.cloned(),
        new: best.map(|i| cands[i].name.clone()),
    };
    // The decision, with rounds added while the difference is inside the spread.
    let mut three: Vec<&B::Algo> = vec![&heur.algo];
    three.extend(cur_algo.iter());
    three.extend(best.map(|i| &cands[i].algo));
    // Rounds of the three added to `v` (decided `d`) until it has `least`, and on while the
    // decision is undecidable, up to the most trials.
    let extend = |v: &mut Vec<Round>, mut d: Verdict, least: usize| -> Result<Verdict> {
        while v.len() < least || (d.decision == Decision::Undecidable && v.len() < m.max_trials) {
            let more = rounds(b, &three, calls, v.len(), m.trials.max(1))?;
            v.extend(as_rounds(&more, cur_algo.is_some(), best.map(|_| 0)));
            d = curate::decide(&evidence(v), rules);
        }
        Ok(d)
    };
    let decided = curate::decide(&evidence(&rounds_of), rules);
    let mut verdict = extend(&mut rounds_of, decided, 0)?;
    // An adoption must hold in a second, independent set of trials (extended as the first
    // while the difference is inside the spread).
    let mut confirm_delta = None;
    if verdict.decision == Decision::Adopt {
        let second = extend(&mut Vec::new(), verdict.clone(), m.trials.max(1))?;
        confirm_delta = second.delta;
        if second.decision != Decision::Adopt {
            verdict = Verdict {
                reason: format!(
                    "{} selected, but the confirmation trials: {}",
                    verdict.delta.map_or("-".into(), pct),
                    second.reason
                ),
                ..second
            };
        } else {
            let confirmed = second.delta.map_or("-".into(), pct);
            verdict.reason = format!("{}; {confirmed} confirmed", verdict.reason);
        }
    }
    let h: Vec<f64> = rounds_of.iter().map(|r| r.heuristic).collect();
    let leaders = leaders.iter().take(5);
    let leaders = leaders
        .map(|&(i, ms)| (cands[i].name.clone(), ms))
        .collect();
    Ok(done(
        verdict,
        leaders,
        rounds_of,
        confirm_delta,
        spread(&h),
        warm_up_ms,
    ))
}

/// The heuristic, the algorithm a row names and the row's relative error.
type Judged<B> = (Cand<<B as Bench>::Algo>, <B as Bench>::Algo, f64);

/// The heuristic and the algorithm a row names, the row's output judged against the
/// reference as a candidate's is: its relative error, or why it is wrong.
fn judged<B: Bench>(b: &B, name: &str) -> std::result::Result<Judged<B>, String> {
    let heur = b.heuristic().map_err(|e| e.message)?;
    let algo = b.resolve(name)?;
    let out = |a: &B::Algo| b.output(a).map_err(|e| e.message);
    let judge = Judge::new(
        b.layout(),
        b.reference().map_err(|e| e.message)?,
        out(&heur.algo)?,
    )?;
    let err = judge.check(&out(&algo)?)?;
    Ok((heur, algo, err))
}

/// Qualification of a row on this device: its numerics against the reference.
pub fn qualify<B: Bench>(b: &B, name: &str) -> std::result::Result<(), String> {
    judged(b, name).map(|_| ())
}

/// A row re-measured against the heuristic in this process (the fresh-process
/// confirmation, `tunedblas confirm`): its numerics judged as tuning judges a candidate's
/// (a row off by more is an error, not timed), then interleaved trials of the two after
/// the same sample sizing and warm-up.
pub fn measure_pair<B: Bench>(b: &B, name: &str, m: &Method) -> std::result::Result<Pair, String> {
    let (heur, algo, rel_err) = judged(b, name)?;
    let run = || -> Result<Pair> {
        for _ in 0..3 {
            b.time(&algo, 4)?;
            b.time(&heur.algo, 4)?;
        }
        let calls = calls_for(m.sample_ms, b.time(&heur.algo, 8)?).clamp(2, 400);
        b.time(&algo, calls)?;
        warm_up(b, &heur.algo, calls)?;
        let t = warmed_trials(b, &[&heur.algo, &algo], calls, m.trials.max(1))?;
        let c = curate::Compare::of(&t[1], &t[0]);
        Ok(Pair {
            heuristic_ms: median(&t[0]),
            tuned_ms: median(&t[1]),
            delta: c.delta,
            spread: c.spread,
            rel_err,
        })
    };
    run().map_err(|e| e.message)
}

/// What [`measure_pair`] measured.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Pair {
    pub heuristic_ms: f64,
    pub tuned_ms: f64,
    /// median(tuned / heuristic) - 1 over the paired rounds: negative when the row is
    /// faster.
    pub delta: f64,
    pub spread: f64,
    pub rel_err: f64,
}
