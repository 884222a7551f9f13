//! Lazy start-up, the served profile, miss recording, and the end of the process.
//!
//! Nothing runs at load time: LD_PRELOAD reaches every child process (shells, compilers),
//! and those must stay inert. The first intercepted GEMM call moves the state machine
//! UNINIT -> INITIALIZING -> READY (or OFF); other threads arriving meanwhile wait for the
//! outcome, and a re-entrant call from the initialising thread itself passes through.

use std::cell::Cell;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tunedblas_core::family;
use tunedblas_core::identity::{self, HashCache, MapCheck};
use tunedblas_core::key::ProblemKey;
use tunedblas_core::misslog::{MissFiles, MissSet, Sight};
use tunedblas_core::near::{Claim, NearIndex, Verdict, Verdicts};
use tunedblas_core::profile::{self, Loaded, Request, Selection};
use tunedblas_core::table::{Action, Table};
use tunedblas_core::tunableop;

use crate::log::{debug, info};
use crate::real::HOOKS;
use crate::stats::{self, Counter};

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const READY: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static FINISHED: AtomicBool = AtomicBool::new(false);
/// The process whose runtime this is: set at start-up and in a fork child. A `vfork` child
/// (or a raw `clone`) shares our memory without running the fork handlers; when it calls
/// `_exit` it must not finish the parent's run (that would mark the parent finished and
/// its counts would never be written at its real exit).
static OWNER_PID: AtomicU32 = AtomicU32::new(0);
/// The process in which start-up began. A child forked while another thread of its parent
/// was starting up inherits INITIALIZING with no thread left to finish it.
static INIT_PID: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static INITIALIZING_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Distinct miss shapes one process can count; more are still logged once each time seen.
const MISS_CAPACITY: usize = 1 << 14;

/// `TUNEDBLAS_NEAR` unset: the token window of near-shape serving (on; why in
/// [`tunedblas_core::near::DEFAULT_WINDOW`]). `TUNEDBLAS_NEAR=0` turns it off.
pub const DEFAULT_NEAR_WINDOW: i64 = tunedblas_core::near::DEFAULT_WINDOW;

/// The settings, read once from the environment. `tunedblas env` documents each variable.
pub struct Config {
    pub disabled: bool,
    pub profile_dir: PathBuf,
    pub explicit: Option<String>,
    pub allow_mismatch: bool,
    pub miss_dir: PathBuf,
    pub log_level: u8,
    pub stats_path: Option<PathBuf>,
    /// `TUNEDBLAS_NEAR`: serve a missed token count from the same layer's row at most this
    /// many tokens away (after validating it for the exact problem); 0 or `off`: never.
    pub near_window: i64,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn truthy(name: &str) -> bool {
    env(name).is_some_and(|v| !matches!(v.as_str(), "0" | "false" | "no" | "off"))
}

impl Config {
    pub fn from_env() -> Config {
        Config {
            disabled: truthy("TUNEDBLAS_DISABLE"),
            profile_dir: env("TUNEDBLAS_PROFILE_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(default_profile_dir),
            explicit: env("TUNEDBLAS_PROFILE"),
            allow_mismatch: truthy("TUNEDBLAS_ALLOW_MISMATCH"),
            miss_dir: env("TUNEDBLAS_MISS_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| identity::user_cache_dir().join("misses")),
            log_level: match env("TUNEDBLAS_LOG").as_deref() {
                Some("0" | "quiet" | "off") => crate::log::QUIET,
                Some("2" | "debug") => crate::log::DEBUG,
                _ => crate::log::INFO,
            },
            stats_path: env("TUNEDBLAS_STATS").map(PathBuf::from),
            near_window: match env("TUNEDBLAS_NEAR").as_deref() {
                None => DEFAULT_NEAR_WINDOW,
                Some("off" | "no" | "false") => 0,
                Some(v) => v.parse::<i64>().map_or(DEFAULT_NEAR_WINDOW, |w| w.max(0)),
            },
        }
    }
}

/// The profiles installed beside this library: `<prefix>/share/tunedblas/profiles` for an
/// installed copy (`<prefix>/lib/libtunedblas.so`), or the source tree's `profiles/` for a
/// cargo build (`target/<profile>/libtunedblas.so`).
fn default_profile_dir() -> PathBuf {
    let own = identity::library_of_address(default_profile_dir as *const () as usize);
    let Some(lib_dir) = own.as_deref().and_then(Path::parent) else {
        return PathBuf::from("profiles");
    };
    let candidates = [
        lib_dir.join("../share/tunedblas/profiles"),
        lib_dir.join("profiles"),
        lib_dir.join("../../profiles"),
    ];
    candidates
        .iter()
        .find(|d| d.join(profile::REGISTRY_FILE).is_file())
        .unwrap_or(&candidates[0])
        .clone()
}

/// Everything the serving path needs, built once.
pub struct Runtime {
    loaded: Loaded,
    /// Set when every rank serves the same rows: no need to ask which device a call is on.
    single: Option<Arc<Table>>,
    misses: MissSet,
    files: Mutex<MissFiles>,
    miss_io_warned: AtomicBool,
    miss_full_warned: AtomicBool,
    stats_path: Option<PathBuf>,
    near: Option<Near>,
}

/// Near-shape serving: one index per distinct table, and the verdict per missed key.
struct Near {
    window: i64,
    indexes: Vec<(Arc<Table>, NearIndex)>,
    verdicts: Verdicts,
}

/// What the near path says for one missed call.
pub enum NearStep {
    /// Nothing near (or not yet decided, or refused): the heuristic.
    Pass,
    /// Serve this solution; validated before for this key.
    Serve { id: i32, slot: usize },
    /// First sight: validate this solution (from the row [`Runtime::near_from`] names) for
    /// the exact problem, then report the outcome with [`Runtime::near_outcome`].
    Validate { id: i32, slot: usize },
}

/// A final near verdict as a miss-set note (0 is "no note"): pass, or serve this solution
/// with this verdict slot. `None` for a pending verdict, which is never noted.
const NOTE_PASS: u64 = 1 << 62;
const NOTE_SERVE: u64 = 2 << 62;

fn note_of(slot: usize, v: Verdict) -> Option<u64> {
    match v {
        Verdict::Pending => None,
        Verdict::None | Verdict::Refused => Some(NOTE_PASS),
        // Verdict slots are below the map's capacity (MISS_CAPACITY), far below 2^30.
        Verdict::Serve(id) => {
            (slot < 1 << 30).then(|| NOTE_SERVE | (slot as u64) << 32 | u64::from(id as u32))
        }
    }
}

/// What a note says the near path does, `None` for no note.
#[inline(always)]
fn step_of_note(note: u64) -> Option<NearStep> {
    match note >> 62 {
        0 => None,
        2 => Some(NearStep::Serve {
            id: note as u32 as i32,
            slot: (note >> 32) as usize & ((1 << 30) - 1),
        }),
        _ => Some(NearStep::Pass),
    }
}

/// The device the calling thread's work runs on (HIP's current device), 0 if unknown.
#[inline]
pub fn current_device() -> i32 {
    match HOOKS.hip_get_device() {
        Some(f) => {
            let mut d = 0;
            // SAFETY: out-pointer to an int.
            if unsafe { f(&mut d) } == 0 {
                d
            } else {
                0
            }
        }
        None => 0,
    }
}

impl Runtime {
    /// The table for the calling thread's device, if the profile has one.
    #[inline]
    pub fn table(&self) -> Option<&Table> {
        match &self.single {
            Some(t) => Some(t),
            None => self.loaded.table_for(current_device()),
        }
    }

    /// Records a call whose key has no row; `hash` is its [`ProblemKey::lookup_hash`].
    #[inline]
    pub fn miss(&self, key: &ProblemKey, hash: u64) {
        self.miss_on(current_device(), key, hash)
    }

    /// [`Runtime::miss`] for a caller that already asked which device the call is on.
    #[inline]
    pub fn miss_on(&self, device: i32, key: &ProblemKey, hash: u64) {
        // A call rocBLAS accepted can still be one no results file can name (strides whose
        // batch extent overflows 64 bits): recording it would write a line that never reads
        // back, and nothing could ever be tuned for it. Checked only before a key enters the
        // set, so a repeated miss does not pay for it.
        let admit = || tunableop::check_key(key).is_ok();
        match self.misses.record_hashed_if(device, key, hash, admit) {
            Sight::Repeat { count } if count < 1024 || !count.is_power_of_two() => {}
            Sight::Refused => {}
            sight => self.miss_slow(device, key, sight),
        }
    }

    /// [`Runtime::miss_on`] for the near path: also returns the key's miss-set slot and its
    /// note (the near verdict kept there, 0 while none is), if the set holds the key.
    #[inline(always)]
    pub fn miss_noted(&self, device: i32, key: &ProblemKey, hash: u64) -> Option<(usize, u64)> {
        let admit = || tunableop::check_key(key).is_ok();
        let (sight, noted) = self.misses.record_noted(device, key, hash, admit);
        match sight {
            Sight::Repeat { count } if count < 1024 || !count.is_power_of_two() => {}
            Sight::Refused => {}
            sight => self.miss_slow(device, key, sight),
        }
        noted
    }

    /// A first sight, a periodic count flush, or a full set: off the repeat-miss path.
    #[cold]
    #[inline(never)]
    fn miss_slow(&self, device: i32, key: &ProblemKey, sight: Sight) {
        match sight {
            Sight::First => {
                let result = self.files.lock().append_first_sight(device, key);
                if let Err(e) = result {
                    self.warn_miss_io(&e);
                }
            }
            // Count flushes at 1024, 2048, ... calls of a shape: periodic, yet rare.
            Sight::Repeat { count } if count >= 1024 && count.is_power_of_two() => {
                if let Some(mut files) = self.files.try_lock() {
                    let _ = files.write_counts(&self.misses.snapshot());
                }
            }
            Sight::Repeat { .. } | Sight::Refused => {}
            Sight::Full => {
                if !self.miss_full_warned.swap(true, Ordering::Relaxed) {
                    info!("more than {MISS_CAPACITY} distinct missed shapes; further new shapes are not recorded");
                }
            }
        }
    }

    /// The one warning about miss files that cannot be written.
    fn warn_miss_io(&self, e: &std::io::Error) {
        if !self.miss_io_warned.swap(true, Ordering::Relaxed) {
            info!(
                "cannot write the miss log in {}: {e}; serving continues, shapes are kept in memory, written when the folder is writable again and counted at exit",
                self.files.lock().dir().display()
            );
        }
    }

    /// Whether the near path is on at all (off: no second look on a miss).
    #[inline]
    pub fn near_on(&self) -> bool {
        self.near.is_some()
    }

    /// The near path for a key on `device` that has no row in `table` (the miss is
    /// recorded apart, by [`Runtime::miss_noted`], whose answer is `noted`).
    /// `hash` is the key's [`ProblemKey::lookup_hash`], reused for the verdict map.
    ///
    /// A final verdict (serve, none, refused) is copied into the key's miss-set slot, so a
    /// repeated miss reads it with the probe that counts it and never asks the verdict map
    /// again. The map stays the authority: it claims keys, holds verdicts while one is
    /// pending, and holds keys the miss set has no room for.
    #[inline]
    pub fn near(
        &self,
        device: i32,
        table: Option<&Table>,
        key: &ProblemKey,
        hash: u64,
        noted: Option<(usize, u64)>,
    ) -> NearStep {
        if let Some(step) = noted.and_then(|(_, note)| step_of_note(note)) {
            return step;
        }
        self.near_unnoted(device, table, key, hash, noted.map(|(slot, _)| slot))
    }

    /// [`Runtime::near`] for a key whose verdict is not in its miss-set slot (yet).
    #[cold]
    #[inline(never)]
    fn near_unnoted(
        &self,
        device: i32,
        table: Option<&Table>,
        key: &ProblemKey,
        hash: u64,
        miss_slot: Option<usize>,
    ) -> NearStep {
        let (Some(near), Some(table)) = (&self.near, table) else {
            return NearStep::Pass;
        };
        let note = |slot: usize, v: Verdict| {
            if let (Some(m), Some(n)) = (miss_slot, note_of(slot, v)) {
                self.misses.note_if_unset(m, n);
            }
        };
        match near.verdicts.get_or_claim_hashed(device, key, hash) {
            Claim::Known(slot, v) => {
                note(slot, v);
                match v {
                    Verdict::Serve(id) => NearStep::Serve { id, slot },
                    _ => NearStep::Pass,
                }
            }
            Claim::Full => NearStep::Pass,
            Claim::Mine(slot) => {
                let found = near
                    .indexes
                    .iter()
                    .find(|(t, _)| std::ptr::eq(&**t, table))
                    .and_then(|(_, ix)| ix.nearest(key, near.window));
                let usable = found.and_then(|(from, action)| {
                    let row = family::instantiate(&family::family_of(key), from)
                        .and_then(|k| table.get(&k));
                    match action {
                        Action::Solution(id) if !row.is_some_and(|e| e.is_quarantined()) => {
                            Some((id, from))
                        }
                        _ => None,
                    }
                });
                match usable {
                    Some((id, _from)) => NearStep::Validate { id, slot },
                    None => {
                        near.verdicts.set(slot, Verdict::None);
                        note(slot, Verdict::None);
                        NearStep::Pass
                    }
                }
            }
        }
    }

    /// The token count of the row the near path takes for `key` in `table` (for messages).
    pub fn near_from(&self, table: Option<&Table>, key: &ProblemKey) -> Option<i64> {
        let (near, table) = (self.near.as_ref()?, table?);
        near.indexes
            .iter()
            .find(|(t, _)| std::ptr::eq(&**t, table))
            .and_then(|(_, ix)| ix.nearest(key, near.window))
            .map(|(from, _)| from)
    }

    /// Records whether the near solution of verdict `slot` may serve `key` (on the calling
    /// thread's device) from now on, in the verdict map and in the key's miss-set slot.
    /// A refusal replaces whatever note is there; other verdicts only fill an empty one
    /// (a refusal is final, so a late copy of an older verdict can never hide it).
    pub fn near_outcome(&self, key: &ProblemKey, slot: usize, verdict: Verdict) {
        let Some(near) = &self.near else { return };
        near.verdicts.set(slot, verdict);
        let Some(note) = note_of(slot, verdict) else {
            return;
        };
        let device = current_device();
        if let Some(m) = self.misses.find(device, key, key.lookup_hash()) {
            if verdict == Verdict::Refused {
                self.misses.set_note(m, note);
            } else {
                self.misses.note_if_unset(m, note);
            }
        }
    }

    fn all_tables(&self) -> impl Iterator<Item = &Arc<Table>> {
        let mut seen: Vec<&Arc<Table>> = Vec::new();
        for t in self.loaded.tables.iter().flatten() {
            if !seen.iter().any(|s| Arc::ptr_eq(s, t)) {
                seen.push(t);
            }
        }
        seen.into_iter()
    }
}

/// True once the rocBLAS side has started (it owns `TUNEDBLAS_STATS` then).
pub fn started() -> bool {
    RUNTIME.get().is_some()
}

/// The runtime, starting it on first use. `None` means: pass the call through untouched.
#[inline]
pub fn get() -> Option<&'static Runtime> {
    if STATE.load(Ordering::Acquire) == READY {
        return RUNTIME.get();
    }
    slow_get()
}

#[cold]
fn slow_get() -> Option<&'static Runtime> {
    loop {
        match STATE.load(Ordering::Acquire) {
            READY => return RUNTIME.get(),
            OFF => return None,
            UNINIT => {
                // Before the CAS, so a waiter never sees INITIALIZING with an older pid
                // (every thread of one process stores the same value).
                INIT_PID.store(std::process::id(), Ordering::Release);
                if STATE
                    .compare_exchange(UNINIT, INITIALIZING, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    continue;
                }
                INITIALIZING_HERE.with(|f| f.set(true));
                let built = std::panic::catch_unwind(init).ok().flatten();
                INITIALIZING_HERE.with(|f| f.set(false));
                let ready = built.is_some_and(|rt| RUNTIME.set(rt).is_ok());
                STATE.store(if ready { READY } else { OFF }, Ordering::Release);
                return if ready { RUNTIME.get() } else { None };
            }
            _ => {
                if INITIALIZING_HERE.with(|f| f.get()) {
                    return None;
                }
                if std::process::id() != INIT_PID.load(Ordering::Acquire) {
                    // Forked mid start-up: the initialising thread does not exist here and
                    // may have held locks (the loader's) that nothing will release, so do
                    // not start again: this process passes its calls through.
                    let _ = STATE.compare_exchange(
                        INITIALIZING,
                        OFF,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                    return None;
                }
                std::thread::yield_now();
            }
        }
    }
}

/// Stops serving for the rest of the process (after an internal error): every later call
/// passes through untouched.
pub fn latch_off(why: &str) {
    if STATE.swap(OFF, Ordering::AcqRel) != OFF {
        info!("internal error ({why}); passing every call through from now on");
    }
}

fn secure_mode() -> bool {
    // SAFETY: getauxval has no preconditions.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Address of the first real GEMM entry that resolves: it names the loaded library.
fn real_library_anchor() -> Option<*const c_void> {
    let h = &HOOKS;
    [
        &h.gemm_ex,
        &h.gemm_strided_batched_ex,
        &h.gemm_batched_ex,
        &h.sgemm,
        &h.hgemm,
        &h.gemm_ex_64,
    ]
    .into_iter()
    .find_map(|hook| hook.get())
    .map(|p| p as *const c_void)
}

fn init() -> Option<Runtime> {
    let cfg = Config::from_env();
    crate::log::set_level(cfg.log_level);
    if cfg.disabled {
        debug!("disabled by TUNEDBLAS_DISABLE");
        return None;
    }
    if secure_mode() {
        return None; // set-uid/set-gid: never act on the environment of an untrusted user.
    }
    // This library carries its own copy of std, so the hook covers only our own panics: one
    // short line instead of a backtrace in the host's log (each export already catches them).
    std::panic::set_hook(Box::new(|info| {
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        crate::log::line(crate::log::INFO, &format!("internal panic{place}"));
    }));
    let (loaded, name_line) = select_and_load(&cfg);
    let single = if loaded.distinct <= 1 {
        Some(
            loaded
                .tables
                .iter()
                .flatten()
                .next()
                .cloned()
                .unwrap_or_default(),
        )
    } else {
        None
    };
    if let Some(line) = name_line {
        info!("{line}");
    }
    const SHOWN: usize = 20;
    for p in loaded.problems.iter().take(SHOWN) {
        info!("{p}");
    }
    if loaded.unservable > 0 {
        info!(
            "{} rows name ops or solutions rocBLAS cannot serve (hipBLASLt, ScaledGemm, tf32, unknown op names) and are skipped",
            loaded.unservable
        );
    }
    if loaded.problems.len() > SHOWN {
        info!(
            "{} more problems in the profile not shown; everything valid is served",
            loaded.problems.len() - SHOWN
        );
    }
    let mut rt = Runtime {
        loaded,
        single,
        misses: MissSet::with_capacity(MISS_CAPACITY),
        files: Mutex::new(MissFiles::new(cfg.miss_dir, tunableop::op_and_signature)),
        miss_io_warned: AtomicBool::new(false),
        miss_full_warned: AtomicBool::new(false),
        stats_path: cfg.stats_path,
        near: None,
    };
    OWNER_PID.store(std::process::id(), Ordering::Release);
    rt.near = build_near(&rt, cfg.near_window);
    // SAFETY: registering plain extern "C" functions with libc.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
    }
    Some(rt)
}

fn build_near(rt: &Runtime, window: i64) -> Option<Near> {
    if window <= 0 {
        return None;
    }
    let indexes: Vec<(Arc<Table>, NearIndex)> = rt
        .all_tables()
        .map(|t| (t.clone(), NearIndex::new(t)))
        .collect();
    if indexes.iter().all(|(_, ix)| ix.families() == 0) {
        return None;
    }
    debug!("near-shape serving within {window} tokens");
    Some(Near {
        window,
        indexes,
        verdicts: Verdicts::with_capacity(MISS_CAPACITY),
    })
}

/// Identifies the loaded build, picks its profile and loads it. Returns the tables and
/// the startup line.
fn select_and_load(cfg: &Config) -> (Loaded, Option<String>) {
    let start = std::time::Instant::now();
    let Some(anchor) = real_library_anchor() else {
        return (
            Loaded::default(),
            Some("no real rocBLAS GEMM found in this process; passing calls through".into()),
        );
    };
    let Some(path) = identity::library_of_address(anchor as usize) else {
        return (Loaded::default(), Some("cannot tell which file rocBLAS was loaded from; passing calls through and recording misses".into()));
    };
    if identity::check_mapped_file(anchor as usize, &path) == MapCheck::Replaced {
        return (
            Loaded::default(),
            Some(format!(
                "{} was replaced on disk after this process loaded it, so the running build cannot be identified; restart the process to serve tuned rows",
                path.display()
            )),
        );
    }
    let cache = HashCache::new(identity::user_cache_dir().join("sha256"));
    let id = match cache.identify(&path) {
        Ok(id) => id,
        Err(e) => {
            return (
                Loaded::default(),
                Some(format!(
                    "cannot hash {}: {e}; passing calls through",
                    path.display()
                )),
            )
        }
    };
    let identified = start.elapsed();
    let req = Request {
        profile_dir: &cfg.profile_dir,
        sha256: &id.sha256,
        explicit: cfg.explicit.as_deref(),
        allow_mismatch: cfg.allow_mismatch,
    };
    let registry_problems = profile::registry_problems(&cfg.profile_dir);
    let (mut loaded, line) = match profile::select(&req) {
        Selection::Chosen { name, dir, reason } => {
            let selected = start.elapsed();
            let mut loaded = profile::load_tables(&dir);
            if let Some(version) = crate::real::version_string() {
                let contradictions = profile::contradicting_validators(&loaded, &version);
                loaded.problems.extend(contradictions);
            }
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            debug!(
                "start-up times: identify {:.3} ms ({}), select {:.3} ms, load {:.3} ms ({} rank files)",
                ms(identified),
                if id.cached { "hash cache hit" } else { "hashed the library" },
                ms(selected - identified),
                ms(start.elapsed() - selected),
                loaded.rows.len()
            );
            let device = current_device();
            let rows = loaded
                .table_for(device)
                .map_or(0, |t| t.len() + t.wildcards().len());
            let line = format!("profile {name} {reason} ({rows} rows, rank {device})");
            (loaded, Some(line))
        }
        Selection::None { why } => (Loaded::default(), Some(why)),
    };
    let mut problems = registry_problems;
    problems.append(&mut loaded.problems);
    loaded.problems = problems;
    (loaded, line)
}

/// Flushes counts, writes the stats file and prints the summary. Runs once per process.
pub fn finish() {
    let Some(rt) = RUNTIME.get() else { return };
    // SAFETY: getpid cannot fail (and is not cached by glibc, so a vfork child sees its own).
    if unsafe { libc::getpid() } as u32 != OWNER_PID.load(Ordering::Acquire) {
        return;
    }
    if FINISHED.swap(true, Ordering::AcqRel) {
        return;
    }
    let snapshot = rt.misses.snapshot();
    if !snapshot.is_empty() {
        let written = {
            let mut files = rt.files.lock();
            // Both, whatever the first did: the counts name every shape even when the log
            // cannot be written.
            let pending = files.flush_pending();
            let counts = files.write_counts(&snapshot);
            pending.and(counts)
        };
        if let Err(e) = written {
            rt.warn_miss_io(&e);
        }
    }
    if let Some(path) = &rt.stats_path {
        let _ = write_stats(rt, path, snapshot.len());
    }
    let near = stats::total(Counter::Near);
    let near_words = if rt.near.is_some() || near > 0 {
        format!(", {near} near")
    } else {
        String::new()
    };
    info!(
        "{} calls: {} served, {} default, {} missed ({} shapes), {} passed through, {} fallbacks{near_words}",
        stats::total(Counter::Calls),
        stats::total(Counter::Served),
        stats::total(Counter::Default),
        stats::total(Counter::Missed),
        snapshot.len(),
        stats::total(Counter::PassedThrough),
        stats::total(Counter::Fallbacks),
    );
}

/// `TUNEDBLAS_STATS=<file>`: machine-readable counters and the rows never hit, for
/// `tunedblas verify`.
fn write_stats(rt: &Runtime, path: &Path, miss_shapes: usize) -> std::io::Result<()> {
    let mut rows = 0;
    let mut unhit = Vec::new();
    for t in rt.all_tables() {
        for (k, e) in t.iter() {
            rows += 1;
            if !e.was_hit() {
                let (op, sig) = tunableop::op_and_signature(k);
                unhit.push(format!("{op},{sig}"));
            }
        }
    }
    // `*` rows are counted on their own: a replay of the concrete rows cannot hit them.
    let (mut wild, mut wild_unhit) = (0, Vec::new());
    for t in rt.all_tables() {
        for w in t.wildcards() {
            wild += 1;
            if !w.entry.was_hit() {
                wild_unhit.push(w.text.clone());
            }
        }
    }
    let near_tally = rt.near.as_ref().map_or((0, 0, 0), |n| n.verdicts.tally());
    let json = serde_json::json!({
        "calls": stats::total(Counter::Calls),
        "served": stats::total(Counter::Served),
        "default": stats::total(Counter::Default),
        "missed_calls": stats::total(Counter::Missed),
        "missed_shapes": miss_shapes,
        "passed_through": stats::total(Counter::PassedThrough),
        "fallbacks": stats::total(Counter::Fallbacks),
        "rows": rows,
        "rows_hit": rows - unhit.len(),
        "rows_not_hit": unhit,
        "near": stats::total(Counter::Near),
        "near_keys_served": near_tally.0,
        "near_keys_refused": near_tally.1,
        "wildcard_rows": wild,
        "wildcard_rows_hit": wild - wild_unhit.len(),
        "wildcard_rows_not_hit": wild_unhit,
    });
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // Never through a symlink planted under the configured name; readable by us only.
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?
        .write_all(&serde_json::to_vec_pretty(&json)?)
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(finish);
}

extern "C" fn fork_prepare() {
    if let Some(rt) = RUNTIME.get() {
        // Hold the lock across fork so the child never inherits it mid-write.
        std::mem::forget(rt.files.lock());
    }
}

extern "C" fn fork_parent() {
    if let Some(rt) = RUNTIME.get() {
        // SAFETY: fork_prepare locked it on this thread and forgot the guard.
        unsafe { rt.files.force_unlock() };
    }
}

extern "C" fn fork_child() {
    if let Some(rt) = RUNTIME.get() {
        // SAFETY: as in fork_parent; the child has one thread, so resetting is exclusive.
        unsafe {
            rt.files.force_unlock();
            rt.misses.reset();
            if let Some(near) = &rt.near {
                near.verdicts.reset();
            }
        }
        rt.files.lock().reset_after_fork();
        stats::reset();
        OWNER_PID.store(std::process::id(), Ordering::Release);
        FINISHED.store(false, Ordering::Release);
    }
}
