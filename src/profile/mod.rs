//! Choosing the profile for the loaded build and loading its rank files into tables.
//!
//! Pure logic over the registry and the TunableOp reader, so the interposer, `tunedblas
//! profiles which` and the tests all make the same decision with the same words.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::registry::{Match, Registry};
use crate::table::Table;

mod files;
mod lazy;
mod rank;
#[cfg(test)]
mod tests;

pub(crate) use files::unreadable;
pub use files::{
    open_regular, read_regular, ReadError, MAX_JSON_FILE_BYTES, MAX_RESULTS_FILE_BYTES,
};
pub use lazy::{place_rank_table, LazyStart, LazyTables, RankReport, RankState, RankTable};
use rank::load_rank;

/// The registry file inside a profile folder.
pub const REGISTRY_FILE: &str = "profiles.json";

/// The profile store installed beside the binaries in `dir` (the interposer's folder or the
/// command's): `<prefix>/share/tunedblas/profiles` of an installed copy, `profiles` beside
/// them, or a cargo build's source tree (`target/<profile>/../../profiles`), whichever has a
/// registry; the first where none has.
pub fn store_beside(dir: &Path) -> PathBuf {
    let candidates = [
        dir.join("../share/tunedblas/profiles"),
        dir.join("profiles"),
        dir.join("../../profiles"),
    ];
    let found = candidates.iter().find(|d| d.join(REGISTRY_FILE).is_file());
    found.unwrap_or(&candidates[0]).clone()
}

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

/// A profile as the registry named it when it was chosen: a rank file read later (its
/// device's first call) is served only while the registry still names the same folder for
/// the same build, and only from inside that folder. A store changed meanwhile (another
/// build's sha256, a rank file made a link to another build's) never serves another
/// build's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct ChosenEntry {
    registry: PathBuf,
    name: String,
    dir: String,
    lib_sha256: String,
    /// The profile folder with every link resolved, as it was when chosen.
    canonical: PathBuf,
}

impl ChosenEntry {
    /// The entry `name` of `profile_dir`'s registry as it stands now.
    pub fn read(profile_dir: &Path, name: &str) -> Option<ChosenEntry> {
        let registry = profile_dir.join(REGISTRY_FILE);
        let entry = Registry::load(&registry).ok()?.get(name)?.clone();
        let canonical = std::fs::canonicalize(profile_dir.join(&entry.dir)).ok()?;
        Some(ChosenEntry {
            registry,
            name: name.to_owned(),
            dir: entry.dir,
            lib_sha256: entry.lib_sha256,
            canonical,
        })
    }

    /// Whether `rank_file` may still be served: the registry's entry unchanged, the file
    /// inside the folder chosen. `Err` is the sentence saying why not.
    pub fn still_serves(&self, rank_file: &Path) -> Result<(), String> {
        let now = Registry::load(&self.registry)
            .ok()
            .and_then(|r| r.get(&self.name).cloned());
        let changed = match &now {
            None => Some(format!("{} no longer names profile {}", self.registry.display(), self.name)),
            Some(e) if e.dir != self.dir || e.lib_sha256 != self.lib_sha256 => Some(format!(
                "{} now names profile {} as folder {:?} for build {} (it was {:?} for build {} when chosen)",
                self.registry.display(),
                self.name,
                e.dir,
                short(&e.lib_sha256),
                self.dir,
                short(&self.lib_sha256)
            )),
            Some(_) => None,
        };
        if let Some(why) = changed {
            return Err(format!(
                "{}: not read: {why}; restart the process to serve the store as it is now",
                rank_file.display()
            ));
        }
        let file = std::fs::canonicalize(rank_file)
            .map_err(|e| format!("{}: {e}", rank_file.display()))?;
        if file.parent() != Some(self.canonical.as_path()) {
            return Err(format!(
                "{}: not read: it leads to {}, outside the profile folder chosen ({})",
                rank_file.display(),
                file.display(),
                self.canonical.display()
            ));
        }
        Ok(())
    }
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Picks the profile for the build whose sha256 is `req.sha256`.
pub fn select(req: &Request) -> Selection {
    let reg_path = req.profile_dir.join(REGISTRY_FILE);
    let registry = match Registry::load(&reg_path) {
        Ok(r) => r,
        Err(e) => {
            // A folder of PyTorch results files, not a profile store: say how to use it.
            let has_rank_files = rank_files(req.profile_dir).is_ok_and(|f| !f.is_empty());
            let why = if has_rank_files && !reg_path.exists() {
                format!(
                    "{} holds TunableOp results files but no {REGISTRY_FILE}: set TUNEDBLAS_PROFILE={} to serve them to the build their ROCBLAS_VERSION validator names, or make them a checked profile with `tunedblas profiles adopt --lib <librocblas.so> FILE`",
                    req.profile_dir.display(),
                    req.profile_dir.display()
                )
            } else {
                e.to_string()
            };
            return Selection::None { why };
        }
    };
    let build = short(req.sha256);
    if let Some(name) = req.explicit {
        let Some(entry) = registry.get(name) else {
            return Selection::None {
                why: format!(
                    "TUNEDBLAS_PROFILE={name} is not in {}; `tunedblas profiles list` shows the names{}",
                    reg_path.display(),
                    if name.contains('/') {
                        " (a folder of PyTorch results files is named by its absolute path)"
                    } else {
                        ""
                    }
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

/// Whether a `TUNEDBLAS_PROFILE` value names a path rather than a registry name: an absolute
/// path (`/data/tuned`). A relative one would depend on the server's working directory, and
/// `../x` must stay what it always was, a name that is not in the registry (a registry
/// entry's folder may not lead outside the store).
pub fn names_a_path(explicit: &str) -> bool {
    explicit.starts_with('/')
}

/// `TUNEDBLAS_PROFILE=<absolute path>`: a folder of PyTorch results files (`tunableop_results<rank>.csv`,
/// no registry), or one such file (its folder is used), served to the loaded build only if
/// every rank file's `ROCBLAS_VERSION` validator names the loaded library's `version` (as
/// PyTorch itself decides; two builds with one version string are not told apart, and the
/// ids are not checked: `tunedblas profiles adopt` checks them). Otherwise nothing is served
/// and the line says why and names `profiles adopt`; `allow_mismatch` forces a mismatch.
pub fn select_path(path: &Path, version: Option<&str>, allow_mismatch: bool) -> Selection {
    select_path_on(path, version, &[], allow_mismatch)
}

/// [`select_path`] on a machine whose GPUs are `archs` (`device::gpu_archs`; empty: not
/// known, nothing checked): a file whose `GCN_ARCH_NAME` names none of them is refused, as
/// PyTorch drops it (its solution ids are another architecture's); `allow_mismatch` does
/// not force this one, since those ids would be invalid here.
pub fn select_path_on(
    path: &Path,
    version: Option<&str>,
    archs: &[String],
    allow_mismatch: bool,
) -> Selection {
    let refuse = |what: String, hint: String| Selection::None {
        why: format!(
            "refusing TUNEDBLAS_PROFILE={}: {what}{hint}",
            path.display()
        ),
    };
    // What to run instead, in the command's own terms: `adopt` takes one results file (its
    // ids checked on this build), `import` takes another build's files (their shapes, to
    // tune for this one). A folder is named by its files.
    let files_of = |dir: &Path| -> String {
        match rank_files(dir) {
            Ok(f) if !f.is_empty() => f
                .iter()
                .map(|(_, p)| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            _ => format!("{}/tunableop_results0.csv", dir.display()),
        }
    };
    let adopt = |target: String| {
        format!("; `tunedblas profiles adopt --lib <librocblas.so> {target}` checks its ids on this build and makes it this build's profile (one file at a time)")
    };
    let import = |targets: String| {
        format!("; `tunedblas profiles import --lib <librocblas.so> {targets}` takes its shapes to tune for this build")
    };
    let dir = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => path.to_path_buf(),
        Ok(_) => {
            let named = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(rank_of_file)
                .is_some();
            if !named {
                return refuse(
                    "a results file must be named tunableop_results<rank>.csv (one per device, as PyTorch names them)".into(),
                    String::new(),
                );
            }
            path.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return refuse(
                "no such file or folder".into(),
                "; name a folder of tunableop_results<rank>.csv files or one of them".into(),
            )
        }
        Err(e) => return refuse(format!("cannot read it: {e}"), String::new()),
    };
    let one_file = |f: &Path| {
        if path.is_dir() {
            f.display().to_string()
        } else {
            path.display().to_string()
        }
    };
    let files = match rank_files(&dir) {
        Ok(f) if !f.is_empty() => f,
        Ok(_) => {
            return refuse(
                format!("no tunableop_results<rank>.csv in {}", dir.display()),
                String::new(),
            )
        }
        Err(line) => return refuse(line, String::new()),
    };
    let Some(version) = version else {
        return refuse(
            "the loaded rocBLAS reports no version string to check the files' ROCBLAS_VERSION against".into(),
            adopt(one_file(&files[0].1)),
        );
    };
    for (_, file) in &files {
        let (found, arch) = match validators(file) {
            Ok(v) => v,
            Err(e) => return refuse(format!("{}: {e}", file.display()), String::new()),
        };
        if let Some(a) = arch.filter(|a| {
            !archs.is_empty()
                && !archs
                    .iter()
                    .any(|m| crate::device::arch_base(m) == crate::device::arch_base(a))
        }) {
            return refuse(
                format!(
                    "{}: Validator GCN_ARCH_NAME is {a}, but this machine's GPUs are {} (solution ids are an architecture's own; PyTorch would drop the file)",
                    file.display(),
                    archs.join(", ")
                ),
                import(one_file(file)),
            );
        }
        let (what, hint) = match found {
            Some(v) if crate::version::same_build(&v, version) => continue,
            Some(v) => (
                format!(
                    "{}: Validator ROCBLAS_VERSION is {v}, but the loaded rocBLAS is {version} (solution ids are build-specific)",
                    file.display()
                ),
                import(if path.is_dir() { files_of(&dir) } else { path.display().to_string() }),
            ),
            None => (
                format!(
                    "{} has no Validator ROCBLAS_VERSION, so nothing says which build its ids belong to",
                    file.display()
                ),
                import(one_file(file)),
            ),
        };
        if allow_mismatch {
            return Selection::Chosen {
                name: dir.display().to_string(),
                dir,
                reason: format!(
                    "forced by TUNEDBLAS_ALLOW_MISMATCH although {what}; its solution ids may be wrong or fail"
                ),
            };
        }
        return refuse(what, hint);
    }
    Selection::Chosen {
        name: dir.display().to_string(),
        reason: format!(
            "selected by TUNEDBLAS_PROFILE (PyTorch results files whose ROCBLAS_VERSION matches the loaded rocBLAS {version}; ids not checked, `tunedblas profiles adopt` checks them)"
        ),
        dir,
    }
}

/// A results file's `ROCBLAS_VERSION` and `GCN_ARCH_NAME` validators, read from its
/// `Validator` lines at the top (PyTorch writes them first); a row ends the search.
fn validators(path: &Path) -> Result<(Option<String>, Option<String>), ReadError> {
    use std::io::BufRead;
    let (file, _) = open_regular(path, MAX_RESULTS_FILE_BYTES)?;
    let reader = std::io::BufReader::new(file);
    let (mut version, mut arch) = (None, None);
    for line in reader.split(b'\n').take(64) {
        let line = line.map_err(ReadError::Io)?;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim().trim_start_matches('\u{feff}');
        if text.is_empty() {
            continue;
        }
        let Some(rest) = text.strip_prefix("Validator,") else {
            break;
        };
        if let Some((k, v)) = rest.split_once(',') {
            match k.trim() {
                "ROCBLAS_VERSION" => version = Some(v.trim().to_string()),
                "GCN_ARCH_NAME" => arch = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    Ok((version, arch))
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
        table_of_device(&self.tables, device)
    }
}

/// The table `device` uses among a profile's rank tables (`tables[rank]`, any backend's):
/// its own rank's, else rank 0's (solution ids belong to the build, so any rank's rows are
/// valid on every device of the same architecture).
#[inline]
pub fn table_of_device<T>(tables: &[Option<Arc<T>>], device: i32) -> Option<&T> {
    let own = usize::try_from(device)
        .ok()
        .and_then(|d| tables.get(d))
        .and_then(|t| t.as_deref());
    own.or_else(|| tables.first().and_then(|t| t.as_deref()))
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
/// (`preload/src/rocblas/mod.rs`): more than contradicting validators now.
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

/// The one eager rank loader, whatever table a backend builds: every
/// `tunableop_results<rank>.csv` of `dir` in rank order through `load` (which reads the
/// file, adds its problem lines and returns its table, or `None` for a rank that serves
/// nothing), ranks whose tables hold the same rows (`same`) sharing one. Returns
/// `tables[rank]` and the number of distinct tables; an unreadable folder is one problem.
pub fn load_ranks<T>(
    dir: &Path,
    problems: &mut Vec<String>,
    same: impl Fn(&T, &T) -> bool,
    mut load: impl FnMut(usize, &Path, &mut Vec<String>) -> Option<T>,
) -> (Vec<Option<Arc<T>>>, usize) {
    let (mut tables, mut distinct) = (Vec::new(), 0);
    match rank_files(dir) {
        Ok(files) => {
            for (rank, path) in files {
                if let Some(table) = load(rank, &path, problems) {
                    place_rank_table(&mut tables, &mut distinct, rank, table, &same);
                }
            }
        }
        Err(line) => problems.push(line),
    }
    (tables, distinct)
}

/// Reads every `tunableop_results<rank>.csv` in `dir` ([`load_ranks`] with the rocBLAS
/// loader). Each file is read only if it is a regular file (through symlinks) of at most
/// [`MAX_RESULTS_FILE_BYTES`]; anything else is one problem line and its rank serves
/// nothing. [`LazyTables`] reads only the calling device's file at start-up.
pub fn load_tables(dir: &Path) -> Loaded {
    let mut loaded = Loaded::default();
    let mut problems = Vec::new();
    let (tables, distinct) = load_ranks(
        dir,
        &mut problems,
        Table::same_rows,
        |rank, path, problems| {
            let file = match load_rank(path, rank) {
                Ok(f) => f,
                Err(line) => {
                    problems.push(line);
                    return None;
                }
            };
            problems.extend(file.problems);
            loaded.unservable += file.unservable;
            if let Some(v) = file.rocblas_version {
                loaded.rocblas_versions.push((path.to_path_buf(), v));
            }
            for (line, key, id) in file.nonpositive {
                loaded
                    .nonpositive_ids
                    .push((path.to_path_buf(), line, key, id));
            }
            let table = file.table;
            loaded
                .rows
                .push((rank, table.len() + table.wildcards().len()));
            Some(table)
        },
    );
    (loaded.tables, loaded.distinct, loaded.problems) = (tables, distinct, problems);
    loaded
}
