//! One small module per library: how to load it, key its shapes, and list, run and check
//! its candidates ([`crate::bench::Bench`]); everything else is the one pipeline's and the
//! one campaign's, so a fix there holds for every library at once. refblas and the
//! cuBLASLt and hipBLASLt stand-ins are these same modules loaded from the CPU libraries.

pub mod cublaslt;
pub mod hipblaslt;
pub mod lt;
pub mod rocblas;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::bench::Bench;
use crate::curate::RowChoice;
use crate::error::{Error, Result};
use crate::pipeline::Method;
use crate::runtime::Runtime;
use crate::store::Build;

/// The libraries tunedblas tunes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Rocblas,
    Hipblaslt,
    Cublaslt,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Rocblas, Kind::Hipblaslt, Kind::Cublaslt];

    /// The name in miss files (`-cublaslt-rank0.csv`), registry entries and `--backend`.
    pub fn tag(self) -> &'static str {
        match self {
            Kind::Rocblas => "rocblas",
            Kind::Hipblaslt => "hipblaslt",
            Kind::Cublaslt => "cublaslt",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Rocblas => "rocBLAS",
            Kind::Hipblaslt => "hipBLASLt",
            Kind::Cublaslt => "cuBLASLt",
        }
    }

    pub fn parse(tag: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.tag() == tag)
    }

    /// The library a miss file's name says its shapes came from (`<process>-cublaslt-rank0.csv`
    /// is cuBLASLt's; a name without a library tag is rocBLAS's, which records untagged).
    pub fn of_miss_file(name: &str) -> Kind {
        [Kind::Cublaslt, Kind::Hipblaslt]
            .into_iter()
            .find(|k| name.contains(&format!("-{}-rank", k.tag())))
            .unwrap_or(Kind::Rocblas)
    }

    /// The library a file is, by an entry point only that library exports (the interposer
    /// exports the GEMMs of all three, never their heuristics), read without running it; a
    /// file that cannot be read (a soname) by its name.
    pub fn of_file(path: &Path) -> Option<Kind> {
        const BY: [(Kind, &str); 3] = [
            (Kind::Rocblas, "rocblas_gemm_ex_get_solutions"),
            (Kind::Hipblaslt, "hipblasLtMatmulAlgoGetHeuristic"),
            (Kind::Cublaslt, "cublasLtMatmulAlgoGetHeuristic"),
        ];
        let name = path.file_name()?.to_string_lossy().to_lowercase();
        match tunedblas_core::elf::defines(path, BY[0].1) {
            Err(_) => Kind::ALL.into_iter().find(|k| name.contains(k.tag())),
            Ok(true) => Some(Kind::Rocblas),
            Ok(false) => BY[1..]
                .iter()
                .find(|(_, sym)| tunedblas_core::elf::defines(path, sym).unwrap_or(false))
                .map(|b| b.0),
        }
    }
}

/// What to load: the library (else its usual names), and the runtime it runs on (HIP or
/// CUDA; else the one it links, or the usual names).
#[derive(Clone, Debug, Default)]
pub struct Spec {
    pub lib: Option<PathBuf>,
    pub runtime: Option<PathBuf>,
    /// GPU architecture to record where the runtime cannot say (`--arch`).
    pub arch: Option<String>,
}

/// What a library keys its shapes by: how results and miss files write and read them.
pub trait ShapeKey: Copy + Eq + Ord + std::hash::Hash + Send + Sync + std::fmt::Debug {
    /// `op_name,params_signature`, as results and miss files write the shape.
    fn text(&self) -> String;
    fn parse(text: &str) -> Option<Self>;
    /// An explicit shape as `--shape` gives it.
    fn parse_spec(spec: &str) -> std::result::Result<Self, String>;
    /// A short name of the shape for progress lines, and the token count (M of a linear
    /// layer) it is sorted by within its layer.
    fn label(&self) -> (String, i64);
    /// The rows of a results file: key, solution, ms.
    fn read(text: &str) -> Vec<(Self, String, Option<f64>)>;
}

/// A library, loaded once per process: what the campaign needs of it.
pub trait Library: Sync {
    type Key: ShapeKey;
    type Session<'l>: Session<Key = Self::Key>
    where
        Self: 'l;
    /// Which library it is, the build loaded and the runtime it runs on.
    fn parts(&self) -> (Kind, &Build, &Runtime);
    fn kind(&self) -> Kind {
        self.parts().0
    }
    fn build(&self) -> &Build {
        self.parts().1
    }
    fn runtime(&self) -> &Runtime {
        self.parts().2
    }
    /// Opens `device` for the calling thread: the device made current, the library's
    /// handle and whatever else is per device.
    fn session(&self, device: i32) -> Result<Self::Session<'_>>;
    fn key_text(&self, key: &Self::Key) -> String {
        key.text()
    }
    fn parse_key(&self, text: &str) -> Option<Self::Key> {
        Self::Key::parse(text)
    }
    fn parse_spec(&self, spec: &str) -> std::result::Result<Self::Key, String> {
        Self::Key::parse_spec(spec)
    }
    fn label(&self, key: &Self::Key) -> (String, i64) {
        key.label()
    }
    /// What a row's solution is to this library.
    fn row(&self, solution: &str) -> RowChoice;
    /// A results file of `rows` (key, solution, ms), with the build's validators.
    fn results(&self, rows: &[(Self::Key, String, Option<f64>)]) -> String;
    fn read(&self, text: &str) -> Vec<(Self::Key, String, Option<f64>)> {
        Self::Key::read(text)
    }
    /// Fields of the build's registry entry and the campaign record (versions, arch).
    fn describe(&self) -> Vec<(&'static str, String)>;
    /// The arguments that make a `tunedblas confirm` child load this library as loaded.
    fn child_args(&self) -> Vec<OsString> {
        let rt = match self.kind() {
            Kind::Cublaslt => "--cudart",
            _ => "--hip",
        };
        let (lib, runtime) = (&self.build().path, &self.runtime().path);
        vec!["--lib".into(), lib.into(), rt.into(), runtime.into()]
    }
}

/// One device of a library, on one thread.
pub trait Session {
    type Key;
    type Bench<'s>: Bench
    where
        Self: 's;
    fn bench(&self, key: &Self::Key, m: &Method) -> Result<Self::Bench<'_>>;
    /// A square 16-bit GEMM of `side` (the matmul rate's problem).
    fn square(&self, side: i64) -> Self::Key;
}

/// Every library this process has opened, by kind.
pub enum Opened {
    Rocblas(rocblas::Rocblas),
    Hipblaslt(hipblaslt::Hipblaslt),
    Cublaslt(cublaslt::Cublaslt),
}

/// Runs `$body` with `$l` bound to the library inside `$opened`, whatever its kind.
#[macro_export]
macro_rules! with_library {
    ($opened:expr, $l:ident => $body:expr) => {
        match $opened {
            $crate::backends::Opened::Rocblas($l) => $body,
            $crate::backends::Opened::Hipblaslt($l) => $body,
            $crate::backends::Opened::Cublaslt($l) => $body,
        }
    };
}

impl Opened {
    /// Loads the library of `kind` as `spec` says; a library that cannot be loaded or is
    /// another library is exit 3, a runtime that sees no device exit 4.
    pub fn open(kind: Kind, spec: &Spec) -> Result<Opened> {
        Ok(match kind {
            Kind::Rocblas => Opened::Rocblas(rocblas::Rocblas::open(spec)?),
            Kind::Hipblaslt => Opened::Hipblaslt(hipblaslt::Hipblaslt::open(spec)?),
            Kind::Cublaslt => Opened::Cublaslt(cublaslt::Cublaslt::open(spec)?),
        })
    }

    pub fn kind(&self) -> Kind {
        with_library!(self, l => l.kind())
    }
}

/// Whether `spec` is a shape `--shape` can give `kind` (read before anything is loaded, so
/// a mistake is exit 2 on any machine).
pub fn check_spec(kind: Kind, spec: &str) -> std::result::Result<(), String> {
    match kind {
        Kind::Rocblas => rocblas::parse_spec(spec).map(|_| ()),
        _ => lt::parse_spec(spec).map(|_| ()),
    }
}

/// Whether `spec` is a shape `--shape` can give any library: else the error in the words
/// of the form it resembles (rocBLAS's `TYPE:AB:M:N:K`, the Lt libraries' `N,M,K`).
pub fn check_spec_any(spec: &str) -> std::result::Result<(), String> {
    match (rocblas::parse_spec(spec), lt::parse_spec(spec)) {
        (Ok(_), _) | (_, Ok(_)) => Ok(()),
        (Err(e), _) if spec.contains(':') => Err(e),
        (_, Err(e)) if spec.contains(',') => Err(e),
        _ => Err(format!(
            "--shape {spec}: neither TYPE:AB:M:N:K[:BATCH] (rocBLAS, e.g. f16:TN:4096:256:4096) nor N,M,K (the Lt libraries' F.linear out, tokens, in)"
        )),
    }
}

/// The library a `--lib` path is, or the error saying it is none of them (exit 3).
pub fn kind_of(path: &Path) -> Result<Kind> {
    Kind::of_file(path).ok_or_else(|| {
        Error::not_loaded(format!(
            "{} is not rocBLAS, hipBLASLt or cuBLASLt (it exports none of rocblas_gemm_ex, hipblasLtMatmul, cublasLtMatmul)",
            path.display()
        ))
    })
}
