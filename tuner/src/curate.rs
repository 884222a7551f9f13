//! Curation: what a campaign does with a shape once the heuristic, the current row and the
//! new best have been timed in one session, interleaved.
//!
//! The rules (printed in every report and recorded in provenance):
//! 1. Adopt the new best only if it beats both the heuristic and the current row by at
//!    least the margin, outside the measured spread, and its solution id differs from the
//!    current row's (the same id re-timed is the same kernel: any gain is noise).
//! 2. Drop a current row slower than the heuristic by more than the margin, outside the
//!    spread.
//! 3. When a difference that would decide is inside the measured spread, decide nothing:
//!    keep what is there and say "undecidable".
//! 4. When nothing beats the heuristic, the outcome is `Default`: written as an explicit
//!    `Default` row or left out, by flag.
//!
//! Times are compared through paired ratios: round `t` timed A and B back to back, so
//! `A_t / B_t` cancels drift common to both (clock boost, a neighbour's load). The spread is
//! half the range of those ratios, trimmed of a tenth at each end from ten rounds on (a few
//! outliers, a sample preempted or a clock that stumbled, cannot make every shape
//! undecidable). A difference is outside the spread when it exceeds that half range, every
//! kept round agrees on which contender is faster, and the faster one won at least
//! [`WIN_SHARE`] of all the paired rounds.

use serde::{Deserialize, Serialize};

use crate::numerics::{median, null_as_nan};

/// A profile's row for a shape: what curation keeps, writes or compares against. Stored
/// (in a checkpoint) as the row's text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum RowChoice {
    /// `Default`: the library's own heuristic.
    Default,
    /// A solution of the library being tuned, by the name its rows give it.
    Mine(String),
    /// A row this library cannot run (another library's): left as it is.
    Foreign(String),
}

impl RowChoice {
    /// A row as a results file writes it.
    pub fn text(&self) -> &str {
        match self {
            RowChoice::Default => "Default",
            RowChoice::Mine(s) | RowChoice::Foreign(s) => s,
        }
    }
}

/// A row read back from a checkpoint (written by this library's campaign).
impl From<String> for RowChoice {
    fn from(text: String) -> RowChoice {
        match text.as_str() {
            "Default" => RowChoice::Default,
            _ => RowChoice::Mine(text),
        }
    }
}

impl From<RowChoice> for String {
    fn from(r: RowChoice) -> String {
        r.text().to_string()
    }
}

/// One interleaved round: ms per call of each contender, timed back to back.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Round {
    pub heuristic: f64,
    /// The current row's solution; None when there is no current row of this library.
    pub current: Option<f64>,
    /// The new best candidate; None when the library offered nothing runnable.
    pub new: Option<f64>,
}

/// What the campaign knows about one shape.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    pub rounds: Vec<Round>,
    /// The row the profile has for this shape now (this build's rows only).
    pub current: Option<RowChoice>,
    /// The fastest candidate of the trials, by name.
    pub new: Option<String>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Rules {
    /// Relative margin a change must clear (0.03 = 3%).
    pub margin: f64,
    /// Write `Default` outcomes as explicit `Default` rows (else leave them out).
    pub keep_default: bool,
    /// A spread above this (0.5 = 50%) cannot say that nothing beats the heuristic: such a
    /// shape is undecidable, not `Default`, so no row pins it and it comes back as a miss.
    #[serde(default = "default_noisy")]
    pub noisy: f64,
}

fn default_noisy() -> f64 {
    0.5
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            margin: 0.03,
            keep_default: true,
            noisy: default_noisy(),
        }
    }
}

impl Rules {
    /// The rules in words, for reports and provenance.
    pub fn describe(&self) -> Vec<String> {
        let m = self.margin * 100.0;
        vec![
            format!("adopt a new solution only if it beats the heuristic and the current row by >= {m:.1}% outside the measured spread, winning at least 3 in 4 paired rounds and every one but a tenth at each extreme, and it is another solution than the current row's"),
            format!("drop a row slower than the heuristic by > {m:.1}% outside the spread"),
            "a difference inside the measured spread decides nothing: what is there stays (undecidable)".into(),
            if self.keep_default {
                "when nothing beats the heuristic, write an explicit Default row".into()
            } else {
                "when nothing beats the heuristic, write no row".into()
            },
            format!(
                "a shape whose spread is over {:.0}% is too noisy to say nothing beats the heuristic: undecidable, no row written",
                self.noisy * 100.0
            ),
        ]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// A new solution replaces what was there.
    Adopt,
    /// The current row stays.
    Keep,
    /// The current row goes (replaced by `Default` or by nothing, per the rules).
    Drop,
    /// Nothing beats the heuristic: a `Default` row, or no row.
    Default,
    /// The deciding difference is inside the spread: what is there stays.
    Undecidable,
}

impl Decision {
    pub fn word(self) -> &'static str {
        match self {
            Decision::Adopt => "adopt",
            Decision::Keep => "keep",
            Decision::Drop => "drop",
            Decision::Default => "default",
            Decision::Undecidable => "undecidable",
        }
    }
}

/// The outcome for one shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub decision: Decision,
    /// The row to write, or None for no row.
    pub row: Option<RowChoice>,
    pub reason: String,
    #[serde(deserialize_with = "null_as_nan")]
    pub heuristic_ms: f64,
    pub current_ms: Option<f64>,
    pub new_ms: Option<f64>,
    /// New best vs heuristic, relative (-0.12 = 12% faster).
    pub delta: Option<f64>,
    /// Spread of that comparison (relative; infinite where there is nothing to compare).
    #[serde(deserialize_with = "null_as_nan")]
    pub spread: f64,
}

/// The share of paired rounds the faster contender must win (three in four): a lower
/// median made of a few lucky rounds does not decide.
pub const WIN_SHARE: f64 = 0.75;

/// A paired comparison of A against B.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Compare {
    /// median(A/B) - 1: negative when A is faster.
    pub delta: f64,
    /// Half the (trimmed) range of the ratios.
    pub spread: f64,
    /// Every (kept) round has A faster than B, or every one has it slower.
    pub agree: bool,
    /// The share of all rounds the contender the median calls faster won.
    pub wins: f64,
}

/// Where candidate A stands against B, by the margin and the spread of the paired rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// A is faster by the margin, outside the spread.
    Faster,
    /// A is slower by the margin, outside the spread.
    Slower,
    /// The difference reaches the margin but not the spread.
    InsideSpread,
    /// Within the margin.
    Even,
}

impl Compare {
    pub fn of(a: &[f64], b: &[f64]) -> Compare {
        let mut r: Vec<f64> = a
            .iter()
            .zip(b)
            .map(|(x, y)| x / y)
            .filter(|r| r.is_finite() && *r > 0.0)
            .collect();
        r.sort_by(|x, y| x.total_cmp(y));
        let delta = median(&r) - 1.0;
        let cut = if r.len() >= 10 { r.len() / 10 } else { 0 };
        let kept = &r[cut..r.len() - cut];
        let (spread, agree) = match (kept.first(), kept.last()) {
            (Some(lo), Some(hi)) => ((hi - lo) / 2.0, *hi < 1.0 || *lo > 1.0),
            _ => (f64::INFINITY, false),
        };
        let won = r
            .iter()
            .filter(|&&x| (x < 1.0) == (delta < 0.0) && x != 1.0)
            .count();
        Compare {
            delta,
            spread,
            agree,
            wins: won as f64 / r.len().max(1) as f64,
        }
    }

    fn outcome(&self, margin: f64) -> Standing {
        if self.delta.is_nan() {
            return Standing::InsideSpread;
        }
        if self.delta.abs() < margin {
            Standing::Even
        } else if self.delta.abs() <= self.spread || !self.agree || self.wins < WIN_SHARE {
            Standing::InsideSpread
        } else if self.delta < 0.0 {
            Standing::Faster
        } else {
            Standing::Slower
        }
    }
}

/// A relative difference as the reports write it: `-12.3%`.
pub(crate) fn pct(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

/// The timed series of one shape: heuristic, current row, new best (None: not timed).
fn series(e: &Evidence) -> (Vec<f64>, Option<Vec<f64>>, Option<Vec<f64>>) {
    let timed = |f: fn(&Round) -> Option<f64>| -> Option<Vec<f64>> {
        let v: Option<Vec<f64>> = e.rounds.iter().map(f).collect();
        v.filter(|v| !v.is_empty())
    };
    let heur = e.rounds.iter().map(|r| r.heuristic).collect();
    (heur, timed(|r| r.current), timed(|r| r.new))
}

/// What rule 1 says about the new best.
enum NewBest {
    /// Adopt it, for this reason.
    Adopt(String, String),
    /// It may be faster, but inside the spread: why.
    Undecided(String),
    /// Nothing to adopt.
    No,
}

/// Rule 1: can the new best be adopted? It must be another kernel than the current row's
/// and beat the heuristic (and the current row, if timed) by the margin, outside the spread.
fn judge_new_best(
    e: &Evidence,
    rules: &Rules,
    nh: Option<Compare>,
    vs_current: Option<Compare>,
    current_id: Option<&str>,
) -> NewBest {
    let (Some(id), Some(nh)) = (e.new.clone(), nh) else {
        return NewBest::No;
    };
    if Some(id.as_str()) == current_id {
        // Trap 1: the same kernel timed twice; whatever it "gains" is noise.
        return NewBest::No;
    }
    match (
        nh.outcome(rules.margin),
        vs_current.map(|c| c.outcome(rules.margin)),
    ) {
        (Standing::Faster, None | Some(Standing::Faster)) => NewBest::Adopt(
            id,
            match vs_current {
                Some(c) => format!(
                    "{} vs heuristic and {} vs the current row, spread {:.1}%",
                    pct(nh.delta),
                    pct(c.delta),
                    nh.spread.max(c.spread) * 100.0
                ),
                None => format!(
                    "{} vs heuristic, spread {:.1}%",
                    pct(nh.delta),
                    nh.spread * 100.0
                ),
            },
        ),
        (Standing::InsideSpread, _) if nh.delta < 0.0 => NewBest::Undecided(format!(
            "the new best's {} vs heuristic is inside the spread ({:.1}%)",
            pct(nh.delta),
            nh.spread * 100.0
        )),
        (Standing::Faster, Some(Standing::InsideSpread)) => {
            let c = vs_current.expect("matched Some");
            NewBest::Undecided(format!(
                "the new best's {} vs the current row is inside the spread ({:.1}%)",
                pct(c.delta),
                c.spread * 100.0
            ))
        }
        _ => NewBest::No,
    }
}

/// Rule 2: the current rocBLAS row `id` against the heuristic, when no new best was
/// adopted (`undecided`: why rule 1 could not decide).
fn judge_current_row(
    v: &mut Verdict,
    e: &Evidence,
    rules: &Rules,
    id: &str,
    (heur, cur): (&[f64], Option<&[f64]>),
    undecided: Option<String>,
) {
    let same_id_note = match &e.new {
        Some(n) if n == id => {
            format!("; the best candidate is the current row's own solution {id}, so no new kernel")
        }
        _ => String::new(),
    };
    let Some(c) = cur else {
        v.decision = Decision::Undecidable;
        v.row = e.current.clone();
        v.reason = format!("the current row's solution {id} could not be timed: kept");
        return;
    };
    let ch = Compare::of(c, heur);
    match ch.outcome(rules.margin) {
        Standing::Slower => {
            v.decision = Decision::Drop;
            v.row = rules.keep_default.then_some(RowChoice::Default);
            v.reason = format!(
                "the current row ({id}) is {} vs heuristic, spread {:.1}%{same_id_note}",
                pct(ch.delta),
                ch.spread * 100.0
            );
        }
        Standing::InsideSpread => {
            v.decision = Decision::Undecidable;
            v.row = e.current.clone();
            v.reason = format!(
                "the current row's {} vs heuristic is inside the spread ({:.1}%): kept{same_id_note}",
                pct(ch.delta),
                ch.spread * 100.0
            );
        }
        Standing::Faster | Standing::Even => {
            if let Some(why) = undecided {
                v.decision = Decision::Undecidable;
                v.reason = format!("{why}: the current row stays");
            } else {
                v.decision = Decision::Keep;
                v.reason = format!(
                    "the current row ({id}) holds at {} vs heuristic{same_id_note}",
                    pct(ch.delta)
                );
            }
            v.row = e.current.clone();
        }
    }
}

/// Rule 3: no rocBLAS row: the heuristic stands unless something was undecidable.
fn judge_without_row(
    v: &mut Verdict,
    e: &Evidence,
    rules: &Rules,
    nh: Option<Compare>,
    undecided: Option<String>,
) {
    let too_noisy = nh
        .filter(|c| c.spread > rules.noisy)
        .map(|c| format!("too noisy to decide (spread {:.0}%)", c.spread * 100.0));
    if let Some(why) = undecided.or(too_noisy) {
        v.decision = Decision::Undecidable;
        v.row = e.current.clone();
        v.reason = format!(
            "{why}: {}",
            if e.current.is_some() {
                "the Default row stays"
            } else {
                "no row written; re-tune with more --trials"
            }
        );
        return;
    }
    v.decision = Decision::Default;
    v.row = rules.keep_default.then_some(RowChoice::Default);
    v.reason = match (&e.new, nh) {
        (None, _) | (_, None) => "the library offered no runnable solution".into(),
        (Some(_), Some(nh)) => format!(
            "no solution beats the heuristic by {:.1}% (best {})",
            rules.margin * 100.0,
            pct(nh.delta)
        ),
    };
}

/// Applies the rules to one shape.
pub fn decide(e: &Evidence, rules: &Rules) -> Verdict {
    let (heur, cur, new) = series(e);
    let nh = new.as_ref().map(|n| Compare::of(n, &heur));
    let mut v = Verdict {
        decision: Decision::Default,
        row: None,
        reason: String::new(),
        heuristic_ms: median(&heur),
        current_ms: cur.as_deref().map(median),
        new_ms: new.as_deref().map(median),
        delta: nh.map(|c| c.delta),
        spread: nh.map_or(f64::INFINITY, |c| c.spread),
    };
    let current_id = match &e.current {
        Some(RowChoice::Mine(id)) => Some(id.as_str()),
        Some(RowChoice::Foreign(text)) => {
            v.decision = Decision::Keep;
            v.row = e.current.clone();
            v.reason = format!("{text} is not this library's solution: left as it is");
            return v;
        }
        _ => None,
    };
    let vs_current = match (&cur, &new) {
        (Some(c), Some(n)) => Some(Compare::of(n, c)),
        _ => None,
    };
    let undecided = match judge_new_best(e, rules, nh, vs_current, current_id) {
        NewBest::Adopt(id, reason) => {
            v.decision = Decision::Adopt;
            v.row = Some(RowChoice::Mine(id));
            v.reason = reason;
            return v;
        }
        NewBest::Undecided(why) => Some(why),
        NewBest::No => None,
    };
    match current_id {
        Some(id) => judge_current_row(&mut v, e, rules, id, (&heur, cur.as_deref()), undecided),
        None => judge_without_row(&mut v, e, rules, nh, undecided),
    }
    v
}
