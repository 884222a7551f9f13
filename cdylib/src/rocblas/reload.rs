//! Hot reload: a running process serves what is committed to the profile store for its
//! build (by `tunedblas tune`, `merge`, `profiles ...`, or by hand) within a few seconds,
//! without a restart.
//!
//! - **When.** The status tick (`status.rs`: on a thread making GEMMs, about once a second
//!   while calls arrive) asks [`Watch::check`], which looks at the store at most every two
//!   seconds: the `stat` of `profiles.json` and of every file in the chosen profile's folder
//!   ([`Seen`]). Nothing changed: nothing else is done. The served path pays one load for
//!   all of this: the pointer to the rows served now ([`super::Runtime::served`]).
//! - **What.** When the store changed, the profile is chosen again exactly as at start-up
//!   (by the build's sha256, or `TUNEDBLAS_PROFILE`), and its tables opened as then (rank
//!   files read later are checked against the registry entry chosen now): new, changed and
//!   removed rows are served from the next call on, one line says what changed
//!   (`profile X reloaded: +5 rows, 1 changed, 0 removed`). A store that now names no
//!   profile for this build (another build's rows, a removed entry) never serves another
//!   build's rows: the rows loaded are kept until a restart, said once.
//! - **Safety.** The new rows are built aside and published with one atomic store; the old
//!   ones are never freed (a call in flight may be reading them; a reload happens only when
//!   the store changed). Only one thread looks at a time ([`ExitLock`], never waited for), a
//!   fork child takes the lock over, cancellation is held off while files are read, and the
//!   caller's `errno` is kept (the tick's guard). Near-shape serving keeps the index of the
//!   rows loaded at start-up (its verdicts live in the miss set by index).
//! - `TUNEDBLAS_RELOAD=0` turns it off.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tunedblas_core::profile::{RankTable, REGISTRY_FILE};
use tunedblas_core::table::Table;

use super::{choose_and_open, current_device, Runtime, Served};
use crate::lifecycle::{self, Config, ExitLock, NoCancel};
use crate::log::info;

/// The store is looked at no more often than this.
const EVERY_NS: u64 = 2_000_000_000;

/// What the store looked like: (file, [device, inode, size, mtime s, mtime ns]) of
/// `profiles.json` and of every entry in the profile's folder, in name order.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Seen(Vec<(PathBuf, [i64; 5])>);

impl Seen {
    /// The store now: `profile_dir`'s registry and the files of `chosen` (the folder or
    /// file the rows come from), if any.
    pub fn of(profile_dir: &Path, chosen: Option<&Path>) -> Seen {
        let stamp = |p: &Path| {
            std::fs::metadata(p).ok().map(|m| {
                [
                    m.dev() as i64,
                    m.ino() as i64,
                    m.size() as i64,
                    m.mtime(),
                    m.mtime_nsec(),
                ]
            })
        };
        let mut files = vec![profile_dir.join(REGISTRY_FILE)];
        if let Some(c) = chosen {
            match std::fs::read_dir(c) {
                Ok(rd) => files.extend(rd.flatten().map(|e| e.path())),
                Err(_) => files.push(c.to_path_buf()),
            }
        }
        files.sort();
        Seen(
            files
                .into_iter()
                .filter_map(|f| stamp(&f).map(|s| (f, s)))
                .collect(),
        )
    }
}

/// What the process last saw of the store, and the folder its rows come from.
struct State {
    seen: Seen,
    dir: Option<PathBuf>,
    /// The store named no profile for this build at the last look (said once).
    gone_said: bool,
}

/// The settings a reload chooses with, the build's identity, and what was last seen.
pub struct Watch {
    cfg: Config,
    sha: String,
    state: ExitLock<State>,
    /// When to look again (monotonic ns).
    next_ns: AtomicU64,
}

impl Watch {
    pub fn new(cfg: &Config, sha: String, dir: Option<&Path>) -> Watch {
        Watch {
            cfg: cfg.clone(),
            sha,
            state: ExitLock::new(State {
                seen: Seen::of(&cfg.profile_dir, dir),
                dir: dir.map(Path::to_path_buf),
                gone_said: false,
            }),
            next_ns: AtomicU64::new(lifecycle::monotonic_ns() + EVERY_NS),
        }
    }

    /// Looks at the store if it is time, and serves what changed. See the module docs.
    pub fn check(&self, rt: &Runtime) {
        let now = lifecycle::monotonic_ns();
        let next = self.next_ns.load(Ordering::Relaxed);
        if now < next
            || self
                .next_ns
                .compare_exchange(next, now + EVERY_NS, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let Some(mut state) = self.state.lock_within(Duration::ZERO) else {
            return;
        };
        let _no_cancel = NoCancel::new();
        let seen = Seen::of(&self.cfg.profile_dir, state.dir.as_deref());
        if seen == state.seen {
            return;
        }
        // What the store looks like before its files are read: a change made while they are
        // read is then seen at the next look, and read again.
        let mut before = None;
        let (opened, line) = choose_and_open(
            &self.cfg,
            &self.sha,
            |dir| before = Some(Seen::of(&self.cfg.profile_dir, dir)),
            |_, _| {},
        );
        let old = rt.served();
        match (&opened.name, &old.name) {
            (None, None) => {}
            (None, Some(name)) => {
                if !std::mem::replace(&mut state.gone_said, true) {
                    info!(
                        "profile {name}: the store names no profile for this build any more ({}); the rows loaded are served until a restart",
                        line.as_deref().unwrap_or("")
                    );
                }
            }
            (Some(name), _) => {
                for p in opened.problems.iter().take(5) {
                    info!("{p}");
                }
                let single = opened.tables.single();
                let served = Served {
                    tables: opened.tables,
                    single,
                    name: Some(name.clone()),
                };
                let device = current_device();
                let (added, changed, removed) =
                    diff(table_of(old, device), table_of(&served, device));
                let what = match &old.name {
                    Some(was) if was == name => format!("profile {name} reloaded"),
                    Some(was) => format!("profile {name} now served in place of {was}"),
                    None => format!("profile {name} now served"),
                };
                rt.publish(served);
                state.gone_said = false;
                info!(
                    "{what}: +{added} rows, {changed} changed, {removed} removed (rank {device})"
                );
            }
        }
        state.dir = opened.dir.clone().or(state.dir.take());
        state.seen = match (before, &opened.dir) {
            (Some(seen), Some(_)) => seen,
            _ => Seen::of(&self.cfg.profile_dir, state.dir.as_deref()),
        };
    }

    /// In a fork child: the lock free (a thread of the parent may have held it).
    ///
    /// # Safety
    /// Only in a fork child's handler, where no other thread exists.
    pub unsafe fn after_fork(&self) {
        // SAFETY: as above; the state is whole at every step of its holder.
        unsafe { self.state.unlock_in_child() };
    }
}

/// The table `served` gives calls on `device` (reading its rank file if needed).
fn table_of(served: &Served, device: i32) -> Option<&Table> {
    if let Some(t) = &served.single {
        return Some(t);
    }
    match served.tables.table_for(device) {
        RankTable::Ready(t) => Some(t),
        _ => None,
    }
}

/// Rows of `new` not in `old`, in both with another solution, and in `old` only.
fn diff(old: Option<&Table>, new: Option<&Table>) -> (usize, usize, usize) {
    let (mut added, mut changed, mut removed) = (0, 0, 0);
    if let Some(n) = new {
        for (k, e) in n.iter() {
            match old.and_then(|o| o.get(k)) {
                None => added += 1,
                Some(o) if o.action != e.action => changed += 1,
                Some(_) => {}
            }
        }
    }
    if let Some(o) = old {
        removed = o
            .iter()
            .filter(|(k, _)| new.and_then(|n| n.get(k)).is_none())
            .count();
    }
    (added, changed, removed)
}
