//! What cuBLASLt and hipBLASLt share: hipBLASLt's C API is cuBLASLt's call for call (the
//! same arguments in the same order, other attribute numbers), so one problem serves both,
//! made the way PyTorch makes it (`F.linear`: host f32 alpha/beta, beta 0, C and D one
//! buffer), with the key, profile rows and miss files of the core's Lt key. A library's
//! module ([`super::cublaslt`], [`super::hipblaslt`]) adds where its candidates come from
//! and how a row names an algorithm ([`Flavor`]).

use std::ffi::c_void;
use std::path::Path;

use tunedblas_core::cublaslt::*;
use tunedblas_core::key::Trans;

use super::ShapeKey;
use crate::bench::{Bench, Cand, Screen};
use crate::curate::RowChoice;
use crate::dl::{self, Handle};
use crate::error::{Error, Result};
use crate::numerics::{decode, Elem, Layout};
use crate::pipeline::Method;
use crate::runtime::{DevBuf, Runtime};
use crate::timer::{Delay, Timer};

type Status = i32;
pub type Obj = *mut c_void;
/// `cublasLtMatmul` / `hipblasLtMatmul` (hipBLASLt's algorithm is passed by pointer too).
pub use tunedblas_core::cublaslt::MatmulFn as LtMatmulFn;

/// The scalars every Lt problem runs with, as `F.linear` passes them (host f32, beta 0).
pub const ALPHA: f32 = 1.0;
pub const BETA: f32 = 0.0;

/// The attribute numbers of one API.
#[derive(Clone, Copy)]
pub struct Attrs {
    pub transa: i32,
    pub transb: i32,
    pub epilogue: i32,
    pub bias_pointer: i32,
    pub bias_type: i32,
    /// `SM_COUNT_TARGET` (cuBLASLt only).
    pub sm_count: Option<i32>,
    pub batch_count: i32,
    pub batch_offset: i32,
    pub max_workspace: i32,
    /// `MIN_ALIGNMENT_A_BYTES..=D_BYTES` (cuBLASLt only).
    pub alignment: Option<(i32, i32)>,
    /// The library's transpose values.
    pub op: fn(Trans) -> i32,
    /// The library's compute type for the key's.
    pub compute: fn(i32) -> Option<i32>,
}

/// One Lt API, loaded.
#[derive(Clone, Copy)]
pub struct LtApi {
    pub name: &'static str,
    pub attrs: Attrs,
    pub create: CreateFn,
    pub matmul: LtMatmulFn,
    heuristic: GetHeuristicFn,
    pub desc_create: DescCreateFn,
    pub desc_destroy: DestroyFn,
    pub desc_set: SetAttributeFn,
    pub layout_create: LayoutCreateFn,
    pub layout_destroy: DestroyFn,
    pub layout_set: SetAttributeFn,
    pref_create: PrefCreateFn,
    pref_destroy: DestroyFn,
    pref_set: SetAttributeFn,
    /// Statuses of this API as an error.
    pub check: fn(&str, Status) -> Result<()>,
}

impl LtApi {
    /// The API of `prefix` (`cublasLt`, `hipblasLt`) through `h`.
    ///
    /// # Safety
    /// `h` is a live loader handle of that library.
    pub unsafe fn load(
        h: Handle,
        prefix: &str,
        name: &'static str,
        attrs: Attrs,
        check: fn(&str, Status) -> Result<()>,
    ) -> Result<LtApi> {
        let s = |n: &str| format!("{prefix}{n}");
        // SAFETY: every symbol has the C type cublasLt.h / hipblaslt.h give it.
        unsafe {
            Ok(LtApi {
                name,
                attrs,
                create: dl::need(h, &s("Create"), name)?,
                matmul: dl::need(h, &s("Matmul"), name)?,
                heuristic: dl::need(h, &s("MatmulAlgoGetHeuristic"), name)?,
                desc_create: dl::need(h, &s("MatmulDescCreate"), name)?,
                desc_destroy: dl::need(h, &s("MatmulDescDestroy"), name)?,
                desc_set: dl::need(h, &s("MatmulDescSetAttribute"), name)?,
                layout_create: dl::need(h, &s("MatrixLayoutCreate"), name)?,
                layout_destroy: dl::need(h, &s("MatrixLayoutDestroy"), name)?,
                layout_set: dl::need(h, &s("MatrixLayoutSetAttribute"), name)?,
                pref_create: dl::need(h, &s("MatmulPreferenceCreate"), name)?,
                pref_destroy: dl::need(h, &s("MatmulPreferenceDestroy"), name)?,
                pref_set: dl::need(h, &s("MatmulPreferenceSetAttribute"), name)?,
                check,
            })
        }
    }

    /// This API with its descriptor and layout functions as a linked host resolves them
    /// (`RTLD_DEFAULT`: an LD_PRELOADed interposer's when one is preloaded, which then keeps
    /// what the objects are made and set with), everything else its own: the objects a
    /// PyTorch process hands the interposer's matmul (`tunedblas-bench overhead`).
    pub fn with_global_objects(&self, prefix: &str) -> Result<LtApi> {
        let g = libc::RTLD_DEFAULT;
        let s = |n: &str| format!("{prefix}{n}");
        let name = "the process";
        // SAFETY: every symbol has the C type cublasLt.h / hipblaslt.h give it.
        unsafe {
            Ok(LtApi {
                desc_create: dl::need(g, &s("MatmulDescCreate"), name)?,
                desc_destroy: dl::need(g, &s("MatmulDescDestroy"), name)?,
                desc_set: dl::need(g, &s("MatmulDescSetAttribute"), name)?,
                layout_create: dl::need(g, &s("MatrixLayoutCreate"), name)?,
                layout_destroy: dl::need(g, &s("MatrixLayoutDestroy"), name)?,
                layout_set: dl::need(g, &s("MatrixLayoutSetAttribute"), name)?,
                ..*self
            })
        }
    }

    /// A handle on the current device.
    pub fn handle(&self) -> Result<Obj> {
        let mut h = std::ptr::null_mut();
        // SAFETY: out-pointer.
        (self.check)(&format!("{}Create", self.name), unsafe {
            (self.create)(&mut h)
        })?;
        Ok(h)
    }
}

/// What one Lt library adds to the shared problem: its algorithm type and heuristic
/// result, where its candidates come from, and how a row names an algorithm. Implemented
/// by the library's session (a device's handle and what else is per device).
pub trait Flavor: Sized {
    /// The algorithm struct, passed by pointer.
    type Algo: Copy + Default;
    /// The heuristic's result struct (`algo` first, then `workspace_size` and `state`).
    type Answer: Copy + Default;
    /// The API, the runtime and this device's handle.
    fn parts(&self) -> (&LtApi, &Runtime, Obj);
    fn api(&self) -> &LtApi {
        self.parts().0
    }
    fn rt(&self) -> &Runtime {
        self.parts().1
    }
    fn handle(&self) -> Obj {
        self.parts().2
    }
    fn delay(&self) -> Option<&dyn Delay>;
    fn state(a: &Self::Answer) -> Status;
    fn id(a: &Self::Algo) -> Vec<u8>;
    fn heuristic(p: &LtProblem<'_, Self>) -> Result<Cand<Self::Algo>>;
    fn candidates(p: &LtProblem<'_, Self>, screen: &mut Screen<'_, Self::Algo>) -> Result<()>;
    fn resolve(p: &LtProblem<'_, Self>, name: &str) -> std::result::Result<Self::Algo, String>;
    /// Why the fastest runs where it does against its limit, where the library can say.
    fn why(_p: &LtProblem<'_, Self>, _limit: &crate::limits::ShapeLimit) -> Option<String> {
        None
    }
    /// A reference computed on the device, where the library has one (the default: the
    /// host's f64 product).
    fn reference(_p: &LtProblem<'_, Self>) -> Result<Option<Vec<f64>>> {
        Ok(None)
    }
}

/// Every Lt library's device is a [`super::Session`] of the shared problem.
impl<F: Flavor> super::Session for F {
    type Key = LtKey;
    type Bench<'s>
        = LtProblem<'s, F>
    where
        Self: 's;

    fn bench(&self, key: &LtKey, m: &Method) -> Result<LtProblem<'_, F>> {
        LtProblem::new(self, *key, m)
    }
    fn square(&self, side: i64) -> LtKey {
        LtKey::linear(R_16BF, side, side, side)
    }
}

/// Keys the tuner can run: real f16/bf16/f32 with f32 scale, no epilogue but a bias, host
/// scalars (everything PyTorch's `F.linear` and `matmul` put on an Lt library).
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

fn elem(t: i32) -> Elem {
    match t {
        R_16F => Elem::F16,
        R_16BF => Elem::Bf16,
        R_64F => Elem::F64,
        _ => Elem::F32,
    }
}

/// The layout of an Lt key's problem.
pub fn layout(key: &LtKey) -> Layout {
    crate::numerics::layout_of!(key,
        alpha: ALPHA as f64,
        beta: BETA as f64,
        types: [
            elem(key.a_type),
            elem(key.b_type),
            elem(key.c_type),
            elem(key.d_type),
        ],
        exact: matches!(
            key.compute,
            COMPUTE_32F | COMPUTE_32F_PEDANTIC | COMPUTE_64F | COMPUTE_64F_PEDANTIC
        ) && !epilogue_has_bias(key.epilogue),
    )
}

/// One Lt problem on the device: descriptors, rotating input sets (A and B; C and D are
/// one output buffer for all, as PyTorch's caching allocator hands the block just freed to
/// the next call: rotating D too made large outputs 9-13% slower than in PyTorch on an
/// H200), a workspace and the timer.
pub struct LtProblem<'s, F: Flavor> {
    pub session: &'s F,
    pub key: LtKey,
    layout: Layout,
    pub desc: Obj,
    /// A, B, C, D (D is C's where they agree, as PyTorch passes them).
    pub layouts: [Obj; 4],
    pub pref: Obj,
    sets: Vec<[DevBuf<'s>; 2]>,
    pub out: DevBuf<'s>,
    _bias: Option<DevBuf<'s>>,
    workspace: DevBuf<'s>,
    pub workspace_bytes: usize,
    timer: Timer<'s>,
}

impl<F: Flavor> Drop for LtProblem<'_, F> {
    fn drop(&mut self) {
        let api = self.session.api();
        // SAFETY: objects this problem made, destroyed once.
        unsafe {
            if !self.pref.is_null() {
                (api.pref_destroy)(self.pref);
            }
            for (i, l) in self.layouts.into_iter().enumerate() {
                if !(l.is_null() || i == 3 && l == self.layouts[2]) {
                    (api.layout_destroy)(l);
                }
            }
            if !self.desc.is_null() {
                (api.desc_destroy)(self.desc);
            }
        }
    }
}

fn set_attr<T>(api: &LtApi, f: SetAttributeFn, obj: Obj, attr: i32, v: &T) -> Result<()> {
    // SAFETY: a value of the attribute's documented type and size.
    let st = unsafe { f(obj, attr, (v as *const T).cast(), std::mem::size_of::<T>()) };
    (api.check)(&format!("setting {} attribute {attr}", api.name), st)
}

impl<'s, F: Flavor> LtProblem<'s, F> {
    pub fn new(session: &'s F, key: LtKey, m: &Method) -> Result<LtProblem<'s, F>> {
        supported(&key).map_err(Error::failed)?;
        let (api, rt) = (session.api(), session.rt());
        let a = &api.attrs;
        let compute = (a.compute)(key.compute).ok_or_else(|| {
            Error::failed(format!(
                "compute type {} has no {} counterpart",
                key.compute, api.name
            ))
        })?;
        let g = layout(&key);
        let out = rt.alloc(g.bytes(2).max(g.bytes(3)))?;
        out.fill(0)?;
        let label = key.text().replacen(',', " ", 1);
        let mut p = LtProblem {
            session,
            key,
            layout: g,
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 4],
            pref: std::ptr::null_mut(),
            sets: Vec::new(),
            out,
            _bias: None,
            workspace: rt.alloc(m.workspace)?,
            workspace_bytes: m.workspace,
            timer: Timer::new(rt, m.mode, m.rest, session.delay(), label)?,
        };
        let check = |what: &str, st| (api.check)(&format!("{}{what}", api.name), st);
        // SAFETY (the creates): out-pointers; types and sizes from the key.
        check("MatmulDescCreate", unsafe {
            (api.desc_create)(&mut p.desc, compute, key.scale)
        })?;
        check("MatmulPreferenceCreate", unsafe {
            (api.pref_create)(&mut p.pref)
        })?;
        set_attr(api, api.desc_set, p.desc, a.transa, &(a.op)(key.trans_a))?;
        set_attr(api, api.desc_set, p.desc, a.transb, &(a.op)(key.trans_b))?;
        if let (Some(attr), true) = (a.sm_count, key.sm_count != 0) {
            set_attr(api, api.desc_set, p.desc, attr, &key.sm_count)?;
        }
        let shared_cd = key.ldd == key.ldc && key.d_type == key.c_type;
        for (i, l) in key.layouts().iter().enumerate() {
            if i == 3 && shared_cd {
                p.layouts[3] = p.layouts[2];
                continue;
            }
            check("MatrixLayoutCreate", unsafe {
                (api.layout_create)(&mut p.layouts[i], l.dtype, l.rows, l.cols, l.ld)
            })?;
            if key.batch > 1 {
                set_attr(api, api.layout_set, p.layouts[i], a.batch_count, &l.batch)?;
                set_attr(api, api.layout_set, p.layouts[i], a.batch_offset, &l.stride)?;
            }
        }
        let workspace = m.workspace as u64;
        set_attr(api, api.pref_set, p.pref, a.max_workspace, &workspace)?;
        // PyTorch tells cuBLASLt's heuristic the alignment of its pointers (16 bytes for
        // tensors from its allocator); the device allocator's 256 would allow algorithms
        // PyTorch never gets.
        if let Some((first, last)) = a.alignment {
            for attr in first..=last {
                set_attr(api, api.pref_set, p.pref, attr, &16u32)?;
            }
        }
        let n_sets = m.sets(g.bytes(0) + g.bytes(1), rt.cache_bytes(0));
        for set in 0..n_sets {
            let buf = |w: usize| -> Result<DevBuf<'s>> {
                let b = rt.alloc(g.bytes(w))?;
                b.upload(&g.input(w, set))?;
                Ok(b)
            };
            p.sets.push([buf(0)?, buf(1)?]);
        }
        if epilogue_has_bias(key.epilogue) {
            let bias = rt.alloc(key.m as usize * type_bytes(key.bias_type).max(1))?;
            let values = crate::numerics::random(elem(key.bias_type), key.m as usize, 99);
            bias.upload(&values)?;
            set_attr(api, api.desc_set, p.desc, a.epilogue, &key.epilogue)?;
            set_attr(api, api.desc_set, p.desc, a.bias_pointer, &bias.ptr)?;
            set_attr(api, api.desc_set, p.desc, a.bias_type, &key.bias_type)?;
            p._bias = Some(bias);
        }
        Ok(p)
    }

    /// The heuristic's successful answers, best first, at most `n`.
    pub fn answers(&self, n: usize) -> Result<Vec<F::Answer>> {
        let api = self.session.api();
        let mut out = vec![F::Answer::default(); n.max(1)];
        let mut got = 0;
        let l = &self.layouts;
        // SAFETY: live descriptors; room for `out.len()` results.
        (api.check)(&format!("{}MatmulAlgoGetHeuristic", api.name), unsafe {
            (api.heuristic)(
                self.session.handle(),
                self.desc,
                l[0],
                l[1],
                l[2],
                l[3],
                self.pref,
                out.len() as i32,
                out.as_mut_ptr().cast(),
                &mut got,
            )
        })?;
        out.truncate(got.max(0) as usize);
        out.retain(|r| F::state(r) == 0);
        Ok(out)
    }

    /// Enqueues one call on input set `set` through `f` (the library's own matmul, or the
    /// one a linked host resolves, which a preloaded interposer serves); `algo` null is
    /// the library's heuristic.
    ///
    /// # Safety
    /// `algo` is null or points to a live algorithm of this library.
    pub unsafe fn launch_with(&self, f: LtMatmulFn, algo: *const c_void, set: usize) -> Status {
        // SAFETY: this problem's own descriptor and layouts; `algo` as the caller vouches.
        unsafe { self.call(f, self.desc, self.layouts, self.out.ptr, algo, set) }
    }

    /// One call of `f` on input set `set` with descriptors `desc` and layouts `l` (A, B,
    /// C, D) of this problem's types and sizes, C and D at `out` (this problem's output,
    /// or another of layouts `l[2]`, `l[3]`): the problem's own objects, or objects the
    /// caller made (`tunedblas-bench overhead`: as PyTorch makes them per call).
    ///
    /// # Safety
    /// `desc` and `l` are live objects of this library, of this problem's types and sizes;
    /// `out` holds a matrix of those layouts; `algo` is null or a live algorithm.
    pub unsafe fn call(
        &self,
        f: LtMatmulFn,
        desc: Obj,
        l: [Obj; 4],
        out: *mut c_void,
        algo: *const c_void,
        set: usize,
    ) -> Status {
        let s = &self.sets[set % self.sets.len()];
        let ws = if self.workspace_bytes > 0 {
            self.workspace.ptr
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: live descriptors and buffers of this problem's sizes.
        unsafe {
            f(
                self.session.handle(),
                desc,
                (&ALPHA as *const f32).cast(),
                s[0].ptr,
                l[0],
                s[1].ptr,
                l[1],
                (&BETA as *const f32).cast(),
                out,
                l[2],
                out,
                l[3],
                algo.cast(),
                ws,
                self.workspace_bytes,
                self.timer.stream,
            )
        }
    }

    /// Calls with an f32 C and D (`m x n`, no output rounding) by the library's heuristic:
    /// a reference computed on the device for unbatched keys without an epilogue whose D
    /// is packed; `None` where the library has no such kernel.
    pub fn f32_output(&self) -> Result<Option<Vec<f64>>> {
        let k = &self.key;
        if k.batch != 1 || k.epilogue != EPILOGUE_DEFAULT || k.d_type == R_32F || k.ldd != k.m {
            return Ok(None);
        }
        let api = self.session.api();
        let mut layout = std::ptr::null_mut();
        // SAFETY: out-pointer.
        (api.check)("MatrixLayoutCreate", unsafe {
            (api.layout_create)(&mut layout, R_32F, k.m as u64, k.n as u64, k.m)
        })?;
        let out = self.session.rt().alloc((k.m * k.n) as usize * 4)?;
        out.fill(0)?;
        let l = [self.layouts[0], self.layouts[1], layout, layout];
        // SAFETY: live descriptors; an f32 output of m x n.
        let st = unsafe { self.call(api.matmul, self.desc, l, out.ptr, std::ptr::null(), 0) };
        unsafe { (api.layout_destroy)(layout) };
        if st != 0 {
            return Ok(None);
        }
        self.session.rt().sync(self.timer.stream)?;
        Ok(Some(decode(Elem::F32, &out.download(out.bytes)?)))
    }
}

impl<F: Flavor> Bench for LtProblem<'_, F> {
    type Algo = F::Algo;

    fn parts(&self) -> (&Timer<'_>, usize, Layout) {
        (&self.timer, self.sets.len(), self.layout)
    }
    fn run(&self, algo: &F::Algo, set: usize) -> Result<()> {
        let api = self.session.api();
        let f = api.matmul;
        (api.check)(
            &format!("{}Matmul", api.name),
            // SAFETY: a reference to a live algorithm.
            unsafe { self.launch_with(f, (algo as *const F::Algo).cast(), set) },
        )
    }
    fn id(&self, algo: &F::Algo) -> Vec<u8> {
        F::id(algo)
    }
    fn heuristic(&self) -> Result<Cand<F::Algo>> {
        F::heuristic(self)
    }
    fn candidates(&self, screen: &mut Screen<'_, F::Algo>) -> Result<()> {
        F::candidates(self, screen)
    }
    fn resolve(&self, name: &str) -> std::result::Result<F::Algo, String> {
        F::resolve(self, name)
    }
    fn output(&self, algo: &F::Algo) -> Result<Vec<f64>> {
        self.out.fill(0xff)?;
        self.run(algo, 0)?;
        self.session.rt().sync(self.timer.stream)?;
        let bytes = self.out.download(self.layout.bytes(3))?;
        let out = decode(self.layout.types[3], &bytes);
        self.out.fill(0)?;
        Ok(out)
    }
    fn why(&self, limit: &crate::limits::ShapeLimit) -> Option<String> {
        F::why(self, limit)
    }
    fn reference(&self) -> Result<Option<Vec<f64>>> {
        let g = self.layout;
        match F::reference(self)? {
            Some(r) => Ok(Some(r)),
            None => Ok(
                (g.exact && g.macs() <= crate::numerics::HOST_REFERENCE_MACS)
                    .then(|| g.reference()),
            ),
        }
    }
}

/// `op,signature` of an Lt key.
/// `--shape N,M,K`: `F.linear` of N outputs, M tokens and K inputs in bf16.
pub fn parse_spec(s: &str) -> std::result::Result<LtKey, String> {
    let v: Vec<i64> = s.split(',').filter_map(|x| x.trim().parse().ok()).collect();
    match v[..] {
        [n, m, k] if n > 0 && m > 0 && k > 0 => Ok(LtKey::linear(R_16BF, n, m, k)),
        _ => Err(format!(
            "--shape takes N,M,K (F.linear out, tokens, in), not {s:?}"
        )),
    }
}

/// A results file of Lt rows with `validators`.
pub fn results(validators: &[(&str, String)], rows: &[(LtKey, String, Option<f64>)]) -> String {
    LtResults {
        validators: validators
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        rows: rows
            .iter()
            .filter_map(|(key, s, t)| {
                Some(LtRow {
                    key: *key,
                    action: LtAction::parse(s).ok()?,
                    time_ms: t.map(|t| (t * 1e6).round() / 1e6),
                })
            })
            .collect(),
        skipped: Vec::new(),
        wildcards: Vec::new(),
    }
    .to_text()
}

impl ShapeKey for LtKey {
    fn text(&self) -> String {
        let (op, sig) = op_and_signature(self);
        format!("{op},{sig}")
    }
    fn parse(text: &str) -> Option<LtKey> {
        let mut f = text.trim().splitn(3, ',');
        tunedblas_core::cublaslt::parse_key(f.next()?, f.next()?).ok()
    }
    fn parse_spec(spec: &str) -> std::result::Result<LtKey, String> {
        parse_spec(spec)
    }
    /// `bf16 2560x1536` (out x in) and the token count.
    fn label(&self) -> (String, i64) {
        let t = match self.a_type {
            R_16BF => "bf16",
            R_16F => "f16",
            R_32F => "f32",
            _ => "?",
        };
        (format!("{t} {}x{}", self.m, self.k), self.n)
    }
    fn read(text: &str) -> Vec<(LtKey, String, Option<f64>)> {
        parse_results(text)
            .rows
            .into_iter()
            .map(|r| (r.key, r.action.solution_text(), r.time_ms))
            .collect()
    }
}

/// What a row is to `lib`.
pub fn row(lib: LtLib, solution: &str) -> RowChoice {
    match LtAction::parse(solution) {
        Ok(LtAction::Default) => RowChoice::Default,
        Ok(a) if lib.serves(&a) => RowChoice::Mine(a.solution_text()),
        _ => RowChoice::Foreign(solution.to_string()),
    }
}

/// Opens the first of the library's names that loads (`--lib`, `$env`, the usual sonames),
/// and the file it is.
pub fn open(
    path: Option<&Path>,
    env: &str,
    names: &[&str],
    symbol: &str,
    what: &str,
) -> Result<(Handle, std::path::PathBuf)> {
    let (h, given) = dl::open_named((path, env, names), what, "--lib")?;
    // SAFETY: only the address is used.
    if unsafe { dl::sym::<*mut c_void>(h, symbol) }.is_none() {
        return Err(Error::not_loaded(format!(
            "{} is not {what} (no {symbol})",
            given.display()
        )));
    }
    Ok((h, dl::file_of(h, symbol, &given)))
}
