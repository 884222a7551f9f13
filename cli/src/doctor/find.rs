//! Which library the doctor tests: the one named (`--lib`), else the one this machine's
//! frameworks would call, found the way the tuner finds it (`$TUNEDBLAS_CUBLASLT`, then the
//! usual sonames through the dynamic loader; rocBLAS in the ROCm and distribution folders),
//! with the reason in words.

use std::ffi::c_void;
use std::path::{Path, PathBuf};

use tunedblas_tuner::backends::cublaslt::CUBLASLT_NAMES;
use tunedblas_tuner::backends::hipblaslt::HIPBLASLT_NAMES;
use tunedblas_tuner::backends::Kind;

/// A library picked, and why.
pub struct Found {
    pub kind: Kind,
    /// The file (what the loader maps: its sha256 names the profile).
    pub path: PathBuf,
    pub how: String,
    /// Other libraries seen here, for the line that says how to test them instead.
    pub others: Vec<(Kind, PathBuf)>,
}

/// Whether an NVIDIA driver is present (its device nodes or proc folder).
pub fn nvidia_present() -> bool {
    Path::new("/proc/driver/nvidia").is_dir() || Path::new("/dev/nvidiactl").exists()
}

/// The variable and the names the tuner tries for an Lt library, and its GEMM's name.
fn lt_names(kind: Kind) -> (&'static str, &'static [&'static str], &'static str) {
    match kind {
        Kind::Cublaslt => ("TUNEDBLAS_CUBLASLT", CUBLASLT_NAMES, "cublasLtMatmul"),
        _ => ("TUNEDBLAS_HIPBLASLT", HIPBLASLT_NAMES, "hipblasLtMatmul"),
    }
}

/// The file the dynamic loader maps for `name` (a soname found on its search path), if it
/// loads and exports `symbol`.
fn loader_finds(name: &Path, symbol: &str) -> Option<PathBuf> {
    let h = tunedblas_tuner::dl::open(name, libc::RTLD_LAZY | libc::RTLD_LOCAL).ok()?;
    // SAFETY: only the address is used.
    let addr = unsafe { tunedblas_tuner::dl::sym::<*mut c_void>(h, symbol) }?;
    tunedblas_core::identity::library_of_address(addr as usize)
}

/// Where `kind` is on this machine, and how it was found.
pub fn locate(kind: Kind) -> Option<(PathBuf, String)> {
    match kind {
        Kind::Rocblas => crate::env::candidates(&[])
            .into_iter()
            .find(|p| Kind::of_file(p) == Some(Kind::Rocblas))
            .map(|p| {
                let how = format!("found in {}", p.parent().unwrap_or(&p).display());
                (p, how)
            }),
        _ => {
            let (var, names, symbol) = lt_names(kind);
            if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                let p = crate::env::find_library(Path::new(&v));
                return Some((p, format!("${var}")));
            }
            names.iter().find_map(|n| {
                let p = loader_finds(Path::new(n), symbol)?;
                Some((
                    p,
                    format!("{n}, as the dynamic loader finds it (the name the tuner tries)"),
                ))
            })
        }
    }
}

/// The order to look in, with the reason: the library this machine's frameworks call.
fn preferred() -> (Vec<Kind>, String) {
    let archs = crate::env::gpu_archs();
    if nvidia_present() {
        return (
            vec![Kind::Cublaslt, Kind::Hipblaslt, Kind::Rocblas],
            "an NVIDIA driver is present: PyTorch's GEMMs go to cuBLASLt".into(),
        );
    }
    // PyTorch's hipBLASLt architectures (README: "AMD GPUs: rocBLAS or hipBLASLt"), taken
    // only where every visible GPU is one, as PyTorch does.
    let lt = |a: &String| {
        ["gfx90a", "gfx94", "gfx95", "gfx120"]
            .iter()
            .any(|p| a.starts_with(p))
    };
    if !archs.is_empty() && archs.iter().all(lt) {
        return (
            vec![Kind::Hipblaslt, Kind::Rocblas, Kind::Cublaslt],
            format!("AMD {}: PyTorch calls hipBLASLt there", archs.join(", ")),
        );
    }
    let why = match archs.is_empty() {
        true => "no GPU driver seen: looking for any library".to_string(),
        false => format!("AMD {}: PyTorch calls rocBLAS there", archs.join(", ")),
    };
    (vec![Kind::Rocblas, Kind::Hipblaslt, Kind::Cublaslt], why)
}

/// The library to test: `lib` where given (its kind from its exports), else the first of
/// `backend` (or this machine's order) that is here. `Err` says what is wrong.
pub fn find(lib: Option<&Path>, backend: Option<Kind>) -> Result<Found, String> {
    if let Some(given) = lib {
        let path = crate::env::find_library(given);
        if !path.is_file() {
            return Err(format!(
                "--lib {}: no such file (a soname is looked for in $ROCM_PATH/lib, /opt/rocm/lib, $LD_LIBRARY_PATH and the system library folders)",
                given.display()
            ));
        }
        let Some(kind) = Kind::of_file(&path) else {
            return Err(format!(
                "--lib {}: not rocBLAS, hipBLASLt or cuBLASLt (it exports none of rocblas_gemm_ex_get_solutions, hipblasLtMatmulAlgoGetHeuristic, cublasLtMatmulAlgoGetHeuristic)",
                path.display()
            ));
        };
        if let Some(b) = backend.filter(|b| *b != kind) {
            return Err(format!(
                "--lib {} is {}, --backend says {}",
                path.display(),
                kind.name(),
                b.name()
            ));
        }
        return Ok(Found {
            kind,
            path,
            how: "--lib".into(),
            others: vec![],
        });
    }
    let (order, why) = match backend {
        Some(b) => (vec![b], "--backend".to_string()),
        None => preferred(),
    };
    let mut found: Vec<(Kind, PathBuf, String)> = Kind::ALL
        .into_iter()
        .filter_map(|k| locate(k).map(|(p, how)| (k, p, how)))
        .collect();
    found.sort_by_key(|(k, ..)| order.iter().position(|o| o == k).unwrap_or(usize::MAX));
    match found.iter().position(|(k, ..)| order.contains(k)) {
        Some(i) => {
            let (kind, path, how) = found.remove(i);
            Ok(Found {
                kind,
                path,
                how: format!("{how}; {} ({why})", kind.name()),
                others: found.into_iter().map(|(k, p, _)| (k, p)).collect(),
            })
        }
        None => Err(format!(
            "no {} found here ({why})",
            order
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}
