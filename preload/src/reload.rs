//! Hot reload, for every backend: a running process serves what is committed to the
//! profile store for its build (by `tunedblas tune`, `merge`, `lt tune`, `profiles ...`, or
//! by hand) within a few seconds, without a restart. One mechanism; a backend supplies how
//! it opens and publishes its rows ([`Reload`]: `rocblas/reload.rs`, `lt/reload.rs`).
//!
//! - **When.** The status tick (`status.rs`: on a thread making GEMMs, about once a second
//!   while calls arrive) asks each started backend's [`Watch::check`], which looks at the
//!   store at most every two seconds (less often where a look takes more than 1/50 of
//!   that): the `stat` of `profiles.json` and of every file in the chosen profile's folder
//!   ([`Seen`]). Nothing changed: nothing else is done. The
//!   served path pays one load for all of this: the pointer to the rows served now.
//! - **What.** When the store changed, the profile is chosen again exactly as at start-up
//!   (by the build's sha256, or `TUNEDBLAS_PROFILE`), and its tables opened as then: new,
//!   changed and removed rows are served from the next call on (with every index the
//!   backend keeps over them built again: the Lt tables' call keys and their repeated-miss
//!   cache start afresh with the new table), and one line says what changed
//!   (`profile X reloaded: +5 rows, 1 changed, 0 removed`; nothing when no row changed, as
//!   when only a file's time did). A store that now names no profile for this build
//!   (another build's rows, a removed entry, a registry that does not parse) never serves
//!   another build's rows: the rows loaded are kept until a restart, said once. A store
//!   read with more problems than the rows served had (a rank file cut short or not a
//!   regular file, rows that do not parse: a hand edit gone wrong, a full disk, a file
//!   planted) is not served in place of those rows: they stay, and one line says why,
//!   until the store changes again.
//! - **Safety.** The new rows are built aside and published with one atomic store; the old
//!   ones are never freed (a call in flight may be reading them; a reload happens only when
//!   the store changed). Only one thread looks at a time ([`ExitLock`], never waited for), a
//!   fork child takes the lock over, cancellation is held off while files are read, and the
//!   caller's `errno` is kept (the tick's guard). No thread, descriptor or allocation is
//!   added to a call's path.
//! - `TUNEDBLAS_RELOAD=0` turns it off (no [`Watch`] is made).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tunedblas_core::profile::REGISTRY_FILE;

use crate::lifecycle::{self, Config, ExitLock, NoCancel};
use crate::log::{debug, info};

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

/// A profile chosen and opened again, as at start-up.
pub struct Reopened<R> {
    /// The profile chosen (`None`: the store names none for this build now).
    pub name: Option<String>,
    /// Its folder (or file).
    pub dir: Option<PathBuf>,
    /// What start-up would have said (the selection's line).
    pub line: Option<String>,
    /// Problems met while reading (the first few are said).
    pub problems: Vec<String>,
    /// The backend's rows, not yet served.
    pub rows: R,
}

impl<R: Default> Reopened<R> {
    /// No profile chosen, no rows.
    pub fn none() -> Reopened<R> {
        Reopened {
            name: None,
            dir: None,
            line: None,
            problems: Vec::new(),
            rows: R::default(),
        }
    }
}

/// What a published reload changed on the calling device's rank.
pub struct Changed {
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
    pub device: i32,
}

/// What a backend supplies to the shared reload.
pub trait Reload {
    /// The rows as opened, before they are served.
    type Rows;
    /// What the backend's lines start with (`""`, `"hipBLASLt: "`).
    fn prefix(&self) -> &'static str;
    /// The name of the profile served now (`None`: none).
    fn served_name(&self) -> Option<&str>;
    /// Chooses the profile for the build `sha` again and opens it, exactly as start-up
    /// does; `chosen` hears the folder picked (if any) before anything in it is read.
    fn reopen(
        &self,
        cfg: &Config,
        sha: &str,
        chosen: &mut dyn FnMut(Option<&Path>),
    ) -> Reopened<Self::Rows>;
    /// Serves `rows` (of the profile `name`) from the next call on, the old rows left
    /// allocated; returns what changed against the rows served until now.
    fn publish(&self, name: &str, rows: Self::Rows) -> Changed;
}

/// What the process last saw of the store, and the folder its rows come from.
struct State {
    seen: Seen,
    dir: Option<PathBuf>,
    /// The problems met reading the rows served now (how many).
    problems: usize,
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
    /// The watch of a backend that started with the build `sha`'s profile from `dir`,
    /// whose reading met `problems` problems; `None` when reloading is off
    /// (`TUNEDBLAS_RELOAD=0`) or the build is not known.
    pub fn new(
        cfg: &Config,
        sha: Option<&str>,
        dir: Option<&Path>,
        problems: usize,
    ) -> Option<Watch> {
        let sha = sha.filter(|_| cfg.reload)?;
        Some(Watch {
            cfg: cfg.clone(),
            sha: sha.to_owned(),
            state: ExitLock::new(State {
                seen: Seen::of(&cfg.profile_dir, dir),
                dir: dir.map(Path::to_path_buf),
                problems,
                gone_said: false,
            }),
            next_ns: AtomicU64::new(lifecycle::monotonic_ns() + EVERY_NS),
        })
    }

    /// Looks at the store if it is time, and serves what changed. See the module docs.
    pub fn check<R: Reload>(&self, rt: &R) {
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
        // A look that took long (a profile folder of thousands of files, slow storage) is
        // made less often: at most 1/PACE of a GEMM thread's time, as the other periodic
        // work (`recorder::paced`).
        let cost = lifecycle::monotonic_ns().saturating_sub(now);
        let paced = cost.saturating_mul(crate::recorder::PACE);
        if paced > EVERY_NS {
            self.next_ns
                .store(now.saturating_add(paced), Ordering::Relaxed);
        }
        if seen == state.seen {
            return;
        }
        // What the store looks like before its files are read: a change made while they are
        // read is then seen at the next look, and read again.
        let mut before = None;
        let opened = rt.reopen(&self.cfg, &self.sha, &mut |dir| {
            before = Some(Seen::of(&self.cfg.profile_dir, dir))
        });
        let prefix = rt.prefix();
        match (&opened.name, rt.served_name()) {
            (None, None) => {}
            (None, Some(name)) => {
                if !std::mem::replace(&mut state.gone_said, true) {
                    info!(
                        "{prefix}profile {name}: the store names no profile for this build any more ({}); the rows loaded are served until a restart",
                        opened.line.as_deref().unwrap_or("")
                    );
                }
            }
            (Some(name), old) => {
                for p in opened.problems.iter().take(5) {
                    info!("{p}");
                }
                let worse = opened.problems.len() > state.problems;
                if let (true, Some(was)) = (worse, old) {
                    info!(
                        "{prefix}profile {name} not reloaded: {} problems reading the store, where the rows served had {}; profile {was}'s rows loaded are still served",
                        opened.problems.len(),
                        state.problems
                    );
                } else {
                    let what = match old {
                        Some(was) if was == name => format!("profile {name} reloaded"),
                        Some(was) => format!("profile {name} now served in place of {was}"),
                        None => format!("profile {name} now served"),
                    };
                    let same = old == Some(name.as_str());
                    let c = rt.publish(name, opened.rows);
                    state.problems = opened.problems.len();
                    state.gone_said = false;
                    let line = format!(
                        "{prefix}{what}: +{} rows, {} changed, {} removed (rank {})",
                        c.added, c.changed, c.removed, c.device
                    );
                    if same && c.added + c.changed + c.removed == 0 {
                        debug!("{line}");
                    } else {
                        info!("{line}");
                    }
                }
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

/// A table's rows as the reload's line counts them: keys and what each serves.
pub trait Rows {
    type Key;
    type Action: PartialEq;
    /// Every row's key and action.
    fn each(&self, f: &mut dyn FnMut(&Self::Key, &Self::Action));
    /// The action of `key`'s own row.
    fn action(&self, key: &Self::Key) -> Option<&Self::Action>;
}

/// Rows of `new` not in `old`, in both with another action, and in `old` only.
pub fn diff<T: Rows>(old: Option<&T>, new: Option<&T>) -> (usize, usize, usize) {
    let (mut added, mut changed, mut removed) = (0, 0, 0);
    if let Some(n) = new {
        n.each(&mut |k, a| match old.and_then(|o| o.action(k)) {
            None => added += 1,
            Some(o) if o != a => changed += 1,
            Some(_) => {}
        });
    }
    if let Some(o) = old {
        o.each(&mut |k, _| {
            if new.and_then(|n| n.action(k)).is_none() {
                removed += 1;
            }
        });
    }
    (added, changed, removed)
}
