//! What a file says about the build it was tuned on, checked against the loaded build before
//! its rows become a profile: PyTorch TunableOp's validators and hipBLASLt's `Git Version:`.
//!
//! PyTorch on ROCm writes `PT_VERSION`, `HIP_VERSION` (which replaced `ROCM_VERSION`, pytorch
//! 162067), `ROCBLAS_VERSION`, `HIPBLASLT_VERSION` and `GCN_ARCH_NAME`, and drops the whole
//! file when any differs from its own. `HIPBLASLT_VERSION` is `<version>-<git revision>` as
//! hipBLASLt reports them (`hipblasLtGetVersion`, major * 100000 + minor * 100 + patch, e.g.
//! `100401-cd957402`; PyTorch 2.4 wrote `0.6.0-592518e7`). hipBLASLt's tuning files begin
//! with `Git Version: <revision>`, the same revision. Indices belong to one build, so a row
//! is adopted only where its file names the build it is adopted for; `HIP_VERSION` names the
//! HIP runtime PyTorch was built with, which the library cannot confirm: it is recorded.

/// What a hipBLASLt build says of itself (`hipblasLtGetVersion`, `hipblasLtGetGitRevision`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HipbltBuild {
    /// major * 100000 + minor * 100 + patch (100100 for hipBLASLt 1.1.0).
    pub version: i32,
    /// The git revision it was built from (empty where it was not built from git, as
    /// Debian's); `None` where it could not be read.
    pub git: Option<String>,
}

impl HipbltBuild {
    /// `major.minor.patch`.
    pub fn dotted(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}", v / 100_000, v / 100 % 1000, v % 100)
    }

    /// The `HIPBLASLT_VERSION` validator PyTorch writes for this build, where the revision
    /// is known.
    pub fn pytorch_validator(&self) -> Option<String> {
        self.git.as_ref().map(|g| format!("{}-{g}", self.version))
    }
}

/// `major * 100000 + minor * 100 + patch` of a version as PyTorch wrote it: the number, or
/// `major.minor.patch` (PyTorch 2.4 and older).
fn version_number(text: &str) -> Option<i32> {
    let t = text.trim();
    if let Ok(v) = t.parse::<i32>() {
        return Some(v);
    }
    let mut parts = t.split('.');
    let (a, b, c) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let n = |s: &str| s.parse::<i32>().ok().filter(|v| (0..100_000).contains(v));
    Some(n(a)? * 100_000 + n(b)? * 100 + n(c)?)
}

/// Checks a `HIPBLASLT_VERSION` validator against the build; the error names both.
pub fn check_hipblaslt_version(validator: &str, build: &HipbltBuild) -> Result<(), String> {
    let (ver, git) = match validator.trim().split_once('-') {
        Some((v, g)) => (v, Some(g)),
        None => (validator.trim(), None),
    };
    let theirs = version_number(ver)
        .ok_or_else(|| format!("HIPBLASLT_VERSION '{validator}' is not <version>-<revision>"))?;
    let ours = build
        .pytorch_validator()
        .unwrap_or_else(|| build.version.to_string());
    if theirs != build.version {
        return Err(format!(
            "the file's HIPBLASLT_VERSION is {validator}, the library is hipBLASLt {} ({ours})",
            build.dotted()
        ));
    }
    match (git, &build.git) {
        (Some(g), Some(b)) if g != b => Err(format!(
            "the file's HIPBLASLT_VERSION is {validator}, the library's revision is '{b}' ({ours})"
        )),
        (Some(_), None) => Err(format!(
            "the file's HIPBLASLT_VERSION names revision '{}', and the library's revision could not be read",
            git.unwrap_or_default()
        )),
        _ => Ok(()),
    }
}

/// Checks a tuning file's `Git Version:` against the build, as hipBLASLt compares them
/// (exactly, to the end of the first line).
pub fn check_git_version(file: Option<&str>, build: &HipbltBuild) -> Result<(), String> {
    let Some(file) = file else {
        return Err("the file has no `Git Version:` first line, so nothing says which hipBLASLt build its indices belong to (and hipBLASLt itself would ignore it as an override file)".into());
    };
    match &build.git {
        None => Err(format!(
            "the file is for hipBLASLt revision '{file}', and the library's revision could not be read"
        )),
        Some(b) if b != file => Err(format!(
            "the file is for hipBLASLt revision '{file}', the library is revision '{b}' (hipBLASLt {}): hipBLASLt would ignore this file, and its indices belong to that other build",
            build.dotted()
        )),
        Some(_) => Ok(()),
    }
}

/// The HIP runtime a file names: `HIP_VERSION` (current PyTorch) or `ROCM_VERSION` (older),
/// as (validator, value).
pub fn hip_runtime(validators: &[(String, String)]) -> Option<(&str, &str)> {
    ["HIP_VERSION", "ROCM_VERSION"].iter().find_map(|k| {
        validators
            .iter()
            .find(|(key, _)| key == k)
            .map(|(key, v)| (key.as_str(), v.as_str()))
    })
}

/// The architecture without its feature flags: `gfx942` of `gfx942:sramecc+:xnack-`.
pub fn base_arch(arch: &str) -> &str {
    arch.split(':').next().unwrap_or(arch).trim()
}

/// Checks a `GCN_ARCH_NAME` (or AITER's `gfx`) against the device the profile is for.
pub fn check_arch(file: &str, device: &str) -> Result<(), String> {
    if base_arch(file) == base_arch(device) {
        Ok(())
    } else {
        Err(format!(
            "the file was tuned on {file}, the profile is for {device}: indices differ between architectures"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(git: Option<&str>) -> HipbltBuild {
        HipbltBuild {
            version: 100100,
            git: git.map(str::to_string),
        }
    }

    #[test]
    fn hipblaslt_version_in_both_of_pytorchs_forms() {
        let b = build(Some("cd957402"));
        assert_eq!(b.dotted(), "1.1.0");
        assert_eq!(b.pytorch_validator().as_deref(), Some("100100-cd957402"));
        assert!(check_hipblaslt_version("100100-cd957402", &b).is_ok());
        assert!(check_hipblaslt_version("1.1.0-cd957402", &b).is_ok());
        let other = check_hipblaslt_version("100401-cd957402", &b).unwrap_err();
        assert!(
            other.contains("100401-cd957402") && other.contains("1.1.0"),
            "{other}"
        );
        assert!(check_hipblaslt_version("100100-8d1ae90e", &b).is_err());
        assert!(check_hipblaslt_version("0.6.0-592518e7", &b).is_err());
        assert!(check_hipblaslt_version("100100-x", &build(None)).is_err());
        assert!(check_hipblaslt_version("100100", &build(None)).is_ok());
        assert!(check_hipblaslt_version("one", &b).is_err());
    }

    #[test]
    fn git_versions_compare_exactly() {
        let debian = build(Some(""));
        assert!(check_git_version(Some(""), &debian).is_ok());
        assert!(check_git_version(Some("cd957402"), &debian).is_err());
        assert!(
            check_git_version(Some("\r"), &debian).is_err(),
            "CRLF never matches"
        );
        assert!(check_git_version(None, &debian).is_err());
        assert!(check_git_version(Some(""), &build(None)).is_err());
    }

    #[test]
    fn validators_and_arches() {
        let v = vec![
            ("ROCM_VERSION".to_string(), "6.0.0".to_string()),
            ("HIP_VERSION".to_string(), "714".to_string()),
        ];
        assert_eq!(hip_runtime(&v), Some(("HIP_VERSION", "714")));
        assert_eq!(hip_runtime(&v[..1]), Some(("ROCM_VERSION", "6.0.0")));
        assert!(check_arch("gfx942:sramecc+:xnack-", "gfx942").is_ok());
        assert!(check_arch("gfx950", "gfx942").is_err());
    }
}
