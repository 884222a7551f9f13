//! The checkpoint that makes a campaign resumable, and the lock that gives a profile one
//! campaign at a time. Each finished shape is appended to the profile folder's checkpoint
//! and synced before the next starts, so a campaign stopped in any way (killed, a closed
//! output pipe, a shape that failed) resumes where it stopped when the same command is run
//! again, or by one whose shapes include all of its own (a miss folder only grows: the
//! shapes recorded since are added to it); a command without some of its shapes refuses
//! and prints what finishes it and what discards it.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::{self, Folder};
use tunedblas_core::share_lock;

/// The first checkpoint line: what the campaign was started with. A rerun resumes the
/// checkpoint when `build` is the same and its shapes include every one of `shapes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub started: String,
    /// The library build (its sha256, and for `lt tune` the rank).
    pub build: String,
    /// The campaign's own name, recorded with it in `provenance.json`: a rerun after a
    /// commit that was killed once that record was in place finds it there and does not
    /// record the campaign again (`started` is not enough: two campaigns can start in one
    /// second). Absent in checkpoints of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
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
            id: Some(new_id()),
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

/// A name no other campaign has: this process and the clock, to the nanosecond.
fn new_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}-{:x}", std::process::id(), nanos)
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

/// An unfinished campaign as its checkpoint holds it: the header, and each finished shape
/// with its line as written.
type Unfinished<O> = (Header, Vec<(String, O)>);

/// Reads an unfinished campaign's checkpoint: its header and the shapes it finished, each
/// with its line as written. A torn last line (killed mid-write) is ignored; that shape is
/// simply tuned again.
fn read_checkpoint<O: DeserializeOwned>(path: &Path) -> Result<Option<Unfinished<O>>> {
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
        .filter_map(|l| Some((l.to_string(), serde_json::from_str::<O>(l).ok()?)))
        .collect();
    Ok(Some((header, done)))
}

/// The shapes of the unfinished campaign of `build` in the profile folder `dir` (none when
/// there is none, or it is of another build). A campaign keeps them in its plan even where
/// the profile has rows for them now (a merge while it was stopped), so that it can resume.
pub fn pending_shapes(dir: &Path, build: &str) -> Vec<String> {
    match read_checkpoint::<serde_json::Value>(&dir.join(CHECKPOINT_FILE)) {
        Ok(Some((h, _))) if h.build == build => h.shapes,
        _ => vec![],
    }
}

/// The checkpoint's name in the profile folder.
const CHECKPOINT_FILE: &str = ".campaign.partial.jsonl";

/// The refusal of a campaign whose profile folder holds another one, unfinished, that it
/// cannot resume (another build, or shapes this command does not have): what finishes that
/// one and what discards it, each as a command to run. The command that started it
/// finishes it only with its inputs as they were: the same command may now list other
/// shapes (a miss file removed), so the refusal says which of its shapes are missing.
fn unfinished(path: &Path, old: &Header, new: &Header, done: usize) -> Error {
    let mut what = format!(
        "an unfinished campaign of other shapes ({done} of {} done) is in {}",
        old.shapes.len(),
        path.display()
    );
    if old.build != new.build {
        what.push_str(&format!(", of another build ({})", old.build));
    } else {
        let missing: Vec<&str> = old
            .shapes
            .iter()
            .filter(|s| !new.shapes.contains(s))
            .map(String::as_str)
            .collect();
        let shown = missing
            .iter()
            .take(3)
            .copied()
            .collect::<Vec<_>>()
            .join("; ");
        let more = if missing.len() > 3 { "; ..." } else { "" };
        what.push_str(&format!(
            ": {} of its shapes are not among this command's ({shown}{more}), so this command cannot resume it",
            missing.len()
        ));
    }
    let finish = match old.rerun() {
        Some(cmd) => format!(
            "to finish it, rerun the command that started it, with its inputs as they were \
             (it resumes with more shapes too, never with fewer):\n    {cmd}"
        ),
        None => "to finish it, rerun the command that started it (with the same inputs)".into(),
    };
    // A shard is every N-th shape of the sorted list: shapes added since move every
    // shard's share, so the command that started it cannot resume it either.
    let finish = match new.command.as_deref() {
        Some(c) if c.contains("--shard") && old.build == new.build => {
            "it is a shard (--shard I/N: every N-th shape of the sorted list), and shapes recorded since moved its share: finish it with its inputs as they were (a copy of them as they stood), or discard the campaign on every shard (--fresh) and tune the grown list there".to_string()
        }
        _ => finish,
    };
    let discard = match new.rerun() {
        Some(cmd) => format!(
            "or discard it (its finished shapes too) and tune this command's shapes: rerun this command with --fresh:\n    {cmd} --fresh"
        ),
        None => "or discard it: add --fresh to this command".into(),
    };
    Error::failed(format!("{what}\n{finish}\n{discard}"))
}

/// Appends one line and syncs it: after this returns the shape survives a kill.
fn append_line(file: &mut std::fs::File, line: &str, path: &Path) -> Result<()> {
    file.write_all(format!("{line}\n").as_bytes())
        .and_then(|_| file.sync_data())
        .map_err(|e| Error::cannot("write the checkpoint", path, e))
}

/// Writes `text` to `path` by a synced temporary renamed over it: the checkpoint is the old
/// one or the new one, never a mix, whenever the command is killed.
fn replace_synced(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("jsonl.tmp");
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::cannot("write the checkpoint", path, e));
    }
    Ok(())
}

/// The append-only, synced record of finished shapes that makes a campaign resumable: one
/// [`Header`] line, then one JSON line per finished shape (the campaign's outcome), in the
/// profile folder. Hold [`lock`] while it is open.
pub struct Checkpoint {
    path: PathBuf,
    file: std::fs::File,
    pub started: String,
    /// The campaign's name ([`Header::id`]; none in a checkpoint of an older build).
    pub id: Option<String>,
    /// How many shapes the resumed campaign had before this command added its new ones
    /// (none: started now, or resumed with the same shapes).
    pub grown_from: Option<usize>,
}

impl Checkpoint {
    /// Opens the checkpoint in the profile folder `dir` for `header`: resumes it when it
    /// was started with the same build and every one of its shapes is among `header`'s
    /// (returning what it finished; the shapes `header` adds are the campaign's from now
    /// on), else starts afresh, which an unfinished campaign allows only with `fresh`.
    pub fn open<O: DeserializeOwned>(
        dir: &Path,
        header: Header,
        fresh: bool,
    ) -> Result<(Checkpoint, Vec<O>)> {
        std::fs::create_dir_all(dir).map_err(|e| Error::cannot("create", dir, e))?;
        let path = dir.join(CHECKPOINT_FILE);
        let resumable = |old: &Header| {
            old.build == header.build && old.shapes.iter().all(|s| header.shapes.contains(s))
        };
        let (old, done) = match read_checkpoint::<O>(&path)? {
            Some((old, done)) if resumable(&old) => (Some(old), done),
            Some((old, done)) if !fresh => {
                return Err(unfinished(&path, &old, &header, done.len()))
            }
            _ => (None, vec![]),
        };
        let grown_from = old
            .as_ref()
            .map(|o| o.shapes.len())
            .filter(|&n| n < header.shapes.len());
        // Resumed: its name and start stay, its shapes become this command's (they include
        // its own), and the command that finishes it is this one.
        let header = Header {
            started: old
                .as_ref()
                .map_or(header.started.clone(), |o| o.started.clone()),
            id: old.as_ref().map_or(header.id.clone(), |o| o.id.clone()),
            ..header
        };
        // Rewritten whole (a torn last line is left out), then appended to.
        let mut text = serde_json::to_string(&header).expect("plain struct") + "\n";
        for (line, _) in &done {
            text.push_str(line);
            text.push('\n');
        }
        replace_synced(&path, &text)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| Error::cannot("open", &path, e))?;
        Ok((
            Checkpoint {
                path,
                file,
                started: header.started,
                id: header.id,
                grown_from,
            },
            done.into_iter().map(|(_, o)| o).collect(),
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
