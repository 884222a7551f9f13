//! hipBLASLt (AMD GPUs), on the HIP runtime it links. The heuristic's first answer is what
//! PyTorch runs without TunableOp; the candidates are every algorithm `getAllAlgos` lists
//! for the problem's types that `matmulIsAlgoSupported` accepts for exactly this problem
//! within the callers' workspace (over a thousand on an MI300: the screening's budget
//! bounds them), each named by its index (`Gemm_Hipblaslt_<index>`, the row PyTorch
//! TunableOp writes and the interposer rebuilds with `getAlgosFromIndex`). The C++
//! `hipblaslt_ext` functions are called through the exception guard ([`guard`]).
//!
//! No AMD GPU is at hand where this was written: it runs in CI on the stand-in hipBLASLt
//! and HIP runtime (`tests/hosts/fake_hipblaslt.cpp`, `fake_hip.c`), on no real device yet.

mod guard;

use std::ffi::c_void;
use std::path::Path;

use tunedblas_core::abi::*;
use tunedblas_core::cublaslt::{LtAction, LtKey, LtLib};
use tunedblas_core::hipblaslt::{hip_compute_type, hip_operation, SOLUTION_PREFIX};

use super::lt::{self, Attrs, Flavor, LtApi, LtProblem};
use super::{Kind, Library, Spec};
use crate::bench::{Cand, Screen};
use crate::curate::RowChoice;
use crate::dl;
use crate::error::{Error, Result};
use crate::runtime::{Api, Runtime};
use crate::store::Build;
use crate::timer::Delay;

/// Names tried for hipBLASLt and for the HIP runtime, newest first.
pub const HIPBLASLT_NAMES: &[&str] = &["libhipblaslt.so.1", "libhipblaslt.so.0", "libhipblaslt.so"];
pub const HIP_NAMES: &[&str] = &["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so"];

fn check(what: &str, st: i32) -> Result<()> {
    match st {
        HIPBLAS_STATUS_SUCCESS => Ok(()),
        guard::THREW => Err(Error::failed(format!("{what} threw a C++ exception"))),
        st => Err(Error::failed(format!(
            "{what} returned hipBLAS status {st}"
        ))),
    }
}

/// hipBLASLt, its `hipblaslt_ext` functions (through the guard) and its HIP runtime.
pub struct Hipblaslt {
    pub api: LtApi,
    build: Build,
    rt: Runtime,
    all_algos: *mut c_void,
    from_index: *mut c_void,
    index_of: *mut c_void,
    is_supported: *mut c_void,
    guard: guard::Guard,
}

// SAFETY: function pointers of thread-safe libraries.
unsafe impl Sync for Hipblaslt {}

/// The HIP runtime hipBLASLt runs on, found through its handle `h` (a process with two HIP
/// runtimes would hand one's buffers and streams to the other). `given`, where named, must
/// be that file (after symlinks), else the error says which one it is.
fn runtime(h: dl::Handle, given: Option<&Path>, lt_path: &Path) -> Result<Runtime> {
    // SAFETY: only the address is used.
    let linked = unsafe { dl::sym::<*mut c_void>(h, "hipMalloc") }
        .and_then(|p| tunedblas_core::identity::library_of_address(p as usize));
    let (rt_h, file) = match (given, &linked) {
        (None, Some(file)) => (h, file.clone()),
        _ => {
            let names = (given, "TUNEDBLAS_HIP", HIP_NAMES);
            let pass = "--hip <libamdhip64.so>";
            let (rt_h, named) = dl::open_named(names, "the HIP runtime", pass)?;
            let file = dl::file_of(rt_h, "hipMalloc", &named);
            let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
            if let Some(linked) = linked.filter(|l| real(l) != real(&file)) {
                return Err(Error::not_loaded(format!(
                    "{} runs on the HIP runtime {}, not {}: leave --hip out (and $TUNEDBLAS_HIP unset) or name that file",
                    lt_path.display(),
                    linked.display(),
                    file.display()
                )));
            }
            (rt_h, file)
        }
    };
    // SAFETY: the HIP runtime's symbols have their C types.
    unsafe { Runtime::load(Api::Hip, rt_h, file) }
}

impl Hipblaslt {
    /// Loads hipBLASLt (`--lib`, else `$TUNEDBLAS_HIPBLASLT`, else `libhipblaslt.so.1`), the
    /// guard, and the HIP runtime; then checks there is a device (exit 4 where not).
    pub fn open(spec: &Spec) -> Result<Hipblaslt> {
        let (h, path) = lt::open(
            spec.lib.as_deref(),
            "TUNEDBLAS_HIPBLASLT",
            HIPBLASLT_NAMES,
            "hipblasLtMatmul",
            "hipBLASLt",
        )?;
        let rt = runtime(h, spec.runtime.as_deref(), &path)?;
        rt.device_count().map_err(|e| {
            Error::no_device(format!("{} (HIP runtime {})", e.message, rt.path.display()))
        })?;
        let attrs = Attrs {
            transa: HIPBLASLT_MATMUL_DESC_TRANSA,
            transb: HIPBLASLT_MATMUL_DESC_TRANSB,
            epilogue: HIPBLASLT_MATMUL_DESC_EPILOGUE,
            bias_pointer: HIPBLASLT_MATMUL_DESC_BIAS_POINTER,
            bias_type: HIPBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
            sm_count: None,
            batch_count: HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
            batch_offset: HIPBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
            max_workspace: HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            alignment: None,
            op: hip_operation,
            compute: hip_compute_type,
        };
        let guard = guard::load()?;
        // SAFETY: each symbol has the C type src/abi.rs gives it (hipblaslt.h; the C++ ones
        // are only ever called through the guard, with the real header's signatures).
        unsafe {
            let api = LtApi::load(h, "hipblasLt", "hipBLASLt", attrs, check)?;
            // The version (e.g. 100100 for hipBLASLt 1.1.0) is a handle's to say, on a device.
            let version: HipblasLtGetVersionFn = dl::need(h, "hipblasLtGetVersion", "hipBLASLt")?;
            let mut v = 0;
            version(api.handle()?, &mut v);
            Ok(Hipblaslt {
                api,
                build: Build::of("hipblaslt", &path, Some(v.to_string()), None)?,
                rt,
                all_algos: dl::need(h, HIPBLASLT_EXT_GET_ALL_ALGOS, "hipBLASLt")?,
                from_index: dl::need(h, HIPBLASLT_EXT_GET_ALGOS_FROM_INDEX, "hipBLASLt")?,
                index_of: dl::need(h, HIPBLASLT_EXT_GET_INDEX_FROM_ALGO, "hipBLASLt")?,
                is_supported: dl::need(h, HIPBLASLT_EXT_MATMUL_IS_ALGO_SUPPORTED, "hipBLASLt")?,
                guard,
            })
        }
    }
}

/// One device: its handle (hipBLASLt's handle is made on the current device).
pub struct HipblasltSession<'l> {
    lib: &'l Hipblaslt,
    handle: HipblasLtHandle,
}

impl HipblasltSession<'_> {
    /// `getAlgosFromIndex` for one index: the algorithm a `Gemm_Hipblaslt_<index>` row
    /// names, as the interposer rebuilds it.
    fn algo_from_index(&self, index: i32) -> std::result::Result<HipblasLtMatmulAlgo, String> {
        let mut algo = HipblasLtMatmulAlgo::default();
        // SAFETY: the guard calls getAlgosFromIndex with its own vectors and writes `algo`.
        match unsafe {
            (self.lib.guard.algo_from_index)(self.lib.from_index, self.handle, index, &mut algo)
        } {
            -1 => Err(format!(
                "this hipBLASLt build has no algorithm of index {index}"
            )),
            st => check(&format!("hipblaslt_ext::getAlgosFromIndex({index})"), st)
                .map(|()| algo)
                .map_err(|e| e.message),
        }
    }

    /// `getIndexFromAlgo`: the index a `Gemm_Hipblaslt_<index>` row names.
    fn index_of(&self, algo: &HipblasLtMatmulAlgo) -> Result<i32> {
        let (mut a, mut index) = (*algo, -1);
        // SAFETY: the guard calls getIndexFromAlgo on our copy.
        check("hipblaslt_ext::getIndexFromAlgo", unsafe {
            (self.lib.guard.index_of)(self.lib.index_of, &mut a, &mut index)
        })?;
        Ok(index)
    }

    /// `matmulIsAlgoSupported` for `p`: the workspace it needs, or the status. hipBLASLt
    /// writes into `algo` how the problem must run with it (e.g. its fallback flag, which
    /// `hipblasLtMatmul` reads): the algorithm as updated here is the one timed and served,
    /// as the interposer and PyTorch TunableOp run it.
    fn supported(
        &self,
        p: &LtProblem<'_, Self>,
        algo: &mut HipblasLtMatmulAlgo,
    ) -> std::result::Result<usize, i32> {
        let l = &p.layouts;
        let mut ws = 0usize;
        // SAFETY: live descriptors of one problem; the guard passes `algo` and `ws` by reference.
        let st = unsafe {
            (self.lib.guard.is_supported)(
                self.lib.is_supported,
                self.handle,
                p.desc,
                (&lt::ALPHA as *const f32).cast(),
                l[0],
                l[1],
                (&lt::BETA as *const f32).cast(),
                l[2],
                l[3],
                algo,
                &mut ws,
            )
        };
        match st {
            HIPBLAS_STATUS_SUCCESS => Ok(ws),
            st => Err(st),
        }
    }

    /// `getAllAlgos` for a plain GEMM of `key`'s operations and types.
    fn all_algos(&self, key: &LtKey) -> Result<Vec<HipblasLtMatmulHeuristicResult>> {
        let compute = hip_compute_type(key.compute).expect("checked by the problem");
        let mut out = vec![HipblasLtMatmulHeuristicResult::default(); 256];
        loop {
            let mut total = 0usize;
            // SAFETY: the guard calls getAllAlgos with its own vector and copies at most
            // out.len() results into `out`.
            check("hipblaslt_ext::getAllAlgos", unsafe {
                (self.lib.guard.all_algos)(
                    self.lib.all_algos,
                    self.handle,
                    EXT_GEMM_TYPE_GEMM,
                    hip_operation(key.trans_a),
                    hip_operation(key.trans_b),
                    key.a_type,
                    key.b_type,
                    key.c_type,
                    key.d_type,
                    compute,
                    out.as_mut_ptr(),
                    out.len(),
                    &mut total,
                )
            })?;
            if total <= out.len() {
                out.truncate(total);
                return Ok(out);
            }
            out = vec![HipblasLtMatmulHeuristicResult::default(); total];
        }
    }
}

impl Library for Hipblaslt {
    type Key = LtKey;
    type Session<'l> = HipblasltSession<'l>;

    fn parts(&self) -> (Kind, &Build, &Runtime) {
        (Kind::Hipblaslt, &self.build, &self.rt)
    }
    fn session(&self, device: i32) -> Result<HipblasltSession<'_>> {
        self.rt.set_device(device)?;
        Ok(HipblasltSession {
            lib: self,
            handle: self.api.handle()?,
        })
    }
    fn row(&self, solution: &str) -> RowChoice {
        lt::row(LtLib::Hipblaslt, solution)
    }
    fn results(&self, rows: &[(LtKey, String, Option<f64>)]) -> String {
        let validators = [
            ("TUNEDBLAS_BACKEND", "hipblaslt".into()),
            ("HIPBLASLT_VERSION", self.build.version.clone()),
            ("HIP_RUNTIME_VERSION", self.rt.version().to_string()),
        ];
        lt::results(&validators, rows)
    }
    fn describe(&self) -> Vec<(&'static str, String)> {
        vec![("hipblaslt_version", self.build.version.clone())]
    }
}

impl Flavor for HipblasltSession<'_> {
    type Algo = HipblasLtMatmulAlgo;
    type Answer = HipblasLtMatmulHeuristicResult;

    fn parts(&self) -> (&LtApi, &Runtime, *mut c_void) {
        (&self.lib.api, &self.lib.rt, self.handle)
    }
    /// No delay kernel ahead of hipBLASLt's samples (it would need a device code object):
    /// graph samples are replayed once untimed ahead instead.
    fn delay(&self) -> Option<&dyn Delay> {
        None
    }
    fn state(a: &HipblasLtMatmulHeuristicResult) -> i32 {
        a.state
    }
    fn id(a: &HipblasLtMatmulAlgo) -> Vec<u8> {
        a.data.to_vec()
    }
    fn heuristic(p: &LtProblem<'_, Self>) -> Result<Cand<HipblasLtMatmulAlgo>> {
        let a = p.answers(1)?;
        let a = a.first().ok_or_else(|| {
            Error::failed("hipBLASLt's heuristic has no algorithm for this problem")
        })?;
        Ok(Cand {
            name: LtAction::Index(p.session.index_of(&a.algo)?).solution_text(),
            algo: a.algo,
        })
    }
    fn candidates(
        p: &LtProblem<'_, Self>,
        screen: &mut Screen<'_, HipblasLtMatmulAlgo>,
    ) -> Result<()> {
        let s = p.session;
        for mut r in s.all_algos(&p.key)? {
            let index = match s.index_of(&r.algo) {
                Ok(i) if i >= 0 => i,
                _ => {
                    screen.not_probed("no index (getIndexFromAlgo), so no row can name it");
                    continue;
                }
            };
            let name = format!("{SOLUTION_PREFIX}{index}");
            match s.supported(p, &mut r.algo) {
                Ok(ws) if ws <= p.workspace_bytes => {
                    if !screen.offer(Cand { name, algo: r.algo }) {
                        break;
                    }
                }
                Ok(_) => screen.not_probed("needs more workspace than callers give (--workspace)"),
                Err(HIPBLAS_STATUS_INVALID_VALUE | HIPBLAS_STATUS_NOT_SUPPORTED) => {
                    screen.not_probed("not supported for this problem (matmulIsAlgoSupported)")
                }
                Err(st) => {
                    screen.not_probed(&check("matmulIsAlgoSupported", st).unwrap_err().message)
                }
            }
        }
        Ok(())
    }
    /// The algorithm of the row's index, rebuilt as the interposer rebuilds it and checked
    /// as it checks it.
    fn resolve(
        p: &LtProblem<'_, Self>,
        name: &str,
    ) -> std::result::Result<HipblasLtMatmulAlgo, String> {
        let Ok(LtAction::Index(index)) = LtAction::parse(name) else {
            return Err(format!("{name} is not a hipBLASLt row"));
        };
        let mut algo = p.session.algo_from_index(index)?;
        match p.session.supported(p, &mut algo) {
            Ok(ws) if ws <= p.workspace_bytes => Ok(algo),
            Ok(ws) => Err(format!(
                "needs {ws} bytes of workspace, callers give {} (--workspace)",
                p.workspace_bytes
            )),
            Err(st @ (HIPBLAS_STATUS_INVALID_VALUE | HIPBLAS_STATUS_NOT_SUPPORTED)) => Err(
                format!("matmulIsAlgoSupported refuses it for this problem (hipBLAS status {st})"),
            ),
            Err(st) => Err(check("matmulIsAlgoSupported", st).unwrap_err().message),
        }
    }
}
