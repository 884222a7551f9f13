//! One lifecycle for every backend: settings, lazy start-up, fork, every way out of the
//! process, and the locks and guards that keep all of it from blocking the host.
//!
//! A backend (rocBLAS in `rocblas/`, cuBLASLt in `cublaslt/`) keeps its runtime in a
//! [`Lazy`] and registers in [`BACKENDS`] what it does at fork and at exit; everything else
//! happens here, once, for all of them:
//!
//! - **Start-up** is lazy: nothing runs at load time (LD_PRELOAD reaches every child process,
//!   shells and compilers, and those stay inert). The first intercepted call of a backend
//!   moves its [`Lazy`] UNINIT -> INITIALIZING -> READY (or OFF); other threads wait for the
//!   outcome, a re-entrant call from the initialising thread (a signal handler's) passes
//!   through, a call on an alternate signal stack passes through without starting it (a
//!   start-up needs more stack than such a stack may have), and a child forked mid start-up
//!   passes through instead of waiting for a thread it does not have.
//!   The first backend to start registers the process hooks ([`started`]).
//! - **Fork**: no prepare handler (a fork never waits for us); the child's handler replaces
//!   each backend's miss state and counters, so the child records into its own files
//!   without touching a lock another thread held when the parent forked.
//! - **Ways out**: `exit` and `quick_exit` (registered handlers), `_exit` and `_Exit`
//!   (exports), `execve` and its non-variadic siblings (exports: counts are written before
//!   the image is replaced, and again later if exec fails), the end of the library's life
//!   (`.fini_array`: counts rewritten if GEMMs came from destructors that ran after the exit
//!   handler). A raw `exit_group` or SIGKILL keeps every first sight (written at once) and the
//!   counts of the last periodic flush. A `vfork` child (or a raw `clone`) sharing our
//!   memory never finishes the parent's run.
//! - **Never blocking**: the miss files sit behind an [`ExitLock`] (bounded waits, never
//!   re-entered by its holder); work that can reach a cancellation point runs under
//!   [`NoCancel`]; the exit path writes counts and the summary without allocating.

use std::cell::{Cell, UnsafeCell};
use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU8, Ordering};
use std::time::Duration;

use tunedblas_core::identity;
use tunedblas_core::profile;
use tunedblas_core::settings;

use crate::log::info;

// ---------------------------------------------------------------------------------------
// Settings.
// ---------------------------------------------------------------------------------------

/// The settings, read from the environment when a backend starts. `tunedblas env`
/// documents each variable.
#[derive(Clone)]
pub struct Config {
    pub disabled: bool,
    pub profile_dir: PathBuf,
    pub explicit: Option<String>,
    pub allow_mismatch: bool,
    /// Absolute: a later `chdir` of the host does not move it.
    pub miss_dir: PathBuf,
    /// How the miss folder is checked: one the user named may be a shared sticky folder;
    /// the default one, under the user's cache, must be private.
    pub miss_trust: crate::files::Trust,
    pub log_level: u8,
    /// Absolute, as `miss_dir`.
    pub stats_path: Option<PathBuf>,
    /// `TUNEDBLAS_NEAR`: serve a missed token count from the same layer's row at most this
    /// many tokens away (after validating it for the exact problem); 0 or `off`: never.
    pub near_window: i64,
    /// `TUNEDBLAS_STATUS_THREAD`: a thread of ours also writes the live status.
    pub status_thread: bool,
    /// `TUNEDBLAS_RELOAD` (on unless `0`): rows committed to the store while the process
    /// runs are served without a restart.
    pub reload: bool,
    /// `TUNEDBLAS_GROUP_READ`: our files readable by the group ([`crate::files::share_with_group`]).
    pub group_read: bool,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `path` made absolute against the current folder now, so that the host changing its
/// folder later does not send our files somewhere else.
fn absolute(path: PathBuf) -> PathBuf {
    if path.is_absolute() {
        return path;
    }
    std::env::current_dir().map_or(path.clone(), |cwd| cwd.join(path))
}

impl Config {
    /// The settings, and one sentence for each value or `TUNEDBLAS_*` name that is not
    /// what it was meant to be (read through `tunedblas_core::settings`, as `tunedblas env`).
    pub fn from_env() -> (Config, Vec<String>) {
        let names: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .collect();
        let (sw, said) = settings::Switches::read(
            env,
            names.iter().map(String::as_str),
            tunedblas_core::near::DEFAULT_WINDOW,
        );
        let cfg = Config {
            disabled: sw.disabled,
            profile_dir: absolute(
                settings::path_var("TUNEDBLAS_PROFILE_DIR").unwrap_or_else(default_profile_dir),
            ),
            explicit: env("TUNEDBLAS_PROFILE"),
            allow_mismatch: sw.allow_mismatch,
            miss_dir: absolute(settings::miss_dir()),
            miss_trust: if settings::path_var("TUNEDBLAS_MISS_DIR").is_some() {
                crate::files::Trust::OursOrSticky
            } else {
                crate::files::Trust::Private
            },
            log_level: sw.log_level,
            stats_path: settings::path_var("TUNEDBLAS_STATS").map(|p| absolute(per_process(p))),
            near_window: sw.near_window,
            status_thread: sw.status_thread,
            group_read: sw.group_read,
            reload: sw.reload,
        };
        if cfg.stats_path.is_some() {
            // For [`another_process_wrote`]: when this process began making GEMMs.
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            let _ = PROCESS_START_NS.compare_exchange(
                0,
                now.map_or(0, |d| d.as_nanos() as u64),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        (cfg, said)
    }

    /// Reads the settings for a backend that is starting; `None` when the preload must stay
    /// out of the way (`TUNEDBLAS_DISABLE`, or a set-uid/set-gid process, whose environment
    /// an untrusted user controls). What is wrong in the settings, and that the preload is
    /// disabled, is said once per process, however many backends start.
    pub fn for_start() -> Option<Config> {
        static SAID: AtomicBool = AtomicBool::new(false);
        if stands_aside() {
            return None;
        }
        let (cfg, problems) = Config::from_env();
        crate::files::share_with_group(cfg.group_read);
        crate::log::set_level(cfg.log_level);
        let first = !SAID.swap(true, Ordering::AcqRel);
        if first {
            for p in &problems {
                info!("{p}");
            }
            if env("PYTORCH_TUNABLEOP_ENABLED").is_some_and(|v| v == "1") && !cfg.disabled {
                info!(
                    "PyTorch TunableOp is on in this process (PYTORCH_TUNABLEOP_ENABLED=1): the calls it picks a solution for pass through untouched (its choice wins), the rest are served from the profile; unset it to serve the profile's rows alone"
                );
            }
        }
        if cfg.disabled {
            if first {
                info!("disabled by TUNEDBLAS_DISABLE: every call passes through untouched, nothing is recorded");
            }
            return None;
        }
        Some(cfg)
    }
}

/// The profiles installed beside this library: `<prefix>/share/tunedblas/profiles` for an
/// installed copy (`<prefix>/lib/libtunedblas.so`), or the source tree's `profiles/` for a
/// cargo build (`target/<profile>/libtunedblas.so`).
fn default_profile_dir() -> PathBuf {
    let own = identity::library_of_address(default_profile_dir as *const () as usize);
    match own.as_deref().and_then(Path::parent) {
        Some(lib_dir) => profile::store_beside(lib_dir),
        None => PathBuf::from("profiles"),
    }
}

// ---------------------------------------------------------------------------------------
// Lazy start-up.
// ---------------------------------------------------------------------------------------

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const READY: u8 = 2;
const OFF: u8 = 3;

thread_local! {
    /// The [`Lazy`] this thread is initialising (its address), 0 if none.
    static INITIALIZING_HERE: Cell<usize> = const { Cell::new(0) };
}

/// A backend's runtime, built on first use by the first caller; see the module docs.
pub struct Lazy<T: 'static> {
    state: AtomicU8,
    /// Leaked once built and never freed: callers keep `&'static` references.
    value: AtomicPtr<T>,
    /// The process in which start-up began: a child forked while another thread of its
    /// parent was starting up inherits INITIALIZING with no thread left to finish it.
    init_pid: AtomicU32,
    /// A caller saw this start-up not move for [`START_STALL_NS`] and gave up: later
    /// callers pass through at once until it ends (cleared when a start-up begins).
    waited_out: AtomicBool,
}

/// How long a call waits for another thread's start-up to move on before it passes
/// through untuned. A start-up that moves (hashing a 1 GB library cold takes a second or
/// two, reading a large profile as long; both tick `tunedblas_core::progress` as they go)
/// is waited for to the end, so the calls made meanwhile are served and recorded. One that
/// does not move for this long may be waiting for a lock the caller holds (the loader's,
/// when the call comes from a library constructor inside `dlopen` or a destructor inside
/// `dlclose` or `exit`): waiting on would hang both threads.
const START_STALL_NS: u64 = 1_000_000_000;

/// How a caller waits for another thread's start-up: a few yields (a start-up about to end
/// is seen at once), then real sleeps, doubling from [`Backoff::FIRST_SLEEP_NS`] to
/// [`Backoff::LONGEST_SLEEP_NS`]. A yield never lets a lower-priority thread run: a
/// `SCHED_FIFO` waiter on the starting thread's CPU spun until the kernel's real-time
/// throttling let the start-up creep on (both first GEMMs 5.0 s instead of 0.3 s, an
/// outside tester's finding). A sleep gives the CPU away; a pause of at most 1 ms costs a
/// waiter at most that much once the start-up ends, and the stall rule
/// ([`START_STALL_NS`]) is reckoned on the clock, not in rounds.
struct Backoff {
    rounds: u32,
}

impl Backoff {
    const YIELDS: u32 = 8;
    const FIRST_SLEEP_NS: u64 = 16_000;
    const LONGEST_SLEEP_NS: u64 = 1_000_000;

    fn new() -> Backoff {
        Backoff { rounds: 0 }
    }

    /// The next pause: `None` to yield, else a sleep of this many nanoseconds.
    fn next(&mut self) -> Option<u64> {
        let round = self.rounds;
        self.rounds = self.rounds.saturating_add(1);
        let slept = round.checked_sub(Self::YIELDS)?;
        let ns = Self::FIRST_SLEEP_NS.saturating_mul(1 << slept.min(16));
        Some(ns.min(Self::LONGEST_SLEEP_NS))
    }

    fn pause(&mut self) {
        match self.next() {
            None => std::thread::yield_now(),
            Some(ns) => {
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: ns as libc::c_long,
                };
                // SAFETY: a plain sleep; async-signal-safe (a signal handler may be waiting).
                unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
            }
        }
    }
}

impl<T: 'static> Lazy<T> {
    pub const fn new() -> Lazy<T> {
        Lazy {
            state: AtomicU8::new(UNINIT),
            value: AtomicPtr::new(std::ptr::null_mut()),
            init_pid: AtomicU32::new(0),
            waited_out: AtomicBool::new(false),
        }
    }

    /// The runtime, building it with `init` on first use. `None`: pass the call through.
    #[inline(always)]
    pub fn get(&'static self, init: fn() -> Option<T>) -> Option<&'static T> {
        if self.state.load(Ordering::Acquire) == READY {
            // SAFETY: READY is stored after the value, with Release.
            return unsafe { self.value.load(Ordering::Relaxed).as_ref() };
        }
        self.slow_get(init)
    }

    /// Whether the runtime is built and serving now (never starts it).
    #[inline]
    pub fn is_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == READY
    }

    /// Whether the runtime serves, starting it on first use: [`Lazy::get`] for a caller
    /// that only needs to know (one load and a compare once it is ready).
    #[inline(always)]
    pub fn serving(&'static self, init: fn() -> Option<T>) -> bool {
        self.state.load(Ordering::Acquire) == READY || self.slow_get(init).is_some()
    }

    /// Whether the runtime is not started yet: another thread is starting it up, or a call
    /// on an alternate signal stack put its start-up off. A call given `None` then passed
    /// through without waiting: counted as passed through.
    #[inline]
    pub fn starting(&self) -> bool {
        matches!(self.state.load(Ordering::Acquire), UNINIT | INITIALIZING)
    }

    #[cold]
    fn slow_get(&'static self, init: fn() -> Option<T>) -> Option<&'static T> {
        let _errno = KeepErrno::new();
        let me = self as *const Self as usize;
        // The start-up's progress last seen moving, and when.
        let mut watch: Option<(u64, u64)> = None;
        let mut backoff = Backoff::new();
        loop {
            match self.state.load(Ordering::Acquire) {
                READY => return self.peek(),
                OFF => return None,
                UNINIT => {
                    // A start-up (hashing, the profile, the miss folder) takes far more
                    // stack than an alternate signal stack may have (9 to 11 KiB overflowed,
                    // an outside tester's finding): a handler there does not start it; its
                    // call passes through and a later call outside the handler starts it.
                    if on_signal_stack() {
                        return None;
                    }
                    // Before the CAS, so a waiter never sees INITIALIZING with an older pid
                    // (every thread of one process stores the same value).
                    self.init_pid.store(std::process::id(), Ordering::Release);
                    if self
                        .state
                        .compare_exchange(UNINIT, INITIALIZING, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        continue;
                    }
                    self.waited_out.store(false, Ordering::Relaxed);
                    // Marked until the outcome is stored, `started` included: a signal
                    // handler on this thread must never wait for its own thread's start-up
                    // (it waited out the whole stall limit, an outside tester's finding).
                    // The mark of a start-up this one runs inside is put back after.
                    let outer = INITIALIZING_HERE.with(|f| f.replace(me));
                    let built = {
                        let _no_cancel = NoCancel::new();
                        std::panic::catch_unwind(init).ok().flatten()
                    };
                    let ready = if let Some(rt) = built {
                        self.value
                            .store(Box::into_raw(Box::new(rt)), Ordering::Release);
                        started();
                        true
                    } else {
                        false
                    };
                    self.state
                        .store(if ready { READY } else { OFF }, Ordering::Release);
                    INITIALIZING_HERE.with(|f| f.set(outer));
                    return if ready { self.peek() } else { None };
                }
                _ => {
                    if INITIALIZING_HERE.with(|f| f.get()) == me {
                        return None;
                    }
                    if std::process::id() != self.init_pid.load(Ordering::Acquire) {
                        // Forked mid start-up: the initialising thread does not exist here
                        // and may have held locks (the loader's) that nothing will release,
                        // so do not start again: this process passes its calls through.
                        let _ = self.state.compare_exchange(
                            INITIALIZING,
                            OFF,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                        return None;
                    }
                    // Another thread is starting up: wait while it moves on, not once it
                    // stops (see START_STALL_NS); once one caller gave up, the others do not
                    // wait either. (No line: a signal handler may be the caller.)
                    if self.waited_out.load(Ordering::Relaxed) {
                        return None;
                    }
                    let (now, moved) = (monotonic_ns(), tunedblas_core::progress::ticks());
                    match &mut watch {
                        Some((seen, since)) if *seen == moved => {
                            if now.saturating_sub(*since) >= START_STALL_NS {
                                self.waited_out.store(true, Ordering::Relaxed);
                                return None;
                            }
                        }
                        _ => watch = Some((moved, now)),
                    }
                    backoff.pause();
                }
            }
        }
    }

    /// The runtime if it was ever built, serving or not (for exit and fork).
    pub fn peek(&self) -> Option<&'static T> {
        // SAFETY: a non-null value is a leaked Box, never freed.
        unsafe { self.value.load(Ordering::Acquire).as_ref() }
    }

    /// Builds the runtime again on the next call (the library it was built for is gone).
    /// The old one stays allocated: a call in flight may still be using it.
    pub fn restart(&self) {
        let _ = self
            .state
            .compare_exchange(READY, UNINIT, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Stops serving for the rest of the process: later calls pass through untouched.
    /// True the first time.
    pub fn latch_off(&self) -> bool {
        self.state.swap(OFF, Ordering::AcqRel) != OFF
    }
}

// ---------------------------------------------------------------------------------------
// Locks and guards that never block a fork child or a signal handler.
// ---------------------------------------------------------------------------------------

/// Whether this thread runs on its alternate signal stack now (a handler installed with
/// `SA_ONSTACK`): a few KiB the host sized for its handler, not for our start-up.
fn on_signal_stack() -> bool {
    // SAFETY: a zeroed stack_t is a valid out-value; a null new stack only reads the current
    // one; sigaltstack is async-signal-safe.
    unsafe {
        let mut now: libc::stack_t = std::mem::zeroed();
        libc::sigaltstack(std::ptr::null(), &mut now) == 0 && now.ss_flags & libc::SS_ONSTACK != 0
    }
}

/// Monotonic nanoseconds (the vDSO clock: no system call, async-signal-safe).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: out-pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A lock for work off the hot path that a signal handler or an exiting process may need.
///
/// Unlike a mutex it never waits for its own holder: a thread that already holds it (a
/// signal handler interrupted this thread inside the critical section and now makes a
/// GEMM or calls `_exit`) is refused at once, and other threads wait at most the time they
/// ask for. A forked child does not unlock what it inherited: it replaces the value
/// ([`ExitLock::reset_in_child`]), since the holder may have left it half-changed.
pub struct ExitLock<T> {
    /// The holder's thread id, 0 when free.
    owner: AtomicI32,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, which exists for one owner at a time.
unsafe impl<T: Send> Sync for ExitLock<T> {}

pub struct ExitGuard<'a, T> {
    lock: &'a ExitLock<T>,
}

impl<T> ExitLock<T> {
    pub const fn new(value: T) -> ExitLock<T> {
        ExitLock {
            owner: AtomicI32::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// The lock, waiting for another holder at most `wait`; never for this thread.
    pub fn lock_within(&self, wait: Duration) -> Option<ExitGuard<'_, T>> {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let mut deadline = 0;
        loop {
            match self
                .owner
                .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(ExitGuard { lock: self }),
                Err(holder) if holder == me => return None,
                Err(_) => {
                    let now = monotonic_ns();
                    if deadline == 0 {
                        deadline = now + wait.as_nanos() as u64;
                    }
                    if now >= deadline {
                        return None;
                    }
                    let pause = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 50_000,
                    };
                    // SAFETY: a plain sleep; async-signal-safe.
                    unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
                }
            }
        }
    }

    /// In a forked child: the lock free, the value kept. Only for a value whose holders
    /// leave it whole at every step (a thread of the parent may have held the lock).
    ///
    /// # Safety
    /// Only in a fork child's handler, where no other thread exists.
    pub unsafe fn unlock_in_child(&self) {
        self.owner.store(0, Ordering::Release);
    }

    /// In a forked child: a fresh value, the lock free. The old value is leaked, not
    /// dropped (a thread of the parent may have been changing it).
    ///
    /// # Safety
    /// Only in a fork child's handler, where no other thread exists.
    pub unsafe fn reset_in_child(&self, value: T) {
        // SAFETY: see above; the old value is overwritten without being dropped.
        unsafe { std::ptr::write(self.value.get(), value) };
        self.owner.store(0, Ordering::Release);
    }
}

impl<T> std::ops::Deref for ExitGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard is the lock's only owner.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for ExitGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard is the lock's only owner.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for ExitGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.owner.store(0, Ordering::Release);
    }
}

/// The caller's `errno`, put back when dropped. Every slow path of ours that makes system
/// calls (start-up, a first sight, the status tick, a symbol lookup, a log line) runs
/// under one: a host that reads `errno` after a call that succeeded (or checks it around
/// our calls, as the footprint suite does) finds what it left there.
pub struct KeepErrno(c_int);

impl KeepErrno {
    #[inline]
    pub fn new() -> KeepErrno {
        // SAFETY: errno is this thread's.
        KeepErrno(unsafe { *libc::__errno_location() })
    }
}

impl Drop for KeepErrno {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

extern "C" {
    fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
}
const PTHREAD_CANCEL_DISABLE: c_int = 1;

/// Thread cancellation held off while our own work runs. Writing a file reaches
/// cancellation points (`write`, `open`); a cancellation acted on there would unwind
/// through frames that cannot unwind (an `extern "C"` boundary, `catch_unwind`) and abort
/// the host. With this guard the cancellation waits for the host's next cancellation point.
pub struct NoCancel(c_int);

impl NoCancel {
    pub fn new() -> NoCancel {
        let mut old = 0;
        // SAFETY: out-pointer to an int; the state values are glibc's.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
        NoCancel(old)
    }
}

impl Drop for NoCancel {
    fn drop(&mut self) {
        let mut old = 0;
        // SAFETY: restores the state saved in `new`.
        unsafe { pthread_setcancelstate(self.0, &mut old) };
    }
}

// ---------------------------------------------------------------------------------------
// The process: hooks registered once, fork, and every way out.
// ---------------------------------------------------------------------------------------

/// When a backend's `finish` runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Pass {
    /// The process is leaving (exit, `_exit`, exec): write everything, print the summary.
    Leaving,
    /// After the exit handlers (the library's destructor): rewrite what changed since,
    /// silently (GEMMs made by destructors that ran after the exit handler).
    Late,
}

/// What the lifecycle does for one backend.
pub struct Backend {
    /// Writes its counts, stats and (on [`Pass::Leaving`]) its summary. Must not wait for
    /// a lock longer than [`EXIT_WAIT`] nor for one this thread holds.
    pub finish: fn(Pass),
    /// In a fork child, before the child runs anything: forget the parent's misses.
    ///
    /// # Safety
    /// Called only from the fork child handler, with no other thread alive.
    pub after_fork: unsafe fn(),
}

/// Every backend, in the order they finish.
const BACKENDS: [&Backend; 3] = [
    &crate::rocblas::BACKEND,
    &crate::cublaslt::BACKEND,
    &crate::hipblaslt::BACKEND,
];

/// The longest an exit path waits for another thread's write to the miss files.
pub const EXIT_WAIT: Duration = Duration::from_millis(200);

static REGISTERED: AtomicBool = AtomicBool::new(false);
/// The process whose run this is: set when the first backend starts and in a fork child.
/// A `vfork` child (or a raw `clone`) shares our memory without running the fork handlers;
/// when it calls `_exit` or exec it must not finish the parent's run (that would mark the
/// parent finished and its counts would never be written at its real exit).
static OWNER_PID: AtomicU32 = AtomicU32::new(0);
/// The owner has been through [`Pass::Leaving`].
static FINISHED: AtomicBool = AtomicBool::new(false);
/// This process is a fork child of the one that started serving (its stats file is its
/// own, beside the parent's).
static FORKED: AtomicBool = AtomicBool::new(false);

/// Called when a backend has started: registers the process hooks, once.
fn started() {
    if REGISTERED.swap(true, Ordering::AcqRel) {
        return;
    }
    OWNER_PID.store(std::process::id(), Ordering::Release);
    // This library carries its own copy of std, so the hook covers only our own panics: one
    // short line instead of a backtrace in the host's log (each export already catches them).
    std::panic::set_hook(Box::new(|info| match info.location() {
        Some(l) => info!("internal panic at {}:{}", l.file(), l.line()),
        None => info!("internal panic"),
    }));
    extern "C" {
        fn at_quick_exit(f: extern "C" fn()) -> c_int;
    }
    // The exec family's real functions, found now: an exec from a signal handler then
    // looks nothing up (a symbol search is deep in stack and takes the loader's lock).
    let p = &crate::real::PROCESS;
    let _ = (p.execve(), p.execv(), p.execvp(), p.execvpe(), p.fexecve());
    // SAFETY: registering plain extern "C" functions with libc.
    unsafe {
        libc::atexit(at_exit);
        at_quick_exit(at_exit);
        libc::pthread_atfork(None, None, Some(fork_child));
    }
}

/// True in the process whose run this is (not a vfork child sharing its memory).
fn is_owner() -> bool {
    // SAFETY: getpid cannot fail (and is not cached by glibc, so a vfork child sees its own).
    (unsafe { libc::getpid() }) as u32 == OWNER_PID.load(Ordering::Acquire)
}

/// A fork child that made no call of its own (a worker, a shell-out): it prints nothing
/// and leaves no file.
fn silent_child() -> bool {
    FORKED.load(Ordering::Acquire) && !crate::stats::any()
}

/// The process is leaving now (exit handler, `_exit`, `_Exit`, exec): every backend
/// writes its counts, stats and summary, once.
pub fn leaving() {
    if !REGISTERED.load(Ordering::Acquire) || !is_owner() {
        return;
    }
    if FINISHED.swap(true, Ordering::AcqRel) {
        return;
    }
    if silent_child() {
        return;
    }
    for b in BACKENDS {
        let _ = std::panic::catch_unwind(|| (b.finish)(Pass::Leaving));
    }
    let _ = std::panic::catch_unwind(crate::status::finish);
}

/// An exec failed and the process goes on: its real exit writes everything again.
pub fn exec_failed() {
    if REGISTERED.load(Ordering::Acquire) && is_owner() {
        FINISHED.store(false, Ordering::Release);
        crate::status::exec_failed();
    }
}

extern "C" fn at_exit() {
    leaving();
}

/// Runs when the library is unloaded at the very end of `exit`, after every exit handler:
/// what destructors did after [`at_exit`] is written too.
extern "C" fn at_unload() {
    if REGISTERED.load(Ordering::Acquire)
        && is_owner()
        && FINISHED.load(Ordering::Acquire)
        && !silent_child()
    {
        for b in BACKENDS {
            let _ = std::panic::catch_unwind(|| (b.finish)(Pass::Late));
        }
        let _ = std::panic::catch_unwind(crate::status::finish);
    } else if !REGISTERED.load(Ordering::Acquire) {
        let _ = std::panic::catch_unwind(say_unseen);
    }
}

/// Whether this copy of the preload must stay out of the way whatever the settings say: a
/// set-uid or set-gid process (whose environment an untrusted user controls), or a second
/// copy of the library (the first serves).
fn stands_aside() -> bool {
    // SAFETY: getauxval has no preconditions.
    (unsafe { libc::getauxval(libc::AT_SECURE) } != 0) || crate::copies::aside()
}

/// A process whose calls never reached the interposer, though a library it serves is
/// loaded. When no loaded object links the library (the process opened it with its own
/// `dlopen`: Python ctypes on the library object, hip-python), its callers most likely look
/// its functions up in that handle, which no preload can see: said at exit at the default
/// level, with what to do. When something links it (`import torch` that makes no GEMM, a
/// program that never calls it) the process just made no call, and must see no change at
/// all: said at `TUNEDBLAS_LOG=debug` only.
fn say_unseen() {
    const LIBRARIES: [&str; 3] = ["librocblas.so", "libhipblaslt.so", "libcublasLt.so"];
    // As at a start: nothing from a set-uid process, a second copy or a disabled preload.
    if stands_aside() {
        return;
    }
    // Most processes that end here (a shell, a compiler under the server's environment)
    // never loaded a library we serve: looked at first, before the settings are read.
    let libs = crate::real::loaded_libraries(&LIBRARIES);
    let Some(lib) = libs.first() else { return };
    let (cfg, _) = Config::from_env();
    let level = cfg.log_level;
    if level < crate::log::INFO || cfg.disabled {
        return;
    }
    let opened_alone = !crate::real::needed_by_another(&LIBRARIES);
    if !opened_alone && level < crate::log::DEBUG {
        return;
    }
    crate::log::set_level(level);
    let why = if opened_alone {
        "the process opened it with its own dlopen and nothing links it, so its callers look its functions up in that handle (Python ctypes on the library object, hip-python), which bypasses every preload: call it through a module that links it, or look the functions up with RTLD_DEFAULT"
    } else {
        "something links it, so this process made no GEMM through it"
    };
    crate::log::info!(
        "{} is loaded but no call reached the interposer: {why} (README, \"What the interposer does\", Resolution)",
        lib.display()
    );
    if opened_alone {
        crate::files::share_with_group(cfg.group_read);
        crate::status::unseen(&cfg.miss_dir, cfg.miss_trust, lib);
    }
}

#[used]
#[link_section = ".fini_array"]
static AT_UNLOAD: extern "C" fn() = at_unload;

extern "C" fn fork_child() {
    // SAFETY: the fork child handler: only this thread exists.
    for b in BACKENDS {
        unsafe { (b.after_fork)() };
    }
    crate::stats::reset();
    // SAFETY: as above.
    unsafe {
        crate::files::PROCESS.remake_in_child();
        crate::status::after_fork();
    }
    OWNER_PID.store(std::process::id(), Ordering::Release);
    FINISHED.store(false, Ordering::Release);
    FORKED.store(true, Ordering::Release);
}

/// The process the interposer first asked [`in_fork_child`] in (0: not yet).
static FIRST_PID: AtomicU32 = AtomicU32::new(0);

/// True in a fork child (it has one thread, and locks the parent's other threads held at
/// the fork stay held): of the process that started serving, and also of one that forked
/// before any backend started (a handle, a descriptor, a symbol looked up before the first
/// GEMM: the fork handler is not registered yet then), told by the pid of the first call
/// here. Asked on slow paths only (a symbol lookup): it may make a `getpid` system call.
pub fn in_fork_child() -> bool {
    if FORKED.load(Ordering::Relaxed) {
        return true;
    }
    // SAFETY: getpid cannot fail.
    let me = (unsafe { libc::getpid() }) as u32;
    match FIRST_PID.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => false,
        Err(first) => first != me,
    }
}

/// Writes a stats file for this process, atomically (temporary + rename), never through a
/// symlink planted under either name, readable by the user only. `suffix` tells backends
/// apart; a fork child writes `<path><suffix>.<pid>` and leaves the parent's file alone.
/// A file that cannot be written (a full disk) is said once, and leaves no temporary.
///
/// A path that names a device, a FIFO or a socket (`/dev/null`, a named pipe), or a link to
/// one or to a descriptor (`/dev/stdout`, `/proc/self/fd/2`), is written through, appended,
/// by every process: renaming over it replaced `/dev/null` with a root-only regular file
/// for a whole container (an outside tester's finding). Nothing else is ever followed.
pub fn write_stats(path: &Path, suffix: &str, json: &serde_json::Value) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if let Err(e) = try_write_stats(path, suffix, json) {
        if !SAID.swap(true, Ordering::Relaxed) {
            info!("cannot write the stats file {}: {e}", path.display());
        }
    }
}

/// What is at a stats path now, and so how it is written.
#[derive(Debug, PartialEq, Eq)]
enum StatsTarget {
    /// Nothing, a regular file, or a symlink to neither a stream nor a descriptor (planted):
    /// a new file put in its place.
    Replace,
    /// A device, FIFO or socket, or a link to one or to a descriptor: written through.
    Stream,
}

fn stats_target(path: &Path) -> std::io::Result<StatsTarget> {
    use std::os::unix::fs::FileTypeExt;
    let stream = |t: std::fs::FileType| t.is_char_device() || t.is_fifo() || t.is_socket();
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(StatsTarget::Replace),
        other => other?,
    };
    let t = meta.file_type();
    if t.is_file() {
        return Ok(StatsTarget::Replace);
    }
    if stream(t) {
        return Ok(StatsTarget::Stream);
    }
    if t.is_symlink() {
        // Followed only where root or this user made it: a link someone else planted in a
        // shared folder is replaced, never followed (it could lead to `/dev/mem`, or to a
        // descriptor of the host's own files).
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid cannot fail.
        let own = meta.uid() == 0 || meta.uid() == unsafe { libc::geteuid() };
        let to = std::fs::read_link(path)?;
        let leads_to_stream = std::fs::metadata(path).is_ok_and(|m| stream(m.file_type()));
        return Ok(if own && (leads_to_stream || descriptor_link(&to)) {
            StatsTarget::Stream
        } else {
            StatsTarget::Replace
        });
    }
    Err(std::io::Error::other(
        "it is neither a file nor a device, FIFO or socket",
    ))
}

/// Whether a link's text names one of this process's descriptors: `/dev/stdout`,
/// `/dev/stderr`, `/dev/fd/N`, `/proc/{self,thread-self,<pid>}/fd/N` (and nothing else under
/// `/proc`, such as another process's root).
fn descriptor_link(to: &Path) -> bool {
    let Some(to) = to.to_str() else {
        return false;
    };
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if matches!(to, "/dev/stdout" | "/dev/stderr") {
        return true;
    }
    if let Some(n) = to.strip_prefix("/dev/fd/") {
        return number(n);
    }
    let Some(rest) = to.strip_prefix("/proc/") else {
        return false;
    };
    match rest.split_once("/fd/") {
        Some((who, n)) => (matches!(who, "self" | "thread-self") || number(who)) && number(n),
        None => false,
    }
}

/// `TUNEDBLAS_STATS` with `%p` in it names one file per process: `%p` becomes the pid (as
/// in `core_pattern`), for a server whose processes share the setting (vLLM spawns its
/// workers), where one file would hold only the last process to leave.
fn per_process(path: PathBuf) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = path.as_os_str().as_bytes();
    if !bytes.windows(2).any(|w| w == b"%p") {
        return path;
    }
    let pid = std::process::id().to_string();
    let mut out = Vec::with_capacity(bytes.len() + pid.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"%p") {
            out.extend_from_slice(pid.as_bytes());
            i += 2;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Before this process's stats replace the file at `target`: another process's, written
/// while this one ran (a server's processes sharing one `TUNEDBLAS_STATS`), is said once
/// (only the last to leave is kept; `%p` gives each its own); this very process's, written
/// before this image started, is its image before an `exec`, whose counters are kept
/// beside as `<target>.<pid>` (which `verify --stats` reads) rather than replaced: the
/// first image's misses vanished and verify said OK (an outside tester's finding).
fn another_process_wrote(target: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(target) else {
        return;
    };
    let started = PROCESS_START_NS.load(Ordering::Relaxed);
    let written = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    if !meta.is_file() || started == 0 {
        return;
    }
    let theirs = std::fs::read(target)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["pid"].as_u64());
    let me = u64::from(std::process::id());
    match theirs {
        Some(pid) if pid == me && written < started => {
            let mut aside = target.as_os_str().to_owned();
            aside.push(format!(".{me}"));
            // A link, then the name taken away: never over a file already there.
            if std::fs::hard_link(target, &aside).is_ok() {
                let _ = std::fs::remove_file(target);
            } else {
                info!(
                    "{} holds this process's counters from before its exec, and {} is taken: replaced",
                    target.display(),
                    Path::new(&aside).display()
                );
            }
        }
        Some(pid) if pid != me && written >= started => info!(
            "{} holds another process's counters (pid {pid}), written while this one ran: replaced, so only the last process to leave is kept; put %p in TUNEDBLAS_STATS for one file per process",
            target.display()
        ),
        _ => {}
    }
}

/// When this process's interposer started, in ns since the epoch (0: not known).
static PROCESS_START_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn try_write_stats(path: &Path, suffix: &str, json: &serde_json::Value) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    // The pid says whose counters a file holds (a second process of a run warns by it).
    let mut json = json.clone();
    if let Some(o) = json.as_object_mut() {
        o.insert("pid".into(), std::process::id().into());
    }
    let text = serde_json::to_vec_pretty(&json)?;
    if stats_target(Path::new(&name))? == StatsTarget::Stream {
        // Appended through, never created or truncated; a FIFO with no reader refuses at
        // once (O_NONBLOCK) rather than block the host.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&name)?;
        return crate::log::without_our_signals(|| f.write_all(&text));
    }
    if FORKED.load(Ordering::Acquire) {
        name.push(format!(".{}", std::process::id()));
    }
    let target = PathBuf::from(name);
    let mut tmp = target.clone().into_os_string();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&tmp)
    };
    let mut f = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&tmp)?;
            open()?
        }
        other => other?,
    };
    let written = crate::log::without_our_signals(|| f.write_all(&text));
    drop(f);
    if !FORKED.load(Ordering::Acquire) {
        another_process_wrote(&target);
    }
    // rename replaces whatever is at the target (a symlink included) without following it.
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &target)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's CPU time so far, in nanoseconds.
    fn thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: out-pointer to a timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    static SLOW: Lazy<u32> = Lazy::new();

    // The tests' start-ups end with nothing to serve (`None`): one that built a runtime
    // would register the process hooks (`started`), the panic hook among them, in the test
    // binary.

    /// `lazy` being started up by `init` on a thread of its own, once that start-up began.
    fn starting_in_a_thread(
        lazy: &'static Lazy<u32>,
        init: fn() -> Option<u32>,
    ) -> std::thread::JoinHandle<Option<u32>> {
        let starter = std::thread::spawn(move || lazy.get(init).copied());
        while lazy.state.load(Ordering::Acquire) != INITIALIZING {
            std::thread::yield_now();
        }
        starter
    }

    /// A start-up of 300 ms that moves on as it goes (as hashing a library does).
    fn slow_start() -> Option<u32> {
        for _ in 0..30 {
            std::thread::sleep(Duration::from_millis(10));
            tunedblas_core::progress::tick();
        }
        None
    }

    /// A caller waiting for another thread's start-up gives its CPU away: it sleeps, not only
    /// yields. A `SCHED_FIFO` waiter that only yielded never let the lower-priority starting
    /// thread run on their CPU (an outside tester: both first GEMMs 5.0 s instead of 0.3 s).
    /// The waiter here spends under a tenth of its wait on a CPU (yielding, it was on one
    /// most of the time wherever a CPU was free), and still waits to the start-up's end.
    #[test]
    fn a_caller_waiting_for_another_threads_start_up_sleeps() {
        let starter = starting_in_a_thread(&SLOW, slow_start);
        let waiter = std::thread::spawn(|| {
            let (cpu, wall) = (thread_cpu_ns(), monotonic_ns());
            let got = SLOW.get(slow_start).copied();
            let seen = SLOW.state.load(Ordering::Acquire);
            (got, seen, thread_cpu_ns() - cpu, monotonic_ns() - wall)
        });
        let (got, seen, cpu, wall) = waiter.join().unwrap();
        assert_eq!(starter.join().unwrap(), None);
        assert_eq!(
            (got, seen),
            (None, OFF),
            "the waiter waited for the outcome"
        );
        assert!(
            cpu * 10 < wall,
            "the waiter was on a CPU {cpu} ns of the {wall} ns it waited"
        );
    }

    /// `%p` in `TUNEDBLAS_STATS`: every one becomes the pid; a path without it is kept.
    #[test]
    fn percent_p_in_the_stats_path_is_this_process_s_pid_wherever_it_stands() {
        let pid = std::process::id();
        assert_eq!(
            per_process(PathBuf::from("/run/%p/stats-%p.json")),
            PathBuf::from(format!("/run/{pid}/stats-{pid}.json"))
        );
        assert_eq!(
            per_process(PathBuf::from("s.json")),
            PathBuf::from("s.json")
        );
        assert_eq!(per_process(PathBuf::from("100%")), PathBuf::from("100%"));
    }

    /// The waiter's pauses: a few yields, then sleeps that grow to 1 ms and stay there.
    #[test]
    fn the_backoff_yields_a_few_times_then_sleeps_up_to_a_millisecond() {
        let mut b = Backoff::new();
        let pauses: Vec<Option<u64>> = (0..64).map(|_| b.next()).collect();
        let yields = Backoff::YIELDS as usize;
        assert!(pauses[..yields].iter().all(Option::is_none), "{pauses:?}");
        let sleeps: Vec<u64> = pauses[yields..].iter().map(|p| p.unwrap()).collect();
        assert!(sleeps[0] > 0 && sleeps[0] < 100_000, "{sleeps:?}");
        assert!(sleeps.windows(2).all(|w| w[0] <= w[1]), "{sleeps:?}");
        assert_eq!(sleeps.last(), Some(&1_000_000), "{sleeps:?}");
        for _ in 0..100_000 {
            b.next();
        }
        assert_eq!(b.next(), Some(1_000_000), "no overflow in a long wait");
    }

    static STUCK: Lazy<u32> = Lazy::new();
    static LET_GO: AtomicBool = AtomicBool::new(false);

    /// A start-up that does not move until the test lets it go (at most 30 s).
    fn stuck_start() -> Option<u32> {
        let start = monotonic_ns();
        while !LET_GO.load(Ordering::Acquire) && monotonic_ns() - start < 30_000_000_000 {
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }

    /// The stall rule holds with the sleeping waiter: a start-up that has not moved for
    /// [`START_STALL_NS`] is left: the call passes through while it is still going, and so
    /// do later calls, at once, until it ends.
    #[test]
    fn a_waiter_leaves_a_start_up_that_does_not_move() {
        let starter = starting_in_a_thread(&STUCK, stuck_start);
        let call = || {
            let got = STUCK.get(stuck_start).copied();
            (got, STUCK.state.load(Ordering::Acquire))
        };
        let waiter = std::thread::spawn(call).join().unwrap();
        let later = std::thread::spawn(call).join().unwrap();
        LET_GO.store(true, Ordering::Release);
        assert_eq!(waiter, (None, INITIALIZING), "left after the stall limit");
        assert_eq!(
            later,
            (None, INITIALIZING),
            "later callers do not wait either"
        );
        assert_eq!(starter.join().unwrap(), None);
        assert_eq!(
            STUCK.state.load(Ordering::Acquire),
            OFF,
            "the start-up ended"
        );
    }

    /// Only the link texts that name this process's own descriptors are written through as
    /// descriptors; another process's files under `/proc` are not.
    #[test]
    fn descriptor_links_are_this_processs_own_descriptors_only() {
        for yes in [
            "/dev/stdout",
            "/dev/stderr",
            "/dev/fd/2",
            "/proc/self/fd/1",
            "/proc/thread-self/fd/12",
            "/proc/4242/fd/1",
        ] {
            assert!(descriptor_link(Path::new(yes)), "{yes}");
        }
        for no in [
            "/proc/1/root/etc/passwd",
            "/proc/self/root/etc/shadow",
            "/proc/self/fd/",
            "/proc/self/fd/1/x",
            "/proc/self/fdinfo/1",
            "/dev/fd/x",
            "/dev/mem",
            "stats.json",
        ] {
            assert!(!descriptor_link(Path::new(no)), "{no}");
        }
    }
}
