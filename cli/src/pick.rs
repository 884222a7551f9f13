//! The profile a command works on, picked by name or by the build of a library: shared by
//! `export` and `report`, which both read one registered profile.

use std::path::{Path, PathBuf};

use serde::Serialize;
use tunedblas_core::identity;
use tunedblas_core::profile;
use tunedblas_core::registry::{Match, Registry};
use tunedblas_core::tunableop;
use tunedblas_core::version::Version;

use crate::error::{Error, Result};
use tunedblas_tuner::backends::Kind;

/// A profile picked by `--profile NAME` or by the build of `--lib`.
#[derive(Clone, Debug, Serialize)]
pub struct Picked {
    pub name: String,
    pub dir: PathBuf,
    /// `(rank, file)` of every rank file, in rank order.
    pub ranks: Vec<(usize, PathBuf)>,
    pub sha256: String,
    /// The library the rows are for: `rocblas`, `hipblaslt` or `cublaslt` (the registry's
    /// `library`, else the rank files' `TUNEDBLAS_BACKEND`, else rocBLAS, which says none).
    pub library: String,
    /// The rocBLAS version and the architecture, where the registry or the files say.
    pub rocblas: Option<String>,
    pub arch: Option<String>,
}

impl Picked {
    /// The rocBLAS major version, from the registry or the rank files' validator.
    pub fn major(&self) -> Option<u32> {
        self.version().map(|v| v.major)
    }

    /// The rocBLAS version, from the registry or the rank files' validator.
    pub fn version(&self) -> Option<Version> {
        Version::parse(self.rocblas.as_deref()?)
    }

    /// Refuses unless the profile's rows are `library`'s (`what` says what needs it): an
    /// empty file headed for another library helps nobody. Exit 3, as for a library that
    /// is not the one a command takes.
    pub fn expect_library(&self, library: &str, what: &str) -> Result<()> {
        if self.library == library {
            return Ok(());
        }
        let name = |tag: &str| Kind::parse(tag).map_or("another library", Kind::name);
        Err(Error::not_loaded(format!(
            "{what} takes {} profiles; '{}' is a {} profile (build {}): `tunedblas profiles show`, `verify` and `merge` take every library's",
            name(library),
            self.name,
            name(&self.library),
            self.short()
        )))
    }

    pub fn short(&self) -> &str {
        &self.sha256[..self.sha256.len().min(12)]
    }

    pub fn rank_file(&self, rank: usize) -> Result<&Path> {
        self.ranks
            .iter()
            .find(|(r, _)| *r == rank)
            .map(|(_, p)| p.as_path())
            .ok_or_else(|| {
                Error::failed(format!(
                    "profile '{}' has no rank {rank} file in {}",
                    self.name,
                    self.dir.display()
                ))
            })
    }
}

/// Which profile a command is asked for.
pub enum Which<'a> {
    /// `--profile NAME`: by its name in the registry.
    Name(&'a str),
    /// `--lib LIBROCBLAS`: the one registered for that build (matched by sha256, as the
    /// interposer does).
    Build(&'a Path),
}

/// Finds the profile `which` names in the store at `root`.
pub fn pick(which: Which, root: &Path) -> Result<Picked> {
    let reg_path = root.join(profile::REGISTRY_FILE);
    let reg = Registry::load(&reg_path).map_err(|e| Error::failed(e.to_string()))?;
    let (name, entry) = match which {
        Which::Name(name) => {
            let entry = reg.get(name).ok_or_else(|| {
                Error::failed(format!(
                    "no profile '{name}' in {}; `tunedblas profiles list` shows the names",
                    reg_path.display()
                ))
            })?;
            (name.to_string(), entry.clone())
        }
        Which::Build(lib) => {
            let sha = identity::sha256_file(lib)
                .map_err(|e| Error::failed(format!("cannot hash {}: {e}", lib.display())))?;
            match reg.find_by_sha(&sha) {
                Match::Unique(name, entry) => (name.to_string(), entry.clone()),
                Match::Ambiguous(names) => {
                    return Err(Error::failed(format!(
                        "build {} has several profiles ({}); name one with --profile",
                        &sha[..12],
                        names.join(", ")
                    )))
                }
                Match::None => {
                    return Err(Error::failed(format!(
                        "no profile in {} for the build of {} ({}); `tunedblas tune` makes one",
                        reg_path.display(),
                        lib.display(),
                        &sha[..12]
                    )))
                }
            }
        }
    };
    let dir = entry.path_in(root);
    let mut ranks: Vec<(usize, PathBuf)> = std::fs::read_dir(&dir)
        .map_err(|e| Error::failed(format!("cannot read {}: {e}", dir.display())))?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((profile::rank_of_file(e.file_name().to_str()?)?, e.path())))
        .collect();
    ranks.sort();
    let mut rocblas = entry.rocblas.clone();
    let mut arch = entry.arch.clone();
    let mut library = entry.library().map(str::to_string);
    if let Some((_, first)) = ranks.first() {
        if let Ok(f) = tunableop::read(first) {
            rocblas = rocblas.or_else(|| f.validator("ROCBLAS_VERSION").map(str::to_string));
            arch = arch.or_else(|| f.validator("GCN_ARCH_NAME").map(str::to_string));
            library = library.or_else(|| f.validator("TUNEDBLAS_BACKEND").map(str::to_string));
        }
    }
    Ok(Picked {
        name,
        dir,
        sha256: entry.lib_sha256.clone(),
        library: library.unwrap_or_else(|| "rocblas".into()),
        rocblas,
        arch,
        ranks,
    })
}
