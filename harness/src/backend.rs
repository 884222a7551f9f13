//! The rocBLAS backend of the harness: a library loaded at run time by path (real rocBLAS
//! plus HIP, or refblas), never linked, so one binary serves every ROCm release and the
//! CPU reference alike.
//!
//! [`Library`] holds the resolved entry points; [`Problem`] owns initialised device buffers
//! for one problem key and runs it with the heuristic or a given solution index.

use std::cell::RefCell;
use std::ffi::{c_void, CStr, CString};
use std::path::{Path, PathBuf};

use tunedblas_core::abi::*;
use tunedblas_core::identity;
use tunedblas_core::key::{Batching, ProblemKey};

use crate::error::{Error, Result};
use crate::hipgraph::{GraphCache, GraphError, HipGraphApi};

/// Calls `f`, a function of the `rocblas_gemm_ex` shape, on problem `p` with operand set
/// `o`, then the arguments after the compute type: running a problem and asking for its
/// solutions take the same problem and differ only there.
macro_rules! gemm_ex_call {
    ($f:expr, $p:expr, $o:expr; $($tail:expr),*) => {{
        let (k, t) = (&$p.key, $p.key.types);
        let i = |v: i64| v as i32;
        ($f)(
            $p.handle.h,
            k.trans_a.to_rocblas(),
            k.trans_b.to_rocblas(),
            i(k.m),
            i(k.n),
            i(k.k),
            $p.alpha.as_ptr().cast(),
            $o.a.ptr,
            t.a,
            i(k.lda),
            $o.b.ptr,
            t.b,
            i(k.ldb),
            $p.beta.as_ptr().cast(),
            $o.c.ptr,
            t.c,
            i(k.ldc),
            $o.d.ptr,
            t.d,
            i(k.ldd),
            t.compute,
            $($tail),*
        )
    }};
}

/// As [`gemm_ex_call`], for the `rocblas_gemm_strided_batched_ex` shape.
macro_rules! strided_ex_call {
    ($f:expr, $p:expr, $o:expr; $($tail:expr),*) => {{
        let (k, t) = (&$p.key, $p.key.types);
        let i = |v: i64| v as i32;
        ($f)(
            $p.handle.h,
            k.trans_a.to_rocblas(),
            k.trans_b.to_rocblas(),
            i(k.m),
            i(k.n),
            i(k.k),
            $p.alpha.as_ptr().cast(),
            $o.a.ptr,
            t.a,
            i(k.lda),
            k.stride_a,
            $o.b.ptr,
            t.b,
            i(k.ldb),
            k.stride_b,
            $p.beta.as_ptr().cast(),
            $o.c.ptr,
            t.c,
            i(k.ldc),
            k.stride_c,
            $o.d.ptr,
            t.d,
            i(k.ldd),
            k.stride_d,
            i(k.batch),
            t.compute,
            $($tail),*
        )
    }};
}

/// The loader's last error message (for rocBLAS, HIP and the CUDA libraries alike).
pub(crate) fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Loaded rocBLAS (and HIP) entry points.
pub struct Library {
    /// The file the loader mapped (a soname resolved through the search path).
    pub file: PathBuf,
    create_handle: CreateHandleFn,
    destroy_handle: DestroyHandleFn,
    gemm_ex: GemmExFn<i32>,
    gemm_strided_batched_ex: Option<GemmStridedBatchedExFn<i32>>,
    get_solutions: GemmExGetSolutionsFn,
    get_solutions_strided: Option<GemmStridedBatchedExGetSolutionsFn>,
    version: Option<(GetVersionStringSizeFn, GetVersionStringFn)>,
    set_stream: Option<SetStreamFn>,
    hip: Hip,
}

/// The HIP runtime calls the harness needs.
pub struct Hip {
    /// Memory and events, shared with the hipBLASLt tuner.
    pub mem: crate::hipmem::HipMem,
    pub set_device: Option<HipSetDeviceFn>,
    pub device_count: Option<HipGetDeviceCountFn>,
    /// Stream capture and graphs, for `--timing graph` (`None` where any is missing).
    pub graph: Option<HipGraphApi>,
}

unsafe fn sym<T: Copy>(handle: *mut c_void, name: &str) -> Option<T> {
    let c = CString::new(name).ok()?;
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    // SAFETY: the caller names the C type of this symbol (src/abi.rs).
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

fn open(path: &Path, flags: i32) -> Result<*mut c_void> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::failed(format!("{}: path contains a NUL byte", path.display())))?;
    // SAFETY: dlopen with a valid C string.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        return Err(Error::not_rocblas(format!(
            "cannot load {}: {}",
            path.display(),
            dl_error()
        )));
    }
    Ok(h)
}

impl Library {
    /// Loads rocBLAS from `path`; HIP from `hip` if given, else from the same library
    /// (refblas carries the HIP subset), else `libamdhip64.so`.
    pub fn load(path: &Path, hip: Option<&Path>) -> Result<Library> {
        Self::load_with(path, hip, false)
    }

    /// As [`Library::load`], but the GEMM is resolved the way a host linked against rocBLAS
    /// resolves it (global scope first), so an `LD_PRELOAD`ed interposer serves the calls.
    pub fn load_as_host(path: &Path) -> Result<Library> {
        Self::load_with(path, None, true)
    }

    fn load_with(path: &Path, hip: Option<&Path>, as_host: bool) -> Result<Library> {
        let h = open(
            path,
            libc::RTLD_NOW
                | if as_host {
                    libc::RTLD_GLOBAL
                } else {
                    libc::RTLD_LOCAL
                },
        )?;
        let scope = if as_host { libc::RTLD_DEFAULT } else { h };
        let need = |name: &str| -> Result<*mut c_void> {
            let c = CString::new(name).unwrap();
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            if p.is_null() {
                Err(Error::not_rocblas(format!(
                    "{} has no {name}: it is not rocBLAS (or older than ROCm 5.5, which lacks the solution queries)",
                    path.display()
                )))
            } else {
                Ok(p)
            }
        };
        // A library that is not rocBLAS is named as such before HIP is looked for.
        need("rocblas_create_handle")?;
        need("rocblas_gemm_ex")?;
        // (The interposer exports the two above, but never the solution queries.)
        need("rocblas_gemm_ex_get_solutions")?;
        // SAFETY (all transmutes below): each symbol has the C type src/abi.rs gives it.
        let lib = unsafe {
            let hip_handle = match hip {
                Some(p) => open(p, libc::RTLD_NOW | libc::RTLD_LOCAL)?,
                None if sym::<HipMallocFn>(h, "hipMalloc").is_some() => h,
                None => open(
                    Path::new("libamdhip64.so"),
                    libc::RTLD_NOW | libc::RTLD_LOCAL,
                )
                .map_err(|e| Error::failed(format!("{e}; pass --hip <path to libamdhip64.so>")))?,
            };
            Library {
                file: identity::library_of_address(need("rocblas_create_handle")? as usize)
                    .unwrap_or_else(|| path.to_path_buf()),
                create_handle: std::mem::transmute::<*mut c_void, CreateHandleFn>(need(
                    "rocblas_create_handle",
                )?),
                destroy_handle: std::mem::transmute::<*mut c_void, DestroyHandleFn>(need(
                    "rocblas_destroy_handle",
                )?),
                gemm_ex: {
                    need("rocblas_gemm_ex")?;
                    sym::<GemmExFn<i32>>(scope, "rocblas_gemm_ex").expect("resolved above")
                },
                gemm_strided_batched_ex: sym(scope, "rocblas_gemm_strided_batched_ex"),
                get_solutions: std::mem::transmute::<*mut c_void, GemmExGetSolutionsFn>(need(
                    "rocblas_gemm_ex_get_solutions",
                )?),
                get_solutions_strided: sym(h, "rocblas_gemm_strided_batched_ex_get_solutions"),
                version: sym::<GetVersionStringSizeFn>(h, "rocblas_get_version_string_size")
                    .zip(sym::<GetVersionStringFn>(h, "rocblas_get_version_string")),
                hip: Hip {
                    mem: crate::hipmem::HipMem::load(hip_handle).map_err(Error::failed)?,
                    set_device: sym(hip_handle, "hipSetDevice"),
                    device_count: sym(hip_handle, "hipGetDeviceCount"),
                    graph: HipGraphApi::load(hip_handle),
                },
                set_stream: sym(h, "rocblas_set_stream"),
            }
        };
        Ok(lib)
    }

    /// `5.6.0.8d1ae90e`-style version string.
    pub fn version(&self) -> Option<String> {
        let (size_fn, get_fn) = self.version?;
        let mut size = 0usize;
        // SAFETY: out-pointers of the documented types.
        if unsafe { size_fn(&mut size) } != STATUS_SUCCESS || size == 0 || size > 4096 {
            return None;
        }
        let mut buf = vec![0u8; size];
        if unsafe { get_fn(buf.as_mut_ptr().cast(), size) } != STATUS_SUCCESS {
            return None;
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(size);
        Some(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// How many devices the HIP runtime sees (1 when it cannot say).
    pub fn device_count(&self) -> Result<i32> {
        let Some(f) = self.hip.device_count else {
            return Ok(1);
        };
        let mut n = 0;
        // SAFETY: out-pointer.
        match unsafe { f(&mut n) } {
            HIP_SUCCESS if n > 0 => Ok(n),
            HIP_SUCCESS => Err(Error::no_device("the HIP runtime sees no device")),
            e => Err(Error::no_device(format!(
                "hipGetDeviceCount failed with HIP error {e}: no usable device"
            ))),
        }
    }

    /// Makes `device` current for this thread's later calls.
    pub fn set_device(&self, device: i32) -> Result<()> {
        let count = self.device_count()?;
        if device < 0 || device >= count {
            return Err(Error::failed(format!(
                "device {device} does not exist (the HIP runtime sees {count}: 0..{})",
                count - 1
            )));
        }
        match self.hip.set_device {
            None if device == 0 => Ok(()),
            None => Err(Error::failed("the HIP runtime has no hipSetDevice")),
            // SAFETY: plain call.
            Some(f) => match unsafe { f(device) } {
                HIP_SUCCESS => Ok(()),
                e => Err(Error::failed(format!(
                    "hipSetDevice({device}) failed with HIP error {e}"
                ))),
            },
        }
    }

    pub fn handle(&self) -> Result<RocHandle<'_>> {
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: out-pointer.
        match unsafe { (self.create_handle)(&mut h) } {
            STATUS_SUCCESS => Ok(RocHandle { lib: self, h }),
            s => Err(Error::failed(format!(
                "rocblas_create_handle failed with status {s}"
            ))),
        }
    }
}

/// A rocBLAS handle, destroyed on drop.
pub struct RocHandle<'a> {
    lib: &'a Library,
    h: Handle,
}

impl Drop for RocHandle<'_> {
    fn drop(&mut self) {
        // SAFETY: created by rocblas_create_handle.
        unsafe { (self.lib.destroy_handle)(self.h) };
    }
}

/// A device buffer, freed on drop.
type DevBuf<'a> = crate::hipmem::DevBuf<'a>;

/// Deterministic, non-zero values in [-1, 1] encoded as `t` (never zero or uninitialised:
/// zeros hide wrong kernels and some kernels run faster on them).
pub fn fill_bytes(t: Datatype, count: usize, seed: u64) -> Vec<u8> {
    let size = datatype_size(t).unwrap_or(4);
    let mut out = Vec::with_capacity(count * size);
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..count {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let mut v = ((s >> 11) % 2001) as f32 / 1000.0 - 1.0;
        if v == 0.0 {
            v = 0.5;
        }
        match t {
            DT_F64_R => out.extend_from_slice(&(v as f64).to_le_bytes()),
            DT_F16_R => out.extend_from_slice(&f32_to_f16(v).to_le_bytes()),
            DT_BF16_R => out.extend_from_slice(&((v.to_bits() >> 16) as u16).to_le_bytes()),
            _ => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
    out
}

/// f32 -> IEEE half, round to nearest even (inputs here are in [-1, 1]).
pub fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32 - 127 + 15;
    let man = x & 0x7f_ffff;
    if exp <= 0 {
        return sign;
    }
    if exp >= 31 {
        return sign | 0x7c00;
    }
    let mut h = sign as u32 | ((exp as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
        h += 1;
    }
    h as u16
}

/// One set of operands for a problem.
struct Operands<'a> {
    a: DevBuf<'a>,
    b: DevBuf<'a>,
    c: DevBuf<'a>,
    d: DevBuf<'a>,
}

/// Bytes of operands a timed sample rotates through, so no call finds its inputs in a
/// cache the previous call warmed (more than the largest last-level cache, MI300's 256 MiB
/// Infinity Cache).
pub const DEFAULT_ROTATE_BYTES: usize = 512 << 20;
/// At most this many operand sets per problem.
const MAX_SETS: usize = 8;

/// Device buffers and scalars for one problem, ready to run many times.
pub struct Problem<'a> {
    lib: &'a Library,
    handle: RocHandle<'a>,
    pub key: ProblemKey,
    sets: Vec<Operands<'a>>,
    /// Element counts of A, B, C, D (one set).
    counts: [usize; 4],
    alpha: Vec<u8>,
    beta: Vec<u8>,
    /// The stream the handle runs on: null (the default stream) unless graph timing is on.
    stream: Stream,
    /// Graph timing's executable graphs by (solution, calls captured); `None` in events mode.
    graphs: Option<GraphCache<(Option<i32>, usize)>>,
    /// Why graph timing stopped for this problem (it then times with events).
    pub graph_failure: RefCell<Option<String>>,
    /// Solutions run once uncaptured (graph timing): rocBLAS's lazy set-up and workspace
    /// growth (hipMalloc) happen there, never inside a capture, and a solution's own failure
    /// shows as its own.
    pre_run: RefCell<Vec<Option<i32>>>,
    /// Samples taken as graph replays (with a later fallback: the shape's samples are mixed).
    graph_samples: std::cell::Cell<usize>,
    /// `--rest`: idle after each sample for this multiple of the time it kept the device
    /// busy (0: back to back).
    rest: std::cell::Cell<f64>,
}

impl Drop for Problem<'_> {
    fn drop(&mut self) {
        // The graphs first, then the stream (the handle is moved off it before).
        self.graphs = None;
        if let (false, Some(g)) = (self.stream.is_null(), self.lib.hip.graph) {
            // SAFETY: the stream this problem made.
            unsafe {
                if let Some(set) = self.lib.set_stream {
                    set(self.handle.h, std::ptr::null_mut());
                }
                (g.stream_destroy)(self.stream);
            }
        }
    }
}

fn elems(ld: i64, cols: i64, batch: i64, stride: i64) -> usize {
    let one = (ld * cols.max(1)) as usize;
    if batch <= 1 {
        one
    } else {
        one + (stride.max(0) as usize) * (batch as usize - 1)
    }
}

fn scalar(compute: Datatype, v: f64) -> Vec<u8> {
    match compute {
        DT_F64_R => v.to_le_bytes().to_vec(),
        DT_F16_R => f32_to_f16(v as f32).to_le_bytes().to_vec(),
        _ => (v as f32).to_le_bytes().to_vec(),
    }
}

/// The scalars every problem runs with: both terms matter, so a kernel that drops C is
/// caught by qualification.
pub const ALPHA: f64 = 1.0;
pub const BETA: f64 = 0.5;

/// The fill seed of operand `which` (0 A, 1 B, 2 C, 3 D) of set `set`.
fn seed(set: usize, which: usize) -> u64 {
    (set * 4 + which + 1) as u64
}

impl<'a> Problem<'a> {
    /// Allocates and initialises operands for `key`: as many sets as fit in
    /// `rotate_bytes` (at least one, at most 8).
    pub fn new(lib: &'a Library, key: ProblemKey, rotate_bytes: usize) -> Result<Problem<'a>> {
        if key.batching == Batching::PointerArray {
            return Err(Error::failed(
                "pointer-array batched problems cannot be run by the harness yet",
            ));
        }
        let t = key.types;
        let size = |dt: Datatype| {
            datatype_size(dt).ok_or_else(|| {
                Error::failed(format!("data type {dt} is not supported by the harness"))
            })
        };
        let cols_a = if key.trans_a == tunedblas_core::key::Trans::N {
            key.k
        } else {
            key.m
        };
        let cols_b = if key.trans_b == tunedblas_core::key::Trans::N {
            key.n
        } else {
            key.k
        };
        let counts = [
            elems(key.lda, cols_a, key.batch, key.stride_a),
            elems(key.ldb, cols_b, key.batch, key.stride_b),
            elems(key.ldc, key.n, key.batch, key.stride_c),
            elems(key.ldd, key.n, key.batch, key.stride_d),
        ];
        let types = [t.a, t.b, t.c, t.d];
        let mut set_bytes = 0;
        for (n, dt) in counts.iter().zip(types) {
            set_bytes += n * size(dt)?;
        }
        let n_sets = (rotate_bytes / set_bytes.max(1)).clamp(1, MAX_SETS);
        let mut sets = Vec::with_capacity(n_sets);
        for set in 0..n_sets {
            let buf = |which: usize| -> Result<DevBuf<'a>> {
                let b = lib
                    .hip
                    .mem
                    .alloc(counts[which] * size(types[which])?)
                    .map_err(Error::failed)?;
                b.upload(&fill_bytes(types[which], counts[which], seed(set, which)))
                    .map_err(Error::failed)?;
                Ok(b)
            };
            sets.push(Operands {
                a: buf(0)?,
                b: buf(1)?,
                c: buf(2)?,
                d: buf(3)?,
            });
        }
        Ok(Problem {
            lib,
            handle: lib.handle()?,
            key,
            sets,
            counts,
            alpha: scalar(t.compute, ALPHA),
            beta: scalar(t.compute, BETA),
            stream: std::ptr::null_mut(),
            graphs: None,
            graph_failure: RefCell::new(None),
            pre_run: RefCell::new(Vec::new()),
            graph_samples: std::cell::Cell::new(0),
            rest: std::cell::Cell::new(0.0),
        })
    }

    /// Graph timing (`--timing graph`): the handle moves to a stream of its own, and each
    /// sample's calls are captured once into a HIP graph and replayed between two events
    /// (one launch for all of them: no per-call launch gaps, which the back-to-back events
    /// mode measures as part of small GEMMs). Where the library has no graph API, or a
    /// capture fails, the problem times with events and says why once.
    pub fn use_graphs(&mut self) -> Result<()> {
        let (Some(g), Some(set)) = (self.lib.hip.graph, self.lib.set_stream) else {
            let why = "the HIP runtime (or rocBLAS) has no stream capture and graph calls";
            eprintln!(
                "tunedblas tune: {}: graph timing unavailable ({why}); timing it with events",
                crate::shapes::shape_label(&self.key)
            );
            *self.graph_failure.borrow_mut() = Some(why.into());
            return Ok(());
        };
        let mut s: Stream = std::ptr::null_mut();
        // SAFETY: out-pointer; the handle is live.
        match unsafe { (g.stream_create)(&mut s) } {
            HIP_SUCCESS => {}
            e => {
                return Err(Error::failed(format!(
                    "hipStreamCreate failed with HIP error {e}"
                )))
            }
        }
        self.stream = s;
        match unsafe { set(self.handle.h, s) } {
            STATUS_SUCCESS => self.graphs = Some(GraphCache::new(g)),
            st => self.graph_failed(format!("rocblas_set_stream failed with status {st}")),
        }
        Ok(())
    }

    /// True when graph timing failed after samples were taken with it: this problem's
    /// samples are of two modes and must not be compared (the shape is timed again).
    pub fn timing_mixed(&self) -> bool {
        self.graph_failure.borrow().is_some() && self.graph_samples.get() > 0
    }

    /// The timing mode samples are taken in: `graph` or `events` (why, where graph was
    /// asked for and could not be used).
    pub fn timing(&self) -> String {
        match (&*self.graph_failure.borrow(), self.stream.is_null()) {
            (Some(e), _) => format!("events (graph: {e})"),
            (None, true) => "events".into(),
            (None, false) => "graph".into(),
        }
    }

    /// Destroys the instantiated graphs (a campaign probes many solutions once each).
    pub fn clear_graphs(&self) {
        if let Some(c) = &self.graphs {
            c.clear();
        }
    }

    /// How many operand sets the timed calls rotate through.
    pub fn sets(&self) -> usize {
        self.sets.len()
    }

    /// The host copy of operand `which` (0 A, 1 B, 2 C) of the first set, as uploaded.
    pub fn input(&self, which: usize) -> Vec<u8> {
        let t = self.key.types;
        let dt = [t.a, t.b, t.c, t.d][which];
        fill_bytes(dt, self.counts[which], seed(0, which))
    }

    /// Runs the first set once and returns D as the device holds it.
    pub fn run_and_read(&self, solution: Option<i32>) -> Result<Vec<u8>> {
        match self.run_on(0, solution, 0) {
            STATUS_SUCCESS => {
                let d = &self.sets[0].d;
                d.download(d.bytes).map_err(Error::failed)
            }
            st => Err(Error::failed(format!(
                "the GEMM failed with rocBLAS status {st}"
            ))),
        }
    }

    /// Runs the first operand set once (see [`Problem::run_on`]).
    pub fn run(&self, solution: Option<i32>, extra_flags: u32) -> Status {
        self.run_on(0, solution, extra_flags)
    }

    /// Runs operand set `set` once: the heuristic when `solution` is None, else that
    /// index. `extra_flags` adds e.g. check_solution_index.
    pub fn run_on(&self, set: usize, solution: Option<i32>, extra_flags: u32) -> Status {
        let o = &self.sets[set % self.sets.len()];
        let (algo, idx) = match solution {
            Some(s) => (ALGO_SOLUTION_INDEX, s),
            None => (ALGO_STANDARD, 0),
        };
        let flags = self.key.flags | extra_flags;
        // SAFETY: every buffer was sized for this key above.
        unsafe {
            match self.key.batching {
                Batching::Single => gemm_ex_call!(self.lib.gemm_ex, self, o; algo, idx, flags),
                Batching::Strided => match self.lib.gemm_strided_batched_ex {
                    Some(f) => strided_ex_call!(f, self, o; algo, idx, flags),
                    None => STATUS_NOT_IMPLEMENTED,
                },
                Batching::PointerArray => STATUS_NOT_IMPLEMENTED,
            }
        }
    }

    /// The solutions the library offers for exactly this problem.
    pub fn solutions(&self) -> Result<Vec<i32>> {
        let o = &self.sets[0];
        let flags = self.key.flags;
        let query = |list: *mut i32, size: &mut i32| -> Status {
            // SAFETY: buffers sized for this key; list is NULL or holds *size entries.
            unsafe {
                match self.key.batching {
                    Batching::Strided => match self.lib.get_solutions_strided {
                        Some(f) => {
                            strided_ex_call!(f, self, o; ALGO_SOLUTION_INDEX, flags, list, size)
                        }
                        None => STATUS_NOT_IMPLEMENTED,
                    },
                    _ => {
                        gemm_ex_call!(self.lib.get_solutions, self, o; ALGO_SOLUTION_INDEX, flags, list, size)
                    }
                }
            }
        };
        let mut count = 0i32;
        let st = query(std::ptr::null_mut(), &mut count);
        if st != STATUS_SUCCESS {
            return Err(Error::failed(format!(
                "get_solutions failed with rocBLAS status {st}"
            )));
        }
        let mut list = vec![0i32; count.max(0) as usize];
        let mut size = count;
        let st = query(list.as_mut_ptr(), &mut size);
        if st != STATUS_SUCCESS {
            return Err(Error::failed(format!(
                "get_solutions failed with rocBLAS status {st}"
            )));
        }
        list.truncate(size.clamp(0, count) as usize);
        Ok(list)
    }

    /// Milliseconds per call over `calls` calls, rotating through the operand sets, in this
    /// problem's timing mode ([`Problem::use_graphs`]); a graph mode that fails falls back to
    /// events for good, said once.
    pub fn time(&self, solution: Option<i32>, calls: usize) -> Result<f64> {
        let failed = self.graph_failure.borrow().is_some();
        if let (Some(cache), false) = (&self.graphs, failed) {
            match self.time_graph(cache, solution, calls) {
                Ok(ms) => {
                    self.graph_samples.set(self.graph_samples.get() + 1);
                    // The untimed replay ahead kept the device busy as long again.
                    crate::rest::after(self.rest.get(), 2.0 * ms * calls.max(1) as f64);
                    return Ok(ms);
                }
                Err(GraphError::Work(e)) => return Err(e),
                Err(GraphError::Mode(e)) => self.graph_failed(e),
            }
        }
        let ms = self.time_events(solution, calls)?;
        crate::rest::after(self.rest.get(), ms * calls.max(1) as f64);
        Ok(ms)
    }

    /// `--rest`: after each sample of [`Problem::time`], idle `ratio` times the device time
    /// it took (see [`crate::rest`]).
    pub fn set_rest(&self, ratio: f64) {
        self.rest.set(ratio);
    }

    /// The stream the handle's work goes to: the problem's own while graph timing is on,
    /// else the default stream.
    fn work_stream(&self) -> Stream {
        if self.graph_failure.borrow().is_some() {
            std::ptr::null_mut()
        } else {
            self.stream
        }
    }

    /// Graph timing stops for this problem, said once: its graphs are dropped and the handle
    /// goes back to the default stream (a stream whose capture was invalidated may refuse
    /// work), so events timing is exactly the default mode.
    fn graph_failed(&self, why: String) {
        eprintln!(
            "tunedblas tune: {}: graph timing failed ({why}); timing it with events",
            crate::shapes::shape_label(&self.key)
        );
        if let Some(c) = &self.graphs {
            c.clear();
        }
        if let Some(set) = self.lib.set_stream {
            // SAFETY: a live handle; the null stream is always valid.
            unsafe { set(self.handle.h, std::ptr::null_mut()) };
        }
        *self.graph_failure.borrow_mut() = Some(why);
    }

    /// `calls` calls captured once into a graph (cached by solution and count), replayed
    /// between two events recorded on the problem's stream, behind one untimed replay so
    /// the timed one is submitted while the device is busy (its host-side submission is not
    /// timed).
    fn time_graph(
        &self,
        cache: &GraphCache<(Option<i32>, usize)>,
        solution: Option<i32>,
        calls: usize,
    ) -> std::result::Result<f64, GraphError<Error>> {
        let ops = calls.max(1);
        if !self.pre_run.borrow().contains(&solution) {
            match self.run_on(0, solution, 0) {
                STATUS_SUCCESS => self.pre_run.borrow_mut().push(solution),
                st => {
                    return Err(GraphError::Work(Error::failed(format!(
                        "the GEMM failed with rocBLAS status {st}"
                    ))))
                }
            }
        }
        let exec = cache.exec((solution, ops), self.stream, || {
            for i in 0..ops {
                match self.run_on(i, solution, 0) {
                    STATUS_SUCCESS => {}
                    st => {
                        return Err(Error::failed(format!(
                            "the GEMM failed with rocBLAS status {st}"
                        )))
                    }
                }
            }
            Ok(())
        })?;
        cache.launch(exec, self.stream)?;
        let (launched, ms) = self
            .lib
            .hip
            .mem
            .span(self.stream, || cache.launch(exec, self.stream))
            .map_err(GraphError::Mode)?;
        launched?;
        Ok(ms / ops as f64)
    }

    /// Milliseconds per call over `calls` back-to-back runs between two events, rotating
    /// through the operand sets, with no sync between calls (the launch-bound mode; on
    /// refblas events read a host clock).
    fn time_events(&self, solution: Option<i32>, calls: usize) -> Result<f64> {
        let (status, ms) = self
            .lib
            .hip
            .mem
            .span(self.work_stream(), || {
                let mut status = STATUS_SUCCESS;
                for call in 0..calls {
                    status = self.run_on(call, solution, 0);
                    if status != STATUS_SUCCESS {
                        break;
                    }
                }
                status
            })
            .map_err(Error::failed)?;
        if status != STATUS_SUCCESS {
            return Err(Error::failed(format!(
                "the GEMM failed with rocBLAS status {status}"
            )));
        }
        Ok(ms / calls.max(1) as f64)
    }
}

impl Library {
    /// The harness's own shared objects live beside its binary (`target/<profile>/`), or in
    /// `<prefix>/lib` of an installed copy (`<prefix>/bin/tunedblas`).
    pub fn beside_exe(name: &str) -> Option<PathBuf> {
        let exe = std::env::current_exe().ok()?;
        let dir = exe.parent()?;
        // A build folder (target/release), an installed prefix (bin/ and lib/), and the
        // installed prefix's private folder for refblas (lib/tunedblas/: kept out of the
        // loader's search path, where a librocblas.so.5 must never stand in for rocBLAS).
        [
            dir.join(name),
            dir.join("../lib").join(name),
            dir.join("../lib/tunedblas").join(name),
        ]
        .into_iter()
        .find(|p| p.is_file())
    }
}
