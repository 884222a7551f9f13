//! Rate-limited log lines on stderr, each starting with `tunedblas:` and written with one
//! `write(2)` so lines from several threads or processes never interleave. A line is
//! formatted into a 1 KiB stack buffer, not the heap: the exit summary is printed from
//! `_exit`, which a signal handler may call on a small stack while the thread it
//! interrupted holds the allocator's lock.
//!
//! A line goes to descriptor 2 only while it is still the file it was when this library was
//! loaded (its device and inode, read then): a host that closed stderr and opened a file of
//! its own (which takes number 2) never finds our lines in it. A process loaded with stderr
//! closed gets no line at all.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

pub use tunedblas_core::settings::{LOG_DEBUG as DEBUG, LOG_INFO as INFO, LOG_QUIET as QUIET};

/// `[tunedblas <version>]`, at the end of each backend's start line, so a log says which
/// build of the interposer served (as `tunedblas --version` and `env` say it).
pub const VERSION_TAG: &str = concat!("[tunedblas ", env!("CARGO_PKG_VERSION"), "]");

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

/// Descriptor 2 as it was at load: its device and inode (`STDERR_DEV == u64::MAX`: it was
/// closed, or not read yet).
static STDERR_DEV: AtomicU64 = AtomicU64::new(u64::MAX);
static STDERR_INO: AtomicU64 = AtomicU64::new(0);

/// The device and inode behind descriptor 2 now, if it is open.
fn stderr_now() -> Option<(u64, u64)> {
    // SAFETY: fstat into a buffer of ours; async-signal-safe.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(2, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Runs when the library is loaded, before the host's own code: one `fstat` of descriptor 2,
/// so later lines can tell whether it is still the stderr the process started with.
extern "C" fn at_load() {
    if let Some((dev, ino)) = stderr_now() {
        STDERR_INO.store(ino, Ordering::Relaxed);
        STDERR_DEV.store(dev, Ordering::Release);
    }
}

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

/// Whether descriptor 2 is still the stderr it was at load.
fn stderr_is_the_hosts() -> bool {
    let dev = STDERR_DEV.load(Ordering::Acquire);
    dev != u64::MAX && stderr_now() == Some((dev, STDERR_INO.load(Ordering::Relaxed)))
}

/// Writes one line if `level` is enabled and the budget is not spent, formatted on the
/// stack (a longer line is cut short).
pub fn line_args(level: u8, args: std::fmt::Arguments) {
    if !enabled(level) {
        return;
    }
    let _errno = crate::lifecycle::KeepErrno::new();
    if !stderr_is_the_hosts() {
        return;
    }
    let n = WRITTEN.fetch_add(1, Ordering::Relaxed);
    if n > LIMIT {
        return;
    }
    let mut out = Line {
        buf: [0; 1024],
        len: 0,
    };
    use std::fmt::Write;
    if n == LIMIT {
        let _ = out.write_str("tunedblas: log limit reached; further messages are suppressed");
    } else {
        let _ = out.write_str("tunedblas: ");
        let _ = out.write_fmt(args);
    }
    out.len = out.len.min(out.buf.len() - 1);
    out.buf[out.len] = b'\n';
    write_stderr(&out.buf[..out.len + 1]);
}

/// [`tunedblas_core::process::quiet_write`]: a write of ours that fails on a pipe nobody
/// reads or past a file-size limit does not end the host.
pub use tunedblas_core::process::quiet_write as without_our_signals;

/// Writes one line to descriptor 2: the host never wrote there itself, so a SIGPIPE from a
/// pipe nobody reads would be ours ([`without_our_signals`]). A failed write is ignored on
/// purpose.
fn write_stderr(bytes: &[u8]) {
    // SAFETY: writing from a live buffer.
    without_our_signals(|| unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) });
}

/// A line being formatted: whatever does not fit is dropped.
struct Line {
    buf: [u8; 1024],
    len: usize,
}

impl std::fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = self.buf.len() - 1 - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

macro_rules! info {
    ($($t:tt)*) => { $crate::log::line_args($crate::log::INFO, format_args!($($t)*)) };
}
macro_rules! debug {
    ($($t:tt)*) => {
        if $crate::log::enabled($crate::log::DEBUG) {
            $crate::log::line_args($crate::log::DEBUG, format_args!($($t)*))
        }
    };
}
pub(crate) use {debug, info};
