//! Live status: what this process's interposer has done so far, written beside its miss log
//! while it runs, for `tunedblas status` and for Prometheus (node-exporter's textfile
//! collector).
//!
//! Two files per process in the miss folder, named like its miss logs
//! ([`crate::files::PROCESS`]):
//! - `<process>.status.json`: per backend, the call counters (served, `Default`, near,
//!   missed, passed through, fallbacks), per rank (device) the missed calls and shapes, and
//!   the most-called missed shapes; `"final": true` once the process has left.
//! - `<process>.prom`: the same counters in Prometheus's text format
//!   (`tunedblas_calls_total{backend,outcome,host,pid,start}` and per rank
//!   `tunedblas_missed_shapes`, `tunedblas_missed_calls_total`), removed when the process
//!   leaves by a way the interposer sees (a killed process's file stays until
//!   `tunedblas status --prune`).
//!
//! When they are written, and what it costs:
//! - **By the threads that make GEMMs** ([`tick`]), never by a thread of our own (a host
//!   must not find one more thread: `unshare(CLONE_NEWUSER)` refuses a multi-threaded
//!   process, Python warns at every `fork`). Every 64th count of a thread's counter
//!   (`stats::bump`, one test and branch on a value it already holds) asks the clock; once a
//!   second one of those calls rewrites both files if a counter moved, and the miss counts
//!   ([`crate::recorder::Recorder::tick`]). The write runs with cancellation off, takes
//!   only this module's [`ExitLock`] (never waiting: a busy lock skips the write), and
//!   allocates nothing (names and text go through stack buffers, shape lines are the ones
//!   the miss set formatted at first sight). BENCHMARKS.md has its cost.
//! - **A fork child** writes its own files, from its own calls and at its way out; a child
//!   that made no call writes nothing at all.
//! - **Every way out** ([`crate::lifecycle`]): the final files, without allocating (a signal
//!   handler's `_exit`), waiting at most [`crate::lifecycle::EXIT_WAIT`] for another writer.
//!
//! Files are written atomically through [`crate::files`] (a temporary created exclusively,
//! never through a symlink or FIFO, 0600, then renamed, which replaces a symlink planted at
//! the name without following it), in the miss folder the recorder checks, with no
//! descriptor held between writes.

use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::time::Duration;

use tunedblas_core::cublaslt::LtKey;
use tunedblas_core::misslog::MissSet;

use crate::files::{self, Folder, Out, Parts, Trust, PROCESS};
use crate::lifecycle::{self, ExitLock, NoCancel};
use crate::log::debug;
use crate::recorder::Recorder;
use crate::stats::{total, Counter};
use crate::tally::Tally;

/// How often the files are rewritten while calls arrive.
const EVERY_NS: u64 = 1_000_000_000;
/// Missed shapes listed per backend, the most called first.
pub const TOP: usize = 10;
/// Version of the status file's layout (`"format"`).
pub const FORMAT: u32 = 1;

/// The miss folder, set when the first backend starts (a leaked box, never freed).
static FOLDER: AtomicPtr<Folder> = AtomicPtr::new(std::ptr::null_mut());
/// One writer at a time (a tick, an exit path).
static LOCK: ExitLock<()> = ExitLock::new(());
/// What the counters added up to at the last write, to skip writes when nothing moved.
static LAST_SUM: AtomicU64 = AtomicU64::new(u64::MAX);
/// When the last tick wrote (monotonic ns; 0: never).
static LAST_TICK_NS: AtomicU64 = AtomicU64::new(0);
/// How long the last tick's rewrite took (ns): the next waits [`crate::recorder::PACE`]
/// times as long, at least.
static TICK_COST_NS: AtomicU64 = AtomicU64::new(0);
/// The final files are written: nothing rewrites them but a later way out.
static FINAL: AtomicBool = AtomicBool::new(false);
static WARNED: AtomicBool = AtomicBool::new(false);

fn folder() -> Option<&'static Folder> {
    // SAFETY: a non-null pointer is a leaked Box, never freed.
    unsafe { FOLDER.load(Ordering::Acquire).as_ref() }
}

/// A backend has started serving: remember the miss folder (once per process) and this
/// process's name, and start the writer thread if the user asked for one
/// (`TUNEDBLAS_STATUS_THREAD=1`). Off every call's path.
pub fn start(dir: &Path, trust: Trust, thread: bool) {
    PROCESS.get_or_make();
    if thread {
        spawn_writer();
    }
    if folder().is_some() {
        return;
    }
    let Some(f) = Folder::new(dir, trust) else {
        return;
    };
    // Made now (a process whose calls are all served has no miss to make it): the writes
    // that follow only open it, allocating nothing.
    if let Err(e) = f.open_or_make() {
        debug!("cannot make the miss folder for the live status: {e}");
    }
    let fresh = Box::into_raw(Box::new(f));
    if FOLDER
        .compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // SAFETY: `fresh` was never shared.
        drop(unsafe { Box::from_raw(fresh) });
    }
}

/// A thread's counter reached a multiple of 64 (`stats::bump`): once a second, the files
/// and the miss counts are rewritten here, on this GEMM's thread. See the module docs.
#[cold]
#[inline(never)]
pub fn tick() {
    let now = lifecycle::monotonic_ns();
    let last = LAST_TICK_NS.load(Ordering::Relaxed);
    let cost = TICK_COST_NS.load(Ordering::Relaxed);
    if last != 0 && !crate::recorder::paced(now, last, cost, EVERY_NS) {
        return;
    }
    if folder().is_none()
        || FINAL.load(Ordering::Acquire)
        || LAST_TICK_NS
            .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let _errno = lifecycle::KeepErrno::new();
    // Writing files reaches cancellation points: a cancellation acted on inside
    // `catch_unwind` would abort the host (a thread cancelled inside its GEMM's tick).
    let _no_cancel = lifecycle::NoCancel::new();
    let _ = std::panic::catch_unwind(refresh);
    let took = lifecycle::monotonic_ns().saturating_sub(now);
    TICK_COST_NS.store(took, Ordering::Relaxed);
}

/// Rewrites what is live: the status files (if a counter moved), the miss counts (if
/// misses moved), and at `TUNEDBLAS_LOG=debug` the rows hit since the last look.
fn refresh() {
    write(false, Duration::ZERO);
    if let Some(r) = crate::rocblas::status_misses() {
        r.tick(total(Counter::Missed) + total(Counter::Near));
    }
    for v in lt_views().iter().flatten() {
        v.recorder.tick(v.counters[3]);
    }
    crate::rocblas::say_new_hits();
    crate::rocblas::reload_if_changed();
    crate::cublaslt::STATE.reload_if_changed();
    crate::hipblaslt::STATE.reload_if_changed();
}

/// The process whose writer thread runs (0: none).
static WRITER_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Pins this library in memory (a host that `dlopen`ed it may `dlclose` it; the writer
/// thread's code must stay mapped). False if it cannot be pinned.
fn pin_self() -> bool {
    // SAFETY: dladdr on one of our own functions; dlopen with RTLD_NOLOAD only takes a
    // reference to an object that is already loaded.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(pin_self as *const libc::c_void, &mut info) == 0 || info.dli_fname.is_null()
        {
            return false;
        }
        !libc::dlopen(
            info.dli_fname,
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
        .is_null()
    }
}

/// `TUNEDBLAS_STATUS_THREAD=1`: one thread of ours (once per process; never in a fork
/// child, where a thread of the parent may hold locks) rewrites the status once a second,
/// so a process whose calls stopped is seen exactly as it stands. It runs with every
/// signal blocked and cancellation off.
fn spawn_writer() {
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() } as u32;
    if lifecycle::in_fork_child() || WRITER_PID.swap(me, Ordering::AcqRel) == me || !pin_self() {
        return;
    }
    // The thread starts with every signal blocked (it inherits this thread's mask).
    // SAFETY: plain signal-mask calls on sets we own.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let spawned = std::thread::Builder::new()
        .name("tunedblas-stat".into())
        .stack_size(256 << 10)
        .spawn(|| {
            let _no_cancel = NoCancel::new();
            loop {
                std::thread::sleep(Duration::from_nanos(EVERY_NS));
                if !FINAL.load(Ordering::Acquire) {
                    let _ = std::panic::catch_unwind(refresh);
                }
            }
        });
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if let Err(e) = spawned {
        WRITER_PID.store(0, Ordering::Release);
        debug!("no live status thread ({e}); the threads making GEMMs write the status");
    }
}

/// At a way out of the process: the final files (the Prometheus one removed).
pub fn finish() {
    let _errno = lifecycle::KeepErrno::new();
    FINAL.store(true, Ordering::Release);
    write(true, lifecycle::EXIT_WAIT);
}

/// A process that opened a served library itself and whose calls never reached the
/// interposer ([`crate::lifecycle`]'s exit line says why): its one, final status names the
/// library and no backend, so `tunedblas status` shows it too. At a normal exit only
/// (allocates, through the settings and the folder).
pub fn unseen(dir: &Path, trust: Trust, lib: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let Some(folder) = Folder::new(dir, trust) else {
        return;
    };
    if folder.open_or_make().is_err() {
        return;
    }
    let parts = PROCESS.get_or_make();
    let result = replace(&folder, parts, ".status.json", |out| {
        status_head(out, parts, unix_ms(), true)?;
        out.write_all(b"],\"unseen\":\"")?;
        // The path as a JSON string: quotes, backslashes and control bytes escaped, and a
        // byte past ASCII as the character of its value (a path need not be UTF-8; the
        // file must stay valid JSON).
        for &b in lib.as_os_str().as_bytes() {
            match b {
                b'"' | b'\\' => write!(out, "\\{}", b as char)?,
                0..=0x1f | 0x80.. => write!(out, "\\u{b:04x}")?,
                _ => out.write_all(&[b])?,
            }
        }
        out.write_all(b"\"}\n")
    });
    if let Err(e) = result {
        debug!("cannot write the status of a process the interposer did not see: {e}");
    }
}

/// An exec failed and the process goes on.
pub fn exec_failed() {
    FINAL.store(false, Ordering::Release);
}

/// In a fork child: a free lock, its own account (its name is made anew by the lifecycle).
///
/// # Safety
/// Only in a fork child's handler, where no other thread exists.
pub unsafe fn after_fork() {
    // SAFETY: as above.
    unsafe { LOCK.reset_in_child(()) };
    LAST_SUM.store(u64::MAX, Ordering::Relaxed);
    LAST_TICK_NS.store(0, Ordering::Relaxed);
    WRITER_PID.store(0, Ordering::Relaxed);
    FINAL.store(false, Ordering::Release);
    WARNED.store(false, Ordering::Relaxed);
}

/// One backend's part of the status.
pub struct View<'a, K: 'static> {
    pub name: &'static str,
    /// served, default, near, missed, passed through, fallbacks, as the counters have them.
    pub counters: [u64; 6],
    pub misses: &'a MissSet<K>,
    pub recorder: &'static Recorder<K>,
    /// Whether a miss-set note says a shape is served near.
    pub near: fn(u64) -> bool,
}

impl<K: Copy + Eq + std::hash::Hash> View<'_, K> {
    /// What every view says of this backend (`tally.rs`).
    fn tally(&self) -> Tally {
        Tally::of(
            self.counters,
            self.misses,
            self.near,
            self.recorder.over_cap_calls(),
        )
    }
}

pub const OUTCOMES: [&str; 6] = [
    "served",
    "default",
    "near",
    "missed",
    "passed_through",
    "fallbacks",
];

pub fn rocblas_counters() -> [u64; 6] {
    [
        total(Counter::Served),
        total(Counter::Default),
        total(Counter::Near),
        total(Counter::Missed),
        total(Counter::PassedThrough),
        total(Counter::Fallbacks),
    ]
}

/// The Lt backends (one key type), in order: cuBLASLt, hipBLASLt; `None` for one that did
/// not start.
fn lt_views() -> [Option<View<'static, LtKey>>; 2] {
    let view = |name, rec: Option<&'static Recorder<LtKey>>, counters: fn() -> [u64; 6]| {
        rec.map(|r| View {
            name,
            counters: counters(),
            misses: &r.set,
            recorder: r,
            near: crate::tally::never_near,
        })
    };
    [
        view("cublaslt", crate::cublaslt::STATE.status_misses(), || {
            crate::cublaslt::SPEC.counters.status()
        }),
        view("hipblaslt", crate::hipblaslt::STATE.status_misses(), || {
            crate::hipblaslt::SPEC.counters.status()
        }),
    ]
}

/// Writes both files now if anything moved (`last`: always, as the final ones), taking
/// the lock within `wait` (never waiting for this thread itself). Allocates nothing.
fn write(last: bool, wait: Duration) {
    let (Some(folder), Some(parts)) = (folder(), PROCESS.get()) else {
        return;
    };
    let roc = crate::rocblas::status_misses().map(|r| View {
        name: "rocblas",
        counters: rocblas_counters(),
        misses: &r.set,
        recorder: r,
        near: crate::rocblas::near::served_near,
    });
    let lts = lt_views();
    let now_sum = lts
        .iter()
        .zip([3u64, 5])
        .fold(moved(roc.as_ref()), |sum, (v, weight)| {
            sum.wrapping_add(moved(v.as_ref()).wrapping_mul(weight))
        });
    if !last && now_sum == LAST_SUM.load(Ordering::Relaxed) {
        return;
    }
    let _no_cancel = NoCancel::new();
    let Some(_guard) = LOCK.lock_within(wait) else {
        return;
    };
    LAST_SUM.store(now_sum, Ordering::Relaxed);
    let result = write_files(folder, parts, last, roc.as_ref(), &lts);
    if let Err(e) = result {
        if !WARNED.swap(true, Ordering::Relaxed) {
            debug!("cannot write the live status: {e}");
        }
    }
}

/// A number that changes when a backend's counters or shapes do.
fn moved<K: Copy + Eq + std::hash::Hash>(v: Option<&View<'_, K>>) -> u64 {
    v.map_or(0, |v| {
        v.counters
            .iter()
            .sum::<u64>()
            .wrapping_add((v.misses.len() as u64).wrapping_mul(7919))
    })
}

/// `<process><suffix>` written atomically through `<process>.status.tmp.<tid>`.
fn replace(
    folder: &Folder,
    parts: &Parts,
    suffix: &str,
    body: impl FnOnce(&mut Out) -> io::Result<()>,
) -> io::Result<()> {
    let target = files::name(parts, format_args!("{suffix}"))?;
    let tmp = files::name(parts, format_args!(".status.tmp.{}", files::tid()))?;
    files::replace(folder, &target, &tmp, body)
}

fn unix_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: out-pointer to a timespec (the vDSO clock: no system call).
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// A status file's first fields, up to the opening of its `backends` list.
fn status_head(out: &mut Out, parts: &Parts, updated: u64, last: bool) -> io::Result<()> {
    let (host, pid, start) = (&parts.host, parts.pid, parts.start);
    write!(
        out,
        "{{\"format\":{FORMAT},\"host\":\"{host}\",\"pid\":{pid},\"start_ticks\":{start},\"updated_unix_ms\":{updated},\"final\":{last},\"backends\":["
    )
}

fn write_files<A: Copy + Eq + std::hash::Hash>(
    folder: &Folder,
    parts: &Parts,
    last: bool,
    roc: Option<&View<'_, A>>,
    lts: &[Option<View<'_, LtKey>>],
) -> io::Result<()> {
    let (host, pid, start) = (&parts.host, parts.pid, parts.start);
    let updated = unix_ms();
    replace(folder, parts, ".status.json", |out| {
        status_head(out, parts, updated, last)?;
        let mut first = true;
        if let Some(v) = roc {
            backend_json(out, v)?;
            first = false;
        }
        for v in lts.iter().flatten() {
            if !first {
                out.write_all(b",")?;
            }
            backend_json(out, v)?;
            first = false;
        }
        out.write_all(b"]}\n")
    })?;
    if last {
        // A process that has left exports nothing: its counters stay in the JSON.
        return files::remove(folder, &files::name(parts, format_args!(".prom"))?);
    }
    replace(folder, parts, ".prom", |out| {
        let labels = |out: &mut Out, backend: &str| {
            write!(
                out,
                "backend=\"{backend}\",host=\"{host}\",pid=\"{pid}\",start=\"{start}\""
            )
        };
        out.write_all(b"# HELP tunedblas_calls_total GEMM calls the tunedblas interposer intercepted, by outcome.\n# TYPE tunedblas_calls_total counter\n")?;
        let each = |out: &mut Out, name: &str, counters: &[u64; 6]| {
            for (outcome, n) in OUTCOMES.iter().zip(counters) {
                out.write_all(b"tunedblas_calls_total{")?;
                labels(out, name)?;
                writeln!(out, ",outcome=\"{outcome}\"}} {n}")?;
            }
            Ok::<(), io::Error>(())
        };
        if let Some(v) = roc {
            each(out, v.name, &v.tally().outcomes())?;
        }
        for v in lts.iter().flatten() {
            each(out, v.name, &v.tally().outcomes())?;
        }
        // Per rank, for each backend that ran: its missed shapes, then its missed calls.
        let per_rank = |out: &mut Out, metric: &str, shapes: bool| -> io::Result<()> {
            let mut line = |backend: &str, rank: i32, calls: u64, n: u64| {
                write!(out, "{metric}{{")?;
                labels(out, backend)?;
                writeln!(out, ",rank=\"{rank}\"}} {}", if shapes { n } else { calls })
            };
            if let Some(v) = roc {
                each_rank(v.misses, v.near, |r, c, n| line(v.name, r, c, n))?;
            }
            for v in lts.iter().flatten() {
                each_rank(v.misses, v.near, |r, c, n| line(v.name, r, c, n))?;
            }
            Ok(())
        };
        out.write_all(b"# HELP tunedblas_missed_shapes Distinct GEMM shapes with no profile row, per rank (device).\n# TYPE tunedblas_missed_shapes gauge\n")?;
        per_rank(out, "tunedblas_missed_shapes", true)?;
        out.write_all(b"# HELP tunedblas_missed_calls_total Calls of GEMM shapes with no profile row, per rank (device).\n# TYPE tunedblas_missed_calls_total counter\n")?;
        per_rank(out, "tunedblas_missed_calls_total", false)?;
        out.write_all(b"# HELP tunedblas_status_updated_seconds When this process's tunedblas status was written (Unix time).\n# TYPE tunedblas_status_updated_seconds gauge\n")?;
        out.write_all(b"tunedblas_status_updated_seconds{")?;
        writeln!(
            out,
            "host=\"{host}\",pid=\"{pid}\",start=\"{start}\"}} {}.{:03}",
            updated / 1000,
            updated % 1000
        )
    })
}

/// Whether a slot's calls are missed calls: not served near, nor by a `*` row.
fn missed(near: fn(u64) -> bool, note: u64) -> bool {
    !near(note) && !crate::tally::by_pattern(note)
}

/// Calls `f(rank, missed calls, missed shapes)` for each device with missed shapes in `set`
/// (not those served near, as `near` tells by a slot's note), in order: one walk of the set
/// per device, so nothing but the walk's position is kept (the exit paths run this on
/// whatever stack a signal handler has).
fn each_rank<K: Copy + Eq + std::hash::Hash>(
    set: &MissSet<K>,
    near: fn(u64) -> bool,
    mut f: impl FnMut(i32, u64, u64) -> io::Result<()>,
) -> io::Result<()> {
    let mut after = i64::MIN;
    loop {
        let mut next: Option<i32> = None;
        set.for_each_slot(|slot, d, _, _, _| {
            if i64::from(d) > after && next.is_none_or(|n| d < n) && missed(near, set.note(slot)) {
                next = Some(d);
            }
        });
        let Some(rank) = next else { return Ok(()) };
        let (mut calls, mut shapes) = (0, 0);
        set.for_each_slot(|slot, d, _, c, _| {
            if d == rank && missed(near, set.note(slot)) {
                calls += c;
                shapes += 1;
            }
        });
        f(rank, calls, shapes)?;
        after = i64::from(rank);
    }
}

/// One backend's object: counters, ranks, top missed shapes.
fn backend_json<K: Copy + Eq + std::hash::Hash>(out: &mut Out, v: &View<'_, K>) -> io::Result<()> {
    let t = v.tally();
    write!(out, "{{\"backend\":\"{}\",\"counters\":{{", v.name)?;
    for (i, (outcome, n)) in OUTCOMES.iter().zip(&t.outcomes()).enumerate() {
        let comma = if i == 0 { "" } else { "," };
        write!(out, "{comma}\"{outcome}\":{n}")?;
    }
    write!(
        out,
        "}},\"calls\":{},\"missed_shapes\":{},\"near_shapes\":{},\"hit_rate\":",
        t.calls(),
        t.missed_shapes,
        t.near_shapes
    )?;
    match t.hit_permille() {
        Some(p) => write!(out, "{}.{:03}", p / 1000, p % 1000)?,
        None => out.write_all(b"null")?,
    }
    out.write_all(b",\"ranks\":[")?;
    let mut first = true;
    each_rank(v.misses, v.near, |rank, calls, shapes| {
        let comma = if std::mem::take(&mut first) { "" } else { "," };
        write!(
            out,
            "{comma}{{\"rank\":{rank},\"missed_calls\":{calls},\"missed_shapes\":{shapes}}}"
        )
    })?;
    out.write_all(b"],\"top_missed\":[")?;
    // The most called shapes: (calls, device, text). A text is the line the miss set
    // formatted at first sight, leaked for the life of the process (never freed), so
    // keeping its address past the walk is sound.
    let mut top: [(u64, i32, *const u8, usize); TOP] = [(0, 0, std::ptr::null(), 0); TOP];
    let mut filled = 0;
    v.misses.for_each_slot(|slot, d, _, calls, text| {
        let Some(text) = text.filter(|_| missed(v.near, v.misses.note(slot))) else {
            return;
        };
        if filled < TOP {
            top[filled] = (calls, d, text.as_ptr(), text.len());
            filled += 1;
        } else if let Some(low) = top.iter_mut().min_by_key(|e| e.0) {
            if calls > low.0 {
                *low = (calls, d, text.as_ptr(), text.len());
            }
        }
    });
    top[..filled].sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
    for (i, &(calls, rank, ptr, len)) in top[..filled].iter().enumerate() {
        // SAFETY: see above: the text outlives the process's use of it.
        let text = unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(ptr, len)) };
        let comma = if i == 0 { "" } else { "," };
        write!(
            out,
            "{comma}{{\"rank\":{rank},\"calls\":{calls},\"shape\":\""
        )?;
        escaped(out, text)?;
        out.write_all(b"\"}")?;
    }
    out.write_all(b"]}")
}

/// `text` as the inside of a JSON string.
fn escaped(out: &mut Out, text: &str) -> io::Result<()> {
    for c in text.chars() {
        match c {
            '"' => out.write_all(b"\\\"")?,
            '\\' => out.write_all(b"\\\\")?,
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32)?,
            c => {
                let mut b = [0; 4];
                out.write_all(c.encode_utf8(&mut b).as_bytes())?;
            }
        }
    }
    Ok(())
}
