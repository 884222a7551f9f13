//! The rocBLAS backend. Every rocBLAS export in `exports.rs` routes its call through
//! [`serve`]; this file is the runtime it serves from: the profile chosen for the loaded
//! build, miss recording and near serving, built on the first intercepted call. When it
//! starts and what happens at fork and exit is the shared lifecycle's
//! ([`crate::lifecycle`]); this file supplies [`BACKEND`].
//!
//! - [`real`]: the real rocBLAS functions, handles and their builds, devices.
//! - [`serve`]: the decision for one call, the tuned call and its fallback, each entry
//!   point's key and real call, the pass-through gate.
//! - [`near`]: near-shape serving (its state and its serve path).
//! - this file: the runtime (profile, tables, misses, stats).

use std::ffi::c_void;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use tunedblas_core::key::ProblemKey;
use tunedblas_core::profile::{self, LazyTables, RankTable, Request, Selection};
use tunedblas_core::table::Table;
use tunedblas_core::tunableop;

use crate::lifecycle::{self, Backend, Config, Lazy, Pass};
use crate::log::{debug, info};
use crate::recorder::Recorder;
use crate::stats::{self, Counter};
use real::HOOKS;
pub use real::{current_device, device_for};

pub mod dynsym;
pub mod near;
pub mod real;
mod reload;
pub mod serve;

static RUNTIME: Lazy<RocblasRuntime> = Lazy::new();

/// What the lifecycle does for rocBLAS at exit and fork.
pub static BACKEND: Backend = Backend { finish, after_fork };

/// Everything the serving path needs, built once.
pub struct RocblasRuntime {
    /// The rows served now: swapped whole when the store changes ([`crate::reload`]). A leaked
    /// box, never freed: a call in flight may still read one that was replaced.
    served: AtomicPtr<Served>,
    /// `served`'s table when every rank serves the same rows (null otherwise), kept apart
    /// so the served path reads it with its one load, as it read a field before reloads.
    single: AtomicPtr<Table>,
    /// The process's rocBLAS misses: one recorder, kept when the runtime is built again for
    /// another build (`libs.rs`).
    misses: &'static Recorder<ProblemKey>,
    stats_path: Option<std::path::PathBuf>,
    /// Near-shape serving, over the rows loaded at start-up (a reload does not rebuild it:
    /// its verdicts are noted in the miss set by index).
    near: Option<near::Near>,
    /// What a reload needs; `None` when reloading is off (`TUNEDBLAS_RELOAD=0`).
    watch: Option<crate::reload::Watch>,
}

/// One profile's rows as loaded: what [`RocblasRuntime::served`] points to.
pub struct Served {
    /// The profile's rank tables: the calling device's read when loaded, the others on
    /// their device's first call.
    tables: LazyTables,
    /// Set when every rank serves the same rows: no need to ask which device a call is on.
    single: Option<Arc<Table>>,
    /// The profile's name (`None`: none was chosen), for the reload's line.
    name: Option<String>,
}

/// "No device asked about" for [`RocblasRuntime::table_and_device`]: outside every `i32`.
pub const NO_DEVICE: i64 = i64::MIN;

impl RocblasRuntime {
    /// The table for the calling thread's device, if the profile has one.
    #[inline]
    pub fn table(&self) -> Option<&Table> {
        match self.table_for(std::ptr::null_mut()) {
            RankTable::Ready(t) => Some(t),
            _ => None,
        }
    }

    /// The table for a call on handle `h`: the rank file of the device `h` was made on.
    /// [`RankTable::Loading`] while another thread reads that rank's file: the call is
    /// then passed through, not recorded (the profile may have its row).
    #[inline(always)]
    pub fn table_for(&self, h: tunedblas_core::abi::Handle) -> RankTable<'_> {
        self.table_and_device(h).0
    }

    /// [`RocblasRuntime::table_for`], with the device it asked about: [`NO_DEVICE`] when every
    /// rank serves the same rows (then it did not ask; a miss asks [`device_for`] itself).
    /// (One word rather than an `Option`, which took two registers through the hit path and
    /// cost it ~4 instructions.)
    #[inline(always)]
    pub fn table_and_device(&self, h: tunedblas_core::abi::Handle) -> (RankTable<'_>, i64) {
        // SAFETY: null, or the table of a `Served` that is never freed.
        if let Some(t) = unsafe { self.single.load(Ordering::Acquire).as_ref() } {
            return (RankTable::Ready(t), NO_DEVICE);
        }
        let device = device_for(h);
        (
            self.served().tables.table_for_with(device, report_rank),
            i64::from(device),
        )
    }

    /// Serves `served` from the next call on (a reload); the old rows stay allocated.
    fn publish(&self, served: Served) {
        let single = single_ptr(&served);
        let p = Box::into_raw(Box::new(served));
        self.single.store(std::ptr::null_mut(), Ordering::Release);
        self.served.store(p, Ordering::Release);
        self.single.store(single, Ordering::Release);
    }

    /// The rows served now: one load (what a reload costs the served path).
    #[inline(always)]
    fn served(&self) -> &'static Served {
        // SAFETY: always a leaked box, never freed (see the field).
        unsafe { &*self.served.load(Ordering::Acquire) }
    }

    /// Records a call on `device` whose key has no row; `hash` is its
    /// [`ProblemKey::lookup_hash`].
    #[inline]
    pub fn miss_on(&self, device: i32, key: &ProblemKey, hash: u64) {
        self.miss_noted(device, key, hash);
    }

    /// [`RocblasRuntime::miss_on`] for the near path: also returns the key's miss-set slot and its
    /// note (the near verdict kept there, 0 while none is), if the set holds the key.
    #[inline(always)]
    pub fn miss_noted(&self, device: i32, key: &ProblemKey, hash: u64) -> Option<(usize, u64)> {
        // A call rocBLAS accepted can still be one no results file can name (strides whose
        // batch extent overflows 64 bits): recording it would write a line that never reads
        // back, and nothing could ever be tuned for it. Checked only before a key enters the
        // set, so a repeated miss does not pay for it.
        let admit = || tunableop::check_key(key).is_ok();
        self.misses.record(device, key, hash, admit)
    }

    /// Every distinct table loaded so far (of the rows served now).
    fn all_tables(&self) -> Vec<Arc<Table>> {
        self.served().tables.ready_tables()
    }
}

/// The log lines of a rank file read after start-up (its device's first call).
fn report_rank(r: &profile::RankReport) {
    for p in r.problems.iter().take(20) {
        info!("{p}");
    }
    if r.unservable > 0 {
        info!(
            "rank {}: {} rows name ops or solutions rocBLAS cannot serve and are skipped",
            r.rank, r.unservable
        );
    }
    debug!(
        "rank {} loaded on its device's first call: {} rows in {:.3} ms{}",
        r.rank,
        r.rows,
        r.took.as_secs_f64() * 1e3,
        if r.parsed {
            ""
        } else {
            " (shared with an identical rank file)"
        }
    );
}

/// Rows (entry addresses) and missed shapes (miss-set slots) already said by
/// [`say_new_hits`].
type Said = (
    std::collections::HashSet<usize>,
    std::collections::HashSet<usize>,
);
static SAID_HITS: lifecycle::ExitLock<Option<Said>> = lifecycle::ExitLock::new(None);

/// Looks at the profile store (about every two seconds, from the status tick) and serves
/// what is committed there for this build without a restart: [`crate::reload`].
pub fn reload_if_changed() {
    let Some(rt) = RUNTIME.peek().filter(|_| RUNTIME.is_ready()) else {
        return;
    };
    if let Some(w) = &rt.watch {
        w.check(rt);
    }
}

/// At `TUNEDBLAS_LOG=debug`: one line for each row hit since the last look (served with its
/// solution, or `Default`), once per row, and one for each shape missed since (where it was
/// recorded); near-served shapes are said as they are validated (`near.rs`). Called by the status thread about once a second
/// and at exit, never on a call's path: the hot path keeps its one hit-flag check.
pub fn say_new_hits() {
    if !crate::log::enabled(crate::log::DEBUG) {
        return;
    }
    let Some(rt) = RUNTIME.peek() else { return };
    let Some(mut said) = SAID_HITS.lock_within(std::time::Duration::ZERO) else {
        return;
    };
    let (said, said_misses) = said.get_or_insert_with(Default::default);
    let say = |e: &tunedblas_core::table::Entry, row: &dyn std::fmt::Display| match e.action {
        tunedblas_core::table::Action::Default => {
            debug!("{row}: a Default row: the caller's own call")
        }
        tunedblas_core::table::Action::Solution(id) => debug!("{row}: served with solution {id}"),
    };
    for t in rt.all_tables() {
        for (k, e) in t.iter() {
            if e.was_hit() && said.insert(e as *const _ as usize) {
                let (op, sig) = tunableop::op_and_signature(k);
                say(e, &format_args!("{op},{sig}"));
            }
        }
        for w in t.wildcards() {
            if w.entry.was_hit() && said.insert(&w.entry as *const _ as usize) {
                say(&w.entry, &w.text);
            }
        }
    }
    let dir = rt.misses.dir();
    rt.misses.set.for_each_slot(|slot, device, _, _, text| {
        if let Some(text) = text {
            if said_misses.insert(slot) {
                debug!(
                    "missed {text} (rank {device}): no row; recorded in {}",
                    dir.display()
                );
            }
        }
    });
}

/// The rocBLAS miss recorder, once the runtime was built (for the live status).
pub fn status_misses() -> Option<&'static Recorder<ProblemKey>> {
    RUNTIME.peek().map(|rt| rt.misses)
}

/// True once the rocBLAS side has started (it owns `TUNEDBLAS_STATS` then).
pub fn started() -> bool {
    RUNTIME.peek().is_some()
}

/// The runtime, starting it on first use. `None` means: pass the call through untouched.
#[inline(always)]
pub fn get() -> Option<&'static RocblasRuntime> {
    RUNTIME.get(init)
}

/// Whether the runtime is not started yet (starting up, or a call put its start-up off).
#[inline]
pub fn starting() -> bool {
    RUNTIME.starting()
}

/// Whether the runtime is built and serving now (never starts it).
#[inline]
pub fn is_ready() -> bool {
    RUNTIME.is_ready()
}

/// Whether the runtime serves, starting it on first use ([`get`] without the runtime).
#[inline(always)]
pub fn serving() -> bool {
    RUNTIME.serving(init)
}

/// Stops serving for the rest of the process (after an internal error): every later call
/// passes through untouched.
pub fn latch_off(why: &str) {
    let first = RUNTIME.latch_off();
    serve::shut_pass_gate();
    if first {
        info!("internal error ({why}); passing every call through from now on");
    }
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

fn init() -> Option<RocblasRuntime> {
    let cfg = Config::for_start()?;
    let (loaded, name_line, sha) = select_and_load(&cfg);
    let single = loaded.tables.single();
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
    let watch = crate::reload::Watch::new(
        &cfg,
        sha.as_deref(),
        loaded.dir.as_deref(),
        loaded.problems.len(),
    );
    let served = Served {
        tables: loaded.tables,
        single,
        name: loaded.name,
    };
    let single = single_ptr(&served);
    let mut rt = RocblasRuntime {
        served: AtomicPtr::new(Box::into_raw(Box::new(served))),
        single: AtomicPtr::new(single),
        misses: recorder(&cfg),
        stats_path: cfg.stats_path.clone(),
        near: None,
        watch,
    };
    rt.near = near::Near::build(rt.all_tables(), cfg.near_window);
    crate::status::start(&cfg.miss_dir, cfg.miss_trust, cfg.status_thread);
    Some(rt)
}

/// `served`'s one table, when every rank serves the same rows (else null).
fn single_ptr(served: &Served) -> *mut Table {
    served
        .single
        .as_ref()
        .map_or(std::ptr::null_mut(), |t| Arc::as_ptr(t) as *mut Table)
}

/// The process's one rocBLAS miss recorder, made by the first start-up.
fn recorder(cfg: &Config) -> &'static Recorder<ProblemKey> {
    static RECORDER: std::sync::atomic::AtomicPtr<Recorder<ProblemKey>> =
        std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
    crate::recorder::shared(&RECORDER, || {
        Recorder::new(
            cfg.miss_dir.clone(),
            cfg.miss_trust,
            tunableop::op_and_signature,
            "",
            "",
        )
    })
}

/// The served rocBLAS build was unloaded and another took its place (`libs.rs`): what the
/// old runtime counted is written, and the next call starts the runtime again for the new
/// build (identity, profile, near index); misses carry over.
pub fn library_changed() {
    if let Some(rt) = RUNTIME.peek() {
        rt.misses.flush(lifecycle::EXIT_WAIT);
    }
    RUNTIME.restart();
    serve::shut_pass_gate();
}

/// The chosen profile's tables as start-up (or a reload) left them, with what to say about
/// them.
#[derive(Default)]
pub struct Opened {
    tables: LazyTables,
    problems: Vec<String>,
    unservable: usize,
    /// The profile chosen and its folder (`None`: none).
    name: Option<String>,
    dir: Option<std::path::PathBuf>,
}

/// Identifies the loaded build, picks its profile and opens it (the calling device's rank
/// file is read now, the others on first use). Returns the tables, the startup line and
/// the build's sha256 (`None` when it could not be identified).
fn select_and_load(cfg: &Config) -> (Opened, Option<String>, Option<String>) {
    let start_time = std::time::Instant::now();
    let Some(anchor) = real_library_anchor() else {
        return (
            Opened::default(),
            Some("no real rocBLAS GEMM found in this process; passing calls through".into()),
            None,
        );
    };
    let (_, id) = match crate::libs::identify_loaded(anchor, "rocBLAS") {
        Ok(found) => found,
        Err(why) => return (Opened::default(), Some(why), None),
    };
    let identified = start_time.elapsed();
    let (loaded, line) = choose_and_open(cfg, &id.sha256, &mut |_| {}, |selected, rank_files| {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let selected = selected.duration_since(start_time);
        debug!(
            "start-up times: identify {:.3} ms ({}), select {:.3} ms, load {:.3} ms ({} rank files)",
            ms(identified),
            if id.cached { "hash cache hit" } else { "hashed the library" },
            ms(selected - identified),
            ms(start_time.elapsed() - selected),
            rank_files
        );
    });
    (loaded, line, Some(id.sha256))
}

/// Picks the profile for the build whose sha256 is `sha` and opens it; `chosen` hears the
/// folder picked (if any) before anything in it is read (a reload notes what the store looks
/// like then, so a change made while it reads is seen the next time), `timed` when the
/// selection was made and how many rank files the folder has. Start-up and a reload.
fn choose_and_open(
    cfg: &Config,
    sha: &str,
    chosen: &mut dyn FnMut(Option<&Path>),
    timed: impl FnOnce(std::time::Instant, usize),
) -> (Opened, Option<String>) {
    let req = Request {
        profile_dir: &cfg.profile_dir,
        sha256: sha,
        explicit: cfg.explicit.as_deref(),
        allow_mismatch: cfg.allow_mismatch,
    };
    let registry_problems = profile::registry_problems(&cfg.profile_dir);
    // `TUNEDBLAS_PROFILE=/a/path`: PyTorch results files, checked against this version.
    let selection = match cfg.explicit.as_deref().filter(|e| profile::names_a_path(e)) {
        Some(path) => profile::select_path_on(
            std::path::Path::new(path),
            real::version_string().as_deref(),
            &tunedblas_core::device::gpu_archs(),
            cfg.allow_mismatch,
        ),
        None => profile::select(&req),
    };
    chosen(match &selection {
        Selection::Chosen { dir, .. } => Some(dir.as_path()),
        Selection::None { .. } => None,
    });
    let (mut loaded, line) = match selection {
        Selection::Chosen { name, dir, reason } => {
            let selected = std::time::Instant::now();
            let device = current_device();
            let version = real::version_string();
            // Rank files read later are checked against the registry entry chosen now.
            let chosen = profile::ChosenEntry::read(&cfg.profile_dir, &name);
            let (tables, start) = LazyTables::guarded(&dir, device, version.as_deref(), chosen);
            timed(selected, start.rank_files);
            let rows = match tables.table_for(device) {
                RankTable::Ready(t) => t.len() + t.wildcards().len(),
                _ => 0,
            };
            let line = format!(
                "profile {name} {reason} ({rows} rows, rank {device}) {}",
                crate::log::VERSION_TAG
            );
            let opened = Opened {
                tables,
                problems: start.problems,
                unservable: start.unservable,
                name: Some(name),
                dir: Some(dir),
            };
            (opened, Some(line))
        }
        Selection::None { why } => (
            Opened::default(),
            Some(format!(
                "{why}; misses go to {} (`tunedblas status` shows them live) {}",
                cfg.miss_dir.display(),
                crate::log::VERSION_TAG
            )),
        ),
    };
    let mut problems = registry_problems;
    problems.append(&mut loaded.problems);
    loaded.problems = problems;
    (loaded, line)
}

/// What every view says of rocBLAS's calls (`tally.rs`).
fn tally(rt: &RocblasRuntime) -> crate::tally::Tally {
    crate::tally::Tally::of(
        crate::status::rocblas_counters(),
        &rt.misses.set,
        near::served_near,
        rt.misses.over_cap_calls(),
    )
}

/// At a way out of the process ([`crate::lifecycle`]): writes the counts and the stats
/// file, and on [`Pass::Leaving`] prints the summary.
fn finish(pass: Pass) {
    let Some(rt) = RUNTIME.peek() else { return };
    rt.misses.flush(lifecycle::EXIT_WAIT);
    if let Some(path) = &rt.stats_path {
        write_stats(rt, path);
    }
    if pass == Pass::Late {
        return;
    }
    say_new_hits();
    let near_on = rt.near.is_some() || stats::total(Counter::Near) > 0;
    info!(
        "{}",
        crate::tally::Summary {
            tally: tally(rt),
            near_on
        }
    );
    if rt.misses.over_cap_calls() > 0 {
        info!(
            "{} calls of shapes the miss log had no room for were not recorded (it holds up to {})",
            rt.misses.over_cap_calls(),
            rt.misses.set.limit()
        );
    }
}

/// In a fork child: the child's misses are its own.
unsafe fn after_fork() {
    // SAFETY: as below.
    unsafe { real::ROCBLAS.after_fork() };
    if let Some(rt) = RUNTIME.peek() {
        // SAFETY: the lifecycle calls this from the fork child handler only.
        unsafe { rt.misses.after_fork() };
        // SAFETY: as above (a parent's thread may have been changing the set).
        unsafe { SAID_HITS.reset_in_child(None) };
        if let Some(w) = &rt.watch {
            // SAFETY: as above.
            unsafe { w.after_fork() };
        }
        if let Some(near) = &rt.near {
            // SAFETY: as above.
            unsafe { near.after_fork() };
        }
    }
}

/// `TUNEDBLAS_STATS=<file>`: machine-readable counters and the rows never hit, for
/// `tunedblas verify`.
fn write_stats(rt: &RocblasRuntime, path: &Path) {
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
    let near_tally = rt.near.as_ref().map_or((0, 0, 0), |n| n.tally());
    let t = tally(rt);
    let mut json = t.stats_json(rt.misses.over_cap_calls(), rows, unhit);
    // rocBLAS's own: the near path and the `*` rows.
    let own: [(&str, serde_json::Value); 7] = [
        ("near_shapes", t.near_shapes.into()),
        ("near", t.near.into()),
        ("near_keys_served", near_tally.0.into()),
        ("near_keys_refused", near_tally.1.into()),
        ("wildcard_rows", wild.into()),
        ("wildcard_rows_hit", (wild - wild_unhit.len()).into()),
        ("wildcard_rows_not_hit", wild_unhit.into()),
    ];
    for (k, v) in own {
        json.insert(k.to_owned(), v);
    }
    let json = serde_json::Value::Object(json);
    lifecycle::write_stats(path, "", &json)
}
