//! rocBLAS version strings, as `rocblas_get_version_string` returns them and as PyTorch
//! copies them into the `ROCBLAS_VERSION` validator.
//!
//! The form is `MAJOR.MINOR.PATCH.<commit>[-dirty]`: `5.6.0.8d1ae90e`, but distributions build
//! without the commit id, so Debian's rocBLAS 5.5.1 says `2.47.0.` and its 6.4.4 says `4.4.1.`
//! (a trailing dot, nothing after it). The library version is not the ROCm version: ROCm 5.5
//! ships rocBLAS 2.47, ROCm 5.6-5.7 rocBLAS 3.x, ROCm 6.x rocBLAS 4.x, ROCm 7.x rocBLAS 5.x
//! (FACTS.md section 1), and what a solution id means follows the library version.

use std::cmp::Ordering;
use std::fmt;

/// A parsed rocBLAS library version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// The git commit id; `None` when the string has none (`2.47.0.`, `4.4.0`).
    pub commit: Option<String>,
    /// `-dirty` after the commit id.
    pub dirty: bool,
}

impl Version {
    /// Reads `2.47.0.`, `4.4.0`, `5.6.0.8d1ae90e`, `5.6.0.8d1ae90e-dirty`, `4.4` (patch 0).
    /// `None` for anything else (`unknown`, an empty string).
    pub fn parse(text: &str) -> Option<Version> {
        let t = text.trim();
        let mut parts = t.splitn(4, '.');
        let num = |p: Option<&str>| -> Option<u32> {
            let p = p?;
            (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse().ok())
                .flatten()
        };
        let major = num(parts.next())?;
        let minor = num(parts.next())?;
        let patch = match parts.next() {
            None => 0,
            p => num(p)?,
        };
        let (commit, dirty) = match parts.next() {
            None | Some("") => (None, false),
            Some(rest) => {
                let (id, dirty) = match rest.strip_suffix("-dirty") {
                    Some(id) => (id, true),
                    None => (rest, false),
                };
                if id.is_empty() {
                    (None, dirty)
                } else if id.bytes().all(|b| b.is_ascii_alphanumeric()) {
                    (Some(id.to_string()), dirty)
                } else {
                    return None;
                }
            }
        };
        Some(Version {
            major,
            minor,
            patch,
            commit,
            dirty,
        })
    }

    /// `MAJOR.MINOR.PATCH`, then `.commit` when there is one: `2.47.0`, `5.6.0.8d1ae90e`.
    /// Fit for a profile name.
    pub fn label(&self) -> String {
        match &self.commit {
            Some(c) => format!(
                "{}.{}.{}.{c}{}",
                self.major,
                self.minor,
                self.patch,
                if self.dirty { "-dirty" } else { "" }
            ),
            None => format!("{}.{}.{}", self.major, self.minor, self.patch),
        }
    }

    /// Whether two version strings name the same build as far as the strings can tell: the
    /// same numbers, and the same commit where both carry one (`2.47.0.` and `2.47.0` agree).
    pub fn same_build(&self, other: &Version) -> bool {
        (self.major, self.minor, self.patch) == (other.major, other.minor, other.patch)
            && match (&self.commit, &other.commit) {
                (Some(a), Some(b)) => a == b && self.dirty == other.dirty,
                _ => true,
            }
    }

    fn numbers(&self) -> (u32, u32, u32) {
        (self.major, self.minor, self.patch)
    }

    /// Whether this build reads `ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH`: it first appears in
    /// rocBLAS 3.1 (ROCm 5.7). rocBLAS 2.47 (ROCm 5.5) and 3.0 (ROCm 5.6) do not read it.
    pub fn reads_gemm_override_file(&self) -> bool {
        self.numbers() >= (3, 1, 0)
    }

    /// Whether `algo = solution_index` with an id <= 0 silently runs the heuristic (rocBLAS
    /// up to 4.x); on 5.x such ids name real solutions (-2, -9, Tensile's <= -11).
    pub fn nonpositive_id_is_heuristic(&self) -> bool {
        self.major <= 4
    }

    /// The ROCm release line this library version ships in, for messages.
    pub fn rocm(&self) -> &'static str {
        match (self.major, self.minor) {
            (0..=1, _) => "ROCm before 5.5",
            (2, _) => "ROCm 5.5",
            (3, 0) => "ROCm 5.6",
            (3, _) => "ROCm 5.7",
            (4, _) => "ROCm 6.x",
            (5, _) => "ROCm 7.x",
            _ => "a ROCm newer than this tool knows",
        }
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Version) -> Option<Ordering> {
        Some(self.numbers().cmp(&other.numbers()))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// The version string a loaded rocBLAS reports (`rocblas_get_version_string_size`, then
/// `rocblas_get_version_string`), if it has both functions and answers.
///
/// # Safety
/// `size` and `get` are those functions of a loaded rocBLAS (or behave like them).
pub unsafe fn reported(
    size: Option<crate::abi::GetVersionStringSizeFn>,
    get: Option<crate::abi::GetVersionStringFn>,
) -> Option<String> {
    let (size_fn, get_fn) = size.zip(get)?;
    let mut size = 0usize;
    // SAFETY: out-pointer to a usize.
    if unsafe { size_fn(&mut size) } != crate::abi::STATUS_SUCCESS || size == 0 || size > 4096 {
        return None;
    }
    let mut buf = vec![0u8; size];
    // SAFETY: buf has `size` bytes as the library asked.
    if unsafe { get_fn(buf.as_mut_ptr().cast(), size) } != crate::abi::STATUS_SUCCESS {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(size);
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// [`Version::same_build`] on two strings; strings that do not parse are compared as text.
pub fn same_build(a: &str, b: &str) -> bool {
    match (Version::parse(a), Version::parse(b)) {
        (Some(x), Some(y)) => x.same_build(&y),
        _ => a.trim() == b.trim(),
    }
}

/// The library major version of a version string (`2` for `2.47.0.`).
pub fn major_of(text: &str) -> Option<u32> {
    Version::parse(text).map(|v| v.major)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_builds_without_a_commit_id() {
        // What Debian's rocBLAS 5.5.1 and 6.4.4 return (tests/conformance checks the real ones).
        let v = Version::parse("2.47.0.").unwrap();
        assert_eq!(
            (v.major, v.minor, v.patch, v.commit.as_deref()),
            (2, 47, 0, None)
        );
        assert_eq!(v.label(), "2.47.0");
        assert_eq!(v.rocm(), "ROCm 5.5");
        let v = Version::parse("4.4.1.").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (4, 4, 1));
        assert_eq!(v.label(), "4.4.1");
    }

    #[test]
    fn upstream_builds_with_commit_and_dirty() {
        let v = Version::parse("5.6.0.8d1ae90e").unwrap();
        assert_eq!(v.commit.as_deref(), Some("8d1ae90e"));
        assert_eq!(v.label(), "5.6.0.8d1ae90e");
        let d = Version::parse("4.2.0.ab12-dirty").unwrap();
        assert!(d.dirty);
        assert_eq!(d.label(), "4.2.0.ab12-dirty");
        assert_eq!(Version::parse("4.4").unwrap().patch, 0);
        for bad in ["", "unknown", "2", "2.x.0", "2.47.0.a b", "-1.2.3"] {
            assert_eq!(Version::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn same_build_ignores_a_missing_commit_only() {
        assert!(same_build("2.47.0.", "2.47.0"));
        assert!(same_build("5.6.0.8d1ae90e", "5.6.0."));
        assert!(!same_build("5.6.0.8d1ae90e", "5.6.0.aaaaaaaa"));
        assert!(!same_build("2.47.0.", "2.47.1."));
        assert!(same_build("weird", " weird "));
    }

    #[test]
    fn what_each_version_reads_and_means() {
        let v = |s: &str| Version::parse(s).unwrap();
        assert!(!v("2.47.0.").reads_gemm_override_file());
        assert!(!v("3.0.0.abc").reads_gemm_override_file());
        assert!(v("3.1.0.abc").reads_gemm_override_file());
        assert!(v("4.4.1.").reads_gemm_override_file());
        assert!(v("2.47.0.").nonpositive_id_is_heuristic());
        assert!(v("4.4.1.").nonpositive_id_is_heuristic());
        assert!(!v("5.5.0.cd957402").nonpositive_id_is_heuristic());
        assert_eq!(major_of("2.47.0."), Some(2));
        assert!(v("3.1.0") > v("2.47.0."));
    }
}
