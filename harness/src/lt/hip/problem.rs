//! One hipBLASLt problem on the device, made the way PyTorch makes it (`hipblasLtMatmul` with
//! f32 alpha/beta on the host, beta 0, C and D one buffer): descriptors, rotating input sets,
//! a workspace, a stream and two events; timed with HIP graph replays or with events.

use std::cell::RefCell;
use std::ffi::c_void;

use tunedblas_core::abi::*;
use tunedblas_core::cublaslt::{
    epilogue_has_bias, type_bytes, LtKey, COMPUTE_32F, COMPUTE_32F_PEDANTIC, COMPUTE_64F,
    COMPUTE_64F_PEDANTIC,
};
use tunedblas_core::hipblaslt::{hip_compute_type, hip_operation};
use tunedblas_core::key::Trans;

use super::lib::{check, HipLt};
use super::runtime::{HipBuf, HipRt};
use crate::hipgraph::{GraphCache, GraphError};
use crate::lt::cuda::{err, Error, Result};
use crate::lt::numeric;
use crate::lt::pipeline::Bench;
use crate::lt::problem::extents;

/// Multiply-adds up to which the host computes a reference in f64.
const HOST_REFERENCE_MACS: i64 = 1 << 26;

struct Set<'a> {
    a: HipBuf<'a>,
    b: HipBuf<'a>,
}

pub struct HipProblem<'a> {
    rt: &'a HipRt,
    lt: &'a HipLt,
    pub key: LtKey,
    desc: HipblasLtMatmulDesc,
    /// A, B, C and D (D is C's layout where they agree, as PyTorch passes them).
    layouts: [HipblasLtMatrixLayout; 4],
    pref: HipblasLtMatmulPreference,
    sets: Vec<Set<'a>>,
    /// Set 0's A and B as uploaded, for the host reference.
    host_ab: [Vec<u8>; 2],
    out: HipBuf<'a>,
    _bias: Option<HipBuf<'a>>,
    workspace: HipBuf<'a>,
    pub workspace_bytes: usize,
    stream: Stream,
    ev: [HipEvent; 2],
    alpha: f32,
    beta: f32,
    /// Graph timing's executable graphs by (algorithm, calls captured); `None` with events.
    graphs: Option<GraphCache<([u8; 16], usize)>>,
    /// Why graph timing stopped for this problem (it then times with events).
    graph_failure: RefCell<Option<String>>,
    /// Samples taken as graph replays (with a later fallback: the samples are mixed).
    graph_samples: std::cell::Cell<usize>,
}

impl Drop for HipProblem<'_> {
    fn drop(&mut self) {
        // The graphs before the objects they captured.
        self.graphs = None;
        // SAFETY: objects this problem made, destroyed once.
        unsafe {
            if !self.pref.is_null() {
                (self.lt.pref_destroy)(self.pref);
            }
            let mut seen = Vec::new();
            for l in self.layouts {
                if !l.is_null() && !seen.contains(&l) {
                    (self.lt.layout_destroy)(l);
                    seen.push(l);
                }
            }
            if !self.desc.is_null() {
                (self.lt.desc_destroy)(self.desc);
            }
        }
        for e in self.ev.into_iter().filter(|e| !e.is_null()) {
            self.rt.destroy_event(e);
        }
        if !self.stream.is_null() {
            self.rt.destroy_stream(self.stream);
        }
    }
}

fn set_attr<T>(
    f: unsafe extern "C" fn(*mut c_void, i32, *const c_void, usize) -> HipblasStatus,
    obj: *mut c_void,
    attr: i32,
    v: &T,
) -> Result<()> {
    // SAFETY: a value of the attribute's documented type and size.
    let st = unsafe { f(obj, attr, (v as *const T).cast(), std::mem::size_of::<T>()) };
    check(&format!("setting hipBLASLt attribute {attr}"), st)
}

impl<'a> HipProblem<'a> {
    /// Builds the problem with `sets` rotating input sets (at least 1) and `workspace` bytes.
    pub fn new(
        rt: &'a HipRt,
        lt: &'a HipLt,
        key: LtKey,
        sets: usize,
        workspace: usize,
    ) -> Result<HipProblem<'a>> {
        if let Err(e) = crate::lt::problem::supported(&key) {
            return err(e);
        }
        let Some(compute) = hip_compute_type(key.compute) else {
            return err(format!(
                "compute type {} has no hipBLASLt counterpart",
                key.compute
            ));
        };
        let ext = extents(&key);
        let bytes = key.elem_bytes();
        let out = rt.alloc(ext[2].max(ext[3]) * bytes[2].max(bytes[3]))?;
        out.fill(0)?;
        let mut p = HipProblem {
            rt,
            lt,
            key,
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 4],
            pref: std::ptr::null_mut(),
            sets: Vec::new(),
            host_ab: [Vec::new(), Vec::new()],
            out,
            _bias: None,
            workspace: rt.alloc(workspace)?,
            workspace_bytes: workspace,
            stream: std::ptr::null_mut(),
            ev: [std::ptr::null_mut(); 2],
            alpha: 1.0,
            beta: 0.0,
            graphs: None,
            graph_failure: RefCell::new(None),
            graph_samples: std::cell::Cell::new(0),
        };
        // Made once the problem owns them, so an error here frees what was made before.
        p.stream = rt.stream()?;
        p.ev[0] = rt.event()?;
        p.ev[1] = rt.event()?;
        // SAFETY (the creates): out-pointers; types and sizes from the key.
        check("hipblasLtMatmulDescCreate", unsafe {
            (lt.desc_create)(&mut p.desc, compute, key.scale)
        })?;
        check("hipblasLtMatmulPreferenceCreate", unsafe {
            (lt.pref_create)(&mut p.pref)
        })?;
        set_attr(
            lt.desc_set,
            p.desc,
            HIPBLASLT_MATMUL_DESC_TRANSA,
            &hip_operation(key.trans_a),
        )?;
        set_attr(
            lt.desc_set,
            p.desc,
            HIPBLASLT_MATMUL_DESC_TRANSB,
            &hip_operation(key.trans_b),
        )?;
        let shared_cd = key.ldd == key.ldc && key.d_type == key.c_type;
        for (i, l) in key.layouts().iter().enumerate() {
            if i == 3 && shared_cd {
                p.layouts[3] = p.layouts[2];
                continue;
            }
            check("hipblasLtMatrixLayoutCreate", unsafe {
                (lt.layout_create)(&mut p.layouts[i], l.dtype, l.rows, l.cols, l.ld)
            })?;
            if key.batch > 1 {
                let f = lt.layout_set;
                set_attr(
                    f,
                    p.layouts[i],
                    HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                    &l.batch,
                )?;
                set_attr(
                    f,
                    p.layouts[i],
                    HIPBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                    &l.stride,
                )?;
            }
        }
        let ws64 = workspace as u64;
        set_attr(
            lt.pref_set,
            p.pref,
            HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &ws64,
        )?;
        let mut rng =
            numeric::Rng::new(0x5eed ^ key.m as u64 ^ (key.n as u64) << 20 ^ (key.k as u64) << 40);
        for i in 0..sets.max(1) {
            let (ha, hb) = (
                numeric::random(key.a_type, ext[0], &mut rng),
                numeric::random(key.b_type, ext[1], &mut rng),
            );
            let a = rt.alloc(ext[0] * bytes[0])?;
            let b = rt.alloc(ext[1] * bytes[1])?;
            a.upload(&ha)?;
            b.upload(&hb)?;
            p.sets.push(Set { a, b });
            if i == 0 {
                p.host_ab = [ha, hb];
            }
        }
        if epilogue_has_bias(key.epilogue) {
            let bias = rt.alloc(key.m as usize * type_bytes(key.bias_type).max(1))?;
            bias.upload(&numeric::random(key.bias_type, key.m as usize, &mut rng))?;
            let f = lt.desc_set;
            set_attr(f, p.desc, HIPBLASLT_MATMUL_DESC_EPILOGUE, &key.epilogue)?;
            set_attr(f, p.desc, HIPBLASLT_MATMUL_DESC_BIAS_POINTER, &bias.ptr)?;
            set_attr(
                f,
                p.desc,
                HIPBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                &key.bias_type,
            )?;
            p._bias = Some(bias);
        }
        Ok(p)
    }

    /// Graph timing: each sample's calls captured once into a HIP graph on the problem's
    /// stream and replayed between two events, one launch per sample. Where the runtime has
    /// no graph API, or a capture fails, the problem times with events and says why once.
    pub fn use_graphs(&mut self) {
        match self.rt.graph {
            Some(g) => self.graphs = Some(GraphCache::new(g)),
            None => {
                self.graph_failed("the HIP runtime has no stream capture and graph calls".into())
            }
        }
    }

    fn graph_failed(&self, why: String) {
        let (op, sig) = tunedblas_core::cublaslt::op_and_signature(&self.key);
        eprintln!("tunedblas lt: {op} {sig}: graph timing failed ({why}); timing it with events");
        if let Some(c) = &self.graphs {
            c.clear();
        }
        *self.graph_failure.borrow_mut() = Some(why);
    }

    /// The graphs samples are taken with: `None` with events, also once graph timing failed.
    fn live_graphs(&self) -> Option<&GraphCache<([u8; 16], usize)>> {
        match self.graph_failure.borrow().is_some() {
            true => None,
            false => self.graphs.as_ref(),
        }
    }

    /// Calls a graph sample of `calls` captures: one per input set at least, so the graph's
    /// inputs are beyond the cache too.
    fn graph_ops(&self, calls: usize) -> usize {
        calls.max(self.sets.len()).max(1)
    }

    /// True when graph timing failed after samples were taken with it (they are of two
    /// modes and must not be compared).
    pub fn timing_mixed(&self) -> bool {
        self.graph_failure.borrow().is_some() && self.graph_samples.get() > 0
    }

    /// The mode samples are taken in: `graph`, `events`, or `events (graph: why not)`.
    pub fn timing(&self) -> String {
        match (&*self.graph_failure.borrow(), &self.graphs) {
            (Some(e), _) => format!("events (graph: {e})"),
            (None, None) => "events".into(),
            (None, Some(_)) => "graph".into(),
        }
    }

    fn time_events(&self, algo: &HipblasLtMatmulAlgo, calls: usize) -> Result<f64> {
        self.rt.record(self.ev[0], self.stream)?;
        for i in 0..calls {
            check("hipblasLtMatmul", self.launch(algo, i))?;
        }
        self.rt.record(self.ev[1], self.stream)?;
        Ok(self.rt.elapsed(self.ev[0], self.ev[1])? / calls.max(1) as f64)
    }

    /// `calls` calls (one per input set at least) captured once, replayed between the events.
    fn time_graph(
        &self,
        cache: &GraphCache<([u8; 16], usize)>,
        algo: &HipblasLtMatmulAlgo,
        calls: usize,
    ) -> std::result::Result<f64, GraphError<Error>> {
        let ops = self.graph_ops(calls);
        let exec = cache.exec((algo.data, ops), self.stream, || {
            (0..ops).try_for_each(|i| check("hipblasLtMatmul", self.launch(algo, i)))
        })?;
        // One untimed replay ahead, so the timed one is submitted while the device is busy.
        cache.launch(exec, self.stream)?;
        self.rt
            .record(self.ev[0], self.stream)
            .map_err(GraphError::Work)?;
        let launched = cache.launch(exec, self.stream);
        self.rt
            .record(self.ev[1], self.stream)
            .map_err(GraphError::Work)?;
        let ms = self
            .rt
            .elapsed(self.ev[0], self.ev[1])
            .map_err(GraphError::Work)?;
        launched?;
        Ok(ms / ops as f64)
    }

    /// What a caller asking for one answer runs (PyTorch does): the heuristic's first.
    pub fn heuristic(&self) -> Result<HipblasLtMatmulHeuristicResult> {
        let mut out = [HipblasLtMatmulHeuristicResult::default(); 1];
        let mut got = 0;
        let l = &self.layouts;
        // SAFETY: live descriptors; room for one result.
        check("hipblasLtMatmulAlgoGetHeuristic", unsafe {
            (self.lt.heuristic)(
                self.lt.handle,
                self.desc,
                l[0],
                l[1],
                l[2],
                l[3],
                self.pref,
                1,
                out.as_mut_ptr(),
                &mut got,
            )
        })?;
        match out[0] {
            r if got >= 1 && r.state == HIPBLAS_STATUS_SUCCESS => Ok(r),
            _ => err("hipBLASLt's heuristic has no algorithm for this problem"),
        }
    }

    /// Every algorithm `getAllAlgos` lists for this problem's operations and types.
    pub fn all_algos(&self) -> Result<Vec<HipblasLtMatmulHeuristicResult>> {
        let k = &self.key;
        self.lt.all_algos(
            hip_operation(k.trans_a),
            hip_operation(k.trans_b),
            [k.a_type, k.b_type, k.c_type, k.d_type],
            hip_compute_type(k.compute).expect("checked in new"),
        )
    }

    pub fn algo_from_index(&self, index: i32) -> Result<HipblasLtMatmulAlgo> {
        self.lt.algo_from_index(index)
    }

    pub fn index_of(&self, algo: &HipblasLtMatmulAlgo) -> Result<i32> {
        self.lt.index_of(algo)
    }

    /// Whether `algo` runs this exact problem (`matmulIsAlgoSupported`, which updates `algo`
    /// for it), and the workspace it needs; the status where it does not.
    pub fn supported(
        &self,
        algo: &mut HipblasLtMatmulAlgo,
    ) -> std::result::Result<usize, HipblasStatus> {
        self.lt.is_supported(
            self.desc,
            (&self.alpha as *const f32).cast(),
            self.layouts,
            (&self.beta as *const f32).cast(),
            algo,
        )
    }

    /// Enqueues one call on input set `set`.
    fn launch(&self, algo: &HipblasLtMatmulAlgo, set: usize) -> HipblasStatus {
        let s = &self.sets[set % self.sets.len()];
        let ws = if self.workspace_bytes > 0 {
            self.workspace.ptr
        } else {
            std::ptr::null_mut()
        };
        let l = &self.layouts;
        // SAFETY: live descriptors and buffers of this problem's sizes.
        unsafe {
            (self.lt.matmul)(
                self.lt.handle,
                self.desc,
                (&self.alpha as *const f32).cast(),
                s.a.ptr,
                l[0],
                s.b.ptr,
                l[1],
                (&self.beta as *const f32).cast(),
                self.out.ptr,
                l[2],
                self.out.ptr,
                l[3],
                algo,
                ws,
                self.workspace_bytes,
                self.stream,
            )
        }
    }
}

impl Bench for HipProblem<'_> {
    type Algo = HipblasLtMatmulAlgo;

    fn key(&self) -> &LtKey {
        &self.key
    }

    fn sets(&self) -> usize {
        self.sets.len()
    }

    /// `calls` calls rotating the input sets, in the problem's timing mode ([`use_graphs`]):
    /// one graph replay, or back to back between two events.
    ///
    /// [`use_graphs`]: HipProblem::use_graphs
    fn time(&self, algo: &HipblasLtMatmulAlgo, calls: usize) -> Result<f64> {
        if let Some(cache) = self.live_graphs() {
            match self.time_graph(cache, algo, calls) {
                Ok(ms) => {
                    self.graph_samples.set(self.graph_samples.get() + 1);
                    return Ok(ms);
                }
                Err(GraphError::Work(e)) => return Err(e),
                Err(GraphError::Mode(why)) => self.graph_failed(why),
            }
        }
        self.time_events(algo, calls)
    }

    /// A graph sample replays its calls (one per input set at least) twice, the untimed
    /// replay ahead and the timed one; events time `calls` calls.
    fn busy_ms(&self, ms: f64, calls: usize) -> f64 {
        match self.live_graphs() {
            Some(_) => 2.0 * ms * self.graph_ops(calls) as f64,
            None => ms * calls as f64,
        }
    }

    fn output(&self, algo: &HipblasLtMatmulAlgo) -> Result<Vec<f64>> {
        self.out.fill(0xff)?;
        check("hipblasLtMatmul", self.launch(algo, 0))?;
        self.rt.sync(self.stream)?;
        let n = extents(&self.key)[3];
        let bytes = self.out.download(n * type_bytes(self.key.d_type))?;
        let out = numeric::to_f64(self.key.d_type, &bytes);
        self.out.fill(0)?;
        Ok(out)
    }

    /// D = op(A) op(B) of set 0 in f64 on the host, for unbatched, packed (ldd = m) problems
    /// with f32 or f64 compute and without an epilogue up to [`HOST_REFERENCE_MACS`] multiply-adds; else `None` (the heuristic's
    /// own output is the reference).
    fn reference(&self) -> Result<Option<Vec<f64>>> {
        let k = &self.key;
        // Reduced-precision compute (xf32/TF32, f16 accumulation) is not an f64 product:
        // its error would fail a correct heuristic, so the heuristic's output is the
        // reference there.
        let exact = matches!(
            k.compute,
            COMPUTE_32F | COMPUTE_32F_PEDANTIC | COMPUTE_64F | COMPUTE_64F_PEDANTIC
        );
        if !exact
            || k.batch != 1
            || k.ldd != k.m
            || epilogue_has_bias(k.epilogue)
            || k.m.saturating_mul(k.n).saturating_mul(k.k) > HOST_REFERENCE_MACS
        {
            return Ok(None);
        }
        let a = numeric::to_f64(k.a_type, &self.host_ab[0]);
        let b = numeric::to_f64(k.b_type, &self.host_ab[1]);
        let (ta, tb) = (k.trans_a != Trans::N, k.trans_b != Trans::N);
        let (m, n, kk) = (k.m as usize, k.n as usize, k.k as usize);
        let (lda, ldb, ldd) = (k.lda as usize, k.ldb as usize, k.ldd as usize);
        let mut d = vec![0.0; ldd * n];
        for j in 0..n {
            for i in 0..m {
                let mut acc = 0.0;
                for p in 0..kk {
                    let av = a[if ta { p + i * lda } else { i + p * lda }];
                    let bv = b[if tb { j + p * ldb } else { p + j * ldb }];
                    acc += av * bv;
                }
                d[i + j * ldd] = self.alpha as f64 * acc;
            }
        }
        Ok(Some(d))
    }
}
