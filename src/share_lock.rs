//! A lock that holds across the machines sharing a folder, for the profile registry on a
//! shared filesystem (NFS and the like).
//!
//! `flock` alone does not do it: on NFS it is only as good as the mount (`nolock`, or
//! `local_lock=flock|all`, makes it local to each client, so two machines both "hold" it and
//! one registry update is lost), and some shared filesystems refuse it outright. What every
//! one of them does atomically on the server is creating a folder: `mkdir` of a name that
//! exists fails for everyone but one caller. So the lock is a folder beside the file it
//! guards (`.profiles.json.lock.d`), made by the holder, with a file inside naming the holder
//! (`<host>-<pid>-<start> <unix seconds>`, [`crate::process`]) and removed when it is done.
//!
//! A holder can die holding it. A lock left by a process of this host that no longer runs is
//! broken at once; one whose holder cannot be seen from here (another host) is broken when it
//! is older than [`STALE_AFTER`], longer than any registry update takes (they write a few
//! files; a merge of large profiles, seconds). Breaking renames the folder away first:
//! `rename` is atomic too, so of several machines breaking the same stale lock exactly one
//! succeeds, and the others see the name free (or freshly taken) and start over.
//!
//! A lock held for longer than that (a tuning campaign's, for hours) is kept fresh by its
//! holder ([`acquire_kept`]): a thread writes the time into the owner file again every
//! [`HEARTBEAT`], so only a holder that stopped beating for [`STALE_AFTER`] is taken to be
//! dead.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::process::{self, State, Writer};

/// A lock held this long by a process this host cannot see is taken to be dead.
pub const STALE_AFTER: Duration = Duration::from_secs(600);

/// A lock folder whose holder has not written its name after this long is dead too.
const UNNAMED_AFTER: Duration = Duration::from_secs(60);

const OWNER: &str = "owner";

/// How an exclusive `flock` went ([`flock_exclusive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flock {
    Held,
    /// Another holder has it (only when not waiting).
    Busy,
    /// The filesystem has no `flock` (or no lock daemon): the lock folder alone serialises.
    Unsupported,
}

/// An exclusive `flock` on `file`, waiting for it when `wait`, retried when a signal
/// interrupts it: the local half of the registry's and the campaign's locks (it queues the
/// writers of one machine and is dropped by the kernel when the process dies).
pub fn flock_exclusive(file: &fs::File, wait: bool) -> io::Result<Flock> {
    use std::os::fd::AsRawFd;
    let how = if wait {
        libc::LOCK_EX
    } else {
        libc::LOCK_EX | libc::LOCK_NB
    };
    loop {
        // SAFETY: flock on a descriptor the caller owns.
        if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
            return Ok(Flock::Held);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if !wait => return Ok(Flock::Busy),
            Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS) => return Ok(Flock::Unsupported),
            _ => return Err(e),
        }
    }
}

/// How often a kept lock ([`acquire_kept`]) writes its time again: well inside
/// [`STALE_AFTER`], so a missed beat or two (a stalled filesystem) breaks nothing.
pub const HEARTBEAT: Duration = Duration::from_secs(60);

/// The lock, held until dropped.
#[derive(Debug)]
pub struct ShareLock {
    dir: PathBuf,
}

impl ShareLock {
    /// Whether the owner file still names this process.
    fn mine(&self) -> bool {
        holder(&self.dir).is_some_and(|(w, _)| Writer::parse(&me()).is_some_and(|m| m == w))
    }

    /// Writes this holder's name with the time now into the owner file again (a new file
    /// renamed over the old, so a reader never sees half a line), so other hosts see it
    /// alive. Only while the lock is still this process's: one broken by another machine
    /// (taken for dead) and taken again is left to its new holder.
    pub fn refresh(&self) -> io::Result<()> {
        if !self.mine() {
            return Err(io::Error::other(format!(
                "{} is no longer held by this process",
                self.dir.display()
            )));
        }
        let me = me();
        let tmp = self.dir.join(format!(".{OWNER}.{}", std::process::id()));
        let mut f = fs::File::create(&tmp)?;
        f.write_all(format!("{me} {}\n", now_secs()).as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, self.dir.join(OWNER))
    }
}

/// A [`ShareLock`] kept fresh by a thread until dropped ([`acquire_kept`]).
#[derive(Debug)]
pub struct KeptLock {
    // Dropped first: the beating thread ends (its channel closes) before the lock goes.
    stop: Option<std::sync::mpsc::Sender<()>>,
    beat: Option<std::thread::JoinHandle<()>>,
    _lock: std::sync::Arc<ShareLock>,
}

impl Drop for KeptLock {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(b) = self.beat.take() {
            let _ = b.join();
        }
    }
}

/// [`acquire`], then a thread that [`ShareLock::refresh`]es the lock every `every` until the
/// returned lock is dropped: for a holder that keeps it longer than `stale_after`.
pub fn acquire_kept(
    dir: &Path,
    wait: Duration,
    stale_after: Duration,
    every: Duration,
) -> io::Result<KeptLock> {
    let lock = std::sync::Arc::new(acquire(dir, wait, stale_after)?);
    let (stop, beats) = std::sync::mpsc::channel::<()>();
    let held = lock.clone();
    let beat = std::thread::Builder::new()
        .name("tunedblas-lock-heartbeat".into())
        .spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = beats.recv_timeout(every) {
                let _ = held.refresh();
            }
        })?;
    Ok(KeptLock {
        stop: Some(stop),
        beat: Some(beat),
        _lock: lock,
    })
}

impl Drop for ShareLock {
    /// Frees the name, unless another holder took it meanwhile (this one was broken as
    /// dead): theirs is left alone.
    fn drop(&mut self) {
        if self.mine() {
            let _ = fs::remove_file(self.dir.join(OWNER));
            let _ = fs::remove_dir(&self.dir);
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// This process as a lock holder: `<host>-<pid>-<start>`.
fn me() -> String {
    format!(
        "{}-{}-{}",
        process::host_name(),
        std::process::id(),
        process::start_ticks(None).unwrap_or(0)
    )
}

/// Who holds the lock folder `dir`, and since when (unix seconds).
fn holder(dir: &Path) -> Option<(Writer, u64)> {
    let text = fs::read_to_string(dir.join(OWNER)).ok()?;
    let (who, since) = text.trim().split_once(' ')?;
    Some((Writer::parse(who)?, since.parse().ok()?))
}

/// Whether the lock folder `dir` is held by no one alive (see the module docs), and in
/// words who holds it otherwise.
fn stale(dir: &Path, stale_after: Duration) -> Result<bool, String> {
    match holder(dir) {
        Some((w, since)) => {
            let age = now_secs().saturating_sub(since);
            match w.state(&process::host_name()) {
                State::Gone => Ok(true),
                State::Running => Err(format!("process {} of this host", w.pid)),
                State::Elsewhere if age > stale_after.as_secs() => Ok(true),
                State::Elsewhere => Err(format!(
                    "process {} of host {} (for {age} s; taken to be dead after {} s)",
                    w.pid,
                    w.host,
                    stale_after.as_secs()
                )),
            }
        }
        // Made, but its holder's name not yet written (or unreadable).
        None => {
            let age = fs::metadata(dir)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok());
            match age {
                Some(a) if a > UNNAMED_AFTER => Ok(true),
                Some(_) => Err("a holder still writing its name".into()),
                None => Ok(false), // gone meanwhile: try again
            }
        }
    }
}

/// Takes the lock folder `dir`, waiting while a live holder has it, for at most `wait`;
/// a dead holder's lock is broken (`stale_after`: see [`STALE_AFTER`]).
pub fn acquire(dir: &Path, wait: Duration, stale_after: Duration) -> io::Result<ShareLock> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match fs::create_dir(dir) {
            Ok(()) => {
                let lock = ShareLock {
                    dir: dir.to_path_buf(),
                };
                let mut f = fs::File::create(dir.join(OWNER))?;
                f.write_all(format!("{} {}\n", me(), now_secs()).as_bytes())?;
                f.sync_all()?;
                return Ok(lock);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        match stale(dir, stale_after) {
            Ok(true) => {
                // Renamed away first: of several breakers exactly one succeeds.
                let away = dir.with_extension(format!(
                    "broken-{}-{}",
                    me(),
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.subsec_nanos())
                ));
                if fs::rename(dir, &away).is_ok() {
                    let _ = fs::remove_dir_all(&away);
                }
                continue;
            }
            Ok(false) => continue,
            Err(who) if started.elapsed() >= wait => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "{} is held by {who}; waited {} s",
                        dir.display(),
                        started.elapsed().as_secs()
                    ),
                ))
            }
            Err(_) => {}
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "tunedblas-share-lock-{}-{name}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn plant(dir: &Path, owner: &str) {
        fs::create_dir(dir).unwrap();
        fs::write(dir.join(OWNER), owner).unwrap();
    }

    #[test]
    fn held_then_released() {
        let d = scratch("held").join("x.lock.d");
        let lock = acquire(&d, Duration::ZERO, STALE_AFTER).unwrap();
        let holder = holder(&d).unwrap().0;
        assert_eq!(holder.pid, std::process::id());
        let busy = acquire(&d, Duration::from_millis(30), STALE_AFTER).unwrap_err();
        assert_eq!(busy.kind(), io::ErrorKind::WouldBlock);
        assert!(busy.to_string().contains("of this host"), "{busy}");
        drop(lock);
        assert!(!d.exists());
        drop(acquire(&d, Duration::ZERO, STALE_AFTER).unwrap());
    }

    /// A lock left by a process of this host that no longer runs is broken at once.
    #[test]
    fn a_dead_holder_of_this_host_is_broken() {
        let d = scratch("dead").join("x.lock.d");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        plant(
            &d,
            &format!("{}-{pid}-1 {}", process::host_name(), now_secs()),
        );
        drop(acquire(&d, Duration::ZERO, STALE_AFTER).unwrap());
    }

    /// Another host's holder cannot be seen: waited for while young, broken when stale.
    #[test]
    fn another_hosts_lock_is_waited_for_until_stale() {
        let d = scratch("elsewhere").join("x.lock.d");
        plant(&d, &format!("other_node-4242-77 {}", now_secs()));
        let e = acquire(&d, Duration::from_millis(50), STALE_AFTER).unwrap_err();
        assert!(e.to_string().contains("host other_node"), "{e}");
        assert!(d.exists(), "a live lock is never broken");
        fs::write(
            d.join(OWNER),
            format!("other_node-4242-77 {}", now_secs() - 601),
        )
        .unwrap();
        drop(acquire(&d, Duration::ZERO, STALE_AFTER).unwrap());
        let parent = d.parent().unwrap();
        assert_eq!(
            fs::read_dir(parent).unwrap().count(),
            0,
            "the broken lock is gone"
        );
    }

    /// A kept lock writes its time again while held, so another host never takes a long
    /// holder (a campaign) for dead; dropping it ends the beat and frees the name.
    #[test]
    fn a_kept_lock_stays_fresh_until_dropped() {
        let d = scratch("kept").join("x.lock.d");
        let lock =
            acquire_kept(&d, Duration::ZERO, STALE_AFTER, Duration::from_millis(10)).unwrap();
        let (me, _) = holder(&d).unwrap();
        // Aged as a lock would be after an hour's campaign with no beat.
        fs::write(
            d.join(OWNER),
            format!("{} {}\n", super::me(), now_secs() - 3600),
        )
        .unwrap();
        let fresh = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            holder(&d).is_some_and(|(w, since)| w == me && now_secs() - since < 60)
        });
        assert!(fresh, "the heartbeat wrote the time again");
        drop(lock);
        assert!(!d.exists(), "released");
    }

    /// A lock broken by another machine (taken for dead) and taken again is not written over.
    #[test]
    fn a_refresh_leaves_a_lock_another_holder_took() {
        let d = scratch("taken").join("x.lock.d");
        let lock = acquire(&d, Duration::ZERO, STALE_AFTER).unwrap();
        let theirs = format!("other_node-4242-77 {}\n", now_secs());
        fs::write(d.join(OWNER), &theirs).unwrap();
        assert!(lock.refresh().is_err());
        assert_eq!(fs::read_to_string(d.join(OWNER)).unwrap(), theirs);
        drop(lock);
        assert_eq!(
            fs::read_to_string(d.join(OWNER)).unwrap(),
            theirs,
            "theirs is kept"
        );
    }
}
