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

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

pub fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error(msg.into()))
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Opens the first of `candidates` that loads.
fn open_first(candidates: &[PathBuf], flags: c_int) -> Result<(*mut c_void, PathBuf)> {
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

unsafe fn sym<T: Copy>(h: *mut c_void, name: &str) -> Result<T> {
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

const MEMCPY_H2D: c_int = 1;
const MEMCPY_D2H: c_int = 2;
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
    pub path: PathBuf,
}

/// Default names tried for each library, newest first.
pub const CUDART_NAMES: &[&str] = &["libcudart.so.13", "libcudart.so.12", "libcudart.so"];
pub const CUBLASLT_NAMES: &[&str] = &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"];

fn candidates(explicit: Option<&Path>, env: &str, names: &[&str]) -> Vec<PathBuf> {
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

    fn attr(&self, which: c_int) -> Option<i64> {
        let mut v = 0;
        (unsafe { (self.device_attr)(&mut v, which, 0) } == 0).then_some(v as i64)
    }

    /// L2 cache bytes of device 0 (60 MB on an H200).
    pub fn l2_bytes(&self) -> usize {
        self.attr(ATTR_L2_BYTES).unwrap_or(64 << 20).max(1 << 20) as usize
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
        assert!(data.len() <= self.bytes);
        self.cuda.check("cudaMemcpy (to device)", unsafe {
            (self.cuda.memcpy)(self.ptr, data.as_ptr().cast(), data.len(), MEMCPY_H2D)
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
        // SAFETY: each symbol has the C type src/cublaslt.rs gives it (cublasLt.h).
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
}

pub fn lt_check(what: &str, st: LtStatus) -> Result<()> {
    if st == STATUS_SUCCESS {
        Ok(())
    } else {
        err(format!("{what} returned cuBLAS status {st}"))
    }
}
