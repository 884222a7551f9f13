//! One lock-free claim map: a fixed-size open-addressing table of (device, key) pairs in
//! which the first thread to see a pair claims its slot and every later look-up finds it
//! with one probe. It is the one primitive under both of the interposer's per-key maps:
//! the miss set ([`crate::misslog::MissSet`], one map per segment, with a call count and
//! a note per slot) and the near-serving verdicts (`preload/src/rocblas/near.rs`, a
//! verdict per slot).
//!
//! A slot moves EMPTY -> BUSY (the claiming thread won a compare-exchange) -> READY (its
//! key and hash written, then a Release store). Readers act on a slot only after an
//! Acquire load sees READY, so a key is never read half written; a BUSY slot is a few
//! stores from READY and is waited for. Beside the key each slot holds a value `V` of the
//! map's user (atomics), which the claiming thread initialises before READY.
//!
//! Every slot and value starts as all-zero bytes, straight from the allocator: an empty
//! map costs neither start-up time nor resident memory until keys land in it (writing
//! 16k slots one by one took most of the interposer's start-up, docs/benchmarks/history.md).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

const EMPTY: u32 = 0;
const BUSY: u32 = 1;
const READY: u32 = 2;

/// A slot value for which all-zero bytes are a valid value.
///
/// # Safety
/// All-zero bytes must be a valid `Self`.
pub unsafe trait Zeroed {}

// SAFETY: atomics are plain integers and pointers; zero is 0 and NULL.
unsafe impl Zeroed for AtomicU64 {}
unsafe impl Zeroed for AtomicU32 {}
unsafe impl<T> Zeroed for AtomicPtr<T> {}
unsafe impl<A: Zeroed, B: Zeroed> Zeroed for (A, B) {}

struct Slot<K, V> {
    state: AtomicU32,
    hash: AtomicU64,
    value: V,
    /// Written once by the thread that moved the slot EMPTY -> BUSY, read only after READY.
    entry: UnsafeCell<MaybeUninit<(i32, K)>>,
}

impl<K, V> Slot<K, V> {
    /// The slot's (device, key) if it is READY.
    #[inline(always)]
    fn entry(&self) -> Option<&(i32, K)> {
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        // SAFETY: READY was observed with Acquire; the entry is initialised.
        Some(unsafe { (*self.entry.get()).assume_init_ref() })
    }
}

/// What [`ClaimMap::probe`] found: the slot and its value. (The value comes with the
/// slot: looked up again after the caller's atomic add on a repeated miss, the map's
/// fields were loaded again, docs/benchmarks/history.md.)
#[derive(Debug)]
pub enum Probe<'a, V> {
    /// The pair is in slot `.0`.
    Found(usize, &'a V),
    /// This call claimed slot `.0` for the pair (its value initialised, the slot READY).
    Claimed(usize, &'a V),
    /// Not here: the probe met an empty slot the caller would not claim, or ran its
    /// longest probe.
    Absent,
}

/// A lock-free (device, key) -> `V` map of fixed capacity; see the module docs.
pub struct ClaimMap<K, V> {
    slots: Box<[Slot<K, V>]>,
    /// `slots.len() - 1` (a power of two less one): every slot index a probe makes is
    /// masked with it, so it is always in bounds.
    mask: usize,
    /// The longest probe: the caller's limit, or the slot count if that is smaller (past
    /// it the map answers [`Probe::Absent`]: a bounded probe, never a scan of every slot,
    /// which made each call of an over-capacity key cost ~100 µs).
    probes: usize,
    /// Keeps `&ClaimMap` from being treated as pointing to frozen memory. Told that
    /// `mask` could not change, the compiler hoisted it out of the probe loop and spilled
    /// it to the stack under the loop's register pressure; read from the map at each step
    /// it folds into one `and` (a repeated miss cost 3 more instructions,
    /// docs/benchmarks/history.md).
    _not_frozen: UnsafeCell<()>,
}

// SAFETY: `entry` is written by exactly one thread (the one that won the EMPTY -> BUSY
// CAS) before a Release store of READY, and read only after an Acquire load sees READY;
// the values are atomics.
unsafe impl<K: Send, V: Sync> Sync for ClaimMap<K, V> {}
unsafe impl<K: Send, V: Send> Send for ClaimMap<K, V> {}

/// The map's hash of (device, key) from a hash of the key alone.
#[inline(always)]
pub fn hash_of(device: i32, key_hash: u64) -> u64 {
    // One multiply mixes the device into every bit the slot index and tag use.
    let p = ((key_hash ^ device as u32 as u64) as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Whether two keys are equal, out of line on purpose: inlined into a probe loop, the
/// compiler copied every field of the caller's key into stack temporaries before the loop
/// (about 30 instructions on every repeated miss, for a compare that runs about once), and
/// the call costs a few.
#[inline(never)]
fn same_key<K: Eq>(a: &K, b: &K) -> bool {
    a == b
}

/// `n` zeroed values of a type for which all-zero bytes are a valid value, as a box whose
/// pages the system only provides once touched.
///
/// # Safety
/// All-zero bytes must be a valid `T`.
pub unsafe fn zeroed_slice<T>(n: usize) -> Box<[T]> {
    let layout = std::alloc::Layout::array::<T>(n).expect("slice size");
    // SAFETY: per the contract.
    unsafe { try_zeroed_slice(n) }.unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

/// [`zeroed_slice`], or `None` where the memory cannot be had (an address-space limit):
/// for the interposer, whose host must not be aborted for a table of its own.
///
/// # Safety
/// All-zero bytes must be a valid `T`.
pub unsafe fn try_zeroed_slice<T>(n: usize) -> Option<Box<[T]>> {
    let layout = std::alloc::Layout::array::<T>(n).ok()?;
    // SAFETY: a non-zero layout (callers ask for n >= 2 of a sized T).
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` holds `n` zeroed `T`s, valid per the caller.
    Some(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) })
}

impl<K: Copy + Eq, V: Zeroed> ClaimMap<K, V> {
    /// A map of `capacity` slots (rounded up to a power of two, at least 2) whose probes
    /// walk at most `max_probe` slots.
    pub fn new(capacity: usize, max_probe: usize) -> ClaimMap<K, V> {
        let n = capacity.max(2).next_power_of_two();
        let layout = std::alloc::Layout::array::<Slot<K, V>>(n).expect("slice size");
        Self::try_new(capacity, max_probe).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
    }

    /// [`ClaimMap::new`], or `None` where its slots cannot be allocated.
    pub fn try_new(capacity: usize, max_probe: usize) -> Option<ClaimMap<K, V>> {
        let n = capacity.max(2).next_power_of_two();
        const { assert!(EMPTY == 0) };
        // SAFETY: an all-zero Slot is a valid empty slot (atomics at 0 = EMPTY, a zeroed
        // `V` is valid by `Zeroed`, `entry` is MaybeUninit).
        let slots = unsafe { try_zeroed_slice(n) }?;
        Some(ClaimMap {
            slots,
            mask: n - 1,
            probes: max_probe.clamp(1, n),
            _not_frozen: UnsafeCell::new(()),
        })
    }

    /// The number of slots.
    pub fn slots(&self) -> usize {
        self.mask + 1
    }

    /// The mask slot indexes are taken with (`slots() - 1`).
    #[inline(always)]
    pub fn mask(&self) -> usize {
        self.mask
    }

    /// Slot `i`, without a bounds check (a probe makes one per step).
    ///
    /// # Safety
    /// `i <= mask`.
    #[inline(always)]
    unsafe fn slot(&self, i: usize) -> &Slot<K, V> {
        debug_assert!(i <= self.mask);
        // SAFETY: `slots.len()` is `mask + 1`; the caller keeps `i` at most `mask`.
        unsafe { self.slots.get_unchecked(i) }
    }

    /// The value of slot `i` (a slot [`ClaimMap::probe`] returned).
    #[inline(always)]
    pub fn value(&self, i: usize) -> &V {
        // SAFETY: masked into range.
        unsafe { &self.slot(i & self.mask).value }
    }

    /// (device, key, value) of slot `i` if a key was claimed there and written.
    pub fn get(&self, i: usize) -> Option<(i32, &K, &V)> {
        let slot = self.slots.get(i)?;
        slot.entry().map(|(d, k)| (*d, k, &slot.value))
    }

    /// Finds (device, key), whose [`hash_of`] is `hash`, or claims a slot for it.
    ///
    /// At the first empty slot on the probe path `may_claim()` is asked: false ends the
    /// probe ([`Probe::Absent`]: the pair is not here, nothing is claimed); true claims
    /// the slot, runs `init` on its value, then publishes the key ([`Probe::Claimed`]). A
    /// claim lost to another thread looks at the same slot again (`may_claim` may then be
    /// asked again).
    #[inline(always)]
    pub fn probe(
        &self,
        hash: u64,
        device: i32,
        key: &K,
        mut may_claim: impl FnMut() -> bool,
        init: impl FnOnce(&V),
    ) -> Probe<'_, V> {
        let mut i = hash as usize & self.mask;
        // At least one step: `probes` is never 0.
        let mut left = self.probes;
        loop {
            // SAFETY: `i` is masked with the map's mask.
            let slot = unsafe { self.slot(i) };
            loop {
                match slot.state.load(Ordering::Acquire) {
                    READY => {
                        if slot.hash.load(Ordering::Relaxed) == hash {
                            // SAFETY: READY was observed with Acquire; entry is initialised.
                            let (d, k) = unsafe { (*slot.entry.get()).assume_init_ref() };
                            if *d == device && same_key(k, key) {
                                return Probe::Found(i, &slot.value);
                            }
                        }
                        break;
                    }
                    EMPTY => {
                        if !may_claim() {
                            return Probe::Absent;
                        }
                        if slot
                            .state
                            .compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok()
                        {
                            // SAFETY: this thread owns the slot until the READY store.
                            unsafe { (*slot.entry.get()).write((device, *key)) };
                            slot.hash.store(hash, Ordering::Relaxed);
                            init(&slot.value);
                            slot.state.store(READY, Ordering::Release);
                            return Probe::Claimed(i, &slot.value);
                        }
                        // Lost the race: look at the same slot again.
                    }
                    _ => std::hint::spin_loop(), // BUSY: the owner is a few stores from READY.
                }
            }
            left -= 1;
            if left == 0 {
                return Probe::Absent;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The slot of (device, key) if the map holds it; claims nothing.
    #[inline]
    pub fn find(&self, hash: u64, device: i32, key: &K) -> Option<usize> {
        match self.probe(hash, device, key, || false, |_| {}) {
            Probe::Found(i, _) => Some(i),
            _ => None,
        }
    }

    /// Calls `f(slot, device, key, value)` for every claimed slot, in slot order.
    pub fn for_each(&self, mut f: impl FnMut(usize, i32, &K, &V)) {
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some((d, k)) = slot.entry() {
                f(i, *d, k, &slot.value);
            }
        }
    }

    /// Forgets every key (values are initialised again when their slot is claimed). Only
    /// for a freshly forked child, where no other thread exists.
    ///
    /// # Safety
    /// No other thread may use the map concurrently.
    pub unsafe fn reset(&self) {
        for s in self.slots.iter() {
            s.state.store(EMPTY, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(capacity: usize, probes: usize) -> ClaimMap<(u32, u32), AtomicU64> {
        ClaimMap::new(capacity, probes)
    }
    fn h(k: (u32, u32), device: i32) -> u64 {
        hash_of(device, crate::misslog::key_hash(&k))
    }

    #[test]
    fn claimed_once_found_after_per_device() {
        let m = map(8, 8);
        let k = (3, 4);
        let Probe::Claimed(i, _) =
            m.probe(h(k, 0), 0, &k, || true, |v| v.store(7, Ordering::Relaxed))
        else {
            panic!("first sight claims")
        };
        let Probe::Found(j, v) = m.probe(h(k, 0), 0, &k, || true, |_| {}) else {
            panic!("found again")
        };
        assert_eq!(j, i);
        assert!(std::ptr::eq(v, m.value(i)));
        assert_eq!(
            m.value(i).load(Ordering::Relaxed),
            7,
            "init ran before READY"
        );
        assert_eq!(m.find(h(k, 0), 0, &k), Some(i));
        assert_eq!(m.find(h(k, 1), 1, &k), None, "devices are distinct");
        assert_eq!(m.get(i).map(|(d, k, _)| (d, *k)), Some((0, (3, 4))));
        let mut seen = Vec::new();
        m.for_each(|s, d, k, _| seen.push((s, d, *k)));
        assert_eq!(seen, vec![(i, 0, (3, 4))]);
        // SAFETY: no other thread uses the map.
        unsafe { m.reset() };
        assert_eq!(m.find(h(k, 0), 0, &k), None, "reset forgets");
    }

    #[test]
    fn may_claim_false_claims_nothing_and_a_full_map_is_absent() {
        let m = map(2, 128);
        assert_eq!(m.slots(), 2);
        assert!(matches!(
            m.probe(h((1, 1), 0), 0, &(1, 1), || false, |_| {}),
            Probe::Absent
        ));
        assert!(matches!(
            m.probe(h((1, 1), 0), 0, &(1, 1), || true, |_| {}),
            Probe::Claimed(..)
        ));
        assert!(matches!(
            m.probe(h((1, 2), 0), 0, &(1, 2), || true, |_| {}),
            Probe::Claimed(..)
        ));
        assert!(matches!(
            m.probe(h((1, 3), 0), 0, &(1, 3), || true, |_| {}),
            Probe::Absent
        ));
    }

    #[test]
    fn threads_claim_each_key_exactly_once() {
        let m = map(256, 64);
        let claims = AtomicU64::new(0);
        crate::testing::on_threads(4, || {
            for _ in 0..200 {
                for n in 0..50 {
                    let k = (8, n);
                    if let Probe::Claimed(..) = m.probe(h(k, 0), 0, &k, || true, |_| {}) {
                        claims.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        assert_eq!(claims.load(Ordering::Relaxed), 50);
        let mut n = 0;
        m.for_each(|_, _, _, _| n += 1);
        assert_eq!(n, 50);
    }
}
