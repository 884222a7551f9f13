//! Loading a profile's rank tables on first use ([`LazyTables`]), the interposer's way.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::files::{check_regular, same_file, unreadable, ReadError, MAX_RESULTS_FILE_BYTES};
use super::{contradiction, load_rank, nonpositive_problem, rank_files, ChosenEntry};
use crate::table::Table;

/// A rank slot's state (low 3 bits of [`RankSlot::state`]; the rest is the id of the
/// process whose thread set it).
const UNLOADED: u64 = 0;
pub(super) const LOADING: u64 = 1;
pub(super) const PUBLISHING: u64 = 2;
const READY: u64 = 3;
const FAILED: u64 = 4;
const STATE_BITS: u64 = 7;

pub(super) fn tagged(state: u64, pid: u64) -> u64 {
    pid << 3 | state
}

/// One rank file of a [`LazyTables`].
pub(super) struct RankSlot {
    rank: usize,
    path: PathBuf,
    pub(super) state: AtomicU64,
    /// Set once, by the thread that claimed the slot, before the state says READY.
    table: OnceLock<Arc<Table>>,
    /// The table came from parsing this file (not shared from an identical one).
    parsed: AtomicBool,
}

impl RankSlot {
    fn state(&self) -> u64 {
        self.state.load(Ordering::Acquire) & STATE_BITS
    }
}

/// What [`LazyTables::table_for`] answers for the calling device.
#[derive(Debug)]
pub enum RankTable<'a> {
    /// The device's table (its own rank file's, else rank 0's).
    Ready(&'a Table),
    /// Another thread of this process is reading the rank file this device needs: pass
    /// the call through untouched, and do not record it as a miss (the profile may well
    /// have its row). Nothing ever waits for a load.
    Loading,
    /// No table serves this device (no rank file of its own and none for rank 0, or
    /// they could not be read): every call is a miss.
    None,
}

/// Where a rank stands, for messages and tests ([`LazyTables::rank_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankState {
    /// Not read yet: it will be on the first call from its device.
    Unloaded,
    /// Being read by some thread now.
    Loading,
    /// Served. `parsed` is false when the table is shared with a rank whose file holds
    /// the same bytes (that file was compared, not parsed again).
    Ready { parsed: bool },
    /// Its file could not be read: its device falls back to rank 0.
    Failed,
}

/// What one rank's load did: for the log lines of whoever triggered it.
#[derive(Debug, Clone, PartialEq)]
pub struct RankReport {
    pub rank: usize,
    pub path: PathBuf,
    /// Rows (exact and `*`) the rank now serves; 0 when it failed.
    pub rows: usize,
    /// False when the table was shared from an identical rank instead of parsed.
    pub parsed: bool,
    /// One line per problem (file, line, what, what to do), as [`Loaded::problems`];
    /// a failed rank has the line saying why.
    pub problems: Vec<String>,
    /// Rows naming a solution rocBLAS cannot serve.
    pub unservable: usize,
    pub took: Duration,
}

/// What [`LazyTables::open`] did at start-up.
#[derive(Debug, Default)]
pub struct LazyStart {
    /// Every problem found so far, one line each: the folder, rank files refused without
    /// reading (not regular, too large), the problems of the ranks loaded, validators that
    /// contradict the loaded build.
    pub problems: Vec<String>,
    /// Unservable rows of the ranks loaded.
    pub unservable: usize,
    /// Rank files in the folder.
    pub rank_files: usize,
    /// The ranks loaded (parsed, or shared from an identical file), in order.
    pub loaded: Vec<RankReport>,
}

/// A profile's rank tables, loaded on first use: [`LazyTables::open`] reads only the
/// calling device's rank file (else rank 0's) and shares its table with every rank file
/// holding the same bytes; any other rank is read the first time a call comes from its
/// device ([`LazyTables::table_for_with`]).
///
/// Loading never blocks a caller: the first thread to need a rank claims it (one atomic
/// compare-and-swap) and reads it; a thread of the same process that needs it meanwhile
/// gets [`RankTable::Loading`] at once and passes its call through. No lock is held, so a
/// child forked while a thread was loading inherits nothing held: the claim carries the
/// process id, and a child that finds its parent's claim takes the rank over and reads it
/// itself (the parent's thread does not exist there). The table is published through a
/// `OnceLock` that only the claiming thread sets; in the instant around that `set`, the
/// state says so (PUBLISHING), and a child forked in that instant never calls `set` on
/// the `OnceLock` (whose inner `Once` could then be mid-run with nobody to finish it): it
/// passes that rank's calls through instead. The steady state is one atomic load (the
/// `OnceLock`) per call.
pub struct LazyTables {
    /// By rank: `None` where the folder has no file for the rank.
    slots: Box<[Option<RankSlot>]>,
    /// The loaded rocBLAS's version string, to check each rank's `ROCBLAS_VERSION`.
    rocblas_version: Option<String>,
    /// The registry entry the profile was chosen by, checked before each rank file is read
    /// ([`LazyTables::guarded`]).
    chosen: Option<ChosenEntry>,
}

/// No rank files at all: every device gets [`RankTable::None`] (what a process without a
/// profile for its build holds).
impl Default for LazyTables {
    fn default() -> LazyTables {
        LazyTables {
            slots: Box::new([]),
            rocblas_version: None,
            chosen: None,
        }
    }
}

/// Where one device's table stands: loaded, being loaded by another caller, or failed.
enum TableLoad<'a> {
    Ready(&'a Table),
    Busy,
    Failed,
}

impl LazyTables {
    /// Lists the rank files of `dir`, refuses at once those that are not regular files,
    /// are too large or cannot be looked at (one line each, `stat` only), and loads the
    /// table `device` uses: its own rank file, else (absent or unreadable) rank 0's. Every
    /// other rank file whose bytes are the same as that one's (the same inode, or the same
    /// size and content, compared in blocks) shares its table without being parsed, so
    /// identical rank files (what `tunedblas tune` writes) still make [`LazyTables::single`]
    /// known at start-up. `rocblas_version` (the loaded library's version string) is
    /// checked against each rank's `ROCBLAS_VERSION` validator as it loads.
    pub fn open(dir: &Path, device: i32, rocblas_version: Option<&str>) -> (LazyTables, LazyStart) {
        LazyTables::guarded(dir, device, rocblas_version, None)
    }

    /// [`LazyTables::open`] for a profile the registry chose: before each rank file is read
    /// (at start-up or at its device's first call), `chosen` checks that the registry still
    /// names the same folder for the same build and that the file lies in it; a rank that
    /// fails serves nothing (its device falls back to rank 0's rows, read and checked
    /// before).
    pub fn guarded(
        dir: &Path,
        device: i32,
        rocblas_version: Option<&str>,
        chosen: Option<ChosenEntry>,
    ) -> (LazyTables, LazyStart) {
        let mut start = LazyStart::default();
        let files = match rank_files(dir) {
            Ok(f) => f,
            Err(line) => {
                start.problems.push(line);
                Vec::new()
            }
        };
        start.rank_files = files.len();
        let len = files.last().map_or(0, |(r, _)| r + 1);
        let mut slots: Vec<Option<RankSlot>> = (0..len).map(|_| None).collect();
        for (rank, path) in files {
            let refused = std::fs::metadata(&path)
                .map_err(ReadError::Io)
                .and_then(|m| check_regular(&path, &m, MAX_RESULTS_FILE_BYTES))
                .err();
            let state = match &refused {
                Some(e) => {
                    start.problems.push(unreadable(&path, rank, e));
                    FAILED
                }
                None => UNLOADED,
            };
            slots[rank] = Some(RankSlot {
                rank,
                path,
                state: AtomicU64::new(state),
                table: OnceLock::new(),
                parsed: AtomicBool::new(false),
            });
        }
        let tables = LazyTables {
            slots: slots.into_boxed_slice(),
            rocblas_version: rocblas_version.map(str::to_owned),
            chosen,
        };
        let mut record = |r: &RankReport| {
            start.problems.extend(r.problems.iter().cloned());
            start.unservable += r.unservable;
            start.loaded.push(r.clone());
        };
        if let RankTable::Ready(_) = tables.table_for_with(device, &mut record) {
            // The rank that loaded (the device's own, or rank 0 it fell back to).
            let first = tables
                .slots
                .iter()
                .flatten()
                .find(|s| s.parsed.load(Ordering::Acquire));
            if let Some(first) = first {
                for slot in tables.slots.iter().flatten() {
                    if let Some(r) = tables.share_if_identical(slot, first) {
                        record(&r);
                    }
                }
            }
        }
        (tables, start)
    }

    pub(super) fn slot(&self, rank: usize) -> Option<&RankSlot> {
        self.slots.get(rank).and_then(Option::as_ref)
    }

    #[inline]
    fn own_slot(&self, device: i32) -> Option<&RankSlot> {
        usize::try_from(device).ok().and_then(|d| self.slot(d))
    }

    /// The table for `device` ([`LazyTables::table_for_with`] with no report).
    #[inline]
    pub fn table_for(&self, device: i32) -> RankTable<'_> {
        self.table_for_with(device, |_| {})
    }

    /// The table for `device`: its own rank file's, else rank 0's (solution ids belong to
    /// the build, so any rank's rows are valid on every device of the same architecture),
    /// reading that file first if no call needed it before. `on_load` hears about each
    /// rank this call loaded (its problems are for the log); it runs on the loading thread,
    /// after the table is published. Never waits for another thread: see
    /// [`RankTable::Loading`]. Once a device's table is loaded this is one atomic load.
    #[inline]
    pub fn table_for_with(&self, device: i32, on_load: impl FnMut(&RankReport)) -> RankTable<'_> {
        let own = self.own_slot(device);
        if let Some(t) = own.and_then(|s| s.table.get()) {
            return RankTable::Ready(t);
        }
        // No file of its own, or one that cannot be read: rank 0's.
        if !matches!(own, Some(s) if s.state() != FAILED) {
            if let Some(t) = self.slot(0).and_then(|s| s.table.get()) {
                return RankTable::Ready(t);
            }
        }
        self.table_for_slow(device, on_load)
    }

    #[cold]
    #[inline(never)]
    fn table_for_slow(&self, device: i32, mut on_load: impl FnMut(&RankReport)) -> RankTable<'_> {
        // Reading a rank file makes system calls: the caller's errno is put back after.
        // SAFETY: errno is this thread's.
        let errno = unsafe { *libc::__errno_location() };
        let got = self.table_for_loading(device, &mut on_load);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        got
    }

    fn table_for_loading(
        &self,
        device: i32,
        mut on_load: impl FnMut(&RankReport),
    ) -> RankTable<'_> {
        if let Some(own) = self.own_slot(device) {
            match self.ensure(own, &mut on_load) {
                TableLoad::Ready(t) => return RankTable::Ready(t),
                TableLoad::Busy => return RankTable::Loading,
                TableLoad::Failed if own.rank == 0 => return RankTable::None,
                TableLoad::Failed => {}
            }
        }
        match self.slot(0).map(|s| self.ensure(s, &mut on_load)) {
            Some(TableLoad::Ready(t)) => RankTable::Ready(t),
            Some(TableLoad::Busy) => RankTable::Loading,
            Some(TableLoad::Failed) | None => RankTable::None,
        }
    }

    /// The slot's table, loading it on this thread if nobody has claimed it.
    fn ensure<'a>(
        &'a self,
        slot: &'a RankSlot,
        on_load: &mut impl FnMut(&RankReport),
    ) -> TableLoad<'a> {
        loop {
            if let Some(t) = slot.table.get() {
                return TableLoad::Ready(t);
            }
            let s = slot.state.load(Ordering::Acquire);
            match s & STATE_BITS {
                // Set before READY is stored, so this is only for completeness.
                READY => {
                    return slot
                        .table
                        .get()
                        .map_or(TableLoad::Busy, |t| TableLoad::Ready(t))
                }
                FAILED => return TableLoad::Failed,
                // A moment away in this process; in a child forked in that moment it may
                // never finish, and `set` must not be called there: pass through.
                PUBLISHING => return TableLoad::Busy,
                state => {
                    // Only here: a load in progress costs its callers this system call.
                    let me = u64::from(std::process::id());
                    if state == LOADING && s >> 3 == me {
                        return TableLoad::Busy;
                    }
                    // Not loaded, or claimed by a thread of the process this one was
                    // forked from, which does not exist here: claim it.
                    let claim = tagged(LOADING, me);
                    if slot
                        .state
                        .compare_exchange(s, claim, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return self.load_claimed(slot, me, on_load);
                    }
                }
            }
        }
    }

    /// Loads a slot this thread claimed, publishes it (or marks it failed) and reports.
    fn load_claimed<'a>(
        &'a self,
        slot: &'a RankSlot,
        me: u64,
        on_load: &mut impl FnMut(&RankReport),
    ) -> TableLoad<'a> {
        let began = Instant::now();
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.build(slot)));
        let (table, mut report) = match built {
            Ok(r) => r,
            Err(_) => (
                None,
                self.report(
                    slot,
                    0,
                    false,
                    vec![format!(
                        "{}: internal error while reading it; rank {} serves nothing",
                        slot.path.display(),
                        slot.rank
                    )],
                ),
            ),
        };
        report.took = began.elapsed();
        let outcome = match table {
            Some((table, parsed)) => {
                slot.parsed.store(parsed, Ordering::Release);
                // Seen before `set` begins, by this process and any child forked from now.
                slot.state.store(tagged(PUBLISHING, me), Ordering::SeqCst);
                std::sync::atomic::fence(Ordering::SeqCst);
                let _ = slot.table.set(table);
                slot.state.store(tagged(READY, me), Ordering::Release);
                slot.table
                    .get()
                    .map_or(TableLoad::Busy, |t| TableLoad::Ready(t))
            }
            None => {
                slot.state.store(tagged(FAILED, me), Ordering::Release);
                TableLoad::Failed
            }
        };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_load(&report)));
        outcome
    }

    fn report(
        &self,
        slot: &RankSlot,
        rows: usize,
        parsed: bool,
        problems: Vec<String>,
    ) -> RankReport {
        RankReport {
            rank: slot.rank,
            path: slot.path.clone(),
            rows,
            parsed,
            problems,
            unservable: 0,
            took: Duration::ZERO,
        }
    }

    /// Reads a claimed slot: shares the table of a loaded rank whose file holds the same
    /// bytes, else parses the file (and shares the table of a loaded rank with the same
    /// rows). `None` for the table when the file cannot be read.
    #[allow(clippy::type_complexity)]
    fn build(&self, slot: &RankSlot) -> (Option<(Arc<Table>, bool)>, RankReport) {
        let loaded = || {
            self.slots
                .iter()
                .flatten()
                .filter(|s| s.rank != slot.rank && s.parsed.load(Ordering::Acquire))
                .filter_map(|s| Some((s, s.table.get()?)))
        };
        if let Some(why) = self
            .chosen
            .as_ref()
            .and_then(|c| c.still_serves(&slot.path).err())
        {
            return (None, self.report(slot, 0, false, vec![why]));
        }
        if let Some((_, t)) = loaded().find(|(s, _)| same_file(&s.path, &slot.path)) {
            let rows = t.len() + t.wildcards().len();
            return (
                Some((t.clone(), false)),
                self.report(slot, rows, false, Vec::new()),
            );
        }
        let file = match load_rank(&slot.path, slot.rank) {
            Ok(f) => f,
            Err(line) => return (None, self.report(slot, 0, false, vec![line])),
        };
        let mut problems = file.problems;
        if let Some(mine) = &self.rocblas_version {
            if let Some(v) = &file.rocblas_version {
                if !crate::version::same_build(v, mine) {
                    problems.push(contradiction(&slot.path, v, mine));
                }
            }
            if let Some((line, key, id)) = file.nonpositive.first() {
                let first = (slot.path.clone(), *line, key.clone(), *id);
                problems.extend(nonpositive_problem(&first, file.nonpositive.len(), mine));
            }
        }
        let rows = file.table.len() + file.table.wildcards().len();
        let shared = loaded()
            .find(|(_, t)| t.same_rows(&file.table))
            .map(|(_, t)| t.clone());
        let table = shared.unwrap_or_else(|| Arc::new(file.table));
        let mut report = self.report(slot, rows, true, problems);
        report.unservable = file.unservable;
        (Some((table, true)), report)
    }

    /// Gives `slot`, not loaded yet, the table of `from` if their files hold the same bytes.
    fn share_if_identical(&self, slot: &RankSlot, from: &RankSlot) -> Option<RankReport> {
        let table = from.table.get()?;
        if slot.rank == from.rank {
            return None;
        }
        let me = u64::from(std::process::id());
        let claim = tagged(LOADING, me);
        slot.state
            .compare_exchange(UNLOADED, claim, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        let began = Instant::now();
        if !same_file(&from.path, &slot.path) {
            slot.state.store(UNLOADED, Ordering::Release);
            return None;
        }
        slot.state.store(tagged(PUBLISHING, me), Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        let _ = slot.table.set(table.clone());
        slot.state.store(tagged(READY, me), Ordering::Release);
        let mut report = self.report(
            slot,
            table.len() + table.wildcards().len(),
            false,
            Vec::new(),
        );
        report.took = began.elapsed();
        Some(report)
    }

    /// Where `rank` stands; `None` when the folder has no file for it.
    pub fn rank_state(&self, rank: usize) -> Option<RankState> {
        let slot = self.slot(rank)?;
        Some(match slot.state() {
            UNLOADED => RankState::Unloaded,
            LOADING | PUBLISHING => RankState::Loading,
            READY => RankState::Ready {
                parsed: slot.parsed.load(Ordering::Acquire),
            },
            _ => RankState::Failed,
        })
    }

    /// The ranks whose file has been parsed so far, in order.
    pub fn parsed_ranks(&self) -> Vec<usize> {
        self.slots
            .iter()
            .flatten()
            .filter(|s| s.state() == READY && s.parsed.load(Ordering::Acquire))
            .map(|s| s.rank)
            .collect()
    }

    /// The distinct tables loaded so far (for statistics, near-shape indexes, ...).
    pub fn ready_tables(&self) -> Vec<Arc<Table>> {
        let mut out: Vec<Arc<Table>> = Vec::new();
        for t in self.slots.iter().flatten().filter_map(|s| s.table.get()) {
            if !out.iter().any(|o| Arc::ptr_eq(o, t)) {
                out.push(t.clone());
            }
        }
        out
    }

    /// The one table every device gets, when that is already known: every rank file is
    /// loaded and they all share one table, or cannot be read (then an empty table, as
    /// [`Loaded`] with no distinct table). `None` while a rank is not loaded yet or two
    /// ranks differ: ask [`LazyTables::table_for`] per call then.
    pub fn single(&self) -> Option<Arc<Table>> {
        let mut one: Option<&Arc<Table>> = None;
        for slot in self.slots.iter().flatten() {
            match slot.table.get() {
                Some(t) => match one {
                    Some(o) if !Arc::ptr_eq(o, t) => return None,
                    _ => one = Some(t),
                },
                None if slot.state() == FAILED => {}
                None => return None,
            }
        }
        Some(one.cloned().unwrap_or_default())
    }
}

/// Puts `table` at `tables[rank]`, sharing the `Arc` of an earlier rank with the same rows
/// (`same`) so identical rank files cost one table; counts the distinct ones.
pub fn place_rank_table<T>(
    tables: &mut Vec<Option<Arc<T>>>,
    distinct: &mut usize,
    rank: usize,
    table: T,
    same: impl Fn(&T, &T) -> bool,
) {
    let shared = tables.iter().flatten().find(|t| same(t, &table)).cloned();
    let table = shared.unwrap_or_else(|| {
        *distinct += 1;
        Arc::new(table)
    });
    if tables.len() <= rank {
        tables.resize(rank + 1, None);
    }
    tables[rank] = Some(table);
}
