//! The doctor's workload, run in a child process (`tunedblas doctor-run`): a few `F.linear`
//! GEMMs called the way a linked host calls the library, so that a preloaded interposer
//! sees, records and serves them exactly as it would a framework's.
//!
//! - rocBLAS: `rocblas_gemm_ex` resolved in the global scope (the preload's when preloaded).
//! - cuBLASLt, hipBLASLt: the handle, the descriptors, the layouts and the matmul through
//!   the global scope too (as PyTorch makes them), the heuristic's first answer passed as
//!   the algorithm (as PyTorch passes it).
//!
//! Per shape it keeps D of input set 0 (written raw, so the served run can be compared with
//! the run without the preload element by element) and the device time per call.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tunedblas_tuner::backends::cublaslt::Cublaslt;
use tunedblas_tuner::backends::hipblaslt::Hipblaslt;
use tunedblas_tuner::backends::lt::LtApi;
use tunedblas_tuner::backends::rocblas::Rocblas;
use tunedblas_tuner::backends::{Kind, Library, Session as _, Spec};
use tunedblas_tuner::bench::Bench;
use tunedblas_tuner::curate::RowChoice;
use tunedblas_tuner::numerics::{median, Judge};
use tunedblas_tuner::pipeline::Method;
use tunedblas_tuner::timer::Mode;

use crate::error::{Error, Result};

/// What the child runs.
pub struct Plan {
    pub kind: Kind,
    pub spec: Spec,
    /// Shapes as `--shape` gives them to this library.
    pub shapes: Vec<String>,
    /// Calls per timed sample, and samples per shape (the median is kept).
    pub calls: usize,
    pub samples: usize,
    pub workspace: usize,
    /// Where to write each shape's D (`<i>.f64`) and its high-precision reference
    /// (`<i>.ref.f64`, where the library has one), if anywhere: the run without the preload.
    pub save: Option<PathBuf>,
    /// A run's saved outputs to compare each shape's D with.
    pub compare: Option<PathBuf>,
}

/// The library as the child loaded it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Loaded {
    pub library: PathBuf,
    pub version: String,
    pub runtime: PathBuf,
    pub devices: i32,
    pub arch: Option<String>,
    /// Whether the GEMM the host calls is not the library's own (an interposer's).
    pub interposed: bool,
}

/// One shape of the workload, as run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ShapeRun {
    /// `op,signature`, as miss files and profile rows write it.
    pub shape: String,
    pub label: String,
    /// Median device ms per call.
    pub ms: f64,
    /// Whether two runs of the shape in this process gave bit-identical outputs.
    pub deterministic: bool,
    /// Against `compare`: bit-identical; and within the tuner's numerics (what an adopted
    /// row must keep: the reference within the output type's tolerance, or twice the
    /// heuristic's own error where that is larger), with the relative L2 error, or why not.
    pub identical: Option<bool>,
    pub within: Option<bool>,
    pub rel_l2: Option<f64>,
    pub why: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    pub loaded: Loaded,
    /// GEMM calls this process made.
    pub calls: u64,
    pub shapes: Vec<ShapeRun>,
}

/// The API of an Lt library with everything a host resolves globally taken from the global
/// scope: what an LD_PRELOADed interposer exports is then the interposer's.
fn as_host(api: &LtApi, prefix: &str) -> Result<(LtApi, bool)> {
    let mut host = api.with_global_objects(prefix)?;
    let g = libc::RTLD_DEFAULT;
    // SAFETY: the symbols have the C types of the library's header, as the fields do.
    unsafe {
        host.create = tunedblas_tuner::dl::need(g, &format!("{prefix}Create"), "the process")?;
        host.matmul = tunedblas_tuner::dl::need(g, &format!("{prefix}Matmul"), "the process")?;
    }
    let interposed = host.matmul as usize != api.matmul as usize;
    Ok((host, interposed))
}

/// Loads the library as a host has it, without running anything.
pub fn probe(kind: Kind, spec: &Spec) -> Result<Loaded> {
    with_host(kind, spec, |lib, interposed| Ok(lib.loaded(interposed)))
}

/// Runs the plan.
pub fn run(plan: &Plan) -> Result<Report> {
    with_host(plan.kind, &plan.spec, |lib, interposed| {
        let (calls, shapes) = lib.run(plan)?;
        Ok(Report {
            loaded: lib.loaded(interposed),
            calls,
            shapes,
        })
    })
}

/// `verify`'s replay for any library: every row of `rows` (a profile's text) that is the
/// library's own or `Default` called once on each device, through the symbols a host
/// resolves (the preload's when preloaded), with the heuristic's first answer as the
/// algorithm, as PyTorch calls; returns the calls made and what failed, in words.
pub fn replay(kind: Kind, spec: &Spec, rows: &str, workspace: usize) -> Result<(u64, Vec<String>)> {
    with_host(kind, spec, |lib, _| lib.replay(rows, workspace))
}

/// Calls `f` with the library of `kind`, loaded as a host has it.
fn with_host<T>(
    kind: Kind,
    spec: &Spec,
    f: impl FnOnce(&dyn Host, bool) -> Result<T>,
) -> Result<T> {
    match kind {
        Kind::Rocblas => {
            let path = spec
                .lib
                .as_deref()
                .ok_or_else(|| Error::failed("rocBLAS needs --lib"))?;
            let lib = Rocblas::open_as_host(path)?;
            // SAFETY: only the addresses are compared.
            let interposed = unsafe {
                let global = tunedblas_tuner::dl::sym::<*mut std::ffi::c_void>(
                    libc::RTLD_DEFAULT,
                    "rocblas_gemm_ex",
                );
                let h = tunedblas_tuner::dl::open(path, libc::RTLD_NOW | libc::RTLD_NOLOAD)?;
                let own = tunedblas_tuner::dl::sym::<*mut std::ffi::c_void>(h, "rocblas_gemm_ex");
                global != own
            };
            f(&lib, interposed)
        }
        Kind::Cublaslt => {
            let mut lib = Cublaslt::open(spec)?;
            let (api, interposed) = as_host(&lib.api, "cublasLt")?;
            lib.api = api;
            f(&lib, interposed)
        }
        Kind::Hipblaslt => {
            let mut lib = Hipblaslt::open(spec)?;
            let (api, interposed) = as_host(&lib.api, "hipblasLt")?;
            lib.api = api;
            f(&lib, interposed)
        }
    }
}

/// What the child needs of a library, whatever its kind (the tuner's [`Library`] is
/// generic; this is the one object-safe slice of it the workload uses).
trait Host {
    fn loaded(&self, interposed: bool) -> Loaded;
    fn run(&self, plan: &Plan) -> Result<(u64, Vec<ShapeRun>)>;
    fn replay(&self, rows: &str, workspace: usize) -> Result<(u64, Vec<String>)>;
}

impl<L: Library> Host for L {
    fn loaded(&self, interposed: bool) -> Loaded {
        let rt = self.runtime();
        Loaded {
            library: self.build().path.clone(),
            version: self.build().version.clone(),
            runtime: rt.path.clone(),
            devices: rt.device_count().unwrap_or(0),
            arch: rt.arch(0),
            interposed,
        }
    }
    fn run(&self, plan: &Plan) -> Result<(u64, Vec<ShapeRun>)> {
        shapes_of(self, plan)
    }
    fn replay(&self, rows: &str, workspace: usize) -> Result<(u64, Vec<String>)> {
        replay_of(self, rows, workspace)
    }
}

/// The calls a host makes: plain calls back to back between two events, one operand set,
/// no rest, with the callers' workspace.
fn host_calls(workspace: usize) -> Method {
    Method {
        mode: Mode::Events,
        rest: 0.0,
        rotate_bytes: 1,
        workspace,
        ..Method::default()
    }
}

fn replay_of<L: Library>(lib: &L, rows: &str, workspace: usize) -> Result<(u64, Vec<String>)> {
    let m = host_calls(workspace);
    let rows = lib.read(rows);
    let keys: Vec<&L::Key> = rows
        .iter()
        .filter(|(_, s, _)| !matches!(lib.row(s), RowChoice::Foreign(_)))
        .map(|(k, _, _)| k)
        .collect();
    let (mut calls, mut failures) = (0u64, Vec::new());
    for device in 0..lib.runtime().device_count()? {
        let session = lib.session(device)?;
        for key in &keys {
            calls += 1;
            let ran = session.bench(key, &m).and_then(|b| {
                let h = b.heuristic()?;
                b.output(&h.algo).map(drop)
            });
            if let Err(e) = ran {
                failures.push(format!("{} on device {device}: {e}", lib.key_text(key)));
            }
        }
    }
    Ok((calls, failures))
}

/// `D` as raw little-endian f64.
fn save(path: &Path, out: &[f64]) -> Result<()> {
    let bytes: Vec<u8> = out.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(path, bytes)
        .map_err(|e| Error::failed(format!("cannot write {}: {e}", path.display())))
}

fn load(path: &Path) -> Result<Vec<f64>> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::failed(format!("cannot read {}: {e}", path.display())))?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn shapes_of<L: Library>(lib: &L, plan: &Plan) -> Result<(u64, Vec<ShapeRun>)> {
    let session = lib.session(0)?;
    // The calls a host makes, timed.
    let m = host_calls(plan.workspace);
    let mut calls = 0u64;
    let mut runs = Vec::new();
    for (i, spec) in plan.shapes.iter().enumerate() {
        let key = lib.parse_spec(spec).map_err(Error::failed)?;
        let shape = lib.key_text(&key);
        let b = session
            .bench(&key, &m)
            .map_err(|e| e.context(format!("shape {shape}")))?;
        let h = b.heuristic()?;
        let first = b.output(&h.algo)?;
        let second = b.output(&h.algo)?;
        calls += 2;
        let mut samples = Vec::with_capacity(plan.samples);
        for _ in 0..plan.samples {
            samples.push(b.time(&h.algo, plan.calls)?);
            calls += plan.calls as u64;
        }
        let mut run = ShapeRun {
            shape,
            label: lib.label(&key).0,
            ms: median(&samples),
            deterministic: same_bits(&first, &second),
            ..ShapeRun::default()
        };
        if let Some(dir) = &plan.save {
            save(&dir.join(format!("{i}.f64")), &first)?;
            // The reference is made here, without the preload: under it, the library's own
            // f32-output call would be a shape of its own, recorded as a miss.
            if let Some(r) = b.reference()? {
                save(&dir.join(format!("{i}.ref.f64")), &r)?;
            }
        }
        if let Some(dir) = &plan.compare {
            let base = load(&dir.join(format!("{i}.f64")))?;
            let reference = dir.join(format!("{i}.ref.f64"));
            let reference = reference.is_file().then(|| load(&reference)).transpose()?;
            run.identical = Some(same_bits(&first, &base));
            let verdict = Judge::new(b.layout(), reference, base).and_then(|j| j.check(&first));
            run.within = Some(verdict.is_ok());
            match verdict {
                Ok(e) => run.rel_l2 = Some(e),
                Err(why) => run.why = Some(why),
            }
        }
        runs.push(run);
    }
    Ok((calls, runs))
}
