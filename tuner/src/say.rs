//! What a command says besides its answer: progress and notes on stderr, which `-q` /
//! `--quiet` silences for every command alike. The answer itself (stdout), warnings and
//! errors are never silenced.

use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// Set once, by `main`, from the command line.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `-q` was given.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A note on stderr (what was done on the side, what is being waited for), unless `-q`.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        if !$crate::say::quiet() {
            eprintln!($($arg)*);
        }
    };
}
pub use crate::note;
