//! The CUDA runtime and cuBLASLt, loaded at run time by path (never linked), so the binary
//! builds and its CPU tests run on machines without CUDA.
//!
//! The matmul entry point is taken from the library's own handle: an `LD_PRELOAD`ed
//! interposer never sees the tuning calls. [`Lt::global_matmul`] is the other way, the one
//! a host linked against cuBLASLt uses (global scope first), for measuring the interposer.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

use tunedblas_core::cublaslt::*;

/// A harness error in the words a user needs.
#[derive(Debug)]
pub struct Error(pub String);

/// A HIP call's failure (`crate::hipmem`) as this module's error.
impl From<String> for Error {
    fn from(why: String) -> Error {
        Error(why)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

pub fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error(msg.into()))
}

use crate::backend::dl_error;

/// Opens the first of `candidates` that loads.
pub(super) fn open_first(candidates: &[PathBuf], flags: c_int) -> Result<(*mut c_void, PathBuf)> {
    let mut errors = Vec::new();
    for p in candidates {
        let Ok(c) = CString::new(p.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        // SAFETY: dlopen with a valid C string.
        let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
        if !h.is_null() {
            return Ok((h, p.clone()));
        }
        errors.push(dl_error());
    }
    err(errors.join("; "))
}

pub(super) unsafe fn sym<T: Copy>(h: *mut c_void, name: &str) -> Result<T> {
    let c = CString::new(name).expect("symbol names have no NUL");
    // SAFETY: dlsym on a live handle.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    if p.is_null() {
        return err(format!("{name} not found"));
    }
    // SAFETY: the caller names the C type of this symbol.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

type CudaErr = c_int;
type MallocFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> CudaErr;
type FreeFn = unsafe extern "C" fn(*mut c_void) -> CudaErr;
type MemcpyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> CudaErr;
type MemsetFn = unsafe extern "C" fn(*mut c_void, c_int, usize) -> CudaErr;
type EventCreateFn = unsafe extern "C" fn(*mut *mut c_void) -> CudaErr;
type EventRecordFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> CudaErr;
type EventSyncFn = unsafe extern "C" fn(*mut c_void) -> CudaErr;
type EventElapsedFn = unsafe extern "C" fn(*mut f32, *mut c_void, *mut c_void) -> CudaErr;
type StreamCreateFn = unsafe extern "C" fn(*mut *mut c_void) -> CudaErr;
type StreamSyncFn = unsafe extern "C" fn(*mut c_void) -> CudaErr;
type GetErrorStringFn = unsafe extern "C" fn(CudaErr) -> *const c_char;
type DeviceGetAttributeFn = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CudaErr;
type RuntimeVersionFn = unsafe extern "C" fn(*mut c_int) -> CudaErr;
type MemcpyAsyncFn =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, *mut c_void) -> CudaErr;
type MemsetAsyncFn = unsafe extern "C" fn(*mut c_void, c_int, usize, *mut c_void) -> CudaErr;
type GetLastErrorFn = unsafe extern "C" fn() -> CudaErr;
type BeginCaptureFn = unsafe extern "C" fn(*mut c_void, c_int) -> CudaErr;
type EndCaptureFn = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> CudaErr;
type GraphInstantiateFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, u64) -> CudaErr;
type GraphLaunchFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> CudaErr;
type GraphDestroyFn = unsafe extern "C" fn(*mut c_void) -> CudaErr;
type GraphCreateFn = unsafe extern "C" fn(*mut *mut c_void, u32) -> CudaErr;

const MEMCPY_H2D: c_int = 1;
const MEMCPY_D2H: c_int = 2;
const MEMCPY_D2D: c_int = 3;
/// `cudaStreamCaptureModeThreadLocal`: other threads' CUDA calls do not break the capture.
const CAPTURE_THREAD_LOCAL: c_int = 1;
/// `cudaDevAttrMultiProcessorCount`.
const ATTR_SM_COUNT: c_int = 16;
/// `cudaDevAttrL2CacheSize`, `cudaDevAttrComputeCapabilityMajor` / `Minor`.
const ATTR_L2_BYTES: c_int = 38;
const ATTR_CC_MAJOR: c_int = 75;
const ATTR_CC_MINOR: c_int = 76;

/// The CUDA runtime calls the harness makes.
pub struct Cuda {
    malloc: MallocFn,
    free: FreeFn,
    memcpy: MemcpyFn,
    memset: MemsetFn,
    event_create: EventCreateFn,
    event_record: EventRecordFn,
    event_sync: EventSyncFn,
    event_elapsed: EventElapsedFn,
    stream_create: StreamCreateFn,
    stream_sync: StreamSyncFn,
    error_string: GetErrorStringFn,
    device_attr: DeviceGetAttributeFn,
    runtime_version: RuntimeVersionFn,
    memcpy_async: MemcpyAsyncFn,
    memset_async: MemsetAsyncFn,
    last_error: GetLastErrorFn,
    /// Stream capture and graphs; `None` in a runtime without them (the events mode remains).
    graphs: Option<GraphFns>,
    pub path: PathBuf,
}

/// The CUDA graph calls the graph-replay timing mode makes.
#[derive(Clone, Copy)]
struct GraphFns {
    begin: BeginCaptureFn,
    end: EndCaptureFn,
    instantiate: GraphInstantiateFn,
    launch: GraphLaunchFn,
    exec_destroy: GraphDestroyFn,
    destroy: GraphDestroyFn,
    create: GraphCreateFn,
}

/// An instantiated CUDA graph, destroyed on drop.
pub struct Graph<'a> {
    cuda: &'a Cuda,
    exec: *mut c_void,
    /// Operations captured in it (what a replay's time is divided by).
    pub ops: usize,
}

impl Graph<'_> {
    pub fn launch(&self, stream: *mut c_void) -> Result<()> {
        let g = self
            .cuda
            .graphs
            .expect("a graph exists only where graphs do");
        self.cuda
            .check("cudaGraphLaunch", unsafe { (g.launch)(self.exec, stream) })
    }
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.cuda.graphs {
            unsafe { (g.exec_destroy)(self.exec) };
        }
    }
}

/// Default names tried for each library, newest first.
pub const CUDART_NAMES: &[&str] = &["libcudart.so.13", "libcudart.so.12", "libcudart.so"];
pub const CUBLASLT_NAMES: &[&str] = &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"];

pub(super) fn candidates(explicit: Option<&Path>, env: &str, names: &[&str]) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    if let Some(p) = std::env::var_os(env).filter(|v| !v.is_empty()) {
        return vec![PathBuf::from(p)];
    }
    names.iter().map(PathBuf::from).collect()
}

impl Cuda {
    /// Loads the CUDA runtime: `path`, else `$TUNEDBLAS_CUDART`, else `libcudart.so.13/.12`.
    pub fn load(path: Option<&Path>) -> Result<Cuda> {
        let (h, path) = open_first(
            &candidates(path, "TUNEDBLAS_CUDART", CUDART_NAMES),
            libc::RTLD_NOW | libc::RTLD_GLOBAL,
        )
        .map_err(|e| {
            Error(format!(
                "cannot load the CUDA runtime ({}); pass --cudart <libcudart.so>",
                e.0
            ))
        })?;
        // SAFETY: each symbol has the C type of its alias (cuda_runtime_api.h).
        unsafe {
            Ok(Cuda {
                malloc: sym(h, "cudaMalloc")?,
                free: sym(h, "cudaFree")?,
                memcpy: sym(h, "cudaMemcpy")?,
                memset: sym(h, "cudaMemset")?,
                event_create: sym(h, "cudaEventCreate")?,
                event_record: sym(h, "cudaEventRecord")?,
                event_sync: sym(h, "cudaEventSynchronize")?,
                event_elapsed: sym(h, "cudaEventElapsedTime")?,
                stream_create: sym(h, "cudaStreamCreate")?,
                stream_sync: sym(h, "cudaStreamSynchronize")?,
                error_string: sym(h, "cudaGetErrorString")?,
                device_attr: sym(h, "cudaDeviceGetAttribute")?,
                runtime_version: sym(h, "cudaRuntimeGetVersion")?,
                memcpy_async: sym(h, "cudaMemcpyAsync")?,
                memset_async: sym(h, "cudaMemsetAsync")?,
                last_error: sym(h, "cudaGetLastError")?,
                graphs: (|| {
                    Ok::<_, Error>(GraphFns {
                        begin: sym(h, "cudaStreamBeginCapture")?,
                        end: sym(h, "cudaStreamEndCapture")?,
                        instantiate: sym(h, "cudaGraphInstantiateWithFlags")?,
                        launch: sym(h, "cudaGraphLaunch")?,
                        exec_destroy: sym(h, "cudaGraphExecDestroy")?,
                        destroy: sym(h, "cudaGraphDestroy")?,
                        create: sym(h, "cudaGraphCreate")?,
                    })
                })()
                .ok(),
                path,
            })
        }
    }

    pub fn check(&self, what: &str, e: CudaErr) -> Result<()> {
        if e == 0 {
            return Ok(());
        }
        // SAFETY: cudaGetErrorString returns a static string.
        let s = unsafe { CStr::from_ptr((self.error_string)(e)) }.to_string_lossy();
        err(format!("{what} failed: CUDA error {e} ({s})"))
    }

    pub fn alloc(&self, bytes: usize) -> Result<DevBuf<'_>> {
        let mut p = std::ptr::null_mut();
        // SAFETY: out-pointer.
        self.check("cudaMalloc", unsafe {
            (self.malloc)(&mut p, bytes.max(256))
        })?;
        Ok(DevBuf {
            cuda: self,
            ptr: p,
            bytes,
        })
    }

    pub fn stream(&self) -> Result<*mut c_void> {
        let mut s = std::ptr::null_mut();
        self.check("cudaStreamCreate", unsafe { (self.stream_create)(&mut s) })?;
        Ok(s)
    }

    pub fn event(&self) -> Result<*mut c_void> {
        let mut e = std::ptr::null_mut();
        self.check("cudaEventCreate", unsafe { (self.event_create)(&mut e) })?;
        Ok(e)
    }

    pub fn record(&self, ev: *mut c_void, stream: *mut c_void) -> Result<()> {
        self.check("cudaEventRecord", unsafe {
            (self.event_record)(ev, stream)
        })
    }

    /// Milliseconds between two recorded events (waits for the second).
    pub fn elapsed(&self, a: *mut c_void, b: *mut c_void) -> Result<f64> {
        self.check("cudaEventSynchronize", unsafe { (self.event_sync)(b) })?;
        let mut ms = 0f32;
        self.check("cudaEventElapsedTime", unsafe {
            (self.event_elapsed)(&mut ms, a, b)
        })?;
        Ok(ms as f64)
    }

    pub fn sync_stream(&self, s: *mut c_void) -> Result<()> {
        self.check("cudaStreamSynchronize", unsafe { (self.stream_sync)(s) })
    }

    /// Captures what `enqueue` puts on `stream` (a non-default stream) into a graph of `ops`
    /// operations and instantiates it. On any failure the capture is ended, the runtime's
    /// last (non-sticky) error cleared, and the error returned: the caller falls back.
    pub fn capture(
        &self,
        stream: *mut c_void,
        ops: usize,
        enqueue: impl FnOnce() -> Result<()>,
    ) -> Result<Graph<'_>> {
        let Some(g) = self.graphs else {
            return err("this CUDA runtime has no stream capture");
        };
        if let Err(e) = self.check("cudaStreamBeginCapture", unsafe {
            (g.begin)(stream, CAPTURE_THREAD_LOCAL)
        }) {
            unsafe { (self.last_error)() };
            return Err(e);
        }
        let queued = enqueue();
        let mut graph = std::ptr::null_mut();
        let ended = self.check("cudaStreamEndCapture", unsafe {
            (g.end)(stream, &mut graph)
        });
        let result = queued.and(ended).and_then(|()| {
            let mut exec = std::ptr::null_mut();
            self.check("cudaGraphInstantiateWithFlags", unsafe {
                (g.instantiate)(&mut exec, graph, 0)
            })?;
            Ok(Graph {
                cuda: self,
                exec,
                ops,
            })
        });
        if !graph.is_null() {
            unsafe { (g.destroy)(graph) };
        }
        if result.is_err() {
            unsafe { (self.last_error)() };
        }
        result
    }

    /// An instantiated graph with no nodes (what one graph launch costs by itself).
    pub fn empty_graph(&self) -> Result<Graph<'_>> {
        let Some(g) = self.graphs else {
            return err("this CUDA runtime has no graphs");
        };
        let mut graph = std::ptr::null_mut();
        self.check("cudaGraphCreate", unsafe { (g.create)(&mut graph, 0) })?;
        let mut exec = std::ptr::null_mut();
        let r = self.check("cudaGraphInstantiateWithFlags", unsafe {
            (g.instantiate)(&mut exec, graph, 0)
        });
        unsafe { (g.destroy)(graph) };
        r.map(|()| Graph {
            cuda: self,
            exec,
            ops: 1,
        })
    }

    /// Enqueues a device-to-device copy of `bytes` on `stream`.
    pub fn copy_async(
        &self,
        dst: &DevBuf<'_>,
        src: &DevBuf<'_>,
        bytes: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        assert!(bytes <= dst.bytes && bytes <= src.bytes);
        self.check("cudaMemcpyAsync", unsafe {
            (self.memcpy_async)(dst.ptr, src.ptr, bytes, MEMCPY_D2D, stream)
        })
    }

    /// Enqueues a memset of the first `bytes` of `buf` on `stream`.
    pub fn memset_async(&self, buf: &DevBuf<'_>, bytes: usize, stream: *mut c_void) -> Result<()> {
        self.check("cudaMemsetAsync", unsafe {
            (self.memset_async)(buf.ptr, 0, bytes.min(buf.bytes), stream)
        })
    }

    fn attr(&self, which: c_int) -> Option<i64> {
        let mut v = 0;
        (unsafe { (self.device_attr)(&mut v, which, 0) } == 0).then_some(v as i64)
    }

    /// Whether device 0 answers (a runtime with no usable device answers nothing).
    pub fn has_device(&self) -> bool {
        self.attr(ATTR_CC_MAJOR).is_some()
    }

    /// L2 cache bytes of device 0 (60 MB on an H200).
    pub fn l2_bytes(&self) -> usize {
        self.attr(ATTR_L2_BYTES).unwrap_or(64 << 20).max(1 << 20) as usize
    }

    /// Streaming multiprocessors of device 0 (132 on an H200); `None` where it does not say.
    pub fn sm_count(&self) -> Option<u32> {
        self.attr(ATTR_SM_COUNT)
            .filter(|&n| n > 0)
            .map(|n| n as u32)
    }

    /// `sm_90`-style name of device 0's architecture.
    pub fn arch(&self) -> String {
        match (self.attr(ATTR_CC_MAJOR), self.attr(ATTR_CC_MINOR)) {
            (Some(a), Some(b)) => format!("sm_{a}{b}"),
            _ => "unknown".into(),
        }
    }

    pub fn runtime_version(&self) -> i32 {
        let mut v = 0;
        unsafe { (self.runtime_version)(&mut v) };
        v
    }
}

/// A device allocation, freed on drop.
pub struct DevBuf<'a> {
    cuda: &'a Cuda,
    pub ptr: *mut c_void,
    pub bytes: usize,
}

impl DevBuf<'_> {
    pub fn upload(&self, data: &[u8]) -> Result<()> {
        self.upload_at(0, data)
    }
    /// Copies `data` to the buffer at byte `offset`.
    pub fn upload_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        assert!(offset + data.len() <= self.bytes);
        self.cuda.check("cudaMemcpy (to device)", unsafe {
            (self.cuda.memcpy)(
                // A device address: arithmetic only, never dereferenced here.
                self.ptr.cast::<u8>().wrapping_add(offset).cast(),
                data.as_ptr().cast(),
                data.len(),
                MEMCPY_H2D,
            )
        })
    }
    pub fn download(&self, bytes: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; bytes.min(self.bytes)];
        self.cuda.check("cudaMemcpy (to host)", unsafe {
            (self.cuda.memcpy)(v.as_mut_ptr().cast(), self.ptr, v.len(), MEMCPY_D2H)
        })?;
        Ok(v)
    }
    /// Fills with one byte value (0xff makes every bf16/f16/f32 a NaN: a poisoned output).
    pub fn fill(&self, byte: u8) -> Result<()> {
        self.cuda.check("cudaMemset", unsafe {
            (self.cuda.memset)(self.ptr, byte as c_int, self.bytes)
        })
    }
}

impl Drop for DevBuf<'_> {
    fn drop(&mut self) {
        unsafe { (self.cuda.free)(self.ptr) };
    }
}

/// cuBLASLt's entry points and one handle.
/// `cublasLtMatmulAlgoGetIds(handle, compute, scale, Atype, Btype, Ctype, Dtype, requested,
/// ids*, returned*)`.
pub type AlgoGetIdsFn = unsafe extern "C" fn(
    LtHandle,
    ComputeType,
    CudaDataType,
    CudaDataType,
    CudaDataType,
    CudaDataType,
    CudaDataType,
    c_int,
    *mut c_int,
    *mut c_int,
) -> LtStatus;

pub struct Lt {
    pub matmul: MatmulFn,
    /// `cublasLtMatmul` as a linked host resolves it: an interposer's if one is preloaded.
    pub global_matmul: MatmulFn,
    pub create: CreateFn,
    pub desc_create: DescCreateFn,
    pub desc_destroy: DestroyFn,
    pub desc_set: SetAttributeFn,
    pub desc_get: GetAttributeFn,
    pub layout_create: LayoutCreateFn,
    pub layout_destroy: DestroyFn,
    pub layout_set: SetAttributeFn,
    pub layout_get: GetAttributeFn,
    pub pref_create: PrefCreateFn,
    pub pref_destroy: DestroyFn,
    pub pref_set: SetAttributeFn,
    pub heuristic: GetHeuristicFn,
    pub algo_init: AlgoInitFn,
    pub config_get: AlgoGetAttributeFn,
    pub config_set: AlgoSetAttributeFn,
    pub cap_get: AlgoGetAttributeFn,
    pub check: AlgoCheckFn,
    /// `cublasLtMatmulAlgoGetIds`, for the wider search (`None` where the library lacks it).
    pub get_ids: Option<AlgoGetIdsFn>,
    pub version: GetVersionFn,
    pub handle: LtHandle,
    pub path: PathBuf,
}

impl Lt {
    /// Loads cuBLASLt: `path`, else `$TUNEDBLAS_CUBLASLT`, else `libcublasLt.so.13/.12`.
    /// Loaded into the global scope, as a host linked against it would have it.
    pub fn load(path: Option<&Path>) -> Result<Lt> {
        let (h, path) = open_first(
            &candidates(path, "TUNEDBLAS_CUBLASLT", CUBLASLT_NAMES),
            libc::RTLD_NOW | libc::RTLD_GLOBAL,
        )
        .map_err(|e| {
            Error(format!(
                "cannot load cuBLASLt ({}); pass --lib <libcublasLt.so>",
                e.0
            ))
        })?;
        // The file actually loaded (a soname may resolve anywhere on the search path).
        let path = unsafe { sym::<*mut c_void>(h, "cublasLtMatmul") }
            .ok()
            .and_then(|p| tunedblas_core::identity::library_of_address(p as usize))
            .unwrap_or(path);
        // SAFETY: each symbol has the C type src/cublaslt/ gives it (cublasLt.h).
        let mut lt = unsafe {
            Lt {
                matmul: sym(h, "cublasLtMatmul")?,
                global_matmul: sym(libc::RTLD_DEFAULT, "cublasLtMatmul")?,
                create: sym(h, "cublasLtCreate")?,
                desc_create: sym(h, "cublasLtMatmulDescCreate")?,
                desc_destroy: sym(h, "cublasLtMatmulDescDestroy")?,
                desc_set: sym(h, "cublasLtMatmulDescSetAttribute")?,
                desc_get: sym(h, "cublasLtMatmulDescGetAttribute")?,
                layout_create: sym(h, "cublasLtMatrixLayoutCreate")?,
                layout_destroy: sym(h, "cublasLtMatrixLayoutDestroy")?,
                layout_set: sym(h, "cublasLtMatrixLayoutSetAttribute")?,
                layout_get: sym(h, "cublasLtMatrixLayoutGetAttribute")?,
                pref_create: sym(h, "cublasLtMatmulPreferenceCreate")?,
                pref_destroy: sym(h, "cublasLtMatmulPreferenceDestroy")?,
                pref_set: sym(h, "cublasLtMatmulPreferenceSetAttribute")?,
                heuristic: sym(h, "cublasLtMatmulAlgoGetHeuristic")?,
                algo_init: sym(h, "cublasLtMatmulAlgoInit")?,
                config_get: sym(h, "cublasLtMatmulAlgoConfigGetAttribute")?,
                config_set: sym(h, "cublasLtMatmulAlgoConfigSetAttribute")?,
                cap_get: sym(h, "cublasLtMatmulAlgoCapGetAttribute")?,
                check: sym(h, "cublasLtMatmulAlgoCheck")?,
                get_ids: sym(h, "cublasLtMatmulAlgoGetIds").ok(),
                version: sym(h, "cublasLtGetVersion")?,
                handle: std::ptr::null_mut(),
                path,
            }
        };
        let mut handle = std::ptr::null_mut();
        lt_check("cublasLtCreate", unsafe { (lt.create)(&mut handle) })?;
        lt.handle = handle;
        Ok(lt)
    }

    pub fn version(&self) -> usize {
        unsafe { (self.version)() }
    }

    /// This library with its descriptor and layout functions as a linked host resolves
    /// them (`RTLD_DEFAULT`: an LD_PRELOADed interposer's when one is preloaded, which then
    /// keeps what the objects are made and set with), everything else its own: the objects a
    /// PyTorch process hands the interposer's `cublasLtMatmul` (`lt overhead`).
    pub fn with_global_objects(&self) -> Result<Lt> {
        let g = libc::RTLD_DEFAULT;
        // SAFETY: each symbol has the C type src/cublaslt/ gives it (cublasLt.h).
        unsafe {
            Ok(Lt {
                desc_create: sym(g, "cublasLtMatmulDescCreate")?,
                desc_destroy: sym(g, "cublasLtMatmulDescDestroy")?,
                desc_set: sym(g, "cublasLtMatmulDescSetAttribute")?,
                layout_create: sym(g, "cublasLtMatrixLayoutCreate")?,
                layout_destroy: sym(g, "cublasLtMatrixLayoutDestroy")?,
                layout_set: sym(g, "cublasLtMatrixLayoutSetAttribute")?,
                path: self.path.clone(),
                ..*self
            })
        }
    }
}

pub fn lt_check(what: &str, st: LtStatus) -> Result<()> {
    if st == STATUS_SUCCESS {
        Ok(())
    } else {
        err(format!("{what} returned cuBLAS status {st}"))
    }
}

type CuModuleLoadDataFn = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> c_int;
type CuModuleGetFunctionFn =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> c_int;
type CuLaunchKernelFn = unsafe extern "C" fn(
    *mut c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> c_int;

/// A kernel that does nothing, JIT-compiled from PTX by the driver (no compiler is linked):
/// the floor of one launch in either timing mode.
const EMPTY_PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry tunedblas_empty()\n{\n\tret;\n}\n\0";

/// One thread that spins on the global nanosecond timer until its argument's nanoseconds
/// have passed: a delay that keeps the SMs and the memory idle, unlike a GEMM.
const SPIN_PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
.visible .entry tunedblas_spin(.param .u64 ns)\n{\n\
\t.reg .pred %p;\n\t.reg .b64 %r<5>;\n\
\tld.param.u64 %r1, [ns];\n\tmov.u64 %r2, %globaltimer;\n\
WAIT:\n\tmov.u64 %r3, %globaltimer;\n\tsub.u64 %r4, %r3, %r2;\n\
\tsetp.lt.u64 %p, %r4, %r1;\n\t@%p bra WAIT;\n\tret;\n}\n\0";

/// A kernel of one of this file's PTX modules, loaded through the driver API into the
/// runtime's current context and launched as 1 block of 1 thread.
pub struct Kernel {
    launch: CuLaunchKernelFn,
    func: *mut c_void,
}

/// The empty kernel: the floor of one launch.
pub type EmptyKernel = Kernel;

impl Kernel {
    /// The empty kernel. Needs the runtime initialised on this thread first (any
    /// allocation does it).
    pub fn load() -> Result<Kernel> {
        Kernel::load_ptx(EMPTY_PTX, c"tunedblas_empty")
    }

    /// The spin kernel (see [`Kernel::enqueue_spin`]).
    pub fn load_spin() -> Result<Kernel> {
        Kernel::load_ptx(SPIN_PTX, c"tunedblas_spin")
    }

    fn load_ptx(ptx: &str, name: &std::ffi::CStr) -> Result<Kernel> {
        let (h, _) = open_first(&[PathBuf::from("libcuda.so.1")], libc::RTLD_NOW)
            .map_err(|e| Error(format!("cannot load the CUDA driver ({})", e.0)))?;
        unsafe {
            let load: CuModuleLoadDataFn = sym(h, "cuModuleLoadData")?;
            let get: CuModuleGetFunctionFn = sym(h, "cuModuleGetFunction")?;
            let launch: CuLaunchKernelFn = sym(h, "cuLaunchKernel")?;
            let mut module = std::ptr::null_mut();
            let st = load(&mut module, ptx.as_ptr().cast());
            if st != 0 {
                return err(format!("cuModuleLoadData returned {st}"));
            }
            let mut func = std::ptr::null_mut();
            let st = get(&mut func, module, name.as_ptr());
            if st != 0 {
                return err(format!("cuModuleGetFunction returned {st}"));
            }
            Ok(Kernel { launch, func })
        }
    }

    /// Enqueues one launch of a kernel without arguments on `stream`.
    pub fn enqueue(&self, stream: *mut c_void) -> Result<()> {
        self.launch_with(stream, std::ptr::null_mut())
    }

    /// Enqueues one launch of the spin kernel: it holds `stream` for `ns` nanoseconds.
    pub fn enqueue_spin(&self, stream: *mut c_void, ns: u64) -> Result<()> {
        let mut arg = ns;
        let mut params = [(&mut arg as *mut u64).cast::<c_void>()];
        // cuLaunchKernel copies the arguments before it returns.
        self.launch_with(stream, params.as_mut_ptr())
    }

    fn launch_with(&self, stream: *mut c_void, params: *mut *mut c_void) -> Result<()> {
        let st = unsafe {
            (self.launch)(
                self.func,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream,
                params,
                std::ptr::null_mut(),
            )
        };
        if st != 0 {
            return err(format!("cuLaunchKernel returned {st}"));
        }
        Ok(())
    }
}
