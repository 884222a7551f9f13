//! The checkpoint that makes a campaign resumable, and the lock that gives a profile one
//! campaign at a time. Each finished shape is appended to the profile folder's checkpoint
//! and synced before the next starts, so a campaign stopped in any way (killed, a closed
//! output pipe, a shape that failed) resumes where it stopped when the same command is run
//! again; a command with other inputs refuses and prints the one that finishes it.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::{self, Folder};
use tunedblas_core::share_lock;

/// The first checkpoint line: what the campaign was started with. A rerun resumes the
/// checkpoint when `build` and `shapes` are the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub started: String,
    /// The library build (its sha256, and for `lt tune` the rank).
    pub build: String,
    /// Every shape of this campaign (after sharding), in order.
    pub shapes: Vec<String>,
    /// The command line that started it and the folder it ran in, so that a `tune` with
    /// other inputs, which must refuse, can say exactly what to rerun (absent in
    /// checkpoints of older builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
}

impl Header {
    /// The header of a campaign this process starts now, with its own command line.
    pub fn new(build: String, shapes: Vec<String>) -> Header {
        Header {
            started: store::utc_now(),
            build,
            shapes,
            command: Some(invocation(std::env::args())),
            dir: std::env::current_dir().ok(),
        }
    }

    /// What to run to finish this campaign: its command, in its folder.
    fn rerun(&self) -> Option<String> {
        let command = self.command.as_deref()?;
        Some(match &self.dir {
            Some(d) => format!("cd {} && {command}", shell_word(&d.to_string_lossy())),
            None => command.to_string(),
        })
    }
}

/// A command line as a shell reads it back: `tunedblas` and the arguments, each quoted
/// where it needs to be (the program's own path is left out: the user's shell finds it).
fn invocation(args: impl Iterator<Item = String>) -> String {
    std::iter::once("tunedblas".to_string())
        .chain(args.skip(1).map(|a| shell_word(&a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `w` as one POSIX shell word: unchanged when it is plain, else single-quoted.
pub fn shell_word(w: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:,=+@%".contains(c);
    if !w.is_empty() && w.chars().all(plain) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// Reads an unfinished campaign's checkpoint: its header and the shapes it finished. A
/// torn last line (killed mid-write) is ignored; that shape is simply tuned again.
fn read_checkpoint<O: DeserializeOwned>(path: &Path) -> Result<Option<(Header, Vec<O>)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::cannot("read", path, e)),
    };
    let mut lines = text.lines();
    let Some(header) = lines
        .next()
        .and_then(|l| serde_json::from_str::<Header>(l).ok())
    else {
        return Ok(None);
    };
    let done = lines
        .filter_map(|l| serde_json::from_str::<O>(l).ok())
        .collect();
    Ok(Some((header, done)))
}

/// The refusal of a campaign whose profile folder holds another one, unfinished: what to
/// rerun to finish that one, or how to discard it.
fn unfinished(path: &Path, old: &Header, done: usize) -> Error {
    let what = format!(
        "an unfinished campaign of other shapes ({done} of {} done) is in {}",
        old.shapes.len(),
        path.display()
    );
    let finish = match old.rerun() {
        Some(cmd) => format!("to finish it, rerun the command that started it:\n    {cmd}"),
        None => "to finish it, rerun the command that started it (with the same inputs)".into(),
    };
    Error::failed(format!(
        "{what}\n{finish}\nor discard it: add --fresh to this command"
    ))
}

/// Appends one line and syncs it: after this returns the shape survives a kill.
fn append_line(file: &mut std::fs::File, line: &str, path: &Path) -> Result<()> {
    file.write_all(format!("{line}\n").as_bytes())
        .and_then(|_| file.sync_data())
        .map_err(|e| Error::cannot("write the checkpoint", path, e))
}

/// The append-only, synced record of finished shapes that makes a campaign resumable: one
/// [`Header`] line, then one JSON line per finished shape (the campaign's outcome), in the
/// profile folder. Hold [`lock`] while it is open.
pub struct Checkpoint {
    path: PathBuf,
    file: std::fs::File,
    pub started: String,
}

impl Checkpoint {
    /// Opens the checkpoint in the profile folder `dir` for `header`: resumes it when it
    /// was started with the same build and shapes (returning what it finished), else starts
    /// afresh, which an unfinished campaign with other shapes allows only with `fresh`.
    pub fn open<O: DeserializeOwned>(
        dir: &Path,
        header: Header,
        fresh: bool,
    ) -> Result<(Checkpoint, Vec<O>)> {
        std::fs::create_dir_all(dir).map_err(|e| Error::cannot("create", dir, e))?;
        let path = dir.join(".campaign.partial.jsonl");
        let (started, done) = match read_checkpoint(&path)? {
            Some((old, done)) if old.build == header.build && old.shapes == header.shapes => {
                (old.started, done)
            }
            Some((old, done)) if !fresh => return Err(unfinished(&path, &old, done.len())),
            _ => (header.started.clone(), vec![]),
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::cannot("open", &path, e))?;
        if done.is_empty() {
            file.set_len(0)
                .map_err(|e| Error::cannot("reset", &path, e))?;
            let h = Header {
                started: started.clone(),
                ..header
            };
            append_line(
                &mut file,
                &serde_json::to_string(&h).expect("plain struct"),
                &path,
            )?;
        }
        Ok((
            Checkpoint {
                path,
                file,
                started,
            },
            done,
        ))
    }

    pub fn append<O: Serialize>(&mut self, o: &O) -> Result<()> {
        append_line(
            &mut self.file,
            &serde_json::to_string(o).expect("plain struct"),
            &self.path,
        )
    }

    /// The finished checkpoint becomes the campaign's full record in `campaigns/`, under a
    /// name no earlier record has (two campaigns can start in one second): its header and
    /// `outcomes` as they stand at the end (the fresh process's and qualification's
    /// verdicts included), each unchanged one as the checkpoint's line, verbatim (a float
    /// read back and written again need not give the same digits).
    pub fn retire<O: Serialize>(self, dir: &Path, outcomes: &[O]) {
        let dir = dir.join("campaigns");
        let _ = std::fs::create_dir_all(&dir);
        let stem = self.started.replace(':', "");
        let mut record = dir.join(format!("{stem}.jsonl"));
        // No other campaign of this folder runs meanwhile (the campaign lock).
        for n in 2..1000 {
            if !record.exists() {
                break;
            }
            record = dir.join(format!("{stem}-{n}.jsonl"));
        }
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let mut old = text.lines();
        let header = old.next().map(str::to_string);
        let old: Vec<(&str, serde_json::Value)> = old
            .filter_map(|l| Some((l, serde_json::from_str(l).ok()?)))
            .collect();
        let lines = header.into_iter().chain(outcomes.iter().map(|o| {
            let now = serde_json::to_value(o).expect("plain struct");
            match old.iter().find(|(_, v)| *v == now) {
                Some((line, _)) => line.to_string(),
                None => serde_json::to_string(o).expect("plain struct"),
            }
        }));
        let text: String = lines.map(|l| l + "\n").collect();
        if std::fs::write(&record, text).is_err() {
            let _ = std::fs::remove_file(&record);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The profile folder's campaign lock, held until dropped: the local `flock` on
/// `.campaign.lock`, which queues the campaigns of one machine (and is dropped by the kernel
/// when the process dies), and the lock folder `.campaign.lock.d` ([`tunedblas_core::share_lock`]),
/// which holds across the machines of a shared filesystem whatever its `flock` does (NFS
/// mounted `nolock`, `local_lock`), kept fresh while the campaign runs.
pub struct CampaignLock {
    _shared: share_lock::KeptLock,
    _local: std::fs::File,
}

/// Takes the profile folder's campaign lock ([`CampaignLock`]), waiting while another `tune`
/// of the profile holds it, on this machine or another sharing the folder. A campaign owns
/// the folder's one checkpoint, so two at once would mix their shapes in it; waiting
/// instead lets both finish, in turn.
pub fn lock(folder: &Folder, quiet: bool) -> Result<CampaignLock> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(&folder.dir).map_err(|e| Error::cannot("create", &folder.dir, e))?;
    let path = folder.dir.join(".campaign.lock");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| Error::cannot("open", &path, e))?;
    let waiting = |whom: &str| {
        if !quiet {
            eprintln!(
                "tunedblas: another tune of '{}' is running{whom}; waiting for it to finish ({})",
                folder.name,
                path.display()
            );
        }
    };
    let cannot = |e| Error::cannot("lock", &path, e);
    if share_lock::flock_exclusive(&file, false).map_err(cannot)? == share_lock::Flock::Busy {
        waiting("");
        share_lock::flock_exclusive(&file, true).map_err(cannot)?;
    }
    let shared = folder.dir.join(".campaign.lock.d");
    let take = |wait| {
        share_lock::acquire_kept(
            &shared,
            wait,
            share_lock::STALE_AFTER,
            share_lock::HEARTBEAT,
        )
    };
    let held = match take(std::time::Duration::ZERO) {
        Ok(held) => held,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            // The message names the holder ("... is held by process P of host H ...").
            let whom = e.to_string();
            let whom = whom.split_once(" is held by ").map_or("", |(_, w)| w);
            let whom = whom.split_once(';').map_or(whom, |(w, _)| w);
            waiting(&format!(" ({whom})"));
            take(std::time::Duration::MAX).map_err(|e| Error::cannot("lock", &shared, e))?
        }
        Err(e) => return Err(Error::cannot("lock", &shared, e)),
    };
    Ok(CampaignLock {
        _shared: held,
        _local: file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_to_rerun_reads_back_as_the_same_words() {
        let args = ["/opt/bin/tunedblas", "tune", "--lib", "/a b/lib.so", "it's"];
        assert_eq!(
            invocation(args.iter().map(|s| s.to_string())),
            r"tunedblas tune --lib '/a b/lib.so' 'it'\''s'"
        );
        assert_eq!(shell_word("f16:TN:8:8:8"), "f16:TN:8:8:8");
        assert_eq!(shell_word(""), "''");
        let h = Header {
            dir: Some("/x y".into()),
            ..Header::new("b".into(), vec![])
        };
        assert!(h.rerun().unwrap().starts_with("cd '/x y' && tunedblas"));
    }
}
