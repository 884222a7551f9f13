//! The HIP runtime calls the hipBLASLt tuner makes, loaded at run time (one binary serves
//! every ROCm release): device memory, a stream, events.

use std::ffi::c_void;
use std::path::{Path, PathBuf};

use tunedblas_core::abi::*;

use crate::lt::cuda::{candidates, err, open_first, sym, Error, Result};

/// Names tried for the HIP runtime, newest first.
pub const HIP_NAMES: &[&str] = &["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so"];

/// A device buffer of the hipBLASLt tuner (the shared HIP buffer type).
pub type HipBuf<'a> = crate::hipmem::DevBuf<'a>;

pub struct HipRt {
    /// The file loaded.
    pub path: PathBuf,
    /// Memory and events, as the rocBLAS harness loads them.
    mem: crate::hipmem::HipMem,
    stream_create: HipStreamCreateFn,
    stream_sync: HipStreamSynchronizeFn,
    stream_destroy: HipStreamDestroyFn,
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
                let mem = crate::hipmem::HipMem::load(h).map_err(Error)?;
                if !mem.has_memset() {
                    return err("the HIP runtime has no hipMemset");
                }
                Ok(HipRt {
                    path,
                    mem,
                    stream_create: sym(h, "hipStreamCreate")?,
                    stream_sync: sym(h, "hipStreamSynchronize")?,
                    stream_destroy: sym(h, "hipStreamDestroy")?,
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
        self.mem.alloc(bytes).map_err(Error)
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
        self.mem.event().map_err(Error)
    }

    pub fn destroy_event(&self, e: HipEvent) {
        self.mem.destroy_event(e)
    }

    pub fn record(&self, e: HipEvent, stream: Stream) -> Result<()> {
        self.mem.record(e, stream).map_err(Error)
    }

    /// Milliseconds from `a` to `b`, once `b` has completed.
    pub fn elapsed(&self, a: HipEvent, b: HipEvent) -> Result<f64> {
        self.mem.elapsed(a, b).map_err(Error)
    }
}
