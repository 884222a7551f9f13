//! Tuning one cuBLASLt shape: the heuristic's first answer (what PyTorch runs) against every
//! other answer cuBLASLt offers, each rebuilt from its readable configuration exactly as the
//! interposer will rebuild it, numerics checked against an f32-output reference, timed in
//! interleaved trials, and adopted only with a margin that survives a second, independent
//! set of trials.

use serde::{Deserialize, Serialize};
use tunedblas_core::cublaslt::*;

use super::cuda::{err, Result};
use super::numeric::{median, rel_l2, spread, tolerance};
use super::problem::{Delay, Problem};

#[derive(Clone, Debug)]
pub struct Options {
    /// Interleaved trials per candidate (and again for the confirmation).
    pub trials: usize,
    /// Heuristic answers to ask for.
    pub candidates: usize,
    /// Relative gain a candidate needs, in the selection and again in the confirmation.
    pub margin: f64,
    /// Share of paired trials the winner must win.
    pub win_share: f64,
    /// Workspace bytes the caller gives cuBLASLt (PyTorch's default is measured, not guessed:
    /// the interposer passes calls through when a row needs more than the caller gave).
    pub workspace: usize,
    /// Device time one timed sample aims at, in ms.
    pub sample_ms: f64,
    pub l2_bytes: usize,
    /// Further configurations to try beyond the heuristic's answers (0: none): each answer's
    /// tile with other cluster shapes and custom options, best answers first.
    pub explore: usize,
    /// How samples are timed (graph replay where capture works).
    pub timing: super::timing::Timing,
    /// Seconds of wider search per shape (0: the heuristic's answers only).
    pub budget: f64,
    /// Configurations the search hands on to numerics and the trials.
    pub keep: usize,
    /// Adopt only what a fresh process confirms (`tune` runs `recheck` as a child).
    pub fresh: bool,
    /// Pointer alignment the heuristic is told (what the caller's pointers have).
    pub alignment: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            trials: 15,
            candidates: 32,
            margin: 0.03,
            win_share: 0.75,
            workspace: 1 << 20,
            sample_ms: 1.0,
            l2_bytes: 64 << 20,
            explore: 0,
            timing: super::timing::Timing::Graph,
            budget: 0.0,
            keep: 8,
            fresh: true,
            alignment: 16,
        }
    }
}

/// One timed algorithm.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Timed {
    pub solution: String,
    pub median_ms: f64,
    pub spread: f64,
    pub rel_err: f64,
    pub workspace: usize,
    pub samples: Vec<f64>,
}

/// What was decided for a shape, and why; one line of the campaign's checkpoint (without
/// its key and row, which `lt::resume` rebuilds from the signature and `adopted`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub op: String,
    pub signature: String,
    pub calls_per_sample: usize,
    pub input_sets: usize,
    pub heuristic: Timed,
    /// Every other candidate that passed numerics and the probe, fastest first.
    pub candidates: Vec<Timed>,
    /// Candidates dropped before timing, with why.
    pub dropped: Vec<String>,
    pub adopted: Option<String>,
    /// 1 - best/heuristic in the selection trials, and in the confirmation trials.
    pub gain: f64,
    pub confirm_gain: Option<f64>,
    /// The gain measured by a fresh process (`recheck` run by `tune`), interleaved against
    /// the heuristic: the adoption stands only if it keeps the margin there too.
    pub fresh_gain: Option<f64>,
    /// Share of paired selection trials the best candidate won.
    pub win_share: f64,
    pub reason: String,
    /// The timing mode the shape was measured in (events where its graph capture failed).
    pub timing: String,
    /// Bytes one call moves at least, the limit they give (max(bytes / copy bandwidth,
    /// floor)) and the heuristic's and the best candidate's time as a share of it.
    pub bytes_moved: usize,
    pub limit_ms: Option<f64>,
    pub heuristic_pct_of_limit: Option<f64>,
    pub best_pct_of_limit: Option<f64>,
    /// The wider search, where `--budget` asked for one.
    pub search: Option<super::search::Stats>,
    #[serde(skip)]
    pub action: Option<LtAction>,
    #[serde(skip)]
    pub key: Option<LtKey>,
}

impl Outcome {
    /// The profile row: the adopted configuration, or `Default`.
    pub fn row(&self) -> LtRow {
        let (action, t) = match &self.action {
            Some(LtAction::Config(c)) => (
                LtAction::Config(*c),
                self.candidates
                    .iter()
                    .find(|x| x.solution == c.solution_name())
                    .map_or(self.heuristic.median_ms, |x| x.median_ms),
            ),
            _ => (LtAction::Default, self.heuristic.median_ms),
        };
        LtRow {
            key: self.key.expect("set by tune_shape"),
            action,
            time_ms: Some((t * 1e6).round() / 1e6),
        }
    }
}

/// Cluster shapes tried by exploration (`cublasLtClusterShape_t`): 1x1x1, 2x1x1, 1x2x1, 2x2x1.
pub const EXPLORE_CLUSTERS: [u32; 4] = [2, 3, 5, 6];

/// Configurations near the heuristic's answers: each answer (in the order given) with every
/// cluster shape of [`EXPLORE_CLUSTERS`] and custom option `0..=max_custom(answer)`, minus the
/// answers themselves, without duplicates, at most `limit`.
pub fn variants(
    answers: &[AlgoConfig],
    max_custom: impl Fn(&AlgoConfig) -> u32,
    limit: usize,
) -> Vec<AlgoConfig> {
    let mut out: Vec<AlgoConfig> = Vec::new();
    for a in answers {
        for cluster in EXPLORE_CLUSTERS {
            for custom in 0..=max_custom(a).min(15) {
                let v = AlgoConfig {
                    cluster_shape: cluster,
                    custom,
                    ..*a
                };
                if out.len() < limit && !answers.contains(&v) && !out.contains(&v) {
                    out.push(v);
                }
            }
        }
    }
    out
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
fn trials(
    p: &Problem,
    algos: &[*const MatmulAlgo],
    calls: usize,
    n: usize,
    delay: &Delay,
) -> Result<Vec<Vec<f64>>> {
    let mut out = vec![Vec::with_capacity(n); algos.len()];
    for t in 0..n {
        for j in 0..algos.len() {
            let i = (j + t) % algos.len();
            out[i].push(p.time(algos[i], calls, delay)?);
        }
    }
    Ok(out)
}

type Cand = (AlgoConfig, MatmulAlgo, usize);

/// The baseline: exactly what a caller asking for one answer gets (PyTorch does).
fn baseline(p: &Problem) -> Result<HeuristicResult> {
    p.heuristic(1)?
        .into_iter()
        .next()
        .ok_or_else(|| super::cuda::Error("cuBLASLt has no algorithm for this problem".into()))
}

/// The heuristic's other answers, rebuilt, and with `--explore` their near variants.
fn answers(
    p: &Problem,
    opts: &Options,
    base_cfg: &AlgoConfig,
    dropped: &mut Vec<String>,
) -> Result<Vec<Cand>> {
    let mut cands: Vec<Cand> = Vec::new();
    for r in p.heuristic(opts.candidates)? {
        let cfg = p.config_of(&r.algo)?;
        if cfg == *base_cfg || cands.iter().any(|c| c.0 == cfg) {
            continue;
        }
        match p.rebuild(&cfg) {
            Ok((algo, ws)) => cands.push((cfg, algo, ws)),
            Err(e) => dropped.push(format!("{}: {e}", cfg.solution_name())),
        }
    }
    if opts.explore > 0 {
        let mut answers = vec![*base_cfg];
        answers.extend(cands.iter().map(|c| c.0));
        let max_custom = |c: &AlgoConfig| p.custom_option_max(c).unwrap_or(0);
        for cfg in variants(&answers, max_custom, opts.explore) {
            // AlgoCheck refuses what the kernel family cannot run; those are not reported.
            if let Ok((algo, ws)) = p.rebuild(&cfg) {
                cands.push((cfg, algo, ws));
            }
        }
    }
    Ok(cands)
}

/// The wider search (`--budget`): what it found beyond `cands` joins them.
fn widen(
    p: &Problem,
    opts: &Options,
    base_cfg: &AlgoConfig,
    cands: &mut Vec<Cand>,
    delay: &Delay,
) -> Result<Option<super::search::Stats>> {
    if opts.budget <= 0.0 {
        return Ok(None);
    }
    let mut seeds = vec![*base_cfg];
    seeds.extend(cands.iter().map(|c| c.0));
    let budget = std::time::Duration::from_secs_f64(opts.budget);
    let (found, stats) = super::search::search(p, &seeds, budget, opts.keep, delay)?;
    for f in found {
        if !cands.iter().any(|c| c.0 == f.cfg) {
            cands.push((f.cfg, f.algo, f.workspace));
        }
    }
    Ok(Some(stats))
}

/// Numerics: the heuristic's own error against the f32-output reference, and every
/// candidate within tolerance of it (the others dropped, with why). Returns the heuristic's
/// error and each kept candidate's.
fn check_numerics(
    p: &Problem,
    base: &MatmulAlgo,
    cands: &mut Vec<Cand>,
    dropped: &mut Vec<String>,
) -> Result<(f64, Vec<f64>)> {
    let d_type = p.key.d_type;
    let reference = p.reference()?;
    let base_out = p.output(base)?;
    let (reference, base_err) = match reference {
        Some(r) => {
            let e = rel_l2(&base_out, &r);
            (r, e)
        }
        None => (base_out.clone(), 0.0),
    };
    let tol = tolerance(d_type).max(2.0 * base_err);
    if base_err.is_nan() || base_err > tolerance(d_type) {
        return err(format!(
            "the heuristic's own result is off by {base_err:.2e} (tolerance {:.0e}): inputs or reference are wrong",
            tolerance(d_type)
        ));
    }
    let mut errs = Vec::new();
    cands.retain(|(cfg, algo, _)| match p.output(algo) {
        Ok(out) => {
            let e = rel_l2(&out, &reference);
            if e <= tol {
                errs.push(e);
                true
            } else {
                dropped.push(format!(
                    "{}: relative error {e:.2e} over {tol:.1e}",
                    cfg.solution_name()
                ));
                false
            }
        }
        Err(e) => {
            dropped.push(format!("{}: {}", cfg.solution_name(), e.0));
            false
        }
    });
    Ok((base_err, errs))
}

/// Device time of sustained work before timed trials. After host-side work (numerics, the
/// search's bookkeeping) the GPU has idled and its clocks run high for the first tens of
/// milliseconds of load: without this, the first trials of memory-heavy shapes ran up to 13%
/// faster than the rest (BENCHMARKS.md, issue 15).
pub const WARM_UP_MS: f64 = 200.0;

/// Runs samples of `algo` until `WARM_UP_MS` of device time has passed (at most 2000
/// samples).
pub fn warm_up(p: &Problem, algo: &MatmulAlgo, calls: usize, delay: &Delay) -> Result<()> {
    let mut spent = 0.0;
    for _ in 0..2000 {
        if spent >= WARM_UP_MS {
            break;
        }
        spent += p.time(algo, calls, delay)? * calls.max(p.sets()) as f64;
    }
    Ok(())
}

/// Calls per timed sample: about `sample_ms` of the heuristic's work.
fn sample_calls(p: &Problem, base: &MatmulAlgo, opts: &Options, delay: &Delay) -> Result<usize> {
    for _ in 0..3 {
        p.time(base, 4, delay)?;
    }
    let once = p.time(base, 8, delay)?;
    Ok(((opts.sample_ms / once.max(1e-4)).ceil() as usize).clamp(2, 400))
}

/// One sample each; anything over 1.5x the best probe cannot win. The indices kept.
fn probe_prune(
    p: &Problem,
    base: &MatmulAlgo,
    cands: &[Cand],
    calls: usize,
    delay: &Delay,
    dropped: &mut Vec<String>,
) -> Result<Vec<usize>> {
    let mut probes = vec![p.time(base, calls, delay)?];
    for (_, algo, _) in cands {
        probes.push(p.time(algo, calls, delay)?);
    }
    let floor = probes.iter().copied().fold(f64::INFINITY, f64::min);
    let mut keep = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        if probes[i + 1] <= 1.5 * floor {
            keep.push(i);
        } else {
            dropped.push(format!(
                "{}: probe {:.4} ms, over 1.5x the best",
                c.0.solution_name(),
                probes[i + 1]
            ));
        }
    }
    Ok(keep)
}

pub fn tune_shape(p: &Problem, opts: &Options, delay: &Delay) -> Result<Outcome> {
    let key = p.key;
    let (op, signature) = op_and_signature(&key);
    let base = baseline(p)?;
    let base_cfg = p.config_of(&base.algo)?;
    let mut dropped = Vec::new();
    let mut cands = answers(p, opts, &base_cfg, &mut dropped)?;
    let search = widen(p, opts, &base_cfg, &mut cands, delay)?;
    let (base_err, errs) = check_numerics(p, &base.algo, &mut cands, &mut dropped)?;
    let calls = sample_calls(p, &base.algo, opts, delay)?;
    let keep = probe_prune(p, &base.algo, &cands, calls, delay, &mut dropped)?;
    let mut algos: Vec<*const MatmulAlgo> = vec![&base.algo];
    algos.extend(keep.iter().map(|&i| &cands[i].1 as *const MatmulAlgo));
    // The probes captured every graph; the device is warmed up right before the trials.
    warm_up(p, &base.algo, calls, delay)?;
    let times = trials(p, &algos, calls, opts.trials, delay)?;
    let timed = |cfg: &AlgoConfig, s: &[f64], e: f64, ws: usize| Timed {
        solution: cfg.solution_name(),
        median_ms: median(s),
        spread: spread(s),
        rel_err: e,
        workspace: ws,
        samples: s.to_vec(),
    };
    let heuristic = timed(&base_cfg, &times[0], base_err, base.workspace_size);
    let (best, gain, wins, pass) = select(&times[0], &times[1..], opts.margin, opts.win_share);
    let mut candidates: Vec<Timed> = keep
        .iter()
        .enumerate()
        .map(|(j, &i)| timed(&cands[i].0, &times[j + 1], errs[i], cands[i].2))
        .collect();
    let mut out = Outcome {
        op,
        signature,
        calls_per_sample: calls,
        input_sets: p.sets(),
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
        search,
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
        Some(j) => {
            let c = &cands[keep[j]];
            confirm_in_process(p, &base.algo, c, gain, calls, opts, delay, &mut out)?
        }
    }
    candidates.sort_by(|a, b| a.median_ms.total_cmp(&b.median_ms));
    out.candidates = candidates;
    out.timing = match &*p.graph_failure.borrow() {
        Some(e) if opts.timing == super::timing::Timing::Graph => {
            format!("events (graph capture failed: {e})")
        }
        _ => p.timing().name().into(),
    };
    Ok(out)
}

/// The second, independent set of trials in this process: the selection's winner is
/// proposed only if it keeps the margin there (the fresh process decides after).
#[allow(clippy::too_many_arguments)]
fn confirm_in_process(
    p: &Problem,
    base: &MatmulAlgo,
    c: &Cand,
    gain: f64,
    calls: usize,
    opts: &Options,
    delay: &Delay,
    out: &mut Outcome,
) -> Result<()> {
    let again = trials(p, &[base, &c.1], calls, opts.trials, delay)?;
    let cg = 1.0 - median(&again[1]) / median(&again[0]);
    out.confirm_gain = Some(cg);
    if cg >= opts.margin {
        out.adopted = Some(c.0.solution_name());
        out.action = Some(LtAction::Config(c.0));
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

/// A fresh-process re-measurement of one adopted row against the heuristic.
#[derive(Clone, Debug, Serialize)]
pub struct Recheck {
    pub op: String,
    pub signature: String,
    pub solution: String,
    pub heuristic_ms: f64,
    pub heuristic_spread: f64,
    pub tuned_ms: f64,
    pub tuned_spread: f64,
    pub gain: f64,
    /// Faster than the heuristic (a row that is not is a false adopt).
    pub still_wins: bool,
    /// Faster by the margin (what `tune`'s fresh-process confirmation asks).
    pub confirmed: bool,
    pub error: Option<String>,
}

pub fn recheck(p: &Problem, cfg: &AlgoConfig, opts: &Options, delay: &Delay) -> Result<Recheck> {
    let (op, signature) = op_and_signature(&p.key);
    let base =
        p.heuristic(1)?.into_iter().next().ok_or_else(|| {
            super::cuda::Error("cuBLASLt has no algorithm for this problem".into())
        })?;
    let mut r = Recheck {
        op,
        signature,
        solution: cfg.solution_name(),
        heuristic_ms: f64::NAN,
        heuristic_spread: f64::NAN,
        tuned_ms: f64::NAN,
        tuned_spread: f64::NAN,
        gain: f64::NAN,
        still_wins: false,
        confirmed: false,
        error: None,
    };
    let algo = match p.rebuild(cfg) {
        Ok((a, _)) => a,
        Err(e) => {
            r.error = Some(e);
            return Ok(r);
        }
    };
    for _ in 0..3 {
        p.time(&base.algo, 4, delay)?;
        p.time(&algo, 4, delay)?;
    }
    let once = p.time(&base.algo, 8, delay)?;
    let calls = ((opts.sample_ms / once.max(1e-4)).ceil() as usize).clamp(2, 400);
    // Both graphs captured first (capture leaves the device idle), then the warm-up.
    p.time(&algo, calls, delay)?;
    p.time(&base.algo, calls, delay)?;
    warm_up(p, &base.algo, calls, delay)?;
    let t = trials(p, &[&base.algo, &algo], calls, opts.trials, delay)?;
    r.heuristic_ms = median(&t[0]);
    r.heuristic_spread = spread(&t[0]);
    r.tuned_ms = median(&t[1]);
    r.tuned_spread = spread(&t[1]);
    r.gain = 1.0 - r.tuned_ms / r.heuristic_ms;
    r.still_wins = r.tuned_ms < r.heuristic_ms;
    r.confirmed = r.gain >= opts.margin;
    Ok(r)
}

/// A fresh process's verdict on one row: (signature, solution, gain where it measured one).
pub type Verdict = (String, String, Option<f64>);

/// The fresh process's verdicts, read from its `--log` JSON: (signature, solution) -> gain,
/// `None` where it could not measure the row.
pub fn read_fresh(log: &serde_json::Value) -> Vec<Verdict> {
    let mut out = Vec::new();
    for r in log["rechecks"].as_array().into_iter().flatten() {
        let (Some(sig), Some(sol)) = (r["signature"].as_str(), r["solution"].as_str()) else {
            continue;
        };
        let gain = match r["error"].is_null() {
            true => r["gain"].as_f64(),
            false => None,
        };
        out.push((sig.to_string(), sol.to_string(), gain));
    }
    out
}

/// Applies the fresh process's verdicts: an adoption stands only where the fresh process
/// measured the same row at least `margin` faster than the heuristic; every other adoption
/// (not measured, failed, under the margin, or the whole child failed: `fresh` is `Err`)
/// becomes `Default`, with why. Returns how many were withdrawn.
pub fn apply_fresh(
    outcomes: &mut [Outcome],
    fresh: std::result::Result<&[Verdict], String>,
    margin: f64,
) -> usize {
    let mut withdrawn = 0;
    for o in outcomes.iter_mut() {
        let Some(sol) = o.adopted.clone() else {
            continue;
        };
        let verdict = match &fresh {
            Err(e) => Err(format!("the fresh-process confirmation failed ({e})")),
            Ok(v) => match v.iter().find(|x| x.0 == o.signature && x.1 == sol) {
                None => Err("the fresh process did not measure it".to_string()),
                Some((_, _, None)) => Err("the fresh process could not run it".to_string()),
                Some((_, _, Some(g))) => {
                    o.fresh_gain = Some(*g);
                    if *g >= margin {
                        Ok(*g)
                    } else {
                        Err(format!("only {:+.1}% in a fresh process", g * 100.0))
                    }
                }
            },
        };
        match verdict {
            Ok(g) => o.reason = format!("{}, {:+.1}% in a fresh process", o.reason, g * 100.0),
            Err(why) => {
                o.reason = format!("{} but {why}", o.reason);
                o.adopted = None;
                o.action = Some(LtAction::Default);
                withdrawn += 1;
            }
        }
    }
    withdrawn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exploration_varies_cluster_and_custom_option_of_each_answer() {
        let a = AlgoConfig::parse(
            "Gemm_Cublaslt_algo66_tile248_stages35_splitk1_red0_swizzle0_custom7_inner0_cluster5",
        )
        .unwrap();
        let b = AlgoConfig { tile: 20, ..a };
        let v = variants(&[a, b], |c| if c.tile == 248 { 1 } else { 0 }, 100);
        // a: 4 clusters x customs {0, 1}; b: 4 clusters x custom {0}; none equal to a or b.
        assert_eq!(v.len(), 8 + 4);
        assert!(!v.contains(&a) && !v.contains(&b));
        assert!(v.iter().all(|c| c.algo == 66 && c.stages == 35));
        assert!(v
            .iter()
            .any(|c| c.tile == 248 && c.cluster_shape == 3 && c.custom == 1));
        assert_eq!(variants(&[a, b], |_| 7, 5).len(), 5, "the limit holds");
        assert_eq!(
            variants(&[a, b], |_| 7, 5)[0].tile,
            248,
            "best answers first"
        );
    }

    fn proposed(sig: &str, cfg: Option<AlgoConfig>) -> Outcome {
        let t = Timed {
            solution: "x".into(),
            median_ms: 1.0,
            spread: 0.0,
            rel_err: 0.0,
            workspace: 0,
            samples: Vec::new(),
        };
        Outcome {
            op: "GemmTunableOp_BFloat16_TN".into(),
            signature: sig.into(),
            calls_per_sample: 1,
            input_sets: 1,
            heuristic: t,
            candidates: Vec::new(),
            dropped: Vec::new(),
            adopted: cfg.map(|c| c.solution_name()),
            gain: 0.05,
            confirm_gain: Some(0.05),
            fresh_gain: None,
            win_share: 1.0,
            reason: "+5.0% selected, +5.0% confirmed".into(),
            timing: "graph".into(),
            bytes_moved: 0,
            limit_ms: None,
            heuristic_pct_of_limit: None,
            best_pct_of_limit: None,
            search: None,
            action: Some(cfg.map_or(LtAction::Default, LtAction::Config)),
            key: Some(LtKey::linear(R_16BF, 64, 64, 64)),
        }
    }

    #[test]
    fn only_what_the_fresh_process_confirms_by_the_margin_is_adopted() {
        let c = AlgoConfig::parse(
            "Gemm_Cublaslt_algo66_tile20_stages35_splitk1_red0_swizzle0_custom0_inner0_cluster3",
        )
        .unwrap();
        let sol = c.solution_name();
        let mut o = vec![
            proposed("a", Some(c)), // confirmed: +4%
            proposed("b", Some(c)), // faster, under the margin: +1%
            proposed("c", Some(c)), // slower in the fresh process
            proposed("d", Some(c)), // the fresh process could not run it
            proposed("e", Some(c)), // not measured at all
            proposed("f", None),    // Default stays Default
        ];
        // What `recheck --log` writes (NaN gains are null in JSON).
        let log = serde_json::json!({ "rechecks": [
            { "signature": "a", "solution": sol, "gain": 0.04, "error": null },
            { "signature": "b", "solution": sol, "gain": 0.01, "error": null },
            { "signature": "c", "solution": sol, "gain": -0.02, "error": null },
            { "signature": "d", "solution": sol, "gain": null, "error": "AlgoCheck returned 15" },
            { "signature": "e", "solution": "Gemm_Cublaslt_other", "gain": 0.5, "error": null },
        ]});
        let fresh = read_fresh(&log);
        assert_eq!(fresh.len(), 5);
        assert_eq!(apply_fresh(&mut o, Ok(&fresh), 0.03), 4);
        assert_eq!(o[0].adopted.as_deref(), Some(sol.as_str()));
        assert_eq!(o[0].row().action, LtAction::Config(c));
        assert_eq!(o[0].fresh_gain, Some(0.04));
        assert!(
            o[0].reason.contains("+4.0% in a fresh process"),
            "{}",
            o[0].reason
        );
        for x in &o[1..] {
            assert!(x.adopted.is_none(), "{}", x.signature);
            assert_eq!(x.row().action, LtAction::Default);
        }
        assert!(
            o[1].reason.contains("only +1.0% in a fresh process"),
            "{}",
            o[1].reason
        );
        assert!(o[2].reason.contains("-2.0%"));
        assert!(o[3].reason.contains("could not run it"));
        assert!(o[4].reason.contains("did not measure it"));
        // The child failed as a whole: nothing is adopted.
        let mut o = vec![proposed("a", Some(c))];
        assert_eq!(
            apply_fresh(&mut o, Err("the child exit status: 1".into()), 0.03),
            1
        );
        assert!(o[0].adopted.is_none() && o[0].reason.contains("confirmation failed"));
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
}
