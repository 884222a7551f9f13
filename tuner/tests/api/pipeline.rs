//! Tuning one shape (`tunedblas_tuner::pipeline`) and the screening (`tunedblas_tuner::bench`)
//! through their public API: warm-up, interleaved trials, the bounded search.

use std::time::Duration;

use tunedblas_tuner::bench::{Bench, Cand, Screen};
use tunedblas_tuner::error::Result;
use tunedblas_tuner::numerics::{spread, Layout};
use tunedblas_tuner::pipeline::*;
use tunedblas_tuner::runtime::Runtime;
use tunedblas_tuner::timer::{Mode, Timer};

use crate::stand_ins::cuda_runtime;

/// A bench whose algorithms are numbers: each sample records which ran and returns a
/// time that falls by 10% over the first `slow_start` samples, then stays flat.
struct Clocked<'r> {
    timer: Timer<'r>,
    ran: std::cell::RefCell<Vec<u32>>,
    slow_start: usize,
}

impl<'r> Clocked<'r> {
    fn new(rt: &'r Runtime, slow_start: usize) -> Self {
        Clocked {
            timer: Timer::new(rt, Mode::Events, 0.0, None, "clocked".into()).unwrap(),
            ran: Default::default(),
            slow_start,
        }
    }
}

impl Bench for Clocked<'_> {
    type Algo = u32;
    fn parts(&self) -> (&Timer<'_>, usize, Layout) {
        (&self.timer, 1, Layout::dense(1, 1, 1))
    }
    fn run(&self, _: &u32, _: usize) -> Result<()> {
        Ok(())
    }
    fn id(&self, a: &u32) -> Vec<u8> {
        a.to_le_bytes().to_vec()
    }
    fn heuristic(&self) -> Result<Cand<u32>> {
        Ok(Cand {
            name: "Default".into(),
            algo: 0,
        })
    }
    fn candidates(&self, _: &mut Screen<'_, u32>) -> Result<()> {
        Ok(())
    }
    fn resolve(&self, _: &str) -> std::result::Result<u32, String> {
        Ok(1)
    }
    fn output(&self, _: &u32) -> Result<Vec<f64>> {
        Ok(vec![1.0])
    }
    fn time(&self, algo: &u32, _calls: usize) -> Result<f64> {
        let mut ran = self.ran.borrow_mut();
        ran.push(*algo);
        let n = ran.len().min(self.slow_start) as f64;
        Ok(1.0 + *algo as f64 * 0.01 - 0.1 * n / self.slow_start as f64)
    }
}

#[test]
fn warmed_trials_record_only_the_rounds_after_the_unrecorded_ones() {
    let rt = cuda_runtime();
    // The device settles during the unrecorded rounds (3 algorithms x 2 rounds).
    let b = Clocked::new(&rt, 3 * WARM_ROUNDS);
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
    let t = rounds(&b, &[&0, &1, &2], 1, 0, 5).unwrap();
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
    // Samples of 1 ms: windows of 100 samples, so a drift over 100 ms is seen even when
    // the last 10 samples agree.
    let mut slow: Vec<f64> = vec![0.94; 100];
    slow.extend(vec![1.0; 100]);
    assert!(!settled(&slow, 1.0));
    slow.extend(vec![1.0; 100]);
    assert!(settled(&slow, 1.0));
    // The warm-up runs samples until settled, at least its minimum device time.
    let rt = cuda_runtime();
    let b = Clocked::new(&rt, 1);
    let spent = warm_up(&b, &0, 10).unwrap();
    assert!(
        (WARM_UP_MS..WARM_UP_MAX_MS + 10.0).contains(&spent),
        "{spent}"
    );
}

#[test]
fn the_screening_keeps_the_fastest_within_its_budget_and_says_what_it_left() {
    // Probes of 1 ms each (the candidate's number is its time): with a budget of none,
    // everything offered is probed; with a spent budget, nothing more is.
    let probe = |a: &u32| -> Result<f64> { Ok(*a as f64) };
    let mut s = Screen::new(&probe, None, "Default");
    for a in [5u32, 3, 9, 3] {
        assert!(s.offer(Cand {
            name: format!("c{a}"),
            algo: a
        }));
    }
    s.not_probed("unsupported");
    s.not_probed("unsupported");
    assert_eq!(
        (s.stats.listed, s.stats.probed),
        (6, 3),
        "a name offered twice is probed once"
    );
    assert_eq!(s.best(2), ["c3", "c5"]);
    assert_eq!(s.stats.not_probed, ["unsupported: 2"]);
    let mut spent = Screen::new(&probe, Some(Duration::ZERO), "Default");
    assert!(spent.spent());
    assert!(!spent.offer(Cand {
        name: "c1".into(),
        algo: 1
    }));
    assert!(spent.stats.out_of_time && spent.found.is_empty());
    assert!(
        spent.stats.line().contains("budget spent"),
        "{}",
        spent.stats.line()
    );
}
