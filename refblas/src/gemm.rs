//! One GEMM call, from the C arguments to D: argument checks in rocBLAS's order, the type
//! combination, the solution (heuristic or requested), then the batch loop over a kernel
//! and the `alpha * acc + beta * C` epilogue. Also the get_solutions queries, which share the
//! argument checks.
//!
//! Every exported GEMM (ex, batched, strided, typed, `_64`) is described by one [`GemmCall`];
//! the exports only fill it in.

use crate::combo::{self, Acc, Combo, Policy};
use crate::flavour::{Choice, Flavour};
use crate::kernels::{self, Operands};
use crate::solutions::Shape;
use crate::trace::{self, Executed};
use std::ffi::c_void;
use std::sync::OnceLock;
use tunedblas_core::abi::{
    Datatype, GemmAlgo, Handle, Operation, Status, ALGO_STANDARD, DT_F16_R, DT_F32_R, DT_F64_R,
    FLAG_CHECK_SOLUTION_INDEX, FLAG_NONE, OP_CONJUGATE_TRANSPOSE, OP_NONE, OP_TRANSPOSE,
    STATUS_INTERNAL_ERROR, STATUS_INVALID_HANDLE, STATUS_INVALID_POINTER, STATUS_INVALID_SIZE,
    STATUS_INVALID_VALUE, STATUS_NOT_IMPLEMENTED, STATUS_SUCCESS,
};

/// How the matrices of a batch are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// a, b, c, d point to the first matrix; item i is `stride_*` elements further (all
    /// strides 0 for the non-batched calls).
    Strided {
        stride_a: i64,
        stride_b: i64,
        stride_c: i64,
        stride_d: i64,
    },
    /// a, b, c, d point to arrays of `batch_count` matrix pointers (the `_batched_` calls).
    PointerArray,
}

impl Layout {
    pub const SINGLE: Layout = Layout::Strided {
        stride_a: 0,
        stride_b: 0,
        stride_c: 0,
        stride_d: 0,
    };
}

/// Everything one GEMM entry point was given, widened to 64-bit sizes.
#[derive(Clone, Copy, Debug)]
pub struct GemmCall {
    /// The exported function's name, for the trace.
    pub func: &'static str,
    pub trans_a: Operation,
    pub trans_b: Operation,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub alpha: *const c_void,
    pub a: *const c_void,
    pub a_type: Datatype,
    pub lda: i64,
    pub b: *const c_void,
    pub b_type: Datatype,
    pub ldb: i64,
    pub beta: *const c_void,
    pub c: *const c_void,
    pub c_type: Datatype,
    pub ldc: i64,
    pub d: *mut c_void,
    pub d_type: Datatype,
    pub ldd: i64,
    pub batch_count: i64,
    pub layout: Layout,
    pub compute_type: Datatype,
    pub algo: GemmAlgo,
    pub solution_index: i32,
    pub flags: u32,
}

impl GemmCall {
    /// A call on one set of matrices (a batch of one) with one data type for A, B, C and D,
    /// the heuristic's solution and no flags: what the typed exports, the tests and the
    /// example start from, setting the rest with struct update syntax.
    #[allow(clippy::too_many_arguments)]
    pub fn single(
        func: &'static str,
        [trans_a, trans_b]: [Operation; 2],
        [m, n, k]: [i64; 3],
        [alpha, beta]: [*const c_void; 2],
        [a, b, c]: [*const c_void; 3],
        d: *mut c_void,
        [lda, ldb, ldc, ldd]: [i64; 4],
        (data_type, compute_type): (Datatype, Datatype),
    ) -> GemmCall {
        GemmCall {
            func,
            trans_a,
            trans_b,
            m,
            n,
            k,
            alpha,
            a,
            a_type: data_type,
            lda,
            b,
            b_type: data_type,
            ldb,
            beta,
            c,
            c_type: data_type,
            ldc,
            d,
            d_type: data_type,
            ldd,
            batch_count: 1,
            layout: Layout::SINGLE,
            compute_type,
            algo: ALGO_STANDARD,
            solution_index: 0,
            flags: FLAG_NONE,
        }
    }

    pub fn shape(&self) -> Shape {
        Shape {
            m: self.m,
            n: self.n,
            k: self.k,
        }
    }

    pub fn combo(&self) -> Option<Combo> {
        Combo::from_types(
            self.a_type,
            self.b_type,
            self.c_type,
            self.d_type,
            self.compute_type,
        )
    }
}

/// What a successful call did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GemmOutcome {
    /// m, n or batch_count was 0: nothing to do (not traced).
    QuickReturn,
    /// `check_solution_index`: the solution can solve the problem; nothing ran (not traced).
    Checked(Choice),
    /// The GEMM ran (or, with computing off, would have): what the trace records.
    Ran(Executed),
}

/// `REFBLAS_NO_COMPUTE=1`, read once: GEMMs validate, trace and return without computing.
pub fn no_compute() -> bool {
    static NO_COMPUTE: OnceLock<bool> = OnceLock::new();
    *NO_COMPUTE.get_or_init(|| {
        std::env::var("REFBLAS_NO_COMPUTE").is_ok_and(|v| !v.is_empty() && v != "0")
    })
}

/// `REFBLAS_FAULTY_SOLUTION=<id>`, read once: that solution index runs, succeeds and
/// traces, but leaves D unwritten, like a kernel with a numerics bug. Lets tests prove
/// that qualification catches wrong results.
pub fn faulty_solution() -> Option<i32> {
    static FAULTY: OnceLock<Option<i32>> = OnceLock::new();
    *FAULTY.get_or_init(|| {
        std::env::var("REFBLAS_FAULTY_SOLUTION")
            .ok()
            .and_then(|v| v.trim().parse().ok())
    })
}

/// Injected faults, read once from the environment; off unless set. Tests use them to
/// model what a real library does on a bad day, through the real ABI:
///
/// - `REFBLAS_FAIL_SOLUTIONS=<id>[,<id>...]`: those solution indices are still listed by
///   get_solutions and still pass `check_solution_index`, but a call that would run one
///   returns `internal_error` before anything is written (a kernel that validates but then
///   cannot be launched, as after a driver or firmware change).
/// - `REFBLAS_FAIL_ALL=<status>`: every GEMM and get_solutions call returns that status
///   (a library that fails everything, e.g. a GPU that has fallen off the bus).
#[derive(Debug, Default)]
pub struct Faults {
    pub fail_solutions: Vec<i32>,
    pub fail_all: Option<Status>,
}

impl Faults {
    pub fn from_env() -> Faults {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Faults {
            fail_solutions: var("REFBLAS_FAIL_SOLUTIONS")
                .map(|v| v.split(',').filter_map(|t| t.trim().parse().ok()).collect())
                .unwrap_or_default(),
            fail_all: var("REFBLAS_FAIL_ALL")
                .and_then(|v| v.trim().parse().ok())
                .filter(|&s| s != STATUS_SUCCESS),
        }
    }
}

/// The process's [`Faults`], read at first use.
pub fn faults() -> &'static Faults {
    static FAULTS: OnceLock<Faults> = OnceLock::new();
    FAULTS.get_or_init(Faults::from_env)
}

/// `REFBLAS_SLOW_HEURISTIC=N`, read once: the heuristic's kernel computes each GEMM N times
/// (1 when unset), so a tuner test's adoption does not hang on a few percent between kernels
/// timed on a busy CPU (the Lt stand-ins' `*_SLOW_HEURISTIC` do the same).
fn slow_heuristic() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("REFBLAS_SLOW_HEURISTIC")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1)
            .max(1)
    })
}

/// `REFBLAS_NO_COMPUTE=return`, read once: every GEMM entry returns success at once, before
/// any check, and traces nothing. Only for overhead benchmarks: the cost of a call is then
/// the call itself, so what an interposer adds is not hidden under argument checks.
pub fn return_at_once() -> bool {
    static RETURN: OnceLock<bool> = OnceLock::new();
    *RETURN.get_or_init(|| std::env::var("REFBLAS_NO_COMPUTE").is_ok_and(|v| v == "return"))
}

/// A GEMM as the exports run it: [`run`] with the process settings, then the trace.
///
/// # Safety
/// The pointers in `call` must be valid as rocBLAS documents for this call.
pub unsafe fn gemm(flavour: Flavour, handle: Handle, call: &GemmCall) -> Status {
    if return_at_once() {
        return STATUS_SUCCESS;
    }
    if let Some(status) = crate::graph::capture(flavour, handle, call) {
        return status;
    }
    let faults = faults();
    if let Some(status) = faults.fail_all {
        return status;
    }
    match run_with_faults(flavour, handle, call, !no_compute(), faults) {
        Ok(GemmOutcome::Ran(e)) => {
            trace::record(&e);
            STATUS_SUCCESS
        }
        Ok(_) => STATUS_SUCCESS,
        Err(s) => s,
    }
}

/// Validates, resolves the solution and (if `compute`) computes D. Does not trace.
///
/// # Safety
/// As [`gemm`].
pub unsafe fn run(
    flavour: Flavour,
    handle: Handle,
    call: &GemmCall,
    compute: bool,
) -> Result<GemmOutcome, Status> {
    run_with_faults(flavour, handle, call, compute, &Faults::default())
}

/// [`run`] with injected [`Faults`] (only `fail_solutions` acts here).
///
/// # Safety
/// As [`gemm`].
pub unsafe fn run_with_faults(
    flavour: Flavour,
    handle: Handle,
    call: &GemmCall,
    compute: bool,
    faults: &Faults,
) -> Result<GemmOutcome, Status> {
    if !check_args(handle, call, false)? {
        return Ok(GemmOutcome::QuickReturn);
    }
    let combo = call.combo().ok_or(STATUS_NOT_IMPLEMENTED)?;
    let choice = flavour.resolve(combo, call.algo, call.solution_index, call.shape())?;
    if call.flags & FLAG_CHECK_SOLUTION_INDEX != 0 {
        return Ok(GemmOutcome::Checked(choice));
    }
    let solution = flavour
        .solution_id(combo, choice.kernel)
        .expect("a resolved kernel has an index in its flavour");
    if !choice.heuristic && faults.fail_solutions.contains(&solution) {
        return Err(STATUS_INTERNAL_ERROR);
    }
    // Again only where D is not C (in place, a second pass would read the first's D).
    let apart = !std::ptr::eq(call.c, call.d);
    let times = if choice.heuristic && apart {
        slow_heuristic()
    } else {
        1
    };
    for _ in 0..times {
        if !(compute && faulty_solution() != Some(solution)) {
            break;
        }
        // Computing again reads the same A, B and C: D comes out the same.
        match combo {
            Combo::HalfF32 => execute::<combo::HalfF32>(choice, call)?,
            Combo::HalfF16 => execute::<combo::HalfF16>(choice, call)?,
            Combo::Bf16F32 => execute::<combo::Bf16F32>(choice, call)?,
            Combo::F32 => execute::<combo::F32>(choice, call)?,
            Combo::F64 => execute::<combo::F64>(choice, call)?,
        }
    }
    Ok(GemmOutcome::Ran(Executed {
        func: call.func,
        lib: flavour.soname(),
        solution,
        heuristic: choice.heuristic,
        m: call.m,
        n: call.n,
        k: call.k,
        batch: call.batch_count,
    }))
}

fn valid_op(op: Operation) -> bool {
    op == OP_NONE || op == OP_TRANSPOSE || op == OP_CONJUGATE_TRANSPOSE
}

/// Whether a scalar of the compute type is zero (false for types refblas cannot read).
///
/// # Safety
/// `p` must point to a value of `compute_type`.
unsafe fn scalar_is_zero(p: *const c_void, compute_type: Datatype) -> bool {
    match compute_type {
        DT_F16_R => crate::numeric::F16((p as *const u16).read_unaligned()).to_f32() == 0.0,
        DT_F32_R => (p as *const f32).read_unaligned() == 0.0,
        DT_F64_R => (p as *const f64).read_unaligned() == 0.0,
        _ => false,
    }
}

/// rocBLAS's gemm_ex argument checks, in its order. `Ok(false)` is a quick return (success,
/// nothing to do), `Ok(true)` means go on. Queries (`get_solutions`) skip the pointer checks:
/// they may be asked without buffers.
///
/// # Safety
/// alpha and beta, when non-null, must be readable as the compute type.
unsafe fn check_args(handle: Handle, call: &GemmCall, query: bool) -> Result<bool, Status> {
    if handle.is_null() {
        return Err(STATUS_INVALID_HANDLE);
    }
    if !valid_op(call.trans_a) || !valid_op(call.trans_b) {
        return Err(STATUS_INVALID_VALUE);
    }
    if call.m < 0 || call.n < 0 || call.k < 0 || call.batch_count < 0 {
        return Err(STATUS_INVALID_SIZE);
    }
    let a_rows = if call.trans_a == OP_NONE {
        call.m
    } else {
        call.k
    };
    let b_rows = if call.trans_b == OP_NONE {
        call.k
    } else {
        call.n
    };
    if call.ldc < call.m || call.ldd < call.m || call.lda < a_rows || call.ldb < b_rows {
        return Err(STATUS_INVALID_SIZE);
    }
    // k == 0 is no quick return: D = beta * C must still be written.
    if call.m == 0 || call.n == 0 || call.batch_count == 0 {
        return Ok(false);
    }
    if !query {
        if (call.k != 0 && call.alpha.is_null()) || call.beta.is_null() || call.d.is_null() {
            return Err(STATUS_INVALID_POINTER);
        }
        // Without C, beta must be zero; without A or B, alpha must be zero.
        if call.c.is_null() && !scalar_is_zero(call.beta, call.compute_type) {
            return Err(STATUS_INVALID_POINTER);
        }
        if call.k != 0
            && (call.a.is_null() || call.b.is_null())
            && !scalar_is_zero(call.alpha, call.compute_type)
        {
            return Err(STATUS_INVALID_POINTER);
        }
    }
    if !call.c.is_null() && std::ptr::eq(call.c, call.d) {
        // In place: C and D must be the same matrix.
        if call.ldc != call.ldd {
            return Err(STATUS_INVALID_SIZE);
        }
        if call.c_type != call.d_type {
            return Err(STATUS_INVALID_VALUE);
        }
    }
    Ok(true)
}

/// Elements spanned by a column-major matrix of `rows x cols` with leading dimension `ld`.
fn extent(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (cols - 1) * ld + rows
    }
}

/// The four matrix pointers of batch item `i`.
///
/// # Safety
/// For pointer arrays, the arrays must hold `batch_count` readable pointers.
unsafe fn item_pointers<E>(call: &GemmCall, i: i64) -> (*const E, *const E, *const E, *mut E) {
    match call.layout {
        Layout::Strided {
            stride_a,
            stride_b,
            stride_c,
            stride_d,
        } => (
            (call.a as *const E).wrapping_offset((stride_a * i) as isize),
            (call.b as *const E).wrapping_offset((stride_b * i) as isize),
            (call.c as *const E).wrapping_offset((stride_c * i) as isize),
            (call.d as *mut E).wrapping_offset((stride_d * i) as isize),
        ),
        Layout::PointerArray => {
            // A null array is only allowed where the matrix is never read.
            let read = |arr: *const c_void| -> *const E {
                if arr.is_null() {
                    std::ptr::null()
                } else {
                    (arr as *const *const E).add(i as usize).read()
                }
            };
            (
                read(call.a),
                read(call.b),
                read(call.c),
                read(call.d as *const c_void) as *mut E,
            )
        }
    }
}

fn misaligned<E>(p: *const E) -> bool {
    // align_of is a power of two.
    (p as usize) & (std::mem::align_of::<E>() - 1) != 0
}

/// Computes every batch item of `call` with the chosen kernel.
///
/// # Safety
/// As [`gemm`]; `check_args` has passed.
unsafe fn execute<P: Policy>(choice: Choice, call: &GemmCall) -> Result<(), Status> {
    let (m, n, k) = (call.m as usize, call.n as usize, call.k as usize);
    let alpha = if call.alpha.is_null() {
        P::A::ZERO
    } else {
        P::scalar(call.alpha)
    };
    let beta = P::scalar(call.beta);
    // BLAS semantics: with alpha == 0 (or k == 0) A and B are not read; with beta == 0 C is
    // not read (it may hold NaNs or be null).
    let use_ab = k > 0 && alpha != P::A::ZERO;
    let use_c = beta != P::A::ZERO;
    let trans_a = call.trans_a != OP_NONE;
    let trans_b = call.trans_b != OP_NONE;
    let (lda, ldb, ldc, ldd) = (
        call.lda as usize,
        call.ldb as usize,
        call.ldc as usize,
        call.ldd as usize,
    );
    let mut acc = vec![P::A::ZERO; if use_ab { m * n } else { 0 }];

    for item in 0..call.batch_count {
        let (a, b, c, d) = item_pointers::<P::E>(call, item);
        if d.is_null() || (use_ab && (a.is_null() || b.is_null())) || (use_c && c.is_null()) {
            return Err(STATUS_INVALID_POINTER);
        }
        if misaligned(d) || (use_ab && (misaligned(a) || misaligned(b))) || (use_c && misaligned(c))
        {
            return Err(STATUS_INVALID_POINTER);
        }
        if use_ab {
            // The operand slices live only for the kernel, before D is written, so an
            // (invalid but possible) overlap of D with A or B never aliases a live slice.
            let (ar, ac) = if trans_a { (k, m) } else { (m, k) };
            let (br, bc) = if trans_b { (n, k) } else { (k, n) };
            let ops = Operands {
                m,
                n,
                k,
                a: std::slice::from_raw_parts(a, extent(ar, ac, lda)),
                lda,
                trans_a,
                b: std::slice::from_raw_parts(b, extent(br, bc, ldb)),
                ldb,
                trans_b,
            };
            kernels::run::<P>(choice.kernel, &ops, alpha, &mut acc);
        }
        // Epilogue, element by element through raw pointers: with C == D each element of C is
        // read just before the same element of D is written.
        for j in 0..n {
            for i in 0..m {
                let ab = if use_ab { acc[i + j * m] } else { P::A::ZERO };
                let v = if use_c {
                    let cv = P::load(c.add(i + j * ldc).read());
                    ab + P::settle(beta * cv)
                } else {
                    ab
                };
                d.add(i + j * ldd).write(P::store(v));
            }
        }
    }
    Ok(())
}

/// Writes a solution list by rocBLAS's protocol: with `list` null, the count goes to
/// `*size`; otherwise up to `*size` entries are written and `*size` becomes how many were.
///
/// # Safety
/// `size` non-null and writable; `list` null or writable for `*size` entries.
unsafe fn write_list(ids: &[i32], list: *mut i32, size: *mut i32) {
    if list.is_null() {
        *size = ids.len() as i32;
    } else {
        let n = (*size).max(0) as usize;
        let n = n.min(ids.len());
        std::ptr::copy_nonoverlapping(ids.as_ptr(), list, n);
        *size = n as i32;
    }
}

/// `rocblas_gemm_*_get_solutions`: the solutions able to solve exactly this problem. On a
/// quick-return problem, success with `*size` untouched.
///
/// # Safety
/// As [`gemm`], except that the matrix pointers are not read; `size` as [`write_list`].
pub unsafe fn get_solutions(
    flavour: Flavour,
    handle: Handle,
    call: &GemmCall,
    list: *mut i32,
    size: *mut i32,
) -> Status {
    if let Some(status) = faults().fail_all {
        return status;
    }
    match check_args(handle, call, true) {
        Err(s) => return s,
        Ok(false) => return STATUS_SUCCESS,
        Ok(true) => {}
    }
    if size.is_null() {
        return STATUS_INVALID_POINTER;
    }
    let Some(combo) = call.combo() else {
        return STATUS_NOT_IMPLEMENTED;
    };
    write_list(&flavour.solution_ids(combo, Some(call.shape())), list, size);
    STATUS_SUCCESS
}

/// `rocblas_gemm_ex_get_solutions_by_type`: every solution of a type combination (in = a = b,
/// out = c = d), whatever the shape.
///
/// # Safety
/// `size` as [`write_list`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn get_solutions_by_type(
    flavour: Flavour,
    handle: Handle,
    in_type: Datatype,
    out_type: Datatype,
    compute_type: Datatype,
    _flags: u32,
    list: *mut i32,
    size: *mut i32,
) -> Status {
    if let Some(status) = faults().fail_all {
        return status;
    }
    if handle.is_null() {
        return STATUS_INVALID_HANDLE;
    }
    if size.is_null() {
        return STATUS_INVALID_POINTER;
    }
    let Some(combo) = Combo::from_types(in_type, in_type, out_type, out_type, compute_type) else {
        return STATUS_NOT_IMPLEMENTED;
    };
    write_list(&flavour.solution_ids(combo, None), list, size);
    STATUS_SUCCESS
}
