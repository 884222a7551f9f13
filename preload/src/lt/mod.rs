//! What the two Lt backends share: cuBLASLt (`cublaslt/`) and hipBLASLt (`hipblaslt/`) take
//! the same 16 arguments to their matmul, describe a problem the same way and serve from
//! the same kind of table (`tunedblas_core::cublaslt`: key, names, rows). One runtime
//! ([`LtRuntime`]: identity, profile, misses, stats, the summary) and one serving path
//! ([`serve::matmul`]: the decision, the tuned call, its fallback) serve both; a backend
//! supplies what differs through [`serve::Library`]: its real functions, how it reads a
//! key and how it rebuilds a row's algorithm.

pub mod callers;
pub mod key;
pub mod objects;
mod reload;
pub mod serve;

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;

use tunedblas_core::cublaslt::*;
use tunedblas_core::misslog::Sight;
use tunedblas_core::profile::{self, Request, Selection};

use crate::lifecycle::{self, Config, Lazy, Pass};
use crate::log::info;
use crate::recorder::Recorder;
use crate::reload::Reopened;
use crate::stats::{self, Counter};

/// One matmul call's arguments (`cublasLtMatmul` and `hipblasLtMatmul` alike).
#[derive(Clone, Copy)]
pub struct LtCall {
    pub handle: *mut c_void,
    pub desc: *mut c_void,
    pub alpha: *const c_void,
    pub a: *const c_void,
    pub a_desc: *mut c_void,
    pub b: *const c_void,
    pub b_desc: *mut c_void,
    pub beta: *const c_void,
    pub c: *const c_void,
    pub c_desc: *mut c_void,
    pub d: *mut c_void,
    pub d_desc: *mut c_void,
    /// The caller's algorithm (NULL: the library's heuristic).
    pub algo: *const c_void,
    pub workspace: *mut c_void,
    pub workspace_bytes: usize,
    pub stream: *mut c_void,
}

/// The matmul of either library with every pointer untyped: `cublasLtMatmul` and
/// `hipblasLtMatmul` have this one C shape (16 arguments; src/abi.rs and
/// src/cublaslt/mod.rs type them, checked against the real headers), so one function makes
/// the call for both.
pub type AnyMatmulFn = unsafe extern "C-unwind" fn(
    *mut c_void,
    *mut c_void,
    *const c_void,
    *const c_void,
    *mut c_void,
    *const c_void,
    *mut c_void,
    *const c_void,
    *const c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *const c_void,
    *mut c_void,
    usize,
    *mut c_void,
) -> i32;

/// Calls a matmul with a caller's arguments and `algo`.
///
/// # Safety
/// `f` is a matmul of that shape; `x` a caller's arguments; `algo` NULL, the caller's, or
/// one the same library made.
#[inline]
pub unsafe fn call(f: AnyMatmulFn, x: &LtCall, algo: *const c_void) -> i32 {
    // SAFETY: forwarding the caller's arguments (with possibly another algo).
    unsafe {
        f(
            x.handle,
            x.desc,
            x.alpha,
            x.a,
            x.a_desc,
            x.b,
            x.b_desc,
            x.beta,
            x.c,
            x.c_desc,
            x.d,
            x.d_desc,
            algo,
            x.workspace,
            x.workspace_bytes,
            x.stream,
        )
    }
}

/// A backend's counters, one per outcome of a call: every call is counted once, in its
/// outcome's, and the calls are their sum (one counter bumped per call, not two).
pub struct Counters {
    pub served: Counter,
    pub default: Counter,
    pub missed: Counter,
    pub passed_through: Counter,
    pub fallbacks: Counter,
}

impl Counters {
    /// The live status's six figures (served, default, near, missed, passed, fallbacks).
    pub fn status(&self) -> [u64; 6] {
        let t = stats::total;
        [
            t(self.served),
            t(self.default),
            0,
            t(self.missed),
            t(self.passed_through),
            t(self.fallbacks),
        ]
    }
}

/// What tells one Lt backend from the other in the shared runtime.
pub struct LtSpec {
    pub lib: LtLib,
    /// `cublasLtMatmul` or `hipblasLtMatmul`, for messages.
    pub matmul_name: &'static str,
    pub counters: Counters,
    /// In miss file names: `<host>-<pid>-<start>-<tag>-rank<d>.csv`.
    pub miss_tag: &'static str,
    /// The stats file's `library` field, and its name beside the rocBLAS one
    /// (`<stats>.<json_name>.json`) when rocBLAS ran too.
    pub json_name: &'static str,
    /// The address of the library's matmul, if it is loaded (identifies the build).
    pub anchor: fn() -> Option<*mut c_void>,
    /// The device a call runs on.
    pub device: fn() -> i32,
    /// Called once a profile is loaded, at the runtime's start and at each reload (not on a
    /// call's path).
    pub loaded: fn(&LtLoaded),
}

/// One Lt backend's runtime: the identified build's profile, the misses, the stats file.
///
/// Nothing in it changes after start-up (no atomic, no lock inline: the rows a reload
/// swaps are the backend's [`Lt::rows`], the reload's state is behind `watch`). The compiler
/// then knows a `&LtRuntime` does not change across a call, and the serving path does not
/// read its fields again after each call it makes.
pub struct LtRuntime {
    pub spec: &'static LtSpec,
    /// The rows served now: the backend's [`Lt::rows`], where this runtime published them.
    rows: &'static Rows,
    /// What this runtime published there last (a leaked box, never freed): a reload
    /// replaces only those ([`Rows::replace`]). Boxed, so the runtime has no atomic inline.
    mine: Box<AtomicPtr<LtServed>>,
    /// The process's misses of this backend: one recorder, kept when the runtime starts
    /// again for another build.
    pub misses: &'static Recorder<LtKey>,
    stats_path: Option<PathBuf>,
    /// What a reload needs; `None` when reloading is off (`TUNEDBLAS_RELOAD=0`).
    watch: Option<Box<crate::reload::Watch>>,
    /// The served library's file, for the reload's lines.
    lib_path: PathBuf,
}

/// The rows a backend serves now ([`LtServed`]), swapped whole at a start-up and at a
/// reload (`reload.rs`). Every `LtServed` published here is a leaked box, never freed: a
/// call in flight may still read one that was replaced.
pub struct Rows {
    /// Null until the runtime first started.
    served: AtomicPtr<LtServed>,
    /// `served`'s table when every rank serves the same rows (null otherwise), kept apart
    /// so the served path reads it with one load of a static.
    single: AtomicPtr<LtTable>,
}

impl Rows {
    pub const fn new() -> Rows {
        Rows {
            served: AtomicPtr::new(std::ptr::null_mut()),
            single: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The rows served now (`None` before the runtime first started).
    fn served(&self) -> Option<&'static LtServed> {
        // SAFETY: null or a leaked box, never freed.
        unsafe { self.served.load(Ordering::Acquire).as_ref() }
    }

    /// Serves `served` from the next call on (a runtime's start); the old rows stay
    /// allocated. Returns the rows as published.
    fn publish(&self, served: LtServed) -> *mut LtServed {
        let single = served.single_ptr();
        let p = Box::into_raw(Box::new(served));
        self.single.store(std::ptr::null_mut(), Ordering::SeqCst);
        self.served.store(p, Ordering::SeqCst);
        self.single.store(single, Ordering::SeqCst);
        p
    }

    /// Serves `served` in place of `old` (a reload of the runtime that published `old`),
    /// unless a start published other rows since: a reload of a build that was replaced
    /// (`Lt::library_changed`), still reading when the new build's runtime started, must
    /// not put its build's rows back. Returns the rows as published, or `None`.
    fn replace(&self, old: *mut LtServed, served: LtServed) -> Option<*mut LtServed> {
        let single = served.single_ptr();
        let p = Box::into_raw(Box::new(served));
        if self
            .served
            .compare_exchange(old, p, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            // SAFETY: never published: ours alone.
            drop(unsafe { Box::from_raw(p) });
            return None;
        }
        // SAFETY: `old` was published: a leaked box, never freed. Until this store, calls
        // still read the old single table, as calls in flight do; a start that stored its
        // own since is kept.
        let old_single = unsafe { &*old }.single_ptr();
        let _ =
            self.single
                .compare_exchange(old_single, single, Ordering::SeqCst, Ordering::SeqCst);
        Some(p)
    }

    /// The table of the calling thread's device (`spec.device`): one load when every rank
    /// serves the same rows.
    #[inline]
    pub fn table(&self, spec: &LtSpec) -> Option<&'static LtTable> {
        // SAFETY: null, or the table of an `LtServed` that is never freed.
        match unsafe { self.single.load(Ordering::Acquire).as_ref() } {
            Some(t) => Some(t),
            None => self.served()?.table_for((spec.device)()),
        }
    }
}

/// One profile's rows as loaded: what [`LtRuntime`] serves from.
pub struct LtServed {
    loaded: LtLoaded,
    /// Set when every rank serves the same rows (an empty table when there are none: it
    /// still keeps the call keys that missed).
    single: Option<Arc<LtTable>>,
    /// The profile's name (`None`: none was chosen), for the reload's line.
    name: Option<String>,
}

impl LtServed {
    fn new(loaded: LtLoaded, name: Option<String>) -> LtServed {
        let single = (loaded.distinct <= 1).then(|| {
            loaded
                .tables
                .iter()
                .flatten()
                .next()
                .cloned()
                .unwrap_or_default()
        });
        LtServed {
            loaded,
            single,
            name,
        }
    }

    /// The table of calls on `device`.
    fn table_for(&self, device: i32) -> Option<&LtTable> {
        match &self.single {
            Some(t) => Some(t),
            None => self.loaded.table_for(device),
        }
    }

    fn single_ptr(&self) -> *mut LtTable {
        self.single
            .as_ref()
            .map_or(std::ptr::null_mut(), |t| Arc::as_ptr(t) as *mut LtTable)
    }
}

impl LtRuntime {
    /// Starts the runtime: identifies the loaded build, chooses and loads its profile. The
    /// recorder lives in `recorder` (one per backend, kept across restarts).
    pub fn start(
        spec: &'static LtSpec,
        recorder: &'static AtomicPtr<Recorder<LtKey>>,
        rows: &'static Rows,
    ) -> Option<LtRuntime> {
        let cfg = Config::for_start()?;
        let (opened, line, build) = select_and_load(spec, &cfg);
        info!("{line}");
        (spec.loaded)(&opened.rows);
        for p in opened.problems.iter().take(20) {
            info!("{p}");
        }
        crate::status::start(&cfg.miss_dir, cfg.miss_trust, cfg.status_thread);
        let misses = crate::recorder::shared(recorder, || {
            let what = match spec.lib {
                LtLib::Cublaslt => "cuBLASLt: ",
                LtLib::Hipblaslt => "hipBLASLt: ",
            };
            Recorder::new(
                cfg.miss_dir.clone(),
                cfg.miss_trust,
                op_and_signature,
                spec.miss_tag,
                what,
            )
        });
        let (lib_path, sha) = build.unzip();
        let watch = crate::reload::Watch::new(
            &cfg,
            sha.as_deref(),
            opened.dir.as_deref(),
            opened.problems.len(),
        );
        let mine = rows.publish(LtServed::new(opened.rows, opened.name));
        Some(LtRuntime {
            spec,
            rows,
            mine: Box::new(AtomicPtr::new(mine)),
            misses,
            stats_path: cfg.stats_path,
            watch: watch.map(Box::new),
            lib_path: lib_path.unwrap_or_default(),
        })
    }

    /// The rows this runtime serves (published at its start, replaced by its reloads).
    fn served(&self) -> &'static LtServed {
        // SAFETY: a leaked box, never freed (see `mine`).
        unsafe { &*self.mine.load(Ordering::Acquire) }
    }

    /// Serves `served` from the next call on (a reload); the old rows stay allocated.
    /// False when the runtime no longer serves (another build's runtime started).
    fn publish(&self, served: LtServed) -> bool {
        let old = self.mine.load(Ordering::Acquire);
        match self.rows.replace(old, served) {
            Some(p) => {
                self.mine.store(p, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Looks at the store (about every two seconds, from the status tick) and serves what
    /// is committed there for this build: [`crate::reload`].
    pub fn reload_if_changed(&self) {
        if let Some(w) = &self.watch {
            w.check(self);
        }
    }

    /// The table of the calling thread's device: one load when every rank serves the same
    /// rows.
    #[inline]
    pub fn table(&self) -> Option<&'static LtTable> {
        self.rows.table(self.spec)
    }

    /// Records a call whose key (hashed: `misslog::key_hash`) has no row: what the miss set saw ([`Sight::First`] on the
    /// key's first sight; [`Sight::Refused`] for a key no caller could have made,
    /// `LtKey::plausible`, checked only before a key enters the set so a repeated miss
    /// does not pay for it).
    /// A call served by a `*` row: its exact shape recorded all the same (as PyTorch records
    /// it untuned), noted so no view counts its calls as missed (`tally.rs`).
    #[cold]
    pub fn served_by_pattern(&self, key: &LtKey) {
        let device = (self.spec.device)();
        let admit = || key.plausible().is_ok();
        let hash = tunedblas_core::misslog::key_hash(key);
        if let (_, Some((slot, 0))) = self.misses.record_sight(device, key, hash, admit) {
            self.misses
                .set
                .note_if_unset(slot, crate::tally::SERVED_BY_PATTERN);
        }
    }

    pub fn miss(&self, key: &LtKey, hash: u64) -> Sight {
        let device = (self.spec.device)();
        let admit = || key.plausible().is_ok();
        self.misses.record_sight(device, key, hash, admit).0
    }

    /// At a way out of the process ([`crate::lifecycle`]): counts, stats and (leaving) the
    /// summary. `beside` names the stats file `<stats>.<json_name>.json` (rocBLAS owns the
    /// file when it ran too).
    pub fn finish(&self, pass: Pass, beside: bool) {
        self.misses.flush(lifecycle::EXIT_WAIT);
        if let Some(path) = &self.stats_path {
            let suffix = if beside {
                format!(".{}.json", self.spec.json_name)
            } else {
                String::new()
            };
            self.write_stats(path, &suffix);
        }
        if pass == Pass::Late {
            return;
        }
        info!(
            "{}: {}",
            self.spec.lib.name(),
            crate::tally::Summary {
                tally: self.tally(),
                near_on: false
            }
        );
    }

    /// What every view says of this library's calls (`tally.rs`).
    fn tally(&self) -> crate::tally::Tally {
        crate::tally::Tally::of(
            self.spec.counters.status(),
            &self.misses.set,
            crate::tally::never_near,
            self.misses.over_cap_calls(),
        )
    }

    fn write_stats(&self, path: &std::path::Path, suffix: &str) {
        let mut tables: Vec<&Arc<LtTable>> = Vec::new();
        for t in self.served().loaded.tables.iter().flatten() {
            if !tables.iter().any(|s| Arc::ptr_eq(s, t)) {
                tables.push(t);
            }
        }
        let mut rows = 0;
        let mut unhit = Vec::new();
        let mut quarantined = Vec::new();
        for t in tables {
            for (k, e) in t.iter() {
                rows += 1;
                let (op, sig) = op_and_signature(k);
                if !e.was_hit() {
                    unhit.push(format!("{op},{sig}"));
                }
                if e.is_quarantined() {
                    quarantined.push(format!("{op},{sig}"));
                }
            }
        }
        let over_cap = self.misses.over_cap_calls();
        let mut json = self.tally().stats_json(over_cap, rows, unhit);
        json.insert("library".into(), self.spec.json_name.into());
        json.insert("rows_quarantined".into(), quarantined.into());
        let json = serde_json::Value::Object(json);
        lifecycle::write_stats(path, suffix, &json)
    }
}

/// Identifies the loaded build and loads its profile. Returns what it opened, the
/// startup line, and the build's file and sha256 (`None` when it could not be identified).
fn select_and_load(
    spec: &LtSpec,
    cfg: &Config,
) -> (Reopened<LtLoaded>, String, Option<(PathBuf, String)>) {
    let what = spec.lib.name();
    let none = |why: String| (Reopened::none(), why, None);
    let Some(anchor) = (spec.anchor)() else {
        return none(format!(
            "{what}: {} not found in this process; passing calls through",
            spec.matmul_name
        ));
    };
    let (path, id) = match crate::libs::identify_loaded(anchor as *const _, what) {
        Ok(found) => found,
        Err(why) => return none(format!("{what}: {why}")),
    };
    let (opened, line) = choose_and_open(spec, cfg, &id.sha256, &path, &mut |_| {});
    (opened, line, Some((path, id.sha256)))
}

/// Picks the profile for the build `sha` (the file `path`) and loads it; `chosen` hears the
/// folder picked (if any) before anything in it is read. Start-up and a reload.
fn choose_and_open(
    spec: &LtSpec,
    cfg: &Config,
    sha: &str,
    path: &std::path::Path,
    chosen: &mut dyn FnMut(Option<&std::path::Path>),
) -> (Reopened<LtLoaded>, String) {
    let what = spec.lib.name();
    let req = Request {
        profile_dir: &cfg.profile_dir,
        sha256: sha,
        explicit: cfg.explicit.as_deref(),
        allow_mismatch: cfg.allow_mismatch,
    };
    // profile::select words its reasons for rocBLAS; the rules are the same for any library.
    let words = |s: String| s.replace("rocBLAS", what);
    let selection = profile::select(&req);
    chosen(match &selection {
        Selection::Chosen { dir, .. } => Some(dir.as_path()),
        Selection::None { .. } => None,
    });
    match selection {
        Selection::Chosen { name, dir, reason } => {
            let mut loaded = load_tables(&dir, spec.lib);
            let device = (spec.device)();
            let rows = loaded.table_for(device).map_or(0, LtTable::len);
            let line = format!(
                "{what}: profile {name} {} ({rows} rows, rank {device}; {}) {}",
                words(reason),
                path.display(),
                crate::log::VERSION_TAG
            );
            let opened = Reopened {
                name: Some(name),
                dir: Some(dir),
                line: Some(line.clone()),
                problems: std::mem::take(&mut loaded.problems),
                rows: loaded,
            };
            (opened, line)
        }
        Selection::None { why } => {
            let line = format!(
                "{what}: {} ({}); misses go to {} (`tunedblas status` shows them live) {}",
                words(why),
                path.display(),
                cfg.miss_dir.display(),
                crate::log::VERSION_TAG
            );
            let mut opened = Reopened::none();
            opened.line = Some(line.clone());
            (opened, line)
        }
    }
}

/// One Lt backend's process state: its runtime (started on the first call, started again
/// when the served build is replaced), its misses' recorder (kept across restarts) and
/// its serving switch. Each backend holds one in a static and hands its lifecycle hooks to
/// it.
pub struct Lt {
    pub spec: &'static LtSpec,
    pub runtime: Lazy<LtRuntime>,
    /// The rows its runtime serves: here, in the backend's static, so the served path
    /// reads them with one load of a static address (`serve::decide`).
    pub rows: Rows,
    recorder: AtomicPtr<Recorder<LtKey>>,
    /// `tunedblas_<lib>_serving(0)` turns serving off (calls pass through, nothing is
    /// recorded) without restarting the process: for A/B trials inside one process.
    serving: AtomicBool,
}

impl Lt {
    pub const fn new(spec: &'static LtSpec) -> Lt {
        Lt {
            spec,
            runtime: Lazy::new(),
            rows: Rows::new(),
            recorder: AtomicPtr::new(std::ptr::null_mut()),
            serving: AtomicBool::new(true),
        }
    }

    /// The runtime's start (for the backend's `Lazy::get`, which takes a plain `fn`).
    pub fn start(&'static self) -> Option<LtRuntime> {
        LtRuntime::start(self.spec, &self.recorder, &self.rows)
    }

    /// True once the runtime started.
    pub fn started(&'static self) -> bool {
        self.runtime.peek().is_some()
    }

    #[inline]
    pub fn serving(&self) -> bool {
        self.serving.load(Ordering::Relaxed)
    }

    /// `tunedblas_<lib>_serving(on)`: 1 serves, 0 passes every call through, a negative
    /// value only asks. Returns the previous setting.
    pub fn set_serving(&self, on: c_int) -> c_int {
        let was = if on < 0 {
            self.serving.load(Ordering::Relaxed)
        } else {
            self.serving.swap(on != 0, Ordering::Relaxed)
        };
        c_int::from(was)
    }

    /// The served build was unloaded and another took its place (`libs.rs`): what the old
    /// runtime counted is written, and the next call starts the runtime again for the new
    /// build (identity, profile); misses carry over.
    pub fn library_changed(&'static self) {
        if let Some(rt) = self.runtime.peek() {
            rt.misses.flush(lifecycle::EXIT_WAIT);
        }
        self.runtime.restart();
    }

    /// The status tick's look at the store, once the runtime serves: [`crate::reload`].
    pub fn reload_if_changed(&'static self) {
        if let Some(rt) = self.runtime.peek().filter(|_| self.runtime.is_ready()) {
            rt.reload_if_changed();
        }
    }

    /// The miss recorder, once the runtime was built (for the live status).
    pub fn status_misses(&'static self) -> Option<&'static Recorder<LtKey>> {
        self.runtime.peek().map(|rt| rt.misses)
    }

    /// After an internal error: every call passes through from now on (said once).
    pub fn latch_off(&'static self, why: &str) {
        if self.runtime.latch_off() {
            info!(
                "{}: internal error ({why}); passing every call through from now on",
                self.spec.lib.name()
            );
        }
    }

    /// At a way out of the process: counts, stats and (leaving) the summary; `beside`
    /// when another backend owns the stats file.
    pub fn finish(&'static self, pass: Pass, beside: bool) {
        if let Some(rt) = self.runtime.peek() {
            rt.finish(pass, beside);
        }
    }

    /// In a fork child: the child's misses are its own.
    ///
    /// # Safety
    /// Only from the fork child handler.
    pub unsafe fn after_fork(&'static self) {
        if let Some(rt) = self.runtime.peek() {
            // SAFETY: per the contract.
            unsafe { rt.misses.after_fork() };
            if let Some(w) = &rt.watch {
                // SAFETY: per the contract.
                unsafe { w.after_fork() };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some_rows() -> LtServed {
        LtServed::new(LtLoaded::default(), None)
    }

    /// The served build replaced (`Lt::library_changed`) while the old build's runtime was
    /// reloading: that reload, publishing last, must not put the old build's rows back.
    #[test]
    fn a_reload_replaces_only_the_rows_its_runtime_published() {
        let rows: &'static Rows = Box::leak(Box::new(Rows::new()));
        let now = |r: &Rows| {
            (
                r.served.load(Ordering::SeqCst),
                r.single.load(Ordering::SeqCst),
            )
        };
        // SAFETY (below): published rows are leaked boxes, never freed.
        let single_of = |p: *mut LtServed| unsafe { &*p }.single_ptr();
        let started = rows.publish(some_rows());
        let reloaded = rows.replace(started, some_rows()).expect("its own rows");
        assert_eq!(now(rows), (reloaded, single_of(reloaded)));
        // Another build's runtime starts; the old runtime's reload ends after it.
        let other = rows.publish(some_rows());
        assert!(rows.replace(reloaded, some_rows()).is_none());
        assert_eq!(now(rows), (other, single_of(other)));
    }
}
