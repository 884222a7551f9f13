//! A campaign's progress bar with an ETA on stderr (indicatif), drawn only when stderr is
//! a terminal (not `TERM=dumb`) and the run is not quiet; the per-shape lines printed
//! through it go to stdout without tearing the bar.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
    total: usize,
}

/// `1:05` style duration.
pub fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// Whether a bar is drawn: on a terminal that draws, in a run that is not quiet.
fn drawn(enabled: bool) -> bool {
    enabled
        && std::io::stderr().is_terminal()
        && std::env::var_os("TERM").is_some_and(|t| t != "dumb")
}

impl Progress {
    /// A bar of `total` shapes, `resumed` of them finished before this run, each searched
    /// for at most `budget_s` seconds (0: no limit), which the bar says beside the ETA.
    /// `enabled` false never draws (quiet runs).
    pub fn new(total: usize, resumed: usize, budget_s: f64, enabled: bool) -> Progress {
        let target = if drawn(enabled) {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total as u64), target).with_style(
            ProgressStyle::with_template(
                "[{bar:30}] {pos}/{len} {elapsed_precise} elapsed, ETA {eta_precise} ({prefix})  {msg}",
            )
            .expect("a valid template")
            .progress_chars("# "),
        );
        // The shapes finished before a resume are done but took no time in this run: the
        // ETA is reckoned from this run's pace only.
        bar.set_prefix(match budget_s {
            b if b > 0.0 => format!("search <= {b} s a shape"),
            _ => "every candidate probed".to_string(),
        });
        bar.set_position(resumed as u64);
        bar.reset_eta();
        bar.enable_steady_tick(Duration::from_secs(1));
        Progress { bar, total }
    }

    /// Shapes finished, those before a resume included.
    pub fn done(&self) -> usize {
        self.bar.position() as usize
    }

    /// One more shape finished; `label` names the last one.
    pub fn advance(&mut self, label: &str) {
        self.bar.set_message(label.to_string());
        self.bar.inc(1);
    }

    /// Prints a line on stdout above the bar.
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| println!("{line}"));
    }

    /// Takes the bar away, leaving one line saying how long it took.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
        if !self.bar.is_hidden() {
            eprintln!(
                "{}/{} done in {}",
                self.done(),
                self.total,
                clock(self.bar.elapsed().as_secs_f64())
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_and_counts() {
        assert_eq!(clock(65.0), "1:05");
        assert_eq!(clock(3725.0), "1:02:05");
        let mut p = Progress::new(10, 4, 20.0, false);
        assert_eq!(p.bar.prefix(), "search <= 20 s a shape");
        assert_eq!(p.done(), 4, "the resumed shapes count as done");
        p.advance("x");
        assert_eq!(p.done(), 5);
        assert!(p.bar.is_hidden(), "a quiet run draws nothing");
        p.finish();
    }
}
