//! Choosing the profile for the loaded build and loading its rank files into tables.
//!
//! Pure logic over the registry and the TunableOp reader, so the interposer, `tunedblas
//! profiles which` and the tests all make the same decision with the same words.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::registry::{Match, Registry};
use crate::table::{Action, Table};
use crate::tunableop::{self, Solution};

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
        .map(|(p, v)| {
            format!(
                "{}: Validator ROCBLAS_VERSION is {v}, but the loaded rocBLAS reports {version}; check that this profile belongs to this build",
                p.display()
            )
        })
        .collect();
    let parsed = crate::version::Version::parse(version);
    if let (Some(v), Some((file, line, key, id))) = (&parsed, loaded.nonpositive_ids.first()) {
        if v.nonpositive_id_is_heuristic() {
            out.push(format!(
                "{}:{line}: {key} names solution {id}, and {} more rows name ids <= 0: rocBLAS {} ({}) runs its heuristic for an id <= 0, so these rows serve nothing tuned; re-tune this build or delete them",
                file.display(),
                loaded.nonpositive_ids.len() - 1,
                v.label(),
                v.rocm()
            ));
        }
    }
    out
}

/// [`version_problems`], under the name the interposer calls at load
/// (`cdylib/src/runtime.rs`): more than contradicting validators now.
pub fn contradicting_validators(loaded: &Loaded, version: &str) -> Vec<String> {
    version_problems(loaded, version)
}

/// Reads every `tunableop_results<rank>.csv` in `dir`.
pub fn load_tables(dir: &Path) -> Loaded {
    let mut loaded = Loaded::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            loaded.problems.push(format!(
                "{}: cannot read the profile folder: {e}",
                dir.display()
            ));
            return loaded;
        }
    };
    let mut files: Vec<(usize, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((rank_of_file(e.file_name().to_str()?)?, e.path())))
        .collect();
    files.sort();
    for (rank, path) in files {
        let parsed = match tunableop::read(&path) {
            Ok(p) => p,
            Err(e) => {
                loaded.problems.push(format!(
                    "{}: unreadable ({e}); rank {rank} serves nothing",
                    path.display()
                ));
                continue;
            }
        };
        for m in &parsed.malformed {
            loaded.problems.push(format!(
                "{}:{}: skipped: {}; fix or delete the line",
                path.display(),
                m.line,
                m.reason
            ));
        }
        for d in &parsed.duplicates {
            loaded.problems.push(format!(
                "{}:{}: duplicate of line {}; the first row wins",
                path.display(),
                d.line,
                d.first_line
            ));
        }
        loaded.unservable += parsed.unservable.len();
        if let Some(v) = parsed.validator("ROCBLAS_VERSION") {
            loaded.rocblas_versions.push((path.clone(), v.to_owned()));
        }
        for r in &parsed.rows {
            if let Solution::Rocblas(id) = r.solution {
                if id <= 0 {
                    let (op, sig) = tunableop::op_and_signature(&r.key);
                    loaded
                        .nonpositive_ids
                        .push((path.clone(), r.line, format!("{op},{sig}"), id));
                }
            }
        }
        let rows = parsed.rows.iter().filter_map(|r| match r.solution {
            Solution::Default => Some((r.key, Action::Default)),
            Solution::Rocblas(id) => Some((r.key, Action::Solution(id))),
            Solution::Other(_) => None,
        });
        let wildcards = parsed.wildcards.iter().filter_map(|w| {
            let action = match w.solution {
                Solution::Default => Action::Default,
                Solution::Rocblas(id) => Action::Solution(id),
                Solution::Other(_) => return None,
            };
            Some((w.pattern, format!("{},{}", w.op_name, w.signature), action))
        });
        let table = Table::with_wildcards(rows, wildcards);
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
