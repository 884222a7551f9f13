//! A lock-free map from the address of a live object to a few words about it, whose slots
//! are freed when the object is destroyed and used again by later objects: the
//! interposer's tables of library objects (hipBLASLt's descriptors and layouts, which
//! hipBLASLt cannot read back) and of library handles (which build and device made each).
//!
//! A host such as PyTorch makes and destroys its descriptors around every GEMM, and a
//! long-running one gets ever new addresses from its allocator. A map that never frees a
//! slot fills up and then silently stops knowing new objects (the interposer's hipBLASLt
//! tables did, after about 10,000 GEMMs: issue 24). Here a destroyed object's slot becomes
//! a tombstone that the next object hashed near it takes, so the map holds what is alive,
//! not what ever lived; what is alive at once is bounded by `SLOTS`, and the caller says so
//! when an insert finds no free slot.
//!
//! # How
//!
//! Open addressing with linear probes of at most [`PROBES`] slots. A slot's key is 0
//! (never used: a probe ends there), [`TOMB`] (freed) or an object's address. Each slot is
//! a small sequence lock: a state word (a writer inside, a poison mark, a sequence) and the
//! key and words as atomics. A writer takes the state word with one compare-exchange,
//! writes, and moves the sequence on; a reader reads the state, the key and the words, and
//! keeps them only if the state did not move and the key is its own address. So a reader
//! that found its slot just as the object was destroyed and the slot taken by another
//! object at another address gets nothing, never the other object's words.
//!
//! Nothing waits for long. A reader that meets a writer inside its slot retries a bounded
//! number of times, then answers "unknown" (the caller passes the call through). A writer
//! that meets another writer inside a free slot goes on to the next one; one that meets
//! another inside its own object's slot (two threads changing one object at once, or a
//! signal handler interrupting a writer on its own thread) waits as long, then *poisons*
//! the slot: readers answer "unknown" until the object is made again, because its words
//! may now be stale. A fork child keeps the map as it is (its objects are the parent's,
//! copied): a slot a parent thread was writing at the fork stays shut, and only the
//! object in it reads as unknown. Nothing allocates: the map is one array, all zero bytes
//! to start with, so a `static` costs no memory until it is used.
//!
//! An object the map was never told of, or one made at an address that still held a live
//! object the map was never told was destroyed (destroyed behind the interposer's back)
//! once a tombstone lies before that old slot, is unknown or reads the old words until
//! the old slot is made or destroyed again: the map only knows what it is told.

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

/// The longest probe (slots looked at from an address's home slot).
pub const PROBES: usize = 64;
/// The key of a freed slot.
pub const TOMB: usize = usize::MAX;
/// How many times a reader or writer looks at a slot another writer is inside before it
/// gives up (about a millisecond at most).
const SPINS: u32 = 1 << 12;

/// `state`: bit 0 a writer is inside, bit 1 the slot's words are not to be trusted, the
/// rest a sequence moved on by every write.
const WRITING: u64 = 1;
const POISON: u64 = 2;
const STEP: u64 = 4;

struct Slot<const N: usize> {
    state: AtomicU64,
    key: AtomicUsize,
    words: [AtomicU64; N],
}

impl<const N: usize> Slot<N> {
    const fn new() -> Slot<N> {
        Slot {
            state: AtomicU64::new(0),
            key: AtomicUsize::new(0),
            words: [const { AtomicU64::new(0) }; N],
        }
    }

    /// Enters as the writer, looking at most `tries` times; the state to leave from.
    fn lock(&self, tries: u32) -> Option<u64> {
        for _ in 0..tries {
            let s = self.state.load(Ordering::Relaxed);
            if s & WRITING == 0
                && self
                    .state
                    .compare_exchange(s, s | WRITING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // The WRITING mark before any store to the key or words: a reader that sees
                // a new store (after its Acquire fence) then sees the state moved on.
                fence(Ordering::Release);
                return Some(s);
            }
            std::hint::spin_loop();
        }
        None
    }

    /// Leaves, moving the sequence on. `fresh`: the slot now holds another object (or
    /// none), so an old poison mark goes; otherwise it stays (a writer that could not get
    /// in meanwhile left its change unmade).
    fn unlock(&self, fresh: bool) {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            let poison = if fresh { 0 } else { s & POISON };
            let next = ((s & !(WRITING | POISON)).wrapping_add(STEP)) | poison;
            match self
                .state
                .compare_exchange_weak(s, next, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
    }

    /// The words, if the slot holds `addr` whole and trusted, after a writer that was
    /// inside leaves (bounded: then unknown).
    #[cold]
    #[inline(never)]
    fn read_retrying(&self, addr: usize) -> Option<[u64; N]> {
        for _ in 0..SPINS {
            let before = self.state.load(Ordering::Acquire);
            if before & POISON != 0 {
                return None;
            }
            if before & WRITING != 0 {
                std::hint::spin_loop();
                continue;
            }
            let key = self.key.load(Ordering::Relaxed);
            let words = std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if self.state.load(Ordering::Relaxed) == before {
                return (key == addr).then_some(words);
            }
        }
        None
    }

    /// Whether the slot is one a probe ends at: never used, and no writer claiming it now
    /// (a writer that took it may have made a later insert go past it). The state is read
    /// before the key: a claim seen begun is waited past.
    #[inline]
    fn ends_probe(&self) -> bool {
        self.state.load(Ordering::Acquire) & WRITING == 0 && self.key.load(Ordering::Relaxed) == 0
    }
}

/// Address -> `N` words, for at most `SLOTS` (a power of two) live objects. See the
/// module docs.
pub struct AddressMap<const N: usize, const SLOTS: usize> {
    slots: [Slot<N>; SLOTS],
}

impl<const N: usize, const SLOTS: usize> Default for AddressMap<N, SLOTS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize, const SLOTS: usize> AddressMap<N, SLOTS> {
    pub const fn new() -> Self {
        const { assert!(SLOTS.is_power_of_two() && SLOTS >= 2) };
        AddressMap {
            slots: [const { Slot::new() }; SLOTS],
        }
    }

    /// The number of slots: at most this many objects alive at once are known.
    pub const fn capacity(&self) -> usize {
        SLOTS
    }

    /// The first slot an address is looked for in: one multiply of the address without
    /// its alignment bits, high bits kept.
    #[inline(always)]
    fn home(addr: usize) -> usize {
        let h = ((addr as u64) >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - SLOTS.trailing_zeros())) as usize & (SLOTS - 1)
    }

    /// The slots a probe for `addr` walks, in order.
    #[inline(always)]
    fn path(addr: usize) -> impl Iterator<Item = usize> {
        let home = Self::home(addr);
        (0..PROBES.min(SLOTS)).map(move |step| (home + step) & (SLOTS - 1))
    }

    #[inline(always)]
    fn slot(&self, i: usize) -> &Slot<N> {
        // SAFETY: every index is masked with SLOTS - 1.
        unsafe { self.slots.get_unchecked(i & (SLOTS - 1)) }
    }

    /// The slot of the object at `addr`, locked, if the map knows it. A slot whose lock
    /// cannot be had is poisoned instead (its words can no longer be trusted) and `None`.
    #[inline]
    fn lock_known(&self, addr: usize) -> Option<&Slot<N>> {
        if addr == 0 || addr == TOMB {
            return None;
        }
        let s = self.find(addr)?;
        if s.lock(SPINS).is_none() {
            s.state.fetch_or(POISON, Ordering::Relaxed);
            return None;
        }
        Some(s)
    }

    /// The slot holding `addr`, if the map holds it.
    #[inline]
    fn find(&self, addr: usize) -> Option<&Slot<N>> {
        for i in Self::path(addr) {
            let s = self.slot(i);
            let k = s.key.load(Ordering::Relaxed);
            if k == addr {
                return Some(s);
            }
            if k == 0 && s.ends_probe() {
                return None;
            }
        }
        None
    }

    /// The words of the object at `addr`, if the map knows it (and no writer is changing
    /// them for long, and they are not poisoned).
    ///
    /// Each slot's state is read before its key, so the key and words read after it are
    /// one write's when the state has not moved at the end; and a never-used key seen with
    /// no writer inside ends the probe (a writer claiming it may have sent a later insert
    /// past it). No writer is ever inside a slot a call reads unless the caller races
    /// itself: the retries are out of line.
    #[inline]
    pub fn get(&self, addr: usize) -> Option<[u64; N]> {
        if addr == 0 || addr == TOMB {
            return None;
        }
        for i in Self::path(addr) {
            let s = self.slot(i);
            let before = s.state.load(Ordering::Acquire);
            let k = s.key.load(Ordering::Relaxed);
            if k == addr {
                if before & (WRITING | POISON) == 0 {
                    let words = std::array::from_fn(|i| s.words[i].load(Ordering::Relaxed));
                    fence(Ordering::Acquire);
                    if s.state.load(Ordering::Relaxed) == before {
                        return Some(words);
                    }
                }
                return self.get_retrying(addr);
            }
            if k == 0 && before & WRITING == 0 {
                return None;
            }
        }
        None
    }

    /// [`AddressMap::get`] when a writer was inside the object's slot: found again, then
    /// read with bounded retries.
    #[cold]
    #[inline(never)]
    fn get_retrying(&self, addr: usize) -> Option<[u64; N]> {
        self.find(addr)?.read_retrying(addr)
    }

    /// An object was made at `addr` with these words: kept in the first free slot of its
    /// probe (or the slot that still holds `addr`, if its destroy was never told). False
    /// when the probe holds no free slot: as many objects are alive around this address as
    /// the map can hold, and this one stays unknown.
    pub fn insert(&self, addr: usize, words: [u64; N]) -> bool {
        if addr == 0 || addr == TOMB {
            return false;
        }
        for i in Self::path(addr) {
            let s = self.slot(i);
            let k = s.key.load(Ordering::Relaxed);
            let free = k == 0 || k == TOMB;
            if !free && k != addr {
                continue;
            }
            // A free slot another writer is in is left to it; a slot still holding this
            // address (its old object destroyed behind our back) is this object's.
            let Some(_) = s.lock(if free { 1 } else { SPINS }) else {
                if !free {
                    s.state.fetch_or(POISON, Ordering::Relaxed);
                }
                continue;
            };
            let now = s.key.load(Ordering::Relaxed);
            if now == 0 || now == TOMB || now == addr {
                s.key.store(addr, Ordering::Relaxed);
                for (w, v) in s.words.iter().zip(words) {
                    w.store(v, Ordering::Relaxed);
                }
                s.unlock(true);
                return true;
            }
            // Taken by another object since the look: on to the next slot.
            s.unlock(false);
        }
        false
    }

    /// Word `i` of the object at `addr` is now `value` (an object the map does not know
    /// stays unknown). A writer that cannot get in poisons the object instead.
    pub fn set(&self, addr: usize, i: usize, value: u64) {
        self.update(addr, |w| {
            if let Some(w) = w.get_mut(i) {
                *w = value;
            }
        })
    }

    /// Changes the words of the object at `addr` with `f`, if the map knows it.
    pub fn update(&self, addr: usize, f: impl FnOnce(&mut [u64; N])) {
        let Some(s) = self.lock_known(addr) else {
            return;
        };
        if s.key.load(Ordering::Relaxed) == addr {
            let mut words = std::array::from_fn(|i| s.words[i].load(Ordering::Relaxed));
            f(&mut words);
            for (w, v) in s.words.iter().zip(words) {
                w.store(v, Ordering::Relaxed);
            }
        }
        s.unlock(false);
    }

    /// The object at `addr` is about to be destroyed: its slot is freed for the next
    /// object. (Before the real destroy: an object made at the freed address afterwards is
    /// never undone.)
    pub fn remove(&self, addr: usize) {
        // A slot that cannot be locked is poisoned; it is freed when the address is made
        // again.
        let Some(s) = self.lock_known(addr) else {
            return;
        };
        let mine = s.key.load(Ordering::Relaxed) == addr;
        if mine {
            s.key.store(TOMB, Ordering::Relaxed);
        }
        s.unlock(mine);
    }

    /// Objects alive in the map now (a walk of every slot: for messages, not calls).
    pub fn live(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| !matches!(s.key.load(Ordering::Relaxed), 0 | TOMB))
            .count()
    }

    /// For tests: a writer that entered the slot of `addr` and never left (a thread
    /// stopped inside, or one a fork child does not have). True if it got in.
    #[doc(hidden)]
    pub fn hold_for_test(&self, addr: usize) -> bool {
        self.find(addr).and_then(|s| s.lock(1)).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    type Map = AddressMap<3, 64>;

    #[test]
    fn words_follow_insert_set_and_remove_at_a_reused_address() {
        let m = Map::new();
        let a = 0x1000;
        assert_eq!(m.get(a), None);
        assert!(m.insert(a, [1, 2, 3]));
        assert_eq!(m.get(a), Some([1, 2, 3]));
        m.set(a, 2, 9);
        assert_eq!(m.get(a), Some([1, 2, 9]));
        m.remove(a);
        assert_eq!(m.get(a), None, "a destroyed object is unknown");
        m.set(a, 2, 7);
        assert_eq!(m.get(a), None, "setting it makes it no better known");
        assert!(
            m.insert(a, [4, 5, 6]),
            "the allocator hands the address out again"
        );
        assert_eq!(m.get(a), Some([4, 5, 6]));
        assert!(!m.insert(0, [1, 1, 1]));
        assert!(!m.insert(TOMB, [1, 1, 1]));
        assert_eq!(m.get(0), None);
        assert_eq!(m.live(), 1);
    }

    /// Objects made and destroyed at ever new addresses, far more than the map has slots:
    /// every one is known while it lives, and the map never holds more than are alive.
    #[test]
    fn destroyed_objects_free_their_slots_for_new_addresses() {
        let m = Map::new();
        let mut alive = std::collections::VecDeque::new();
        for n in 1..=100_000usize {
            let a = n * 0x40;
            assert!(m.insert(a, [n as u64, 0, 0]), "object {n}");
            alive.push_back(a);
            if alive.len() > 8 {
                m.remove(alive.pop_front().unwrap());
            }
            for &b in &alive {
                assert_eq!(m.get(b).map(|w| w[0]), Some((b / 0x40) as u64));
            }
        }
        assert_eq!(m.live(), 8);
    }

    /// At the bound an insert says no (the caller says so), and once objects are
    /// destroyed new ones are kept again: the map never stops knowing objects for good.
    #[test]
    fn a_full_map_refuses_then_takes_objects_again() {
        let m = AddressMap::<1, 16>::new();
        let addrs: Vec<usize> = (1..=16).map(|n| n * 0x100).collect();
        for &a in &addrs {
            assert!(m.insert(a, [a as u64]));
        }
        assert_eq!(m.live(), 16);
        assert!(!m.insert(0x10_0000, [1]), "17 alive in 16 slots");
        assert_eq!(m.get(0x10_0000), None);
        for &a in &addrs {
            assert_eq!(m.get(a), Some([a as u64]), "the live ones are intact");
        }
        m.remove(addrs[3]);
        assert!(
            m.insert(0x10_0000, [1]),
            "a freed slot takes the next object"
        );
        assert_eq!(m.get(0x10_0000), Some([1]));
        assert_eq!(m.live(), 16);
    }

    /// An object made at an address whose old object was destroyed behind the map's back
    /// takes the old slot over.
    #[test]
    fn an_address_made_again_without_a_destroy_takes_its_old_slot() {
        let m = Map::new();
        assert!(m.insert(0x2000, [1, 1, 1]));
        assert!(m.insert(0x2000, [2, 2, 2]));
        assert_eq!(m.get(0x2000), Some([2, 2, 2]));
        assert_eq!(m.live(), 1);
        m.remove(0x2000);
        assert_eq!(m.get(0x2000), None, "no older copy shows through");
    }

    /// A writer that never left (a signal handler interrupting it, or a thread a fork
    /// child does not have) hangs nobody: readers give up, writers poison that one object,
    /// and other objects, even at the next slot, are untouched.
    #[test]
    fn a_writer_that_never_left_hangs_nobody() {
        let m = Map::new();
        let a = 0x3000;
        assert!(m.insert(a, [1, 2, 3]));
        assert!(m.hold_for_test(a));
        assert_eq!(m.get(a), None, "a reader gives up");
        m.set(a, 0, 9);
        assert_eq!(m.get(a), None);
        m.remove(a);
        assert!(m.insert(0x3100, [4, 4, 4]), "other objects go elsewhere");
        assert_eq!(m.get(0x3100), Some([4, 4, 4]));
    }

    /// A poisoned object reads as unknown until it is made again.
    #[test]
    fn a_poisoned_object_is_unknown_until_made_again() {
        let m = Map::new();
        assert!(m.insert(0x4000, [1, 2, 3]));
        m.find(0x4000)
            .unwrap()
            .state
            .fetch_or(POISON, Ordering::Relaxed);
        assert_eq!(m.get(0x4000), None);
        m.set(0x4000, 0, 5);
        assert_eq!(m.get(0x4000), None, "a set keeps the mark");
        assert!(m.insert(0x4000, [7, 8, 9]));
        assert_eq!(m.get(0x4000), Some([7, 8, 9]));
    }

    /// `n` addresses whose probes all start at one slot of a map `M`.
    fn same_home<const N: usize, const S: usize>(n: usize) -> Vec<usize> {
        let home = AddressMap::<N, S>::home(0x10_0000);
        (0..)
            .map(|i| 0x10_0000 + (i << 4))
            .filter(|&a| AddressMap::<N, S>::home(a) == home)
            .take(n)
            .collect()
    }

    /// The reader's race, step by step: it found its object's slot; the object is
    /// destroyed and another, at another address, takes the freed slot; the reader then
    /// reads the slot and must get nothing, not the other object's words.
    #[test]
    fn a_reader_of_a_slot_freed_and_taken_by_another_address_gets_nothing() {
        let m = Map::new();
        let [a, b] = same_home::<3, 64>(2)[..] else {
            unreachable!()
        };
        assert!(m.insert(a, [1, 1, 1]));
        let found = m.find(a).unwrap();
        m.remove(a);
        assert!(m.insert(b, [2, 2, 2]));
        assert!(std::ptr::eq(m.find(b).unwrap(), found), "b took a's slot");
        assert_eq!(found.read_retrying(a), None);
        assert_eq!(found.read_retrying(b), Some([2, 2, 2]));
    }

    /// Threads making, changing and destroying objects at addresses whose probes all
    /// start at one slot (so each takes the slots the others just freed) read only their
    /// own whole writes, and readers of slots being freed and taken by another address
    /// never read that address's words as their own.
    #[test]
    fn threads_racing_over_shared_slots_read_only_their_own_whole_writes() {
        static M: AddressMap<4, 32> = AddressMap::new();
        let addrs = Arc::new(same_home::<4, 32>(16));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..4usize)
            .map(|t| {
                let addrs = addrs.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        // Four addresses per thread.
                        let a = addrs[t * 4 + i as usize % 4];
                        let tag = a as u64;
                        if M.insert(a, [tag, i, tag, i]) {
                            M.set(a, 3, i + 1);
                            assert_eq!(M.get(a), Some([tag, i, tag, i + 1]));
                            M.remove(a);
                            assert_eq!(M.get(a), None);
                        }
                    }
                })
            })
            .collect();
        // Readers of addresses made and destroyed by the writers: whatever they get is a
        // whole write of that very address.
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (stop, addrs) = (stop.clone(), addrs.clone());
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for &a in addrs.iter() {
                            if let Some([t0, i0, t1, i1]) = M.get(a) {
                                assert_eq!((t0, t1), (a as u64, a as u64), "another's words");
                                assert!(i1 == i0 || i1 == i0 + 1, "a torn write");
                                seen += 1;
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(M.live(), 0, "every slot freed");
    }

    /// A fork child whose parent had a thread inside a write: the child's calls never
    /// wait for it, objects it inherited read as they were, and it makes its own.
    #[test]
    fn a_fork_child_never_waits_for_a_parents_writer() {
        static M: AddressMap<2, 64> = AddressMap::new();
        assert!(M.insert(0x5000, [1, 1]));
        assert!(M.insert(0x6000, [2, 2]));
        // A writer inside 0x6000's slot at the fork (it never leaves in the child).
        assert!(M.hold_for_test(0x6000));
        // SAFETY: the child only touches the map (atomics, no allocation) and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let ok = M.get(0x5000) == Some([1, 1])
                && M.get(0x6000).is_none()
                && M.insert(0x7000, [3, 3])
                && M.get(0x7000) == Some([3, 3]);
            M.set(0x6000, 0, 9);
            M.remove(0x6000);
            M.remove(0x5000);
            let ok = ok && M.get(0x5000).is_none() && M.insert(0x5000, [4, 4]);
            // SAFETY: leaving the child without running the test harness's exit.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        // A bounded wait: a child stuck on a lock would be killed and fail the test.
        let mut status = 0;
        let mut done = false;
        for _ in 0..2000 {
            // SAFETY: waiting for our own child.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                done = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if !done {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
        }
        assert!(done, "the child hung");
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's checks failed: {status}"
        );
    }
}
