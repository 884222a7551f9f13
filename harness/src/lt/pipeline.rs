//! The decision every Lt library's tuning shares, from candidates to a row: numerics against
//! a reference, one short probe each, a warm-up, interleaved trials, selection by margin and
//! paired wins, and a second set of trials that must confirm the margin. cuBLASLt
//! (`tune.rs`: the heuristic's answers rebuilt from their configurations, the wider search)
//! and hipBLASLt (`hip/tune.rs`: every algorithm `getAllAlgos` lists) differ only in where
//! the candidates come from and how an algorithm is run, which is [`Bench`].

use tunedblas_core::cublaslt::{op_and_signature, LtAction, LtKey};

use super::cuda::{err, Result};
use super::numeric::{median, rel_l2, spread, tolerance};
use super::tune::{Options, Outcome, Recheck, Timed};

/// One problem of one library, ready to run: what the pipeline needs of it.
pub trait Bench {
    /// The library's algorithm value (`cublasLtMatmulAlgo_t`, `hipblasLtMatmulAlgo_t`).
    type Algo;
    fn key(&self) -> &LtKey;
    /// Input sets the timed calls rotate through.
    fn sets(&self) -> usize;
    /// Milliseconds per call over `calls` calls of `algo`, in the problem's timing mode.
    fn time(&self, algo: &Self::Algo, calls: usize) -> Result<f64>;
    /// D of input set 0 computed with `algo`, as f64 (unwritten elements show as NaN).
    fn output(&self, algo: &Self::Algo) -> Result<Vec<f64>>;
    /// A reference D for input set 0 without output rounding, where the problem has one.
    fn reference(&self) -> Result<Option<Vec<f64>>>;
    /// Device milliseconds the last [`Bench::time`] of `calls` calls kept the device busy,
    /// given its result `ms` per call: what [`Rested`] rests after. By default one call
    /// per input set at least (a graph replay's calls); a bench that times fewer calls
    /// (events) or runs more than it times (an untimed replay ahead) says so. The delay
    /// ahead of a sample is not counted: the spin kernel holds one thread.
    fn busy_ms(&self, ms: f64, calls: usize) -> f64 {
        ms * calls.max(self.sets()) as f64
    }
}

/// The default `--rest`: as long idle as busy. Back-to-back 1-ms samples of the
/// compute-heavy shapes keep the tensor cores busy for seconds; under that load the H200
/// capped its power in software (clock event reason 0x4, SW power cap, in 41-46% of the
/// 100-ms readings, at under 480 W average of a 700 W limit), its SM clock wandered below
/// 1980 MHz, and those shapes' samples spread up to 9%. Resting 1x kept the clock at
/// 1980 MHz and the same shapes' spreads at most 1.0% (paired with the best answer, 1.6%);
/// 3x did no better (BENCHMARKS.md, issue 15).
pub const DEFAULT_REST: f64 = 1.0;

/// A bench that leaves the device idle after each timed sample for `ratio` times the
/// sample's device time (`--rest`, see [`DEFAULT_REST`]).
pub struct Rested<'b, B> {
    pub bench: &'b B,
    pub ratio: f64,
}

impl<B: Bench> Bench for Rested<'_, B> {
    type Algo = B::Algo;
    fn key(&self) -> &LtKey {
        self.bench.key()
    }
    fn sets(&self) -> usize {
        self.bench.sets()
    }
    fn time(&self, algo: &B::Algo, calls: usize) -> Result<f64> {
        let ms = self.bench.time(algo, calls)?;
        crate::rest::after(self.ratio, self.bench.busy_ms(ms, calls));
        Ok(ms)
    }
    fn output(&self, algo: &B::Algo) -> Result<Vec<f64>> {
        self.bench.output(algo)
    }
    fn reference(&self) -> Result<Option<Vec<f64>>> {
        self.bench.reference()
    }
    fn busy_ms(&self, ms: f64, calls: usize) -> f64 {
        self.bench.busy_ms(ms, calls)
    }
}

/// A candidate: the row it would become, the algorithm that runs it, the workspace it needs.
pub struct Cand<A> {
    pub action: LtAction,
    pub algo: A,
    pub workspace: usize,
}

impl<A> Cand<A> {
    pub fn name(&self) -> String {
        self.action.solution_text()
    }
}

/// Decides from selection trials: the index of the best candidate and whether it clears
/// the margin and wins enough paired trials. `heur[t]` and `cands[i][t]` are trial `t`.
pub fn select(
    heur: &[f64],
    cands: &[Vec<f64>],
    margin: f64,
    win_share: f64,
) -> (Option<usize>, f64, f64, bool) {
    let h = median(heur);
    let best = (0..cands.len()).min_by(|&a, &b| median(&cands[a]).total_cmp(&median(&cands[b])));
    let Some(i) = best else {
        return (None, 0.0, 0.0, false);
    };
    let gain = 1.0 - median(&cands[i]) / h;
    let wins =
        heur.iter().zip(&cands[i]).filter(|(h, c)| c < h).count() as f64 / heur.len().max(1) as f64;
    (Some(i), gain, wins, gain >= margin && wins >= win_share)
}

/// Interleaved trials: trial `t` times every algorithm once, starting at a rotating offset so
/// no algorithm always runs first (or right after the delay).
pub fn trials<B: Bench>(
    b: &B,
    algos: &[&B::Algo],
    calls: usize,
    n: usize,
) -> Result<Vec<Vec<f64>>> {
    rounds(b, algos, calls, 0, n)
}

/// [`trials`] whose rotation starts at offset `first`. Trial `t` ends with the algorithm
/// trial `t + 1` does not start with (for three or more), so a run that goes on from
/// `first = t + 1` never times one algorithm twice in a row.
fn rounds<B: Bench>(
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

/// Device time of sustained work before timed trials. After host-side work (numerics, the
/// search's bookkeeping) the GPU has idled and its clocks run high for the first tens of
/// milliseconds of load: without this, the first trials of memory-heavy shapes ran up to 13%
/// faster than the rest (BENCHMARKS.md, issue 15).
pub const WARM_UP_MS: f64 = 200.0;

/// The warm-up goes on past [`WARM_UP_MS`], up to this much device time, until the device
/// has settled. With 200 ms alone, the first two trial rounds of the heaviest shapes still
/// ran 5-6% faster than the rest (campaign f, BENCHMARKS.md): under sustained tensor-core
/// load the card's clocks come down after a few hundred milliseconds, a drift that windows
/// of a few 1-ms samples do not see.
pub const WARM_UP_MAX_MS: f64 = 1200.0;

/// Settled: the median of the samples of the last [`SETTLE_WINDOW_MS`] of device time
/// within [`SETTLE_TOLERANCE`] of the median of the window before.
const SETTLE_WINDOW_MS: f64 = 100.0;
const SETTLE_TOLERANCE: f64 = 0.01;

/// Whether samples (oldest first, each `sample_ms` of device time) have stopped drifting:
/// the medians of the last two windows of [`SETTLE_WINDOW_MS`] (at least 5 samples each)
/// agree.
pub fn settled(samples: &[f64], sample_ms: f64) -> bool {
    let w = ((SETTLE_WINDOW_MS / sample_ms.max(1e-6)).ceil() as usize).max(5);
    if samples.len() < 2 * w {
        return false;
    }
    let last = median(&samples[samples.len() - w..]);
    let before = median(&samples[samples.len() - 2 * w..samples.len() - w]);
    (last / before - 1.0).abs() <= SETTLE_TOLERANCE
}

/// Runs samples of `algo` for at least `WARM_UP_MS` of device time, then until they settle
/// or `WARM_UP_MAX_MS` has passed (at most 5000 samples). Device milliseconds spent.
pub fn warm_up<B: Bench>(b: &B, algo: &B::Algo, calls: usize) -> Result<f64> {
    let ops = calls.max(b.sets()) as f64;
    let mut spent = 0.0;
    let mut samples = Vec::new();
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

/// Interleaved rounds run and dropped ahead of the recorded trials: after the heuristic's
/// warm-up had settled, the first two recorded rounds of the heaviest shapes still ran 4-6%
/// faster than the rest (campaign h, BENCHMARKS.md). Running the trials' own interleaved
/// work first is the warm-up that matches them.
pub const WARM_ROUNDS: usize = 2;

/// [`trials`] after [`WARM_ROUNDS`] unrecorded rounds of the same interleaving. The recorded
/// rounds go on with the rotation: started afresh, the heuristic closed the last unrecorded
/// round and opened the first recorded one, and that back-to-back sample of 336x10240 at
/// M=256 ran 2.5% faster than its other 14 in both campaigns k and l (BENCHMARKS.md), the
/// one spread over 3% left.
pub fn warmed_trials<B: Bench>(
    b: &B,
    algos: &[&B::Algo],
    calls: usize,
    n: usize,
) -> Result<Vec<Vec<f64>>> {
    rounds(b, algos, calls, 0, WARM_ROUNDS)?;
    rounds(b, algos, calls, WARM_ROUNDS, n)
}

/// Calls per timed sample: about `sample_ms` of the heuristic's work.
pub fn sample_calls<B: Bench>(b: &B, base: &B::Algo, opts: &Options) -> Result<usize> {
    for _ in 0..3 {
        b.time(base, 4)?;
    }
    let once = b.time(base, 8)?;
    Ok(((opts.sample_ms / once.max(1e-4)).ceil() as usize).clamp(2, 400))
}

/// One sample each; anything over 1.5x the best probe cannot win. The indices kept.
fn probe_prune<B: Bench>(
    b: &B,
    base: &B::Algo,
    cands: &[Cand<B::Algo>],
    calls: usize,
    dropped: &mut Vec<String>,
) -> Result<Vec<usize>> {
    let mut probes = vec![b.time(base, calls)?];
    for c in cands {
        probes.push(b.time(&c.algo, calls)?);
    }
    let floor = probes.iter().copied().fold(f64::INFINITY, f64::min);
    let mut keep = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        if probes[i + 1] <= 1.5 * floor {
            keep.push(i);
        } else {
            dropped.push(format!(
                "{}: probe {:.4} ms, over 1.5x the best",
                c.name(),
                probes[i + 1]
            ));
        }
    }
    Ok(keep)
}

/// What outputs are judged against: the reference (or, where the problem has none, the
/// heuristic's own output), the heuristic's error against it, and the tolerance a
/// candidate must keep. A heuristic whose own output is off fails the shape.
struct Judge {
    reference: Vec<f64>,
    base_err: f64,
    tol: f64,
}

impl Judge {
    fn new<B: Bench>(b: &B, base: &B::Algo) -> Result<Judge> {
        let d_type = b.key().d_type;
        let reference = b.reference()?;
        let base_out = b.output(base)?;
        let (reference, base_err) = match reference {
            Some(r) => {
                let e = rel_l2(&base_out, &r);
                (r, e)
            }
            // Without a reference the heuristic's output is one; an element it left unwritten
            // (still the NaN the buffer was poisoned with) or a NaN it computed says it is not.
            None if base_out.iter().any(|x| x.is_nan()) => (base_out, f64::NAN),
            None => (base_out, 0.0),
        };
        if base_err.is_nan() || base_err > tolerance(d_type) {
            return err(format!(
                "the heuristic's own result is off by {base_err:.2e} (tolerance {:.0e}): inputs or reference are wrong",
                tolerance(d_type)
            ));
        }
        Ok(Judge {
            reference,
            base_err,
            tol: tolerance(d_type).max(2.0 * base_err),
        })
    }

    /// `algo`'s relative error, or why it is not kept.
    fn error_of<B: Bench>(&self, b: &B, algo: &B::Algo) -> std::result::Result<f64, String> {
        let out = b.output(algo).map_err(|e| e.0)?;
        match rel_l2(&out, &self.reference) {
            e if e <= self.tol => Ok(e),
            e => Err(format!("relative error {e:.2e} over {:.1e}", self.tol)),
        }
    }
}

/// Numerics: every candidate within tolerance of the reference is kept (the others dropped,
/// with why). Returns the heuristic's error and each kept candidate's.
fn check_numerics<B: Bench>(
    b: &B,
    base: &B::Algo,
    cands: &mut Vec<Cand<B::Algo>>,
    dropped: &mut Vec<String>,
) -> Result<(f64, Vec<f64>)> {
    let judge = Judge::new(b, base)?;
    let mut errs = Vec::new();
    cands.retain(|c| match judge.error_of(b, &c.algo) {
        Ok(e) => {
            errs.push(e);
            true
        }
        Err(why) => {
            dropped.push(format!("{}: {why}", c.name()));
            false
        }
    });
    Ok((judge.base_err, errs))
}

/// From candidates to a decision: numerics, probes, warm-up, selection trials, and the
/// in-process confirmation of the winner. `base` is what the caller runs (the heuristic's
/// first answer, named `base_name`); `dropped` holds what was dropped before.
pub fn decide<B: Bench>(
    b: &B,
    base: (&B::Algo, &str, usize),
    mut cands: Vec<Cand<B::Algo>>,
    opts: &Options,
    mut dropped: Vec<String>,
) -> Result<Outcome> {
    let b = &Rested {
        bench: b,
        ratio: opts.rest,
    };
    let key = *b.key();
    let (op, signature) = op_and_signature(&key);
    let (base_algo, base_name, base_ws) = base;
    let (base_err, errs) = check_numerics(b, base_algo, &mut cands, &mut dropped)?;
    let calls = sample_calls(b, base_algo, opts)?;
    let keep = probe_prune(b, base_algo, &cands, calls, &mut dropped)?;
    let mut algos: Vec<&B::Algo> = vec![base_algo];
    algos.extend(keep.iter().map(|&i| &cands[i].algo));
    // The probes captured every graph; the device is warmed up right before the trials.
    let warm_ms = warm_up(b, base_algo, calls)?;
    let times = warmed_trials(b, &algos, calls, opts.trials)?;
    let timed = |solution: String, s: &[f64], e: f64, ws: usize| Timed {
        solution,
        median_ms: median(s),
        spread: spread(s),
        rel_err: e,
        workspace: ws,
        samples: s.to_vec(),
    };
    let heuristic = timed(base_name.to_string(), &times[0], base_err, base_ws);
    let (best, gain, wins, pass) = select(&times[0], &times[1..], opts.margin, opts.win_share);
    let mut candidates: Vec<Timed> = keep
        .iter()
        .enumerate()
        .map(|(j, &i)| timed(cands[i].name(), &times[j + 1], errs[i], cands[i].workspace))
        .collect();
    let mut out = Outcome {
        op,
        signature,
        calls_per_sample: calls,
        input_sets: b.sets(),
        heuristic,
        candidates: Vec::new(),
        dropped,
        adopted: None,
        gain,
        confirm_gain: None,
        fresh_gain: None,
        win_share: wins,
        reason: String::new(),
        timing: String::new(),
        bytes_moved: super::problem::bytes_moved(&key),
        limit_ms: None,
        heuristic_pct_of_limit: None,
        best_pct_of_limit: None,
        warm_up_ms: warm_ms,
        roofline: None,
        search: None,
        action: Some(LtAction::Default),
        key: Some(key),
    };
    match best {
        None => out.reason = "no other candidate survived numerics and the probe".into(),
        Some(_) if !pass => {
            out.reason = format!(
                "best candidate {:+.1}% with {:.0}% paired wins: under the {:.0}% margin or {:.0}% wins",
                gain * 100.0,
                wins * 100.0,
                opts.margin * 100.0,
                opts.win_share * 100.0
            )
        }
        Some(j) => confirm_in_process(b, base_algo, &cands[keep[j]], gain, calls, opts, &mut out)?,
    }
    candidates.sort_by(|a, b| a.median_ms.total_cmp(&b.median_ms));
    out.candidates = candidates;
    Ok(out)
}

/// The second, independent set of trials in this process: the selection's winner is
/// proposed only if it keeps the margin there (a fresh process may decide after).
fn confirm_in_process<B: Bench>(
    b: &B,
    base: &B::Algo,
    c: &Cand<B::Algo>,
    gain: f64,
    calls: usize,
    opts: &Options,
    out: &mut Outcome,
) -> Result<()> {
    let again = trials(b, &[base, &c.algo], calls, opts.trials)?;
    let cg = 1.0 - median(&again[1]) / median(&again[0]);
    out.confirm_gain = Some(cg);
    if cg >= opts.margin {
        out.adopted = Some(c.name());
        out.action = Some(c.action);
        out.reason = format!(
            "{:+.1}% selected, {:+.1}% confirmed",
            gain * 100.0,
            cg * 100.0
        );
    } else {
        out.reason = format!(
            "{:+.1}% selected but only {:+.1}% in the confirmation trials",
            gain * 100.0,
            cg * 100.0
        );
    }
    Ok(())
}

/// A row re-measured against the heuristic (`recheck`): its numerics judged as tuning
/// judges a candidate's (a row off by more is an error, not timed), then interleaved trials
/// of the two after the same sample sizing and warm-up; the result goes into `r`.
pub fn measure_pair<B: Bench>(
    b: &B,
    base: &B::Algo,
    algo: &B::Algo,
    opts: &Options,
    r: &mut Recheck,
) -> Result<()> {
    let b = &Rested {
        bench: b,
        ratio: opts.rest,
    };
    match Judge::new(b, base)?.error_of(b, algo) {
        Ok(e) => r.rel_err = Some(e),
        Err(why) => {
            r.error = Some(why);
            return Ok(());
        }
    }
    for _ in 0..3 {
        b.time(algo, 4)?;
    }
    let calls = sample_calls(b, base, opts)?;
    // Both graphs captured first (capture leaves the device idle), then the warm-up.
    b.time(algo, calls)?;
    b.time(base, calls)?;
    warm_up(b, base, calls)?;
    let t = warmed_trials(b, &[base, algo], calls, opts.trials)?;
    r.heuristic_ms = median(&t[0]);
    r.heuristic_spread = spread(&t[0]);
    r.tuned_ms = median(&t[1]);
    r.tuned_spread = spread(&t[1]);
    r.gain = 1.0 - r.tuned_ms / r.heuristic_ms;
    r.still_wins = r.tuned_ms < r.heuristic_ms;
    r.confirmed = r.gain >= opts.margin;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bench whose algorithms are numbers: each call records which ran and returns a
    /// time that falls by 10% per call for the first `slow_start` calls, then stays flat.
    struct Clocked {
        key: LtKey,
        ran: std::cell::RefCell<Vec<u32>>,
        slow_start: usize,
    }

    impl Bench for Clocked {
        type Algo = u32;
        fn key(&self) -> &LtKey {
            &self.key
        }
        fn sets(&self) -> usize {
            1
        }
        fn time(&self, algo: &u32, _calls: usize) -> Result<f64> {
            let mut ran = self.ran.borrow_mut();
            ran.push(*algo);
            let n = ran.len().min(self.slow_start) as f64;
            Ok(1.0 + *algo as f64 * 0.01 - 0.1 * n / self.slow_start as f64)
        }
        fn output(&self, _: &u32) -> Result<Vec<f64>> {
            Ok(Vec::new())
        }
        fn reference(&self) -> Result<Option<Vec<f64>>> {
            Ok(None)
        }
    }

    #[test]
    fn warmed_trials_record_only_the_rounds_after_the_unrecorded_ones() {
        use tunedblas_core::cublaslt::R_16BF;
        let b = Clocked {
            key: LtKey::linear(R_16BF, 64, 64, 64),
            ran: Default::default(),
            // The device settles during the unrecorded rounds (3 algorithms x 2 rounds).
            slow_start: 3 * WARM_ROUNDS,
        };
        let t = warmed_trials(&b, &[&0, &1, &2], 1, 5).unwrap();
        assert_eq!(b.ran.borrow().len(), 3 * (WARM_ROUNDS + 5));
        assert!(t.iter().all(|v| v.len() == 5));
        // What was recorded is flat: none of the settling is in it.
        for (i, v) in t.iter().enumerate() {
            assert!(
                v.iter()
                    .all(|&x| (x - (0.9 + i as f64 * 0.01)).abs() < 1e-12),
                "{v:?}"
            );
        }
        // No algorithm was timed twice in a row, across the unrecorded-recorded boundary too.
        let ran = b.ran.borrow().clone();
        assert!(ran.windows(2).all(|w| w[0] != w[1]), "{ran:?}");
        // Without the unrecorded rounds the first trial carries the drift.
        b.ran.borrow_mut().clear();
        let t = trials(&b, &[&0, &1, &2], 1, 5).unwrap();
        assert!(spread(&t[0]) > 0.05, "{:?}", t[0]);
    }

    #[test]
    fn the_warm_up_is_settled_when_two_windows_agree() {
        // Samples of 20 ms: windows of 5 samples (100 ms). Too few to say, then flat.
        assert!(!settled(&[1.0; 9], 20.0));
        assert!(settled(&[1.0; 10], 20.0));
        // Still rising 1.5% per window: not settled; flat within 1%: settled.
        let rising: Vec<f64> = (0..10).map(|i| if i < 5 { 1.0 } else { 1.015 }).collect();
        assert!(!settled(&rising, 20.0));
        let flat = [1.0, 1.02, 0.99, 1.0, 1.01, 1.005, 0.995, 1.0, 1.02, 1.0];
        assert!(settled(&flat, 20.0));
        // One outlier in the last window does not move its median.
        let mut spike = vec![1.0; 10];
        spike[9] = 1.5;
        assert!(settled(&spike, 20.0));
        // Samples of 1 ms: windows of 100 samples, so a drift over 100 ms is seen even
        // when the last 10 samples agree.
        let mut slow: Vec<f64> = vec![0.94; 100];
        slow.extend(vec![1.0; 100]);
        assert!(!settled(&slow, 1.0));
        slow.extend(vec![1.0; 100]);
        assert!(settled(&slow, 1.0));
    }

    #[test]
    fn selection_needs_the_margin_and_the_paired_wins() {
        let heur = [1.00, 1.01, 0.99, 1.00, 1.02, 1.00, 0.98, 1.00];
        // 5% faster in every trial: adopted.
        let fast: Vec<f64> = heur.iter().map(|x| x * 0.95).collect();
        // 2% faster: under the margin.
        let slight: Vec<f64> = heur.iter().map(|x| x * 0.98).collect();
        let (i, gain, wins, pass) = select(&heur, &[slight.clone(), fast.clone()], 0.03, 0.75);
        assert_eq!(i, Some(1));
        assert!((gain - 0.05).abs() < 0.01, "{gain}");
        assert_eq!(wins, 1.0);
        assert!(pass);
        let (_, _, _, pass) = select(&heur, &[slight], 0.03, 0.75);
        assert!(!pass, "2% is under a 3% margin");
        // A lower median made of a few lucky trials: the paired wins say no.
        let lucky = vec![0.90, 0.90, 0.91, 0.92, 0.93, 1.10, 1.12, 1.15];
        let (_, gain, wins, pass) = select(&heur, &[lucky], 0.03, 0.75);
        assert!(gain > 0.03, "the median alone would adopt it: {gain}");
        assert!(wins < 0.75 && !pass, "gain {gain} wins {wins}");
        let (i, _, _, pass) = select(&heur, &[], 0.03, 0.75);
        assert!(i.is_none() && !pass);
    }

    #[test]
    fn a_rest_leaves_the_device_idle_for_its_multiple_of_each_sample() {
        use tunedblas_core::cublaslt::R_16BF;
        // Samples of 1 ms per call at 4 calls: 4 ms of device time each.
        let b = Clocked {
            key: LtKey::linear(R_16BF, 64, 64, 64),
            ran: Default::default(),
            slow_start: 1,
        };
        let wall = |ratio: f64| {
            let r = Rested { bench: &b, ratio };
            let t0 = std::time::Instant::now();
            for _ in 0..5 {
                // What the wrapper returns is the sample, unchanged (0.9 ms once settled).
                assert_eq!(r.time(&0, 4).unwrap(), 0.9);
            }
            t0.elapsed().as_secs_f64() * 1e3
        };
        // Rest 2: at least 2 x 0.9 ms x 4 calls idle after each of 5 samples.
        let rested = wall(2.0);
        assert!(rested >= 5.0 * 2.0 * 0.9 * 4.0, "{rested} ms");
        // No rest: the bench returns at once.
        let back_to_back = wall(0.0);
        assert!(back_to_back < rested / 2.0, "{back_to_back} vs {rested} ms");
        assert_eq!(b.ran.borrow().len(), 10);
    }

    #[test]
    fn the_rest_follows_what_the_bench_kept_busy() {
        // The rest follows the bench's own busy time: a bench that replays each sample's
        // calls twice (hipBLASLt's untimed replay ahead) rests twice as long, and the
        // wrapper passes that on.
        struct Replayed(Clocked);
        impl Bench for Replayed {
            type Algo = u32;
            fn key(&self) -> &LtKey {
                self.0.key()
            }
            fn sets(&self) -> usize {
                self.0.sets()
            }
            fn time(&self, algo: &u32, calls: usize) -> Result<f64> {
                self.0.time(algo, calls)
            }
            fn output(&self, algo: &u32) -> Result<Vec<f64>> {
                self.0.output(algo)
            }
            fn reference(&self) -> Result<Option<Vec<f64>>> {
                self.0.reference()
            }
            fn busy_ms(&self, ms: f64, calls: usize) -> f64 {
                2.0 * ms * calls as f64
            }
        }
        use tunedblas_core::cublaslt::R_16BF;
        let c = Clocked {
            key: LtKey::linear(R_16BF, 64, 64, 64),
            ran: Default::default(),
            slow_start: 1,
        };
        // One input set: by default a sample of 4 calls keeps the device busy 4 calls.
        assert_eq!(c.busy_ms(0.5, 4), 2.0);
        assert_eq!(c.busy_ms(0.5, 0), 0.5, "one call per input set at least");
        let r = Replayed(c);
        assert_eq!(
            Rested {
                bench: &r,
                ratio: 1.0
            }
            .busy_ms(0.5, 4),
            4.0
        );
    }
}
