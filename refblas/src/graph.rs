//! Streams, stream capture and graph replay on the host, as HIP offers them
//! (`hipStreamCreate`, `hipStreamBeginCapture` ... `hipStreamEndCapture`,
//! `hipGraphInstantiateWithFlags`, `hipGraphLaunch`): a GEMM issued through a handle whose
//! stream is capturing is checked as rocBLAS checks it at enqueue (a bad argument is its
//! status then) and recorded, its host scalars copied as a kernel launch copies its
//! arguments; launching the graph runs the recorded GEMMs in order, each traced as it runs.
//! The harness's graph timing mode (`tunedblas tune --timing graph`) runs on refblas through
//! the very calls it makes on ROCm.

use std::ffi::c_void;
use std::sync::Mutex;

use tunedblas_core::abi::{
    datatype_size, Handle, HipError, Status, Stream, HIP_SUCCESS, POINTER_MODE_HOST,
};

use crate::flavour::Flavour;
use crate::gemm::GemmCall;
use crate::hip::{HIP_ERROR_INVALID_HANDLE, HIP_ERROR_INVALID_VALUE};

/// `hipErrorStreamCaptureUnsupported`: capture on the null stream (or refused by
/// `REFBLAS_NO_GRAPHS`).
pub const HIP_ERROR_STREAM_CAPTURE_UNSUPPORTED: HipError = 900;
/// `hipErrorIllegalState`: a second begin, or an end without a begin (as HIP's clr says).
pub const HIP_ERROR_ILLEGAL_STATE: HipError = 401;

/// A recorded GEMM: the call with its scalars pointing into `scalars` when they were host
/// values, which are copied (a launch reads what the scalars were at capture).
#[derive(Clone)]
struct Op {
    flavour: Flavour,
    handle: Handle,
    call: GemmCall,
    /// Host pointer mode: alpha and beta are read from `scalars`.
    host: bool,
    scalars: Box<[[u8; 16]; 2]>,
}

// SAFETY: the raw pointers of a recorded call are only dereferenced when the graph is
// launched, as HIP's device pointers in a captured kernel are; refblas's streams are
// shared between threads as HIP's are.
unsafe impl Send for Op {}

impl Op {
    fn run(&self) -> Status {
        let mut call = self.call;
        if self.host {
            call.alpha = self.scalars[0].as_ptr().cast();
            call.beta = self.scalars[1].as_ptr().cast();
        }
        // SAFETY: as when it was captured: the caller keeps the buffers and handle alive.
        unsafe { crate::gemm::gemm(self.flavour, self.handle, &call) }
    }
}

/// What a stream made by [`stream_create`] points to.
struct StreamState {
    /// `Some` while capturing: the GEMMs recorded so far.
    capture: Mutex<Option<Vec<Op>>>,
}

/// A captured graph, and an instantiated one (the same: a list of GEMMs).
struct Graph {
    ops: Vec<Op>,
}

/// `REFBLAS_NO_GRAPHS=1`, read once: capture is refused (`hipErrorStreamCaptureUnsupported`),
/// as on a HIP without graph support, so tests see the harness fall back to events.
pub fn no_graphs() -> bool {
    static NO: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NO.get_or_init(|| std::env::var("REFBLAS_NO_GRAPHS").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// `REFBLAS_GRAPH_FAIL_AFTER=N`, read once: the first N captures of the process work, the
/// later ones are refused (a capture failing part way through a tuning).
fn captures_left_exhausted() -> bool {
    static AFTER: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    static DONE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let Some(n) = *AFTER.get_or_init(|| {
        std::env::var("REFBLAS_GRAPH_FAIL_AFTER")
            .ok()
            .and_then(|v| v.trim().parse().ok())
    }) else {
        return false;
    };
    DONE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= n
}

/// `hipStreamCreate`.
///
/// # Safety
/// `out` null or writable.
pub unsafe fn stream_create(out: *mut Stream) -> HipError {
    if out.is_null() {
        return HIP_ERROR_INVALID_VALUE;
    }
    let s = Box::into_raw(Box::new(StreamState {
        capture: Mutex::new(None),
    }));
    live().push(s as usize);
    *out = s as Stream;
    HIP_SUCCESS
}

/// `hipStreamDestroy`.
///
/// # Safety
/// `s` any value; a live stream from [`stream_create`] is not used afterwards.
pub unsafe fn stream_destroy(s: Stream) -> HipError {
    let mut live = live();
    let Some(i) = live.iter().position(|&p| p == s as usize) else {
        return HIP_ERROR_INVALID_HANDLE;
    };
    live.swap_remove(i);
    drop(Box::from_raw(s as *mut StreamState));
    HIP_SUCCESS
}

/// `hipStreamSynchronize`: work on a stream has run when it was issued (or is captured).
pub fn stream_synchronize(_s: Stream) -> HipError {
    HIP_SUCCESS
}

/// The streams [`stream_create`] made and [`stream_destroy`] has not destroyed.
fn live() -> std::sync::MutexGuard<'static, Vec<usize>> {
    static LIVE: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The state of `s` if it is a live stream of ours: a handle may hold any stream value
/// (another runtime's, or a made-up one in a test), which is never dereferenced.
unsafe fn state<'a>(s: Stream) -> Option<&'a StreamState> {
    if s.is_null() || !live().contains(&(s as usize)) {
        return None;
    }
    (s as *const StreamState).as_ref()
}

/// `hipStreamBeginCapture(stream, mode)` (every mode captures this stream's work alike).
///
/// # Safety
/// `s` null or a live stream from [`stream_create`].
pub unsafe fn begin_capture(s: Stream, _mode: i32) -> HipError {
    if no_graphs() || captures_left_exhausted() {
        return HIP_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    let Some(st) = state(s) else {
        return HIP_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    };
    let mut c = st.capture.lock().unwrap_or_else(|p| p.into_inner());
    if c.is_some() {
        return HIP_ERROR_ILLEGAL_STATE;
    }
    *c = Some(Vec::new());
    HIP_SUCCESS
}

/// `hipStreamEndCapture(stream, graph*)`.
///
/// # Safety
/// `s` null or live; `out` null or writable.
pub unsafe fn end_capture(s: Stream, out: *mut *mut c_void) -> HipError {
    let Some(st) = state(s) else {
        return HIP_ERROR_INVALID_HANDLE;
    };
    if out.is_null() {
        return HIP_ERROR_INVALID_VALUE;
    }
    let ops = st.capture.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(ops) = ops else {
        return HIP_ERROR_ILLEGAL_STATE;
    };
    *out = Box::into_raw(Box::new(Graph { ops })) as *mut c_void;
    HIP_SUCCESS
}

/// `hipGraphInstantiateWithFlags(exec*, graph, flags)`: an executable copy of the graph.
///
/// # Safety
/// `out` null or writable; `g` null or a live graph.
pub unsafe fn instantiate(out: *mut *mut c_void, g: *mut c_void, _flags: u64) -> HipError {
    let Some(g) = (g as *const Graph).as_ref() else {
        return HIP_ERROR_INVALID_VALUE;
    };
    if out.is_null() {
        return HIP_ERROR_INVALID_VALUE;
    }
    *out = Box::into_raw(Box::new(Graph { ops: g.ops.clone() })) as *mut c_void;
    HIP_SUCCESS
}

/// `hipGraphLaunch(exec, stream)`: the recorded GEMMs, in order. A GEMM that fails at run
/// time (an injected fault) is not reported here, as a kernel's failure is not.
///
/// # Safety
/// `exec` null or a live executable graph whose buffers and handles are alive.
pub unsafe fn launch(exec: *mut c_void, _s: Stream) -> HipError {
    let Some(g) = (exec as *const Graph).as_ref() else {
        return HIP_ERROR_INVALID_VALUE;
    };
    for op in &g.ops {
        op.run();
    }
    HIP_SUCCESS
}

/// `hipGraphExecDestroy` and `hipGraphDestroy`.
///
/// # Safety
/// `g` null or a live graph, not used afterwards.
pub unsafe fn destroy(g: *mut c_void) -> HipError {
    if crate::handle::release::<Graph>(g) {
        HIP_SUCCESS
    } else {
        HIP_ERROR_INVALID_VALUE
    }
}

/// If the handle's stream is capturing: `call` checked as at enqueue and recorded, and the
/// status the GEMM entry point returns. `None`: not capturing, run it now.
///
/// # Safety
/// `handle` null or live; `call` as the GEMM entry points require.
pub unsafe fn capture(flavour: Flavour, handle: Handle, call: &GemmCall) -> Option<Status> {
    let stream = crate::handle::state(handle)?.stream();
    let st = state(stream)?;
    let mut c = st.capture.lock().unwrap_or_else(|p| p.into_inner());
    let ops = c.as_mut()?;
    // What rocBLAS checks before it enqueues, and a launch failure (the injected faults),
    // which surfaces at enqueue too: no kernel runs, nothing is traced.
    let faults = crate::gemm::faults();
    if let Some(s) = faults.fail_all {
        return Some(s);
    }
    if let Err(s) = crate::gemm::run_with_faults(flavour, handle, call, false, faults) {
        return Some(s);
    }
    let host = crate::handle::state(handle).is_some_and(|h| h.pointer_mode() == POINTER_MODE_HOST);
    let mut scalars = Box::new([[0u8; 16]; 2]);
    if host {
        let size = datatype_size(call.compute_type).unwrap_or(16).min(16);
        for (i, p) in [call.alpha, call.beta].into_iter().enumerate() {
            if !p.is_null() {
                std::ptr::copy_nonoverlapping(p as *const u8, scalars[i].as_mut_ptr(), size);
            }
        }
    }
    ops.push(Op {
        flavour,
        handle,
        call: *call,
        host,
        scalars,
    });
    Some(tunedblas_core::abi::STATUS_SUCCESS)
}
