//! The one miss recorder, shared by every backend: the in-memory set of missed shapes and
//! the files under the miss folder (written through [`crate::files`]: no descriptor held
//! between writes, names unique per process start, little stack and no allocation).
//!
//! - A first sight is appended at once with one `write(2)` to
//!   `<process><tag>-rank<device>.csv` in PyTorch's untuned-file form
//!   (`op_name,param_signature`), so even SIGKILL loses no shape. `<process>` is
//!   [`crate::files::PROCESS`]: host, pid, start tick and a random part.
//! - Call counts go to the sidecar `...-rank<device>.counts.csv`
//!   (`op_name,param_signature,calls`), rewritten atomically (temporary + rename) at 1024,
//!   2048, ... calls of a shape, at least once a second while calls arrive (the status tick,
//!   [`crate::status::tick`]), and at every way out of the process ([`crate::lifecycle`]).
//!
//! Nothing here can make a fork child or a signal handler wait forever: the log's state sits
//! behind an [`ExitLock`], which is never taken by the thread that already holds it (a GEMM
//! or an `_exit` from a signal handler that interrupted this thread) and is waited for only a
//! bounded time; a forked child replaces it instead of unlocking an inherited lock. The
//! counts are written from each shape's line as it was formatted at first sight, through
//! stack buffers and `libc` calls only: no allocation, so `_exit` from a signal handler that
//! interrupted `malloc` cannot deadlock on the allocator either.

use std::cell::Cell;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tunedblas_core::misslog::{MissSet, Sight};

use crate::files::{self, Folder, Made, Trust, PROCESS};
use crate::lifecycle::{self, ExitLock, NoCancel};
use crate::log::info;

/// First slot count of the miss set; it grows to [`MissSet::limit`] shapes.
pub const MISS_CAPACITY: usize = 1 << 14;

/// Formats a key as the two fields of an untuned-file line.
pub type KeyFormat<K> = fn(&K) -> (String, String);

/// How long a first sight waits for another thread's write to the same files.
const FIRST_SIGHT_WAIT: Duration = Duration::from_secs(2);

/// Counts are rewritten at least this often while new shapes arrive (a process that ends
/// with a raw `exit_group` or SIGKILL keeps counts this fresh; the status tick does the same
/// while only known shapes are missed).
const FLUSH_EVERY_NS: u64 = 1_000_000_000;

/// The periodic rewrites (of the counts here, of the live status in `status.rs`) walk every
/// missed shape on a GEMM's thread: with hundreds of thousands of distinct misses one walk
/// took a fifth of a second, and once a second took a third of the thread's time (an outside
/// tester's host). So the next periodic rewrite waits at least this many times as long as
/// the last one took: at most 1/PACE of a thread's time, whatever the number of shapes.
pub const PACE: u64 = 50;

/// Whether a periodic rewrite that last ran at `last` and took `cost` ns is due at `now`.
#[inline]
pub fn paced(now: u64, last: u64, cost: u64, every: u64) -> bool {
    now.saturating_sub(last) >= every.max(cost.saturating_mul(PACE))
}

/// The misses of one backend in one process.
pub struct Recorder<K: 'static> {
    pub set: MissSet<K>,
    /// The miss folder.
    folder: Folder,
    /// Inserted after the process part of file names (`-cublaslt`), so backends never share
    /// a file.
    tag: &'static str,
    format: KeyFormat<K>,
    /// The miss logs made and the first sights waiting to be written.
    log: ExitLock<Log>,
    /// "" for rocBLAS, "cuBLASLt " for cuBLASLt: the start of this backend's messages.
    what: &'static str,
    io_warned: AtomicBool,
    full_warned: AtomicBool,
    /// Calls of shapes that found the set full (said once, counted in the stats).
    over_cap_calls: AtomicU64,
    /// When counts were last written (monotonic ns).
    last_flush_ns: AtomicU64,
    /// How long the last rewrite of the counts took (ns), for [`paced`].
    flush_cost_ns: AtomicU64,
    /// The backend's missed-call total when counts were last written by the tick.
    flushed_calls: AtomicU64,
    /// A shape was first seen by a signal handler that interrupted the slow path: it has
    /// no line yet. The next slow path that may allocate gives it one and writes the
    /// counts, so a way out (which allocates nothing) finds its line.
    untexted: AtomicBool,
}

thread_local! {
    /// This thread is inside [`Recorder::slow`]: a GEMM from a signal handler that
    /// interrupted it must not re-enter (the allocator may be mid-call on this thread).
    static IN_SLOW: Cell<bool> = const { Cell::new(false) };
}

impl<K: Copy + Eq + std::hash::Hash + 'static> Recorder<K> {
    /// A recorder writing into `dir`, checked as `trust` says (a folder the user named may be
    /// a shared sticky one; the default one must be private).
    pub fn new(
        dir: PathBuf,
        trust: Trust,
        format: KeyFormat<K>,
        tag: &'static str,
        what: &'static str,
    ) -> Self {
        // A path with a NUL byte cannot come from the environment; the empty name fails
        // every open, and the one warning says so.
        let folder = Folder::new(&dir, trust)
            .unwrap_or_else(|| Folder::new(Path::new(""), trust).expect("no NUL"));
        PROCESS.get_or_make();
        Recorder {
            set: MissSet::with_capacity(MISS_CAPACITY),
            folder,
            tag,
            format,
            log: ExitLock::new(Log::default()),
            what,
            io_warned: AtomicBool::new(false),
            full_warned: AtomicBool::new(false),
            over_cap_calls: AtomicU64::new(0),
            last_flush_ns: AtomicU64::new(lifecycle::monotonic_ns()),
            flush_cost_ns: AtomicU64::new(0),
            flushed_calls: AtomicU64::new(0),
            untexted: AtomicBool::new(false),
        }
    }

    /// Counts one missed call; `hash` is the key's lookup hash. `admit` runs only for a key
    /// not seen before (false: never record it). Returns the key's slot and note, as
    /// [`MissSet::record_noted`]. The repeat path is one probe and one atomic add.
    #[inline(always)]
    pub fn record(
        &self,
        device: i32,
        key: &K,
        hash: u64,
        admit: impl FnOnce() -> bool,
    ) -> Option<(usize, u64)> {
        self.record_sight(device, key, hash, admit).1
    }

    /// [`Recorder::record`] that also says what the set saw.
    #[inline(always)]
    pub fn record_sight(
        &self,
        device: i32,
        key: &K,
        hash: u64,
        admit: impl FnOnce() -> bool,
    ) -> (Sight, Option<(usize, u64)>) {
        let (sight, noted) = self.set.record_noted(device, key, hash, admit);
        match sight {
            Sight::Repeat { count } if count < 1024 || !count.is_power_of_two() => {}
            Sight::Refused => {}
            sight => self.slow(device, key, sight, noted),
        }
        (sight, noted)
    }

    /// A first sight, a periodic count flush, or a full set: off the repeat-miss path.
    #[cold]
    #[inline(never)]
    fn slow(&self, device: i32, key: &K, sight: Sight, noted: Option<(usize, u64)>) {
        let _errno = lifecycle::KeepErrno::new();
        if IN_SLOW.with(|f| f.replace(true)) {
            // Re-entered from a signal handler: the shape is in the set; its line is
            // formatted by the next slow path that may allocate.
            if matches!(sight, Sight::First) {
                self.untexted.store(true, Ordering::Relaxed);
            }
            return;
        }
        let _no_cancel = NoCancel::new();
        match sight {
            Sight::First => self.first_sight(device, key, noted),
            // Count flushes at 1024, 2048, ... calls of a shape: periodic, yet rare.
            Sight::Repeat { .. } => {
                if self.flush_due(lifecycle::monotonic_ns()) {
                    self.write_counts(true);
                }
            }
            Sight::Refused => {}
            Sight::Full => {
                self.over_cap_calls.fetch_add(1, Ordering::Relaxed);
                if !self.full_warned.swap(true, Ordering::Relaxed) {
                    let (kept, limit) = (self.set.len(), self.set.limit());
                    if kept < limit {
                        // A segment could not be allocated (`MissSet::grow`).
                        info!(
                            "{}no memory for more of the miss log ({kept} distinct missed shapes kept; an address-space limit?); further new shapes are counted as over-capacity calls but not recorded",
                            self.what
                        );
                    } else {
                        info!(
                            "{}more than {limit} distinct missed shapes in this process; further new shapes are counted as over-capacity calls but not recorded",
                            self.what
                        );
                    }
                }
            }
        }
        IN_SLOW.with(|f| f.set(false));
    }

    fn first_sight(&self, device: i32, key: &K, noted: Option<(usize, u64)>) {
        let (op, sig) = (self.format)(key);
        let text = format!("{op},{sig}");
        if let Some(mut log) = self.log.lock_within(FIRST_SIGHT_WAIT) {
            let result = log.append(self, device, &text);
            drop(log);
            if let Err(e) = result {
                self.warn_io(&e);
            }
        }
        // (Not written when another thread held the log past the wait: the shape is still
        // in the set and in the counts.)
        if let Some((slot, _)) = noted {
            self.set.set_text(slot, text);
        }
        let now = lifecycle::monotonic_ns();
        if self.untexted.swap(false, Ordering::Relaxed) || self.flush_due(now) {
            self.write_counts(true);
        }
    }

    /// Rewrites the counts files. With `may_allocate`, first formats the line of any shape
    /// that has none yet (seen from a signal handler); without, allocates nothing and
    /// takes no lock, so it is safe at any way out.
    fn write_counts(&self, may_allocate: bool) {
        if may_allocate {
            let mut missing = Vec::new();
            self.set.for_each_slot(|slot, _, key, _, text| {
                if text.is_none() {
                    missing.push((slot, *key));
                }
            });
            for (slot, key) in missing {
                let (op, sig) = (self.format)(&key);
                self.set.set_text(slot, format!("{op},{sig}"));
            }
        }
        let start = lifecycle::monotonic_ns();
        self.last_flush_ns.store(start, Ordering::Relaxed);
        let written = self.write_counts_files();
        let cost = lifecycle::monotonic_ns().saturating_sub(start);
        self.flush_cost_ns.store(cost, Ordering::Relaxed);
        if let Err(e) = written {
            self.warn_io(&e);
        }
    }

    /// Whether a periodic rewrite of the counts is due at `now` ([`paced`]).
    fn flush_due(&self, now: u64) -> bool {
        paced(
            now,
            self.last_flush_ns.load(Ordering::Relaxed),
            self.flush_cost_ns.load(Ordering::Relaxed),
            FLUSH_EVERY_NS,
        )
    }

    /// From the status tick (a GEMM's thread, about once a second): rewrites the counts if
    /// the backend's missed calls moved since (`missed` is their total now), so a process
    /// killed with SIGKILL leaves counts at most a second old ([`paced`]: longer where a
    /// rewrite takes more than 1/PACE of that). Allocates nothing.
    pub fn tick(&self, missed: u64) {
        if self.set.is_empty()
            || self.flushed_calls.load(Ordering::Relaxed) == missed
            || IN_SLOW.with(|f| f.get())
            || !self.flush_due(lifecycle::monotonic_ns())
        {
            return;
        }
        if self.flushed_calls.swap(missed, Ordering::Relaxed) == missed {
            return;
        }
        self.write_counts(false);
    }

    /// At a way out of the process: writes what waits (first sights whose write failed)
    /// if the log is free within `wait` (never waiting for this thread itself: a signal
    /// handler's `_exit`), then the counts, allocating nothing.
    pub fn flush(&self, wait: Duration) {
        if self.set.is_empty() {
            return;
        }
        let _errno = lifecycle::KeepErrno::new();
        let _no_cancel = NoCancel::new();
        if !IN_SLOW.with(|f| f.get()) {
            if let Some(mut log) = self.log.lock_within(wait) {
                let result = log.flush_pending(self);
                drop(log);
                if let Err(e) = result {
                    self.warn_io(&e);
                }
            }
        }
        self.write_counts(false);
    }

    /// The miss folder.
    pub fn dir(&self) -> &Path {
        self.folder.path()
    }

    /// Calls whose shape found no room in the set.
    pub fn over_cap_calls(&self) -> u64 {
        self.over_cap_calls.load(Ordering::Relaxed)
    }

    /// In a forked child, before anything else runs: forget the parent's shapes and files
    /// (the child records into its own, named by its own [`PROCESS`] name), without
    /// touching the inherited lock or state.
    ///
    /// # Safety
    /// Only in a fork child's handler, where no other thread exists.
    pub unsafe fn after_fork(&self) {
        // SAFETY: the caller guarantees we are alone.
        unsafe {
            self.set.reset();
            self.log.reset_in_child(Log::default());
        }
        IN_SLOW.with(|f| f.set(false));
        self.io_warned.store(false, Ordering::Relaxed);
        self.over_cap_calls.store(0, Ordering::Relaxed);
        self.flushed_calls.store(0, Ordering::Relaxed);
    }

    /// The one warning about miss files that cannot be written.
    fn warn_io(&self, e: &io::Error) {
        if !self.io_warned.swap(true, Ordering::Relaxed) {
            info!(
                "{}cannot write the miss log in {}: {e}; serving continues, shapes are kept in memory, written when the folder is writable again and counted at exit",
                self.what,
                self.folder.path().display()
            );
        }
    }

    /// The name of one of this backend's files: `<process><tag>-rank<device><suffix>`.
    fn file_name(&self, device: i32, suffix: std::fmt::Arguments) -> io::Result<files::Name> {
        let Some(parts) = PROCESS.get() else {
            return Err(io::Error::other("no process name"));
        };
        files::name(parts, format_args!("{}-rank{device}{suffix}", self.tag))
    }

    /// Rewrites the counts sidecar of every device with shapes in `set`, from the lines
    /// kept at first sight. Allocates nothing and needs no lock: each writer has its own
    /// temporary (`.counts.tmp.<tid>`) and the rename is atomic.
    fn write_counts_files(&self) -> io::Result<()> {
        let set = &self.set;
        let mut device = i64::MIN;
        // Each device with shapes, in order, found by walking the set once per device:
        // nothing but the walk's position is kept (little stack, no allocation).
        while let Some(d) = next_device(set, device) {
            device = i64::from(d);
            let path = self.file_name(d, format_args!(".counts.csv"))?;
            let tmp = self.file_name(d, format_args!(".counts.tmp.{}", files::tid()))?;
            files::replace(&self.folder, &path, &tmp, |out| {
                let mut result = out.write_all(b"op_name,param_signature,calls\n");
                set.for_each(|sd, _, calls, text| {
                    if let (true, Some(text), Ok(())) = (sd == d, text, &result) {
                        result = writeln!(out, "{text},{calls}");
                    }
                });
                result
            })?;
        }
        Ok(())
    }
}

/// The smallest device above `after` with a shape whose line is known, if any.
fn next_device<K: Copy + Eq + std::hash::Hash>(set: &MissSet<K>, after: i64) -> Option<i32> {
    let mut next: Option<i32> = None;
    set.for_each(|d, _, _, text| {
        if text.is_some() && i64::from(d) > after && next.is_none_or(|n| d < n) {
            next = Some(d);
        }
    });
    next
}

/// The process's one recorder of a backend, kept in `cell`: made by `make` the first time,
/// the same one after (a runtime started again for another build keeps recording into
/// the same files).
pub fn shared<K: Copy + Eq + std::hash::Hash + 'static>(
    cell: &std::sync::atomic::AtomicPtr<Recorder<K>>,
    make: impl FnOnce() -> Recorder<K>,
) -> &'static Recorder<K> {
    // SAFETY: a non-null pointer is a leaked Box, never freed.
    if let Some(r) = unsafe { cell.load(Ordering::Acquire).as_ref() } {
        return r;
    }
    let r: &'static Recorder<K> = Box::leak(Box::new(make()));
    cell.store(r as *const _ as *mut _, Ordering::Release);
    r
}

/// First sights that could not be written (full disk, unwritable folder) and wait for the
/// next write that works; beyond this many they are only in memory (and in the counts).
const PENDING_MAX: usize = 1 << 14;

/// The miss logs of one backend that this process made, and first sights waiting to be
/// written.
#[derive(Default)]
struct Log {
    /// (device, the log file made for it).
    made: Vec<(i32, Made)>,
    /// (device, line with its newline) of first sights whose write failed, oldest first.
    pending: Vec<(i32, String)>,
}

impl Log {
    /// One line into `device`'s log, the file this process made for it.
    fn write<K: Copy + Eq + std::hash::Hash>(
        &mut self,
        rec: &Recorder<K>,
        device: i32,
        line: &str,
    ) -> io::Result<()> {
        let name = rec.file_name(device, format_args!(".csv"))?;
        let i = match self.made.iter().position(|(d, _)| *d == device) {
            Some(i) => i,
            None => {
                self.made.push((device, Made::default()));
                self.made.len() - 1
            }
        };
        files::append(&rec.folder, &name, &mut self.made[i].1, line.as_bytes())
    }

    /// Appends the first sight of a key (`text` is its `op,sig`): one line, one `write(2)`
    /// (after any earlier lines of that device whose write failed). On failure the line
    /// is kept for the next attempt.
    fn append<K: Copy + Eq + std::hash::Hash>(
        &mut self,
        rec: &Recorder<K>,
        device: i32,
        text: &str,
    ) -> io::Result<()> {
        let line = format!("{text}\n");
        if self.pending.iter().any(|(d, _)| *d == device) {
            self.pending.push((device, line));
            return self.flush_pending(rec);
        }
        match self.write(rec, device, &line) {
            Ok(()) => Ok(()),
            Err(e) => {
                if self.pending.len() < PENDING_MAX {
                    self.pending.push((device, line));
                }
                Err(e)
            }
        }
    }

    /// Tries once more to write every first sight whose write failed, oldest first, one
    /// `write(2)` a line; stops at the first failure.
    fn flush_pending<K: Copy + Eq + std::hash::Hash>(
        &mut self,
        rec: &Recorder<K>,
    ) -> io::Result<()> {
        while !self.pending.is_empty() {
            let (device, line) = self.pending.remove(0);
            if let Err(e) = self.write(rec, device, &line) {
                self.pending.insert(0, (device, line));
                return Err(e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A rewrite is due once a second while rewrites are cheap, and only after PACE times
    /// its cost once they are not (a fifth of a second per rewrite: every 10 s).
    #[test]
    fn periodic_rewrites_are_paced_by_their_cost() {
        let s = 1_000_000_000;
        assert!(!paced(s / 2, 0, 1_000, s), "within the second");
        assert!(paced(s, 0, 1_000, s), "a cheap rewrite: once a second");
        let slow = s / 5;
        assert!(
            !paced(5 * s, 0, slow, s),
            "a slow one is not due a second later"
        );
        assert!(!paced(PACE * slow - 1, 0, slow, s));
        assert!(
            paced(PACE * slow, 0, slow, s),
            "due after PACE times its cost"
        );
        assert!(
            !paced(u64::MAX - 1, 0, u64::MAX, s),
            "a cost past u64 saturates, no overflow"
        );
    }

    fn fmt_pair(k: &(u32, u32)) -> (String, String) {
        ("Lt".into(), format!("{}x{}", k.0, k.1))
    }

    #[test]
    fn files_get_one_line_per_first_sight_and_counts_from_the_kept_lines() {
        let dir = std::env::temp_dir().join(format!("tunedblas-rec-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let rec = Recorder::new(dir.clone(), Trust::Private, fmt_pair, "-t", "");
        for k in [(5, 1), (5, 1), (6, 1), (5, 1)] {
            rec.record(2, &k, k.0 as u64 * 31, || true);
        }
        rec.flush(Duration::ZERO);
        let names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let log = names
            .iter()
            .find(|n| n.ends_with("-t-rank2.csv"))
            .expect("log");
        assert_eq!(
            fs::read_to_string(dir.join(log)).unwrap(),
            "Lt,5x1\nLt,6x1\n"
        );
        let counts = names
            .iter()
            .find(|n| n.ends_with("-t-rank2.counts.csv"))
            .expect("counts");
        let text = fs::read_to_string(dir.join(counts)).unwrap();
        assert!(
            text.contains("Lt,5x1,3\n") && text.contains("Lt,6x1,1\n"),
            "{text}"
        );
        // host-pid-start: three dash-separated parts before the tag.
        let process = log.trim_end_matches("-t-rank2.csv");
        assert_eq!(process.rsplitn(3, '-').count(), 3, "{process}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_process_part_is_host_pid_start_and_a_random_part() {
        let p = PROCESS.get_or_make();
        let w = tunedblas_core::process::Writer::parse(&p.prefix).expect("reads back");
        assert_eq!(Some(w.start), tunedblas_core::process::start_ticks(None));
        assert!(w.start > 0);
        assert_eq!(w.pid, std::process::id());
        assert_eq!(w.host, p.host);
        let nonce = p.prefix.rsplit_once('.').unwrap().1;
        assert!(
            nonce.len() == 16 && nonce.bytes().all(|b| b.is_ascii_hexdigit()),
            "{}",
            p.prefix
        );
    }
}
