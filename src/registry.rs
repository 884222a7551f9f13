//! The profile registry (`profiles.json`) and each profile's `provenance.json`.
//!
//! `profiles.json` maps profile names to the library build they were tuned on:
//!
//! ```json
//! {"$comment": "...",
//!  "profiles": {"rocm10-rocblas5.6": {"dir": "rocm10-rocblas5.6", "rocblas": "5.6.0.8d1ae90e",
//!               "lib_sha256": "c27e2252cc7a4b6e...", "arch": "gfx1030", ...}}}
//! ```
//!
//! Unknown fields, at the top and in each entry, are kept and written back, so a tool that
//! loads and saves the registry loses nothing another tool wrote. An entry with an invalid
//! name, a `dir` that is not one plain folder name, or no usable `lib_sha256` is reported in
//! [`Registry::errors`] and skipped; the other entries still load (and the skipped entry is
//! written back untouched on save). Profiles are data: a `dir` never leads outside the
//! folder that holds `profiles.json`.
//!
//! Writes are atomic: a temporary file in the same folder, fsync, rename, fsync of the
//! folder. Readers see the old file or the new one, never half of one. A [`Commit`]
//! replaces several files together: every temporary is written before the first rename, so
//! a failure (a full disk) leaves all of them as they were.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Shortest hash prefix a registry entry may record (the seed recorded 12 hex digits).
pub const MIN_SHA_PREFIX: usize = 12;

/// One profile: the folder holding its rank files and the build it was tuned on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileEntry {
    /// The profile's folder, one plain component relative to the registry's folder.
    pub dir: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rocblas: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rocm: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<String>,
    /// sha256 (hex) of the library file: all 64 digits, or a prefix of at least 12.
    pub lib_sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_per_rank: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub venv: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covers: Option<Vec<String>>,
    /// GPU architecture the rows were measured on, e.g. `gfx1030`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Every other field, kept as read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl ProfileEntry {
    /// The library the rows are for, where the entry says (`library`, written by the tuner
    /// for hipBLASLt and cuBLASLt; a rocBLAS entry says none).
    pub fn library(&self) -> Option<&str> {
        self.extra.get("library").and_then(Value::as_str)
    }

    /// A new entry for `dir` and a build hash; the other fields empty.
    pub fn new(dir: &str, lib_sha256: &str) -> ProfileEntry {
        ProfileEntry {
            dir: dir.to_string(),
            rocblas: None,
            rocm: None,
            torch: None,
            lib_sha256: lib_sha256.to_string(),
            rows_per_rank: None,
            venv: None,
            status: None,
            covers: None,
            arch: None,
            extra: BTreeMap::new(),
        }
    }

    /// The profile's folder, given the folder that holds `profiles.json`.
    pub fn path_in(&self, registry_dir: &Path) -> PathBuf {
        registry_dir.join(&self.dir)
    }

    /// Whether this entry names the build whose full sha256 is `sha` (lower-case hex).
    fn names_build(&self, sha: &str) -> bool {
        let mine = self.lib_sha256.to_ascii_lowercase();
        mine == sha || (mine.len() >= MIN_SHA_PREFIX && mine.len() < 64 && sha.starts_with(&mine))
    }

    fn check(&self) -> Result<(), String> {
        check_dir(&self.dir)?;
        let sha = &self.lib_sha256;
        if sha.len() < MIN_SHA_PREFIX
            || sha.len() > 64
            || !sha.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(format!(
                "lib_sha256 {sha:?} must be the library's sha256 (64 hex digits) or a prefix of at least {MIN_SHA_PREFIX}"
            ));
        }
        Ok(())
    }
}

/// A profile name: letters, digits and `.`, `-`, `_`, `+`, not starting with `.`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'));
    if name.is_empty() || name.len() > 128 || name.starts_with('.') || !ok_chars {
        return Err(format!(
            "profile name {name:?} must be 1-128 letters, digits, '.', '-', '_' or '+', not starting with '.'"
        ));
    }
    Ok(())
}

/// A profile `dir`: exactly one plain path component (no `/`, no `..`, not absolute).
pub fn check_dir(dir: &str) -> Result<(), String> {
    let mut components = Path::new(dir).components();
    let single_normal = matches!(
        (components.next(), components.next()),
        (Some(Component::Normal(_)), None)
    );
    let bad_chars = dir.contains(['/', '\\', '\0']) || dir.chars().any(char::is_control);
    if !single_normal || bad_chars {
        return Err(format!(
            "dir {dir:?} must be a single folder name next to profiles.json (no '/', no '..', not absolute)"
        ));
    }
    Ok(())
}

/// An entry that was not loaded, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryError {
    pub file: PathBuf,
    pub name: String,
    pub reason: String,
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: profile {:?} skipped: {}; fix or remove it in that file",
            self.file.display(),
            self.name,
            self.reason
        )
    }
}

/// Why a registry or provenance file could not be loaded or saved.
#[derive(Debug)]
pub enum RegistryError {
    /// The file could not be read or written.
    Io { path: PathBuf, source: io::Error },
    /// Not JSON: the position of the first error.
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// JSON, but not the expected shape.
    Shape {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::Io { path, source } => write!(
                f,
                "{}: {source}; check that the file exists and is readable (and its folder writable, when saving)",
                path.display()
            ),
            RegistryError::Syntax { path, line, column, message } => write!(
                f,
                "{}:{line}:{column}: not valid JSON: {message}; fix the file by hand or restore it from version control (nothing was loaded from it)",
                path.display()
            ),
            RegistryError::Shape { path, line, column, message } => write!(
                f,
                "{}:{line}:{column}: unexpected content: {message}; expected {{\"profiles\": {{\"<name>\": {{\"dir\": \"<folder>\", \"lib_sha256\": \"<sha256>\", ...}}}}}} (provenance.json: one JSON object)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for RegistryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RegistryError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn json_error(path: &Path, e: serde_json::Error) -> RegistryError {
    let (line, column) = (e.line(), e.column());
    let full = e.to_string();
    let suffix = format!(" at line {line} column {column}");
    let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
    let path = path.to_path_buf();
    match e.classify() {
        serde_json::error::Category::Data => RegistryError::Shape {
            path,
            line,
            column,
            message,
        },
        serde_json::error::Category::Io => RegistryError::Io {
            path,
            source: io::Error::other(message),
        },
        _ => RegistryError::Syntax {
            path,
            line,
            column,
            message,
        },
    }
}

/// Reads a JSON file of the profile folder: only a regular file of at most
/// [`crate::profile::MAX_JSON_FILE_BYTES`] (a FIFO would block the reader, a device such as
/// `/dev/zero` would never end); a UTF-8 byte order mark at the start is skipped.
fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, RegistryError> {
    let bytes =
        crate::profile::read_regular(path, crate::profile::MAX_JSON_FILE_BYTES).map_err(|e| {
            RegistryError::Io {
                path: path.to_path_buf(),
                source: e.into(),
            }
        })?;
    let json = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&bytes);
    serde_json::from_slice(json).map_err(|e| json_error(path, e))
}

/// The on-disk shape of `profiles.json`.
#[derive(Default, Serialize, Deserialize)]
struct RegistryFile {
    #[serde(rename = "$comment", default, skip_serializing_if = "Option::is_none")]
    comment: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, Value>,
    #[serde(flatten)]
    extra: BTreeMap<String, Value>,
}

/// Which profile names a build.
#[derive(Debug, PartialEq)]
pub enum Match<'a> {
    Unique(&'a str, &'a ProfileEntry),
    None,
    /// Several entries name the build: a registry problem the operator must settle.
    Ambiguous(Vec<&'a str>),
}

/// `profiles.json`, loaded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Registry {
    /// The `$comment` field.
    pub comment: Option<String>,
    /// Unknown top-level fields, kept as read.
    pub extra: BTreeMap<String, Value>,
    entries: BTreeMap<String, ProfileEntry>,
    /// Entries that failed their checks, kept verbatim so a save does not destroy them.
    rejected: BTreeMap<String, Value>,
    errors: Vec<EntryError>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Loads `profiles.json`. Syntax errors name the file, line and column; invalid entries
    /// are skipped and listed in [`Registry::errors`].
    pub fn load(path: &Path) -> Result<Registry, RegistryError> {
        let file: RegistryFile = read_json(path)?;
        let mut reg = Registry {
            comment: file.comment,
            extra: file.extra,
            ..Registry::default()
        };
        for (name, value) in file.profiles {
            let checked = check_name(&name).and_then(|()| {
                let entry = ProfileEntry::deserialize(&value).map_err(|e| e.to_string())?;
                entry.check()?;
                Ok(entry)
            });
            match checked {
                Ok(entry) => {
                    reg.entries.insert(name, entry);
                }
                Err(reason) => {
                    reg.errors.push(EntryError {
                        file: path.to_path_buf(),
                        name: name.clone(),
                        reason,
                    });
                    reg.rejected.insert(name, value);
                }
            }
        }
        Ok(reg)
    }

    /// Writes the registry atomically as pretty JSON, keys in a stable order.
    pub fn save_atomic(&self, path: &Path) -> Result<(), RegistryError> {
        let text = self.to_json(path)?;
        write_atomic(path, text.as_bytes()).map_err(|source| RegistryError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The text [`Registry::save_atomic`] writes (`path` only names the file in errors), for
    /// a [`Commit`] that replaces it together with other files.
    pub fn to_json(&self, path: &Path) -> Result<String, RegistryError> {
        let mut profiles: BTreeMap<String, Value> = self.rejected.clone();
        for (name, entry) in &self.entries {
            let value = serde_json::to_value(entry).map_err(|e| RegistryError::Io {
                path: path.to_path_buf(),
                source: io::Error::other(e),
            })?;
            profiles.insert(name.clone(), value);
        }
        let file = RegistryFile {
            comment: self.comment.clone(),
            profiles,
            extra: self.extra.clone(),
        };
        json_text(path, &file)
    }

    /// Loads the registry at `path` under an exclusive lock, lets `f` change it, and saves
    /// it before the lock is released. Concurrent updaters (several `tunedblas` processes
    /// or threads adding profiles at once) are serialised and each starts from what the
    /// previous one saved, so no entry is lost. A missing file starts empty; a file that
    /// does not load is an error and is left as it is. See [`with_lock`].
    pub fn update_locked<T>(
        path: &Path,
        f: impl FnOnce(&mut Registry) -> T,
    ) -> Result<T, RegistryError> {
        Registry::try_update_locked(path, |r| Ok::<T, std::convert::Infallible>(f(r)))
            .map(|r| r.unwrap_or_else(|never| match never {}))
    }

    /// As [`Registry::update_locked`], for a change that can fail: the registry is saved
    /// only when `f` returns `Ok`.
    pub fn try_update_locked<T, E>(
        path: &Path,
        f: impl FnOnce(&mut Registry) -> Result<T, E>,
    ) -> Result<Result<T, E>, RegistryError> {
        update_file(
            path,
            Registry::load,
            Registry::new,
            Registry::save_atomic,
            f,
        )
    }

    /// Entries that were skipped at load time, and why.
    pub fn errors(&self) -> &[EntryError] {
        &self.errors
    }

    pub fn get(&self, name: &str) -> Option<&ProfileEntry> {
        self.entries.get(name)
    }

    /// All loaded entries, by name.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &ProfileEntry)> {
        self.entries.iter().map(|(n, e)| (n.as_str(), e))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds or replaces an entry after checking its name and fields; returns the old one.
    pub fn insert(
        &mut self,
        name: &str,
        entry: ProfileEntry,
    ) -> Result<Option<ProfileEntry>, String> {
        check_name(name)?;
        entry.check()?;
        self.rejected.remove(name);
        Ok(self.entries.insert(name.to_string(), entry))
    }

    /// Removes an entry (or a skipped one of that name).
    pub fn remove(&mut self, name: &str) -> Option<ProfileEntry> {
        self.rejected.remove(name);
        self.entries.remove(name)
    }

    /// The profile for the library whose full sha256 (64 hex digits) is `sha_hex`: an
    /// entry matches when its `lib_sha256` is the whole hash, or a prefix of at least 12
    /// digits of it. Any other argument matches nothing.
    pub fn find_by_sha(&self, sha_hex: &str) -> Match<'_> {
        let sha = sha_hex.trim().to_ascii_lowercase();
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Match::None;
        }
        let hits: Vec<(&str, &ProfileEntry)> = self
            .entries()
            .filter(|(_, e)| e.names_build(&sha))
            .collect();
        match hits.as_slice() {
            [] => Match::None,
            [(name, entry)] => Match::Unique(name, entry),
            _ => Match::Ambiguous(hits.iter().map(|(n, _)| *n).collect()),
        }
    }
}

/// A profile's `provenance.json`: any JSON object, with typed access to the fields
/// tunedblas reads and writes. Everything else is kept as read.
#[derive(Clone, Debug, PartialEq)]
pub struct Provenance {
    value: Map<String, Value>,
}

impl Default for Provenance {
    fn default() -> Self {
        Provenance::new()
    }
}

impl Provenance {
    pub fn new() -> Provenance {
        Provenance { value: Map::new() }
    }

    pub fn load(path: &Path) -> Result<Provenance, RegistryError> {
        match read_json::<Value>(path)? {
            Value::Object(value) => Ok(Provenance { value }),
            _ => Err(RegistryError::Shape {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                message: "provenance.json must hold one JSON object".to_string(),
            }),
        }
    }

    /// Writes atomically as pretty JSON (keys sorted).
    pub fn save_atomic(&self, path: &Path) -> Result<(), RegistryError> {
        write_json_atomic(path, &self.value)
    }

    /// The text [`Provenance::save_atomic`] writes (`path` only names the file in errors).
    pub fn to_json(&self, path: &Path) -> Result<String, RegistryError> {
        json_text(path, &self.value)
    }

    /// As [`Registry::update_locked`], for a `provenance.json` (a missing file starts empty).
    /// This locks the file's own `.provenance.json.lock`: for a standalone file. A profile
    /// in a store is changed together with its rank files and `profiles.json`, under the
    /// registry's lock, by one [`Commit`] (the harness's `Store::transaction`).
    pub fn update_locked<T>(
        path: &Path,
        f: impl FnOnce(&mut Provenance) -> T,
    ) -> Result<T, RegistryError> {
        Provenance::update_locked_or_new(path, |_| {}, f)
    }

    /// As [`Provenance::update_locked`]; `fresh` is called on the new object when the file
    /// does not exist yet (e.g. to stamp its creation).
    pub fn update_locked_or_new<T>(
        path: &Path,
        fresh: impl FnOnce(&mut Provenance),
        f: impl FnOnce(&mut Provenance) -> T,
    ) -> Result<T, RegistryError> {
        let new = || {
            let mut p = Provenance::new();
            fresh(&mut p);
            p
        };
        let f = |p: &mut Provenance| Ok::<T, std::convert::Infallible>(f(p));
        update_file(path, Provenance::load, new, Provenance::save_atomic, f)
            .map(|r| r.unwrap_or_else(|never| match never {}))
    }

    fn str_field(&self, k: &str) -> Option<&str> {
        self.value.get(k).and_then(Value::as_str)
    }

    /// sha256 of the library the rows were tuned on.
    pub fn sha256(&self) -> Option<&str> {
        self.str_field("sha256")
    }
    /// rocBLAS version string of that library.
    pub fn rocblas(&self) -> Option<&str> {
        self.str_field("rocblas")
    }
    /// The profile name this folder is registered under.
    pub fn profile(&self) -> Option<&str> {
        self.str_field("profile")
    }
    /// The tuning campaigns recorded so far (empty when the field is absent). The seed's
    /// files use `campaign` and `previous_campaigns` instead; those are kept as read.
    pub fn campaigns(&self) -> &[Value] {
        self.value
            .get("campaigns")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    pub fn set_sha256(&mut self, v: &str) {
        self.set("sha256", Value::from(v));
    }
    pub fn set_rocblas(&mut self, v: &str) {
        self.set("rocblas", Value::from(v));
    }
    pub fn set_profile(&mut self, v: &str) {
        self.set("profile", Value::from(v));
    }
    /// Appends a campaign record (creating the array, or replacing a non-array value).
    pub fn push_campaign(&mut self, campaign: Value) {
        match self.value.get_mut("campaigns") {
            Some(Value::Array(list)) => list.push(campaign),
            _ => {
                self.value
                    .insert("campaigns".to_string(), Value::Array(vec![campaign]));
            }
        }
    }

    /// Any field.
    pub fn get(&self, k: &str) -> Option<&Value> {
        self.value.get(k)
    }
    pub fn set(&mut self, k: &str, v: Value) {
        self.value.insert(k.to_string(), v);
    }
    /// The whole object.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.value
    }
}

/// The lock file that serialises updates of `path`: `.<name>.lock` in the same folder.
pub fn lock_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "registry".into(), |n| n.to_string_lossy());
    path.with_file_name(format!(".{name}.lock"))
}

/// The folder that locks `path` across machines: `.<name>.lock.d` ([`crate::share_lock`]).
pub fn share_lock_path(path: &Path) -> PathBuf {
    let mut p = lock_path(path).into_os_string();
    p.push(".d");
    PathBuf::from(p)
}

/// How long an update waits for another machine's: past [`crate::share_lock::STALE_AFTER`],
/// so a dead holder's lock is broken rather than waited out.
const SHARE_WAIT: std::time::Duration = std::time::Duration::from_secs(900);

/// Under the file's lock: reads it (or makes a new one when it does not exist), applies `f`,
/// and saves it when `f` returns `Ok`: the one read-modify-write of `profiles.json` and of a
/// standalone `provenance.json`.
fn update_file<F, T, E>(
    path: &Path,
    load: impl FnOnce(&Path) -> Result<F, RegistryError>,
    new: impl FnOnce() -> F,
    save: impl FnOnce(&F, &Path) -> Result<(), RegistryError>,
    f: impl FnOnce(&mut F) -> Result<T, E>,
) -> Result<Result<T, E>, RegistryError> {
    with_lock(path, || {
        let mut file = if path.exists() { load(path)? } else { new() };
        let out = f(&mut file);
        if out.is_ok() {
            save(&file, path)?;
        }
        Ok(out)
    })
}

/// Runs `f` holding the registry's lock: an exclusive `flock` on [`lock_path`]`(path)`
/// (created if needed, never through a symlink), which queues the updaters of one machine,
/// and then the lock folder [`share_lock_path`]`(path)`, which holds across the machines of
/// a shared filesystem whatever its `flock` does (NFS mounted `nolock` or with
/// `local_lock`, where `flock` is local to each client; filesystems that refuse `flock`,
/// where it is left out). Both are released when `f` returns; a process killed holding
/// them leaves the kernel to drop the first, and its lock folder is broken by the next
/// updater (at once on this host, after [`crate::share_lock::STALE_AFTER`] elsewhere).
pub fn with_lock<T>(
    path: &Path,
    f: impl FnOnce() -> Result<T, RegistryError>,
) -> Result<T, RegistryError> {
    with_lock_in(path, true, f)
}

/// [`with_lock`], with or without its `flock` (the tests take it away, as a filesystem
/// where it is local to each machine does).
pub(crate) fn with_lock_in<T>(
    path: &Path,
    flock: bool,
    f: impl FnOnce() -> Result<T, RegistryError>,
) -> Result<T, RegistryError> {
    use std::os::unix::fs::OpenOptionsExt;
    let lock = lock_path(path);
    let io_err = |source| RegistryError::Io {
        path: lock.clone(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&lock)
        .map_err(io_err)?;
    if flock {
        // Held, or a filesystem that has no flock: the lock folder alone serialises then.
        crate::share_lock::flock_exclusive(&file, true).map_err(io_err)?;
    }
    let shared = share_lock_path(path);
    let held = crate::share_lock::acquire(&shared, SHARE_WAIT, crate::share_lock::STALE_AFTER)
        .map_err(|source| RegistryError::Io {
            path: shared.clone(),
            source,
        })?;
    let out = f();
    drop(held);
    // Closing the descriptor releases the flock.
    drop(file);
    out
}

/// Pretty JSON with a final newline: what every registry and provenance file holds.
fn json_text<T: Serialize>(path: &Path, value: &T) -> Result<String, RegistryError> {
    let mut text = serde_json::to_string_pretty(value).map_err(|e| RegistryError::Io {
        path: path.to_path_buf(),
        source: io::Error::other(e),
    })?;
    text.push('\n');
    Ok(text)
}

fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), RegistryError> {
    let text = json_text(path, value)?;
    write_atomic(path, text.as_bytes()).map_err(|source| RegistryError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Replaces `path` with `bytes` atomically: a temporary file in the same folder, fsync,
/// rename over `path`, then fsync of the folder so the rename itself is durable.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = temp_beside(path)?;
    write_synced(&tmp, bytes)?;
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(folder_of(path));
    Ok(())
}

/// The folder holding `path` (`.` for a bare name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A name for a temporary beside `path` that no other writer uses, on this machine or any
/// other sharing the folder: `.<name>.tmp-<host>-<pid>-<n>` (two machines' processes may
/// have the same pid; a temporary a killed one left behind must not fail another's write).
fn temp_beside(path: &Path) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    Ok(folder_of(path).join(format!(
        ".{}.tmp-{}-{}-{}",
        name.to_string_lossy(),
        crate::process::host_name(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )))
}

/// Creates `tmp` (never an existing file), writes `bytes` and syncs them; on failure the
/// temporary is removed.
fn write_synced(tmp: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(tmp)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if written.is_err() {
        let _ = fs::remove_file(tmp);
    }
    written
}

/// Syncs a folder so that renames in it are durable. Best effort: not every file system
/// lets a folder be opened and synced.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Creates `dir` and any missing parents, noting each folder it made (outermost first).
fn create_dirs(dir: &Path, created: &mut Vec<PathBuf>) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent, created)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {
            created.push(dir.to_path_buf());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Why a [`Commit`] did not complete: the file it failed on, and whether any file had been
/// replaced by then.
#[derive(Debug)]
pub struct CommitError {
    /// The file whose new content could not be written, put in place or removed.
    pub path: PathBuf,
    pub source: io::Error,
    /// `false`: the failure came before the first rename, so every file is as it was
    /// before the commit and no temporary is left. `true`: files staged before `path`
    /// were already replaced (a rename or removal failed, which a full disk cannot cause).
    pub partial: bool,
}

impl fmt::Display for CommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.partial {
            write!(
                f,
                "cannot put {} in place: {}; the files committed before it were replaced, it and the rest were not",
                self.path.display(),
                self.source
            )
        } else {
            write!(
                f,
                "cannot write {}: {}; nothing was changed (every file is as it was before)",
                self.path.display(),
                self.source
            )
        }
    }
}

impl std::error::Error for CommitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Several files replaced together, all or nothing: a profile's rank files, its
/// `provenance.json` and `profiles.json` describe one profile, so a command that changes
/// them must change all of them or none (a `tune` that wrote its rows and then failed on
/// a full disk must not leave the profile changed behind a failure report).
///
/// [`Commit::apply`] first writes every new content to a temporary beside its target
/// (created exclusively, fsynced), creating missing folders. Only when every temporary is
/// written does it rename them over their targets, in the order they were staged, then
/// removes the files staged for removal and syncs the folders. A failure while writing
/// the temporaries (full disk, file size limit, unwritable folder) removes them and the
/// folders it created, so every target is byte for byte as before, and names the file.
/// Renames within one folder do not need space; the rare failure among them is reported
/// as partial.
///
/// A commit takes no lock: build it under [`with_lock`] from what was read under that
/// lock, so that a concurrent updater's change is read and kept, never overwritten. A
/// commit killed before its renames leaves its temporaries (the targets are untouched);
/// the next commit of those files removes them.
/// Readers that take no lock (the interposer) see each file old or new, never half of one.
#[derive(Debug, Default)]
pub struct Commit {
    writes: Vec<(PathBuf, Vec<u8>)>,
    removes: Vec<PathBuf>,
}

impl Commit {
    pub fn new() -> Commit {
        Commit::default()
    }

    /// Stages `bytes` as the new content of `path`. Staging a path again replaces its
    /// content and keeps its place in the order.
    pub fn write(&mut self, path: impl Into<PathBuf>, bytes: impl Into<Vec<u8>>) {
        let (path, bytes) = (path.into(), bytes.into());
        self.removes.retain(|p| *p != path);
        match self.writes.iter_mut().find(|(p, _)| *p == path) {
            Some(w) => w.1 = bytes,
            None => self.writes.push((path, bytes)),
        }
    }

    /// Stages the removal of `path`, done after every rename (a missing file is fine).
    pub fn remove(&mut self, path: impl Into<PathBuf>) {
        let path = path.into();
        self.writes.retain(|(p, _)| *p != path);
        if !self.removes.contains(&path) {
            self.removes.push(path);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.removes.is_empty()
    }

    /// Writes every staged file, then renames them all into place; see [`Commit`].
    pub fn apply(self) -> Result<(), CommitError> {
        let mut created: Vec<PathBuf> = Vec::new();
        let mut temps: Vec<(PathBuf, &Path)> = Vec::new();
        let staged = self.writes.iter().try_for_each(|(path, bytes)| {
            let fail = |source| CommitError {
                path: path.clone(),
                source,
                partial: false,
            };
            create_dirs(folder_of(path), &mut created).map_err(fail)?;
            let tmp = temp_beside(path).map_err(fail)?;
            write_synced(&tmp, bytes).map_err(fail)?;
            temps.push((tmp, path));
            Ok(())
        });
        if let Err(e) = staged {
            for (tmp, _) in &temps {
                let _ = fs::remove_file(tmp);
            }
            for dir in created.iter().rev() {
                let _ = fs::remove_dir(dir);
            }
            return Err(e);
        }
        for (i, (tmp, path)) in temps.iter().enumerate() {
            if let Err(source) = fs::rename(tmp, path) {
                for (rest, _) in &temps[i..] {
                    let _ = fs::remove_file(rest);
                }
                return Err(CommitError {
                    path: path.to_path_buf(),
                    source,
                    partial: i > 0,
                });
            }
        }
        for path in &self.removes {
            match fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(CommitError {
                        path: path.clone(),
                        source: e,
                        partial: true,
                    })
                }
                _ => {}
            }
        }
        let mut dirs: Vec<&Path> = Vec::new();
        for path in self.writes.iter().map(|(p, _)| p).chain(&self.removes) {
            let dir = folder_of(path);
            if !dirs.contains(&dir) {
                dirs.push(dir);
                sync_dir(dir);
            }
        }
        self.sweep_killed_temporaries();
        Ok(())
    }

    /// Removes temporaries of the committed files that an earlier commit, killed before
    /// its renames (SIGKILL, SIGXFSZ), left: `.<name>.tmp-*` beside each. Under the lock
    /// no other commit of these files is under way, and this one's are renamed.
    fn sweep_killed_temporaries(&self) {
        let mut prefixes: Vec<(&Path, String)> = Vec::new();
        for (path, _) in &self.writes {
            if let Some(name) = path.file_name() {
                prefixes.push((folder_of(path), format!(".{}.tmp-", name.to_string_lossy())));
            }
        }
        let mut dirs: Vec<&Path> = prefixes.iter().map(|(d, _)| *d).collect();
        dirs.dedup();
        for dir in dirs {
            for e in fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if prefixes
                    .iter()
                    .any(|(d, prefix)| *d == dir && name.starts_with(prefix.as_str()))
                {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C27E: &str = "c27e2252cc7a4b6e174601a180a169822dcf15a29e634046daecb61498e3bd2a";
    const F30B: &str = "f30bb442e9b5a3c479f6aa60c4d0d0740f67db2957fc0a5c416253e1bf320262";

    fn fixture(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/vllm-rdna")
            .join(rel)
    }

    /// A fresh folder under the system temp dir, removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "tunedblas-registry-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        fn write(&self, name: &str, text: &str) -> PathBuf {
            let p = self.0.join(name);
            fs::write(&p, text).unwrap();
            p
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn read_value(p: &Path) -> Value {
        serde_json::from_slice(&fs::read(p).unwrap()).unwrap()
    }

    #[test]
    fn real_registry_loads_and_finds_builds() {
        let reg = Registry::load(&fixture("profiles.json")).unwrap();
        assert!(reg.errors().is_empty(), "{:?}", reg.errors());
        assert_eq!(reg.len(), 2);
        let e = reg.get("rocm10-rocblas5.6").unwrap();
        assert_eq!(e.dir, "rocm10-rocblas5.6");
        assert_eq!(e.rocblas.as_deref(), Some("5.6.0.8d1ae90e"));
        assert_eq!(e.rows_per_rank, Some(70));
        assert_eq!(e.covers.as_ref().map(Vec::len), Some(1));
        assert!(reg
            .comment
            .as_deref()
            .unwrap()
            .starts_with("Named TunableOp profiles"));
        match reg.find_by_sha(C27E) {
            Match::Unique(name, entry) => {
                assert_eq!(name, "rocm10-rocblas5.6");
                assert_eq!(entry.lib_sha256, C27E);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            reg.find_by_sha(&F30B.to_uppercase()),
            Match::Unique("rocm7.14-rocblas5.5", _)
        ));
        assert_eq!(reg.find_by_sha(&"0".repeat(64)), Match::None);
        // A prefix argument is not a build hash.
        assert_eq!(reg.find_by_sha(&C27E[..12]), Match::None);
        assert_eq!(reg.get("nope"), None);
    }

    #[test]
    fn short_hash_entries_match_by_prefix() {
        let dir = TempDir::new("prefix");
        let path = dir.write(
            "profiles.json",
            r#"{"profiles": {
                "seed": {"dir": "rocblas-c27e2252cc7a", "lib_sha256": "c27e2252cc7a"},
                "too-short": {"dir": "x", "lib_sha256": "c27e2252cc7"},
                "other": {"dir": "other", "lib_sha256": "d05939967b5f"}
            }}"#,
        );
        let mut reg = Registry::load(&path).unwrap();
        assert_eq!(reg.errors().len(), 1);
        assert_eq!(reg.errors()[0].name, "too-short");
        assert!(reg.errors()[0].to_string().contains("profiles.json"));
        assert!(matches!(reg.find_by_sha(C27E), Match::Unique("seed", _)));
        assert_eq!(reg.find_by_sha(F30B), Match::None);
        // A second entry for the same build makes the answer ambiguous.
        reg.insert("full", ProfileEntry::new("full", C27E)).unwrap();
        assert_eq!(
            reg.find_by_sha(C27E),
            Match::Ambiguous(vec!["full", "seed"])
        );
    }

    #[test]
    fn dir_traversal_and_bad_names_are_rejected() {
        let dir = TempDir::new("traversal");
        let path = dir.write(
            "profiles.json",
            &format!(
                r#"{{"profiles": {{
                "up": {{"dir": "../elsewhere", "lib_sha256": "{C27E}"}},
                "dotdot": {{"dir": "..", "lib_sha256": "{C27E}"}},
                "abs": {{"dir": "/etc", "lib_sha256": "{C27E}"}},
                "nested": {{"dir": "a/b", "lib_sha256": "{C27E}"}},
                "dot": {{"dir": ".", "lib_sha256": "{C27E}"}},
                "empty": {{"dir": "", "lib_sha256": "{C27E}"}},
                "../name": {{"dir": "fine", "lib_sha256": "{C27E}"}},
                "nohash": {{"dir": "fine"}},
                "badtype": {{"dir": "fine", "lib_sha256": "{C27E}", "rows_per_rank": "many"}},
                "good": {{"dir": "good", "lib_sha256": "{F30B}"}}
            }}}}"#
            ),
        );
        let reg = Registry::load(&path).unwrap();
        let mut skipped: Vec<&str> = reg.errors().iter().map(|e| e.name.as_str()).collect();
        skipped.sort();
        assert_eq!(
            skipped,
            ["../name", "abs", "badtype", "dot", "dotdot", "empty", "nested", "nohash", "up"]
        );
        assert_eq!(reg.entries().map(|(n, _)| n).collect::<Vec<_>>(), ["good"]);
        assert_eq!(reg.find_by_sha(C27E), Match::None);
        let mut reg = reg;
        assert!(reg.insert("x", ProfileEntry::new("../x", C27E)).is_err());
        assert!(reg.insert("x/y", ProfileEntry::new("x", C27E)).is_err());
        assert!(reg.insert("x", ProfileEntry::new("x", C27E)).is_ok());
        // Skipped entries are written back untouched: saving never destroys data.
        let out = dir.0.join("saved.json");
        reg.save_atomic(&out).unwrap();
        let saved = read_value(&out);
        assert_eq!(saved["profiles"]["up"]["dir"], "../elsewhere");
        assert_eq!(Registry::load(&out).unwrap().errors().len(), 9);
    }

    #[test]
    fn atomic_save_round_trips_and_keeps_unknown_fields() {
        let dir = TempDir::new("save");
        let original = fixture("profiles.json");
        let mut reg = Registry::load(&original).unwrap();
        let path = dir.0.join("profiles.json");
        reg.save_atomic(&path).unwrap();
        assert_eq!(
            read_value(&path),
            read_value(&original),
            "nothing lost or changed"
        );
        assert_eq!(Registry::load(&path).unwrap(), reg);

        let mut entry = ProfileEntry::new("rocm7.1-rocblas5.1", C27E);
        entry.arch = Some("gfx1030".into());
        entry
            .extra
            .insert("tuned_by".into(), Value::from("harness 0.1"));
        reg.insert("new-one", entry.clone()).unwrap();
        reg.extra.insert("schema".into(), Value::from(2));
        reg.save_atomic(&path).unwrap();
        let again = Registry::load(&path).unwrap();
        assert_eq!(again.get("new-one"), Some(&entry));
        assert_eq!(again.extra.get("schema"), Some(&Value::from(2)));
        assert_eq!(again, reg);
        // Stable output: saving the same registry twice gives the same bytes.
        let first = fs::read(&path).unwrap();
        again.save_atomic(&path).unwrap();
        assert_eq!(fs::read(&path).unwrap(), first);
        // No temporary files are left behind.
        let names: Vec<String> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["profiles.json"]);
        // A folder that does not exist: an error that names the file.
        let err = reg
            .save_atomic(&dir.0.join("missing/profiles.json"))
            .unwrap_err();
        assert!(err.to_string().contains("missing/profiles.json"), "{err}");
    }

    #[test]
    fn broken_json_names_file_line_and_column() {
        let dir = TempDir::new("broken");
        let path = dir.write(
            "profiles.json",
            "{\n  \"profiles\": {\n    \"a\": {\"dir\": \"a\",, }\n  }\n}\n",
        );
        let err = Registry::load(&path).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, RegistryError::Syntax { line: 3, .. }),
            "{err:?}"
        );
        assert!(msg.contains(&format!("{}:3:", path.display())), "{msg}");
        assert!(msg.contains("fix the file"), "{msg}");

        let path = dir.write("shape.json", "{\"profiles\": [1, 2]}");
        let err = Registry::load(&path).unwrap_err();
        assert!(
            matches!(err, RegistryError::Shape { line: 1, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("shape.json:1:"), "{err}");

        let err = Registry::load(&dir.0.join("absent.json")).unwrap_err();
        assert!(matches!(err, RegistryError::Io { .. }));
        assert!(err.to_string().contains("absent.json"));
    }

    #[test]
    fn provenance_typed_fields_and_round_trip() {
        let p = Provenance::load(&fixture("rocm10-rocblas5.6/provenance.json")).unwrap();
        assert_eq!(p.profile(), Some("rocm10-rocblas5.6"));
        assert_eq!(p.sha256(), Some(C27E));
        assert_eq!(p.rocblas(), Some("5.6.0.8d1ae90e"));
        assert!(p.campaigns().is_empty());

        let seed = Provenance::load(&fixture("rocblas-f30bb442e9b5/provenance.json")).unwrap();
        assert_eq!(seed.sha256(), Some(F30B));
        assert_eq!(seed.profile(), None);
        assert_eq!(
            seed.get("campaign").and_then(|c| c.get("date")),
            Some(&Value::from("2026-09-30"))
        );

        let dir = TempDir::new("prov");
        let path = dir.0.join("provenance.json");
        let mut p2 = Provenance::load(&fixture("rocm7.14-rocblas5.5/provenance.json")).unwrap();
        p2.push_campaign(serde_json::json!({"date": "2026-11-01", "new": 3}));
        p2.push_campaign(serde_json::json!({"date": "2026-11-02", "new": 1}));
        p2.set_profile("renamed");
        p2.save_atomic(&path).unwrap();
        let back = Provenance::load(&path).unwrap();
        assert_eq!(back, p2);
        assert_eq!(back.campaigns().len(), 2);
        assert_eq!(back.profile(), Some("renamed"));
        assert_eq!(
            back.get("previous_campaigns")
                .and_then(Value::as_array)
                .map(Vec::len),
            Some(2)
        );

        let bad = dir.write("array.json", "[1]");
        assert!(matches!(
            Provenance::load(&bad),
            Err(RegistryError::Shape { .. })
        ));
        let bad = dir.write("trunc.json", "{\"sha256\": ");
        let err = Provenance::load(&bad).unwrap_err();
        assert!(matches!(err, RegistryError::Syntax { .. }), "{err:?}");
        assert!(err.to_string().contains("trunc.json"));
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Updaters on machines whose `flock` does not see each other (NFS mounted `nolock` or
    /// with `local_lock`: taken away here) still update one at a time: each read-modify-write
    /// of a shared counter lands, none is lost.
    #[test]
    fn updates_without_a_shared_flock_lose_nothing() {
        let d = TempDir::new("share");
        let path = d.write("profiles.json", "0");
        let (threads, each) = (6, 15);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    for _ in 0..each {
                        with_lock_in(&path, false, || {
                            let n: u64 = fs::read_to_string(&path).unwrap().trim().parse().unwrap();
                            std::thread::sleep(std::time::Duration::from_micros(200));
                            write_atomic(&path, (n + 1).to_string().as_bytes()).unwrap();
                            Ok(())
                        })
                        .unwrap();
                    }
                });
            }
        });
        let n: u64 = fs::read_to_string(&path).unwrap().trim().parse().unwrap();
        assert_eq!(n, threads * each, "an update was lost");
        assert!(!share_lock_path(&path).exists(), "released");
    }

    /// Temporaries are named per machine as well as per process: another machine's leftover
    /// with the same pid never makes a write fail.
    #[test]
    fn temporaries_are_named_for_this_machine() {
        let d = TempDir::new("tmpname");
        let t = temp_beside(&d.0.join("profiles.json")).unwrap();
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(&format!(
                ".profiles.json.tmp-{}-{}-",
                crate::process::host_name(),
                std::process::id()
            )),
            "{name}"
        );
    }

    #[test]
    fn a_commit_replaces_writes_and_removes_together() {
        let dir = TempDir::new("commit");
        let a = dir.write("a.csv", "old a");
        let gone = dir.write("gone.csv", "remove me");
        let mut c = Commit::new();
        c.write(&a, "first");
        c.write(dir.0.join("new/b.json"), "b");
        c.remove(&gone);
        c.write(&a, "new a"); // staged again: the last content wins
        assert!(!c.is_empty());
        // What a commit killed before its renames left: removed by the next one.
        dir.write(".a.csv.tmp-999999-0", "killed");
        c.apply().unwrap();
        assert_eq!(fs::read_to_string(&a).unwrap(), "new a");
        assert_eq!(fs::read_to_string(dir.0.join("new/b.json")).unwrap(), "b");
        assert_eq!(names_in(&dir.0), ["a.csv", "new"]);
        assert_eq!(names_in(&dir.0.join("new")), ["b.json"]);
    }

    #[test]
    fn a_commit_that_fails_before_its_renames_changes_nothing() {
        let dir = TempDir::new("commit-fail");
        let a = dir.write("a.csv", "old a");
        let gone = dir.write("gone.csv", "keep me");
        // A regular file where a folder is needed: the third temporary cannot be created.
        let blocker = dir.write("blocker", "a file");
        let mut c = Commit::new();
        c.write(&a, "new a");
        c.write(dir.0.join("made/deeper/b.json"), "b");
        c.write(blocker.join("x.json"), "x");
        c.write(dir.0.join("c.json"), "c");
        c.remove(&gone);
        let err = c.apply().unwrap_err();
        assert!(!err.partial);
        assert_eq!(err.path, blocker.join("x.json"));
        let msg = err.to_string();
        assert!(
            msg.contains("blocker/x.json") && msg.contains("nothing was changed"),
            "{msg}"
        );
        assert_eq!(fs::read_to_string(&a).unwrap(), "old a");
        assert_eq!(fs::read_to_string(&gone).unwrap(), "keep me");
        // No temporary, no folder made for one, nothing staged after the failure.
        assert_eq!(names_in(&dir.0), ["a.csv", "blocker", "gone.csv"]);
    }
}
