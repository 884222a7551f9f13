//! Profile folders for the tests: `profiles.json` naming one profile and its rank files.
//!
//! ```ignore
//! Profile::v4(&dir).tuned(SPEC, sol).write();          // <dir>/profiles/ref-v4, rank 0
//! Profile::new(&dir.join("profiles"), "p", &sha)
//!     .row(SPEC, "Default").line(raw).ranks(2).write();
//! ```

use std::path::{Path, PathBuf};

use super::{row, sha4, sha5};

/// A profile to write: registry entry, validators, rows (the same rows in every rank).
#[must_use = "nothing is written until `write`"]
pub struct Profile {
    store: PathBuf,
    name: String,
    sha: String,
    validators: Vec<(String, String)>,
    lines: Vec<String>,
    ranks: usize,
}

impl Profile {
    /// The profile `name` for the build `sha` in the store `store` (the folder holding
    /// `profiles.json`), with PyTorch's usual validators and no rows yet.
    pub fn new(store: &Path, name: &str, sha: &str) -> Profile {
        Profile {
            store: store.to_path_buf(),
            name: name.to_owned(),
            sha: sha.to_owned(),
            validators: vec![
                ("PT_VERSION".into(), "2.7.0".into()),
                ("GCN_ARCH_NAME".into(), "gfx1030".into()),
            ],
            lines: Vec::new(),
            ranks: 1,
        }
    }

    /// `ref-v4`, for refblas v4, in `<dir>/profiles` (the store a host run in `dir` reads).
    pub fn v4(dir: &Path) -> Profile {
        Profile::new(&dir.join("profiles"), "ref-v4", &sha4())
    }

    /// `ref-v5`, for refblas v5, in `<dir>/profiles`.
    pub fn v5(dir: &Path) -> Profile {
        Profile::new(&dir.join("profiles"), "ref-v5", &sha5())
    }

    /// Replaces the validators (none at all with an empty list).
    pub fn validators(mut self, v: &[(&str, &str)]) -> Profile {
        self.validators = v
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self
    }

    /// A row for a host spec with this solution text (`Default`, `Gemm_Rocblas_<id>`).
    pub fn row(self, spec: &str, solution: &str) -> Profile {
        let r = row(spec, solution);
        self.line(r)
    }

    /// A row serving rocBLAS solution `id` for a host spec.
    pub fn tuned(self, spec: &str, id: i32) -> Profile {
        self.row(spec, &format!("Gemm_Rocblas_{id}"))
    }

    /// A line written as given (a hand-made row, a malformed line, a `*` row).
    pub fn line(mut self, line: impl Into<String>) -> Profile {
        self.lines.push(line.into());
        self
    }

    /// Lines written as given.
    pub fn lines<S: AsRef<str>>(mut self, lines: &[S]) -> Profile {
        self.lines
            .extend(lines.iter().map(|l| l.as_ref().to_owned()));
        self
    }

    /// The number of rank files (`tunableop_results0.csv` ...), each with the same rows.
    pub fn ranks(mut self, n: usize) -> Profile {
        self.ranks = n.max(1);
        self
    }

    /// Writes `profiles.json` and the rank files; returns the profile's folder.
    pub fn write(self) -> PathBuf {
        let (dir, files) = self.files();
        std::fs::create_dir_all(&dir).unwrap();
        for (path, text) in files {
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    /// Writes the files as the store commits them (`tunedblas_core::registry::Commit`:
    /// every temporary written first, then renamed over its target, the rank files before
    /// `profiles.json`), so a process reading the store without a lock sees each file old or
    /// new, never half of one; returns the profile's folder.
    pub fn commit(self) -> PathBuf {
        let (dir, mut files) = self.files();
        files.rotate_left(1);
        let mut commit = tunedblas_core::registry::Commit::new();
        for (path, text) in files {
            commit.write(path, text);
        }
        commit.apply().unwrap();
        dir
    }

    /// The profile's folder, and its files' paths and contents: `profiles.json` first,
    /// then the rank files.
    fn files(&self) -> (PathBuf, Vec<(PathBuf, String)>) {
        let registry = serde_json::json!({
            "profiles": { &self.name: {
                "dir": &self.name,
                "lib_sha256": &self.sha,
                "rows_per_rank": self.lines.len(),
                "status": "test"
            } }
        });
        let dir = self.store.join(&self.name);
        let mut files = vec![(
            self.store.join("profiles.json"),
            serde_json::to_string_pretty(&registry).unwrap(),
        )];
        let mut text = String::new();
        for (k, v) in &self.validators {
            text.push_str(&format!("Validator,{k},{v}\n"));
        }
        for l in &self.lines {
            text.push_str(l);
            text.push('\n');
        }
        for rank in 0..self.ranks {
            files.push((
                dir.join(format!("tunableop_results{rank}.csv")),
                text.clone(),
            ));
        }
        (dir, files)
    }
}

/// [`Profile`] as one call: `name` for `sha` in `store`, `rows` in each of `ranks` files.
pub fn write_profile(store: &Path, name: &str, sha: &str, rows: &[String], ranks: usize) {
    Profile::new(store, name, sha)
        .lines(rows)
        .ranks(ranks)
        .write();
}
