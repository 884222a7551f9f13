//! The GPU runtime a library runs on, loaded at run time: HIP (rocBLAS, hipBLASLt; refblas's
//! emulated HIP and the hipBLASLt stand-in's) or CUDA (cuBLASLt; the stand-in's). HIP mirrors
//! CUDA call for call, with the same C types, so one set of entry points named by prefix
//! (`hipMalloc`, `cudaMalloc`) serves both: device memory, streams, events, graphs and
//! devices, and a fix to either (a size of 0, an event left behind, a capture left open) is
//! made once for every backend.

use std::ffi::{c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use tunedblas_core::abi::*;

use crate::dl::{self, Handle};
use crate::error::{Error, Result};

/// Which runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Hip,
    Cuda,
}

impl Api {
    fn prefix(self) -> &'static str {
        match self {
            Api::Hip => "hip",
            Api::Cuda => "cuda",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Api::Hip => "HIP",
            Api::Cuda => "CUDA",
        }
    }
}

type MemcpyAsyncFn =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, Stream) -> c_int;
type MemsetFn = unsafe extern "C" fn(*mut c_void, c_int, usize) -> c_int;
type MemsetAsyncFn = unsafe extern "C" fn(*mut c_void, c_int, usize, Stream) -> c_int;
type IntOutFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type SetDeviceFn = unsafe extern "C" fn(c_int) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const std::ffi::c_char;
type LastErrorFn = unsafe extern "C" fn() -> c_int;
type AttributeFn = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

/// `cudaMemcpyDeviceToDevice`, `hipMemcpyDeviceToDevice`.
const MEMCPY_D2D: c_int = 3;
/// `cudaDevAttrMultiProcessorCount`, `cudaDevAttrL2CacheSize`, compute capability.
const CUDA_ATTR_SMS: c_int = 16;
const CUDA_ATTR_L2_BYTES: c_int = 38;
const CUDA_ATTR_CC_MAJOR: c_int = 75;
const CUDA_ATTR_CC_MINOR: c_int = 76;
/// The last-level cache AMD devices are taken to have: the 256 MiB Infinity Cache of
/// MI300-class GPUs, the largest AMD ships (HIP's attribute numbers differ between
/// releases, so it is not asked).
const HIP_CACHE_BYTES: usize = 256 << 20;

/// Stream capture and graphs; `None` in a runtime without all of them.
#[derive(Clone, Copy)]
struct GraphFns {
    begin: HipStreamBeginCaptureFn,
    end: HipStreamEndCaptureFn,
    instantiate: HipGraphInstantiateWithFlagsFn,
    launch: HipGraphLaunchFn,
    exec_destroy: HipGraphDestroyFn,
    destroy: HipGraphDestroyFn,
}

/// The runtime's entry points. Everything beyond memory and events is optional: refblas's
/// emulated HIP and the CUDA stand-in have only what the tests need, and what a call needs
/// and lacks is said by that call.
pub struct Runtime {
    pub api: Api,
    /// The file loaded.
    pub path: PathBuf,
    malloc: HipMallocFn,
    free: HipFreeFn,
    memcpy: HipMemcpyFn,
    memset: Option<MemsetFn>,
    memcpy_async: Option<MemcpyAsyncFn>,
    memset_async: Option<MemsetAsyncFn>,
    event_create: HipEventCreateFn,
    event_record: HipEventRecordFn,
    event_sync: HipEventSynchronizeFn,
    event_elapsed: HipEventElapsedTimeFn,
    event_destroy: Option<HipEventDestroyFn>,
    stream_create: Option<HipStreamCreateFn>,
    stream_sync: Option<HipStreamSynchronizeFn>,
    stream_destroy: Option<HipStreamDestroyFn>,
    device_count: Option<IntOutFn>,
    set_device: Option<SetDeviceFn>,
    version: Option<IntOutFn>,
    error_string: Option<ErrorStringFn>,
    last_error: Option<LastErrorFn>,
    attribute: Option<AttributeFn>,
    graph: Option<GraphFns>,
    /// HIP only: in ROCm a hipMalloc or hipMemcpy on any thread invalidates every stream
    /// capture of the process, so with one worker per device the allocations, copies and
    /// captures of all of them take turns under this lock (a sample itself never takes it).
    serial: Mutex<()>,
}

// SAFETY: function pointers and a mutex; the runtimes are thread-safe.
unsafe impl Sync for Runtime {}
unsafe impl Send for Runtime {}

impl Runtime {
    /// The runtime behind the loader handle `h` (the library's own, which finds the runtime
    /// it links, or the runtime's), whose file is `path`.
    ///
    /// # Safety
    /// `h` is a live loader handle whose `hip*` or `cuda*` symbols have their C types.
    pub unsafe fn load(api: Api, h: Handle, path: PathBuf) -> Result<Runtime> {
        let p = api.prefix();
        let what = format!("the {} runtime {}", api.name(), path.display());
        let s = |n: &str| format!("{p}{n}");
        // SAFETY (all below): the caller vouches for the handle; each name has the type
        // hip_runtime_api.h / cuda_runtime_api.h gives it, the same for both.
        unsafe {
            let graph = (|| {
                Some(GraphFns {
                    begin: dl::sym(h, &s("StreamBeginCapture"))?,
                    end: dl::sym(h, &s("StreamEndCapture"))?,
                    instantiate: dl::sym(h, &s("GraphInstantiateWithFlags"))?,
                    launch: dl::sym(h, &s("GraphLaunch"))?,
                    exec_destroy: dl::sym(h, &s("GraphExecDestroy"))?,
                    destroy: dl::sym(h, &s("GraphDestroy"))?,
                })
            })();
            Ok(Runtime {
                api,
                malloc: dl::need(h, &s("Malloc"), &what)?,
                free: dl::need(h, &s("Free"), &what)?,
                memcpy: dl::need(h, &s("Memcpy"), &what)?,
                memset: dl::sym(h, &s("Memset")),
                memcpy_async: dl::sym(h, &s("MemcpyAsync")),
                memset_async: dl::sym(h, &s("MemsetAsync")),
                event_create: dl::need(h, &s("EventCreate"), &what)?,
                event_record: dl::need(h, &s("EventRecord"), &what)?,
                event_sync: dl::need(h, &s("EventSynchronize"), &what)?,
                event_elapsed: dl::need(h, &s("EventElapsedTime"), &what)?,
                event_destroy: dl::sym(h, &s("EventDestroy")),
                stream_create: dl::sym(h, &s("StreamCreate")),
                stream_sync: dl::sym(h, &s("StreamSynchronize")),
                stream_destroy: dl::sym(h, &s("StreamDestroy")),
                device_count: dl::sym(h, &s("GetDeviceCount")),
                set_device: dl::sym(h, &s("SetDevice")),
                version: dl::sym(h, &s("RuntimeGetVersion")),
                error_string: dl::sym(h, &s("GetErrorString")),
                last_error: dl::sym(h, &s("GetLastError")),
                attribute: match api {
                    Api::Cuda => dl::sym(h, "cudaDeviceGetAttribute"),
                    Api::Hip => None,
                },
                graph,
                serial: Mutex::new(()),
                path,
            })
        }
    }

    /// The call `what` (its name without the runtime's prefix) as a result.
    pub fn check(&self, what: &str, e: c_int) -> Result<()> {
        if e == 0 {
            return Ok(());
        }
        let what = format!("{}{what}", self.api.prefix());
        // SAFETY: the runtime's error string is static.
        let words = self
            .error_string
            .map(|f| unsafe { f(e) })
            .filter(|s| !s.is_null())
            .map_or(String::new(), |s| {
                format!(" ({})", unsafe { CStr::from_ptr(s) }.to_string_lossy())
            });
        Err(Error::failed(format!(
            "{what} failed with {} error {e}{words}",
            self.api.name()
        )))
    }

    /// Takes the HIP turn for an allocation, a copy or a capture (no-op on CUDA, whose
    /// thread-local captures other threads' calls do not break).
    pub fn turn(&self) -> Option<MutexGuard<'_, ()>> {
        (self.api == Api::Hip).then(|| self.serial.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// How many devices the runtime sees (1 where it cannot say); none is exit 4.
    pub fn device_count(&self) -> Result<i32> {
        let Some(f) = self.device_count else {
            return Ok(1);
        };
        let mut n = 0;
        // SAFETY: out-pointer.
        match unsafe { f(&mut n) } {
            0 if n > 0 => Ok(n),
            0 => Err(Error::no_device(format!(
                "the {} runtime sees no device",
                self.api.name()
            ))),
            e => Err(Error::no_device(format!(
                "{}GetDeviceCount failed with {} error {e}: no usable device",
                self.api.prefix(),
                self.api.name()
            ))),
        }
    }

    /// Makes `device` current for this thread's later calls.
    pub fn set_device(&self, device: i32) -> Result<()> {
        let count = self.device_count()?;
        if device < 0 || device >= count {
            return Err(Error::no_device(format!(
                "device {device} does not exist (the {} runtime sees {count}: 0..{})",
                self.api.name(),
                count - 1
            )));
        }
        match self.set_device {
            None if device == 0 => Ok(()),
            None => Err(Error::failed(format!(
                "the {} runtime cannot switch devices",
                self.api.name()
            ))),
            // SAFETY: plain call.
            Some(f) => self.check(&format!("SetDevice({device})"), unsafe { f(device) }),
        }
    }

    pub fn version(&self) -> i32 {
        let mut v = 0;
        // SAFETY: out-pointer.
        self.version.map(|f| unsafe { f(&mut v) });
        v
    }

    fn attribute(&self, which: c_int, device: i32) -> Option<i64> {
        let mut v = 0;
        let f = self.attribute?;
        // SAFETY: out-pointer.
        (unsafe { f(&mut v, which, device) } == 0).then_some(v as i64)
    }

    /// Bytes of last-level cache of `device`: what the timed calls' inputs rotate beyond.
    pub fn cache_bytes(&self, device: i32) -> usize {
        match self.api {
            Api::Cuda => self
                .attribute(CUDA_ATTR_L2_BYTES, device)
                .unwrap_or(64 << 20)
                .max(1 << 20) as usize,
            Api::Hip => HIP_CACHE_BYTES,
        }
    }

    /// Streaming multiprocessors of `device` (CUDA; `None` where it does not say).
    pub fn sm_count(&self, device: i32) -> Option<u32> {
        self.attribute(CUDA_ATTR_SMS, device)
            .filter(|&n| n > 0)
            .map(|n| n as u32)
    }

    /// `sm_90`-style name of `device`'s architecture (CUDA), else `None`.
    pub fn arch(&self, device: i32) -> Option<String> {
        let major = self.attribute(CUDA_ATTR_CC_MAJOR, device)?;
        let minor = self.attribute(CUDA_ATTR_CC_MINOR, device)?;
        Some(format!("sm_{major}{minor}"))
    }

    /// `bytes` of device memory (at least 256 are allocated), freed on drop.
    pub fn alloc(&self, bytes: usize) -> Result<DevBuf<'_>> {
        let mut ptr = std::ptr::null_mut();
        let _turn = self.turn();
        // SAFETY: out-pointer.
        self.check(&format!("Malloc({bytes} bytes)"), unsafe {
            (self.malloc)(&mut ptr, bytes.max(256))
        })?;
        Ok(DevBuf {
            rt: self,
            ptr,
            bytes,
        })
    }

    /// A stream of its own, where the runtime makes streams; else the default stream.
    pub fn stream(&self) -> Result<Stream> {
        let Some(f) = self.stream_create else {
            return Ok(std::ptr::null_mut());
        };
        let mut s = std::ptr::null_mut();
        // SAFETY: out-pointer.
        self.check("StreamCreate", unsafe { f(&mut s) })?;
        Ok(s)
    }

    pub(crate) fn destroy_stream(&self, s: Stream) {
        if let (false, Some(f)) = (s.is_null(), self.stream_destroy) {
            // SAFETY: a stream this runtime made, destroyed once.
            unsafe { f(s) };
        }
    }

    pub(crate) fn sync(&self, s: Stream) -> Result<()> {
        match self.stream_sync {
            // SAFETY: a live stream.
            Some(f) => self.check("StreamSynchronize", unsafe { f(s) }),
            None => Ok(()),
        }
    }

    fn event(&self) -> Result<HipEvent> {
        let mut e = std::ptr::null_mut();
        // SAFETY: out-pointer.
        self.check("EventCreate", unsafe { (self.event_create)(&mut e) })?;
        Ok(e)
    }

    fn destroy_event(&self, e: HipEvent) {
        if let Some(f) = self.event_destroy {
            // SAFETY: an event this runtime made, destroyed once.
            unsafe { f(e) };
        }
    }

    /// Two events, destroyed on drop (the first too where the second cannot be made).
    pub fn events(&self) -> Result<Events<'_>> {
        let mut events = Events {
            rt: self,
            ev: [std::ptr::null_mut(); 2],
        };
        for e in &mut events.ev {
            *e = self.event()?;
        }
        Ok(events)
    }

    /// Enqueues a device-to-device copy of `bytes` (synchronous where the runtime has no
    /// asynchronous copy).
    pub(crate) fn copy(&self, dst: &DevBuf, src: &DevBuf, bytes: usize, s: Stream) -> Result<()> {
        let n = bytes.min(dst.bytes).min(src.bytes);
        // SAFETY: both buffers hold n bytes.
        match self.memcpy_async {
            Some(f) => self.check("MemcpyAsync", unsafe {
                f(dst.ptr, src.ptr, n, MEMCPY_D2D, s)
            }),
            None => self.check("Memcpy", unsafe {
                (self.memcpy)(dst.ptr, src.ptr, n, MEMCPY_D2D)
            }),
        }
    }

    /// Enqueues a memset of the first `bytes` of `buf` on `s`, where the runtime has one.
    pub(crate) fn memset_async(&self, buf: &DevBuf, bytes: usize, s: Stream) -> Result<()> {
        let f = self
            .memset_async
            .ok_or_else(|| Error::failed("the runtime has no MemsetAsync"))?;
        // SAFETY: the buffer holds that many bytes.
        self.check("MemsetAsync", unsafe {
            f(buf.ptr, 0, bytes.min(buf.bytes), s)
        })
    }

    /// Whether copies can be enqueued (and so captured into a graph) rather than made at once.
    pub fn has_async_copy(&self) -> bool {
        self.memcpy_async.is_some()
    }

    /// Whether graphs can be made here at all.
    pub fn has_graphs(&self) -> bool {
        self.graph.is_some()
    }

    /// Captures what `enqueue` puts on `s` (a stream of its own) into a graph and
    /// instantiates it. Capture always ends, so a failed `enqueue` leaves the stream usable;
    /// on any failure the runtime's last (non-sticky) error is cleared. The error says
    /// whether the mode failed (capture, instantiation) or the work did.
    pub(crate) fn capture(
        &self,
        s: Stream,
        enqueue: impl FnOnce() -> Result<()>,
    ) -> std::result::Result<Graph, Failure> {
        let mode = |e: Error| Failure::Mode(e.message);
        let g = self.graph.ok_or_else(|| {
            Failure::Mode(format!(
                "the {} runtime has no stream capture and graph calls",
                self.api.name()
            ))
        })?;
        if s.is_null() {
            return Err(Failure::Mode("capture needs a stream of its own".into()));
        }
        let _turn = self.turn();
        // SAFETY (the calls below): a live stream; out-pointers; objects made here.
        let begun = self.check("StreamBeginCapture", unsafe {
            (g.begin)(s, HIP_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        });
        if let Err(e) = begun {
            self.clear_error();
            return Err(mode(e));
        }
        let work = enqueue();
        let mut graph = std::ptr::null_mut();
        let ended = self.check("StreamEndCapture", unsafe { (g.end)(s, &mut graph) });
        let result = match (work, ended) {
            // The capture was invalidated (a call inside allocated, copied or synchronised):
            // whatever the work returned, it is the mode that failed. Callers run each piece
            // of work once uncaptured first, so the work's own errors show there.
            (_, Err(e)) => Err(mode(e)),
            (Err(e), Ok(())) => Err(Failure::Work(e)),
            (Ok(()), Ok(())) => {
                let mut exec = std::ptr::null_mut();
                self.check("GraphInstantiateWithFlags", unsafe {
                    (g.instantiate)(&mut exec, graph, 0)
                })
                .map(|()| Graph {
                    fns: g,
                    api: self.api,
                    exec,
                })
                .map_err(mode)
            }
        };
        if !graph.is_null() {
            unsafe { (g.destroy)(graph) };
        }
        if result.is_err() {
            self.clear_error();
        }
        result
    }

    fn clear_error(&self) {
        if let Some(f) = self.last_error {
            // SAFETY: plain call.
            unsafe { f() };
        }
    }
}

/// Why a graph sample could not be had: the mode failed (capture, instantiation, launch),
/// or the work captured failed (its own error, as events timing would have returned it).
#[derive(Debug)]
pub enum Failure {
    Mode(String),
    Work(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Work(e)
    }
}

/// An instantiated graph, destroyed on drop (it holds the runtime's graph calls, not the
/// runtime, so a problem's graphs can live beside it).
pub struct Graph {
    fns: GraphFns,
    api: Api,
    exec: *mut c_void,
}

impl Graph {
    pub(crate) fn launch(&self, s: Stream) -> std::result::Result<(), Failure> {
        // SAFETY: an executable graph of this runtime, a live stream.
        match unsafe { (self.fns.launch)(self.exec, s) } {
            0 => Ok(()),
            e => Err(Failure::Mode(format!(
                "{}GraphLaunch failed with {} error {e}",
                self.api.prefix(),
                self.api.name()
            ))),
        }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: made by this runtime, destroyed once.
        unsafe { (self.fns.exec_destroy)(self.exec) };
    }
}

/// A pair of events, destroyed on drop.
pub struct Events<'r> {
    rt: &'r Runtime,
    ev: [HipEvent; 2],
}

impl Events<'_> {
    /// What `enqueue` puts on `s`, timed between the two events: its result and the
    /// milliseconds (after the second event completed).
    pub(crate) fn span<T>(&self, s: Stream, enqueue: impl FnOnce() -> T) -> Result<(T, f64)> {
        let rt = self.rt;
        // SAFETY: live events; the stream is live (null: the default stream).
        rt.check("EventRecord", unsafe { (rt.event_record)(self.ev[0], s) })?;
        let out = enqueue();
        rt.check("EventRecord", unsafe { (rt.event_record)(self.ev[1], s) })?;
        rt.check("EventSynchronize", unsafe { (rt.event_sync)(self.ev[1]) })?;
        let mut ms = 0f32;
        rt.check("EventElapsedTime", unsafe {
            (rt.event_elapsed)(&mut ms, self.ev[0], self.ev[1])
        })?;
        Ok((out, ms as f64))
    }
}

impl Drop for Events<'_> {
    fn drop(&mut self) {
        for e in self.ev.into_iter().filter(|e| !e.is_null()) {
            self.rt.destroy_event(e);
        }
    }
}

/// A device buffer, freed on drop.
pub struct DevBuf<'r> {
    rt: &'r Runtime,
    pub ptr: *mut c_void,
    pub bytes: usize,
}

impl DevBuf<'_> {
    /// Copies `host` to the buffer (what fits).
    pub fn upload(&self, host: &[u8]) -> Result<()> {
        let n = host.len().min(self.bytes);
        let _turn = self.rt.turn();
        // SAFETY: both regions hold n bytes.
        self.rt.check("Memcpy to the device", unsafe {
            (self.rt.memcpy)(self.ptr, host.as_ptr().cast(), n, HIP_MEMCPY_HOST_TO_DEVICE)
        })
    }

    /// The first min(`bytes`, buffer) bytes of the buffer.
    pub fn download(&self, bytes: usize) -> Result<Vec<u8>> {
        let mut host = vec![0u8; bytes.min(self.bytes)];
        let _turn = self.rt.turn();
        // SAFETY: both regions are that long.
        self.rt.check("Memcpy from the device", unsafe {
            (self.rt.memcpy)(
                host.as_mut_ptr().cast(),
                self.ptr,
                host.len(),
                HIP_MEMCPY_DEVICE_TO_HOST,
            )
        })?;
        Ok(host)
    }

    /// Sets every byte to `byte` (0xff makes every bf16/f16/f32 a NaN: a poisoned output);
    /// uploaded from the host where the runtime has no memset.
    pub fn fill(&self, byte: u8) -> Result<()> {
        match self.rt.memset {
            Some(f) => {
                let _turn = self.rt.turn();
                // SAFETY: the whole buffer.
                self.rt
                    .check("Memset", unsafe { f(self.ptr, byte as c_int, self.bytes) })
            }
            None => self.upload(&vec![byte; self.bytes]),
        }
    }
}

impl Drop for DevBuf<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by this runtime, freed once.
        unsafe { (self.rt.free)(self.ptr) };
    }
}
