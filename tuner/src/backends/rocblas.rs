//! rocBLAS (and refblas, the CPU reference that speaks its ABI): `rocblas_gemm_ex` and
//! `rocblas_gemm_strided_batched_ex` run with the heuristic (`rocblas_gemm_algo_standard`)
//! or a solution index, the candidates every index `..._get_solutions` lists for exactly
//! the problem, rows written as `Gemm_Rocblas_<index>`, on the HIP runtime.

use std::ffi::c_void;
use std::path::Path;

use tunedblas_core::abi::*;
use tunedblas_core::key::{Batching, ProblemKey, Trans, Types};
use tunedblas_core::tunableop::{self, KeyParse, ResultsFile, Solution};

use super::{Kind, Library, ShapeKey, Spec};
use crate::bench::{Bench, Cand, Screen};
use crate::curate::RowChoice;
use crate::dl;
use crate::error::{Error, Result};
use crate::numerics::{decode, Elem, Layout};
use crate::pipeline::Method;
use crate::runtime::{Api, DevBuf, Runtime};
use crate::store::Build;
use crate::timer::Timer;

/// Calls `f`, a function of the `rocblas_gemm_ex` shape, on problem `p` with operand set
/// `o`, then the arguments after the compute type: running a problem and asking for its
/// solutions take the same problem and differ only there.
macro_rules! gemm_ex_call {
    ($f:expr, $p:expr, $o:expr; $($tail:expr),*) => {{
        let (k, t) = (&$p.key, $p.key.types);
        let i = |v: i64| v as i32;
        ($f)($p.handle.h, k.trans_a.to_rocblas(), k.trans_b.to_rocblas(), i(k.m), i(k.n), i(k.k),
            $p.alpha.as_ptr().cast(), $o[0].ptr, t.a, i(k.lda), $o[1].ptr, t.b, i(k.ldb),
            $p.beta.as_ptr().cast(), $o[2].ptr, t.c, i(k.ldc), $o[3].ptr, t.d, i(k.ldd),
            t.compute, $($tail),*)
    }};
}

/// As [`gemm_ex_call`], for the `rocblas_gemm_strided_batched_ex` shape.
macro_rules! strided_ex_call {
    ($f:expr, $p:expr, $o:expr; $($tail:expr),*) => {{
        let (k, t) = (&$p.key, $p.key.types);
        let i = |v: i64| v as i32;
        ($f)($p.handle.h, k.trans_a.to_rocblas(), k.trans_b.to_rocblas(), i(k.m), i(k.n), i(k.k),
            $p.alpha.as_ptr().cast(), $o[0].ptr, t.a, i(k.lda), k.stride_a, $o[1].ptr, t.b,
            i(k.ldb), k.stride_b, $p.beta.as_ptr().cast(), $o[2].ptr, t.c, i(k.ldc),
            k.stride_c, $o[3].ptr, t.d, i(k.ldd), k.stride_d, i(k.batch), t.compute, $($tail),*)
    }};
}

/// The scalars every problem runs with: both terms matter, so a kernel that drops C is
/// caught by the numerics.
pub const ALPHA: f64 = 1.0;
pub const BETA: f64 = 0.5;

/// rocBLAS (or refblas) and its HIP runtime, loaded.
pub struct Rocblas {
    build: Build,
    rt: Runtime,
    create_handle: CreateHandleFn,
    destroy_handle: DestroyHandleFn,
    gemm_ex: GemmExFn<i32>,
    gemm_strided_batched_ex: Option<GemmStridedBatchedExFn<i32>>,
    get_solutions: GemmExGetSolutionsFn,
    get_solutions_strided: Option<GemmStridedBatchedExGetSolutionsFn>,
    set_stream: Option<SetStreamFn>,
}

/// A library that is not rocBLAS is named as such (exit 3).
fn not_rocblas(path: &Path, name: &str) -> Error {
    Error::not_loaded(format!(
        "{} has no {name}: it is not rocBLAS (or older than ROCm 5.5, which lacks the solution queries)",
        path.display()
    ))
}

impl Rocblas {
    /// Loads rocBLAS from `spec.lib` (required); HIP from `spec.runtime`, else from the
    /// same library (refblas carries the HIP subset), else `libamdhip64.so`.
    pub fn open(spec: &Spec) -> Result<Rocblas> {
        let path = spec
            .lib
            .as_deref()
            .ok_or_else(|| Error::usage("tune", "rocBLAS needs --lib LIBROCBLAS"))?;
        Rocblas::load(path, spec.runtime.as_deref(), spec.arch.as_deref(), false)
    }

    /// rocBLAS at `path`, HIP from `hip` if given (see [`Rocblas::open`]).
    pub fn at(path: &Path, hip: Option<&Path>) -> Result<Rocblas> {
        Rocblas::load(path, hip, None, false)
    }

    /// As [`Rocblas::open`], but the GEMM is resolved the way a host linked against rocBLAS
    /// resolves it (global scope first), so an `LD_PRELOAD`ed interposer serves the calls.
    pub fn open_as_host(path: &Path) -> Result<Rocblas> {
        Rocblas::load(path, None, None, true)
    }

    fn load(path: &Path, hip: Option<&Path>, arch: Option<&str>, as_host: bool) -> Result<Rocblas> {
        let scope = if as_host {
            libc::RTLD_GLOBAL
        } else {
            libc::RTLD_LOCAL
        };
        let h = dl::open(path, libc::RTLD_NOW | scope)?;
        let lookup = if as_host { libc::RTLD_DEFAULT } else { h };
        // SAFETY (all below): each symbol has the C type src/abi.rs gives it.
        unsafe {
            let need =
                |name: &str| dl::sym::<*mut c_void>(h, name).ok_or_else(|| not_rocblas(path, name));
            // (The interposer exports the first two, but never the solution queries.)
            for name in [
                "rocblas_create_handle",
                "rocblas_gemm_ex",
                "rocblas_gemm_ex_get_solutions",
            ] {
                need(name)?;
            }
            let (hip_handle, hip_path) = match hip {
                Some(p) => (
                    dl::open(p, libc::RTLD_NOW | libc::RTLD_LOCAL)?,
                    p.to_path_buf(),
                ),
                None if dl::sym::<*mut c_void>(h, "hipMalloc").is_some() => (h, path.to_path_buf()),
                None => {
                    let p = Path::new("libamdhip64.so");
                    let h = dl::open(p, libc::RTLD_NOW | libc::RTLD_LOCAL).map_err(|e| {
                        Error::failed(format!("{e}; pass --hip <path to libamdhip64.so>"))
                    })?;
                    (h, p.to_path_buf())
                }
            };
            let file = dl::file_of(h, "rocblas_create_handle", path);
            let version = tunedblas_core::version::reported(
                dl::sym(h, "rocblas_get_version_string_size"),
                dl::sym(h, "rocblas_get_version_string"),
            );
            Ok(Rocblas {
                build: Build::of("rocblas", &file, version, arch)?,
                rt: Runtime::load(Api::Hip, hip_handle, hip_path)?,
                create_handle: dl::need(h, "rocblas_create_handle", "rocBLAS")?,
                destroy_handle: dl::need(h, "rocblas_destroy_handle", "rocBLAS")?,
                gemm_ex: dl::need(lookup, "rocblas_gemm_ex", "rocBLAS")?,
                gemm_strided_batched_ex: dl::sym(lookup, "rocblas_gemm_strided_batched_ex"),
                get_solutions: dl::need(h, "rocblas_gemm_ex_get_solutions", "rocBLAS")?,
                get_solutions_strided: dl::sym(h, "rocblas_gemm_strided_batched_ex_get_solutions"),
                set_stream: dl::sym(h, "rocblas_set_stream"),
            })
        }
    }

    /// The build's `5.6.0.8d1ae90e`-style version (`unknown` where it does not say).
    pub fn version(&self) -> &str {
        &self.build.version
    }

    pub fn device_count(&self) -> Result<i32> {
        self.rt.device_count()
    }

    pub fn set_device(&self, d: i32) -> Result<()> {
        self.rt.set_device(d)
    }
}

fn elem(t: Datatype) -> Result<Elem> {
    Ok(match t {
        DT_F16_R => Elem::F16,
        DT_BF16_R => Elem::Bf16,
        DT_F32_R => Elem::F32,
        DT_F64_R => Elem::F64,
        _ => {
            return Err(Error::failed(format!(
                "data type {t} is not supported by the tuner"
            )))
        }
    })
}

fn scalar(compute: Datatype, v: f64) -> Vec<u8> {
    let mut out = Vec::new();
    let t = match compute {
        DT_F64_R => Elem::F64,
        DT_F16_R => Elem::F16,
        _ => Elem::F32,
    };
    crate::numerics::encode(t, v, &mut out);
    out
}

/// The device rocBLAS runs on, for one thread.
pub struct RocblasSession<'l> {
    lib: &'l Rocblas,
}

impl ShapeKey for ProblemKey {
    fn text(&self) -> String {
        let (op, sig) = tunableop::op_and_signature(self);
        format!("{op},{sig}")
    }
    fn parse(text: &str) -> Option<ProblemKey> {
        let (op, sig) = text.trim().split_once(',')?;
        let sig = sig.split(',').next()?;
        match tunableop::parse_key(op, sig) {
            KeyParse::Key(k) => Some(k),
            _ => None,
        }
    }
    fn parse_spec(spec: &str) -> std::result::Result<ProblemKey, String> {
        parse_spec(spec)
    }
    fn label(&self) -> (String, i64) {
        (label(self), self.n)
    }
    fn read(text: &str) -> Vec<(ProblemKey, String, Option<f64>)> {
        tunableop::parse(text)
            .rows
            .into_iter()
            .map(|r| (r.key, r.solution.to_string(), r.time_ms))
            .collect()
    }
}

impl Library for Rocblas {
    type Key = ProblemKey;
    type Session<'l> = RocblasSession<'l>;

    fn parts(&self) -> (Kind, &Build, &Runtime) {
        (Kind::Rocblas, &self.build, &self.rt)
    }
    fn session(&self, device: i32) -> Result<RocblasSession<'_>> {
        self.rt.set_device(device)?;
        Ok(RocblasSession { lib: self })
    }
    fn row(&self, solution: &str) -> RowChoice {
        match Solution::parse(solution) {
            Ok(Solution::Default) => RowChoice::Default,
            Ok(Solution::Rocblas(_)) => RowChoice::Mine(solution.trim().to_string()),
            _ => RowChoice::Foreign(solution.to_string()),
        }
    }
    fn results(&self, rows: &[(ProblemKey, String, Option<f64>)]) -> String {
        let mut r = ResultsFile::default();
        r.set_validator("ROCBLAS_VERSION", &self.build.version);
        r.set_validator("GCN_ARCH_NAME", &self.build.arch);
        r.rows = rows
            .iter()
            .filter_map(|(k, s, t)| Some(tunableop::Row::new(*k, Solution::parse(s).ok()?, *t)))
            .collect();
        r.to_text()
    }
    fn describe(&self) -> Vec<(&'static str, String)> {
        vec![
            ("rocblas", self.build.version.clone()),
            ("arch", self.build.arch.clone()),
        ]
    }
}

impl<'l> super::Session for RocblasSession<'l> {
    type Key = ProblemKey;
    type Bench<'s>
        = RocblasProblem<'l>
    where
        Self: 's;

    fn bench(&self, key: &ProblemKey, m: &Method) -> Result<RocblasProblem<'l>> {
        RocblasProblem::new(self.lib, *key, m)
    }

    fn square(&self, side: i64) -> ProblemKey {
        let (t, s) = (Types::uniform(DT_BF16_R, DT_F32_R), side);
        ProblemKey::single(Trans::N, Trans::N, t, s, s, s, s, s, s, s, 0)
    }
}

/// A rocBLAS handle, destroyed on drop.
struct Handle<'l> {
    lib: &'l Rocblas,
    h: tunedblas_core::abi::Handle,
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        // SAFETY: created by rocblas_create_handle; its stream outlives it (the timer is
        // dropped after the handle), and it goes back to the default stream first (the
        // null stream is always valid).
        unsafe {
            if let Some(set) = self.lib.set_stream {
                set(self.h, std::ptr::null_mut());
            }
            (self.lib.destroy_handle)(self.h)
        };
    }
}

/// Device buffers and scalars for one problem key, ready to run many times.
pub struct RocblasProblem<'l> {
    lib: &'l Rocblas,
    handle: Handle<'l>,
    pub key: ProblemKey,
    layout: Layout,
    /// A, B, C, D of each operand set.
    sets: Vec<[DevBuf<'l>; 4]>,
    alpha: Vec<u8>,
    beta: Vec<u8>,
    timer: Timer<'l>,
}

impl<'l> RocblasProblem<'l> {
    /// Allocates and initialises the operand sets `m` asks for (their inputs are
    /// [`Layout::input`]'s, so one reference serves every device), on a handle on the
    /// timer's stream.
    pub fn new(lib: &'l Rocblas, key: ProblemKey, m: &Method) -> Result<RocblasProblem<'l>> {
        if key.batching == Batching::PointerArray {
            return Err(Error::failed(
                "pointer-array batched problems cannot be tuned yet",
            ));
        }
        let t = key.types;
        let layout = crate::numerics::layout_of!(key,
            alpha: ALPHA,
            beta: BETA,
            types: [elem(t.a)?, elem(t.b)?, elem(t.c)?, elem(t.d)?],
            exact: matches!(t.compute, DT_F32_R | DT_F64_R),
        );
        let set_bytes: usize = (0..4).map(|w| layout.bytes(w)).sum();
        let n_sets = m.sets(set_bytes, lib.rt.cache_bytes(0));
        let timer = Timer::new(&lib.rt, m.mode, m.rest, None, label(&key))?;
        let mut sets = Vec::with_capacity(n_sets);
        for set in 0..n_sets {
            let buf = |w: usize| -> Result<DevBuf<'l>> {
                let b = lib.rt.alloc(layout.bytes(w))?;
                b.upload(&layout.input(w, set))?;
                Ok(b)
            };
            sets.push([buf(0)?, buf(1)?, buf(2)?, buf(3)?]);
        }
        let mut h = std::ptr::null_mut();
        // SAFETY: out-pointer.
        let st = unsafe { (lib.create_handle)(&mut h) };
        ok(st, "rocblas_create_handle failed with status")?;
        let handle = Handle { lib, h };
        if let (Some(set), false) = (lib.set_stream, timer.stream.is_null()) {
            // SAFETY: a live handle and stream.
            ok(
                unsafe { set(h, timer.stream) },
                "rocblas_set_stream failed with status",
            )?;
        }
        Ok(RocblasProblem {
            lib,
            handle,
            key,
            layout,
            sets,
            alpha: scalar(t.compute, ALPHA),
            beta: scalar(t.compute, BETA),
            timer,
        })
    }

    /// One operand set, timed with events and no rest: a problem run outside a campaign
    /// (verify's replay, the workload, a row's check).
    pub fn once(lib: &'l Rocblas, key: ProblemKey) -> Result<RocblasProblem<'l>> {
        let m = Method {
            rotate_bytes: 1,
            mode: crate::timer::Mode::Events,
            rest: 0.0,
            ..Method::default()
        };
        RocblasProblem::new(lib, key, &m)
    }

    /// Runs operand set `set` once: the heuristic when `solution` is None, else that index;
    /// `extra_flags` adds e.g. check_solution_index.
    pub fn run_flags(&self, set: usize, solution: Option<i32>, extra_flags: u32) -> Status {
        let o = &self.sets[set % self.sets.len()];
        let (algo, idx) = match solution {
            Some(s) => (ALGO_SOLUTION_INDEX, s),
            None => (ALGO_STANDARD, 0),
        };
        let flags = self.key.flags | extra_flags;
        // SAFETY: every buffer was sized for this key.
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
        let failed = "get_solutions failed with rocBLAS status";
        let mut count = 0i32;
        ok(query(std::ptr::null_mut(), &mut count), failed)?;
        let mut list = vec![0i32; count.max(0) as usize];
        let mut size = count;
        ok(query(list.as_mut_ptr(), &mut size), failed)?;
        list.truncate(size.clamp(0, count) as usize);
        Ok(list)
    }
}

/// `st` as a result: success, else `failed` followed by the status.
fn ok(st: Status, failed: &str) -> Result<()> {
    match st {
        STATUS_SUCCESS => Ok(()),
        st => Err(Error::failed(format!("{failed} {st}"))),
    }
}

impl Bench for RocblasProblem<'_> {
    /// The solution index; `None` is the heuristic.
    type Algo = Option<i32>;

    fn parts(&self) -> (&Timer<'_>, usize, Layout) {
        (&self.timer, self.sets.len(), self.layout)
    }
    fn run(&self, algo: &Option<i32>, set: usize) -> Result<()> {
        ok(
            self.run_flags(set, *algo, 0),
            "the GEMM failed with rocBLAS status",
        )
    }
    fn id(&self, algo: &Option<i32>) -> Vec<u8> {
        algo.map_or(vec![], |i| i.to_le_bytes().to_vec())
    }
    fn heuristic(&self) -> Result<Cand<Option<i32>>> {
        Ok(Cand {
            name: "Default".into(),
            algo: None,
        })
    }
    fn candidates(&self, screen: &mut Screen<'_, Option<i32>>) -> Result<()> {
        for id in self.solutions()? {
            let name = Solution::Rocblas(id).to_string();
            if !screen.offer(Cand {
                name,
                algo: Some(id),
            }) {
                break;
            }
        }
        Ok(())
    }
    fn resolve(&self, name: &str) -> std::result::Result<Option<i32>, String> {
        match Solution::parse(name) {
            Ok(Solution::Rocblas(id)) => Ok(Some(id)),
            Ok(Solution::Default) => Ok(None),
            _ => Err(format!("{name} is not a rocBLAS solution")),
        }
    }
    fn output(&self, algo: &Option<i32>) -> Result<Vec<f64>> {
        let d = &self.sets[0][3];
        d.fill(0xff)?;
        self.run(algo, 0)?;
        self.timer.runtime().sync(self.timer.stream)?;
        Ok(decode(self.layout.types[3], &d.download(d.bytes)?))
    }
}

/// An explicit shape, `TYPE:AB:M:N:K[:BATCH]` (`f16:TN:4096:256:4096`).
pub fn parse_spec(spec: &str) -> std::result::Result<ProblemKey, String> {
    let bad = |why: &str| {
        format!(
            "--shape {spec}: {why}; the form is TYPE:AB:M:N:K[:BATCH], e.g. f16:TN:4096:256:4096"
        )
    };
    let parts: Vec<&str> = spec.split(':').collect();
    if !(5..=6).contains(&parts.len()) {
        return Err(bad("wrong number of fields"));
    }
    let types = match parts[0] {
        "f16" | "h" => Types::uniform(DT_F16_R, DT_F32_R),
        "bf16" => Types::uniform(DT_BF16_R, DT_F32_R),
        "f32" | "s" => Types::SGEMM,
        "f64" | "d" => Types::uniform(DT_F64_R, DT_F64_R),
        _ => return Err(bad("TYPE must be f16, bf16, f32 or f64")),
    };
    let ab: Vec<Trans> = parts[1].chars().filter_map(Trans::from_letter).collect();
    if ab.len() != 2 || parts[1].len() != 2 {
        return Err(bad("AB must be two letters of N and T"));
    }
    let num = |s: &str, what: &str| {
        s.parse::<i64>()
            .ok()
            .filter(|v| (1..=1 << 24).contains(v))
            .ok_or_else(|| bad(&format!("{what} must be a whole number from 1 to 16777216")))
    };
    let (m, n, k) = (
        num(parts[2], "M")?,
        num(parts[3], "N")?,
        num(parts[4], "K")?,
    );
    let [lda, ldb, ldc] = ProblemKey::packed_lds(ab[0], ab[1], m, n, k);
    let key = ProblemKey::single(ab[0], ab[1], types, m, n, k, lda, ldb, ldc, ldc, 0);
    Ok(match parts.get(5) {
        None => key,
        Some(b) => key.with_batch(Batching::Strided, num(b, "BATCH")?, key.packed_strides()),
    })
}

/// `TN f16 4096x1024` style label: layout, type, (rocBLAS m x k), the seed's (N, K).
pub fn label(k: &ProblemKey) -> String {
    format!(
        "{}{} {} {}x{}{}",
        k.trans_a.letter(),
        k.trans_b.letter(),
        tunableop::short_type_name(k.types.a),
        k.m,
        k.k,
        if k.batch > 1 {
            format!(" b{}", k.batch)
        } else {
            String::new()
        }
    )
}
