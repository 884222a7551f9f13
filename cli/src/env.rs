//! `tunedblas env`: the effective settings, the profile each rocBLAS on this machine would
//! get, and copy-paste snippets (a vLLM launcher, a systemd unit, a Dockerfile) filled in
//! with this installation's paths.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tunedblas_core::identity::{self, HashCache};
use tunedblas_core::profile::Selection;

/// One setting: its value and where the value comes from.
#[derive(Debug, Serialize)]
pub struct Setting {
    pub name: &'static str,
    pub value: String,
    /// `environment` or `default`.
    pub source: &'static str,
    pub meaning: &'static str,
}

pub fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The settings as the interposer reads them (`preload/src/lifecycle.rs`, `Config::from_env`).
pub fn settings(profile_dir: &Path) -> Vec<Setting> {
    let cache = identity::user_cache_dir();
    #[rustfmt::skip]
    let rows: [(&'static str, String, &'static str); 12] = [
        ("TUNEDBLAS_PROFILE_DIR", profile_dir.display().to_string(), "folder holding profiles.json and one folder per build"),
        ("TUNEDBLAS_PROFILE", "(unset: match the loaded rocBLAS by sha256)".into(), "use this profile by name; still checked against the loaded build"),
        ("TUNEDBLAS_ALLOW_MISMATCH", "0".into(), "1 serves a named profile made for another build"),
        ("TUNEDBLAS_MISS_DIR", cache.join("misses").display().to_string(), "where shapes without a row are recorded"),
        ("TUNEDBLAS_CACHE_DIR", cache.display().to_string(), "per-user cache of library hashes"),
        ("TUNEDBLAS_DISABLE", "0".into(), "1 passes every call through untouched"),
        ("TUNEDBLAS_LOG", "info".into(), "quiet, info or debug (stderr, rate-limited)"),
        ("TUNEDBLAS_NEAR", tunedblas_core::near::DEFAULT_WINDOW.to_string(), "serve a missed token count from the layer's nearest row within this many tokens (validated first); 0 or off: never"),
        ("TUNEDBLAS_STATS", "(unset)".into(), "write counters as JSON at exit"),
        ("TUNEDBLAS_RELOAD", "1".into(), "0 stops a running process from serving rows committed to the store after it started (looked at about every 2 s while calls arrive)"),
        ("TUNEDBLAS_STATUS_THREAD", "0".into(), "1 also rewrites the live status once a second from a thread of the interposer's own (by default the threads making GEMMs write it, and the host sees no thread of ours)"),
        ("TUNEDBLAS_GROUP_READ", "0".into(), "1 makes the miss logs, live status and Prometheus files readable by the group (0640, in a 0750 folder when the interposer makes it)"),
    ];
    rows.into_iter()
        .map(|(name, default, meaning)| {
            let set = var(name);
            Setting {
                name,
                source: if set.is_some() {
                    "environment"
                } else {
                    "default"
                },
                value: set.unwrap_or(default),
                meaning,
            }
        })
        .collect()
}

/// The folders rocBLAS is looked for in: `$ROCM_PATH/lib`, `/opt/rocm/lib`, the
/// `LD_LIBRARY_PATH` folders, then the distribution's library folders (Debian and Ubuntu
/// install `librocblas0`/`librocblas4` in `/usr/lib/<arch>-linux-gnu`, others use
/// `/usr/lib64`).
pub fn library_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(r) = var("ROCM_PATH") {
        dirs.push(Path::new(&r).join("lib"));
    }
    dirs.push(PathBuf::from("/opt/rocm/lib"));
    if let Some(l) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&l).filter(|d| !d.as_os_str().is_empty()));
    }
    dirs.push(PathBuf::from(format!(
        "/usr/lib/{}-linux-gnu",
        std::env::consts::ARCH
    )));
    dirs.push(PathBuf::from("/usr/lib64"));
    dirs.push(PathBuf::from("/usr/lib"));
    dirs
}

/// A library named without a folder (`librocblas.so.0`) found in [`library_dirs`]; a path
/// with a folder, or a file that exists as given, is returned as it is.
pub fn find_library(name: &Path) -> PathBuf {
    if name.components().count() != 1 || name.exists() {
        return name.to_path_buf();
    }
    library_dirs()
        .into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| name.to_path_buf())
}

/// The libraries the interposer serves that `env` looks for, by file-name prefix.
const SERVED: &[&str] = &["librocblas.so", "libhipblaslt.so"];

/// rocBLAS and hipBLASLt files worth a look: `--lib`, else every `librocblas.so*` and
/// `libhipblaslt.so*` in [`library_dirs`]. Each real file once.
pub fn candidates(given: &[PathBuf]) -> Vec<PathBuf> {
    if !given.is_empty() {
        return given.iter().map(|g| find_library(g)).collect();
    }
    let dirs = library_dirs();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut names: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| SERVED.iter().any(|p| n.starts_with(p)))
            })
            .collect();
        names.sort();
        for p in names {
            if let Ok(real) = std::fs::canonicalize(&p) {
                if real.is_file() && seen.insert(real) {
                    out.push(p);
                }
            }
        }
    }
    out
}

#[derive(Debug, Serialize)]
pub struct Found {
    pub library: PathBuf,
    /// `rocBLAS`, `hipBLASLt` or `cuBLASLt` (told from the file's exports), or `unknown`.
    pub kind: &'static str,
    pub sha256: Option<String>,
    pub profile: Option<String>,
    pub reason: String,
}

/// Which library a file is, from its exports (read from the file, not loaded).
pub fn kind_of(lib: &Path) -> &'static str {
    let defines = |name: &str| tunedblas_core::elf::defines(lib, name).unwrap_or(false);
    if defines("rocblas_create_handle") {
        "rocBLAS"
    } else if defines("hipblasLtMatmul") {
        "hipBLASLt"
    } else if defines("cublasLtMatmul") {
        "cuBLASLt"
    } else {
        "unknown"
    }
}

pub fn which(profile_dir: &Path, lib: &Path) -> Found {
    let kind = kind_of(lib);
    let (sha256, profile, reason) = match HashCache::for_user().identify(lib) {
        Err(e) => (None, None, format!("cannot hash it: {e}")),
        Ok(id) => match crate::profiles::selection(profile_dir, lib, kind, &id.sha256) {
            Ok(Selection::Chosen { name, reason, .. }) => (Some(id.sha256), Some(name), reason),
            Ok(Selection::None { why }) => (Some(id.sha256), None, why),
            Err(e) => (Some(id.sha256), None, e.message),
        },
    };
    Found {
        kind,
        library: lib.to_path_buf(),
        sha256,
        profile,
        reason,
    }
}

pub use tunedblas_core::device::{gpu_archs, KFD_NODES};

/// The device a TunableOp file's `GCN_ARCH_NAME` is checked against: `--arch` where given
/// (a machine without the GPU), else this machine's GPUs.
#[derive(Clone, Debug, Serialize)]
pub struct Device {
    pub archs: Vec<String>,
    /// `--arch`, or `this machine's GPUs` (the KFD topology).
    pub source: &'static str,
}

impl Device {
    pub fn new(given: Option<&str>) -> Device {
        match given {
            Some(a) => Device {
                archs: vec![a.to_string()],
                source: "--arch",
            },
            None => Device {
                archs: gpu_archs(),
                source: "this machine's GPUs",
            },
        }
    }
}

/// A file's `GCN_ARCH_NAME` against the device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", content = "text", rename_all = "lowercase")]
pub enum ArchCheck {
    /// The device is of the file's architecture.
    Same(String),
    /// It is not: PyTorch drops such a file, and its ids name another architecture's
    /// kernels.
    Other(String),
    /// Nothing to check it against, or nothing to check.
    Unchecked(String),
}

/// Checks `file_arch` (a `GCN_ARCH_NAME`; feature flags such as `:sramecc+` are not
/// compared, KFD does not give them) against `device`.
pub fn check_arch(file_arch: Option<&str>, device: &Device) -> ArchCheck {
    use tunedblas_core::formats::validators::base_arch;
    let Some(file) = file_arch.filter(|a| !a.is_empty() && *a != "unknown") else {
        return ArchCheck::Unchecked(
            "the file names no GCN_ARCH_NAME: its architecture is not checked".into(),
        );
    };
    if device.archs.is_empty() {
        return ArchCheck::Unchecked(format!(
            "GCN_ARCH_NAME {file} not checked: no AMD GPU is visible here ({KFD_NODES}); --arch names the device's"
        ));
    }
    let mut archs: Vec<&str> = device.archs.iter().map(|a| base_arch(a)).collect();
    archs.sort_unstable();
    archs.dedup();
    let list = archs.join(", ");
    if archs.contains(&base_arch(file)) {
        ArchCheck::Same(format!("GCN_ARCH_NAME {file}: {} {list}", device.source))
    } else {
        ArchCheck::Other(format!(
            "its GCN_ARCH_NAME is {file}, {} {} {list}: PyTorch drops a file tuned on another architecture, and its solution ids name that architecture's kernels",
            device.source,
            if device.source == "--arch" { "says" } else { "are" }
        ))
    }
}

#[derive(Debug, Serialize)]
pub struct Snippets {
    pub vllm: String,
    pub systemd: String,
    pub docker: String,
}

/// `name` in a folder of `$PATH`, if it is there.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Where the image's interposer, command and profile store go (`COPY dist/` there).
const IMAGE_PREFIX: &str = "/opt/tunedblas";
/// The miss folder inside the image and in the systemd unit.
const SERVICE_MISSES: &str = "/var/cache/tunedblas/misses";

/// The snippets, with this installation's paths. `prefix` is the install prefix when the
/// interposer sits in `<prefix>/lib` (the Dockerfile's context copies it).
pub fn snippets(preload: &Path, profile_dir: &Path, prefix: Option<&Path>) -> Snippets {
    let pre = preload.display();
    let dir = profile_dir.display();
    // No TUNEDBLAS_MISS_DIR: the interposer's own default is where `tunedblas status` and
    // `tunedblas tune` look with no argument (a folder named here would differ from it
    // wherever XDG_CACHE_HOME is set).
    let vllm = format!(
        r#"#!/bin/sh
# vllm-tuned: vLLM with tunedblas serving tuned rocBLAS GEMMs. Save, chmod +x, run as
#   ./vllm-tuned <model> --max-num-batched-tokens 2048 ...
export LD_PRELOAD="{pre}${{LD_PRELOAD:+:$LD_PRELOAD}}"
export TUNEDBLAS_PROFILE_DIR="{dir}"
# Misses go to $TUNEDBLAS_MISS_DIR, else the user cache's tunedblas/misses: where
# `tunedblas status` and `tunedblas tune` look when given no folder.
# On Instinct GPUs PyTorch prefers hipBLASLt, so rocBLAS sees no GEMM unless told:
# export TORCH_BLAS_PREFER_HIPBLASLT=0
exec vllm serve "$@"
"#
    );
    // systemd runs ExecStart with its own PATH: a venv's vllm is found only by its full
    // path. The one on this PATH now, else a placeholder to replace.
    let vllm_exe = on_path("vllm").map_or("/path/to/venv/bin/vllm".to_string(), |p| {
        p.display().to_string()
    });
    let user = var("USER")
        .filter(|u| u != "root")
        .unwrap_or_else(|| "vllm".into());
    let command = prefix.map_or("tunedblas".to_string(), |p| {
        p.join("bin/tunedblas").display().to_string()
    });
    // The interposer keeps its files to the user it runs as (files 0600 in a 0700 folder,
    // by design), so no group setting opens them to an operator: `status` is run as User=.
    let systemd = format!(
        r#"# /etc/systemd/system/vllm-tuned.service
# Check User= (the account that owns the model cache) and the vllm path (`which vllm`
# inside the venv vLLM runs from) before `systemctl enable --now vllm-tuned`.
# The live counters: the interposer keeps its files to User= (0600 in a 0700 folder), so
# read them as that user:
#   sudo -u {user} {command} status {SERVICE_MISSES}
[Unit]
Description=vLLM with tunedblas-tuned rocBLAS GEMMs
After=network-online.target

[Service]
User={user}
Environment=LD_PRELOAD={pre}
Environment=TUNEDBLAS_PROFILE_DIR={dir}
Environment=TUNEDBLAS_MISS_DIR={SERVICE_MISSES}
# /var/cache/tunedblas, made and owned by User= (the misses go there).
CacheDirectory=tunedblas
ExecStart={vllm_exe} serve <model> --max-num-batched-tokens 2048
# Misses are written as they happen; call counts at exit, which SIGINT lets happen.
KillSignal=SIGINT
Restart=on-failure

[Install]
WantedBy=multi-user.target
"#
    );
    let context = docker_context(prefix);
    let store = format!("{IMAGE_PREFIX}/share/tunedblas/profiles");
    let docker = format!(
        r#"# Dockerfile: a vLLM ROCm image with tunedblas. Build it from a folder (the build
# context) holding this Dockerfile and dist/, an install prefix:
{context}
#   docker build -t vllm-tuned .
ARG BASE=rocm/vllm:latest
FROM $BASE
COPY dist/ {IMAGE_PREFIX}/
# The interposer finds the profiles in {store} by itself.
ENV LD_PRELOAD={IMAGE_PREFIX}/lib/libtunedblas.so \
    TUNEDBLAS_MISS_DIR={SERVICE_MISSES}
# The misses, and the profile store: a `tunedblas tune` inside the container writes its rows
# there (the running server takes them by hot reload), so they outlive the container on a
# named volume, which starts as a copy of the image's profiles:
VOLUME /var/cache/tunedblas {store}
#   docker run --device /dev/kfd --device /dev/dri -v tunedblas-misses:/var/cache/tunedblas \
#     -v tunedblas-profiles:{store} vllm-tuned vllm serve <model>
#   docker exec <container> {IMAGE_PREFIX}/bin/tunedblas tune --lib <librocblas.so> {SERVICE_MISSES}
# `tunedblas env` inside the container shows the profile this rocBLAS gets:
#   docker run --rm --device /dev/kfd --device /dev/dri vllm-tuned {IMAGE_PREFIX}/bin/tunedblas env
"#
    );
    Snippets {
        vllm,
        systemd,
        docker,
    }
}

/// How the Dockerfile's context gets its `dist/`, as comment lines: this installation
/// where it is one (a prefix named `dist`: its folder is the context), else the installer
/// run there from a checkout, or this installation copied there.
fn docker_context(prefix: Option<&Path>) -> String {
    let install = "#   <checkout>/scripts/install --prefix ./dist     (run in the context folder)";
    match prefix {
        Some(p) if p.file_name().is_some_and(|n| n == "dist") => format!(
            "#   here: {} (its dist/ is this installation)",
            p.parent().unwrap_or(p).display()
        ),
        Some(p) => {
            let p = p.display();
            format!(
                "{install}\n# or this installation copied there:\n#   mkdir -p dist/bin dist/lib dist/share/tunedblas\n#   cp {p}/bin/tunedblas dist/bin/ && cp {p}/lib/libtunedblas.so dist/lib/\n#   cp -R {p}/share/tunedblas/profiles dist/share/tunedblas/"
            )
        }
        None => install.to_string(),
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub version: &'static str,
    pub preload: Option<PathBuf>,
    pub preloaded_now: bool,
    pub settings: Vec<Setting>,
    /// What the interposer would say of these settings (bad values, unknown names).
    pub problems: Vec<String>,
    pub libraries: Vec<Found>,
    pub snippets: Snippets,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_distribution_library_folder_is_searched() {
        let dirs = library_dirs();
        let multiarch = PathBuf::from(format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH));
        assert!(dirs.contains(&multiarch), "{dirs:?}");
        assert!(dirs.contains(&PathBuf::from("/usr/lib64")), "{dirs:?}");
        // A name with a folder is never searched for.
        assert_eq!(
            find_library(Path::new("./librocblas.so.0")),
            PathBuf::from("./librocblas.so.0")
        );
    }

    #[test]
    fn snippets_carry_the_paths() {
        let s = snippets(
            Path::new("/p/lib/libtunedblas.so"),
            Path::new("/p/share/tunedblas/profiles"),
            Some(Path::new("/p")),
        );
        for text in [&s.vllm, &s.systemd] {
            assert!(text.contains("/p/lib/libtunedblas.so"), "{text}");
            assert!(
                text.contains("TUNEDBLAS_PROFILE_DIR=")
                    && text.contains("/p/share/tunedblas/profiles"),
                "{text}"
            );
        }
        assert!(s.vllm.starts_with("#!/bin/sh\n") && s.vllm.contains("exec vllm serve \"$@\""));
        assert!(s.systemd.contains("[Service]") && s.systemd.contains("ExecStart="));
        // systemd finds no venv's vllm through `env`: ExecStart names a full path, and the
        // service runs as a user, not root.
        let exec = s
            .systemd
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap();
        assert!(
            exec.starts_with('/') && !exec.starts_with("/usr/bin/env"),
            "{exec}"
        );
        assert!(exec.contains("vllm serve"), "{exec}");
        let user = s.systemd.lines().find_map(|l| l.strip_prefix("User="));
        assert!(
            user.is_some_and(|u| !u.is_empty() && u != "root"),
            "{}",
            s.systemd
        );
        assert!(
            s.docker.contains("FROM $BASE")
                && s.docker
                    .contains("ENV LD_PRELOAD=/opt/tunedblas/lib/libtunedblas.so")
        );
    }
}
