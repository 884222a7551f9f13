//! Near-shape serving, all of it in one place: a missed problem may take the row of the
//! same layer at the nearest tuned token count, once that solution is validated for the
//! exact problem (`check_solution_index`).
//!
//! - The rule (which row is nearest, within `TUNEDBLAS_NEAR` tokens) is the core's
//!   [`NearIndex`], shared with `tunedblas coverage` and `report`, which predict it.
//! - The state: [`Verdicts`], per (device, key) what was decided, on the one claim-map
//!   primitive ([`ClaimMap`], as the miss set's segments), so the validation runs once per
//!   key; and a copy of each final verdict in the key's miss-set note, so a repeated miss
//!   reads it with the probe that counts it and never asks the verdict map again.
//! - The serve path: [`Near::step`] on a miss (from `serve.rs`), [`serve`] for a call
//!   planned as [`NearPlan`]: validate, serve, or refuse the key for good.
//!
//! The exact shape is still recorded as a miss by the caller: near serving is a stopgap,
//! the miss log is what gets it a row of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tunedblas_core::abi::*;
use tunedblas_core::claim_map::{hash_of, ClaimMap, Probe};
use tunedblas_core::key::{ProblemKey, Types};
use tunedblas_core::misslog::MissSet;
use tunedblas_core::near::{NearChoice, NearIndex};
use tunedblas_core::rocblas::single_key_unchecked;
use tunedblas_core::table::{Action, Table};
use tunedblas_core::tunableop;

use super::serve::{call_ex, ExArgs, Int, Route};
use super::{current_device, RocblasRuntime};
use crate::log::{debug, info};
use crate::recorder::MISS_CAPACITY;
use crate::stats::{bump, Counter};

/// Near-shape serving for one runtime: one index per distinct table, and the verdict per
/// missed key.
pub struct Near {
    window: i64,
    indexes: Vec<(Arc<Table>, NearIndex)>,
    verdicts: Verdicts,
}

/// A call to serve from the nearest token count's row: the solution, and its verdict slot
/// with a bit saying whether it must be validated first. Eight bytes, so the whole
/// decision is returned in two registers (a 40-byte variant made the hot path return it
/// through memory and cost the served path ~5 ns, docs/benchmarks/history.md).
pub struct NearPlan {
    id: i32,
    slot_and_validate: u32,
}

impl NearPlan {
    fn new(id: i32, slot: usize, validate: bool) -> NearPlan {
        NearPlan {
            id,
            slot_and_validate: (slot as u32) << 1 | validate as u32,
        }
    }
}

/// A final near verdict as a miss-set note (0 is "no note"): pass, or serve this solution
/// with this verdict slot. `None` for a pending verdict, which is never noted.
const NOTE_PASS: u64 = 1 << 62;
const NOTE_SERVE: u64 = 2 << 62;

fn note_of(slot: usize, v: Verdict) -> Option<u64> {
    match v {
        Verdict::Pending => None,
        Verdict::None | Verdict::Refused => Some(NOTE_PASS),
        // Verdict slots are below the map's capacity (MISS_CAPACITY), far below 2^30.
        Verdict::Serve(id) => {
            (slot < 1 << 30).then(|| NOTE_SERVE | (slot as u64) << 32 | u64::from(id as u32))
        }
    }
}

/// Whether a miss-set note says the shape is served near (its calls are counted as near,
/// not missed, in every view: `tally.rs`).
pub fn served_near(note: u64) -> bool {
    note & (3 << 62) == NOTE_SERVE
}

/// What a note says: `None` for no note, `Some(None)` pass, `Some(Some(plan))` serve.
/// A pass is tested first: it is what a repeated miss reads (2 instructions,
/// docs/benchmarks/history.md). `note_of` writes no other tag than these; the fourth is the `*`
/// rows'.
#[inline(always)]
fn plan_of_note(note: u64) -> Option<Option<NearPlan>> {
    match note >> 62 {
        1 => Some(None),
        2 => Some(Some(NearPlan::new(
            note as u32 as i32,
            (note >> 32) as usize & ((1 << 30) - 1),
            false,
        ))),
        // No note, or a shape served by a `*` row (`tally::SERVED_BY_PATTERN`): no verdict.
        _ => None,
    }
}

impl Near {
    /// Near serving over `tables` within `window` tokens; `None` when it is off or no table
    /// has a row it could take.
    pub fn build(tables: Vec<Arc<Table>>, window: i64) -> Option<Near> {
        if window <= 0 {
            return None;
        }
        let indexes: Vec<(Arc<Table>, NearIndex)> = tables
            .into_iter()
            .map(|t| {
                let ix = NearIndex::new(&t);
                (t, ix)
            })
            .collect();
        if indexes.iter().all(|(_, ix)| ix.families() == 0) {
            return None;
        }
        // 2.5 MB of verdicts: under an address-space limit (`ulimit -v`) it may not be had,
        // and an infallible allocation would abort the host; near serving is then off.
        let Some(verdicts) = Verdicts::try_with_capacity(MISS_CAPACITY) else {
            info!("no memory for near-shape serving (an address-space limit?): it is off");
            return None;
        };
        debug!("near-shape serving within {window} tokens");
        Some(Near {
            window,
            indexes,
            verdicts,
        })
    }

    /// The near path for a key on `device` that has no row in `table`: `None` passes the
    /// call (nothing near, not decided yet, or refused). The miss was recorded apart in
    /// `misses`, which answered `noted` (the key's slot and note); `hash` is the key's
    /// [`ProblemKey::lookup_hash`], reused for the verdict map.
    ///
    /// A final verdict (serve, none, refused) is copied into the key's miss-set slot, so a
    /// repeated miss reads it with the probe that counts it and never asks the verdict map
    /// again. The map stays the authority: it claims keys, holds verdicts while one is
    /// pending, and holds keys the miss set has no room for.
    #[inline]
    pub fn step(
        &self,
        misses: &MissSet<ProblemKey>,
        device: i32,
        table: Option<&Table>,
        key: &ProblemKey,
        hash: u64,
        noted: Option<(usize, u64)>,
    ) -> Option<NearPlan> {
        if let Some(plan) = noted.and_then(|(_, note)| plan_of_note(note)) {
            return plan;
        }
        self.unnoted(
            misses,
            device,
            table,
            key,
            hash,
            noted.map(|(slot, _)| slot),
        )
    }

    /// [`Near::step`] for a key whose verdict is not in its miss-set slot (yet).
    #[cold]
    #[inline(never)]
    fn unnoted(
        &self,
        misses: &MissSet<ProblemKey>,
        device: i32,
        table: Option<&Table>,
        key: &ProblemKey,
        hash: u64,
        miss_slot: Option<usize>,
    ) -> Option<NearPlan> {
        let table = table?;
        let _errno = crate::lifecycle::KeepErrno::new();
        let note = |slot: usize, v: Verdict| {
            if let (Some(m), Some(n)) = (miss_slot, note_of(slot, v)) {
                misses.note_if_unset(m, n);
            }
        };
        match self.verdicts.get_or_claim_hashed(device, key, hash) {
            Claim::Known(slot, v) => {
                note(slot, v);
                match v {
                    Verdict::Serve(id) => Some(NearPlan::new(id, slot, false)),
                    _ => None,
                }
            }
            Claim::Full => None,
            Claim::Mine(slot) => {
                let usable = match self.choice(table, key) {
                    NearChoice::Try(_, id) => Some(id),
                    _ => None,
                };
                match usable {
                    Some(id) => Some(NearPlan::new(id, slot, true)),
                    None => {
                        self.verdicts.set(slot, Verdict::None);
                        note(slot, Verdict::None);
                        None
                    }
                }
            }
        }
    }

    /// What the rule serves `key` with from `table` (the core's decision, which `report`
    /// shows).
    fn choice(&self, table: &Table, key: &ProblemKey) -> NearChoice {
        self.indexes
            .iter()
            .find(|(t, _)| std::ptr::eq(&**t, table))
            .map_or(NearChoice::Nothing, |(_, ix)| {
                ix.servable(table, key, self.window)
            })
    }

    /// The row the rule picks for `key` in `table`: (token count, action).
    fn nearest(&self, table: &Table, key: &ProblemKey) -> Option<(i64, Action)> {
        self.indexes
            .iter()
            .find(|(t, _)| std::ptr::eq(&**t, table))
            .and_then(|(_, ix)| ix.nearest(key, self.window))
    }

    /// Records whether the near solution of verdict `slot` may serve `key` (on the calling
    /// thread's device) from now on, in the verdict map and in the key's miss-set slot.
    /// A refusal replaces whatever note is there; other verdicts only fill an empty one
    /// (a refusal is final, so a late copy of an older verdict can never hide it).
    fn outcome(&self, misses: &MissSet<ProblemKey>, key: &ProblemKey, slot: usize, v: Verdict) {
        self.verdicts.set(slot, v);
        let Some(note) = note_of(slot, v) else {
            return;
        };
        if let Some(m) = misses.find(current_device(), key, key.lookup_hash()) {
            if v == Verdict::Refused {
                misses.set_note(m, note);
            } else {
                misses.note_if_unset(m, note);
            }
        }
    }

    /// How many keys hold each verdict: (served, refused, none).
    pub fn tally(&self) -> (usize, usize, usize) {
        self.verdicts.tally()
    }

    /// In a fork child: the child decides again.
    ///
    /// # Safety
    /// Only from the fork child handler, with no other thread alive.
    pub unsafe fn after_fork(&self) {
        // SAFETY: per the caller.
        unsafe { self.verdicts.reset() };
    }
}

/// Makes a call planned as a [`NearPlan`]; `key` is the call's key (for messages and the
/// miss-set note).
pub fn serve(
    plan: NearPlan,
    key: impl FnOnce() -> Option<ProblemKey>,
    call: impl Fn(Route) -> Status,
) -> Status {
    let key = key().unwrap_or_else(unreachable_key);
    let Some(rt) = super::get() else {
        return call(Route::Original);
    };
    let Some(near) = &rt.near else {
        return call(Route::Original);
    };
    let slot = (plan.slot_and_validate >> 1) as usize;
    let validate = plan.slot_and_validate & 1 != 0;
    near_call(rt, near, plan.id, slot, validate, &key, &call)
}

/// [`serve`] for a `gemm_ex` call (the export's fast path hands its arguments over here).
#[cold]
#[inline(never)]
pub fn serve_ex<I: Int>(plan: NearPlan, f: GemmExFn<I>, x: ExArgs<I>) -> Status {
    serve(
        plan,
        || single_key_unchecked(x.trans_a, x.trans_b, x.types(), x.dims(), x.flags),
        |route| call_ex(f, &x.routed(route)),
    )
}

/// Serves a call from the nearest token count's row: validates the solution for this exact
/// problem first if nobody has (`validate` is set), and never uses it again for this key if
/// validation or the call fails.
#[cold]
#[inline(never)]
fn near_call(
    rt: &'static RocblasRuntime,
    near: &Near,
    id: i32,
    slot: usize,
    validate: bool,
    key: &ProblemKey,
    call: &impl Fn(Route) -> Status,
) -> Status {
    if validate {
        let status = call(Route::Check(id));
        if status != STATUS_SUCCESS {
            near.outcome(&rt.misses.set, key, slot, Verdict::Refused);
            let (op, sig) = tunableop::op_and_signature(key);
            let from = rt
                .table()
                .and_then(|t| near.nearest(t, key))
                .map_or_else(|| "?".to_string(), |(f, _)| f.to_string());
            debug!(
                "near: solution {id} of the row at {from} tokens cannot solve {op},{sig} (rocBLAS status {status}); the heuristic serves it"
            );
            bump(Counter::Missed);
            return call(Route::Original);
        }
        near.outcome(&rt.misses.set, key, slot, Verdict::Serve(id));
        if crate::log::enabled(crate::log::DEBUG) {
            let (op, sig) = tunableop::op_and_signature(key);
            let from = rt
                .table()
                .and_then(|t| near.nearest(t, key))
                .map_or_else(|| "?".to_string(), |(f, _)| f.to_string());
            debug!("near: {op},{sig} served with solution {id}, from the row at {from} tokens");
        }
    }
    let status = call(Route::Tuned(id));
    if status == STATUS_SUCCESS {
        bump(Counter::Near);
        return status;
    }
    near.outcome(&rt.misses.set, key, slot, Verdict::Refused);
    let (op, sig) = tunableop::op_and_signature(key);
    info!(
        "near: solution {id} passed validation for {op},{sig} but the call failed with rocBLAS status {status}; the caller's own call is made instead, and near serving is off for this shape"
    );
    // Not served near, and the shape has no row: a missed call (as every view counts its
    // shape's calls, `tally.rs`), not a fallback from a row.
    bump(Counter::Missed);
    call(Route::Original)
}

/// Never used: a call planned for near serving had a key. A harmless stand-in rather than a
/// panic, since this runs outside the unwinding guard.
#[cold]
fn unreachable_key() -> ProblemKey {
    ProblemKey::single(
        tunedblas_core::key::Trans::N,
        tunedblas_core::key::Trans::N,
        Types::SGEMM,
        0,
        0,
        0,
        1,
        1,
        1,
        1,
        0,
    )
}

/// What was decided for a missed key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Claimed by a thread that is deciding right now: pass this call through.
    Pending,
    /// No near row (or the nearest is `Default`): the heuristic, as for any miss.
    None,
    /// The near solution failed validation or a call: never again for this key.
    Refused,
    /// Serve this solution index.
    Serve(i32),
}

const PENDING: u64 = 0;
const NONE: u64 = 1;
const REFUSED: u64 = 2;
const SERVE: u64 = 3 << 32;

fn encode(v: Verdict) -> u64 {
    match v {
        Verdict::Pending => PENDING,
        Verdict::None => NONE,
        Verdict::Refused => REFUSED,
        Verdict::Serve(id) => SERVE | u64::from(id as u32),
    }
}

fn decode(x: u64) -> Verdict {
    match x {
        PENDING => Verdict::Pending,
        NONE => Verdict::None,
        REFUSED => Verdict::Refused,
        _ => Verdict::Serve(x as u32 as i32),
    }
}

/// What [`Verdicts::get_or_claim`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Already decided (or being decided: [`Verdict::Pending`]).
    Known(usize, Verdict),
    /// First sight: the caller decides and stores the verdict in this slot with [`Verdicts::set`].
    Mine(usize),
    /// No room: treat as no near row.
    Full,
}

/// The longest probe for a key; past it the map is treated as full.
const MAX_PROBE: usize = 128;

/// Lock-free (device, key) -> [`Verdict`] map of fixed capacity: a
/// [`crate::claim_map::ClaimMap`] with a verdict per slot.
pub struct Verdicts(ClaimMap<ProblemKey, AtomicU64>);

impl Verdicts {
    /// Room for `capacity` keys (rounded up to a power of two).
    #[cfg(test)]
    pub fn with_capacity(capacity: usize) -> Verdicts {
        Verdicts::try_with_capacity(capacity).expect("memory for the verdicts")
    }

    /// [`Verdicts::with_capacity`], or `None` where the memory cannot be had.
    pub fn try_with_capacity(capacity: usize) -> Option<Verdicts> {
        const { assert!(PENDING == 0) };
        ClaimMap::try_new(capacity, MAX_PROBE).map(Verdicts)
    }

    /// The verdict for (device, key), or the right to decide it.
    #[cfg(test)]
    fn get_or_claim(&self, device: i32, key: &ProblemKey) -> Claim {
        self.get_or_claim_hashed(device, key, key.lookup_hash())
    }

    /// [`Verdicts::get_or_claim`] with the key's lookup hash already computed: a repeated
    /// miss asks this on every call, so it reuses the hash of the table lookup.
    pub fn get_or_claim_hashed(&self, device: i32, key: &ProblemKey, key_hash: u64) -> Claim {
        let hash = hash_of(device, key_hash);
        let pending = |v: &AtomicU64| v.store(PENDING, Ordering::Relaxed);
        match self.0.probe(hash, device, key, || true, pending) {
            Probe::Found(i, v) => Claim::Known(i, decode(v.load(Ordering::Acquire))),
            Probe::Claimed(i, _) => Claim::Mine(i),
            // Bounded: a full map answers `Full` after a short probe.
            Probe::Absent => Claim::Full,
        }
    }

    /// Stores the verdict of a slot returned by [`Verdicts::get_or_claim`].
    pub fn set(&self, slot: usize, v: Verdict) {
        if slot < self.0.slots() {
            self.0.value(slot).store(encode(v), Ordering::Release);
        }
    }

    /// How many keys hold each verdict: (served, refused, none).
    pub fn tally(&self) -> (usize, usize, usize) {
        let mut t = (0, 0, 0);
        self.0
            .for_each(|_, _, _, v| match decode(v.load(Ordering::Acquire)) {
                Verdict::Serve(_) => t.0 += 1,
                Verdict::Refused => t.1 += 1,
                Verdict::None => t.2 += 1,
                Verdict::Pending => {}
            });
        t
    }

    /// Forgets everything. Only for a freshly forked child, where no other thread exists.
    ///
    /// # Safety
    /// No other thread may use the map concurrently.
    pub unsafe fn reset(&self) {
        // SAFETY: per the caller.
        unsafe { self.0.reset() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linear(n_out: i64, tokens: i64, k: i64) -> ProblemKey {
        ProblemKey::linear(Types::HALF, n_out, tokens, k)
    }

    #[test]
    fn verdicts_are_claimed_once_and_read_after() {
        let v = Verdicts::with_capacity(8);
        let k = linear(64, 513, 32);
        let Claim::Mine(slot) = v.get_or_claim(0, &k) else {
            panic!("first sight claims")
        };
        assert_eq!(v.get_or_claim(0, &k), Claim::Known(slot, Verdict::Pending));
        v.set(slot, Verdict::Serve(-1086327687));
        assert_eq!(
            v.get_or_claim(0, &k),
            Claim::Known(slot, Verdict::Serve(-1086327687))
        );
        assert!(
            matches!(v.get_or_claim(1, &k), Claim::Mine(_)),
            "per device"
        );
        v.set(slot, Verdict::Refused);
        assert_eq!(v.get_or_claim(0, &k), Claim::Known(slot, Verdict::Refused));
        assert_eq!(v.tally(), (0, 1, 0));
        for id in [i32::MIN, -2, -1, 0, 1, i32::MAX] {
            assert_eq!(decode(encode(Verdict::Serve(id))), Verdict::Serve(id));
        }
    }

    #[test]
    fn full_map_and_threads() {
        let v = Verdicts::with_capacity(2);
        assert!(matches!(
            v.get_or_claim(0, &linear(1, 1, 1)),
            Claim::Mine(_)
        ));
        assert!(matches!(
            v.get_or_claim(0, &linear(1, 2, 1)),
            Claim::Mine(_)
        ));
        assert_eq!(v.get_or_claim(0, &linear(1, 3, 1)), Claim::Full);

        let v = Arc::new(Verdicts::with_capacity(256));
        let mine = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (v, mine) = (v.clone(), mine.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        for n in 0..50 {
                            if let Claim::Mine(s) = v.get_or_claim(0, &linear(8, n, 8)) {
                                mine.fetch_add(1, Ordering::Relaxed);
                                v.set(s, Verdict::None);
                            }
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(
            mine.load(Ordering::Relaxed),
            50,
            "each key decided exactly once"
        );
        assert_eq!(v.tally(), (0, 0, 50));
    }

    #[test]
    fn notes_carry_final_verdicts_only() {
        assert_eq!(
            note_of(3, Verdict::Pending),
            None,
            "a pending verdict is never noted"
        );
        assert!(plan_of_note(0).is_none(), "no note");
        for v in [Verdict::None, Verdict::Refused] {
            let note = note_of(3, v).unwrap();
            assert!(matches!(plan_of_note(note), Some(None)), "{v:?} passes");
        }
        let note = note_of(5, Verdict::Serve(-7)).unwrap();
        let Some(Some(plan)) = plan_of_note(note) else {
            panic!("a served verdict serves")
        };
        assert_eq!(
            (plan.id, plan.slot_and_validate),
            (-7, 5 << 1),
            "no validation again"
        );
    }
}
