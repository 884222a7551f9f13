//! The HIP runtime calls the hipBLASLt tuner makes, loaded at run time (one binary serves
//! every ROCm release): device memory, a stream, events.

use std::ffi::c_void;
use std::path::{Path, PathBuf};

use tunedblas_core::abi::*;

use crate::lt::cuda::{candidates, err, open_first, sym, Error, Result};

/// Names tried for the HIP runtime, newest first.
pub const HIP_NAMES: &[&str] = &["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so"];

pub struct HipRt {
    /// The file loaded.
    pub path: PathBuf,
    malloc: HipMallocFn,
    free: HipFreeFn,
    memcpy: HipMemcpyFn,
    memset: HipMemsetFn,
    stream_create: HipStreamCreateFn,
    stream_sync: HipStreamSynchronizeFn,
    stream_destroy: HipStreamDestroyFn,
    event_create: HipEventCreateFn,
    event_destroy: HipEventDestroyFn,
    event_record: HipEventRecordFn,
    event_sync: HipEventSynchronizeFn,
    event_elapsed: HipEventElapsedTimeFn,
    device_count: HipGetDeviceCountFn,
    runtime_version: HipRuntimeGetVersionFn,
    /// Stream capture and graphs, for graph timing (`None` where any is missing).
    pub graph: Option<crate::hipgraph::HipGraphApi>,
}

fn check(what: &str, e: HipError) -> Result<()> {
    if e == HIP_SUCCESS {
        Ok(())
    } else {
        err(format!("{what} failed with HIP error {e}"))
    }
}

impl HipRt {
    /// The HIP runtime hipBLASLt runs on, found through its handle `lt_dl` (a process with
    /// two HIP runtimes would hand one's buffers and streams to the other). `path`, where
    /// given, must be that file (after symlinks), else the error says which one it is.
    pub fn load(path: Option<&Path>, lt_dl: *mut c_void, lt_path: &Path) -> Result<HipRt> {
        // SAFETY: dlsym through hipBLASLt's handle searches it and what it links.
        let linked = unsafe { sym::<*mut c_void>(lt_dl, "hipMalloc") }
            .ok()
            .and_then(|p| tunedblas_core::identity::library_of_address(p as usize));
        let (h, path) = match (path, &linked) {
            (None, Some(file)) => (lt_dl, file.clone()),
            _ => {
                let (h, given) = open_first(
                    &candidates(path, "TUNEDBLAS_HIP", HIP_NAMES),
                    libc::RTLD_NOW | libc::RTLD_GLOBAL,
                )
                .map_err(|e| {
                    Error(format!(
                        "cannot load the HIP runtime ({}); pass --hip <libamdhip64.so>",
                        e.0
                    ))
                })?;
                let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
                let file = unsafe { sym::<*mut c_void>(h, "hipMalloc") }
                    .ok()
                    .and_then(|p| tunedblas_core::identity::library_of_address(p as usize))
                    .unwrap_or(given);
                if let Some(linked) = linked.filter(|l| real(l) != real(&file)) {
                    return err(format!(
                        "{} runs on the HIP runtime {}, not {}: leave --hip out (and $TUNEDBLAS_HIP unset) or name that file",
                        lt_path.display(),
                        linked.display(),
                        file.display()
                    ));
                }
                (h, file)
            }
        };
        let file_for_errors = path.clone();
        // SAFETY: each symbol has the C type src/abi.rs gives it (hip_runtime_api.h).
        let rt = unsafe {
            (|| -> Result<HipRt> {
                Ok(HipRt {
                    path,
                    malloc: sym(h, "hipMalloc")?,
                    free: sym(h, "hipFree")?,
                    memcpy: sym(h, "hipMemcpy")?,
                    memset: sym(h, "hipMemset")?,
                    stream_create: sym(h, "hipStreamCreate")?,
                    stream_sync: sym(h, "hipStreamSynchronize")?,
                    stream_destroy: sym(h, "hipStreamDestroy")?,
                    event_create: sym(h, "hipEventCreate")?,
                    event_destroy: sym(h, "hipEventDestroy")?,
                    event_record: sym(h, "hipEventRecord")?,
                    event_sync: sym(h, "hipEventSynchronize")?,
                    event_elapsed: sym(h, "hipEventElapsedTime")?,
                    device_count: sym(h, "hipGetDeviceCount")?,
                    runtime_version: sym(h, "hipRuntimeGetVersion")?,
                    graph: crate::hipgraph::HipGraphApi::load(h),
                })
            })()
        };
        rt.map_err(|e| {
            Error(format!(
                "the HIP runtime {}: {}",
                file_for_errors.display(),
                e.0
            ))
        })
    }

    /// Devices the runtime sees; the error where it sees none (no GPU, no driver).
    pub fn device_count(&self) -> Result<i32> {
        let mut n = 0;
        // SAFETY: out-pointer.
        match unsafe { (self.device_count)(&mut n) } {
            HIP_SUCCESS if n > 0 => Ok(n),
            HIP_SUCCESS => err("hipGetDeviceCount says 0 devices: no usable device"),
            e => err(format!(
                "hipGetDeviceCount failed with HIP error {e}: no usable device"
            )),
        }
    }

    pub fn runtime_version(&self) -> i32 {
        let mut v = 0;
        // SAFETY: out-pointer.
        unsafe { (self.runtime_version)(&mut v) };
        v
    }

    pub fn alloc(&self, bytes: usize) -> Result<HipBuf<'_>> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: out-pointer; the size is at least 16.
        check(&format!("hipMalloc({bytes} bytes)"), unsafe {
            (self.malloc)(&mut ptr, bytes.max(16))
        })?;
        Ok(HipBuf {
            rt: self,
            ptr,
            bytes,
        })
    }

    pub fn stream(&self) -> Result<Stream> {
        let mut s = std::ptr::null_mut();
        // SAFETY: out-pointer.
        check("hipStreamCreate", unsafe { (self.stream_create)(&mut s) })?;
        Ok(s)
    }

    pub fn destroy_stream(&self, s: Stream) {
        // SAFETY: a stream this runtime made, destroyed once.
        unsafe { (self.stream_destroy)(s) };
    }

    pub fn sync(&self, stream: Stream) -> Result<()> {
        // SAFETY: a stream this runtime made.
        check("hipStreamSynchronize", unsafe {
            (self.stream_sync)(stream)
        })
    }

    pub fn event(&self) -> Result<HipEvent> {
        let mut e = std::ptr::null_mut();
        // SAFETY: out-pointer.
        check("hipEventCreate", unsafe { (self.event_create)(&mut e) })?;
        Ok(e)
    }

    pub fn destroy_event(&self, e: HipEvent) {
        // SAFETY: an event this runtime made, destroyed once.
        unsafe { (self.event_destroy)(e) };
    }

    pub fn record(&self, e: HipEvent, stream: Stream) -> Result<()> {
        // SAFETY: live event and stream.
        check("hipEventRecord", unsafe { (self.event_record)(e, stream) })
    }

    /// Milliseconds from `a` to `b`, once `b` has completed.
    pub fn elapsed(&self, a: HipEvent, b: HipEvent) -> Result<f64> {
        let mut ms = 0f32;
        // SAFETY: live events, both recorded.
        check("hipEventSynchronize", unsafe { (self.event_sync)(b) })?;
        check("hipEventElapsedTime", unsafe {
            (self.event_elapsed)(&mut ms, a, b)
        })?;
        Ok(ms as f64)
    }
}

/// A device buffer, freed on drop.
pub struct HipBuf<'a> {
    rt: &'a HipRt,
    pub ptr: *mut c_void,
    pub bytes: usize,
}

impl HipBuf<'_> {
    pub fn upload(&self, host: &[u8]) -> Result<()> {
        let n = host.len().min(self.bytes);
        // SAFETY: both regions are at least n bytes.
        check("hipMemcpy to the device", unsafe {
            (self.rt.memcpy)(self.ptr, host.as_ptr().cast(), n, HIP_MEMCPY_HOST_TO_DEVICE)
        })
    }

    pub fn download(&self, bytes: usize) -> Result<Vec<u8>> {
        let n = bytes.min(self.bytes);
        let mut host = vec![0u8; n];
        // SAFETY: both regions are n bytes long.
        check("hipMemcpy from the device", unsafe {
            (self.rt.memcpy)(
                host.as_mut_ptr().cast(),
                self.ptr,
                n,
                HIP_MEMCPY_DEVICE_TO_HOST,
            )
        })?;
        Ok(host)
    }

    pub fn fill(&self, byte: u8) -> Result<()> {
        // SAFETY: the whole buffer.
        check("hipMemset", unsafe {
            (self.rt.memset)(self.ptr, byte as i32, self.bytes)
        })
    }
}

impl Drop for HipBuf<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by hipMalloc, freed once.
        unsafe { (self.rt.free)(self.ptr) };
    }
}
