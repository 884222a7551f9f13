//! The profile store on disk: `profiles.json` plus one folder per library build, each with
//! a results file per rank and `provenance.json`. Every subcommand that reads or writes a
//! profile goes through here, so they agree on names, ranks and atomic writes.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tunedblas_core::identity;
use tunedblas_core::profile::{self, REGISTRY_FILE};
use tunedblas_core::registry::{self, Entry, Match, Provenance, Registry};
use tunedblas_core::tunableop::{self, ResultsFile};

use crate::backend::{Error, Library, Result};

/// The library build a profile is for.
#[derive(Clone, Debug)]
pub struct Build {
    pub path: PathBuf,
    pub sha256: String,
    pub version: String,
    pub arch: String,
}

impl Build {
    /// Hashes the library file the loader mapped and asks it for its version.
    pub fn of(lib: &Library, arch: Option<&str>) -> Result<Build> {
        let path = lib.file.as_path();
        let sha256 = identity::sha256_file(path)
            .map_err(|e| Error::new(format!("cannot hash {}: {e}", path.display())))?;
        Ok(Build {
            path: path.to_path_buf(),
            sha256,
            version: lib.version().unwrap_or_else(|| "unknown".into()),
            arch: arch.unwrap_or("unknown").to_string(),
        })
    }

    pub fn short(&self) -> &str {
        &self.sha256[..12]
    }

    /// The default profile name: `rocblas-<version>`, made a valid name.
    pub fn default_name(&self) -> String {
        let v: String = self
            .version
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-+".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("rocblas-{v}")
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
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    else {
        return PathBuf::from("profiles");
    };
    let candidates = [
        dir.join("../share/tunedblas/profiles"),
        dir.join("profiles"),
        dir.join("../../profiles"),
    ];
    candidates
        .iter()
        .find(|d| d.join(REGISTRY_FILE).is_file())
        .unwrap_or(&candidates[0])
        .clone()
}

/// Shapes imported from other builds wait here, in a profile folder, for `tune --retune`.
pub const IMPORTED_FILE: &str = "imported_shapes.csv";

impl Store {
    /// Opens the store at `root` without creating anything.
    pub fn existing(root: &Path) -> Result<Store> {
        let store = Store {
            root: root.to_path_buf(),
        };
        if !store.registry_path().is_file() {
            return Err(Error::new(format!(
                "{} has no {REGISTRY_FILE}: not a profile store",
                root.display()
            )));
        }
        Ok(store)
    }

    /// Opens (creating if needed) the store at `root`.
    pub fn open(root: &Path) -> Result<Store> {
        std::fs::create_dir_all(root)
            .map_err(|e| Error::new(format!("cannot create {}: {e}", root.display())))?;
        let store = Store {
            root: root.to_path_buf(),
        };
        if !store.registry_path().exists() {
            Registry::new()
                .save_atomic(&store.registry_path())
                .map_err(|e| Error::new(e.to_string()))?;
        }
        Ok(store)
    }

    pub fn registry_path(&self) -> PathBuf {
        self.root.join(REGISTRY_FILE)
    }

    pub fn registry(&self) -> Result<Registry> {
        Registry::load(&self.registry_path()).map_err(|e| {
            Error::new(format!(
                "{e}; fix the file or move it aside (tunedblas recreates an empty one)"
            ))
        })
    }

    /// Reads, changes and writes `profiles.json` atomically, under the registry's lock so
    /// that concurrent campaigns never lose each other's entries (saved only on success).
    pub fn update_registry(&self, change: impl FnOnce(&mut Registry) -> Result<()>) -> Result<()> {
        Registry::try_update_locked(&self.registry_path(), change).map_err(|e| {
            Error::new(format!(
                "{e}; fix the file or move it aside (tunedblas recreates an empty one)"
            ))
        })?
    }

    /// The profile a process loading `build` gets, or the folder a new one goes to.
    /// `name` must agree with the registry when the build already has a profile.
    pub fn folder_for(&self, build: &Build, name: Option<&str>) -> Result<Folder> {
        let reg = self.registry()?;
        match reg.find_by_sha(&build.sha256) {
            Match::Unique(found, entry) => {
                if let Some(n) = name.filter(|n| *n != found) {
                    return Err(Error::new(format!(
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
            Match::Ambiguous(names) => Err(Error::new(format!(
                "build {} is registered under several profiles ({}) in {}; keep one",
                build.short(),
                names.join(", "),
                self.registry_path().display()
            ))),
            Match::None => {
                let name = name.map_or_else(|| build.default_name(), str::to_string);
                registry::check_name(&name)
                    .map_err(|e| Error::new(format!("--name {name}: {e}")))?;
                if let Some(other) = reg.get(&name) {
                    return Err(Error::new(format!(
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
        let folder = self.folder_for(build, None)?;
        if !folder.existed {
            return Err(Error::new(format!(
                "{} has no profile for build {} (rocBLAS {}); run `tunedblas tune` first",
                self.registry_path().display(),
                build.short(),
                build.version
            )));
        }
        Ok(folder)
    }

    /// The profile's current rows (rank 0; the ranks of a profile hold the same rows).
    pub fn read_rows(&self, folder: &Folder) -> Result<ResultsFile> {
        let path = rank_file(&folder.dir, 0);
        if !path.exists() {
            return Ok(ResultsFile::default());
        }
        tunableop::read(&path)
            .map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))
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

    /// Writes `results` as every rank's file (ranks `0..ranks`), removes rank files beyond
    /// that, and records the build in `profiles.json`.
    pub fn write_rows(
        &self,
        folder: &Folder,
        build: &Build,
        results: &mut ResultsFile,
        ranks: usize,
        status: &str,
    ) -> Result<()> {
        std::fs::create_dir_all(&folder.dir)
            .map_err(|e| Error::new(format!("cannot create {}: {e}", folder.dir.display())))?;
        results.set_validator("ROCBLAS_VERSION", &build.version);
        results.set_validator("GCN_ARCH_NAME", &build.arch);
        let text = results.to_text();
        for rank in 0..ranks.max(1) {
            let path = rank_file(&folder.dir, rank);
            registry::write_atomic(&path, text.as_bytes())
                .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
        }
        if let Ok(rd) = std::fs::read_dir(&folder.dir) {
            for f in rd.filter_map(|e| e.ok()) {
                let name = f.file_name().to_string_lossy().into_owned();
                if profile::rank_of_file(&name).is_some_and(|r| r >= ranks.max(1)) {
                    let _ = std::fs::remove_file(f.path());
                }
            }
        }
        let rows = results.rows.len() as u64;
        self.update_registry(|reg| {
            let mut entry = reg
                .get(&folder.name)
                .cloned()
                .unwrap_or_else(|| Entry::new(&folder.name, &build.sha256));
            entry.lib_sha256 = build.sha256.clone();
            entry.rocblas = Some(build.version.clone());
            entry.arch = Some(build.arch.clone());
            entry.rows_per_rank = Some(rows);
            entry.status = Some(status.to_string());
            reg.insert(&folder.name, entry)
                .map(|_| ())
                .map_err(Error::new)
        })
    }

    /// Appends `campaign` to the folder's provenance, stamping the build on it.
    pub fn record(&self, folder: &Folder, build: &Build, campaign: Value) -> Result<()> {
        let path = folder.dir.join("provenance.json");
        // Under the file's lock: two campaigns recording at once both keep their record.
        Provenance::update_locked_or_new(
            &path,
            |p| p.set("created", Value::from(utc_now())),
            |prov| {
                prov.set_sha256(&build.sha256);
                prov.set_rocblas(&build.version);
                prov.set_profile(&folder.name);
                prov.set("arch", Value::from(build.arch.clone()));
                prov.set("updated", Value::from(utc_now()));
                prov.push_campaign(campaign);
            },
        )
        .map_err(|e| Error::new(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_now_is_a_plausible_timestamp() {
        let t = utc_now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(
            t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T",
            "{t}"
        );
        let year: i32 = t[..4].parse().unwrap();
        assert!((2024..2100).contains(&year), "{t}");
    }
}
