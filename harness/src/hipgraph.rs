//! HIP stream capture and graph replay, for the graph timing mode of both AMD tuners (the
//! rocBLAS harness, `backend.rs`, and the hipBLASLt one, `lt/hip/`): a sample's calls are
//! captured once into a graph and the graph is replayed between two events, so a sample is
//! one launch with no gaps between its calls. The API is looked up at run time (real HIP
//! has it; refblas and the hipBLASLt stand-in's HIP emulate it); a capture or launch that
//! fails is the mode's failure, which the caller turns into events timing, said once.

use std::cell::RefCell;
use std::ffi::{c_void, CString};

use tunedblas_core::abi::*;

/// HIP's streams, stream capture and graph calls.
#[derive(Clone, Copy)]
pub struct HipGraphApi {
    pub stream_create: HipStreamCreateFn,
    pub stream_destroy: HipStreamDestroyFn,
    begin: HipStreamBeginCaptureFn,
    end: HipStreamEndCaptureFn,
    instantiate: HipGraphInstantiateWithFlagsFn,
    launch: HipGraphLaunchFn,
    exec_destroy: HipGraphDestroyFn,
    graph_destroy: HipGraphDestroyFn,
}

impl HipGraphApi {
    /// All of them through the loader handle `h`, or `None` where one is missing.
    ///
    /// # Safety
    /// `h` a live loader handle.
    pub unsafe fn load(h: *mut c_void) -> Option<HipGraphApi> {
        unsafe fn sym<T: Copy>(h: *mut c_void, name: &str) -> Option<T> {
            let c = CString::new(name).ok()?;
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            // SAFETY: each name below has the C type src/abi.rs gives it.
            (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
        }
        Some(HipGraphApi {
            stream_create: sym(h, "hipStreamCreate")?,
            stream_destroy: sym(h, "hipStreamDestroy")?,
            begin: sym(h, "hipStreamBeginCapture")?,
            end: sym(h, "hipStreamEndCapture")?,
            instantiate: sym(h, "hipGraphInstantiateWithFlags")?,
            launch: sym(h, "hipGraphLaunch")?,
            exec_destroy: sym(h, "hipGraphExecDestroy")?,
            graph_destroy: sym(h, "hipGraphDestroy")?,
        })
    }
}

/// Why a graph could not be had: the mode failed (capture, instantiation, launch), or the
/// work captured failed (its own error, as events timing would have returned it).
pub enum GraphError<E> {
    Mode(String),
    Work(E),
}

fn mode<E>(what: &str, e: HipError) -> GraphError<E> {
    GraphError::Mode(format!("{what} failed with HIP error {e}"))
}

/// Executable graphs by key (what was captured: an algorithm and a call count), each
/// destroyed with the cache or by [`GraphCache::clear`].
pub struct GraphCache<K> {
    api: HipGraphApi,
    entries: RefCell<Vec<(K, *mut c_void, *mut c_void)>>,
}

impl<K: PartialEq> GraphCache<K> {
    pub fn new(api: HipGraphApi) -> GraphCache<K> {
        GraphCache {
            api,
            entries: RefCell::new(Vec::new()),
        }
    }

    /// The executable graph of `key`: cached, or `enqueue` captured on `stream` now and
    /// uploaded by one untimed launch. Capture always ends, so a failed `enqueue` leaves
    /// the stream usable.
    pub fn exec<E>(
        &self,
        key: K,
        stream: Stream,
        enqueue: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<*mut c_void, GraphError<E>> {
        if let Some(e) = self.entries.borrow().iter().find(|e| e.0 == key) {
            return Ok(e.1);
        }
        let g = &self.api;
        // SAFETY (every HIP call below): a live stream; out-pointers; objects made here.
        match unsafe { (g.begin)(stream, HIP_STREAM_CAPTURE_MODE_THREAD_LOCAL) } {
            HIP_SUCCESS => {}
            e => return Err(mode("hipStreamBeginCapture", e)),
        }
        let work = enqueue();
        let mut graph = std::ptr::null_mut();
        let ended = unsafe { (g.end)(stream, &mut graph) };
        if ended != HIP_SUCCESS {
            // The capture was invalidated (a call inside allocated, copied or synchronised):
            // whatever the work then returned, it is the mode that failed. Callers run each
            // piece of work once uncaptured first, so the work's own errors show there.
            return Err(mode("hipStreamEndCapture", ended));
        }
        if let Err(e) = work {
            if !graph.is_null() {
                unsafe { (g.graph_destroy)(graph) };
            }
            return Err(GraphError::Work(e));
        }
        let mut exec = std::ptr::null_mut();
        match unsafe { (g.instantiate)(&mut exec, graph, 0) } {
            HIP_SUCCESS => {}
            e => {
                unsafe { (g.graph_destroy)(graph) };
                return Err(mode("hipGraphInstantiateWithFlags", e));
            }
        }
        self.entries.borrow_mut().push((key, exec, graph));
        // The first launch uploads the graph: not timed.
        self.launch(exec, stream)?;
        Ok(exec)
    }

    pub fn launch<E>(
        &self,
        exec: *mut c_void,
        stream: Stream,
    ) -> std::result::Result<(), GraphError<E>> {
        // SAFETY: an executable graph of this cache, a live stream.
        match unsafe { (self.api.launch)(exec, stream) } {
            HIP_SUCCESS => Ok(()),
            e => Err(mode("hipGraphLaunch", e)),
        }
    }
}

impl<K> GraphCache<K> {
    /// Destroys every graph (a campaign probes many algorithms once each).
    pub fn clear(&self) {
        for (_, exec, graph) in self.entries.borrow_mut().drain(..) {
            // SAFETY: made by this cache, destroyed once.
            unsafe {
                (self.api.exec_destroy)(exec);
                (self.api.graph_destroy)(graph);
            }
        }
    }
}

impl<K> Drop for GraphCache<K> {
    fn drop(&mut self) {
        self.clear();
    }
}
