//! The one miss recorder, shared by every backend: the in-memory set of missed shapes and
//! the files under the miss folder.
//!
//! - A first sight is appended at once with one `write(2)` to
//!   `<host>-<pid>-<start><tag>-rank<device>.csv` in PyTorch's untuned-file form
//!   (`op_name,param_signature`), so even SIGKILL loses no shape. `<start>` tells two
//!   processes apart that share a host name and a pid (a restarted container's PID 1).
//! - Call counts go to the sidecar `...-rank<device>.counts.csv`
//!   (`op_name,param_signature,calls`), rewritten atomically (temporary + rename) at 1024,
//!   2048, ... calls of a shape, at least once a second while new shapes arrive, and at
//!   every way out of the process ([`crate::lifecycle`]).
//!
//! Nothing here can make a fork child or a signal handler wait forever: the files sit behind
//! an [`ExitLock`], which is never taken by the thread that already holds it (a GEMM or an
//! `_exit` from a signal handler that interrupted this thread) and is waited for only a
//! bounded time; a forked child replaces the files' state instead of unlocking an inherited
//! lock. The counts are written from each shape's line as it was formatted at first sight,
//! through a stack buffer and file system calls only: no allocation, so `_exit` from a
//! signal handler that interrupted `malloc` cannot deadlock on the allocator either.

use std::cell::{Cell, UnsafeCell};
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tunedblas_core::identity;
use tunedblas_core::misslog::{MissSet, Sight};

use crate::lifecycle::{self, ExitLock, NoCancel};
use crate::log::info;

/// First slot count of the miss set; it grows to [`MissSet::limit`] shapes.
pub const MISS_CAPACITY: usize = 1 << 14;

/// Formats a key as the two fields of an untuned-file line.
pub type KeyFormat<K> = fn(&K) -> (String, String);

/// How long a first sight waits for another thread's write to the same files.
const FIRST_SIGHT_WAIT: Duration = Duration::from_secs(2);

/// Counts are rewritten at least this often while new shapes arrive (a process that ends
/// with a raw `exit_group` or SIGKILL keeps counts this fresh).
const FLUSH_EVERY_NS: u64 = 1_000_000_000;

/// The misses of one backend in one process.
pub struct Recorder<K: 'static> {
    pub set: MissSet<K>,
    /// Where the files go and what they are called; replaced only in a fork child.
    names: ChildCell<Names>,
    format: KeyFormat<K>,
    /// The open miss logs and the first sights waiting to be written.
    log: ExitLock<Log>,
    /// "" for rocBLAS, "cuBLASLt " for cuBLASLt: the start of this backend's messages.
    what: &'static str,
    io_warned: AtomicBool,
    full_warned: AtomicBool,
    /// Calls of shapes that found the set full (said once, counted in the stats).
    over_cap_calls: AtomicU64,
    /// When counts were last written (monotonic ns).
    last_flush_ns: AtomicU64,
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

/// A value written once at construction and replaced only in a fork child's handler.
struct ChildCell<T>(UnsafeCell<T>);

// SAFETY: shared reads only, except `replace_in_child`, which runs with no other thread.
unsafe impl<T: Send> Sync for ChildCell<T> {}

impl<T> ChildCell<T> {
    fn get(&self) -> &T {
        // SAFETY: see the Sync impl.
        unsafe { &*self.0.get() }
    }
    /// # Safety
    /// Only in a fork child's handler. The old value is leaked, not dropped.
    unsafe fn replace_in_child(&self, v: T) {
        // SAFETY: see above.
        unsafe { std::ptr::write(self.0.get(), v) };
    }
}

impl<K: Copy + Eq + std::hash::Hash + 'static> Recorder<K> {
    pub fn new(dir: PathBuf, format: KeyFormat<K>, tag: &'static str, what: &'static str) -> Self {
        Recorder {
            set: MissSet::with_capacity(MISS_CAPACITY),
            names: ChildCell(UnsafeCell::new(Names {
                dir,
                prefix: process_prefix(),
                tag,
            })),
            format,
            log: ExitLock::new(Log::default()),
            what,
            io_warned: AtomicBool::new(false),
            full_warned: AtomicBool::new(false),
            over_cap_calls: AtomicU64::new(0),
            last_flush_ns: AtomicU64::new(lifecycle::monotonic_ns()),
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
            Sight::Repeat { .. } => self.write_counts(true),
            Sight::Refused => {}
            Sight::Full => {
                self.over_cap_calls.fetch_add(1, Ordering::Relaxed);
                if !self.full_warned.swap(true, Ordering::Relaxed) {
                    info!(
                        "{}more than {} distinct missed shapes in this process; further new shapes are counted as over-capacity calls but not recorded",
                        self.what,
                        self.set.limit()
                    );
                }
            }
        }
        IN_SLOW.with(|f| f.set(false));
    }

    fn first_sight(&self, device: i32, key: &K, noted: Option<(usize, u64)>) {
        let (op, sig) = (self.format)(key);
        let text = format!("{op},{sig}");
        if let Some(mut log) = self.log.lock_within(FIRST_SIGHT_WAIT) {
            let result = log.append(self.names.get(), device, &text);
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
        let due = now.saturating_sub(self.last_flush_ns.load(Ordering::Relaxed)) >= FLUSH_EVERY_NS;
        if self.untexted.swap(false, Ordering::Relaxed) || due {
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
        self.last_flush_ns
            .store(lifecycle::monotonic_ns(), Ordering::Relaxed);
        if let Err(e) = self.names.get().write_counts(&self.set) {
            self.warn_io(&e);
        }
    }

    /// At a way out of the process: writes what waits (first sights whose write failed)
    /// if the log is free within `wait` (never waiting for this thread itself: a signal
    /// handler's `_exit`), then the counts, allocating nothing.
    pub fn flush(&self, wait: Duration) {
        if self.set.is_empty() {
            return;
        }
        let _no_cancel = NoCancel::new();
        if !IN_SLOW.with(|f| f.get()) {
            if let Some(mut log) = self.log.lock_within(wait) {
                let result = log.flush_pending(self.names.get());
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
        &self.names.get().dir
    }

    /// Calls whose shape found no room in the set.
    pub fn over_cap_calls(&self) -> u64 {
        self.over_cap_calls.load(Ordering::Relaxed)
    }

    /// In a forked child, before anything else runs: forget the parent's shapes and files
    /// (the child records into its own), without touching the inherited lock or state.
    ///
    /// # Safety
    /// Only in a fork child's handler, where no other thread exists.
    pub unsafe fn after_fork(&self) {
        let names = self.names.get();
        let fresh = Names {
            dir: names.dir.clone(),
            prefix: process_prefix(),
            tag: names.tag,
        };
        // SAFETY: the caller guarantees we are alone.
        unsafe {
            self.set.reset();
            self.names.replace_in_child(fresh);
            self.log.reset_in_child(Log::default());
        }
        IN_SLOW.with(|f| f.set(false));
        self.io_warned.store(false, Ordering::Relaxed);
        self.over_cap_calls.store(0, Ordering::Relaxed);
    }

    /// The one warning about miss files that cannot be written.
    fn warn_io(&self, e: &io::Error) {
        if !self.io_warned.swap(true, Ordering::Relaxed) {
            info!(
                "{}cannot write the miss log: {e}; serving continues, shapes are kept in memory, written when the folder is writable again and counted at exit",
                self.what
            );
        }
    }
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

/// Devices whose counts one process writes (more are recorded but not counted to a file).
const MAX_DEVICES: usize = 64;

/// Where one backend's miss files go and what they are called.
struct Names {
    dir: PathBuf,
    /// `<host>-<pid>-<start>` ([`process_prefix`]).
    prefix: String,
    /// Inserted after the process part of file names (`-cublaslt`), so backends never share
    /// a file.
    tag: &'static str,
}

/// The open miss logs of one backend, and first sights waiting to be written.
#[derive(Default)]
struct Log {
    open: Vec<(i32, File)>,
    /// (device, line with its newline) of first sights whose write failed, oldest first.
    pending: Vec<(i32, String)>,
}

/// `<host>-<pid>-<start>`: the per-process part of the file names. `<start>` is the
/// process's start time in clock ticks since boot (`/proc/self/stat`), so a later process
/// with the same host name and pid (a restarted container's PID 1) never writes over this
/// one's files; where `/proc` cannot be read, nanoseconds of the real-time clock.
pub fn process_prefix() -> String {
    // The host and start time as `tunedblas status` and `misses --prune` read them back.
    let host = tunedblas_core::process::host_name();
    let started = tunedblas_core::process::start_ticks(None).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    format!("{host}-{}-{started}", std::process::id())
}

/// Creates the miss folder (and any missing parents) with mode 0700, then checks the
/// folder itself: a real directory, not a symlink, and either ours
/// ([`identity::private_dir`]'s check, shared with the hash cache) or a shared folder with
/// the sticky bit (like `/tmp`), where no one else can remove or replace our files.
pub fn checked_dir(dir: &Path) -> io::Result<()> {
    match identity::private_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() != io::ErrorKind::PermissionDenied => Err(e),
        Err(e) => {
            // Not made (an unwritable parent): that error. Made but not ours: a shared
            // sticky folder will do.
            let Ok(meta) = fs::symlink_metadata(dir) else {
                return Err(e);
            };
            if meta.file_type().is_dir() && meta.mode() & libc::S_ISVTX != 0 {
                return Ok(());
            }
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the miss folder is not a directory owned by this user (a symlink or someone else's folder); refusing to write there",
            ))
        }
    }
}

/// Opens a file of ours for writing without following a symlink or blocking on a FIFO
/// planted under its name, and refuses anything but a regular file of ours with one link
/// (a hard link planted in a shared folder would make us write into someone else's file).
pub fn open_own(path: &Path, opts: &mut OpenOptions) -> io::Result<File> {
    let f = opts
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if !meta.file_type().is_file() || meta.uid() != uid || meta.nlink() != 1 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a file under a miss-file name is not a regular file of ours with a single link; refusing to write it",
        ));
    }
    Ok(f)
}

/// Appends `bytes` with one `write(2)`. A short write (disk full, file size limit) is
/// rolled back, so the file never ends in half a line that a later append would glue onto.
fn append_whole(f: &mut File, bytes: &[u8]) -> io::Result<()> {
    let before = f.metadata()?.len();
    loop {
        match f.write(bytes) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(_) => {
                let _ = f.set_len(before);
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "short write to the miss log (disk full?)",
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A file name built on the stack: `dir/prefix tag -rank<d> suffix`, with no allocation.
pub(crate) struct StackPath {
    buf: [u8; 1024],
    len: usize,
}

impl StackPath {
    pub(crate) fn new() -> StackPath {
        StackPath {
            buf: [0; 1024],
            len: 0,
        }
    }
    pub(crate) fn path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.buf[..self.len]))
    }
}

impl io::Write for StackPath {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let room = self.buf.len() - self.len;
        if b.len() > room {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "path too long"));
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Buffered output to a file through a fixed stack buffer.
pub(crate) struct StackOut<'f> {
    file: &'f mut File,
    buf: [u8; 8192],
    len: usize,
}

impl<'f> StackOut<'f> {
    pub(crate) fn new(file: &'f mut File) -> StackOut<'f> {
        StackOut {
            file,
            buf: [0; 8192],
            len: 0,
        }
    }
}

impl io::Write for StackOut<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.len + b.len() > self.buf.len() {
            self.flush()?;
        }
        if b.len() > self.buf.len() {
            self.file.write_all(b)?;
        } else {
            self.buf[self.len..self.len + b.len()].copy_from_slice(b);
            self.len += b.len();
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        let n = std::mem::take(&mut self.len);
        self.file.write_all(&self.buf[..n])
    }
}

impl Names {
    fn name(&self, device: i32, suffix: &str) -> io::Result<StackPath> {
        let mut p = StackPath::new();
        p.write_all(self.dir.as_os_str().as_bytes())?;
        write!(p, "/{}{}-rank{device}{suffix}", self.prefix, self.tag)?;
        Ok(p)
    }

    /// Rewrites the counts sidecar of every device with shapes in `set`, from the lines
    /// kept at first sight. Allocates nothing (the names are built on the stack and the
    /// text goes out through a stack buffer) and needs no lock: each writer has its own
    /// temporary (`.counts.tmp.<pid>.<tid>`) and the rename is atomic.
    fn write_counts<K: Copy + Eq + std::hash::Hash>(&self, set: &MissSet<K>) -> io::Result<()> {
        let mut devices = [0i32; MAX_DEVICES];
        let mut n = 0;
        set.for_each(|d, _, _, text| {
            if text.is_some() && !devices[..n].contains(&d) && n < MAX_DEVICES {
                devices[n] = d;
                n += 1;
            }
        });
        if n == 0 {
            return Ok(());
        }
        checked_dir(&self.dir)?;
        for &device in &devices[..n] {
            let path = self.name(device, ".counts.csv")?;
            let mut tmp = self.name(device, ".counts.tmp.")?;
            // SAFETY: gettid has no preconditions.
            write!(tmp, "{}.{}", std::process::id(), unsafe { libc::gettid() })?;
            replace_via(&tmp, &path, |out| {
                let mut result = out.write_all(b"op_name,param_signature,calls\n");
                set.for_each(|d, _, calls, text| {
                    if let (true, Some(text), Ok(())) = (d == device, text, &result) {
                        result = writeln!(out, "{text},{calls}");
                    }
                });
                result
            })?;
        }
        Ok(())
    }
}

/// Writes `target` whole or not at all: `body` writes into the temporary `tmp` (created
/// exclusively and never through a link, [`open_own`]; one left by a process that died
/// mid-write under the same name is ours to replace), which is then renamed over `target`.
/// Allocates nothing (the text goes out through a stack buffer). The miss counts and the
/// live status files are written so.
pub(crate) fn replace_via(
    tmp: &StackPath,
    target: &StackPath,
    body: impl FnOnce(&mut StackOut<'_>) -> io::Result<()>,
) -> io::Result<()> {
    let create = || open_own(tmp.path(), OpenOptions::new().write(true).create_new(true));
    let mut f = match create() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(tmp.path())?;
            create()?
        }
        other => other?,
    };
    let written = {
        let mut out = StackOut::new(&mut f);
        body(&mut out).and_then(|()| out.flush())
    };
    drop(f);
    if let Err(e) = written.and_then(|()| fs::rename(tmp.path(), target.path())) {
        let _ = fs::remove_file(tmp.path());
        return Err(e);
    }
    Ok(())
}

impl Log {
    fn file(&mut self, names: &Names, device: i32) -> io::Result<&mut File> {
        if let Some(pos) = self.open.iter().position(|(d, _)| *d == device) {
            return Ok(&mut self.open[pos].1);
        }
        checked_dir(&names.dir)?;
        let f = open_own(
            names.name(device, ".csv")?.path(),
            OpenOptions::new().append(true).create(true),
        )?;
        self.open.push((device, f));
        Ok(&mut self.open.last_mut().expect("just pushed").1)
    }

    /// Appends the first sight of a key (`text` is its `op,sig`): one line, one `write(2)`
    /// (after any earlier lines of that device whose write failed). On failure the line
    /// is kept for the next attempt.
    fn append(&mut self, names: &Names, device: i32, text: &str) -> io::Result<()> {
        let line = format!("{text}\n");
        if self.pending.iter().any(|(d, _)| *d == device) {
            self.pending.push((device, line));
            return self.flush_pending(names);
        }
        match self
            .file(names, device)
            .and_then(|f| append_whole(f, line.as_bytes()))
        {
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
    fn flush_pending(&mut self, names: &Names) -> io::Result<()> {
        while !self.pending.is_empty() {
            let (device, line) = self.pending.remove(0);
            if let Err(e) = self
                .file(names, device)
                .and_then(|f| append_whole(f, line.as_bytes()))
            {
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

    fn fmt_pair(k: &(u32, u32)) -> (String, String) {
        ("Lt".into(), format!("{}x{}", k.0, k.1))
    }

    #[test]
    fn files_get_one_line_per_first_sight_and_counts_from_the_kept_lines() {
        let dir = std::env::temp_dir().join(format!("tunedblas-rec-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let rec = Recorder::new(dir.clone(), fmt_pair, "-t", "");
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
    fn the_start_field_is_this_process_start_time() {
        let p = process_prefix();
        let start: u64 = p.rsplit('-').next().unwrap().parse().unwrap();
        assert_eq!(Some(start), tunedblas_core::process::start_ticks(None));
        assert!(start > 0);
        let pid: u32 = p.rsplit('-').nth(1).unwrap().parse().unwrap();
        assert_eq!(pid, std::process::id());
    }
}
