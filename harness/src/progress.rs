//! A progress bar with an ETA on stderr, drawn only when stderr is a terminal; log lines
//! printed through it do not tear the bar.

use std::io::Write;
use std::time::Instant;

pub struct Progress {
    total: usize,
    done: usize,
    /// Shapes finished before this run (a resumed campaign): not counted for the ETA.
    resumed: usize,
    started: Instant,
    draw: bool,
    label: String,
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

impl Progress {
    /// `enabled` false never draws (quiet runs); otherwise draws on a terminal only.
    pub fn new(total: usize, resumed: usize, enabled: bool) -> Progress {
        // SAFETY: isatty on a constant descriptor.
        let tty = unsafe { libc::isatty(2) } == 1;
        Progress {
            total,
            done: resumed,
            resumed,
            started: Instant::now(),
            draw: enabled && tty && std::env::var_os("TERM").is_some_and(|t| t != "dumb"),
            label: String::new(),
        }
    }

    pub fn done(&self) -> usize {
        self.done
    }

    /// Seconds left, from the pace of this run.
    pub fn eta(&self) -> Option<f64> {
        let here = self.done.saturating_sub(self.resumed);
        (here > 0).then(|| {
            self.started.elapsed().as_secs_f64() / here as f64
                * self.total.saturating_sub(self.done) as f64
        })
    }

    pub fn advance(&mut self, label: &str) {
        self.done += 1;
        self.label = label.to_string();
        self.redraw();
    }

    fn redraw(&self) {
        if !self.draw {
            return;
        }
        let width = 30;
        let filled = width * self.done / self.total.max(1);
        let eta = self.eta().map_or("--:--".into(), clock);
        eprint!(
            "\r\x1b[K[{}{}] {}/{} {} elapsed, ETA {eta}  {}",
            "#".repeat(filled),
            " ".repeat(width - filled),
            self.done,
            self.total,
            clock(self.started.elapsed().as_secs_f64()),
            self.label
        );
        let _ = std::io::stderr().flush();
    }

    /// Prints a line on stdout above the bar.
    pub fn println(&self, line: &str) {
        if self.draw {
            eprint!("\r\x1b[K");
        }
        println!("{line}");
        self.redraw();
    }

    pub fn finish(&self) {
        if self.draw {
            eprintln!(
                "\r\x1b[K{}/{} done in {}",
                self.done,
                self.total,
                clock(self.started.elapsed().as_secs_f64())
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_and_eta() {
        assert_eq!(clock(65.0), "1:05");
        assert_eq!(clock(3725.0), "1:02:05");
        let mut p = Progress::new(10, 4, false);
        assert_eq!(
            p.eta(),
            None,
            "no pace yet: the resumed shapes do not count"
        );
        p.advance("x");
        assert_eq!(p.done(), 5);
        assert!(p.eta().is_some());
    }
}
