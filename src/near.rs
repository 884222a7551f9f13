//! Near-shape serving: a missed problem may take the row of the same layer at the nearest
//! tuned token count, once that solution is validated for the exact problem.
//!
//! Dynamic shapes (prompt tails, chunk + decode mixes such as `512 + 1..21`) are not worth a
//! row each and no grid enumerates them, yet the solution tuned for the chunk usually fits
//! its neighbours. Two pieces, both off the hit path:
//! - [`NearIndex`]: per family ([`crate::family`]), the token counts that have rows, sorted;
//!   [`NearIndex::nearest`] finds the closest one within a window.
//! - [`Verdicts`]: a fixed-size, lock-free map (device, key) -> what was decided for it, so
//!   the validation (`check_solution_index`) runs once per key and every later call is one
//!   probe. Same open-addressing scheme as [`crate::misslog::MissSet`].
//!
//! The exact shape is still recorded as a miss by the caller: near serving is a stopgap,
//! the miss log is what gets it a row of its own.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rustc_hash::FxHasher;

use crate::family::family_of;
use crate::key::ProblemKey;
use crate::table::{Action, Table};

/// The token window when `TUNEDBLAS_NEAR` is unset. On, because measured on refblas over
/// M = chunk + 1..32 (BENCHMARKS.md, "Near-shape serving") the chunk row's solution, where it
/// validated, beat the heuristic at every such M (0.55x the time) and was never slower;
/// where nothing validates the call is the heuristic anyway.
pub const DEFAULT_WINDOW: i64 = 32;

/// Token counts with rows, per family.
#[derive(Debug, Default)]
pub struct NearIndex {
    by_family: HashMap<ProblemKey, Vec<(i64, Action)>, BuildHasherDefault<FxHasher>>,
}

impl NearIndex {
    /// Indexes the exact rows of `table` (`*` rows already match every token count).
    pub fn new(table: &Table) -> NearIndex {
        let mut ix = NearIndex::default();
        for (key, entry) in table.iter() {
            ix.by_family
                .entry(family_of(key))
                .or_default()
                .push((key.n, entry.action));
        }
        for v in ix.by_family.values_mut() {
            v.sort_by_key(|&(n, _)| n);
        }
        ix
    }

    /// The row nearest to `key`'s token count among rows of its family, at most `window`
    /// tokens away and not the key itself; on a tie the smaller token count (the chunk a
    /// chunk + decode step extends). Returns (token count, action).
    pub fn nearest(&self, key: &ProblemKey, window: i64) -> Option<(i64, Action)> {
        if window <= 0 {
            return None;
        }
        let rows = self.by_family.get(&family_of(key))?;
        let n = key.n;
        let at = rows.partition_point(|&(t, _)| t < n);
        let below = at.checked_sub(1).map(|i| rows[i]);
        let above = rows[at..].iter().find(|&&(t, _)| t != n).copied();
        let best = match (below, above) {
            (Some(b), Some(a)) => {
                if n - b.0 <= a.0 - n {
                    b
                } else {
                    a
                }
            }
            (Some(b), None) => b,
            (None, Some(a)) => a,
            (None, None) => return None,
        };
        ((best.0 - n).abs() <= window).then_some(best)
    }

    pub fn families(&self) -> usize {
        self.by_family.len()
    }
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

const EMPTY: u32 = 0;
const BUSY: u32 = 1;
const READY: u32 = 2;

struct Slot {
    state: AtomicU32,
    hash: AtomicU64,
    verdict: AtomicU64,
    /// Written once by the thread that moved the slot EMPTY -> BUSY, read only after READY.
    entry: UnsafeCell<MaybeUninit<(i32, ProblemKey)>>,
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

/// Lock-free (device, key) -> [`Verdict`] map of fixed capacity.
pub struct Verdicts {
    slots: Box<[Slot]>,
    mask: usize,
}

// SAFETY: `entry` is written only by the thread that won the EMPTY -> BUSY CAS, before a
// Release store of READY, and read only after an Acquire load sees READY.
unsafe impl Sync for Verdicts {}
unsafe impl Send for Verdicts {}

impl Verdicts {
    /// Room for `capacity` keys (rounded up to a power of two).
    pub fn with_capacity(capacity: usize) -> Verdicts {
        let n = capacity.max(2).next_power_of_two();
        const { assert!(EMPTY == 0 && PENDING == 0) };
        // Zeroed by the allocator, as the miss set's slots: an all-zero slot is an empty one,
        // and untouched pages cost neither start-up time nor memory.
        // SAFETY: all-zero bytes are a valid Slot (atomics at 0, `entry` is MaybeUninit).
        let slots = unsafe { crate::misslog::zeroed_slice(n) };
        Verdicts { slots, mask: n - 1 }
    }

    /// The verdict for (device, key), or the right to decide it.
    pub fn get_or_claim(&self, device: i32, key: &ProblemKey) -> Claim {
        self.get_or_claim_hashed(device, key, key.lookup_hash())
    }

    /// [`Verdicts::get_or_claim`] with the key's lookup hash already computed: a repeated
    /// miss asks this on every call, so it reuses the hash of the table lookup.
    pub fn get_or_claim_hashed(&self, device: i32, key: &ProblemKey, key_hash: u64) -> Claim {
        let hash = crate::misslog::hash_of(device, key_hash);
        let mut i = hash as usize & self.mask;
        // Bounded: a full map answers `Full` after a short probe, not a scan of every slot
        // (which made each later call of an over-capacity key cost ~100 µs).
        for _ in 0..self.slots.len().min(MAX_PROBE) {
            let slot = &self.slots[i];
            loop {
                match slot.state.load(Ordering::Acquire) {
                    READY => {
                        if slot.hash.load(Ordering::Relaxed) == hash {
                            // SAFETY: READY observed with Acquire; entry is initialised.
                            let (d, k) = unsafe { (*slot.entry.get()).assume_init_ref() };
                            if *d == device && k.same_as(key) {
                                let v = decode(slot.verdict.load(Ordering::Acquire));
                                return Claim::Known(i, v);
                            }
                        }
                        break;
                    }
                    EMPTY => {
                        if slot
                            .state
                            .compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok()
                        {
                            // SAFETY: this thread owns the slot until the READY store.
                            unsafe { (*slot.entry.get()).write((device, *key)) };
                            slot.hash.store(hash, Ordering::Relaxed);
                            slot.verdict.store(PENDING, Ordering::Relaxed);
                            slot.state.store(READY, Ordering::Release);
                            return Claim::Mine(i);
                        }
                    }
                    _ => std::hint::spin_loop(),
                }
            }
            i = (i + 1) & self.mask;
        }
        Claim::Full
    }

    /// Stores the verdict of a slot returned by [`Verdicts::get_or_claim`].
    pub fn set(&self, slot: usize, v: Verdict) {
        if let Some(s) = self.slots.get(slot) {
            s.verdict.store(encode(v), Ordering::Release);
        }
    }

    /// How many keys hold each verdict: (served, refused, none).
    pub fn tally(&self) -> (usize, usize, usize) {
        let mut t = (0, 0, 0);
        for s in self.slots.iter() {
            if s.state.load(Ordering::Acquire) != READY {
                continue;
            }
            match decode(s.verdict.load(Ordering::Acquire)) {
                Verdict::Serve(_) => t.0 += 1,
                Verdict::Refused => t.1 += 1,
                Verdict::None => t.2 += 1,
                Verdict::Pending => {}
            }
        }
        t
    }

    /// Forgets everything. Only for a freshly forked child, where no other thread exists.
    ///
    /// # Safety
    /// No other thread may use the map concurrently.
    pub unsafe fn reset(&self) {
        for s in self.slots.iter() {
            s.state.store(EMPTY, Ordering::Relaxed);
            s.verdict.store(PENDING, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi;
    use crate::key::{Trans, Types};
    use std::sync::Arc;

    fn linear(n_out: i64, tokens: i64, k: i64) -> ProblemKey {
        let t = Types::uniform(abi::DT_F16_R, abi::DT_F32_R);
        ProblemKey::single(
            Trans::T,
            Trans::N,
            t,
            n_out,
            tokens,
            k,
            k,
            k,
            n_out,
            n_out,
            0,
        )
    }

    #[test]
    fn nearest_row_of_the_same_layer_within_the_window() {
        let table = Table::new([
            (linear(64, 512, 32), Action::Solution(7)),
            (linear(64, 1024, 32), Action::Solution(8)),
            (linear(64, 540, 32), Action::Default),
            (linear(96, 512, 32), Action::Solution(9)),
        ]);
        let ix = NearIndex::new(&table);
        assert_eq!(ix.families(), 2);
        assert_eq!(
            ix.nearest(&linear(64, 513, 32), 32),
            Some((512, Action::Solution(7)))
        );
        assert_eq!(
            ix.nearest(&linear(64, 530, 32), 32),
            Some((540, Action::Default)),
            "the nearer row wins, whatever it says"
        );
        assert_eq!(
            ix.nearest(&linear(64, 526, 32), 32),
            Some((512, Action::Solution(7))),
            "a tie goes to the smaller token count"
        );
        assert_eq!(
            ix.nearest(&linear(64, 1000, 32), 32),
            Some((1024, Action::Solution(8)))
        );
        assert_eq!(
            ix.nearest(&linear(64, 600, 32), 32),
            None,
            "outside the window"
        );
        assert_eq!(ix.nearest(&linear(64, 513, 32), 0), None, "window 0 is off");
        assert_eq!(ix.nearest(&linear(64, 513, 33), 32), None, "another layer");
        assert_eq!(
            ix.nearest(&linear(64, 512, 32), 32),
            Some((540, Action::Default)),
            "never the key itself"
        );
        assert_eq!(
            ix.nearest(&linear(96, 500, 32), 32),
            Some((512, Action::Solution(9)))
        );
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
}
