//! What the pipeline needs of one shape of one library on one device: [`Bench`], the one
//! thing a backend implements per shape (how to list, run and check its algorithms), and
//! [`Screen`], the bounded search every backend's candidates go through.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::numerics::{Layout, HOST_REFERENCE_MACS};
use crate::timer::Timer;

/// A candidate: the name a row gives it (`Gemm_Rocblas_17`, `Gemm_Hipblaslt_4211`, a
/// cuBLASLt configuration) and the algorithm that runs it.
pub struct Cand<A> {
    pub name: String,
    pub algo: A,
}

/// One shape of one library on one device, ready to run.
pub trait Bench {
    /// An algorithm as the library takes it.
    type Algo;
    /// The timer, the input sets the timed calls rotate through, and the layout.
    fn parts(&self) -> (&Timer<'_>, usize, Layout);
    fn timer(&self) -> &Timer<'_> {
        self.parts().0
    }
    fn sets(&self) -> usize {
        self.parts().1
    }
    fn layout(&self) -> Layout {
        self.parts().2
    }
    /// Enqueues one call of `algo` on input set `set` (modulo the sets) on the timer's
    /// stream.
    fn run(&self, algo: &Self::Algo, set: usize) -> Result<()>;
    /// The bytes that tell two algorithms apart (graphs are cached by them).
    fn id(&self, algo: &Self::Algo) -> Vec<u8>;
    /// What a caller without a row runs (the heuristic's answer), named as a row names it.
    fn heuristic(&self) -> Result<Cand<Self::Algo>>;
    /// Offers the library's candidates for this shape to `screen`, the most promising
    /// first, until it says the budget is spent.
    fn candidates(&self, screen: &mut Screen<'_, Self::Algo>) -> Result<()>;
    /// The algorithm a row names, rebuilt as the interposer rebuilds it; why not where it
    /// cannot run this shape.
    fn resolve(&self, name: &str) -> std::result::Result<Self::Algo, String>;
    /// D of input set 0 computed with `algo`, as f64 (the buffer is poisoned first, so
    /// elements left unwritten show as NaN).
    fn output(&self, algo: &Self::Algo) -> Result<Vec<f64>>;

    /// A high-precision reference for D of input set 0: the f64 product on the host where
    /// it is what the library computes and affordable; `None` makes the heuristic's own
    /// output the reference.
    fn reference(&self) -> Result<Option<Vec<f64>>> {
        let g = self.layout();
        Ok((g.exact && g.macs() <= HOST_REFERENCE_MACS).then(|| g.reference()))
    }

    /// Why the fastest candidate runs where it does against the shape's limit, where the
    /// library can say (cuBLASLt: the grid it launches on the SMs).
    fn why(&self, _limit: &crate::limits::ShapeLimit) -> Option<String> {
        None
    }

    /// Milliseconds per call of `algo` over `calls` calls, in the timer's mode, then the
    /// rest.
    fn time(&self, algo: &Self::Algo, calls: usize) -> Result<f64> {
        let run = |i| self.run(algo, i);
        self.timer()
            .time(&self.id(algo), (calls, self.sets()), &run, false)
    }

    /// A short screening sample of `algo`: no rest, and a graph that fails is the
    /// algorithm's failure.
    fn probe(&self, algo: &Self::Algo, calls: usize) -> Result<f64> {
        let run = |i| self.run(algo, i);
        self.timer()
            .time(&self.id(algo), (calls, self.sets()), &run, true)
    }
}

/// What the screening of one shape did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ScreenStats {
    /// Candidates the library listed (for a search: that it generated).
    pub listed: usize,
    pub probed: usize,
    /// Probes that failed to run (the candidate is out).
    pub failed: usize,
    /// The budget ran out before every listed candidate was probed.
    pub out_of_time: bool,
    pub seconds: f64,
    /// Why listed candidates were not probed, counted by reason (unsupported, too much
    /// workspace, ...).
    pub not_probed: Vec<String>,
}

impl ScreenStats {
    pub fn line(&self) -> String {
        format!(
            "{} listed, {} probed{} in {:.1} s{}",
            self.listed,
            self.probed,
            match self.failed {
                0 => String::new(),
                n => format!(" ({n} failed)"),
            },
            self.seconds,
            if self.out_of_time {
                " (budget spent: not all probed)"
            } else {
                ""
            }
        )
    }
}

/// The bounded search: every candidate a library lists is probed once with a short sample,
/// in the order offered, until the shape's time budget is spent; the fastest go on.
/// Libraries list from tens (rocBLAS, the cuBLASLt heuristic) to thousands (hipBLASLt's
/// `getAllAlgos` on an MI300, the cuBLASLt configuration space) of candidates.
pub struct Screen<'p, A> {
    probe: &'p dyn Fn(&A) -> Result<f64>,
    deadline: Instant,
    started: Instant,
    seen: HashSet<String>,
    pub found: Vec<(Cand<A>, f64)>,
    pub stats: ScreenStats,
}

impl<'p, A> Screen<'p, A> {
    /// A screening of `budget` (none: unbounded) that probes with `probe`; `skip` names
    /// what is timed anyway (the heuristic's own answer).
    pub fn new(probe: &'p dyn Fn(&A) -> Result<f64>, budget: Option<Duration>, skip: &str) -> Self {
        let started = Instant::now();
        Screen {
            probe,
            deadline: budget.map_or(started + Duration::from_secs(u32::MAX as u64), |b| {
                started + b
            }),
            started,
            seen: HashSet::from([skip.to_string()]),
            found: Vec::new(),
            stats: ScreenStats::default(),
        }
    }

    /// Whether the budget is spent (said in the stats once something went unprobed).
    pub fn spent(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// The share of the budget spent (0 without one).
    pub fn share_spent(&self) -> f64 {
        let budget = self.deadline - self.started;
        self.started.elapsed().as_secs_f64() / budget.as_secs_f64()
    }

    /// Probes `c` once, unless it was seen already; false once the budget is spent (the
    /// library stops offering).
    pub fn offer(&mut self, c: Cand<A>) -> bool {
        self.stats.listed += 1;
        if self.spent() {
            self.stats.out_of_time = true;
            return false;
        }
        if !self.seen.insert(c.name.clone()) {
            return true;
        }
        match (self.probe)(&c.algo) {
            Ok(ms) if ms.is_finite() => {
                self.stats.probed += 1;
                self.found.push((c, ms));
            }
            _ => self.stats.failed += 1,
        }
        self.stats.seconds = self.started.elapsed().as_secs_f64();
        true
    }

    /// A listed candidate that cannot run this shape, counted under `why`.
    pub fn not_probed(&mut self, why: &str) {
        self.stats.listed += 1;
        let prefix = format!("{why}: ");
        match self
            .stats
            .not_probed
            .iter_mut()
            .find(|l| l.starts_with(&prefix))
        {
            Some(l) => {
                let n: usize = l[prefix.len()..].parse().unwrap_or(0);
                *l = format!("{prefix}{}", n + 1);
            }
            None => self.stats.not_probed.push(format!("{prefix}1")),
        }
    }

    /// The names of the `n` fastest probes so far.
    pub fn best(&self, n: usize) -> Vec<&str> {
        let mut v: Vec<&(Cand<A>, f64)> = self.found.iter().collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        v.into_iter().take(n).map(|c| c.0.name.as_str()).collect()
    }
}
