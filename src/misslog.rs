//! The durable record of shapes that had no row.
//!
//! Two parts:
//! - [`MissSet`]: a lock-free open-addressing set, growing by segments, of (device, key) with a call
//!   count each. A repeated miss is a probe and one atomic add: no lock, no allocation, no
//!   system call. Only the first sight of a key claims a slot. Each count is split over
//!   [`SHARDS`] cache lines picked by the calling thread's stack, so threads that miss the
//!   same shape do not fight over one line (exact totals are the sum).
//!
//! Each segment is a [`ClaimMap`], the one lock-free claim-map primitive (the near
//! verdicts use it too). The files under the miss folder are the preload's
//! (`preload/src/recorder.rs`): this crate stays free of system calls.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use rustc_hash::FxHasher;

use crate::claim_map::{hash_of, try_zeroed_slice, ClaimMap, Probe, Zeroed};
use crate::key::ProblemKey;

/// What a miss-set slot holds beside its key.
struct MissSlot {
    /// The caller's word about this key (0 until set; see [`MissSet::note_if_unset`]). The
    /// interposer keeps a missed key's near-serving verdict here, so a repeated miss reads
    /// it with the same probe that counts the call.
    note: AtomicU64,
    /// The key's line as the owner formatted it at first sight ([`MissSet::set_text`]), so
    /// the counts can be written later without formatting or allocating (from `_exit` in a
    /// signal handler, say). Leaked on purpose: it lives as long as the process.
    text: AtomicPtr<String>,
}

// SAFETY: two atomics; all zero is "no note" and "no text".
unsafe impl Zeroed for MissSlot {}

/// What [`MissSet::record`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sight {
    /// The first call with this key on this device: the caller must log it.
    First,
    /// Seen before; the count went up. `count` is the new count of the caller's share
    /// (its shard; one thread always counts in the same one), which [`MissSet::snapshot`]
    /// adds up with the others.
    Repeat { count: u64 },
    /// Every segment is full ([`MissSet::limit`] shapes): the shape is not recorded. The
    /// caller counts these calls and says so once.
    Full,
    /// Not in the set, and the caller's `admit` check turned it away
    /// ([`MissSet::record_hashed_if`]).
    Refused,
}

/// One segment: a claim map of `mask + 1` slots. New keys go in while it is at most half
/// full, so a probe for a key it does not hold ends at an empty slot within a few steps
/// (and never walks more than [`MAX_PROBE`] slots).
struct Segment<K> {
    map: ClaimMap<K, MissSlot>,
    /// `counts[shard * slots + slot]`: each shard is its own array, so two shards of one
    /// slot never share a cache line.
    counts: Box<[AtomicU64]>,
    /// The number of the segment's first slot (slot numbers run on across segments).
    offset: usize,
    /// Slots claimed; a segment past half full takes no new keys.
    filled: AtomicUsize,
    /// `order[n]` = 1 + the slot the n-th key went to (0 while being written): walking the
    /// recorded shapes costs what they are, not the segment's size (a count flush at exit,
    /// or every 1024th call of a shape, used to scan all 16k slots), and goes in the order
    /// the shapes were first seen.
    order: Box<[AtomicU32]>,
}

/// Lock-free set of missed (device, key) pairs with call counts, growing by segments:
/// segment `s` has `base << s` slots and is allocated when the segments before it are half
/// full, so nothing is dropped silently below [`MissSet::limit`] shapes (the interposer's
/// is over two million) and a repeated miss of a shape in a later segment costs a few more
/// probes, never a scan. The key type is the rocBLAS [`ProblemKey`] unless a backend names
/// its own (cuBLASLt's `LtKey`).
pub struct MissSet<K = ProblemKey> {
    segments: [AtomicPtr<Segment<K>>; SEGMENTS],
    /// Slots of segment 0 (a power of two).
    base: usize,
    /// Segments this set may grow to.
    max_segments: usize,
}

/// Segments a set grows to at most.
pub const SEGMENTS: usize = 8;

/// The longest probe in one segment (a half-full segment needs about two).
const MAX_PROBE: usize = 64;

/// Shares of each count.
pub const SHARDS: usize = 8;

/// The calling thread's shard: threads run on separate stacks, so the stack address tells
/// them apart without a thread-local (two threads whose stacks fall in one 64 KiB window
/// share a shard, which is still exact, only slower).
#[inline(always)]
fn shard() -> usize {
    let here = 0u8;
    let sp = &here as *const u8 as u64;
    ((sp >> 16).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61) as usize
}

// SAFETY: the segments are claim maps (Sync for a Send key) and atomics, reached through
// pointers to leaked boxes that are never freed.
unsafe impl<K: Send> Sync for MissSet<K> {}
unsafe impl<K: Send> Send for MissSet<K> {}

/// A key's hash through its `Hash` impl (FxHash), for [`MissSet::record`].
pub fn key_hash<K: Hash>(key: &K) -> u64 {
    let mut h = FxHasher::default();
    key.hash(&mut h);
    h.finish()
}

/// A set's first segment, or null where it cannot be allocated (the first record then
/// tries again, as for a later segment).
fn first_segment<K: Copy + Eq>(base: usize) -> *mut Segment<K> {
    Segment::new(base, 0).map_or(std::ptr::null_mut(), |s| Box::into_raw(Box::new(s)))
}

impl<K: Copy + Eq> Segment<K> {
    /// A segment of `n` slots (a power of two), zeroed by the allocator: an empty slot is
    /// all zero bytes, so a large segment costs no start-up time and no resident memory
    /// until shapes land in it.
    ///
    /// `None` where the memory cannot be had (a host's address-space limit): the interposer
    /// then counts the shape as one the set had no room for, rather than abort its host.
    fn new(n: usize, offset: usize) -> Option<Segment<K>> {
        assert!(n.is_power_of_two());
        // SAFETY: an all-zero AtomicU64 / AtomicU32 is 0.
        let (counts, order) = unsafe { (try_zeroed_slice(n * SHARDS)?, try_zeroed_slice(n)?) };
        Some(Segment {
            map: ClaimMap::try_new(n, MAX_PROBE)?,
            counts,
            offset,
            filled: AtomicUsize::new(0),
            order,
        })
    }

    /// Shard `shard`'s count of slot `i`, without a bounds check.
    ///
    /// # Safety
    /// `shard < SHARDS` and `i <= mask`.
    #[inline(always)]
    unsafe fn count(&self, shard: usize, i: usize) -> &AtomicU64 {
        let mask = self.map.mask();
        debug_assert!(shard < SHARDS && i <= mask);
        // SAFETY: `counts` holds SHARDS * (mask + 1) values; the caller keeps both in range.
        unsafe { self.counts.get_unchecked(shard * (mask + 1) + i) }
    }

    fn count_of(&self, i: usize) -> u64 {
        (0..SHARDS)
            .map(|s| self.counts[s * self.map.slots() + i].load(Ordering::Relaxed))
            .sum()
    }
}

impl<K: Copy + Eq + Hash> MissSet<K> {
    /// A set whose first segment has room for `capacity` shapes (rounded up to a power of
    /// two); it grows to [`SEGMENTS`] segments.
    pub fn with_capacity(capacity: usize) -> MissSet<K> {
        MissSet::with_segments(capacity, SEGMENTS)
    }

    /// A set of at most `max_segments` segments (1 to [`SEGMENTS`]), the first of
    /// `capacity` slots.
    pub fn with_segments(capacity: usize, max_segments: usize) -> MissSet<K> {
        let base = capacity.max(2).next_power_of_two();
        let set = MissSet {
            segments: [const { AtomicPtr::new(std::ptr::null_mut()) }; SEGMENTS],
            base,
            max_segments: max_segments.clamp(1, SEGMENTS),
        };
        set.segments[0].store(first_segment(base), Ordering::Release);
        set
    }

    /// Distinct shapes the set can always take: half of every segment's slots.
    pub fn limit(&self) -> usize {
        (self.base << self.max_segments) / 2 - self.base / 2
    }

    /// The first slot number of segment `s` (slot numbers run on across segments).
    #[inline(always)]
    fn offset(&self, s: usize) -> usize {
        self.base * ((1 << s) - 1)
    }

    #[inline(always)]
    fn segment(&self, s: usize) -> Option<&Segment<K>> {
        crate::leaked::get(&self.segments[s])
    }

    /// Segment `s`, allocating it if no thread has yet.
    #[cold]
    fn grow(&self, s: usize) -> Option<&Segment<K>> {
        if let Some(seg) = self.segment(s) {
            return Some(seg);
        }
        let new = Box::new(Segment::new(self.base << s, self.offset(s))?);
        Some(crate::leaked::publish(&self.segments[s], new))
    }

    /// (segment, slot in it) of a slot number.
    fn locate(&self, slot: usize) -> Option<(&Segment<K>, usize)> {
        let s = (slot / self.base + 1).ilog2() as usize;
        if s >= self.max_segments {
            return None;
        }
        let seg = self.segment(s)?;
        let i = slot - seg.offset;
        (i < seg.map.slots()).then_some((seg, i))
    }

    /// Counts one call of `key` on `device`.
    pub fn record(&self, device: i32, key: &K) -> Sight {
        self.record_hashed(device, key, key_hash(key))
    }

    /// [`MissSet::record`] with a hash of the key computed by the caller (the interposer
    /// passes [`ProblemKey::lookup_hash`], which its table lookup computed already). One
    /// set must always be given the same hash for the same key: use either this or
    /// [`MissSet::record`] on it, not both.
    #[inline]
    pub fn record_hashed(&self, device: i32, key: &K, key_hash: u64) -> Sight {
        self.record_hashed_if(device, key, key_hash, || true)
    }

    /// [`MissSet::record_hashed`] that adds a new key only if `admit()` says so. `admit` runs
    /// only for a key not in the set yet, so a check there costs a repeated miss nothing.
    #[inline]
    pub fn record_hashed_if(
        &self,
        device: i32,
        key: &K,
        key_hash: u64,
        admit: impl FnOnce() -> bool,
    ) -> Sight {
        self.record_noted(device, key, key_hash, admit).0
    }

    /// [`MissSet::record_hashed_if`] that also returns the key's slot and its note (what
    /// [`MissSet::note_if_unset`] or [`MissSet::set_note`] left there, 0 if nothing): one
    /// probe counts the call and reads the caller's word about the key. No slot for
    /// [`Sight::Full`] and [`Sight::Refused`].
    #[inline(always)]
    pub fn record_noted(
        &self,
        device: i32,
        key: &K,
        key_hash: u64,
        admit: impl FnOnce() -> bool,
    ) -> (Sight, Option<(usize, u64)>) {
        let mut admit = Some(admit);
        let mut refused = false;
        // Once per call: two reads of the stack address in one call may straddle a 64 KiB
        // window (debug builds give each inlined read its own slot) and pick two shards.
        let shard = shard();
        let hash = hash_of(device, key_hash);
        let mut s = 0;
        while s < self.max_segments {
            let Some(seg) = self.segment(s) else {
                // Only a new key reaches a segment no one has allocated: every earlier one
                // was too full to take it.
                if let Some(admit) = admit.take() {
                    if !admit() {
                        return (Sight::Refused, None);
                    }
                }
                if self.grow(s).is_none() {
                    // No memory for the next segment: as full.
                    return (Sight::Full, None);
                }
                continue;
            };
            let may_claim = || {
                if seg.filled.load(Ordering::Relaxed) > seg.map.mask() / 2 {
                    // Not here, and this segment takes no new keys.
                    return false;
                }
                if admit.take().is_some_and(|admit| !admit()) {
                    refused = true;
                    return false;
                }
                true
            };
            match seg.map.probe(hash, device, key, may_claim, |_| {}) {
                Probe::Found(i, slot) => {
                    // SAFETY: `shard()` is below SHARDS; a probe's slot is masked.
                    let c = unsafe { seg.count(shard, i) };
                    let count = c.fetch_add(1, Ordering::Relaxed) + 1;
                    let note = slot.note.load(Ordering::Acquire);
                    return (Sight::Repeat { count }, Some((seg.offset + i, note)));
                }
                Probe::Claimed(i, _) => {
                    // SAFETY: as above.
                    unsafe { seg.count(shard, i) }.fetch_add(1, Ordering::Relaxed);
                    let nth = seg.filled.fetch_add(1, Ordering::Relaxed);
                    // At most one key per slot, so `nth` < the slot count.
                    seg.order[nth].store(i as u32 + 1, Ordering::Release);
                    return (Sight::First, Some((seg.offset + i, 0)));
                }
                Probe::Absent if refused => return (Sight::Refused, None),
                Probe::Absent => {}
            }
            s += 1;
        }
        (Sight::Full, None)
    }

    /// The slot of (device, key) if the set holds it; counts nothing.
    pub fn find(&self, device: i32, key: &K, key_hash: u64) -> Option<usize> {
        let hash = hash_of(device, key_hash);
        (0..self.max_segments)
            .map_while(|s| self.segment(s))
            .find_map(|seg| seg.map.find(hash, device, key).map(|i| seg.offset + i))
    }

    /// Leaves `note` (not 0) in a slot [`MissSet::record_noted`] returned, unless a note is
    /// there already. True if it was stored.
    pub fn note_if_unset(&self, slot: usize, note: u64) -> bool {
        self.locate(slot).is_some_and(|(seg, i)| {
            seg.map
                .value(i)
                .note
                .compare_exchange(0, note, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    /// The note of a slot (0: none).
    pub fn note(&self, slot: usize) -> u64 {
        self.locate(slot)
            .map_or(0, |(seg, i)| seg.map.value(i).note.load(Ordering::Acquire))
    }

    /// Replaces the note of a slot [`MissSet::record_noted`] or [`MissSet::find`] returned.
    pub fn set_note(&self, slot: usize, note: u64) {
        if let Some((seg, i)) = self.locate(slot) {
            seg.map.value(i).note.store(note, Ordering::Release);
        }
    }

    /// Keeps the key's formatted line with its slot (the first text given is kept).
    pub fn set_text(&self, slot: usize, text: String) {
        if let Some((seg, i)) = self.locate(slot) {
            let p = Box::into_raw(Box::new(text));
            let t = &seg.map.value(i).text;
            if t.compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // SAFETY: `p` was never shared.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }

    /// Calls `f(device, key, calls, text)` for every recorded shape, in the order they
    /// were first seen, with the text [`MissSet::set_text`] left (None if none yet).
    /// Allocates nothing.
    pub fn for_each(&self, mut f: impl FnMut(i32, &K, u64, Option<&str>)) {
        self.for_each_slot(|_, d, k, calls, text| f(d, k, calls, text));
    }

    /// [`MissSet::for_each`] with each shape's slot number (the one
    /// [`MissSet::set_text`] takes).
    pub fn for_each_slot(&self, mut f: impl FnMut(usize, i32, &K, u64, Option<&str>)) {
        for s in 0..self.max_segments {
            let Some(seg) = self.segment(s) else { break };
            let filled = seg.filled.load(Ordering::Acquire).min(seg.order.len());
            for nth in &seg.order[..filled] {
                let Some(i) = (nth.load(Ordering::Acquire) as usize).checked_sub(1) else {
                    continue; // claimed a moment ago; its owner is still writing it
                };
                let Some((d, k, v)) = seg.map.get(i) else {
                    continue;
                };
                // SAFETY: a text pointer is a leaked Box.
                let text = unsafe { v.text.load(Ordering::Acquire).as_ref() };
                f(
                    seg.offset + i,
                    d,
                    k,
                    seg.count_of(i),
                    text.map(String::as_str),
                );
            }
        }
    }

    /// Every recorded (device, key, count), in the order first seen.
    pub fn snapshot(&self) -> Vec<(i32, K, u64)> {
        let mut v = Vec::new();
        self.for_each(|d, k, c, _| v.push((d, *k, c)));
        v
    }

    /// Number of distinct shapes recorded.
    pub fn len(&self) -> usize {
        let mut n = 0;
        self.for_each(|_, _, _, _| n += 1);
        n
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything: a fresh first segment replaces the old ones, which are leaked
    /// rather than written over (in a forked child, writing every slot would copy every
    /// page the parent touched). Only for a freshly forked child, where no other thread
    /// exists.
    ///
    /// # Safety
    /// No other thread may use the set concurrently.
    pub unsafe fn reset(&self) {
        for (s, seg) in self.segments.iter().enumerate() {
            let fresh = if s == 0 {
                first_segment(self.base)
            } else {
                std::ptr::null_mut()
            };
            seg.store(fresh, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_then_repeat_counts() {
        let s = MissSet::with_capacity(16);
        assert_eq!(s.record(0, &key(1)), Sight::First);
        assert_eq!(s.record(0, &key(1)), Sight::Repeat { count: 2 });
        assert_eq!(s.record(1, &key(1)), Sight::First, "devices are distinct");
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn notes_ride_on_the_probe_that_counts() {
        let s = MissSet::with_capacity(16);
        let h = |n| key(n).lookup_hash();
        let (sight, noted) = s.record_noted(0, &key(1), h(1), || true);
        assert_eq!(sight, Sight::First);
        let (slot, note) = noted.expect("a slot");
        assert_eq!(note, 0, "no note yet");
        assert_eq!(s.find(0, &key(1), h(1)), Some(slot));
        assert_eq!(s.find(1, &key(1), h(1)), None, "devices are distinct");
        assert_eq!(s.find(0, &key(2), h(2)), None);
        assert!(s.note_if_unset(slot, 7));
        assert!(!s.note_if_unset(slot, 8), "only an empty note is filled");
        assert_eq!(
            s.record_noted(0, &key(1), h(1), || true),
            (Sight::Repeat { count: 2 }, Some((slot, 7)))
        );
        s.set_note(slot, 9);
        assert_eq!(s.record_noted(0, &key(1), h(1), || true).1, Some((slot, 9)));
        assert_eq!(
            s.record_noted(0, &key(2), h(2), || false),
            (Sight::Refused, None)
        );
        // SAFETY: no other thread uses the set.
        unsafe { s.reset() };
        assert_eq!(s.find(0, &key(1), h(1)), None);
        let (_, noted) = s.record_noted(0, &key(1), h(1), || true);
        assert_eq!(noted.map(|n| n.1), Some(0), "reset clears notes");
    }

    #[test]
    fn refused_keys_stay_out_and_admit_runs_only_for_new_keys() {
        let s = MissSet::with_capacity(16);
        let h = key(1).lookup_hash();
        assert_eq!(s.record_hashed_if(0, &key(1), h, || false), Sight::Refused);
        assert!(s.is_empty());
        assert_eq!(s.record_hashed_if(0, &key(1), h, || true), Sight::First);
        let asked = std::cell::Cell::new(false);
        let sight = s.record_hashed_if(0, &key(1), h, || {
            asked.set(true);
            false
        });
        assert_eq!(sight, Sight::Repeat { count: 2 });
        assert!(!asked.get(), "admit ran for a key already in the set");
    }

    #[test]
    fn full_set_says_so() {
        let s = MissSet::with_segments(4, 1);
        assert_eq!(s.limit(), 2);
        for n in 0..2 {
            assert_eq!(s.record(0, &key(n)), Sight::First);
        }
        assert_eq!(s.record(0, &key(99)), Sight::Full);
        assert!(matches!(s.record(0, &key(1)), Sight::Repeat { .. }));
        // The count is the caller's share; the snapshot adds up the shares.
        let counted: Vec<u64> = s
            .snapshot()
            .iter()
            .filter(|e| e.1 == key(1))
            .map(|e| e.2)
            .collect();
        assert_eq!(counted, vec![2]);
    }

    #[test]
    fn the_set_grows_past_its_first_segment_and_finds_every_key_again() {
        // More shapes than the interposer's first segment holds (16k slots): every one is
        // recorded once, and each is found again where it went.
        let s = MissSet::with_capacity(1 << 14);
        assert!(s.limit() > 2_000_000, "{}", s.limit());
        let n = 20_001;
        for i in 0..n {
            assert_eq!(s.record(0, &key(i)), Sight::First, "shape {i}");
        }
        for i in (0..n).step_by(97) {
            assert!(
                matches!(s.record(0, &key(i)), Sight::Repeat { count: 2 }),
                "shape {i}"
            );
            let slot = s.find(0, &key(i), key_hash(&key(i))).expect("found");
            s.set_text(slot, format!("t{i}"));
        }
        assert_eq!(s.len(), n as usize);
        let mut texts = 0;
        s.for_each(|_, k, c, t| {
            if let Some(t) = t {
                assert_eq!(t, format!("t{}", k.n));
                assert_eq!(c, 2);
                texts += 1;
            }
        });
        assert_eq!(texts, (0..n).step_by(97).count());
        // Slots beyond the first segment take notes like any other.
        let slot = s.find(0, &key(n - 1), key_hash(&key(n - 1))).unwrap();
        assert!(slot >= 1 << 14, "the last shape went to a later segment");
        assert!(s.note_if_unset(slot, 5));
        assert_eq!(
            s.record_noted(0, &key(n - 1), key_hash(&key(n - 1)), || true)
                .1,
            Some((slot, 5))
        );
    }

    #[test]
    fn eight_threads_lose_nothing() {
        let s = MissSet::with_capacity(1024);
        let firsts = AtomicU64::new(0);
        crate::testing::on_threads(8, || {
            for _round in 0..500 {
                for n in 0..40 {
                    if s.record(0, &key(n)) == Sight::First {
                        firsts.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        assert_eq!(
            firsts.load(Ordering::Relaxed),
            40,
            "each key is first-seen exactly once"
        );
        let snap = s.snapshot();
        assert_eq!(snap.len(), 40);
        assert!(snap.iter().all(|(_, _, c)| *c == 8 * 500));
    }

    #[test]
    fn other_key_types() {
        let set: MissSet<(u32, u32)> = MissSet::with_capacity(4);
        assert_eq!(set.record(0, &(3, 4)), Sight::First);
        assert!(matches!(set.record(0, &(3, 4)), Sight::Repeat { .. }));
        assert_eq!(set.snapshot(), vec![(0, (3, 4), 2)]);
    }

    /// The 256 x 64 layer at `n` tokens.
    fn key(n: i64) -> ProblemKey {
        crate::key::half_linear(256, n, 64)
    }
}
