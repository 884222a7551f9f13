//! Tuning one cuBLASLt shape: the heuristic's first answer (what PyTorch runs) against every
//! other answer cuBLASLt offers, each rebuilt from its readable configuration exactly as the
//! interposer will rebuild it, numerics checked against an f32-output reference, timed in
//! interleaved trials, and adopted only with a margin that survives a second, independent
//! set of trials.

use serde::Serialize;
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
        }
    }
}

/// One timed algorithm.
#[derive(Clone, Debug, Serialize)]
pub struct Timed {
    pub solution: String,
    pub median_ms: f64,
    pub spread: f64,
    pub rel_err: f64,
    pub workspace: usize,
    pub samples: Vec<f64>,
}

/// What was decided for a shape, and why.
#[derive(Clone, Debug, Serialize)]
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

pub fn tune_shape(p: &Problem, opts: &Options, delay: &Delay) -> Result<Outcome> {
    let key = p.key;
    let (op, signature) = op_and_signature(&key);
    // The baseline is exactly what a caller asking for one answer gets (PyTorch does).
    let base =
        p.heuristic(1)?.into_iter().next().ok_or_else(|| {
            super::cuda::Error("cuBLASLt has no algorithm for this problem".into())
        })?;
    let base_cfg = p.config_of(&base.algo)?;
    let mut dropped = Vec::new();
    let mut cands: Vec<(AlgoConfig, MatmulAlgo, usize)> = Vec::new();
    for r in p.heuristic(opts.candidates)? {
        let cfg = p.config_of(&r.algo)?;
        if cfg == base_cfg || cands.iter().any(|c| c.0 == cfg) {
            continue;
        }
        match p.rebuild(&cfg) {
            Ok((algo, ws)) => cands.push((cfg, algo, ws)),
            Err(e) => dropped.push(format!("{}: {e}", cfg.solution_name())),
        }
    }
    if opts.explore > 0 {
        let mut answers = vec![base_cfg];
        answers.extend(cands.iter().map(|c| c.0));
        let max_custom = |c: &AlgoConfig| p.custom_option_max(c).unwrap_or(0);
        for cfg in variants(&answers, max_custom, opts.explore) {
            // AlgoCheck refuses what the kernel family cannot run; those are not reported.
            if let Ok((algo, ws)) = p.rebuild(&cfg) {
                cands.push((cfg, algo, ws));
            }
        }
    }
    let reference = p.reference()?;
    let base_out = p.output(&base.algo)?;
    let (reference, base_err) = match reference {
        Some(r) => {
            let e = rel_l2(&base_out, &r);
            (r, e)
        }
        None => (base_out.clone(), 0.0),
    };
    let tol = tolerance(key.d_type).max(2.0 * base_err);
    if !(base_err <= tolerance(key.d_type)) {
        return err(format!(
            "the heuristic's own result is off by {base_err:.2e} (tolerance {:.0e}): inputs or reference are wrong",
            tolerance(key.d_type)
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
    // Warm up, then size a sample from the heuristic's time.
    for _ in 0..3 {
        p.time(&base.algo, 4, delay)?;
    }
    let once = p.time(&base.algo, 8, delay)?;
    let calls = ((opts.sample_ms / once.max(1e-4)).ceil() as usize).clamp(2, 400);
    // Probe: one sample each; anything over 1.5x the best probe cannot win.
    let mut probes = vec![p.time(&base.algo, calls, delay)?];
    for (_, algo, _) in &cands {
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
    let mut algos: Vec<*const MatmulAlgo> = vec![&base.algo];
    algos.extend(keep.iter().map(|&i| &cands[i].1 as *const MatmulAlgo));
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
        win_share: wins,
        reason: String::new(),
        timing: String::new(),
        bytes_moved: super::problem::bytes_moved(&key),
        limit_ms: None,
        heuristic_pct_of_limit: None,
        best_pct_of_limit: None,
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
            let i = keep[j];
            let again = trials(p, &[&base.algo, &cands[i].1], calls, opts.trials, delay)?;
            let cg = 1.0 - median(&again[1]) / median(&again[0]);
            out.confirm_gain = Some(cg);
            if cg >= opts.margin {
                out.adopted = Some(cands[i].0.solution_name());
                out.action = Some(LtAction::Config(cands[i].0));
                out.reason = format!("{:+.1}% selected, {:+.1}% confirmed", gain * 100.0, cg * 100.0);
            } else {
                out.reason = format!(
                    "{:+.1}% selected but only {:+.1}% in the confirmation trials",
                    gain * 100.0,
                    cg * 100.0
                );
            }
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
    pub still_wins: bool,
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
    let t = trials(p, &[&base.algo, &algo], calls, opts.trials, delay)?;
    r.heuristic_ms = median(&t[0]);
    r.heuristic_spread = spread(&t[0]);
    r.tuned_ms = median(&t[1]);
    r.tuned_spread = spread(&t[1]);
    r.gain = 1.0 - r.tuned_ms / r.heuristic_ms;
    r.still_wins = r.tuned_ms < r.heuristic_ms;
    Ok(r)
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
