//! Tuning one cuBLASLt shape: the heuristic's first answer (what PyTorch runs) against every
//! other answer cuBLASLt offers, each rebuilt from its readable configuration exactly as the
//! interposer will rebuild it, numerics checked against an f32-output reference, timed in
//! interleaved trials, and adopted only with a margin that survives a second, independent
//! set of trials.

use serde::{Deserialize, Serialize};
use tunedblas_core::cublaslt::*;

use super::cuda::Result;
use super::pipeline::{self, Bench};
use super::problem::{Delay, Problem};
use super::timing::Timing;

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
    /// What holds the stream ahead of each timed sample.
    pub delay: super::problem::DelayKind,
    /// Idle time after each timed sample of the decision, as a multiple of the sample's own
    /// device time (0: back to back). See [`super::pipeline::Rested`].
    pub rest: f64,
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
            delay: super::problem::DelayKind::Spin,
            rest: super::pipeline::DEFAULT_REST,
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
    /// Bytes one call moves at least, the limit of the call (max(bytes / copy bandwidth,
    /// flops / matmul rate, floor); checkpoints written before the matmul rate was
    /// measured hold max(bytes / bandwidth, floor)) and the heuristic's and the best
    /// candidate's time as a share of it.
    pub bytes_moved: usize,
    pub limit_ms: Option<f64>,
    pub heuristic_pct_of_limit: Option<f64>,
    pub best_pct_of_limit: Option<f64>,
    /// Device milliseconds the heuristic ran before the selection trials (until settled).
    #[serde(default)]
    pub warm_up_ms: f64,
    /// Every limit, the one that binds, and why the fastest configuration is where it is
    /// (cuBLASLt, where the limits were measured).
    #[serde(default)]
    pub roofline: Option<super::grid::Roofline>,
    /// The wider search, where `--budget` asked for one.
    pub search: Option<super::search::Stats>,
    #[serde(skip)]
    pub action: Option<LtAction>,
    #[serde(skip)]
    pub key: Option<LtKey>,
}

impl Outcome {
    /// The profile row: the adopted configuration or index, or `Default`.
    pub fn row(&self) -> LtRow {
        let action = self.action.unwrap_or(LtAction::Default);
        let t = match action {
            LtAction::Default => self.heuristic.median_ms,
            _ => self
                .candidates
                .iter()
                .find(|x| x.solution == action.solution_text())
                .map_or(self.heuristic.median_ms, |x| x.median_ms),
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

/// cuBLASLt's side of the pipeline: a problem and the delay its timed spans start behind.
pub struct LtBench<'p, 'l, 'd, 'm> {
    pub p: &'p Problem<'l>,
    pub delay: &'d Delay<'m>,
}

impl Bench for LtBench<'_, '_, '_, '_> {
    type Algo = MatmulAlgo;
    fn key(&self) -> &LtKey {
        &self.p.key
    }
    fn sets(&self) -> usize {
        self.p.sets()
    }
    fn time(&self, algo: &MatmulAlgo, calls: usize) -> Result<f64> {
        self.p.time(algo, calls, self.delay)
    }
    fn output(&self, algo: &MatmulAlgo) -> Result<Vec<f64>> {
        self.p.output(algo)
    }
    fn reference(&self) -> Result<Option<Vec<f64>>> {
        self.p.reference()
    }
    /// A graph replays one call per input set at least; events time `calls` calls.
    fn busy_ms(&self, ms: f64, calls: usize) -> f64 {
        match self.p.timing() {
            Timing::Graph => ms * calls.max(self.sets()) as f64,
            Timing::Events => ms * calls as f64,
        }
    }
}

type Cand = pipeline::Cand<MatmulAlgo>;

/// A rebuilt configuration as a candidate.
fn cand(cfg: AlgoConfig, algo: MatmulAlgo, workspace: usize) -> Cand {
    Cand {
        action: LtAction::Config(cfg),
        algo,
        workspace,
    }
}

/// The configuration a candidate of this backend runs.
fn config(c: &Cand) -> AlgoConfig {
    match c.action {
        LtAction::Config(cfg) => cfg,
        _ => unreachable!("cuBLASLt candidates are configurations"),
    }
}

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
        if cfg == *base_cfg || cands.iter().any(|c| config(c) == cfg) {
            continue;
        }
        match p.rebuild(&cfg) {
            Ok((algo, ws)) => cands.push(cand(cfg, algo, ws)),
            Err(e) => dropped.push(format!("{}: {e}", cfg.solution_name())),
        }
    }
    if opts.explore > 0 {
        let mut answers = vec![*base_cfg];
        answers.extend(cands.iter().map(config));
        let max_custom = |c: &AlgoConfig| p.custom_option_max(c).unwrap_or(0);
        for cfg in variants(&answers, max_custom, opts.explore) {
            // AlgoCheck refuses what the kernel family cannot run; those are not reported.
            if let Ok((algo, ws)) = p.rebuild(&cfg) {
                cands.push(cand(cfg, algo, ws));
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
    seeds.extend(cands.iter().map(config));
    let budget = std::time::Duration::from_secs_f64(opts.budget);
    let (found, stats) = super::search::search(p, &seeds, budget, opts.keep, delay)?;
    for f in found {
        if !cands.iter().any(|c| config(c) == f.cfg) {
            cands.push(cand(f.cfg, f.algo, f.workspace));
        }
    }
    Ok(Some(stats))
}

pub fn tune_shape(p: &Problem, opts: &Options, delay: &Delay) -> Result<Outcome> {
    let base = baseline(p)?;
    let base_cfg = p.config_of(&base.algo)?;
    let mut dropped = Vec::new();
    let mut cands = answers(p, opts, &base_cfg, &mut dropped)?;
    let search = widen(p, opts, &base_cfg, &mut cands, delay)?;
    let b = LtBench { p, delay };
    let name = base_cfg.solution_name();
    let mut out = pipeline::decide(
        &b,
        (&base.algo, &name, base.workspace_size),
        cands,
        opts,
        dropped,
    )?;
    out.search = search;
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
    /// Faster than the heuristic (a row that is not is a false adopt).
    pub still_wins: bool,
    /// Faster by the margin (what `tune`'s fresh-process confirmation asks).
    pub confirmed: bool,
    /// Its output's relative error against the reference (or the heuristic's output).
    pub rel_err: Option<f64>,
    pub error: Option<String>,
}

impl Recheck {
    /// A recheck of `solution` for `key`, nothing measured yet.
    pub fn new(key: &LtKey, solution: String) -> Recheck {
        let (op, signature) = op_and_signature(key);
        Recheck {
            op,
            signature,
            solution,
            heuristic_ms: f64::NAN,
            heuristic_spread: f64::NAN,
            tuned_ms: f64::NAN,
            tuned_spread: f64::NAN,
            gain: f64::NAN,
            still_wins: false,
            confirmed: false,
            rel_err: None,
            error: None,
        }
    }
}

pub fn recheck(p: &Problem, cfg: &AlgoConfig, opts: &Options, delay: &Delay) -> Result<Recheck> {
    let base =
        p.heuristic(1)?.into_iter().next().ok_or_else(|| {
            super::cuda::Error("cuBLASLt has no algorithm for this problem".into())
        })?;
    let mut r = Recheck::new(&p.key, cfg.solution_name());
    match p.rebuild(cfg) {
        Ok((algo, _)) => {
            pipeline::measure_pair(&LtBench { p, delay }, &base.algo, &algo, opts, &mut r)?
        }
        Err(e) => r.error = Some(e),
    }
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
            warm_up_ms: 0.0,
            roofline: None,
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
}
