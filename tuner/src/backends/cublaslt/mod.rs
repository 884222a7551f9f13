//! cuBLASLt (NVIDIA GPUs), on the CUDA runtime. The heuristic's first answer is what PyTorch
//! runs; the candidates are its other answers and then the wider search's configurations
//! ([`search`]), each rebuilt from its readable configuration exactly as the interposer
//! rebuilds it (`Gemm_Cublaslt_algo66_tile20_...` rows) and validated with
//! `cublasLtMatmulAlgoCheck` within the workspace callers give. A spin kernel holds the
//! stream ahead of each timed span; the reference is the same product with an f32 output.

pub mod grid;
pub mod search;
pub mod selftest;

use std::ffi::{c_char, c_void};
use std::path::Path;

use tunedblas_core::abi::Stream;
use tunedblas_core::cublaslt::*;
use tunedblas_core::key::Trans;
use tunedblas_lt_algo::{build_algo, read_config};

use super::lt::{self, Attrs, Flavor, LtApi, LtProblem};
use super::{Kind, Library, Spec};
use crate::bench::{Cand, Screen};
use crate::curate::RowChoice;
use crate::dl;
use crate::error::{Error, Result};
use crate::limits::ShapeLimit;
use crate::runtime::{Api, Runtime};
use crate::store::Build;
use crate::timer::Delay;

/// Default names tried for each library, newest first.
pub const CUDART_NAMES: &[&str] = &["libcudart.so.13", "libcudart.so.12", "libcudart.so"];
pub const CUBLASLT_NAMES: &[&str] = &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"];

/// Heuristic answers asked for: every one is a candidate, offered first.
const ANSWERS: usize = 32;

fn check(what: &str, st: i32) -> Result<()> {
    match st {
        STATUS_SUCCESS => Ok(()),
        st => Err(Error::failed(format!("{what} returned cuBLAS status {st}"))),
    }
}

/// cuBLASLt and its CUDA runtime, loaded.
pub struct Cublaslt {
    pub api: LtApi,
    build: Build,
    rt: Runtime,
    algo_init: AlgoInitFn,
    config_get: AlgoGetAttributeFn,
    config_set: AlgoSetAttributeFn,
    cap_get: AlgoGetAttributeFn,
    algo_check: AlgoCheckFn,
    get_ids: Option<search::AlgoGetIdsFn>,
    pub desc_get: GetAttributeFn,
    pub layout_get: GetAttributeFn,
    /// `cublasLtMatmul` as a linked host resolves it: an interposer's if one is preloaded.
    pub global_matmul: lt::LtMatmulFn,
}

// SAFETY: function pointers of thread-safe libraries.
unsafe impl Sync for Cublaslt {}

impl Cublaslt {
    /// Loads cuBLASLt (`--lib`, else `$TUNEDBLAS_CUBLASLT`, else `libcublasLt.so.13/.12`)
    /// and the CUDA runtime (`--cudart`, else `$TUNEDBLAS_CUDART`, else `libcudart.so.13/.12`),
    /// globally, as a host linked against them has them; then checks there is a device.
    pub fn open(spec: &Spec) -> Result<Cublaslt> {
        let (rt_h, rt_path) = dl::open_named(
            (spec.runtime.as_deref(), "TUNEDBLAS_CUDART", CUDART_NAMES),
            "the CUDA runtime",
            "--cudart <libcudart.so>",
        )?;
        let (h, path) = lt::open(
            spec.lib.as_deref(),
            "TUNEDBLAS_CUBLASLT",
            CUBLASLT_NAMES,
            "cublasLtMatmul",
            "cuBLASLt",
        )?;
        let attrs = Attrs {
            transa: DESC_TRANSA,
            transb: DESC_TRANSB,
            epilogue: DESC_EPILOGUE,
            bias_pointer: DESC_BIAS_POINTER,
            bias_type: DESC_BIAS_DATA_TYPE,
            sm_count: Some(DESC_SM_COUNT_TARGET),
            batch_count: LAYOUT_BATCH_COUNT,
            batch_offset: LAYOUT_STRIDED_BATCH_OFFSET,
            max_workspace: PREF_MAX_WORKSPACE_BYTES,
            alignment: Some((PREF_MIN_ALIGNMENT_A_BYTES, PREF_MIN_ALIGNMENT_D_BYTES)),
            op: |t: Trans| op_of(t),
            compute: Some,
        };
        // SAFETY: each symbol has the C type src/cublaslt/ gives it (cublasLt.h).
        let lib = unsafe {
            let version: GetVersionFn = dl::need(h, "cublasLtGetVersion", "cuBLASLt")?;
            Cublaslt {
                api: LtApi::load(h, "cublasLt", "cuBLASLt", attrs, check)?,
                build: Build::of("cublaslt", &path, Some(version().to_string()), None)?,
                rt: Runtime::load(Api::Cuda, rt_h, rt_path)?,
                algo_init: dl::need(h, "cublasLtMatmulAlgoInit", "cuBLASLt")?,
                config_get: dl::need(h, "cublasLtMatmulAlgoConfigGetAttribute", "cuBLASLt")?,
                config_set: dl::need(h, "cublasLtMatmulAlgoConfigSetAttribute", "cuBLASLt")?,
                cap_get: dl::need(h, "cublasLtMatmulAlgoCapGetAttribute", "cuBLASLt")?,
                algo_check: dl::need(h, "cublasLtMatmulAlgoCheck", "cuBLASLt")?,
                get_ids: dl::sym(h, "cublasLtMatmulAlgoGetIds"),
                desc_get: dl::need(h, "cublasLtMatmulDescGetAttribute", "cuBLASLt")?,
                layout_get: dl::need(h, "cublasLtMatrixLayoutGetAttribute", "cuBLASLt")?,
                global_matmul: dl::need(libc::RTLD_DEFAULT, "cublasLtMatmul", "the process")?,
            }
        };
        lib.rt.device_count()?;
        if lib.rt.arch(0).is_none() {
            return Err(Error::no_device(format!(
                "the CUDA runtime {} sees no usable device",
                lib.rt.path.display()
            )));
        }
        Ok(lib)
    }

    /// The configuration of a rebuilt or answered algorithm.
    pub fn config_of(&self, algo: &MatmulAlgo) -> Result<AlgoConfig> {
        // SAFETY: the library's own getter on a live algorithm.
        unsafe { read_config(self.config_get, algo) }.map_err(|st| {
            Error::failed(format!(
                "reading an algorithm's configuration failed ({st})"
            ))
        })
    }
}

/// A spin kernel: one thread spinning on the global nanosecond timer until its argument's
/// nanoseconds have passed, a delay that keeps the SMs and the memory idle (unlike a GEMM),
/// JIT-compiled from PTX by the driver (no compiler is linked).
const SPIN_PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
.visible .entry tunedblas_spin(.param .u64 ns)\n{\n\
\t.reg .pred %p;\n\t.reg .b64 %r<5>;\n\
\tld.param.u64 %r1, [ns];\n\tmov.u64 %r2, %globaltimer;\n\
WAIT:\n\tmov.u64 %r3, %globaltimer;\n\tsub.u64 %r4, %r3, %r2;\n\
\tsetp.lt.u64 %p, %r4, %r1;\n\t@%p bra WAIT;\n\tret;\n}\n\0";

/// Host microseconds to queue one timed call, generously (measured 3-5 us on an H200).
const HOST_US_PER_CALL: f64 = 10.0;

/// `cuLaunchKernel(function, grid x y z, block x y z, shared bytes, stream, params, extra)`.
#[rustfmt::skip]
type LaunchFn = unsafe extern "C" fn(
    *mut c_void, u32, u32, u32, u32, u32, u32, u32,
    *mut c_void, *mut *mut c_void, *mut *mut c_void,
) -> i32;

/// The spin kernel, loaded through the driver API into the current context.
pub struct Spin {
    launch: LaunchFn,
    func: *mut c_void,
}

impl Spin {
    fn load() -> Result<Spin> {
        type LoadFn = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> i32;
        type GetFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> i32;
        let h = dl::open(Path::new("libcuda.so.1"), libc::RTLD_NOW)?;
        // SAFETY: the driver API's documented types; the module stays loaded for good.
        unsafe {
            let load: LoadFn = dl::need(h, "cuModuleLoadData", "the CUDA driver")?;
            let get: GetFn = dl::need(h, "cuModuleGetFunction", "the CUDA driver")?;
            let (mut module, mut func) = (std::ptr::null_mut(), std::ptr::null_mut());
            driver(
                "cuModuleLoadData",
                load(&mut module, SPIN_PTX.as_ptr().cast()),
            )?;
            driver(
                "cuModuleGetFunction",
                get(&mut func, module, c"tunedblas_spin".as_ptr()),
            )?;
            Ok(Spin {
                launch: dl::need(h, "cuLaunchKernel", "the CUDA driver")?,
                func,
            })
        }
    }
}

impl Delay for Spin {
    // The stream is an opaque handle, passed to the driver, never dereferenced here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn enqueue(&self, s: Stream, calls: usize) -> Result<()> {
        let ms = calls as f64 * HOST_US_PER_CALL * 1e-3 * 1.5 + 0.05;
        let mut ns = (ms * 1e6).ceil() as u64;
        let mut params = [(&mut ns as *mut u64).cast::<c_void>()];
        let (argv, none) = (params.as_mut_ptr(), std::ptr::null_mut());
        // SAFETY: one block of one thread; the argument is copied before the call returns.
        let st = unsafe { (self.launch)(self.func, 1, 1, 1, 1, 1, 1, 0, s, argv, none) };
        driver("cuLaunchKernel", st)
    }
}

/// A CUDA driver call's status as a result.
fn driver(what: &str, st: i32) -> Result<()> {
    match st {
        0 => Ok(()),
        st => Err(Error::failed(format!("{what} returned {st}"))),
    }
}

/// One device: its handle and the spin kernel (where the driver loads it).
pub struct CublasltSession<'l> {
    pub lib: &'l Cublaslt,
    pub device: i32,
    handle: *mut c_void,
    pub spin: Option<Spin>,
}

impl Library for Cublaslt {
    type Key = LtKey;
    type Session<'l> = CublasltSession<'l>;

    fn parts(&self) -> (Kind, &Build, &Runtime) {
        (Kind::Cublaslt, &self.build, &self.rt)
    }
    fn session(&self, device: i32) -> Result<CublasltSession<'_>> {
        self.rt.set_device(device)?;
        let spin = Spin::load()
            .map_err(|e| {
                crate::note!("tunedblas: no spin kernel ({e}); samples are not held behind one")
            })
            .ok();
        Ok(CublasltSession {
            lib: self,
            device,
            handle: self.api.handle()?,
            spin,
        })
    }
    fn row(&self, solution: &str) -> RowChoice {
        lt::row(LtLib::Cublaslt, solution)
    }
    fn results(&self, rows: &[(LtKey, String, Option<f64>)]) -> String {
        let validators = [
            ("TUNEDBLAS_BACKEND", "cublaslt".into()),
            ("CUBLASLT_VERSION", self.build.version.clone()),
            ("CUDA_RUNTIME_VERSION", self.rt.version().to_string()),
            ("GPU_ARCH", self.rt.arch(0).unwrap_or_default()),
        ];
        lt::results(&validators, rows)
    }
    fn describe(&self) -> Vec<(&'static str, String)> {
        vec![
            ("cublaslt_version", self.build.version.clone()),
            ("arch", self.rt.arch(0).unwrap_or_default()),
        ]
    }
}

impl CublasltSession<'_> {
    /// Rebuilds `cfg` (as the interposer does) and asks `cublasLtMatmulAlgoCheck` whether
    /// it runs `p` within the workspace callers give.
    pub fn rebuild(
        &self,
        p: &LtProblem<'_, Self>,
        cfg: &AlgoConfig,
    ) -> std::result::Result<MatmulAlgo, String> {
        let lib = self.lib;
        // SAFETY: the library's own functions and a live handle.
        let algo = unsafe {
            build_algo(
                lib.algo_init,
                lib.config_set,
                lib.config_get,
                self.handle,
                &p.key,
                cfg,
            )
        }?;
        let mut res = HeuristicResult::default();
        let l = &p.layouts;
        // SAFETY: live descriptors, a valid algorithm and out-pointer.
        let st = unsafe {
            (lib.algo_check)(self.handle, p.desc, l[0], l[1], l[2], l[3], &algo, &mut res)
        };
        if st != STATUS_SUCCESS {
            return Err(format!("refused by cublasLtMatmulAlgoCheck ({st})"));
        }
        if res.workspace_size > p.workspace_bytes {
            return Err("needs more workspace than callers give".into());
        }
        Ok(algo)
    }
}

impl Flavor for CublasltSession<'_> {
    type Algo = MatmulAlgo;
    type Answer = HeuristicResult;

    fn parts(&self) -> (&LtApi, &Runtime, *mut c_void) {
        (&self.lib.api, &self.lib.rt, self.handle)
    }
    fn delay(&self) -> Option<&dyn Delay> {
        self.spin.as_ref().map(|s| s as &dyn Delay)
    }
    fn state(a: &HeuristicResult) -> i32 {
        a.state
    }
    fn id(a: &MatmulAlgo) -> Vec<u8> {
        a.data.iter().flat_map(|w| w.to_le_bytes()).collect()
    }
    /// Exactly what a caller asking for one answer gets (PyTorch does).
    fn heuristic(p: &LtProblem<'_, Self>) -> Result<Cand<MatmulAlgo>> {
        let a = p.answers(1)?;
        let a = a
            .first()
            .ok_or_else(|| Error::failed("cuBLASLt has no algorithm for this problem"))?;
        Ok(Cand {
            name: p.session.lib.config_of(&a.algo)?.solution_name(),
            algo: a.algo,
        })
    }
    /// The heuristic's other answers, rebuilt from their configurations, then the wider
    /// search around them.
    fn candidates(p: &LtProblem<'_, Self>, screen: &mut Screen<'_, MatmulAlgo>) -> Result<()> {
        let seeds = p
            .answers(ANSWERS)?
            .iter()
            .map(|a| p.session.lib.config_of(&a.algo))
            .collect::<Result<Vec<_>>>()?;
        search::sweep(p, &seeds, screen, &|_| false);
        search::search(p, &seeds, screen);
        Ok(())
    }
    fn resolve(p: &LtProblem<'_, Self>, name: &str) -> std::result::Result<MatmulAlgo, String> {
        p.session.rebuild(p, &AlgoConfig::parse(name)?)
    }
    /// The same product with an f32 C and D by cuBLASLt's own heuristic.
    fn reference(p: &LtProblem<'_, Self>) -> Result<Option<Vec<f64>>> {
        p.f32_output()
    }
    /// The grid the fastest configuration launches on the device's SMs.
    fn why(p: &LtProblem<'_, Self>, l: &ShapeLimit) -> Option<String> {
        let s = p.session;
        let sms = s.lib.rt.sm_count(s.device)?;
        let cfg = AlgoConfig::parse(&l.best).ok();
        let g = cfg.and_then(|c| grid::grid(&p.key, &c, sms));
        let best_ms = l.limit_ms * 100.0 / l.best_pct.max(1e-9);
        Some(grid::why(
            l.bound,
            l.best_pct,
            g.as_ref(),
            l.floor_ms / best_ms,
        ))
    }
}
