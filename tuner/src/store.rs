//! The profile store on disk: `profiles.json` plus one folder per library build, each with
//! a results file per rank and `provenance.json`. Every subcommand that reads or writes a
//! profile goes through here, so they agree on names, ranks and atomic writes; every
//! change goes through [`Store::transaction`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tunedblas_core::identity;
use tunedblas_core::profile::{self, REGISTRY_FILE};
use tunedblas_core::registry::{self, Commit, Match, ProfileEntry, Provenance, Registry};
use tunedblas_core::tunableop::{self, ResultsFile};

use crate::error::{Error, Result};

/// The library build a profile is for.
#[derive(Clone, Debug)]
pub struct Build {
    /// `rocblas`, `hipblaslt`, `cublaslt`.
    pub library: &'static str,
    pub path: PathBuf,
    pub sha256: String,
    pub version: String,
    pub arch: String,
}

impl Build {
    /// The build of the `library` file at `path` (the one the loader mapped, hashed here),
    /// which says its version is `version`.
    pub fn of(
        library: &'static str,
        path: &Path,
        version: Option<String>,
        arch: Option<&str>,
    ) -> Result<Build> {
        let sha256 = identity::sha256_file(path).map_err(|e| Error::cannot("hash", path, e))?;
        Ok(Build {
            library,
            path: path.to_path_buf(),
            sha256,
            version: version.unwrap_or_else(|| "unknown".into()),
            arch: arch.unwrap_or("unknown").to_string(),
        })
    }

    pub fn short(&self) -> &str {
        &self.sha256[..12]
    }

    /// The default profile name: `<library>-<version>`, made a valid name. A version string
    /// without a commit id (`2.47.0.`) gives `rocblas-2.47.0`.
    pub fn default_name(&self) -> String {
        let label = tunedblas_core::version::Version::parse(&self.version)
            .map(|v| v.label())
            .unwrap_or_else(|| self.version.clone());
        let valid = |c: char| c.is_ascii_alphanumeric() || "._-+".contains(c);
        let v: String = label
            .chars()
            .map(|c| if valid(c) { c } else { '_' })
            .collect();
        format!("{}-{v}", self.library)
    }
}

/// Refuses a store path that names something other than a folder (a file given to
/// --profiles), in the same words for every command.
fn not_a_folder(root: &Path) -> Result<()> {
    match std::fs::metadata(root) {
        Ok(m) if !m.is_dir() => Err(Error::failed(format!(
            "{} is not a folder: --profiles (or $TUNEDBLAS_PROFILE_DIR) names a profile store, the folder holding {REGISTRY_FILE}",
            root.display()
        ))),
        _ => Ok(()),
    }
}

/// The folder holding `profiles.json`.
pub struct Store {
    pub root: PathBuf,
}

/// A profile folder chosen for a build.
#[derive(Clone, Debug)]
pub struct Folder {
    pub name: String,
    pub dir: PathBuf,
    /// Whether the registry already had it.
    pub existed: bool,
}

/// A profile folder's record of how its rows were made.
pub const PROVENANCE_FILE: &str = "provenance.json";

/// `<dir>/provenance.json`.
pub fn provenance_file(dir: &Path) -> PathBuf {
    dir.join(PROVENANCE_FILE)
}

/// `tunableop_results<rank>.csv`.
pub fn rank_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("tunableop_results{rank}.csv"))
}

/// UTC now as `2026-12-03T06:50:00Z` (no time-zone database needed).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days to civil date (proleptic Gregorian), after Howard Hinnant's published method.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The store the installed interposer reads when nothing is configured: the same
/// candidates, relative to this binary (which sits beside `libtunedblas.so`).
pub fn default_root() -> PathBuf {
    let exe = std::env::current_exe().ok();
    let dir = exe.as_deref().and_then(Path::parent);
    dir.map_or_else(|| PathBuf::from("profiles"), profile::store_beside)
}

/// A registry that cannot be read, with what to do about it.
fn broken(e: registry::RegistryError) -> Error {
    Error::failed(format!(
        "{e}; fix the file or move it aside (tunedblas recreates an empty one)"
    ))
}

/// The text of the file at `path`; empty where there is none.
fn read_or_empty(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        r => r.map_err(|e| Error::cannot("read", path, e)),
    }
}

/// Shapes imported from other builds wait here, in a profile folder, for `tune --retune`.
pub const IMPORTED_FILE: &str = "imported_shapes.csv";

impl Store {
    /// Opens the store at `root` without creating anything.
    pub fn existing(root: &Path) -> Result<Store> {
        not_a_folder(root)?;
        let store = Store {
            root: root.to_path_buf(),
        };
        let registry = store.registry_path();
        match std::fs::metadata(&registry) {
            Ok(m) if m.is_file() => Ok(store),
            Ok(_) => Err(Error::failed(format!(
                "{} is not a regular file: move it aside (a profile store's {REGISTRY_FILE} is a JSON file)",
                registry.display()
            ))),
            Err(_) => Err(Error::failed(format!(
                "{} has no {REGISTRY_FILE}: not a profile store (`tunedblas tune` makes one; --profiles or $TUNEDBLAS_PROFILE_DIR names it)",
                root.display()
            ))),
        }
    }

    /// Opens (creating if needed) the store at `root`.
    pub fn open(root: &Path) -> Result<Store> {
        not_a_folder(root)?;
        std::fs::create_dir_all(root).map_err(|e| Error::cannot("create", root, e))?;
        let store = Store {
            root: root.to_path_buf(),
        };
        let path = store.registry_path();
        if !path.exists() {
            // Under the lock: a command that saw no registry must not replace one that
            // another command created (and filled) meanwhile.
            registry::with_lock(&path, || match path.exists() {
                true => Ok(()),
                false => Registry::new().save_atomic(&path),
            })
            .map_err(|e| Error::failed(e.to_string()))?;
        }
        Ok(store)
    }

    pub fn registry_path(&self) -> PathBuf {
        self.root.join(REGISTRY_FILE)
    }

    pub fn registry(&self) -> Result<Registry> {
        Registry::load(&self.registry_path()).map_err(broken)
    }

    /// Runs `change` as one transaction on the store; see [`Tx`]. Nothing is written
    /// unless `change` returns `Ok`, and then every file it staged is committed together.
    pub fn transaction<T>(&self, change: impl FnOnce(&mut Tx) -> Result<T>) -> Result<T> {
        self.transaction_then(change, |_| {})
    }

    /// [`Store::transaction`], then `after` on what `change` returned once the commit
    /// went through (what must follow it at once: a campaign retiring its checkpoint).
    /// From the commit's first write to the lock's release (after `after`), SIGINT,
    /// SIGTERM and SIGHUP are held off ([`crate::held`]): one that comes meanwhile ends
    /// the process only then, so it cannot leave the store half committed.
    pub fn transaction_then<T>(
        &self,
        change: impl FnOnce(&mut Tx) -> Result<T>,
        after: impl FnOnce(&T),
    ) -> Result<T> {
        let path = self.registry_path();
        let mut held = None;
        let out = registry::with_lock(&path, || {
            let registry = if path.exists() {
                Registry::load(&path)?
            } else {
                Registry::new()
            };
            let mut tx = Tx {
                store: self,
                registry,
                registry_changed: false,
                staged: BTreeMap::new(),
            };
            let out = change(&mut tx).and_then(|out| {
                held = Some(crate::held::hold());
                tx.commit().map(|()| out)
            });
            if let Ok(out) = &out {
                after(out);
            }
            Ok(out)
        });
        let out = out.map_err(broken);
        drop(held);
        out?
    }

    /// The profile a process loading `build` gets, or the folder a new one goes to.
    /// `name` must agree with the registry when the build already has a profile.
    pub fn folder_for(&self, build: &Build, name: Option<&str>) -> Result<Folder> {
        self.folder_in(&self.registry()?, build, name)
    }

    fn folder_in(&self, reg: &Registry, build: &Build, name: Option<&str>) -> Result<Folder> {
        match reg.find_by_sha(&build.sha256) {
            Match::Unique(found, entry) => {
                if let Some(n) = name.filter(|n| *n != found) {
                    return Err(Error::failed(format!(
                        "build {} already has the profile '{found}' in {}; tune into it (leave out --name {n}) or remove it first",
                        build.short(),
                        self.registry_path().display()
                    )));
                }
                Ok(Folder {
                    name: found.to_string(),
                    dir: entry.path_in(&self.root),
                    existed: true,
                })
            }
            Match::Ambiguous(names) => Err(Error::failed(format!(
                "build {} is registered under several profiles ({}) in {}; keep one",
                build.short(),
                names.join(", "),
                self.registry_path().display()
            ))),
            Match::None => {
                let name = name.map_or_else(|| build.default_name(), str::to_string);
                registry::check_name(&name)
                    .map_err(|e| Error::failed(format!("--name {name}: {e}")))?;
                if let Some(other) = reg.get(&name) {
                    return Err(Error::failed(format!(
                        "the profile name '{name}' is taken by build {} in {}; choose another with --name",
                        &other.lib_sha256[..other.lib_sha256.len().min(12)],
                        self.registry_path().display()
                    )));
                }
                Ok(Folder {
                    dir: self.root.join(&name),
                    name,
                    existed: false,
                })
            }
        }
    }

    /// The profile `build` already has; an error saying what to do when it has none.
    pub fn existing_folder(&self, build: &Build) -> Result<Folder> {
        self.existing_in(&self.registry()?, build)
    }

    fn existing_in(&self, reg: &Registry, build: &Build) -> Result<Folder> {
        let folder = self.folder_in(reg, build, None)?;
        if !folder.existed {
            return Err(Error::failed(format!(
                "{} has no profile for build {} ({} {}); run `tunedblas tune` first",
                self.registry_path().display(),
                build.short(),
                build.library,
                build.version
            )));
        }
        Ok(folder)
    }

    /// The text of the profile's rank-0 results file (empty where there is none; the ranks
    /// of a profile hold the same rows).
    pub fn read_text(&self, folder: &Folder) -> Result<String> {
        read_or_empty(&rank_file(&folder.dir, 0))
    }

    /// The profile's current rocBLAS rows (rank 0).
    pub fn read_rows(&self, folder: &Folder) -> Result<ResultsFile> {
        let path = rank_file(&folder.dir, 0);
        if !path.exists() {
            return Ok(ResultsFile::default());
        }
        tunableop::read(&path).map_err(|e| Error::cannot("read", &path, e))
    }

    /// How many rank files the folder has now (at least 1).
    pub fn ranks(&self, folder: &Folder) -> usize {
        std::fs::read_dir(&folder.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| profile::rank_of_file(&e.file_name().to_string_lossy()))
                    .map(|r| r + 1)
                    .max()
                    .unwrap_or(1)
            })
            .unwrap_or(1)
    }
}

/// One change to the store: what a command reads and what it writes, under one lock.
///
/// Why a transaction: a profile is several files (a results file per rank, its
/// `provenance.json`, its entry in `profiles.json`, the shapes waiting in
/// `imported_shapes.csv`) that change together, and several commands (`tune`, `qualify`,
/// `merge`, `profiles import`, run on one store at once) change them. [`Store::transaction`]
/// holds the store's lock (`.profiles.json.lock` beside `profiles.json`, the lock
/// [`Registry::update_locked`] takes) from the first read to the last rename, so each
/// command reads the files as the one before it left them and merges its change into
/// them: no command's rows or records are lost. While the closure runs, changes are only
/// staged; when it returns `Ok` they are written by one [`Commit`] (every temporary
/// written and synced before the first rename), so a failure, in the closure or on a full
/// disk, leaves every file of the store as it was and names the file that failed. Do the
/// slow work (tuning, qualifying) before: a transaction reads, merges and writes.
pub struct Tx<'s> {
    store: &'s Store,
    registry: Registry,
    registry_changed: bool,
    /// What is staged, per profile folder.
    staged: BTreeMap<PathBuf, Staged>,
}

#[derive(Default)]
struct Staged {
    /// The results file's text and how many rank files get it.
    rows: Option<(String, usize)>,
    provenance: Option<Provenance>,
    /// The shapes waiting in `imported_shapes.csv` (empty: the file is removed).
    imported: Option<Vec<String>>,
}

impl Tx<'_> {
    /// [`Store::folder_for`], answered from the registry as it is now.
    pub fn folder_for(&self, build: &Build, name: Option<&str>) -> Result<Folder> {
        self.store.folder_in(&self.registry, build, name)
    }

    /// [`Store::existing_folder`], answered from the registry as it is now.
    pub fn existing_folder(&self, build: &Build) -> Result<Folder> {
        self.store.existing_in(&self.registry, build)
    }

    /// The profile's rank-0 file as it is now.
    pub fn read_text(&self, folder: &Folder) -> Result<String> {
        self.store.read_text(folder)
    }

    /// The profile's rocBLAS rows as they are now (rank 0).
    pub fn rows(&self, folder: &Folder) -> Result<ResultsFile> {
        self.store.read_rows(folder)
    }

    /// How many rank files the folder has now (at least 1).
    pub fn ranks(&self, folder: &Folder) -> usize {
        self.store.ranks(folder)
    }

    /// Stages rocBLAS `results` as every rank's file (see [`Tx::write_profile`]).
    pub fn write_rows(
        &mut self,
        folder: &Folder,
        build: &Build,
        results: &mut ResultsFile,
        ranks: usize,
        status: &str,
    ) -> Result<()> {
        results.set_validator("ROCBLAS_VERSION", &build.version);
        results.set_validator("GCN_ARCH_NAME", &build.arch);
        let fields = [
            ("rocblas", build.version.clone()),
            ("arch", build.arch.clone()),
        ];
        self.write_profile(folder, build, results.to_text(), ranks, status, &fields)
    }

    /// Stages `text` as every rank's file (ranks `0..ranks`; rank files beyond that are
    /// removed) and the build's entry in `profiles.json`, with `fields` (`rocblas` and
    /// `arch` are the entry's own; the others, such as `library` and the Lt libraries'
    /// versions, are extra fields).
    pub fn write_profile(
        &mut self,
        folder: &Folder,
        build: &Build,
        text: String,
        ranks: usize,
        status: &str,
        fields: &[(&str, String)],
    ) -> Result<()> {
        let mut entry = self
            .registry
            .get(&folder.name)
            .cloned()
            .unwrap_or_else(|| ProfileEntry::new(&folder.name, &build.sha256));
        entry.lib_sha256 = build.sha256.clone();
        entry.rows_per_rank = Some(
            text.lines()
                .filter(|l| !l.starts_with("Validator") && !l.trim().is_empty())
                .count() as u64,
        );
        entry.status = Some(status.to_string());
        for (k, v) in fields {
            match *k {
                "rocblas" => entry.rocblas = Some(v.clone()),
                "arch" if !v.is_empty() => entry.arch = Some(v.clone()),
                "arch" => {}
                // A rocBLAS profile says no library: the registry's default.
                "library" if v == "rocblas" => {}
                k => {
                    entry.extra.insert(k.to_string(), v.clone().into());
                }
            }
        }
        self.registry
            .insert(&folder.name, entry)
            .map_err(Error::failed)?;
        self.registry_changed = true;
        self.staged_for(folder).rows = Some((text, ranks.max(1)));
        Ok(())
    }

    /// Stages `campaign` appended to the folder's provenance as it is now, stamping the
    /// build on it. A campaign with an `id` is recorded once: a record of the same id (an
    /// earlier commit of the same campaign, killed before it ended or with shapes that
    /// failed) is replaced.
    pub fn record(&mut self, folder: &Folder, build: &Build, campaign: Value) -> Result<()> {
        let prov = self.provenance(folder)?;
        prov.set_sha256(&build.sha256);
        if build.library == "rocblas" {
            prov.set_rocblas(&build.version);
        }
        prov.set_profile(&folder.name);
        prov.set("arch", Value::from(build.arch.clone()));
        prov.set("updated", Value::from(utc_now()));
        let same = |c: &Value| !campaign["id"].is_null() && c["id"] == campaign["id"];
        if prov.campaigns().iter().any(same) {
            let list = prov
                .campaigns()
                .iter()
                .map(|c| if same(c) { campaign.clone() } else { c.clone() })
                .collect();
            prov.set("campaigns", Value::Array(list));
        } else {
            prov.push_campaign(campaign);
        }
        Ok(())
    }

    /// The folder's provenance as it is now, with this transaction's changes, to change
    /// (staged: written when the transaction commits).
    pub fn provenance(&mut self, folder: &Folder) -> Result<&mut Provenance> {
        let path = provenance_file(&folder.dir);
        let staged = self.staged_for(folder);
        Ok(match &mut staged.provenance {
            Some(p) => p,
            none => {
                let p = if path.exists() {
                    Provenance::load(&path).map_err(|e| Error::failed(e.to_string()))?
                } else {
                    let mut p = Provenance::new();
                    p.set("created", Value::from(utc_now()));
                    p
                };
                none.insert(p)
            }
        })
    }

    /// The shapes (`op,signature` lines) waiting in the folder's `imported_shapes.csv` for
    /// `tune --retune`, as they are now, with this transaction's change.
    pub fn imported(&self, folder: &Folder) -> Result<Vec<String>> {
        if let Some(list) = self
            .staged
            .get(&folder.dir)
            .and_then(|s| s.imported.as_ref())
        {
            return Ok(list.clone());
        }
        let text = read_or_empty(&folder.dir.join(IMPORTED_FILE))?;
        let lines = text.lines().filter(|l| !l.trim().is_empty());
        Ok(lines.map(str::to_string).collect())
    }

    /// Stages the shapes waiting for `tune --retune`; none removes the file.
    pub fn set_imported(&mut self, folder: &Folder, shapes: Vec<String>) {
        self.staged_for(folder).imported = Some(shapes);
    }

    fn staged_for(&mut self, folder: &Folder) -> &mut Staged {
        self.staged.entry(folder.dir.clone()).or_default()
    }

    /// Writes everything staged with one [`Commit`]: per folder the rank files, the
    /// imported shapes and `provenance.json`, then `profiles.json` last (so a new profile
    /// is listed only once its files are there).
    fn commit(self) -> Result<()> {
        let mut commit = Commit::new();
        let json_error = |e: registry::RegistryError| Error::failed(e.to_string());
        for (dir, staged) in &self.staged {
            if let Some((text, ranks)) = &staged.rows {
                for rank in 0..*ranks {
                    commit.write(rank_file(dir, rank), text.as_bytes());
                }
                for f in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                    let name = f.file_name().to_string_lossy().into_owned();
                    if profile::rank_of_file(&name).is_some_and(|r| r >= *ranks) {
                        commit.remove(f.path());
                    }
                }
            }
            if let Some(list) = &staged.imported {
                let path = dir.join(IMPORTED_FILE);
                if list.is_empty() {
                    commit.remove(path);
                } else {
                    commit.write(path, format!("{}\n", list.join("\n")));
                }
            }
            if let Some(prov) = &staged.provenance {
                let path = provenance_file(dir);
                let text = prov.to_json(&path).map_err(json_error)?;
                commit.write(path, text);
            }
        }
        if self.registry_changed {
            let path = self.store.registry_path();
            let text = self.registry.to_json(&path).map_err(json_error)?;
            commit.write(path, text);
        }
        commit.apply().map_err(|e| Error::failed(e.to_string()))
    }
}
