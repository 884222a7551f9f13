//! One cuBLASLt problem on the device: descriptors made the way PyTorch makes them, rotating
//! sets of input buffers, a workspace, a stream and a pair of events.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::time::Instant;

use tunedblas_core::cublaslt::*;
use tunedblas_lt_algo::{build_algo, read_config};

use super::cuda::{err, lt_check, Cuda, DevBuf, Graph, Lt, Result};
use super::numeric;
use super::timing::Timing;

/// Keys the harness can run: real f16/bf16/f32 with f32 scale, no epilogue but a bias,
/// host scalars. (Everything PyTorch's `F.linear` and `matmul` put on cuBLASLt.)
pub fn supported(key: &LtKey) -> std::result::Result<(), String> {
    let io_ok = [key.a_type, key.b_type, key.c_type, key.d_type]
        .iter()
        .all(|t| matches!(*t, R_16F | R_16BF | R_32F));
    if !io_ok || key.scale != R_32F {
        return Err("only f16, bf16 and f32 matrices with an f32 scale are tuned".into());
    }
    if key.pointer_mode != POINTER_MODE_HOST {
        return Err("only host alpha/beta are tuned".into());
    }
    if key.epilogue != EPILOGUE_DEFAULT && key.epilogue != EPILOGUE_BIAS {
        return Err(format!("epilogue {} is not tuned yet", key.epilogue));
    }
    key.check()
}

/// Floating-point operations of one call: 2 x m x n x k per batch (a multiply and an add).
pub fn flops(key: &LtKey) -> f64 {
    2.0 * key.m as f64 * key.n as f64 * key.k as f64 * key.batch.max(1) as f64
}

/// Bytes one call must move at least: A and B read, D written (beta = 0: C is not read), the
/// bias read.
pub fn bytes_moved(key: &LtKey) -> usize {
    let ext = extents(key);
    let b = key.elem_bytes();
    let bias = if epilogue_has_bias(key.epilogue) {
        key.m as usize * type_bytes(key.bias_type)
    } else {
        0
    };
    ext[0] * b[0] + ext[1] * b[1] + ext[3] * b[3] + bias
}

/// Elements each matrix spans, batch included.
pub(super) fn extents(key: &LtKey) -> [usize; 4] {
    let shapes = key.stored_shapes();
    let lds = [key.lda, key.ldb, key.ldc, key.ldd];
    let strides = [key.stride_a, key.stride_b, key.stride_c, key.stride_d];
    std::array::from_fn(|i| (lds[i] * shapes[i].1 + strides[i] * (key.batch - 1)).max(1) as usize)
}

/// Rebuilds `cfg` for `key` and asks `cublasLtMatmulAlgoCheck` whether it runs with the
/// descriptors `descs` (matmul, A, B, C, D) in `workspace` bytes; the algorithm and the
/// workspace it needs.
pub fn check_config(
    lt: &Lt,
    key: &LtKey,
    descs: [*mut c_void; 5],
    cfg: &AlgoConfig,
    workspace: usize,
) -> std::result::Result<(MatmulAlgo, usize), String> {
    // SAFETY: the library's own functions and a live handle.
    let algo = unsafe {
        build_algo(
            lt.algo_init,
            lt.config_set,
            lt.config_get,
            lt.handle,
            key,
            cfg,
        )
    }?;
    let mut res = HeuristicResult::default();
    // SAFETY: live descriptors, a valid algorithm and out-pointer.
    let st = unsafe {
        (lt.check)(
            lt.handle, descs[0], descs[1], descs[2], descs[3], descs[4], &algo, &mut res,
        )
    };
    if st != STATUS_SUCCESS {
        return Err(format!("cublasLtMatmulAlgoCheck returned {st}"));
    }
    if res.workspace_size > workspace {
        return Err(format!(
            "needs {} bytes of workspace, more than the {workspace} a caller gives",
            res.workspace_size
        ));
    }
    Ok((algo, res.workspace_size))
}

/// An instantiated graph by (algorithm words, operations captured).
type CachedGraph<'a> = (Option<[u64; 8]>, usize, Graph<'a>);

/// One rotating input set.
struct Set<'a> {
    a: DevBuf<'a>,
    b: DevBuf<'a>,
}

pub struct Problem<'a> {
    pub cuda: &'a Cuda,
    pub lt: &'a Lt,
    pub key: LtKey,
    desc: MatmulDesc,
    layouts: [MatrixLayout; 4],
    pref: MatmulPreference,
    sets: Vec<Set<'a>>,
    /// C and D in one buffer (beta = 0, D written in place), one for every input set: in
    /// PyTorch each call's output is a fresh tensor, but the caching allocator hands the
    /// block just freed to the next call, so back-to-back calls (and graph replays) write
    /// one buffer, which stays in L2 where it fits. Rotating D with the inputs made large
    /// outputs 9-13% slower in the harness than in PyTorch (BENCHMARKS.md, issue 15).
    out: DevBuf<'a>,
    _bias: Option<DevBuf<'a>>,
    workspace: DevBuf<'a>,
    pub workspace_bytes: usize,
    pub stream: *mut c_void,
    ev: [*mut c_void; 2],
    alpha: f32,
    beta: f32,
    timing: Cell<Timing>,
    /// Set when graph capture failed for this problem and it fell back to events.
    pub graph_failure: RefCell<Option<String>>,
    /// Instantiated graphs by (algorithm, operations captured).
    graphs: RefCell<Vec<CachedGraph<'a>>>,
}

impl Drop for Problem<'_> {
    fn drop(&mut self) {
        unsafe {
            (self.lt.pref_destroy)(self.pref);
            for l in self.layouts.into_iter().filter(|l| !l.is_null()) {
                (self.lt.layout_destroy)(l);
            }
            (self.lt.desc_destroy)(self.desc);
        }
    }
}

fn set_attr<T>(f: SetAttributeFn, obj: *mut c_void, attr: i32, v: &T) -> Result<()> {
    // SAFETY: a value of the attribute's documented type and size.
    let st = unsafe { f(obj, attr, (v as *const T).cast(), std::mem::size_of::<T>()) };
    lt_check(&format!("setting attribute {attr}"), st)
}

/// Elements of random input made on the host at most; larger inputs repeat the block.
const RANDOM_BLOCK: usize = 1 << 21;

/// Fills `buf` with `n` random values of type `t`, repeating one block of at most
/// [`RANDOM_BLOCK`] elements ([`Problem::new_timing_only`]): the values still toggle every bit
/// a kernel's power draw depends on, and making the hundreds of millions the delay's and the
/// matmul rate's GEMMs take cost seconds per process on the host.
fn upload_repeated_random(
    buf: &DevBuf,
    t: CudaDataType,
    n: usize,
    rng: &mut numeric::Rng,
) -> Result<()> {
    let block = numeric::random(t, n.min(RANDOM_BLOCK), rng);
    let total = n * type_bytes(t);
    let mut at = 0;
    while at < total {
        let len = block.len().min(total - at);
        buf.upload_at(at, &block[..len])?;
        at += len;
    }
    Ok(())
}

impl<'a> Problem<'a> {
    /// Builds the problem with `sets` rotating input sets (at least 1) and `workspace` bytes.
    pub fn new(
        cuda: &'a Cuda,
        lt: &'a Lt,
        key: LtKey,
        sets: usize,
        workspace: usize,
    ) -> Result<Problem<'a>> {
        Problem::build(cuda, lt, key, sets, workspace, false)
    }

    /// A problem whose large inputs repeat one block of random values: for work that is only
    /// timed (the delay's GEMMs, the matmul rate), never for a tuned shape, where repeated
    /// rows could hide a kernel that writes a tile to the wrong place.
    pub fn new_timing_only(
        cuda: &'a Cuda,
        lt: &'a Lt,
        key: LtKey,
        workspace: usize,
    ) -> Result<Problem<'a>> {
        Problem::build(cuda, lt, key, 1, workspace, true)
    }

    fn build(
        cuda: &'a Cuda,
        lt: &'a Lt,
        key: LtKey,
        sets: usize,
        workspace: usize,
        repeat_inputs: bool,
    ) -> Result<Problem<'a>> {
        if let Err(e) = supported(&key) {
            return err(e);
        }
        let mut desc = std::ptr::null_mut();
        lt_check("cublasLtMatmulDescCreate", unsafe {
            (lt.desc_create)(&mut desc, key.compute, key.scale)
        })?;
        let mut pref = std::ptr::null_mut();
        lt_check("cublasLtMatmulPreferenceCreate", unsafe {
            (lt.pref_create)(&mut pref)
        })?;
        let ws = cuda.alloc(workspace)?;
        let ext = extents(&key);
        let bytes = key.elem_bytes();
        let out = cuda.alloc(ext[2].max(ext[3]) * bytes[2].max(bytes[3]))?;
        out.fill(0)?;
        let mut p = Problem {
            cuda,
            lt,
            key,
            desc,
            layouts: [std::ptr::null_mut(); 4],
            pref,
            sets: Vec::new(),
            out,
            _bias: None,
            workspace: ws,
            workspace_bytes: workspace,
            stream: cuda.stream()?,
            ev: [cuda.event()?, cuda.event()?],
            alpha: 1.0,
            beta: 0.0,
            timing: Cell::new(Timing::Events),
            graph_failure: RefCell::new(None),
            graphs: RefCell::new(Vec::new()),
        };
        set_attr(lt.desc_set, desc, DESC_TRANSA, &op_of(key.trans_a))?;
        set_attr(lt.desc_set, desc, DESC_TRANSB, &op_of(key.trans_b))?;
        if key.sm_count != 0 {
            set_attr(lt.desc_set, desc, DESC_SM_COUNT_TARGET, &key.sm_count)?;
        }
        for (i, l) in key.layouts().iter().enumerate() {
            lt_check("cublasLtMatrixLayoutCreate", unsafe {
                (lt.layout_create)(&mut p.layouts[i], l.dtype, l.rows, l.cols, l.ld)
            })?;
            if key.batch > 1 {
                set_attr(lt.layout_set, p.layouts[i], LAYOUT_BATCH_COUNT, &l.batch)?;
                set_attr(
                    lt.layout_set,
                    p.layouts[i],
                    LAYOUT_STRIDED_BATCH_OFFSET,
                    &l.stride,
                )?;
            }
        }
        let ws64 = workspace as u64;
        set_attr(lt.pref_set, pref, PREF_MAX_WORKSPACE_BYTES, &ws64)?;
        // PyTorch tells the heuristic the alignment of its pointers (16 bytes for tensors
        // from its allocator); cudaMalloc's 256 would allow algorithms PyTorch never gets.
        for a in PREF_MIN_ALIGNMENT_A_BYTES..=PREF_MIN_ALIGNMENT_D_BYTES {
            set_attr(lt.pref_set, pref, a, &16u32)?;
        }
        let mut rng =
            numeric::Rng::new(0x5eed ^ key.m as u64 ^ (key.n as u64) << 20 ^ (key.k as u64) << 40);
        for _ in 0..sets.max(1) {
            let a = cuda.alloc(ext[0] * bytes[0])?;
            let b = cuda.alloc(ext[1] * bytes[1])?;
            if repeat_inputs {
                upload_repeated_random(&a, key.a_type, ext[0], &mut rng)?;
                upload_repeated_random(&b, key.b_type, ext[1], &mut rng)?;
            } else {
                a.upload(&numeric::random(key.a_type, ext[0], &mut rng))?;
                b.upload(&numeric::random(key.b_type, ext[1], &mut rng))?;
            }
            p.sets.push(Set { a, b });
        }
        if epilogue_has_bias(key.epilogue) {
            let bias = cuda.alloc(key.m as usize * type_bytes(key.bias_type).max(1))?;
            bias.upload(&numeric::random(key.bias_type, key.m as usize, &mut rng))?;
            set_attr(lt.desc_set, desc, DESC_EPILOGUE, &key.epilogue)?;
            set_attr(lt.desc_set, desc, DESC_BIAS_POINTER, &bias.ptr)?;
            set_attr(lt.desc_set, desc, DESC_BIAS_DATA_TYPE, &key.bias_type)?;
            p._bias = Some(bias);
        }
        Ok(p)
    }

    /// Input sets to rotate through so that repeated calls do not read their inputs from
    /// L2: enough A and B to cover three times the cache, at most 64 (the output buffer is
    /// one for all, as in PyTorch).
    pub fn sets_for(key: &LtKey, l2_bytes: usize) -> usize {
        let ext = extents(key);
        let b = key.elem_bytes();
        let one: usize = (0..2).map(|i| ext[i] * b[i]).sum();
        (3 * l2_bytes).div_ceil(one.max(1)).clamp(1, 64)
    }

    pub fn sets(&self) -> usize {
        self.sets.len()
    }

    /// The D layout is C's (PyTorch passes one descriptor for both) when they agree.
    fn d_layout(&self) -> MatrixLayout {
        if self.key.ldd == self.key.ldc && self.key.d_type == self.key.c_type {
            self.layouts[2]
        } else {
            self.layouts[3]
        }
    }

    /// cuBLASLt's heuristic answers (successful ones), best first, at most `n`.
    pub fn heuristic(&self, n: usize) -> Result<Vec<HeuristicResult>> {
        let mut out = vec![HeuristicResult::default(); n.max(1)];
        let mut got = 0;
        lt_check("cublasLtMatmulAlgoGetHeuristic", unsafe {
            (self.lt.heuristic)(
                self.lt.handle,
                self.desc,
                self.layouts[0],
                self.layouts[1],
                self.layouts[2],
                self.d_layout(),
                self.pref,
                out.len() as i32,
                out.as_mut_ptr(),
                &mut got,
            )
        })?;
        out.truncate(got.max(0) as usize);
        out.retain(|r| r.state == STATUS_SUCCESS);
        Ok(out)
    }

    /// Rebuilds `cfg` (as the interposer does) and checks it; returns the algorithm and the
    /// workspace it needs.
    pub fn rebuild(&self, cfg: &AlgoConfig) -> std::result::Result<(MatmulAlgo, usize), String> {
        let l = &self.layouts;
        let descs = [self.desc, l[0], l[1], l[2], self.d_layout()];
        check_config(self.lt, &self.key, descs, cfg, self.workspace_bytes)
    }

    /// `CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX` of the algorithm `cfg` names.
    pub fn custom_option_max(&self, cfg: &AlgoConfig) -> Option<u32> {
        let lt = self.lt;
        let mut algo = MatmulAlgo::default();
        let k = &self.key;
        let st = unsafe {
            (lt.algo_init)(
                lt.handle, k.compute, k.scale, k.a_type, k.b_type, k.c_type, k.d_type, cfg.algo,
                &mut algo,
            )
        };
        if st != STATUS_SUCCESS {
            return None;
        }
        let mut v = 0i32;
        let mut w = 0usize;
        let st = unsafe {
            (lt.cap_get)(
                &algo,
                CAP_CUSTOM_OPTION_MAX,
                (&mut v as *mut i32).cast(),
                4,
                &mut w,
            )
        };
        (st == STATUS_SUCCESS && v >= 0).then_some(v as u32)
    }

    pub fn config_of(&self, algo: &MatmulAlgo) -> Result<AlgoConfig> {
        unsafe { read_config(self.lt.config_get, algo) }.or_else(|st| {
            err(format!(
                "reading an algorithm's configuration failed ({st})"
            ))
        })
    }

    /// Enqueues one call on input set `set` through `f` (the library's own matmul, or the
    /// global one an interposer may serve).
    #[inline]
    pub fn launch_with(&self, f: MatmulFn, algo: *const MatmulAlgo, set: usize) -> LtStatus {
        let s = &self.sets[set % self.sets.len()];
        let ws = if self.workspace_bytes > 0 {
            self.workspace.ptr
        } else {
            std::ptr::null_mut()
        };
        unsafe {
            f(
                self.lt.handle,
                self.desc,
                (&self.alpha as *const f32).cast(),
                s.a.ptr,
                self.layouts[0],
                s.b.ptr,
                self.layouts[1],
                (&self.beta as *const f32).cast(),
                self.out.ptr,
                self.layouts[2],
                self.out.ptr,
                self.d_layout(),
                algo,
                ws,
                self.workspace_bytes,
                self.stream,
            )
        }
    }

    /// [`Problem::launch_with`] on descriptors the caller made (`desc`; the layouts of A, B
    /// and C, D being C's), this problem's buffers and scalars: a call as PyTorch makes it,
    /// with objects made for it (`lt overhead`).
    pub fn launch_objects(
        &self,
        f: MatmulFn,
        desc: MatmulDesc,
        [a, b, c]: [MatrixLayout; 3],
        algo: *const MatmulAlgo,
    ) -> LtStatus {
        let s = &self.sets[0];
        let ws = if self.workspace_bytes > 0 {
            self.workspace.ptr
        } else {
            std::ptr::null_mut()
        };
        unsafe {
            f(
                self.lt.handle,
                desc,
                (&self.alpha as *const f32).cast(),
                s.a.ptr,
                a,
                s.b.ptr,
                b,
                (&self.beta as *const f32).cast(),
                self.out.ptr,
                c,
                self.out.ptr,
                c,
                algo,
                ws,
                self.workspace_bytes,
                self.stream,
            )
        }
    }

    #[inline]
    pub fn launch(&self, algo: *const MatmulAlgo, set: usize) -> LtStatus {
        self.launch_with(self.lt.matmul, algo, set)
    }

    /// The pointer alignment the heuristic is told (`PREF_MIN_ALIGNMENT_*`, bytes; 16 until
    /// set). PyTorch passes the alignment of its actual pointers, 256 for tensors of their
    /// own allocation.
    pub fn set_alignment(&self, bytes: u32) -> Result<()> {
        for a in PREF_MIN_ALIGNMENT_A_BYTES..=PREF_MIN_ALIGNMENT_D_BYTES {
            set_attr(self.lt.pref_set, self.pref, a, &bytes)?;
        }
        Ok(())
    }

    /// The timing mode [`Problem::time`] uses (events until set).
    pub fn set_timing(&self, t: Timing) {
        self.timing.set(t);
    }

    pub fn timing(&self) -> Timing {
        self.timing.get()
    }

    /// Milliseconds per call of `algo`, in this problem's timing mode. A graph capture that
    /// fails switches the problem to events, says so once, and times with events.
    pub fn time(&self, algo: *const MatmulAlgo, calls: usize, delay: &Delay) -> Result<f64> {
        if self.timing.get() == Timing::Graph {
            match self.time_graph(algo, calls, delay) {
                Ok(t) => return Ok(t),
                Err(e) => {
                    let (op, sig) = op_and_signature(&self.key);
                    eprintln!(
                        "tunedblas lt: {op} {sig}: graph timing failed ({e}); timing it with events"
                    );
                    *self.graph_failure.borrow_mut() = Some(e.0);
                    self.timing.set(Timing::Events);
                }
            }
        }
        self.time_events(algo, calls, delay)
    }

    /// Milliseconds per call in this problem's mode without the fallback: a graph that fails
    /// here is the algorithm's failure (the search's probes), not the mode's.
    pub fn time_graph_or_events(
        &self,
        algo: *const MatmulAlgo,
        calls: usize,
        delay: &Delay,
    ) -> Result<f64> {
        match self.timing.get() {
            Timing::Graph => self.time_graph(algo, calls, delay),
            Timing::Events => self.time_events(algo, calls, delay),
        }
    }

    /// Drops the instantiated graphs (the search probes hundreds of algorithms once each).
    pub fn clear_graphs(&self) {
        self.graphs.borrow_mut().clear();
    }

    /// Graph replay: `calls` calls (at least one per input set, so the graph's inputs cover
    /// three times L2) captured once into a CUDA graph, replayed between two events.
    pub fn time_graph(&self, algo: *const MatmulAlgo, calls: usize, delay: &Delay) -> Result<f64> {
        let ops = calls.max(self.sets.len()).max(1);
        // SAFETY: a non-null algo points at a live MatmulAlgo.
        let id = (!algo.is_null()).then(|| unsafe { (*algo).data });
        let mut graphs = self.graphs.borrow_mut();
        let at = match graphs.iter().position(|g| g.0 == id && g.1 == ops) {
            Some(i) => i,
            None => {
                let g = self.cuda.capture(self.stream, ops, || {
                    for i in 0..ops {
                        lt_check("cublasLtMatmul (captured)", self.launch(algo, i))?;
                    }
                    Ok(())
                })?;
                // The first launch uploads the graph: not timed.
                g.launch(self.stream)?;
                self.cuda.sync_stream(self.stream)?;
                graphs.push((id, ops, g));
                graphs.len() - 1
            }
        };
        let g = &graphs[at].2;
        delay.enqueue(self.stream, 4)?;
        self.cuda.record(self.ev[0], self.stream)?;
        g.launch(self.stream)?;
        self.cuda.record(self.ev[1], self.stream)?;
        Ok(self.cuda.elapsed(self.ev[0], self.ev[1])? / g.ops as f64)
    }

    /// Milliseconds per call of `calls` back-to-back calls between two events, rotating the
    /// input sets. `delay` is enqueued first so the host has queued every call before the
    /// device reaches the first event: the span is device time, not launch rate.
    pub fn time_events(&self, algo: *const MatmulAlgo, calls: usize, delay: &Delay) -> Result<f64> {
        delay.enqueue(self.stream, calls)?;
        self.cuda.record(self.ev[0], self.stream)?;
        for i in 0..calls {
            lt_check("cublasLtMatmul", self.launch(algo, i))?;
        }
        self.cuda.record(self.ev[1], self.stream)?;
        Ok(self.cuda.elapsed(self.ev[0], self.ev[1])? / calls as f64)
    }

    /// D of input set 0 computed with `algo`, as f64 (the buffer is poisoned first, so an
    /// algorithm that leaves elements unwritten shows NaNs).
    pub fn output(&self, algo: *const MatmulAlgo) -> Result<Vec<f64>> {
        self.out.fill(0xff)?;
        lt_check("cublasLtMatmul", self.launch(algo, 0))?;
        self.cuda.sync_stream(self.stream)?;
        let n = extents(&self.key)[3];
        let bytes = self.out.download(n * type_bytes(self.key.d_type))?;
        let out = numeric::to_f64(self.key.d_type, &bytes);
        self.out.fill(0)?;
        Ok(out)
    }

    /// A reference D for input set 0: the same product with f32 C and D (no output rounding),
    /// by cuBLASLt's own heuristic. Only for unbatched keys without epilogue; else `None`.
    pub fn reference(&self) -> Result<Option<Vec<f64>>> {
        let k = &self.key;
        if k.batch != 1 || k.epilogue != EPILOGUE_DEFAULT || k.d_type == R_32F {
            return Ok(None);
        }
        let lt = self.lt;
        let mut layout = std::ptr::null_mut();
        lt_check("cublasLtMatrixLayoutCreate", unsafe {
            (lt.layout_create)(&mut layout, R_32F, k.m as u64, k.n as u64, k.m)
        })?;
        let out = self.cuda.alloc((k.m * k.n) as usize * 4)?;
        out.fill(0)?;
        let s = &self.sets[0];
        let st = unsafe {
            (lt.matmul)(
                lt.handle,
                self.desc,
                (&self.alpha as *const f32).cast(),
                s.a.ptr,
                self.layouts[0],
                s.b.ptr,
                self.layouts[1],
                (&self.beta as *const f32).cast(),
                out.ptr,
                layout,
                out.ptr,
                layout,
                std::ptr::null(),
                self.workspace.ptr,
                self.workspace_bytes,
                self.stream,
            )
        };
        unsafe { (lt.layout_destroy)(layout) };
        if st != STATUS_SUCCESS {
            // Not every type combination has an f32-output kernel: check against the
            // heuristic's own output instead.
            return Ok(None);
        }
        self.cuda.sync_stream(self.stream)?;
        let bytes = out.download(out.bytes)?;
        Ok(Some(numeric::to_f64(R_32F, &bytes)))
    }

    /// Host microseconds to enqueue one call with `algo` through `f` (median of `reps`
    /// batches of `calls`), measured behind a delay so the queue never blocks the host.
    pub fn host_us(
        &self,
        f: MatmulFn,
        algo: *const MatmulAlgo,
        calls: usize,
        reps: usize,
        delay: &Delay,
    ) -> Result<Vec<f64>> {
        let mut out = Vec::with_capacity(reps);
        for _ in 0..reps {
            delay.enqueue_ms(self.stream, calls as f64 * 0.02 + 0.2)?;
            let t = Instant::now();
            for i in 0..calls {
                let st = self.launch_with(f, algo, i);
                if st != STATUS_SUCCESS {
                    return err(format!("cublasLtMatmul returned {st}"));
                }
            }
            out.push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
            self.cuda.sync_stream(self.stream)?;
        }
        Ok(out)
    }
}

/// What holds the stream ahead of a timed span (`--delay`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelayKind {
    /// One thread spinning on the global timer: the SMs and memory stay idle, so the span
    /// starts on a device at the load the trials themselves put on it.
    Spin,
    /// 4096^3 bf16 GEMMs (the first mode): a burst of tensor-core work before every span.
    Gemm,
}

impl DelayKind {
    /// `--delay spin|gemm`; spin when not given.
    pub fn parse(v: Option<&str>) -> std::result::Result<DelayKind, String> {
        match v {
            None | Some("spin") => Ok(DelayKind::Spin),
            Some("gemm") => Ok(DelayKind::Gemm),
            Some(o) => Err(format!("--delay takes spin or gemm, not {o:?}")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DelayKind::Spin => "spin",
            DelayKind::Gemm => "gemm",
        }
    }
}

/// Device work enqueued ahead of a timed span so the host can queue the span's calls first.
pub struct Delay<'a> {
    /// The GEMM the delay runs, and that [`Problem::host_us`] measures behind.
    problem: Problem<'a>,
    /// The spin kernel, where `--delay spin` asked for it and it loaded.
    spin: Option<super::cuda::Kernel>,
    /// Milliseconds one delay GEMM takes on the device.
    pub ms: f64,
    /// Host microseconds to enqueue one timed call (measured once, generously rounded up).
    pub host_us: f64,
}

impl<'a> Delay<'a> {
    pub fn new(cuda: &'a Cuda, lt: &'a Lt, kind: DelayKind) -> Result<Delay<'a>> {
        let key = LtKey::linear(R_16BF, 4096, 4096, 4096);
        let problem = Problem::new_timing_only(cuda, lt, key, 0)?;
        for _ in 0..3 {
            lt_check("delay matmul", problem.launch(std::ptr::null(), 0))?;
        }
        cuda.sync_stream(problem.stream)?;
        let t = Instant::now();
        for _ in 0..10 {
            lt_check("delay matmul", problem.launch(std::ptr::null(), 0))?;
        }
        cuda.sync_stream(problem.stream)?;
        let ms = (t.elapsed().as_secs_f64() * 1e3 / 10.0).max(0.01);
        let spin = match kind {
            DelayKind::Gemm => None,
            DelayKind::Spin => match super::cuda::Kernel::load_spin() {
                Ok(k) => Some(k),
                Err(e) => {
                    eprintln!("tunedblas lt: no spin kernel ({e}); the delay is a GEMM");
                    None
                }
            },
        };
        Ok(Delay {
            problem,
            spin,
            ms,
            host_us: 10.0,
        })
    }

    /// What the delay is, for the campaign's first line.
    pub fn describe(&self) -> String {
        match self.spin {
            Some(_) => "spin kernel".into(),
            None => format!("4096^3 GEMMs of {:.3} ms", self.ms),
        }
    }

    /// The kind in use (a spin that did not load is a GEMM).
    pub fn kind(&self) -> DelayKind {
        match self.spin {
            Some(_) => DelayKind::Spin,
            None => DelayKind::Gemm,
        }
    }

    /// Enqueues enough delay on `stream` to cover the host time of `calls` timed calls.
    pub fn enqueue(&self, stream: *mut c_void, calls: usize) -> Result<()> {
        self.enqueue_ms(stream, calls as f64 * self.host_us * 1e-3 * 1.5 + 0.05)
    }

    pub fn enqueue_ms(&self, stream: *mut c_void, ms: f64) -> Result<()> {
        // Issued on the timed stream itself, so stream order makes the span wait for it.
        if let Some(k) = &self.spin {
            return k.enqueue_spin(stream, (ms * 1e6).ceil() as u64);
        }
        let n = (ms / self.ms).ceil().max(1.0) as usize;
        for _ in 0..n {
            let st = unsafe {
                (self.problem.lt.matmul)(
                    self.problem.lt.handle,
                    self.problem.desc,
                    (&self.problem.alpha as *const f32).cast(),
                    self.problem.sets[0].a.ptr,
                    self.problem.layouts[0],
                    self.problem.sets[0].b.ptr,
                    self.problem.layouts[1],
                    (&self.problem.beta as *const f32).cast(),
                    self.problem.out.ptr,
                    self.problem.layouts[2],
                    self.problem.out.ptr,
                    self.problem.layouts[2],
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    0,
                    stream,
                )
            };
            lt_check("delay matmul", st)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_argument() {
        assert_eq!(DelayKind::parse(None), Ok(DelayKind::Spin));
        assert_eq!(DelayKind::parse(Some("gemm")), Ok(DelayKind::Gemm));
        assert_eq!(DelayKind::parse(Some("spin")).unwrap().name(), "spin");
        let e = DelayKind::parse(Some("sleep")).unwrap_err();
        assert!(e.contains("--delay") && e.contains("sleep"), "{e}");
    }

    #[test]
    fn bytes_moved_counts_a_b_and_d() {
        // F.linear(out 10240, tokens 16, in 2560) in bf16: W 10240x2560, x 16x2560, y 16x10240.
        let k = LtKey::linear(R_16BF, 10240, 16, 2560);
        assert_eq!(bytes_moved(&k), 2 * (10240 * 2560 + 16 * 2560 + 16 * 10240));
        // At M = 1 the weights are nearly all of it.
        let k = LtKey::linear(R_16BF, 336, 1, 10240);
        assert_eq!(bytes_moved(&k), 2 * (336 * 10240 + 10240 + 336));
    }
}
