//! HIP device memory and event timing, loaded at run time: the part of the HIP runtime both
//! AMD tuners use, the rocBLAS harness (`backend.rs`, also on refblas's emulated HIP) and the
//! hipBLASLt tuner (`lt/hip/runtime.rs`). One set of entry points, one buffer type, one timed
//! span, so a fix to either (a size of 0, an event left behind) is made once.

use std::ffi::c_void;

use tunedblas_core::abi::*;

/// The memory and event calls, each with the C type `src/abi.rs` gives it.
pub struct HipMem {
    malloc: HipMallocFn,
    free: HipFreeFn,
    memcpy: HipMemcpyFn,
    /// Optional: refblas's emulated HIP has none; the hipBLASLt tuner requires it.
    memset: Option<HipMemsetFn>,
    event_create: HipEventCreateFn,
    event_record: HipEventRecordFn,
    event_sync: HipEventSynchronizeFn,
    event_elapsed: HipEventElapsedTimeFn,
    event_destroy: HipEventDestroyFn,
}

/// Why a HIP call failed, for the caller's own error type.
pub type HipResult<T> = std::result::Result<T, String>;

fn check(what: &str, e: HipError) -> HipResult<()> {
    if e == HIP_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed with HIP error {e}"))
    }
}

impl HipMem {
    /// The calls from the runtime behind `handle`; the error names the first one missing.
    ///
    /// # Safety
    /// `handle` is a live `dlopen` handle (or a pseudo-handle) whose `hip*` symbols have
    /// the HIP runtime's C types.
    pub unsafe fn load(handle: *mut c_void) -> HipResult<HipMem> {
        unsafe fn get<T: Copy>(h: *mut c_void, name: &str) -> Option<T> {
            let c = std::ffi::CString::new(name).ok()?;
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            // SAFETY: the caller of `load` vouches for the symbols' types.
            (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
        }
        let need = |name: &str| format!("the HIP runtime has no {name}");
        // SAFETY: as the caller vouches; each type is the symbol's.
        unsafe {
            Ok(HipMem {
                malloc: get(handle, "hipMalloc").ok_or_else(|| need("hipMalloc"))?,
                free: get(handle, "hipFree").ok_or_else(|| need("hipFree"))?,
                memcpy: get(handle, "hipMemcpy").ok_or_else(|| need("hipMemcpy"))?,
                memset: get(handle, "hipMemset"),
                event_create: get(handle, "hipEventCreate")
                    .ok_or_else(|| need("hipEventCreate"))?,
                event_record: get(handle, "hipEventRecord")
                    .ok_or_else(|| need("hipEventRecord"))?,
                event_sync: get(handle, "hipEventSynchronize")
                    .ok_or_else(|| need("hipEventSynchronize"))?,
                event_elapsed: get(handle, "hipEventElapsedTime")
                    .ok_or_else(|| need("hipEventElapsedTime"))?,
                event_destroy: get(handle, "hipEventDestroy")
                    .ok_or_else(|| need("hipEventDestroy"))?,
            })
        }
    }

    /// Whether the runtime has `hipMemset` (what [`DevBuf::fill`] needs).
    pub fn has_memset(&self) -> bool {
        self.memset.is_some()
    }

    /// `bytes` of device memory (at least 16 are allocated), freed on drop.
    pub fn alloc(&self, bytes: usize) -> HipResult<DevBuf<'_>> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: out-pointer; the size is at least 16.
        check(&format!("hipMalloc({bytes} bytes)"), unsafe {
            (self.malloc)(&mut ptr, bytes.max(16))
        })?;
        Ok(DevBuf {
            hip: self,
            ptr,
            bytes,
        })
    }

    pub fn event(&self) -> HipResult<HipEvent> {
        let mut e = std::ptr::null_mut();
        // SAFETY: out-pointer.
        check("hipEventCreate", unsafe { (self.event_create)(&mut e) })?;
        Ok(e)
    }

    pub fn destroy_event(&self, e: HipEvent) {
        // SAFETY: an event this runtime made, destroyed once.
        unsafe { (self.event_destroy)(e) };
    }

    pub fn record(&self, e: HipEvent, stream: Stream) -> HipResult<()> {
        // SAFETY: a live event; the stream is the caller's (null: the default stream).
        check("hipEventRecord", unsafe { (self.event_record)(e, stream) })
    }

    /// Milliseconds from `a` to `b`, once `b` has completed.
    pub fn elapsed(&self, a: HipEvent, b: HipEvent) -> HipResult<f64> {
        let mut ms = 0f32;
        // SAFETY: live events, both recorded.
        check("hipEventSynchronize", unsafe { (self.event_sync)(b) })?;
        check("hipEventElapsedTime", unsafe {
            (self.event_elapsed)(&mut ms, a, b)
        })?;
        Ok(ms as f64)
    }

    /// What `enqueue` puts on `stream`, timed between two events: its result and the
    /// milliseconds. The events are destroyed whatever `enqueue` returns; a span whose
    /// events fail is an error.
    pub fn span<T>(&self, stream: Stream, enqueue: impl FnOnce() -> T) -> HipResult<(T, f64)> {
        let start = self.event()?;
        let stop = match self.event() {
            Ok(e) => e,
            Err(e) => {
                self.destroy_event(start);
                return Err(e);
            }
        };
        let timed = (|| {
            self.record(start, stream)?;
            let out = enqueue();
            self.record(stop, stream)?;
            Ok((out, self.elapsed(start, stop)?))
        })();
        self.destroy_event(start);
        self.destroy_event(stop);
        timed
    }
}

/// A device buffer, freed on drop.
pub struct DevBuf<'a> {
    hip: &'a HipMem,
    pub ptr: *mut c_void,
    pub bytes: usize,
}

impl DevBuf<'_> {
    /// Copies the first min(host, buffer) bytes of `host` to the buffer.
    pub fn upload(&self, host: &[u8]) -> HipResult<()> {
        let n = host.len().min(self.bytes);
        // SAFETY: both regions are at least n bytes.
        check("hipMemcpy to the device", unsafe {
            (self.hip.memcpy)(self.ptr, host.as_ptr().cast(), n, HIP_MEMCPY_HOST_TO_DEVICE)
        })
    }

    /// The first min(`bytes`, buffer) bytes of the buffer.
    pub fn download(&self, bytes: usize) -> HipResult<Vec<u8>> {
        let n = bytes.min(self.bytes);
        let mut host = vec![0u8; n];
        // SAFETY: both regions are n bytes long.
        check("hipMemcpy from the device", unsafe {
            (self.hip.memcpy)(
                host.as_mut_ptr().cast(),
                self.ptr,
                n,
                HIP_MEMCPY_DEVICE_TO_HOST,
            )
        })?;
        Ok(host)
    }

    /// Sets every byte to `byte` (needs `hipMemset`).
    pub fn fill(&self, byte: u8) -> HipResult<()> {
        let memset = self
            .hip
            .memset
            .ok_or_else(|| "the HIP runtime has no hipMemset".to_string())?;
        // SAFETY: the whole buffer.
        check("hipMemset", unsafe {
            memset(self.ptr, byte as i32, self.bytes)
        })
    }
}

impl Drop for DevBuf<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by hipMalloc, freed once.
        unsafe { (self.hip.free)(self.ptr) };
    }
}
