//! The serving path of one Lt matmul call, for either library: the decision (the key, the
//! row, the rebuilt algorithm once per key), the tuned call, and the caller's own call when
//! the tuned one fails.
//!
//! A row is quarantined for the process only after its second failure (rebuild, check, or
//! a tuned call that the caller's own algorithm then made fine): a caller destroying a
//! descriptor while another thread passes it to a matmul (the caller's bug) makes a good
//! row fail once, and must not take it out of service. A tuned call that fails when the
//! caller's own call then fails too is the call's failure, not the row's. A key that no
//! caller could have made (read from a destroyed descriptor) is passed through, not
//! recorded as a miss.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use tunedblas_core::cublaslt::*;
use tunedblas_core::misslog::{self, Sight};

use super::{Lt, LtCall, LtRuntime, LtSpec};
use crate::lifecycle::NoCancel;
use crate::log::{debug, info};
use crate::stats::bump;

/// What one Lt library supplies to the shared serving path. The items that only name the
/// backend's statics and types come from [`library_statics!`]; a backend writes its own
/// `prepare` (and `call_class`).
pub trait Library: 'static {
    /// The real matmul (cuBLASLt's or hipBLASLt's 16 arguments).
    type Matmul: Copy;

    /// The backend's state (runtime, recorder, serving switch).
    const STATE: &'static Lt;
    /// The runtime, started on first use; `None` while there is none (off, no library).
    fn runtime() -> Option<&'static LtRuntime>;
    /// For a handle of another build of the library (`libs.rs`): that build's own matmul
    /// (`Some(None)` if it has none). `None` for a handle of the served build.
    fn other_build(handle: *mut c_void) -> Option<Option<Self::Matmul>>;
    /// The served build's matmul.
    fn real() -> Option<Self::Matmul>;
    /// Calls `f` with the caller's arguments and `algo`.
    ///
    /// # Safety
    /// `x` holds a caller's arguments; `algo` NULL, the caller's, or one this library made.
    unsafe fn call(f: Self::Matmul, x: &LtCall, algo: *const c_void) -> LtStatus;
    /// The call key of a call (`lt::key::call_key`): four words read, no library call. A
    /// key that matches no row (objects unknown or not packed, a call the key cannot
    /// describe) sends the call the long way, [`Library::read_key`].
    fn call_key(x: &LtCall) -> CallKey;
    /// The key of a call, or `None` when it is not one tunedblas serves.
    ///
    /// # Safety
    /// `x` holds a caller's live descriptors.
    unsafe fn read_key(x: &LtCall) -> Option<LtKey>;
    /// Rebuilds a tuned row's algorithm and checks it against this call; why not, when it
    /// cannot be used (the serving path says so).
    ///
    /// # Safety
    /// `x` holds a caller's live handle and descriptors.
    unsafe fn prepare(x: &LtCall, key: &LtKey, action: &LtAction) -> Result<Prepared, String>;
    /// The class of a call a rebuilt algorithm is valid for beyond its key (hipBLASLt:
    /// alpha and beta at 1 or 0, which its kernels may be specialised on); a row's
    /// algorithm serves only calls of the class it was checked with.
    ///
    /// # Safety
    /// `x` holds a caller's arguments.
    #[inline]
    unsafe fn call_class(_x: &LtCall, _key: &LtKey) -> u8 {
        0
    }
}

enum Decision {
    Pass,
    /// The row's rebuilt algorithm (kept in its entry), the entry and the backend's `LtSpec`
    /// (all the call needs after it: its counters and name). By reference: the algorithm
    /// and key by value made the decision 216 bytes.
    Tuned(&'static MatmulAlgo, &'static LtEntry, &'static LtSpec),
}

/// Serves one intercepted matmul. See the module docs.
///
/// # Safety
/// The arguments are a caller's matmul arguments.
pub unsafe fn matmul<L: Library>(x: &LtCall) -> LtStatus {
    if let Some(other) = L::other_build(x.handle) {
        // A handle of another build: its own function, untouched.
        let Some(real) = other else {
            return STATUS_NOT_INITIALIZED;
        };
        if let Some(rt) = L::runtime() {
            bump(rt.spec.counters.passed_through);
        }
        // SAFETY: the caller's own arguments, to the build its handle came from.
        return unsafe { L::call(real, x, x.algo) };
    }
    let Some(real) = L::real() else {
        // No such library in this process: the caller could not have made a valid call.
        return STATUS_NOT_INITIALIZED;
    };
    let decision = match catch_unwind(AssertUnwindSafe(|| decide::<L>(x))) {
        Ok(d) => d,
        Err(_) => {
            L::STATE.latch_off("a panic while choosing an algorithm");
            if let Some(rt) = L::STATE.runtime.peek() {
                bump(rt.spec.counters.passed_through);
            }
            Decision::Pass
        }
    };
    match decision {
        Decision::Pass => unsafe { L::call(real, x, x.algo) },
        Decision::Tuned(algo, entry, spec) => {
            let status = unsafe { L::call(real, x, (algo as *const MatmulAlgo).cast()) };
            let c = &spec.counters;
            if status == STATUS_SUCCESS {
                bump(c.served);
                return status;
            }
            bump(c.fallbacks);
            let own = unsafe { L::call(real, x, x.algo) };
            tuned_call_failed::<L>(x, entry, spec, status, own);
            own
        }
    }
}

/// A tuned call failed with `status` and the caller's own call then returned `own`: a
/// failure counted against the row when the caller's call went fine (said at debug the
/// first time, and once when it quarantines the row).
#[cold]
#[inline(never)]
fn tuned_call_failed<L: Library>(
    x: &LtCall,
    entry: &LtEntry,
    spec: &LtSpec,
    status: LtStatus,
    own: LtStatus,
) {
    let lib = spec.lib.name();
    let solution = entry.action.solution_text();
    let key = || {
        // SAFETY: the caller's descriptors, as when the key was read for the lookup.
        let key = unsafe { L::read_key(x) };
        key.as_ref().map_or_else(Default::default, op_and_signature)
    };
    if own != STATUS_SUCCESS {
        debug!(
            "{lib}: {solution} failed with status {status} and the caller's own algorithm with {own}: the call's failure, not the row's"
        );
        return;
    }
    match entry.failed() {
        Strike::First => {
            let (op, sig) = key();
            debug!(
                "{lib}: {solution} for {op},{sig} failed with status {status}; the caller's own algorithm ran; the row is tried again on a later call and quarantined if it fails again"
            );
        }
        Strike::Quarantined => {
            let (op, sig) = key();
            info!(
                "{lib}: {solution} for {op},{sig} failed with status {status}; the row is quarantined for this process and the caller's own algorithm is used (re-tune this build)"
            );
        }
        Strike::Already => {}
    }
}

/// A row's algorithm could not be rebuilt or checked for this call (`why`): the first
/// time said at debug and the row tried again on a later call; the second time said once
/// and the row quarantined.
#[cold]
#[inline(never)]
fn prepare_failed(lib: LtLib, entry: &LtEntry, key: &LtKey, why: &str) {
    let solution = entry.action.solution_text();
    match entry.failed() {
        Strike::First => {
            let (op, sig) = op_and_signature(key);
            debug!(
                "{}: {solution} for {op},{sig} cannot be used now: {why}; tried again on a later call",
                lib.name()
            );
        }
        Strike::Quarantined => cannot_use(lib, &solution, key, why),
        Strike::Already => {}
    }
}

fn decide<L: Library>(x: &LtCall) -> Decision {
    let Some(rt) = L::runtime() else {
        // The runtime is starting up and this call passes through rather than wait, or it
        // put the start-up off (on an alternate signal stack; `lifecycle::Lazy`): counted,
        // as the runtime's own passes are.
        if L::STATE.runtime.starting() {
            bump(L::STATE.spec.counters.passed_through);
        }
        return Decision::Pass;
    };
    let c = &rt.spec.counters;
    if !L::STATE.serving() {
        bump(c.passed_through);
        return Decision::Pass;
    }
    // A row's call key: four words and one small lookup (`call_key.rs`); a call key that
    // missed before, its key and hash from the table's misses.
    let call = L::call_key(x);
    if let Some(t) = L::STATE.rows.table(rt.spec) {
        if let Some((key, e)) = t.get_call(&call) {
            return row::<L>(x, rt, key, e);
        }
        if let Some((key, hash)) = t.misses.get(&call) {
            return missed(x, rt, key, hash);
        }
    }
    decide_long::<L>(x, rt, call)
}

/// [`decide`] for a call whose call key names no row and missed no time before: its key
/// from the objects' words (or cuBLASLt's getters), the table, the miss set (and, for the
/// next time, the table's misses).
#[inline(never)]
fn decide_long<L: Library>(x: &LtCall, rt: &'static LtRuntime, call: CallKey) -> Decision {
    let call = &call;
    let c = &rt.spec.counters;
    let table = rt.table();
    // SAFETY: the descriptors are the caller's, valid for the duration of the call.
    let Some(key) = (unsafe { L::read_key(x) }) else {
        bump(c.passed_through);
        return Decision::Pass;
    };
    // The key's own row, else a matching `*` row (PyTorch's rule, in the core's table: a
    // call served from a `*` row takes this long path every time, and its exact shape is
    // recorded, to get a row of its own).
    if let Some(t) = table {
        if let Some(e) = t.get(&key) {
            return row::<L>(x, rt, &key, e);
        }
        if let Some(e) = t.get_wildcard(&key) {
            rt.served_by_pattern(&key);
            return row::<L>(x, rt, &key, e);
        }
    }
    let hash = misslog::key_hash(&key);
    let decision = missed(x, rt, &key, hash);
    if let (Some(t), Decision::Pass) = (table, &decision) {
        if key.plausible().is_ok() {
            t.misses.keep(call, &key, hash);
        }
    }
    decision
}

/// A call whose key (hashed `hash`) has no row: recorded, or passed through when no caller
/// could have made its key.
#[inline]
fn missed(x: &LtCall, rt: &'static LtRuntime, key: &LtKey, hash: u64) -> Decision {
    let spec = rt.spec;
    let c = &spec.counters;
    match rt.miss(key, hash) {
        Sight::Refused => {
            refused(spec.lib, key);
            bump(c.passed_through);
        }
        sight => {
            if sight == Sight::First {
                let (op, sig) = op_and_signature(key);
                debug!(
                    "{}: miss {op},{sig} (caller's workspace {} bytes, algo {})",
                    spec.lib.name(),
                    x.workspace_bytes,
                    if x.algo.is_null() { "NULL" } else { "given" }
                );
            }
            bump(c.missed);
        }
    }
    Decision::Pass
}

/// A call of a row's key: its rebuilt algorithm when the call can take it.
#[inline(always)]
fn row<L: Library>(
    x: &LtCall,
    rt: &'static LtRuntime,
    key: &LtKey,
    e: &'static LtEntry,
) -> Decision {
    let spec = rt.spec;
    let c = &spec.counters;
    if e.is_quarantined() {
        bump(c.passed_through);
        return Decision::Pass;
    }
    e.mark_hit();
    if e.action == LtAction::Default {
        bump(c.default);
        return Decision::Pass;
    }
    // A row served before: its algorithm, checked against this call (the rebuild's
    // closure, and the `Prep` it gives, out of line below).
    if let Some(p) = e.prepared() {
        return ready::<L>(x, key, e, spec, p);
    }
    row_prepare::<L>(x, key, e, spec)
}

/// [`row`] with the row's algorithm: its decision when the call can take it.
#[inline(always)]
fn ready<L: Library>(
    x: &LtCall,
    key: &LtKey,
    e: &'static LtEntry,
    spec: &'static LtSpec,
    p: &'static Prepared,
) -> Decision {
    if p.fits(
        [x.a as usize, x.b as usize, x.c as usize, x.d as usize],
        x.workspace,
        x.workspace_bytes,
    ) && p.class == unsafe { L::call_class(x, key) }
    {
        return Decision::Tuned(&p.algo, e, spec);
    }
    // Less workspace or alignment than the tuned algorithm needs, or a call of another
    // class.
    bump(spec.counters.passed_through);
    Decision::Pass
}

/// [`row`] when the row's algorithm is not made yet.
#[inline(never)]
fn row_prepare<L: Library>(
    x: &LtCall,
    key: &LtKey,
    e: &'static LtEntry,
    spec: &'static LtSpec,
) -> Decision {
    let c = &spec.counters;
    // Once per key (again after a failure), by one caller at a time; with cancellation
    // held off (the rebuild runs library code, and a cancellation acted on there would
    // unwind into `catch_unwind`).
    let prepared = e.prepared_or_try(|| {
        let _no_cancel = NoCancel::new();
        // SAFETY: the descriptors are the caller's, valid for the duration of the call.
        unsafe { L::prepare(x, key, &e.action) }
    });
    match prepared {
        Prep::Ready(p) => ready::<L>(x, key, e, spec, p),
        Prep::Busy => {
            // Another caller is rebuilding the algorithm now.
            bump(c.passed_through);
            Decision::Pass
        }
        Prep::Failed(why) => {
            prepare_failed(spec.lib, e, key, &why);
            bump(c.fallbacks);
            Decision::Pass
        }
    }
}

/// A missed key no caller could have made (`LtKey::plausible`): passed through, not
/// recorded.
#[cold]
#[inline(never)]
fn refused(lib: LtLib, key: &LtKey) {
    if let Err(why) = key.plausible() {
        debug!(
            "{}: passing a call through, not recording it: its key cannot be a caller's ({why}); a descriptor destroyed while in use?",
            lib.name()
        );
    }
}

/// The line for a row whose algorithm cannot be used, quarantined now (said once per
/// key: a row is quarantined once).
pub fn cannot_use(lib: LtLib, solution: &str, key: &LtKey, why: &str) {
    let (op, sig) = op_and_signature(key);
    info!(
        "{}: {solution} for {op},{sig} cannot be used: {why}; the caller's own algorithm runs instead (re-tune this build)",
        lib.name()
    );
}

/// The [`Library`] items that only name a backend's statics and types: its matmul's type,
/// its state (`STATE`), its builds (`libs::BuildRegistry`), its hook table and its `key` module.
/// Written once here, so a backend's `serve.rs` holds only what differs: how a row's
/// algorithm is rebuilt.
macro_rules! library_statics {
    (matmul: $matmul:ty, state: $state:path, builds: $builds:path, hooks: $hooks:path,
     key: $($key:ident)::+) => {
        type Matmul = $matmul;

        const STATE: &'static $crate::lt::Lt = &$state;

        #[inline]
        fn runtime() -> Option<&'static $crate::lt::LtRuntime> {
            $state.runtime.get(|| $state.start())
        }
        #[inline]
        fn other_build(handle: *mut std::ffi::c_void) -> Option<Option<$matmul>> {
            $builds.other_build(handle).map(|other| other.matmul())
        }
        #[inline]
        fn real() -> Option<$matmul> {
            $hooks.matmul()
        }
        #[inline]
        unsafe fn call(
            f: $matmul,
            x: &$crate::lt::LtCall,
            algo: *const std::ffi::c_void,
        ) -> tunedblas_core::cublaslt::LtStatus {
            // SAFETY: per the trait; the library's matmul has the shape of `AnyMatmulFn`.
            unsafe {
                $crate::lt::call(
                    std::mem::transmute::<$matmul, $crate::lt::AnyMatmulFn>(f),
                    x,
                    algo,
                )
            }
        }
        #[inline(always)]
        fn call_key(x: &$crate::lt::LtCall) -> tunedblas_core::cublaslt::CallKey {
            $($key)::+::call_key(x)
        }
        unsafe fn read_key(x: &$crate::lt::LtCall) -> Option<tunedblas_core::cublaslt::LtKey> {
            // SAFETY: per the trait.
            unsafe { $($key)::+::read_key(x) }
        }
    };
}
pub(crate) use library_statics;
