//! Live status: what this process's interposer has done so far, written beside its miss log
//! while it runs, for `tunedblas status` and for Prometheus (node-exporter's textfile
//! collector).
//!
//! Two files per process in the miss folder, named like its miss logs:
//! - `<host>-<pid>-<start>.status.json`: per backend, the call counters (served, `Default`,
//!   near, missed, passed through, fallbacks), per rank (device) the missed calls and
//!   shapes, and the most-called missed shapes; `"final": true` once the process has left.
//! - `<host>-<pid>-<start>.prom`: the same counters in Prometheus's text format
//!   (`tunedblas_calls_total{backend,outcome,host,pid,start}` and per rank
//!   `tunedblas_missed_shapes`, `tunedblas_missed_calls_total`), removed when the process
//!   leaves by a way the interposer sees (a killed process's file stays until
//!   `tunedblas status --prune`).
//!
//! When they are written, and why it costs the hot paths nothing:
//! - **A writer thread**, started once serving has started (off every call's path), wakes
//!   once a second and rewrites both files when a counter moved. It is the one way a
//!   process whose calls are all served (no miss path ever runs again) can be seen live
//!   without a check on every call. It runs with every signal blocked (a process-directed
//!   signal never lands on it), with cancellation off, holds no lock but this module's
//!   [`ExitLock`] while it writes, never allocates on the way (names and text go through
//!   stack buffers, shape lines are the ones the miss set formatted at first sight), and
//!   pins the library (`RTLD_NODELETE`) so a host that `dlopen`ed and `dlclose`s it cannot
//!   unmap its code. An exit kills it wherever it is: at worst a `.status.tmp.*` temporary
//!   of this pid is left, which the next write of that name replaces and `status` ignores.
//! - **A fork child** gets no thread (starting threads in the child of a multi-threaded
//!   process is where inherited locks bite, and a fork storm would pay for one each): its
//!   files are written at its way out. (Writing them from the recorder's count flush too
//!   made the repeated-miss path 3 instructions dearer, by changing how the compiler laid
//!   out the miss path around the call; BENCHMARKS.md.)
//! - **Every way out** ([`crate::lifecycle`]): the final files, without allocating (a signal
//!   handler's `_exit`), waiting at most [`crate::lifecycle::EXIT_WAIT`] for the writer.
//!
//! Files are written atomically (a temporary created exclusively, never through a symlink or
//! FIFO, 0600, then renamed, which replaces a symlink planted at the name without following
//! it), in the miss folder the recorder checks (a real directory of ours, or sticky).

use std::cell::UnsafeCell;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use tunedblas_core::cublaslt::LtKey;
use tunedblas_core::misslog::MissSet;

use crate::lifecycle::{self, ExitLock, NoCancel};
use crate::log::debug;
use crate::recorder::{checked_dir, process_prefix, replace_via, StackOut, StackPath};
use crate::stats::{total, Counter};

/// How often the writer thread looks at the counters.
const EVERY: Duration = Duration::from_secs(1);
/// Missed shapes listed per backend, the most called first.
pub const TOP: usize = 10;
/// Ranks listed per backend (more are summed in the counters only).
const MAX_RANKS: usize = 64;
/// Version of the status file's layout (`"format"`).
pub const FORMAT: u32 = 1;

/// Where the files go: the miss folder and this process's `<host>-<pid>-<start>`, kept in
/// fixed buffers (set once at start-up, replaced only in a fork child's handler).
struct Place {
    dir: [u8; 1024],
    dir_len: usize,
    prefix: [u8; 256],
    prefix_len: usize,
}

struct PlaceCell(UnsafeCell<Place>);
// SAFETY: written once before `PLACE_SET` is stored (Release) and read only after it is
// seen (Acquire); otherwise only in a fork child's handler, where no other thread exists.
unsafe impl Sync for PlaceCell {}

static PLACE: PlaceCell = PlaceCell(UnsafeCell::new(Place {
    dir: [0; 1024],
    dir_len: 0,
    prefix: [0; 256],
    prefix_len: 0,
}));
const UNSET: u8 = 0;
const SETTING: u8 = 1;
const SET: u8 = 2;
static PLACE_SET: AtomicU8 = AtomicU8::new(UNSET);
/// The process whose writer thread is running (0: none).
static WRITER_PID: AtomicU32 = AtomicU32::new(0);
/// One writer at a time (the thread, an exit path).
static LOCK: ExitLock<()> = ExitLock::new(());
/// What the counters added up to at the last write, to skip writes when nothing moved.
static LAST_SUM: AtomicU64 = AtomicU64::new(u64::MAX);
/// The final files are written: nothing rewrites them but a later way out.
static FINAL: AtomicBool = AtomicBool::new(false);
static WARNED: AtomicBool = AtomicBool::new(false);

fn place() -> Option<&'static Place> {
    // SAFETY: see `PlaceCell`.
    (PLACE_SET.load(Ordering::Acquire) == SET).then(|| unsafe { &*PLACE.0.get() })
}

fn fill(buf: &mut [u8], text: &[u8]) -> Option<usize> {
    (text.len() <= buf.len()).then(|| {
        buf[..text.len()].copy_from_slice(text);
        text.len()
    })
}

/// A backend has started serving: remember the miss folder and start the writer thread
/// (once per process). Off every call's path.
pub fn start(dir: &Path) {
    if PLACE_SET
        .compare_exchange(UNSET, SETTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    let prefix = process_prefix();
    // SAFETY: this thread won the CAS; nobody reads before SET is stored.
    let p = unsafe { &mut *PLACE.0.get() };
    let ok = match (
        fill(&mut p.dir, dir.as_os_str().as_bytes()),
        fill(&mut p.prefix, prefix.as_bytes()),
    ) {
        (Some(d), Some(n)) => {
            p.dir_len = d;
            p.prefix_len = n;
            true
        }
        _ => false,
    };
    if !ok {
        debug!("the miss folder's path is too long for the live status; none is written");
        return; // stays SETTING: never set
    }
    PLACE_SET.store(SET, Ordering::Release);
    spawn_writer();
}

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

fn spawn_writer() {
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() } as u32;
    if WRITER_PID.swap(me, Ordering::AcqRel) == me || !pin_self() {
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
        .spawn(writer);
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if let Err(e) = spawned {
        WRITER_PID.store(0, Ordering::Release);
        debug!("no live status thread ({e}); the status is written when counts are flushed and at exit");
    }
}

fn writer() {
    let _no_cancel = NoCancel::new();
    loop {
        std::thread::sleep(EVERY);
        if FINAL.load(Ordering::Acquire) {
            continue;
        }
        write(false, Duration::ZERO);
        crate::rocblas::say_new_hits();
    }
}

/// At a way out of the process: the final files (the Prometheus one removed).
pub fn finish() {
    FINAL.store(true, Ordering::Release);
    write(true, lifecycle::EXIT_WAIT);
}

/// An exec failed and the process goes on.
pub fn exec_failed() {
    FINAL.store(false, Ordering::Release);
}

/// In a fork child: its own names, no writer thread, a free lock.
///
/// # Safety
/// Only in a fork child's handler, where no other thread exists.
pub unsafe fn after_fork() {
    if PLACE_SET.load(Ordering::Acquire) == SET {
        let prefix = process_prefix();
        // SAFETY: alone in the child.
        let p = unsafe { &mut *PLACE.0.get() };
        match fill(&mut p.prefix, prefix.as_bytes()) {
            Some(n) => p.prefix_len = n,
            None => PLACE_SET.store(SETTING, Ordering::Release),
        }
    }
    // SAFETY: as above.
    unsafe { LOCK.reset_in_child(()) };
    WRITER_PID.store(0, Ordering::Release);
    LAST_SUM.store(u64::MAX, Ordering::Relaxed);
    FINAL.store(false, Ordering::Release);
    WARNED.store(false, Ordering::Relaxed);
}

/// One backend's part of the status.
pub struct View<'a, K> {
    pub name: &'static str,
    /// served, default, near, missed, passed through, fallbacks.
    pub counters: [u64; 6],
    pub misses: &'a MissSet<K>,
}

pub const OUTCOMES: [&str; 6] = [
    "served",
    "default",
    "near",
    "missed",
    "passed_through",
    "fallbacks",
];

fn rocblas_counters() -> [u64; 6] {
    [
        total(Counter::Served),
        total(Counter::Default),
        total(Counter::Near),
        total(Counter::Missed),
        total(Counter::PassedThrough),
        total(Counter::Fallbacks),
    ]
}

/// Writes both files now if anything moved (`last`: always, as the final ones), taking
/// the lock within `wait` (never waiting for this thread itself). Allocates nothing.
fn write(last: bool, wait: Duration) {
    let Some(place) = place() else { return };
    let roc = crate::rocblas::status_misses().map(|m| View {
        name: "rocblas",
        counters: rocblas_counters(),
        misses: m,
    });
    // The Lt backends (one key type): cuBLASLt, hipBLASLt.
    let lts = [
        crate::cublaslt::status_misses().map(|m| View {
            name: "cublaslt",
            counters: crate::cublaslt::SPEC.counters.status(),
            misses: m,
        }),
        crate::hipblaslt::status_misses().map(|m| View {
            name: "hipblaslt",
            counters: crate::hipblaslt::SPEC.counters.status(),
            misses: m,
        }),
    ];
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
    let result = write_files(place, last, roc.as_ref(), &lts);
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

fn name(place: &Place, suffix: &str) -> io::Result<StackPath> {
    let mut p = StackPath::new();
    p.write_all(&place.dir[..place.dir_len])?;
    p.write_all(b"/")?;
    p.write_all(&place.prefix[..place.prefix_len])?;
    p.write_all(suffix.as_bytes())?;
    Ok(p)
}

/// `<prefix><suffix>` written atomically through `.status.tmp.<tid>`.
fn replace(
    place: &Place,
    suffix: &str,
    body: impl FnOnce(&mut StackOut<'_>) -> io::Result<()>,
) -> io::Result<()> {
    let target = name(place, suffix)?;
    let mut tmp = name(place, ".status.tmp.")?;
    // SAFETY: gettid has no preconditions.
    write!(tmp, "{}", unsafe { libc::gettid() })?;
    replace_via(&tmp, &target, body)
}

/// (host, pid, start) of `<host>-<pid>-<start>` (the host part never holds a `-`).
fn parts(prefix: &str) -> (&str, &str, &str) {
    let mut it = prefix.rsplitn(3, '-');
    let start = it.next().unwrap_or("0");
    let pid = it.next().unwrap_or("0");
    let host = it.next().unwrap_or("host");
    (host, pid, start)
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

fn write_files<A: Copy + Eq + std::hash::Hash>(
    place: &Place,
    last: bool,
    roc: Option<&View<'_, A>>,
    lts: &[Option<View<'_, LtKey>>],
) -> io::Result<()> {
    let dir = Path::new(OsStr::from_bytes(&place.dir[..place.dir_len]));
    checked_dir(dir)?;
    let prefix = std::str::from_utf8(&place.prefix[..place.prefix_len]).unwrap_or("host-0-0");
    let (host, pid, start) = parts(prefix);
    let updated = unix_ms();
    replace(place, ".status.json", |out| {
        write!(
            out,
            "{{\"format\":{FORMAT},\"host\":\"{host}\",\"pid\":{pid},\"start_ticks\":{start},\"updated_unix_ms\":{updated},\"final\":{last},\"backends\":["
        )?;
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
        let prom = name(place, ".prom")?;
        match fs::remove_file(prom.path()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        return Ok(());
    }
    replace(place, ".prom", |out| {
        let labels = |out: &mut StackOut<'_>, backend: &str| {
            write!(
                out,
                "backend=\"{backend}\",host=\"{host}\",pid=\"{pid}\",start=\"{start}\""
            )
        };
        out.write_all(b"# HELP tunedblas_calls_total GEMM calls the tunedblas interposer intercepted, by outcome.\n# TYPE tunedblas_calls_total counter\n")?;
        let each = |out: &mut StackOut<'_>, name: &str, counters: &[u64; 6]| {
            for (outcome, n) in OUTCOMES.iter().zip(counters) {
                out.write_all(b"tunedblas_calls_total{")?;
                labels(out, name)?;
                writeln!(out, ",outcome=\"{outcome}\"}} {n}")?;
            }
            Ok::<(), io::Error>(())
        };
        if let Some(v) = roc {
            each(out, v.name, &v.counters)?;
        }
        for v in lts.iter().flatten() {
            each(out, v.name, &v.counters)?;
        }
        out.write_all(b"# HELP tunedblas_missed_shapes Distinct GEMM shapes with no profile row, per rank (device).\n# TYPE tunedblas_missed_shapes gauge\n")?;
        // (backend, its ranks) of each backend that ran: at most three, on the stack.
        let mut all: [Option<(&str, Ranks)>; 3] = [None, None, None];
        all[0] = roc.map(|v| (v.name, ranks(v.misses)));
        for (slot, v) in all[1..].iter_mut().zip(lts) {
            *slot = v.as_ref().map(|v| (v.name, ranks(v.misses)));
        }
        for (backend, (r, n)) in all.iter().flatten() {
            for &(rank, _, shapes) in &r[..*n] {
                out.write_all(b"tunedblas_missed_shapes{")?;
                labels(out, backend)?;
                writeln!(out, ",rank=\"{rank}\"}} {shapes}")?;
            }
        }
        out.write_all(b"# HELP tunedblas_missed_calls_total Calls of GEMM shapes with no profile row, per rank (device).\n# TYPE tunedblas_missed_calls_total counter\n")?;
        for (backend, (r, n)) in all.iter().flatten() {
            for &(rank, calls, _) in &r[..*n] {
                out.write_all(b"tunedblas_missed_calls_total{")?;
                labels(out, backend)?;
                writeln!(out, ",rank=\"{rank}\"}} {calls}")?;
            }
        }
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

/// (rank, missed calls, missed shapes) per device, and how many.
type Ranks = ([(i32, u64, u64); MAX_RANKS], usize);

fn ranks<K: Copy + Eq + std::hash::Hash>(set: &MissSet<K>) -> Ranks {
    let mut r = [(0i32, 0u64, 0u64); MAX_RANKS];
    let mut n = 0;
    set.for_each(|d, _, calls, _| {
        if let Some(e) = r[..n].iter_mut().find(|e| e.0 == d) {
            e.1 += calls;
            e.2 += 1;
        } else if n < MAX_RANKS {
            r[n] = (d, calls, 1);
            n += 1;
        }
    });
    r[..n].sort_unstable_by_key(|e| e.0);
    (r, n)
}

/// One backend's object: counters, ranks, top missed shapes.
fn backend_json<K: Copy + Eq + std::hash::Hash>(
    out: &mut StackOut<'_>,
    v: &View<'_, K>,
) -> io::Result<()> {
    write!(out, "{{\"backend\":\"{}\",\"counters\":{{", v.name)?;
    for (i, (outcome, n)) in OUTCOMES.iter().zip(&v.counters).enumerate() {
        let comma = if i == 0 { "" } else { "," };
        write!(out, "{comma}\"{outcome}\":{n}")?;
    }
    let (r, n) = ranks(v.misses);
    let shapes: u64 = r[..n].iter().map(|e| e.2).sum();
    write!(out, "}},\"missed_shapes\":{shapes},\"ranks\":[")?;
    for (i, &(rank, calls, shapes)) in r[..n].iter().enumerate() {
        let comma = if i == 0 { "" } else { "," };
        write!(
            out,
            "{comma}{{\"rank\":{rank},\"missed_calls\":{calls},\"missed_shapes\":{shapes}}}"
        )?;
    }
    out.write_all(b"],\"top_missed\":[")?;
    // The most called shapes: (calls, device, text). A text is the line the miss set
    // formatted at first sight, leaked for the life of the process (never freed), so
    // keeping its address past the walk is sound.
    let mut top: [(u64, i32, *const u8, usize); TOP] = [(0, 0, std::ptr::null(), 0); TOP];
    let mut filled = 0;
    v.misses.for_each(|d, _, calls, text| {
        let Some(text) = text else { return };
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
fn escaped(out: &mut StackOut<'_>, text: &str) -> io::Result<()> {
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
