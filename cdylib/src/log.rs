//! Rate-limited log lines on stderr, each starting with `tunedblas:` and written with one
//! `write(2)` so lines from several threads or processes never interleave.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

pub const QUIET: u8 = 0;
pub const INFO: u8 = 1;
pub const DEBUG: u8 = 2;

static LEVEL: AtomicU8 = AtomicU8::new(INFO);
static WRITTEN: AtomicU32 = AtomicU32::new(0);
/// A process that keeps failing must not flood its operator's logs.
const LIMIT: u32 = 200;

pub fn set_level(level: u8) {
    LEVEL.store(level, Ordering::Relaxed);
}

pub fn enabled(level: u8) -> bool {
    level <= LEVEL.load(Ordering::Relaxed) && level != QUIET
}

/// Writes one line if `level` is enabled and the budget is not spent.
pub fn line(level: u8, msg: &str) {
    if !enabled(level) {
        return;
    }
    let n = WRITTEN.fetch_add(1, Ordering::Relaxed);
    if n > LIMIT {
        return;
    }
    let text = if n == LIMIT {
        "tunedblas: log limit reached; further messages are suppressed\n".to_owned()
    } else {
        format!("tunedblas: {msg}\n")
    };
    // SAFETY: writing a valid buffer to fd 2; a failed write is ignored on purpose.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}

macro_rules! info {
    ($($t:tt)*) => { $crate::log::line($crate::log::INFO, &format!($($t)*)) };
}
macro_rules! debug {
    ($($t:tt)*) => {
        if $crate::log::enabled($crate::log::DEBUG) {
            $crate::log::line($crate::log::DEBUG, &format!($($t)*))
        }
    };
}
pub(crate) use {debug, info};
