//! The serving decision, shared by every entry point.
//!
//! Each export describes its call as (a) how to build the problem key, (b) whether the
//! caller already made a choice we must respect, and (c) how to make the real call either
//! as the caller made it or with a tuned solution. [`serve`] does the rest: lookup, tuned
//! call, fallback and quarantine on failure, miss recording, counting.
//!
//! The decision runs before any real call, so a GEMM is never executed twice. Its miss path
//! (files, allocation, near serving) runs under `catch_unwind`: if it panics the call is
//! passed through and serving stops. The hit path is written so it cannot panic (checked
//! accessors, atomics, no allocation) and runs outside the guard, which keeps its result
//! in registers.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicU8, Ordering};

use tunedblas_core::abi::*;
use tunedblas_core::key::{Batching, ProblemKey, Types};
use tunedblas_core::profile::RankTable;
use tunedblas_core::rocblas::{batched_key, ex_types, is_real_problem, single_key, Dims};
use tunedblas_core::table::{Action, Entry, Table};

use super::near::{self, NearPlan};
use super::real::HOOKS;
use crate::log::{debug, info};
use crate::rocblas as runtime;
use crate::stats::{bump, Counter};

/// How to make the real call.
#[derive(Clone, Copy)]
pub enum Route {
    /// Exactly as the caller made it.
    Original,
    /// With `algo = solution_index` and this index.
    Tuned(i32),
    /// As `Tuned`, with `check_solution_index`: rocBLAS only validates, nothing runs.
    Check(i32),
}

impl Route {
    /// The (algo, solution index, flags) of a `gemm_ex`-family call made this way, from
    /// the caller's own.
    #[inline(always)]
    pub fn apply(self, algo: GemmAlgo, solution: i32, flags: u32) -> (GemmAlgo, i32, u32) {
        match self {
            Route::Original => (algo, solution, flags),
            Route::Tuned(id) => (ALGO_SOLUTION_INDEX, id, flags),
            Route::Check(id) => (ALGO_SOLUTION_INDEX, id, flags | FLAG_CHECK_SOLUTION_INDEX),
        }
    }
}

/// What to do with a call: the one decision every entry point's call goes by.
pub enum Decision {
    /// The caller's own call (a pass, a `Default` row, a miss).
    Pass,
    /// The solution, and its row's entry.
    Tuned(i32, &'static Entry),
    /// No row; the nearest token count's solution, validated already or not yet
    /// (`near.rs`).
    Near(NearPlan),
}

/// A call that found the runtime starting up and passed through rather than wait, or put
/// its start-up off (on an alternate signal stack; `lifecycle::Lazy`): counted, as the calls
/// the runtime passes through are.
#[cold]
#[inline(never)]
fn passed_while_starting() {
    if runtime::starting() {
        bump(Counter::PassedThrough);
    }
}

/// The per-call decision. Each call bumps exactly one counter (the calls total is their
/// sum), and the row travels by reference: this is the hot path, see docs/benchmarks/history.md.
#[inline(always)]
pub fn decide(
    key: impl FnOnce() -> Option<ProblemKey>,
    caller_chose: bool,
    handle: Handle,
) -> Decision {
    let Some(rt) = runtime::get() else {
        passed_while_starting();
        return Decision::Pass;
    };
    if caller_chose {
        bump(Counter::PassedThrough);
        return Decision::Pass;
    }
    let Some(key) = key() else {
        bump(Counter::PassedThrough);
        return Decision::Pass;
    };
    let hash = key.lookup_hash();
    let (table, device) = rt.table_and_device(handle);
    let table = match table {
        RankTable::Ready(t) => Some(t),
        RankTable::None => None,
        // Another thread is reading this device's rank file: untouched, not a miss.
        RankTable::Loading => {
            bump(Counter::PassedThrough);
            return Decision::Pass;
        }
    };
    match table.and_then(|t| t.get_row_hashed(&key, hash)) {
        Some((_, e)) if e.servable => use_row(e),
        // A row for a call rocBLAS would not run (quick return, bad sizes): untouched, as if
        // it had no key. Checked here, after the lookup, so a served call never pays for it.
        Some(_) => {
            bump(Counter::PassedThrough);
            Decision::Pass
        }
        // Nor is a call rocBLAS will reject (no handle: there was no device to make one
        // on): it is not a shape to tune.
        None if handle.is_null() || !is_real_problem(&key) => {
            bump(Counter::PassedThrough);
            Decision::Pass
        }
        // The miss path says what it found; the decision is made here. (Had it returned a
        // `Decision`, which comes back through memory, the hit paths wrote theirs to the
        // same place: ~4 instructions on the served path, docs/benchmarks/history.md.)
        None => match missed(rt, table, key, hash, handle, device) {
            Missed::Nothing => Decision::Pass,
            Missed::Wildcard(e) => match wildcard_solution(e) {
                Some(id) => Decision::Tuned(id, e),
                None => Decision::Pass,
            },
            Missed::Near(plan) => Decision::Near(plan),
        },
    }
}

/// What the miss path found for a key with no exact row.
enum Missed {
    /// The nearest token count's row (`near.rs`).
    Near(NearPlan),
    /// A `*` row that matches it.
    Wildcard(&'static Entry),
    /// Nothing to serve it with: the caller's own call (the miss is recorded).
    Nothing,
}

/// Runs the miss path under `catch_unwind`: it writes files, allocates and serves near
/// rows, so a bug there must not unwind into C. The hit path above does none of that and
/// cannot panic (only bounds-checked-away indexing and atomics), so it runs outside: a
/// decision returned through the unwinding guard went through memory and stalled the
/// served path (~4 ns, docs/benchmarks/history.md).
#[inline(always)]
fn guarded(f: impl FnOnce() -> Missed) -> Missed {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(d) => d,
        Err(_) => {
            runtime::latch_off("a panic while choosing a solution");
            Missed::Nothing
        }
    }
}

/// What a row (exact or `*`) says for this call.
#[inline(always)]
fn use_row(e: &'static Entry) -> Decision {
    match row_solution(e) {
        Some(id) => Decision::Tuned(id, e),
        None => Decision::Pass,
    }
}

/// The solution a row serves this call with, `None` for the caller's own call (a
/// quarantined or `Default` row); counts the call unless it is served.
#[inline(always)]
fn row_solution(e: &'static Entry) -> Option<i32> {
    if e.is_quarantined() {
        bump(Counter::PassedThrough);
        return None;
    }
    e.mark_hit();
    match e.action {
        Action::Default => {
            bump(Counter::Default);
            None
        }
        Action::Solution(id) => Some(id),
    }
}

/// [`row_solution`] for a `*` row, out of line: inlined beside the exact row's, the two
/// were merged and the `Default` path paid ~3 instructions for it (docs/benchmarks/history.md).
#[cold]
#[inline(never)]
fn wildcard_solution(e: &'static Entry) -> Option<i32> {
    row_solution(e)
}

/// No exact row: a `*` row may still match; otherwise the shape is recorded as a miss.
/// Kept out of line so the hit path stays small, and guarded inside, so the export calls
/// it directly. (Guarded at the call site, the arguments went into a closure that an
/// out-of-line `catch_unwind` helper unpacked, and the decision came back through two more
/// copies: ~30 instructions on every repeated miss, docs/benchmarks/history.md.) The key
/// comes by value: taken by reference, it had to be written to memory before the table
/// lookup on every call, and the served path paid for it (~20 instructions).
#[cold]
#[inline(never)]
fn missed(
    rt: &'static runtime::RocblasRuntime,
    table: Option<&'static Table>,
    key: ProblemKey,
    hash: u64,
    handle: Handle,
    device: i64,
) -> Missed {
    guarded(|| missed_unguarded(rt, table, &key, hash, handle, device))
}

/// [`missed`] without its guard.
#[inline(always)]
fn missed_unguarded(
    rt: &'static runtime::RocblasRuntime,
    table: Option<&'static Table>,
    key: &ProblemKey,
    hash: u64,
    handle: Handle,
    device: i64,
) -> Missed {
    // The exact shape is recorded whatever serves it (a `*` row, the near path): it still
    // needs its own row. The device the table lookup asked about, or (one table for every
    // rank, so it did not ask) the handle's now: misses are recorded per device.
    let device = match device {
        runtime::NO_DEVICE => runtime::device_for(handle),
        d => d as i32,
    };
    // Most tables have no `*` rows: then the scan is not even called.
    if let Some(e) = table
        .filter(|t| t.has_wildcards())
        .and_then(|t| t.get_wildcard(key))
    {
        // Noted, so no view counts the calls a `*` row serves as missed (`tally.rs`).
        if let Some((slot, 0)) = rt.miss_noted(device, key, hash) {
            rt.misses
                .set
                .note_if_unset(slot, crate::tally::SERVED_BY_PATTERN);
        }
        return Missed::Wildcard(e);
    }
    let Some(near) = &rt.near else {
        rt.miss_on(device, key, hash);
        bump(Counter::Missed);
        return Missed::Nothing;
    };
    let noted = rt.miss_noted(device, key, hash);
    match near.step(&rt.misses.set, device, table, key, hash, noted) {
        Some(plan) => Missed::Near(plan),
        None => {
            bump(Counter::Missed);
            Missed::Nothing
        }
    }
}

/// Serves one intercepted call. See the module docs.
#[inline(always)]
pub fn serve(
    key: impl Fn() -> Option<ProblemKey> + Copy,
    caller_chose: bool,
    handle: Handle,
    call: impl Fn(Route) -> Status,
) -> Status {
    make_call!(
        decide(key, caller_chose, handle),
        route => call(route),
        plan => near::serve(plan, key, &call)
    )
}

/// Makes the call a [`Decision`] says: the one place every entry point's tuned call, its
/// fallback and the caller's own call are made. `$route => $call` is the real call with
/// the caller's arguments, made the way `$route` ([`Route`]) says; `$plan => $near` makes a
/// near-served call ([`NearPlan`]).
///
/// A macro, not a function taking closures: `gemm_ex` passes its 24 arguments straight
/// through, and handed over in closures (even inlined ones) they were kept on the stack
/// on every call: ~45 instructions more on the served, `Default` and repeat-miss paths
/// (docs/benchmarks/history.md).
macro_rules! make_call {
    ($decision:expr, $route:ident => $call:expr, $plan:ident => $near:expr) => {
        match $decision {
            $crate::rocblas::serve::Decision::Pass => {
                let $route = $crate::rocblas::serve::Route::Original;
                $call
            }
            $crate::rocblas::serve::Decision::Tuned(id, entry) => {
                let status = {
                    let $route = $crate::rocblas::serve::Route::Tuned(id);
                    $call
                };
                if $crate::rocblas::serve::tuned_result(status) {
                    status
                } else {
                    let own = {
                        let $route = $crate::rocblas::serve::Route::Original;
                        $call
                    };
                    $crate::rocblas::serve::fell_back(id, entry, status, own);
                    own
                }
            }
            $crate::rocblas::serve::Decision::Near($plan) => $near,
        }
    };
}
pub(crate) use make_call;

/// The outcome of a tuned call: true when it succeeded (counted as served); false when it
/// failed, and the caller's own call must be made, then handed to [`fell_back`].
#[inline(always)]
pub fn tuned_result(status: Status) -> bool {
    if status == STATUS_SUCCESS {
        bump(Counter::Served);
        return true;
    }
    false
}

/// A tuned call failed with `tuned` and the caller's own call returned `own`. Only when the
/// caller's call worked was the solution at fault: then the row is quarantined (reported
/// once) and the call counts as a fallback. When it failed too (no valid handle, a NULL
/// alpha, rocBLAS's device-memory size query answering 9/10), the caller's call was bad and
/// the row stays: the call counts as passed through.
#[cold]
#[inline(never)]
pub fn fell_back(id: i32, entry: &'static Entry, tuned: Status, own: Status) {
    if own != STATUS_SUCCESS {
        bump(Counter::PassedThrough);
        debug!(
            "solution {id} returned rocBLAS status {tuned} and the caller's own call {own}: the call was at fault, not the row"
        );
        return;
    }
    if entry.quarantine() {
        let row = runtime::get()
            .and_then(|rt| rt.table())
            .and_then(|t| t.describe(entry))
            .unwrap_or_else(|| "its row".into());
        info!(
            "solution {id} for {row} failed with rocBLAS status {tuned} while the caller's own call works; the row is quarantined for this process and the caller's own call is made instead (re-tune this build)"
        );
    }
    bump(Counter::Fallbacks);
}

/// rocBLAS size integers: `rocblas_int` or int64 for the `_64` twins.
pub trait Int: Copy + Into<i64> {}
impl Int for i32 {}
impl Int for i64 {}

/// Counts a call passed through because its caller chose the solution (starting the
/// runtime on first use, as any call does).
#[inline(always)]
pub fn count_pass_through() {
    if runtime::serving() {
        bump(Counter::PassedThrough);
    }
}

/// [`count_pass_through`] while the pass-through gate is open (the runtime serves).
#[inline(always)]
pub fn count_pass_through_open() {
    bump(Counter::PassedThrough);
}

/// The pass-through gate: [`GATE_OPEN`] while the runtime serves and every handle belongs
/// to the served build. Then a caller's own choice needs one load to know that it goes to
/// the served build's own function and is counted (`exports.rs`), where it would otherwise
/// ask whether another build is loaded and whether the runtime is ready (two loads and
/// branches more: the pass-through path is ~60 instructions in all, docs/benchmarks/history.md).
///
/// [`GATE_SHUT`]: not known now; the export takes the full route and opens the gate again
/// when it can ([`open_pass_gate`]). [`GATE_CLOSED`]: for good (another rocBLAS build is
/// loaded beside the served one: every call's handle is looked up).
static PASS_GATE: AtomicU8 = AtomicU8::new(GATE_SHUT);
pub const GATE_SHUT: u8 = 0;
pub const GATE_OPEN: u8 = 1;
pub const GATE_CLOSED: u8 = 2;

/// The gate's state, for the exports' first branch.
#[inline(always)]
pub fn pass_gate() -> u8 {
    PASS_GATE.load(Ordering::Relaxed)
}

/// Opens a shut gate if the runtime serves and a single build is in use. Called by the
/// exports' full route while the gate is shut.
#[cold]
#[inline(never)]
pub fn open_pass_gate() {
    if !runtime::is_ready() || super::real::several_builds() {
        return;
    }
    if PASS_GATE
        .compare_exchange(GATE_SHUT, GATE_OPEN, Ordering::SeqCst, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // The runtime may have stopped since it was asked about (and [`shut_pass_gate`] run
    // before the gate opened): ask again. With the fence here and the one there, either
    // this sees the runtime stopped, or that sees the gate open and shuts it.
    fence(Ordering::SeqCst);
    if !runtime::is_ready() {
        let _ =
            PASS_GATE.compare_exchange(GATE_OPEN, GATE_SHUT, Ordering::SeqCst, Ordering::Relaxed);
    }
}

/// The runtime just stopped serving or restarted (`rocblas/mod.rs`): an open gate shuts, so the
/// next chosen call asks the runtime again (starting it, or not counting).
pub fn shut_pass_gate() {
    fence(Ordering::SeqCst);
    let _ = PASS_GATE.compare_exchange(GATE_OPEN, GATE_SHUT, Ordering::SeqCst, Ordering::Relaxed);
}

/// Another rocBLAS build is in use beside the served one (`libs.rs`): the gate closes for
/// good, before any handle of that build exists.
pub fn close_pass_gate() {
    PASS_GATE.store(GATE_CLOSED, Ordering::SeqCst);
}

#[inline(always)]
pub fn caller_chose(algo: GemmAlgo, flags: u32) -> bool {
    algo != ALGO_STANDARD || flags & FLAG_CHECK_SOLUTION_INDEX != 0
}

/// The arguments every `gemm_ex`-family call shares.
#[derive(Clone, Copy)]
pub struct ExArgs<I> {
    pub handle: Handle,
    pub trans_a: Operation,
    pub trans_b: Operation,
    pub m: I,
    pub n: I,
    pub k: I,
    pub alpha: *const c_void,
    pub a: *const c_void,
    pub a_type: Datatype,
    pub lda: I,
    pub b: *const c_void,
    pub b_type: Datatype,
    pub ldb: I,
    pub beta: *const c_void,
    pub c: *const c_void,
    pub c_type: Datatype,
    pub ldc: I,
    pub d: *mut c_void,
    pub d_type: Datatype,
    pub ldd: I,
    pub compute: Datatype,
    pub algo: GemmAlgo,
    pub solution: i32,
    pub flags: u32,
}

impl<I: Int> ExArgs<I> {
    #[inline(always)]
    pub fn dims(&self) -> Dims {
        Dims {
            m: self.m.into(),
            n: self.n.into(),
            k: self.k.into(),
            lda: self.lda.into(),
            ldb: self.ldb.into(),
            ldc: self.ldc.into(),
            ldd: self.ldd.into(),
        }
    }
    #[inline(always)]
    pub fn types(&self) -> Types {
        ex_types(
            self.a_type,
            self.b_type,
            self.c_type,
            self.d_type,
            self.compute,
        )
    }
    /// The key of this call as one of a batch of `batch` GEMMs.
    #[inline(always)]
    fn batched_key(&self, batching: Batching, batch: i64, strides: [i64; 4]) -> Option<ProblemKey> {
        batched_key(
            self.trans_a,
            self.trans_b,
            self.types(),
            self.dims(),
            batching,
            batch,
            strides,
            self.flags,
        )
    }

    /// The call to make for a route: the caller's, or the same with the tuned solution.
    #[inline(always)]
    pub fn routed(&self, route: Route) -> ExArgs<I> {
        let (algo, solution, flags) = route.apply(self.algo, self.solution, self.flags);
        ExArgs {
            algo,
            solution,
            flags,
            ..*self
        }
    }
}

/// Makes a `gemm_ex` call from `x`.
#[inline(always)]
pub fn call_ex<I: Int>(f: GemmExFn<I>, x: &ExArgs<I>) -> Status {
    // SAFETY: forwarding a caller's (or a re-issued typed) call to the real function.
    unsafe {
        f(
            x.handle, x.trans_a, x.trans_b, x.m, x.n, x.k, x.alpha, x.a, x.a_type, x.lda, x.b,
            x.b_type, x.ldb, x.beta, x.c, x.c_type, x.ldc, x.d, x.d_type, x.ldd, x.compute, x.algo,
            x.solution, x.flags,
        )
    }
}

/// Makes a `gemm_strided_batched_ex` call from `x`, the strides of a/b/c/d and the batch.
#[inline(always)]
fn call_strided_ex<I: Int>(
    f: GemmStridedBatchedExFn<I>,
    x: &ExArgs<I>,
    [sa, sb, sc, sd]: [i64; 4],
    batch: I,
) -> Status {
    // SAFETY: forwarding a caller's (or a re-issued typed) call to the real function.
    unsafe {
        f(
            x.handle, x.trans_a, x.trans_b, x.m, x.n, x.k, x.alpha, x.a, x.a_type, x.lda, sa, x.b,
            x.b_type, x.ldb, sb, x.beta, x.c, x.c_type, x.ldc, sc, x.d, x.d_type, x.ldd, sd, batch,
            x.compute, x.algo, x.solution, x.flags,
        )
    }
}

/// `rocblas_gemm_batched_ex` and `_64` (a/b/c/d are device arrays of pointers).
#[inline(always)]
pub fn gemm_batched_ex<I: Int>(real: Option<GemmBatchedExFn<I>>, x: ExArgs<I>, batch: I) -> Status {
    let Some(f) = real else {
        return STATUS_NOT_IMPLEMENTED;
    };
    serve(
        || x.batched_key(Batching::PointerArray, batch.into(), [0; 4]),
        caller_chose(x.algo, x.flags),
        x.handle,
        |route| {
            let x = x.routed(route);
            // SAFETY: forwarding the caller's arguments to the real function.
            unsafe {
                f(
                    x.handle, x.trans_a, x.trans_b, x.m, x.n, x.k, x.alpha, x.a, x.a_type, x.lda,
                    x.b, x.b_type, x.ldb, x.beta, x.c, x.c_type, x.ldc, x.d, x.d_type, x.ldd,
                    batch, x.compute, x.algo, x.solution, x.flags,
                )
            }
        },
    )
}

/// `rocblas_gemm_strided_batched_ex` and `_64`.
#[inline(always)]
pub fn gemm_strided_batched_ex<I: Int>(
    real: Option<GemmStridedBatchedExFn<I>>,
    x: ExArgs<I>,
    strides: [i64; 4],
    batch: I,
) -> Status {
    let Some(f) = real else {
        return STATUS_NOT_IMPLEMENTED;
    };
    serve(
        || x.batched_key(Batching::Strided, batch.into(), strides),
        caller_chose(x.algo, x.flags),
        x.handle,
        |route| call_strided_ex(f, &x.routed(route), strides, batch),
    )
}

/// The arguments of `rocblas_hgemm` / `rocblas_sgemm` (and their strided-batched forms,
/// with `strides` and `batch`).
#[derive(Clone, Copy)]
pub struct TypedArgs<I> {
    pub handle: Handle,
    pub trans_a: Operation,
    pub trans_b: Operation,
    pub m: I,
    pub n: I,
    pub k: I,
    pub alpha: *const c_void,
    pub a: *const c_void,
    pub lda: I,
    pub b: *const c_void,
    pub ldb: I,
    pub beta: *const c_void,
    pub c: *mut c_void,
    pub ldc: I,
}

impl<I: Int> TypedArgs<I> {
    /// The same problem as a `gemm_ex` call with the function's fixed types (d = c).
    #[inline(always)]
    fn as_ex(&self, types: Types, route: Route) -> ExArgs<I> {
        let (algo, solution, flags) = match route {
            Route::Original => (ALGO_STANDARD, 0, FLAG_NONE),
            Route::Tuned(id) => (ALGO_SOLUTION_INDEX, id, FLAG_NONE),
            Route::Check(id) => (ALGO_SOLUTION_INDEX, id, FLAG_CHECK_SOLUTION_INDEX),
        };
        ExArgs {
            handle: self.handle,
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            m: self.m,
            n: self.n,
            k: self.k,
            alpha: self.alpha,
            a: self.a,
            a_type: types.a,
            lda: self.lda,
            b: self.b,
            b_type: types.b,
            ldb: self.ldb,
            beta: self.beta,
            c: self.c,
            c_type: types.c,
            ldc: self.ldc,
            d: self.c,
            d_type: types.d,
            ldd: self.ldc,
            compute: types.compute,
            algo,
            solution,
            flags,
        }
    }
}

/// Which `gemm_ex` entry re-issues a typed call of width `I`.
pub trait ExEntries: Int {
    fn gemm_ex() -> Option<GemmExFn<Self>>;
    fn gemm_strided_batched_ex() -> Option<GemmStridedBatchedExFn<Self>>;
}
impl ExEntries for i32 {
    fn gemm_ex() -> Option<GemmExFn<i32>> {
        HOOKS.gemm_ex()
    }
    fn gemm_strided_batched_ex() -> Option<GemmStridedBatchedExFn<i32>> {
        HOOKS.gemm_strided_batched_ex()
    }
}
impl ExEntries for i64 {
    fn gemm_ex() -> Option<GemmExFn<i64>> {
        HOOKS.gemm_ex_64()
    }
    fn gemm_strided_batched_ex() -> Option<GemmStridedBatchedExFn<i64>> {
        HOOKS.gemm_strided_batched_ex_64()
    }
}

/// `rocblas_hgemm` / `rocblas_sgemm` (and `_64`): a tuned row is served by re-issuing the
/// call as `gemm_ex` with the same types, since the typed API takes no solution index.
#[inline(always)]
pub fn typed_gemm<I: ExEntries>(
    real: Option<TypedGemmFn<I>>,
    types: Types,
    x: TypedArgs<I>,
) -> Status {
    let Some(f) = real else {
        return STATUS_NOT_IMPLEMENTED;
    };
    serve(
        || {
            let e = x.as_ex(types, Route::Original);
            single_key(x.trans_a, x.trans_b, types, e.dims(), FLAG_NONE)
        },
        false,
        x.handle,
        |route| match route {
            // SAFETY: forwarding the caller's arguments to the real function.
            Route::Original => unsafe {
                f(
                    x.handle, x.trans_a, x.trans_b, x.m, x.n, x.k, x.alpha, x.a, x.lda, x.b, x.ldb,
                    x.beta, x.c, x.ldc,
                )
            },
            Route::Tuned(_) | Route::Check(_) => I::gemm_ex().map_or(STATUS_NOT_IMPLEMENTED, |g| {
                call_ex(g, &x.as_ex(types, route))
            }),
        },
    )
}

/// `rocblas_hgemm_strided_batched` / `rocblas_sgemm_strided_batched` (and `_64`).
#[inline(always)]
pub fn typed_gemm_strided_batched<I: ExEntries>(
    real: Option<TypedGemmStridedBatchedFn<I>>,
    types: Types,
    x: TypedArgs<I>,
    [sa, sb, sc]: [i64; 3],
    batch: I,
) -> Status {
    let Some(f) = real else {
        return STATUS_NOT_IMPLEMENTED;
    };
    serve(
        || {
            let e = x.as_ex(types, Route::Original);
            batched_key(
                x.trans_a,
                x.trans_b,
                types,
                e.dims(),
                Batching::Strided,
                batch.into(),
                [sa, sb, sc, sc],
                FLAG_NONE,
            )
        },
        false,
        x.handle,
        |route| match route {
            // SAFETY: forwarding the caller's arguments to the real function.
            Route::Original => unsafe {
                f(
                    x.handle, x.trans_a, x.trans_b, x.m, x.n, x.k, x.alpha, x.a, x.lda, sa, x.b,
                    x.ldb, sb, x.beta, x.c, x.ldc, sc, batch,
                )
            },
            Route::Tuned(_) | Route::Check(_) => I::gemm_strided_batched_ex()
                .map_or(STATUS_NOT_IMPLEMENTED, |g| {
                    call_strided_ex(g, &x.as_ex(types, route), [sa, sb, sc, sc], batch)
                }),
        },
    )
}
