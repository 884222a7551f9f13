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

/// The lock, held until dropped.
#[derive(Debug)]
pub struct ShareLock {
    dir: PathBuf,
}

impl Drop for ShareLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(self.dir.join(OWNER));
        let _ = fs::remove_dir(&self.dir);
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
}
