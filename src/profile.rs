//! Choosing the profile for the loaded build and loading its rank files into tables.
//!
//! Pure logic over the registry and the TunableOp reader, so the interposer, `tunedblas
//! profiles which` and the tests all make the same decision with the same words.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::key::ProblemKey;
use crate::registry::{Match, Registry};
use crate::table::{Action, Table, TableBuilder};
use crate::tunableop::{self, RowData, RowSink, Solution};

/// The registry file inside a profile folder.
pub const REGISTRY_FILE: &str = "profiles.json";

/// What the operator asked for.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// Folder holding `profiles.json` and one folder per build.
    pub profile_dir: &'a Path,
    /// Full sha256 (hex) of the loaded library.
    pub sha256: &'a str,
    /// `TUNEDBLAS_PROFILE`: a profile name to use instead of matching by hash.
    pub explicit: Option<&'a str>,
    /// `TUNEDBLAS_ALLOW_MISMATCH=1`: use an explicit profile made for another build.
    pub allow_mismatch: bool,
}

/// The outcome, with the reason in words for the startup line.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    Chosen {
        name: String,
        dir: PathBuf,
        reason: String,
    },
    /// Nothing to serve; `why` says what to do about it.
    None { why: String },
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Picks the profile for the build whose sha256 is `req.sha256`.
pub fn select(req: &Request) -> Selection {
    let reg_path = req.profile_dir.join(REGISTRY_FILE);
    let registry = match Registry::load(&reg_path) {
        Ok(r) => r,
        Err(e) => return Selection::None { why: e.to_string() },
    };
    let build = short(req.sha256);
    if let Some(name) = req.explicit {
        let Some(entry) = registry.get(name) else {
            return Selection::None {
                why: format!(
                    "TUNEDBLAS_PROFILE={name} is not in {}; `tunedblas profiles list` shows the names",
                    reg_path.display()
                ),
            };
        };
        let dir = req.profile_dir.join(&entry.dir);
        let matches = registry_sha_matches(&entry.lib_sha256, req.sha256);
        return if matches {
            Selection::Chosen {
                name: name.to_owned(),
                dir,
                reason: format!("selected by TUNEDBLAS_PROFILE for rocBLAS build {build}"),
            }
        } else if req.allow_mismatch {
            Selection::Chosen {
                name: name.to_owned(),
                dir,
                reason: format!(
                    "forced by TUNEDBLAS_ALLOW_MISMATCH although it was made for build {} and the loaded rocBLAS is {build}; its solution ids may be wrong or fail",
                    short(&entry.lib_sha256)
                ),
            }
        } else {
            Selection::None {
                why: format!(
                    "refusing TUNEDBLAS_PROFILE={name}: it was made for rocBLAS build {}, but the loaded build is {build} (solution ids are build-specific); unset it, tune this build, or set TUNEDBLAS_ALLOW_MISMATCH=1 to force",
                    short(&entry.lib_sha256)
                ),
            }
        };
    }
    match registry.find_by_sha(req.sha256) {
        Match::Unique(name, entry) => Selection::Chosen {
            name: name.to_owned(),
            dir: req.profile_dir.join(&entry.dir),
            reason: format!("auto-selected for rocBLAS build {build}"),
        },
        Match::Ambiguous(names) => Selection::None {
            why: format!(
                "{} names several profiles for rocBLAS build {build} ({}); set TUNEDBLAS_PROFILE to one of them",
                reg_path.display(),
                names.join(", ")
            ),
        },
        Match::None => Selection::None {
            why: format!(
                "no profile in {} for rocBLAS build {build}; shapes are recorded for `tunedblas tune`",
                reg_path.display()
            ),
        },
    }
}

/// One line per registry entry that was skipped (bad name, a `dir` leading outside the
/// folder, no usable hash), naming the file and what to do; empty if the registry does not
/// load at all ([`select`] says why then).
pub fn registry_problems(profile_dir: &Path) -> Vec<String> {
    Registry::load(&profile_dir.join(REGISTRY_FILE))
        .map(|r| r.errors().iter().map(|e| e.to_string()).collect())
        .unwrap_or_default()
}

/// A registry hash (full, or a prefix of at least 12 hex digits) names the build `sha`.
pub fn registry_sha_matches(registered: &str, sha: &str) -> bool {
    let r = registered.trim().to_ascii_lowercase();
    r.len() >= 12 && r.len() <= sha.len() && sha.to_ascii_lowercase().starts_with(&r)
}

/// A profile's rank files loaded as lookup tables.
#[derive(Debug, Default)]
pub struct Loaded {
    /// `tables[rank]`; ranks with identical rows share one `Arc`.
    pub tables: Vec<Option<Arc<Table>>>,
    /// Distinct tables among the ranks (1 when every rank file holds the same rows).
    pub distinct: usize,
    /// Rows per rank file, in rank order: (rank, servable rows).
    pub rows: Vec<(usize, usize)>,
    /// One line per problem found while reading (file, line, what, what to do).
    pub problems: Vec<String>,
    /// Rows that name a solution rocBLAS cannot serve (hipBLASLt, scaled GEMMs, ...).
    pub unservable: usize,
    /// `ROCBLAS_VERSION` validators found in the rank files, with the file they came from.
    pub rocblas_versions: Vec<(PathBuf, String)>,
    /// Rows naming a rocBLAS solution id <= 0: (file, line, `op,signature`, id). rocBLAS up
    /// to 4.x runs its heuristic for those; see [`version_problems`].
    pub nonpositive_ids: Vec<(PathBuf, usize, String, i32)>,
}

impl Loaded {
    /// The table for `device`: its own rank file, else rank 0's (solution ids belong to the
    /// build, so any rank's rows are valid on every device of the same architecture).
    #[inline]
    pub fn table_for(&self, device: i32) -> Option<&Table> {
        let own = usize::try_from(device)
            .ok()
            .and_then(|d| self.tables.get(d))
            .and_then(|t| t.as_deref());
        own.or_else(|| self.tables.first().and_then(|t| t.as_deref()))
    }
}

/// The rank of a `tunableop_results<rank>.csv` file name.
pub fn rank_of_file(name: &str) -> Option<usize> {
    let digits = name
        .strip_prefix("tunableop_results")?
        .strip_suffix(".csv")?;
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What only the loaded rocBLAS `version` shows about a profile, one line each:
/// - rank files whose `ROCBLAS_VERSION` validator names another build (the hash already
///   matched, so this flags a registry or file mix-up worth a look). Version strings are
///   compared as builds: Debian's `2.47.0.` (no commit id) and `2.47.0` agree;
/// - on rocBLAS up to 4.x, rows naming a solution id <= 0: with `algo = solution_index`
///   such an id runs the heuristic, so the row is not the tuned solution it looks like
///   (and the interposer counts its calls as served).
pub fn version_problems(loaded: &Loaded, version: &str) -> Vec<String> {
    let mut out: Vec<String> = loaded
        .rocblas_versions
        .iter()
        .filter(|(_, v)| !crate::version::same_build(v, version))
        .map(|(p, v)| contradiction(p, v, version))
        .collect();
    if let Some(first) = loaded.nonpositive_ids.first() {
        out.extend(nonpositive_problem(
            first,
            loaded.nonpositive_ids.len(),
            version,
        ));
    }
    out
}

/// The line about rows naming ids <= 0 (`first` of `count`), if the loaded `version`
/// runs its heuristic for such ids (rocBLAS up to 4.x).
fn nonpositive_problem(
    (file, line, key, id): &(PathBuf, usize, String, i32),
    count: usize,
    version: &str,
) -> Option<String> {
    let v = crate::version::Version::parse(version)?;
    v.nonpositive_id_is_heuristic().then(|| {
        format!(
            "{}:{line}: {key} names solution {id}, and {} more rows name ids <= 0: rocBLAS {} ({}) runs its heuristic for an id <= 0, so these rows serve nothing tuned; re-tune this build or delete them",
            file.display(),
            count - 1,
            v.label(),
            v.rocm()
        )
    })
}

/// [`version_problems`], under the name the interposer calls at load
/// (`cdylib/src/runtime.rs`): more than contradicting validators now.
pub fn contradicting_validators(loaded: &Loaded, version: &str) -> Vec<String> {
    version_problems(loaded, version)
}

fn contradiction(path: &Path, found: &str, loaded: &str) -> String {
    format!(
        "{}: Validator ROCBLAS_VERSION is {found}, but the loaded rocBLAS reports {loaded}; check that this profile belongs to this build",
        path.display()
    )
}

/// The `tunableop_results<rank>.csv` files of `dir`, by rank; the error is the problem line.
pub fn rank_files(dir: &Path) -> Result<Vec<(usize, PathBuf)>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: cannot read the profile folder: {e}", dir.display()))?;
    let mut files: Vec<(usize, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((rank_of_file(e.file_name().to_str()?)?, e.path())))
        .collect();
    files.sort();
    Ok(files)
}

/// Reads every `tunableop_results<rank>.csv` in `dir`. Each file is read only if it is a
/// regular file (through symlinks) of at most [`MAX_RESULTS_FILE_BYTES`]; anything else is
/// one problem line and its rank serves nothing. [`LazyTables`] reads only the calling
/// device's file at start-up.
pub fn load_tables(dir: &Path) -> Loaded {
    let mut loaded = Loaded::default();
    let files = match rank_files(dir) {
        Ok(f) => f,
        Err(line) => {
            loaded.problems.push(line);
            return loaded;
        }
    };
    for (rank, path) in files {
        let file = match load_rank(&path, rank) {
            Ok(f) => f,
            Err(line) => {
                loaded.problems.push(line);
                continue;
            }
        };
        loaded.problems.extend(file.problems);
        loaded.unservable += file.unservable;
        if let Some(v) = file.rocblas_version {
            loaded.rocblas_versions.push((path.clone(), v));
        }
        for (line, key, id) in &file.nonpositive {
            loaded
                .nonpositive_ids
                .push((path.clone(), *line, key.clone(), *id));
        }
        let table = file.table;
        loaded
            .rows
            .push((rank, table.len() + table.wildcards().len()));
        place_rank_table(
            &mut loaded.tables,
            &mut loaded.distinct,
            rank,
            table,
            Table::same_rows,
        );
    }
    loaded
}

// ---- Reading the files of a profile folder ----------------------------------------------

/// The largest results file the loader reads: 1 GiB (some 13 million rows of PyTorch's
/// form). A larger file is refused whole, with one line, rather than read: a file that
/// never ends (a symlink to `/dev/zero` is refused before that, as not a regular file) or a
/// runaway writer must not take the host's memory with it.
pub const MAX_RESULTS_FILE_BYTES: u64 = 1 << 30;

/// The largest `profiles.json` or `provenance.json` read: 64 MiB.
pub const MAX_JSON_FILE_BYTES: u64 = 64 << 20;

/// Why a file of the profile folder was not read.
#[derive(Debug)]
pub enum ReadError {
    /// It could not be opened or read (missing, no permission, a directory, ...).
    Io(io::Error),
    /// Not a regular file, in words: `a FIFO (named pipe)`, `a symlink to /dev/zero (a
    /// character device)`, ... Opening a FIFO for reading would block until a writer
    /// came, and a device may never end.
    NotRegular(String),
    /// Larger than the limit it was read with.
    TooLarge { size: u64, limit: u64 },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotRegular(what) => write!(f, "{what}, not a regular file"),
            ReadError::TooLarge { size, limit } => write!(
                f,
                "{size} bytes, more than the {} it may have",
                bytes_text(*limit)
            ),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<ReadError> for io::Error {
    fn from(e: ReadError) -> io::Error {
        match e {
            ReadError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

fn bytes_text(n: u64) -> String {
    if n >= 1 << 30 && n & ((1 << 30) - 1) == 0 {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 && n & ((1 << 20) - 1) == 0 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// What a file that is not regular is, in words, and the symlink that led there if any.
fn describe_special(path: &Path, ft: std::fs::FileType) -> String {
    let kind = if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "a special file"
    };
    match std::fs::read_link(path) {
        Ok(target) => format!("a symlink to {} ({kind})", target.display()),
        Err(_) => kind.to_string(),
    }
}

/// Checks what `meta` (of `path`, symlinks followed) describes: a regular file of at most
/// `limit` bytes. A directory is the error reading one gives (`EISDIR`).
fn check_regular(path: &Path, meta: &std::fs::Metadata, limit: u64) -> Result<u64, ReadError> {
    let ft = meta.file_type();
    if ft.is_dir() {
        return Err(ReadError::Io(io::Error::from_raw_os_error(libc::EISDIR)));
    }
    if !ft.is_file() {
        return Err(ReadError::NotRegular(describe_special(path, ft)));
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    Ok(meta.len())
}

/// Opens a file of the profile folder for reading, if it is a regular file (symlinks are
/// followed) of at most `limit` bytes; returns it with its size. What it is is checked
/// with `stat` before opening, so a device is never opened (opening some has effects),
/// and again with `fstat` on what was opened; the open is `O_NONBLOCK` (a FIFO swapped in
/// between cannot block it), `O_NOCTTY` and `O_CLOEXEC`.
pub fn open_regular(path: &Path, limit: u64) -> Result<(File, u64), ReadError> {
    let meta = std::fs::metadata(path).map_err(ReadError::Io)?;
    check_regular(path, &meta, limit)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(ReadError::Io)?;
    let size = check_regular(path, &file.metadata().map_err(ReadError::Io)?, limit)?;
    Ok((file, size))
}

/// Reads a whole file of the profile folder with [`open_regular`]'s checks, never more
/// than `limit` bytes (a file that grows past it while read is refused too).
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let (file, size) = open_regular(path, limit)?;
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// The problem line for a rank file that was not read: the file, what it is, what to do.
pub(crate) fn unreadable(path: &Path, rank: usize, e: &ReadError) -> String {
    let p = path.display();
    match e {
        ReadError::Io(e) => format!("{p}: unreadable ({e}); rank {rank} serves nothing"),
        ReadError::NotRegular(what) => format!(
            "{p}: {what}, not a regular file, so it is not read; rank {rank} serves nothing; put the results file itself there, or remove it"
        ),
        ReadError::TooLarge { size, limit } => format!(
            "{p}: {size} bytes, more than the {} a results file may have, so it is not read; rank {rank} serves nothing; prune the profile or split it",
            bytes_text(*limit)
        ),
    }
}

/// One rank file read into a table.
struct RankFile {
    table: Table,
    /// Its problem lines: malformed lines, then duplicates.
    problems: Vec<String>,
    unservable: usize,
    rocblas_version: Option<String>,
    /// (line, `op,signature`, id) of rows naming a solution id <= 0 (see
    /// [`version_problems`]).
    nonpositive: Vec<(usize, String, i32)>,
}

/// The parser's sink for the loader: rows go straight into the table being built.
struct TableSink {
    builder: TableBuilder,
    /// The line of each row of the builder, by position, for duplicate reports.
    lines: Vec<u32>,
    /// Keys whose first row names another backend's solution: PyTorch would use that
    /// row, so a later rocBLAS row for the key is a duplicate (rare; usually empty).
    blocked: HashMap<ProblemKey, usize>,
    /// Rows naming ids <= 0 (rare; usually empty).
    nonpositive: Vec<(usize, String, i32)>,
}

impl RowSink for TableSink {
    fn claim(&mut self, key: ProblemKey, line: usize, row: Option<RowData<'_>>) -> Option<usize> {
        if !self.blocked.is_empty() {
            if let Some(&first) = self.blocked.get(&key) {
                return Some(first);
            }
        }
        let action = match row.map(|r| r.solution) {
            Some(Solution::Default) => Action::Default,
            Some(Solution::Rocblas(id)) => {
                if id <= 0 {
                    let (op, sig) = tunableop::op_and_signature(&key);
                    self.nonpositive.push((line, format!("{op},{sig}"), id));
                }
                Action::Solution(id)
            }
            Some(Solution::Other(_)) | None => {
                if let Some(pos) = self.builder.find(&key) {
                    return Some(self.lines[pos] as usize);
                }
                self.blocked.insert(key, line);
                return None;
            }
        };
        match self.builder.insert(key, action) {
            // Lines fit in 32 bits: a file is at most MAX_RESULTS_FILE_BYTES.
            Ok(_) => {
                self.lines.push(line as u32);
                None
            }
            Err(pos) => Some(self.lines[pos] as usize),
        }
    }
}

/// Reads one rank file into a table, a line at a time: the text is never held whole, and
/// rows go into the table as they are read (no parsed-row list, no second key map). The
/// error is the problem line.
fn load_rank(path: &Path, rank: usize) -> Result<RankFile, String> {
    let limit = MAX_RESULTS_FILE_BYTES;
    let (file, size) = open_regular(path, limit).map_err(|e| unreadable(path, rank, &e))?;
    let mut reader = io::BufReader::with_capacity(1 << 16, file.take(limit + 1));
    // Rows are rarely under 60 bytes: sized so the table seldom grows while read.
    let guess = usize::try_from(size / 96).unwrap_or(0);
    let sink = TableSink {
        builder: TableBuilder::with_capacity(guess),
        lines: Vec::with_capacity(guess),
        blocked: HashMap::new(),
        nonpositive: Vec::new(),
    };
    let (parsed, sink) = tunableop::parse_reader(&mut reader, sink)
        .map_err(|e| unreadable(path, rank, &ReadError::Io(e)))?;
    if reader.get_ref().limit() == 0 {
        // It grew past the limit while it was read.
        let e = ReadError::TooLarge {
            size: limit + 1,
            limit,
        };
        return Err(unreadable(path, rank, &e));
    }
    let mut problems = Vec::new();
    for m in &parsed.malformed {
        problems.push(format!(
            "{}:{}: skipped: {}; fix or delete the line",
            path.display(),
            m.line,
            m.reason
        ));
    }
    for d in &parsed.duplicates {
        problems.push(format!(
            "{}:{}: duplicate of line {}; the first row wins",
            path.display(),
            d.line,
            d.first_line
        ));
    }
    let mut builder = sink.builder;
    for w in &parsed.wildcards {
        let action = match w.solution {
            Solution::Default => Action::Default,
            Solution::Rocblas(id) => Action::Solution(id),
            Solution::Other(_) => continue,
        };
        builder.push_wildcard(w.pattern, format!("{},{}", w.op_name, w.signature), action);
    }
    Ok(RankFile {
        table: builder.finish(),
        problems,
        unservable: parsed.unservable.len(),
        rocblas_version: parsed.validator("ROCBLAS_VERSION").map(str::to_owned),
        nonpositive: sink.nonpositive,
    })
}

// ---- Loading ranks on first use ---------------------------------------------------------

/// Whether two rank files hold the same bytes: the same file (inode), or regular files of
/// one size whose contents compare equal (read in 64 KiB blocks, never held whole).
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    if (ma.dev(), ma.ino()) == (mb.dev(), mb.ino()) {
        return ma.is_file();
    }
    if ma.len() != mb.len() {
        return false;
    }
    let limit = MAX_RESULTS_FILE_BYTES;
    let (Ok((fa, _)), Ok((fb, _))) = (open_regular(a, limit), open_regular(b, limit)) else {
        return false;
    };
    let (mut ra, mut rb) = (fa.take(limit + 1), fb.take(limit + 1));
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let na = match read_full(&mut ra, &mut ba) {
            Ok(n) => n,
            Err(_) => return false,
        };
        let nb = match read_full(&mut rb, &mut bb) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

/// Fills `buf` from `r` as far as the data goes; the bytes read (fewer only at the end).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// A rank slot's state (low 3 bits of [`RankSlot::state`]; the rest is the id of the
/// process whose thread set it).
const UNLOADED: u64 = 0;
const LOADING: u64 = 1;
const PUBLISHING: u64 = 2;
const READY: u64 = 3;
const FAILED: u64 = 4;
const STATE_BITS: u64 = 7;

fn tagged(state: u64, pid: u64) -> u64 {
    pid << 3 | state
}

/// One rank file of a [`LazyTables`].
struct RankSlot {
    rank: usize,
    path: PathBuf,
    state: AtomicU64,
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
}

/// No rank files at all: every device gets [`RankTable::None`] (what a process without a
/// profile for its build holds).
impl Default for LazyTables {
    fn default() -> LazyTables {
        LazyTables {
            slots: Box::new([]),
            rocblas_version: None,
        }
    }
}

enum Outcome<'a> {
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

    fn slot(&self, rank: usize) -> Option<&RankSlot> {
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
        if let Some(own) = self.own_slot(device) {
            match self.ensure(own, &mut on_load) {
                Outcome::Ready(t) => return RankTable::Ready(t),
                Outcome::Busy => return RankTable::Loading,
                Outcome::Failed if own.rank == 0 => return RankTable::None,
                Outcome::Failed => {}
            }
        }
        match self.slot(0).map(|s| self.ensure(s, &mut on_load)) {
            Some(Outcome::Ready(t)) => RankTable::Ready(t),
            Some(Outcome::Busy) => RankTable::Loading,
            Some(Outcome::Failed) | None => RankTable::None,
        }
    }

    /// The slot's table, loading it on this thread if nobody has claimed it.
    fn ensure<'a>(
        &'a self,
        slot: &'a RankSlot,
        on_load: &mut impl FnMut(&RankReport),
    ) -> Outcome<'a> {
        loop {
            if let Some(t) = slot.table.get() {
                return Outcome::Ready(t);
            }
            let s = slot.state.load(Ordering::Acquire);
            match s & STATE_BITS {
                // Set before READY is stored, so this is only for completeness.
                READY => {
                    return slot
                        .table
                        .get()
                        .map_or(Outcome::Busy, |t| Outcome::Ready(t))
                }
                FAILED => return Outcome::Failed,
                // A moment away in this process; in a child forked in that moment it may
                // never finish, and `set` must not be called there: pass through.
                PUBLISHING => return Outcome::Busy,
                state => {
                    // Only here: a load in progress costs its callers this system call.
                    let me = u64::from(std::process::id());
                    if state == LOADING && s >> 3 == me {
                        return Outcome::Busy;
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
    ) -> Outcome<'a> {
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
                    .map_or(Outcome::Busy, |t| Outcome::Ready(t))
            }
            None => {
                slot.state.store(tagged(FAILED, me), Ordering::Release);
                Outcome::Failed
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_hash_prefix_rules() {
        let sha = "c27e2252cc7a4b6e174601a180a169822dcf15a29e634046daecb61498e3bd2a";
        assert!(registry_sha_matches(sha, sha));
        assert!(registry_sha_matches("c27e2252cc7a", sha));
        assert!(registry_sha_matches("C27E2252CC7A", sha));
        assert!(
            !registry_sha_matches("c27e2252cc7", sha),
            "11 digits is too short"
        );
        assert!(!registry_sha_matches("d05939967b5f", sha));
        assert!(!registry_sha_matches("", sha));
    }

    /// A fresh folder under the system's temporary folder, removed when dropped.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(name: &str) -> Scratch {
            let d = std::env::temp_dir()
                .join(format!("tunedblas-profile-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Scratch(d)
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn mkfifo(path: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    /// Runs `f` on a thread and fails the test if it has not finished in 60 s (a read that
    /// blocks on a FIFO would otherwise hang the test binary).
    fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("blocked for 60 s: a read that should have been refused")
    }

    const ROW: &str = "GemmTunableOp_Half_TN,tn_64_24_40_ld_40_40_64,Gemm_Rocblas_7,0.01\n";

    #[test]
    fn special_and_oversized_files_are_refused_with_one_line_each() {
        let dir = Scratch::new("special");
        let d = dir.0.clone();
        mkfifo(&d.join("tunableop_results0.csv"));
        std::os::unix::fs::symlink("/dev/zero", d.join("tunableop_results1.csv")).unwrap();
        // Sparse: 1 GiB and a byte, in no time and no disk space.
        let big = File::create(d.join("tunableop_results2.csv")).unwrap();
        big.set_len(MAX_RESULTS_FILE_BYTES + 1).unwrap();
        std::fs::create_dir(d.join("tunableop_results3.csv")).unwrap();
        std::fs::write(d.join("tunableop_results4.csv"), ROW).unwrap();
        let began = Instant::now();
        let loaded = bounded(move || load_tables(&d));
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
        let p = |r: usize| {
            dir.0
                .join(format!("tunableop_results{r}.csv"))
                .display()
                .to_string()
        };
        let want = [
            format!("{}: a FIFO (named pipe), not a regular file, so it is not read; rank 0 serves nothing; put the results file itself there, or remove it", p(0)),
            format!("{}: a symlink to /dev/zero (a character device), not a regular file, so it is not read; rank 1 serves nothing; put the results file itself there, or remove it", p(1)),
            format!("{}: {} bytes, more than the 1 GiB a results file may have, so it is not read; rank 2 serves nothing; prune the profile or split it", p(2), MAX_RESULTS_FILE_BYTES + 1),
            format!("{}: unreadable (Is a directory (os error 21)); rank 3 serves nothing", p(3)),
        ];
        assert_eq!(loaded.problems, want);
        assert_eq!(loaded.rows, vec![(4, 1)]);
        // Devices without a table of their own get none here: rank 0 is unreadable.
        assert!(loaded.table_for(4).is_some() && loaded.table_for(0).is_none());

        // The lazy loader refuses the same files before reading anything.
        lazy_refuses_up_front(&dir.0, &want);

        // The same checks for every reader of the folder's files.
        for r in 0..3 {
            let path = dir.0.join(format!("tunableop_results{r}.csv"));
            assert!(tunableop::read(&path).is_err());
            let e = read_regular(&path, MAX_JSON_FILE_BYTES).unwrap_err();
            assert!(!matches!(e, ReadError::Io(_)), "{e}");
        }
        let lt = crate::cublaslt::load_tables(&dir.0);
        assert_eq!(lt.problems[..4], want);
    }

    fn lazy_refuses_up_front(dir: &Path, want: &[String]) {
        let d = dir.to_path_buf();
        let (lazy, start) = bounded(move || LazyTables::open(&d, 4, None));
        assert_eq!(start.problems, want);
        assert_eq!(lazy.parsed_ranks(), vec![4]);
        for r in 0..4 {
            assert_eq!(lazy.rank_state(r), Some(RankState::Failed));
            assert!(matches!(lazy.table_for(r as i32), RankTable::None));
        }
    }

    #[test]
    fn registry_files_that_are_not_regular_are_refused() {
        let dir = Scratch::new("registry");
        let reg = dir.0.join(REGISTRY_FILE);
        mkfifo(&reg);
        let prov = dir.0.join("provenance.json");
        std::os::unix::fs::symlink("/dev/zero", &prov).unwrap();
        let (r, p) = (reg.clone(), prov.clone());
        let (a, b) = bounded(move || {
            (
                Registry::load(&r).unwrap_err().to_string(),
                crate::registry::Provenance::load(&p)
                    .unwrap_err()
                    .to_string(),
            )
        });
        assert!(
            a.starts_with(&format!(
                "{}: a FIFO (named pipe), not a regular file",
                reg.display()
            )),
            "{a}"
        );
        assert!(
            b.starts_with(&format!(
                "{}: a symlink to /dev/zero (a character device), not a regular file",
                prov.display()
            )),
            "{b}"
        );
        let sel = bounded(move || {
            let sha = "c27e2252cc7a4b6e174601a180a169822dcf15a29e634046daecb61498e3bd2a";
            select(&Request {
                profile_dir: reg.parent().unwrap(),
                sha256: sha,
                explicit: None,
                allow_mismatch: false,
            })
        });
        assert!(
            matches!(&sel, Selection::None { why } if why.contains("a FIFO (named pipe), not a regular file")),
            "{sel:?}"
        );
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_line() {
        let dir = Scratch::new("bom");
        std::fs::write(
            dir.0.join("tunableop_results0.csv"),
            format!("\u{feff}{ROW}Validator,ROCBLAS_VERSION,4.4\n"),
        )
        .unwrap();
        std::fs::write(
            dir.0.join("tunableop_results1.csv"),
            format!("\u{feff}Validator,ROCBLAS_VERSION,4.4\n{ROW}"),
        )
        .unwrap();
        let loaded = load_tables(&dir.0);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        assert_eq!(loaded.rows, vec![(0, 1), (1, 1)]);
        let versions: Vec<&str> = loaded
            .rocblas_versions
            .iter()
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(versions, ["4.4", "4.4"]);
    }

    /// The line-at-a-time loader and [`tunableop::parse`] agree on every file: the same
    /// rows in the same order, the same problems, on real profiles and on byte-mutated
    /// ones (cut lines, CRLF, invalid UTF-8, duplicates, BOMs).
    #[test]
    fn the_streaming_loader_agrees_with_parse() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vllm-rdna");
        let sources: Vec<Vec<u8>> = [
            "rocblas-c27e2252cc7a/tunableop_results0.csv",
            "rocblas-f30bb442e9b5/tunableop_results0.csv",
            "rocm7.14-rocblas5.5/tunableop_results2.csv",
        ]
        .iter()
        .map(|f| std::fs::read(fixtures.join(f)).unwrap())
        .collect();
        let dir = Scratch::new("agree");
        let path = dir.0.join("tunableop_results0.csv");
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let noise = b",\n\r_*\xef\xbb\xbf\xff0x-";
        for round in 0..300 {
            let mut bytes = sources[round % sources.len()].clone();
            if round >= sources.len() {
                for _ in 0..1 + next() % 12 {
                    let at = (next() % (bytes.len() as u64 + 1)) as usize;
                    match next() % 5 {
                        0 => bytes.truncate(at),
                        1 if at < bytes.len() => bytes[at] ^= 1 << (next() % 8),
                        2 => bytes.insert(at, noise[(next() % noise.len() as u64) as usize]),
                        3 => {
                            // Repeat a stretch: duplicates.
                            let end = (at + (next() % 400) as usize).min(bytes.len());
                            let copy = bytes[at..end].to_vec();
                            bytes.extend_from_slice(&copy);
                        }
                        _ => bytes.splice(0..0, "\u{feff}".bytes()).for_each(drop),
                    }
                }
            }
            std::fs::write(&path, &bytes).unwrap();
            let parsed = tunableop::parse(&String::from_utf8_lossy(&bytes));
            let table = match load_rank(&path, 0) {
                Ok(f) => f,
                Err(e) => panic!("round {round}: {e}"),
            };
            let want: Vec<(ProblemKey, Action)> = parsed
                .rows
                .iter()
                .map(|r| {
                    let a = match r.solution {
                        Solution::Rocblas(id) => Action::Solution(id),
                        _ => Action::Default,
                    };
                    (r.key, a)
                })
                .collect();
            let got: Vec<(ProblemKey, Action)> =
                table.table.iter().map(|(k, e)| (*k, e.action)).collect();
            assert_eq!(got, want, "round {round}");
            assert_eq!(
                table.table.wildcards().len(),
                parsed.wildcards.len(),
                "round {round}"
            );
            assert_eq!(table.unservable, parsed.unservable.len(), "round {round}");
            assert_eq!(
                table.problems.len(),
                parsed.malformed.len() + parsed.duplicates.len(),
                "round {round}"
            );
            for (m, line) in parsed.malformed.iter().zip(&table.problems) {
                assert!(
                    line.contains(&format!(":{}: skipped: {}", m.line, m.reason)),
                    "round {round}: {line}"
                );
            }
            for (d, line) in parsed
                .duplicates
                .iter()
                .zip(&table.problems[parsed.malformed.len()..])
            {
                assert!(
                    line.ends_with(&format!(
                        ":{}: duplicate of line {}; the first row wins",
                        d.line, d.first_line
                    )),
                    "round {round}: {line}"
                );
            }
        }
    }

    /// A two-rank folder whose ranks serve different solutions for one row.
    fn two_ranks(name: &str) -> Scratch {
        let dir = Scratch::new(name);
        std::fs::write(dir.0.join("tunableop_results0.csv"), ROW).unwrap();
        let other = ROW.replace("Gemm_Rocblas_7,", "Gemm_Rocblas_8,");
        std::fs::write(dir.0.join("tunableop_results1.csv"), other).unwrap();
        dir
    }

    fn action_of(t: RankTable<'_>) -> Option<Action> {
        match t {
            RankTable::Ready(t) => t.iter().next().map(|(_, e)| e.action),
            _ => None,
        }
    }

    #[test]
    fn a_lazy_rank_claimed_by_the_parent_of_a_fork_is_taken_over() {
        let dir = two_ranks("fork-claim");
        let (lazy, _) = LazyTables::open(&dir.0, 0, None);
        assert_eq!(lazy.parsed_ranks(), vec![0]);
        let slot = lazy.slot(1).unwrap();
        let me = u64::from(std::process::id());
        // A thread of this process is reading rank 1: never wait for it.
        slot.state.store(tagged(LOADING, me), Ordering::Release);
        assert!(matches!(lazy.table_for(1), RankTable::Loading));
        assert!(matches!(lazy.table_for(1), RankTable::Loading));
        // The same claim as a forked child sees it: the claimant is another process's
        // thread, gone here, so this thread reads the rank itself.
        slot.state.store(tagged(LOADING, me + 1), Ordering::Release);
        let mut reports = Vec::new();
        let got = lazy.table_for_with(1, |r| reports.push(r.clone()));
        assert_eq!(action_of(got), Some(Action::Solution(8)));
        assert_eq!(reports.len(), 1);
        assert_eq!(
            (reports[0].rank, reports[0].rows, reports[0].parsed),
            (1, 1, true)
        );
        assert_eq!(lazy.parsed_ranks(), vec![0, 1]);
    }

    #[test]
    fn a_child_forked_while_a_rank_was_published_passes_through_and_never_waits() {
        let dir = two_ranks("fork-publish");
        let (lazy, _) = LazyTables::open(&dir.0, 0, None);
        let slot = lazy.slot(1).unwrap();
        // Forked in the instant the parent's thread was inside OnceLock::set: calling set
        // here could wait forever on the Once the vanished thread was running.
        slot.state.store(
            tagged(PUBLISHING, u64::from(std::process::id()) + 1),
            Ordering::Release,
        );
        let answer = bounded(move || matches!(lazy.table_for(1), RankTable::Loading));
        assert!(answer);
    }

    #[test]
    fn identical_rank_files_share_one_table_without_a_second_parse() {
        let dir = Scratch::new("identical");
        for r in [0, 1, 3] {
            std::fs::write(dir.0.join(format!("tunableop_results{r}.csv")), ROW).unwrap();
        }
        std::os::unix::fs::symlink(
            "tunableop_results0.csv",
            dir.0.join("tunableop_results2.csv"),
        )
        .unwrap();
        let (lazy, start) = LazyTables::open(&dir.0, 1, None);
        assert_eq!(lazy.parsed_ranks(), vec![1]);
        assert_eq!(start.loaded.len(), 4, "{:?}", start.loaded);
        for r in [0, 2, 3] {
            assert_eq!(lazy.rank_state(r), Some(RankState::Ready { parsed: false }));
        }
        assert!(lazy.single().is_some_and(|t| t.len() == 1));
        assert_eq!(lazy.ready_tables().len(), 1);
        // No profile: no table for any device, and one empty table for all.
        let none = LazyTables::default();
        assert!(matches!(none.table_for(0), RankTable::None));
        assert!(none.single().is_some_and(|t| t.is_empty()));
        // Different ranks: no single table until they are known to be the same.
        let two = two_ranks("not-single");
        let (lazy, _) = LazyTables::open(&two.0, 0, None);
        assert!(lazy.single().is_none());
        let _ = lazy.table_for(1);
        assert!(lazy.single().is_none());
        assert_eq!(lazy.ready_tables().len(), 2);
    }

    fn loaded_from(rows: &str, validator: &str) -> (Loaded, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "tunedblas-version-problems-{}-{}",
            std::process::id(),
            validator.len() + rows.len()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("tunableop_results0.csv"),
            format!("Validator,ROCBLAS_VERSION,{validator}\n{rows}"),
        )
        .unwrap();
        (load_tables(&dir), dir)
    }

    /// rocBLAS up to 4.x runs the heuristic for `algo = solution_index` with an id <= 0, so
    /// such a row is not what it looks like: said at load, with the first one and a count.
    #[test]
    fn nonpositive_ids_are_named_for_builds_up_to_4() {
        let rows = "GemmTunableOp_Half_TN,tn_64_32_16_ld_16_16_64,Gemm_Rocblas_0,0.1\n\
GemmTunableOp_Half_TN,tn_64_48_16_ld_16_16_64,Gemm_Rocblas_-1086326047,0.1\n\
GemmTunableOp_Half_TN,tn_64_64_16_ld_16_16_64,Gemm_Rocblas_12,0.1\n";
        let (loaded, dir) = loaded_from(rows, "2.47.0.");
        let p = version_problems(&loaded, "2.47.0.");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("tunableop_results0.csv:2: GemmTunableOp_Half_TN,tn_64_32_16_ld_16_16_64 names solution 0, and 1 more rows name ids <= 0")
                && p[0].contains("rocBLAS 2.47.0 (ROCm 5.5) runs its heuristic"),
            "{}",
            p[0]
        );
        assert_eq!(contradicting_validators(&loaded, "2.47.0."), p);
        assert_eq!(
            version_problems(&loaded, "4.4.1.").len(),
            2,
            "4.x too, and 2.47 is another build"
        );
        // rocBLAS 5.x: -1086326047 is a Tensile solution, 0 the heuristic as asked.
        assert!(version_problems(&loaded, "5.5.0.cd957402")
            .iter()
            .all(|l| !l.contains("ids <= 0")));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Debian builds report `2.47.0.`; a file saying `2.47.0` is the same build.
    #[test]
    fn a_version_without_its_empty_commit_id_is_no_contradiction() {
        let rows = "GemmTunableOp_Half_TN,tn_64_32_16_ld_16_16_64,Gemm_Rocblas_3,0.1\n";
        let (loaded, dir) = loaded_from(rows, "2.47.0");
        assert_eq!(version_problems(&loaded, "2.47.0."), Vec::<String>::new());
        assert_eq!(version_problems(&loaded, "2.48.0.").len(), 1);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn rank_file_names() {
        assert_eq!(rank_of_file("tunableop_results0.csv"), Some(0));
        assert_eq!(rank_of_file("tunableop_results13.csv"), Some(13));
        assert_eq!(rank_of_file("tunableop_results.csv"), None);
        assert_eq!(rank_of_file("tunableop_results1.csv.bak"), None);
        assert_eq!(rank_of_file("tunableop_untuned0.csv"), None);
    }
}
