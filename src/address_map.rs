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
//! a small sequence lock: a state word (a writer inside, a sequence) and the key and words
//! as atomics. A writer that makes or changes an object takes the state word with one
//! compare-exchange, writes, and moves the sequence on; a reader reads the state, the key
//! and the words, and keeps them only if the state did not move and the key is its own
//! address. So a reader that found its slot just as the object was destroyed and the slot
//! taken by another object at another address gets nothing, never the other object's
//! words. A destroy is one store of the tombstone: it needs no lock, because the insert
//! that takes the freed slot moves the sequence on.
//!
//! Nothing waits for long. A reader that meets a writer inside its slot retries a bounded
//! number of times, then answers "unknown" (the caller passes the call through). A writer
//! that meets another writer inside a free slot goes on to the next one; one that meets
//! another inside its own object's slot (two threads changing one object at once, or a
//! signal handler interrupting a writer on its own thread) waits as long, then *poisons*
//! the object: its key gets the [`POISONED`] bit, so readers no longer find it ("unknown")
//! until the object is made again, because its words may now be stale. A fork child keeps
//! the map as it is (its objects are the parent's, copied): a slot a parent thread was
//! writing at the fork stays shut, and only the object in it reads as unknown. Nothing
//! allocates: the map is one array, all zero bytes to start with, so a `static` costs no
//! memory until it is used.
//!
//! A create or a change takes one atomic read-modify-write (the compare-exchange that enters
//! the slot); it leaves with a plain store of the next sequence, since no other writer
//! changes the state while one is inside (the poison mark lives in the key for that reason:
//! a writer leaving cannot overwrite it), and a destroy takes none. The wrapped create, set
//! and destroy calls of a PyTorch GEMM make ten writes, so the locked instructions saved,
//! tens of cycles each, are what this design is for.
//!
//! An object the map was never told of, or one made at an address that still held a live
//! object the map was never told was destroyed (destroyed behind the interposer's back)
//! once a tombstone lies before that old slot, is unknown or reads the old words until
//! the old slot is made or destroyed again: the map only knows what it is told.

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

/// The longest probe (slots looked at from an address's home slot).
pub const PROBES: usize = 64;
/// The key of a freed slot: the poison bit alone (the poisoned key of NULL, which no
/// object has).
pub const TOMB: usize = POISONED;
/// The bit a poisoned object's key carries, the top one (no user-space address has it; the
/// map refuses an address that does). So the map refuses every address that is 0 or has the
/// top bit, the tombstone with them, with one signed compare ([`AddressMap::refused`]).
pub const POISONED: usize = 1 << (usize::BITS - 1);
/// How many times a reader or writer looks at a slot another writer is inside before it
/// gives up (about a millisecond at most).
const SPINS: u32 = 1 << 12;

/// `state`: bit 0 a writer is inside, the rest a sequence moved on by every write.
const WRITING: u64 = 1;
const STEP: u64 = 2;

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
    #[inline(always)]
    fn lock(&self, tries: u32) -> Option<u64> {
        if let Some(s) = self.try_enter() {
            return Some(s);
        }
        if tries <= 1 {
            return None;
        }
        self.lock_waiting(tries - 1)
    }

    #[cold]
    #[inline(never)]
    fn lock_waiting(&self, tries: u32) -> Option<u64> {
        for _ in 0..tries {
            std::hint::spin_loop();
            if let Some(s) = self.try_enter() {
                return Some(s);
            }
        }
        None
    }

    /// One look: enters as the writer if no other writer is inside; the state to leave from.
    #[inline(always)]
    fn try_enter(&self) -> Option<u64> {
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
        None
    }

    /// Leaves (entered from state `s`), moving the sequence on: a plain store, since no
    /// other writer changes the state while this one is inside.
    #[inline(always)]
    fn unlock(&self, s: u64) {
        self.state.store(s.wrapping_add(STEP), Ordering::Release);
    }

    /// A writer that could not get in to change the object at `addr`: the object reads as
    /// unknown until it is made again (only if the slot still holds it).
    #[cold]
    #[inline(never)]
    fn poison(&self, addr: usize) {
        let _ =
            self.key
                .compare_exchange(addr, addr | POISONED, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// `read` of the slot, if it holds `addr` whole and unpoisoned, after a writer that was
    /// inside leaves (bounded: then unknown).
    #[cold]
    #[inline(never)]
    fn read_retrying<T>(&self, addr: usize, read: impl Fn(&Slot<N>) -> T) -> Option<T> {
        for _ in 0..SPINS {
            let before = self.state.load(Ordering::Acquire);
            if before & WRITING != 0 {
                std::hint::spin_loop();
                continue;
            }
            let key = self.key.load(Ordering::Relaxed);
            let got = read(self);
            fence(Ordering::Acquire);
            if self.state.load(Ordering::Relaxed) == before {
                return (key == addr).then_some(got);
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

/// An object's words while its writer is inside its slot ([`AddressMap::edit`]).
pub struct Words<'a, const N: usize>(&'a [AtomicU64; N]);

impl<const N: usize> Words<'_, N> {
    /// Word `i` (`i < N`).
    #[inline(always)]
    pub fn get(&self, i: usize) -> u64 {
        self.0[i].load(Ordering::Relaxed)
    }

    /// Word `i` is now `v` (`i < N`).
    #[inline(always)]
    pub fn set(&self, i: usize, v: u64) {
        self.0[i].store(v, Ordering::Relaxed)
    }
}

/// The slot an object was found in ([`AddressMap::find_slot`]): read one of its words
/// that never change, or change it, without looking it up again.
pub struct Found<'a, const N: usize> {
    slot: &'a Slot<N>,
    addr: usize,
}

impl<const N: usize> Found<'_, N> {
    /// Word `i` (`i < N`) as it was made: only for a word no writer changes once the object
    /// is made (read with no check that the slot still holds the object).
    #[inline(always)]
    pub fn word(&self, i: usize) -> u64 {
        self.slot.words[i].load(Ordering::Relaxed)
    }

    /// [`AddressMap::edit`] of this slot: `f` runs only if the slot still holds the object.
    #[inline(always)]
    pub fn edit(&self, f: impl FnOnce(&Words<'_, N>)) {
        let s = self.slot;
        let Some(st) = s.lock(SPINS) else {
            s.poison(self.addr);
            return;
        };
        if s.key.load(Ordering::Relaxed) == self.addr {
            f(&Words(&s.words));
        }
        s.unlock(st);
    }

    /// Word 0 of this slot changed by `f` in place, if the slot still holds the object and
    /// `f` gives a word (`Some`): the one-word change a set makes on every PyTorch GEMM,
    /// with no closure over all the words. `false` when it could not be made here (`f`
    /// gave `None`, the object is gone, or a writer kept the slot): then change the object
    /// through [`Found::edit`], or (gone or kept) leave it.
    #[inline(always)]
    pub fn edit_first(&self, f: impl FnOnce(u64) -> Option<u64>) -> bool {
        let s = self.slot;
        let Some(st) = s.try_enter() else {
            return false;
        };
        let mut done = false;
        if s.key.load(Ordering::Relaxed) == self.addr {
            if let Some(w) = f(s.words[0].load(Ordering::Relaxed)) {
                s.words[0].store(w, Ordering::Relaxed);
                done = true;
            }
        }
        s.unlock(st);
        done
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

    /// The first slot an address is looked for in: one multiply of the address, high bits
    /// kept (Fibonacci hashing). The multiplier is the golden ratio's divided by 16, so a
    /// 16-byte step of the address moves the product by the golden ratio's: the product's
    /// high bits are those of the address without its alignment bits times the golden
    /// ratio's multiplier, as when the address was shifted first, without the shift (on
    /// each of the 14 map operations of an F.linear).
    #[inline(always)]
    fn home(addr: usize) -> usize {
        let h = (addr as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15 >> 4);
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

    /// Whether no object can be kept at `addr` (NULL, the tombstone, an address with the
    /// poison bit): one signed compare, on every lookup, insert and destroy.
    #[inline(always)]
    fn refused(addr: usize) -> bool {
        const _: () = assert!(POISONED == 1 << (usize::BITS - 1) && TOMB == POISONED);
        addr as isize <= 0
    }

    /// The slot whose key is `want(key)`, on `addr`'s probe.
    #[inline]
    fn find(&self, addr: usize, want: impl Fn(usize) -> bool) -> Option<&Slot<N>> {
        for i in Self::path(addr) {
            let s = self.slot(i);
            let k = s.key.load(Ordering::Relaxed);
            if want(k) {
                return Some(s);
            }
            if k == 0 && s.ends_probe() {
                return None;
            }
        }
        None
    }

    /// The slot holding `addr` itself, poisoned or not (what an insert takes over and a
    /// destroy frees).
    #[inline]
    fn find_any(&self, addr: usize) -> Option<&Slot<N>> {
        // (The tombstone without the poison bit is no address the map takes.)
        self.find(addr, |k| k & !POISONED == addr)
    }

    /// `read` of the slot of the object at `addr`, if the map knows it (and no writer is
    /// changing it for long, and it is not poisoned).
    ///
    /// Each slot's state is read before its key, so the key and words read after it are
    /// one write's when the state has not moved at the end; and a never-used key seen with
    /// no writer inside ends the probe (a writer claiming it may have sent a later insert
    /// past it). The home slot is looked at here (where a handful of live objects are);
    /// the rest of the probe, and the retries when a writer is inside (only when the
    /// caller races itself), out of line.
    #[inline(always)]
    fn lookup<T>(&self, addr: usize, read: impl Fn(&Slot<N>) -> T + Copy) -> Option<T> {
        if Self::refused(addr) {
            return None;
        }
        let s = self.slot(Self::home(addr));
        let before = s.state.load(Ordering::Acquire);
        let k = s.key.load(Ordering::Relaxed);
        if k == addr && before & WRITING == 0 {
            let got = read(s);
            fence(Ordering::Acquire);
            if s.state.load(Ordering::Relaxed) == before {
                return Some(got);
            }
        } else if k == 0 && before & WRITING == 0 {
            return None;
        }
        self.lookup_probe(addr, read)
    }

    /// [`AddressMap::lookup`] past the home slot.
    #[cold]
    #[inline(never)]
    fn lookup_probe<T>(&self, addr: usize, read: impl Fn(&Slot<N>) -> T + Copy) -> Option<T> {
        for i in Self::path(addr) {
            let s = self.slot(i);
            let before = s.state.load(Ordering::Acquire);
            let k = s.key.load(Ordering::Relaxed);
            if k == addr {
                if before & WRITING == 0 {
                    let got = read(s);
                    fence(Ordering::Acquire);
                    if s.state.load(Ordering::Relaxed) == before {
                        return Some(got);
                    }
                }
                return self.lookup_retrying(addr, read);
            }
            if k == 0 && before & WRITING == 0 {
                return None;
            }
        }
        None
    }

    /// [`AddressMap::lookup`] when a writer was inside the object's slot: found again,
    /// then read with bounded retries.
    #[cold]
    #[inline(never)]
    fn lookup_retrying<T>(&self, addr: usize, read: impl Fn(&Slot<N>) -> T) -> Option<T> {
        self.find(addr, |k| k == addr)?.read_retrying(addr, read)
    }

    /// The words of the object at `addr`, if the map knows it.
    #[inline]
    pub fn get(&self, addr: usize) -> Option<[u64; N]> {
        self.lookup(addr, |s| {
            std::array::from_fn(|i| s.words[i].load(Ordering::Relaxed))
        })
    }

    /// Word `i` of the object at `addr`, if the map knows it: the same checks as
    /// [`AddressMap::get`], one word read.
    #[inline]
    pub fn get_word(&self, addr: usize, i: usize) -> Option<u64> {
        let i = i.min(N - 1);
        self.lookup(addr, move |s| {
            // SAFETY: i < N.
            unsafe { s.words.get_unchecked(i) }.load(Ordering::Relaxed)
        })
    }

    /// An object was made at `addr` with these words: kept in the first free slot of its
    /// probe (or the slot that still holds `addr`, if its destroy was never told). False
    /// when the probe holds no free slot: as many objects are alive around this address as
    /// the map can hold, and this one stays unknown.
    #[inline]
    pub fn insert(&self, addr: usize, words: [u64; N]) -> bool {
        self.insert_first(addr, &words)
    }

    /// [`AddressMap::insert`] writing only the first `words.len()` words (at most `N`; the
    /// others keep what the slot held before: for a caller whose first words say the
    /// rest is not read). The home slot is taken here when it is free; the probe out of
    /// line.
    #[inline(always)]
    pub fn insert_first(&self, addr: usize, words: &[u64]) -> bool {
        if Self::refused(addr) {
            return false;
        }
        let fill = |s: &Slot<N>| {
            for (w, &v) in s.words.iter().zip(words) {
                w.store(v, Ordering::Relaxed);
            }
        };
        self.claim_home(addr, fill) || self.insert_probe(addr, words)
    }

    /// Takes `addr`'s home slot if it is free: `fill` writes the words, then the key is
    /// stored (the words before the key: a destroy reads the slot without a lock). Inlined
    /// into each insert, so each keeps its words in registers.
    #[inline(always)]
    fn claim_home(&self, addr: usize, fill: impl FnOnce(&Slot<N>)) -> bool {
        // The state before the key: entering from that very state means no writer came
        // between, so the slot is still free as read.
        let s = self.slot(Self::home(addr));
        let st = s.state.load(Ordering::Acquire);
        let k = s.key.load(Ordering::Relaxed);
        if st & WRITING == 0
            && (k == 0 || k == TOMB)
            && s.state
                .compare_exchange(st, st | WRITING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            fence(Ordering::Release);
            fill(s);
            s.key.store(addr, Ordering::Relaxed);
            s.unlock(st);
            return true;
        }
        false
    }

    /// [`AddressMap::insert_first`] of the first two words (`N >= 2`), with the words as
    /// two values: the path of a create whose object two words describe, with both held in
    /// registers to the end (through a slice they were stored on the stack on every call,
    /// for the probe's sake).
    #[inline(always)]
    pub fn insert_pair(&self, addr: usize, w0: u64, w1: u64) -> bool {
        const { assert!(N >= 2) };
        if Self::refused(addr) {
            return false;
        }
        let fill = |s: &Slot<N>| {
            s.words[0].store(w0, Ordering::Relaxed);
            s.words[1].store(w1, Ordering::Relaxed);
        };
        self.claim_home(addr, fill) || self.insert_pair_probe(addr, w0, w1)
    }

    #[cold]
    #[inline(never)]
    fn insert_pair_probe(&self, addr: usize, w0: u64, w1: u64) -> bool {
        self.insert_probe(addr, &[w0, w1])
    }

    /// [`AddressMap::insert_first`] along the whole probe: the first free slot, or the one
    /// that still holds `addr`.
    #[cold]
    #[inline(never)]
    fn insert_probe(&self, addr: usize, words: &[u64]) -> bool {
        for i in Self::path(addr) {
            let s = self.slot(i);
            let k = s.key.load(Ordering::Relaxed);
            let free = k == 0 || k == TOMB;
            if !free && k & !POISONED != addr {
                continue;
            }
            // A free slot another writer is in is left to it; a slot still holding this
            // address (its old object destroyed behind our back) is this object's.
            let Some(st) = s.lock(if free { 1 } else { SPINS }) else {
                if !free {
                    s.poison(addr);
                }
                continue;
            };
            let now = s.key.load(Ordering::Relaxed);
            if now == 0 || now == TOMB || now & !POISONED == addr {
                for (w, &v) in s.words.iter().zip(words) {
                    w.store(v, Ordering::Relaxed);
                }
                s.key.store(addr, Ordering::Relaxed);
                s.unlock(st);
                return true;
            }
            // Taken by another object since the look: on to the next slot.
            s.unlock(st);
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

    /// Changes the words of the object at `addr` with `f`, if the map knows it (a poisoned
    /// object stays poisoned). Only the words `f` changed are written.
    pub fn update(&self, addr: usize, f: impl FnOnce(&mut [u64; N])) {
        self.edit(addr, |w| {
            let old: [u64; N] = std::array::from_fn(|i| w.get(i));
            let mut new = old;
            f(&mut new);
            for (i, (o, v)) in old.into_iter().zip(new).enumerate() {
                if o != v {
                    w.set(i, v);
                }
            }
        })
    }

    /// Changes the object at `addr` through `f`, which reads and writes its words one by
    /// one while no other writer is inside its slot, if the map knows it (a poisoned object
    /// stays poisoned). A writer that cannot get in poisons the object instead.
    #[inline(always)]
    pub fn edit(&self, addr: usize, f: impl FnOnce(&Words<'_, N>)) {
        if Self::refused(addr) {
            return;
        }
        let home = self.slot(Self::home(addr));
        let s = if home.key.load(Ordering::Relaxed) == addr {
            home
        } else {
            match self.find_probe(addr) {
                Some(s) => s,
                None => return,
            }
        };
        let Some(st) = s.lock(SPINS) else {
            s.poison(addr);
            return;
        };
        if s.key.load(Ordering::Relaxed) == addr {
            f(&Words(&s.words));
        }
        s.unlock(st);
    }

    /// The slot of the object at `addr`, if the map knows it (unpoisoned).
    #[inline(always)]
    pub fn find_slot(&self, addr: usize) -> Option<Found<'_, N>> {
        if Self::refused(addr) {
            return None;
        }
        let home = self.slot(Self::home(addr));
        let slot = if home.key.load(Ordering::Relaxed) == addr {
            home
        } else {
            self.find_probe(addr)?
        };
        Some(Found { slot, addr })
    }

    /// [`AddressMap::find_slot`] of the object's home slot only: `None` if it is not there
    /// (then [`AddressMap::find_slot`] looks further).
    #[inline(always)]
    pub fn find_home(&self, addr: usize) -> Option<Found<'_, N>> {
        if Self::refused(addr) {
            return None;
        }
        let slot = self.slot(Self::home(addr));
        (slot.key.load(Ordering::Relaxed) == addr).then_some(Found { slot, addr })
    }

    /// The slot holding `addr` (unpoisoned), looked for along the whole probe.
    #[cold]
    #[inline(never)]
    fn find_probe(&self, addr: usize) -> Option<&Slot<N>> {
        self.find(addr, |k| k == addr)
    }

    /// The object at `addr` is about to be destroyed: its slot is freed for the next
    /// object. (Before the real destroy: an object made at the freed address afterwards is
    /// never undone.)
    ///
    /// One store, no lock: nothing else can take or change the slot while it holds `addr`
    /// but a writer of this very object (the caller racing itself: its change then lands
    /// in a freed slot, which no reader reads), and an insert taking the freed slot moves
    /// the sequence on, which is what a reader that found `addr` there checks before it
    /// trusts what it read.
    #[inline(always)]
    pub fn remove(&self, addr: usize) {
        if Self::refused(addr) {
            return;
        }
        let s = self.slot(Self::home(addr));
        if s.key.load(Ordering::Relaxed) & !POISONED == addr {
            s.key.store(TOMB, Ordering::Relaxed);
            return;
        }
        self.remove_probe(addr);
    }

    /// [`AddressMap::remove`], with word `i` of the object as it was (`None` if the map
    /// did not hold it). Only for a word no writer changes once the object is made.
    #[inline(always)]
    pub fn take(&self, addr: usize, i: usize) -> Option<u64> {
        if Self::refused(addr) {
            return None;
        }
        match self.take_home(addr, i) {
            Some(v) => Some(v),
            None => self.take_probe(addr, i),
        }
    }

    /// [`AddressMap::take`] of the object's home slot only (where a handful of live objects
    /// are): `None` if it is not there (nor refused), and [`AddressMap::take`] looks further.
    /// For a destroy whose every other case is out of line.
    #[inline(always)]
    pub fn take_home(&self, addr: usize, i: usize) -> Option<u64> {
        if Self::refused(addr) {
            return None;
        }
        let i = i.min(N - 1);
        let s = self.slot(Self::home(addr));
        if s.key.load(Ordering::Relaxed) & !POISONED == addr {
            // SAFETY: i < N.
            let v = unsafe { s.words.get_unchecked(i) }.load(Ordering::Relaxed);
            s.key.store(TOMB, Ordering::Relaxed);
            return Some(v);
        }
        None
    }

    #[cold]
    #[inline(never)]
    fn take_probe(&self, addr: usize, i: usize) -> Option<u64> {
        let s = self.find_any(addr)?;
        let v = s.words[i].load(Ordering::Relaxed);
        s.key.store(TOMB, Ordering::Relaxed);
        Some(v)
    }

    /// [`AddressMap::remove`] past the home slot.
    #[cold]
    #[inline(never)]
    fn remove_probe(&self, addr: usize) {
        if let Some(s) = self.find_any(addr) {
            s.key.store(TOMB, Ordering::Relaxed);
        }
    }

    /// Objects alive in the map now (a walk of every slot: for messages, not calls).
    pub fn live(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| !matches!(s.key.load(Ordering::Relaxed), 0 | TOMB))
            .count()
    }

    /// For tests: a writer that entered the slot of `addr` and has not left (a thread
    /// stopped inside, or one a fork child does not have); the state to leave with
    /// ([`AddressMap::leave_for_test`]), if it got in.
    #[doc(hidden)]
    pub fn hold_for_test(&self, addr: usize) -> Option<u64> {
        self.find_any(addr).and_then(|s| s.lock(1))
    }

    /// For tests: the writer of [`AddressMap::hold_for_test`] leaves.
    #[doc(hidden)]
    pub fn leave_for_test(&self, addr: usize, state: u64) {
        if let Some(s) = self.find_any(addr) {
            s.unlock(state);
        }
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

    /// Objects alive at once at the regular strides an allocator hands out (16 bytes to a
    /// page and beyond, from a heap's or an mmap's base) spread over the slots: half a
    /// large map alive at once is kept whole, three in four in their home slot (as with
    /// the address shifted by its alignment before the multiply; a multiply of the address
    /// itself by the golden ratio's multiplier kept 29% of those 48 bytes apart at home).
    #[test]
    fn regular_addresses_spread_over_the_slots() {
        const S: usize = 1 << 13;
        for base in [0x5555_5555_0000usize, 0x7f00_0000_0000] {
            for stride in [16usize, 48, 64, 0x70, 0x1000, 0x10_0000] {
                let m = Box::new(AddressMap::<1, S>::new());
                let addrs: Vec<usize> = (0..S / 2).map(|i| base + i * stride).collect();
                for &a in &addrs {
                    assert!(
                        m.insert(a, [a as u64]),
                        "{base:#x} + i * {stride:#x}: {a:#x}"
                    );
                }
                let at_home = addrs.iter().filter(|&&a| m.find_home(a).is_some()).count();
                assert!(
                    at_home * 4 >= addrs.len() * 3,
                    "stride {stride:#x}: {at_home} of {} in their home slot",
                    addrs.len()
                );
                for &a in &addrs {
                    assert_eq!(m.get(a), Some([a as u64]));
                }
            }
        }
    }

    /// The one-compare refusal refuses exactly NULL, the tombstone and every address with
    /// the poison bit, and no key the map stores (a live, poisoned or freed one) is an
    /// address it takes.
    #[test]
    fn the_refusal_is_null_the_tombstone_and_the_poison_bit() {
        let some = [
            0usize,
            1,
            0x40,
            0x7fff_ffff_f000,
            1 << 56,
            (1 << 62) - 1,
            1 << 62,
            (1 << 62) | 0x40,
            POISONED - 1,
            POISONED,
            POISONED | 1,
            POISONED | 0x40,
            usize::MAX - 1,
            usize::MAX,
        ];
        for a in some {
            let want = a == 0 || a == TOMB || a & POISONED != 0;
            assert_eq!(Map::refused(a), want, "{a:#x}");
            if !want {
                assert_ne!(
                    a | POISONED,
                    a,
                    "{a:#x}: its poisoned key is no address taken"
                );
                assert!(Map::refused(a | POISONED));
            }
        }
        assert!(
            Map::refused(TOMB) && TOMB & !POISONED == 0,
            "a freed key is NULL's"
        );
    }

    /// The two-word insert a create makes (`insert_pair`) leaves the map as the general
    /// one (`insert_first`) does: in the home slot, past taken ones along the probe, over a
    /// slot its address still holds, refused for NULL, the tombstone and the poison bit, and
    /// false once the probe is full.
    #[test]
    fn a_pair_insert_is_the_general_insert() {
        let (pair, general) = (Map::new(), Map::new());
        let mut addrs: Vec<usize> = (1..=80).map(|n| n * 0x40).collect();
        // Again at an address still held (its destroy never told), and refused ones.
        addrs.extend([0x40, 0x80, 0, TOMB, POISONED | 0x40, POISONED]);
        for (n, &a) in addrs.iter().enumerate() {
            let (w0, w1) = (n as u64 + 1, a as u64 ^ 0x55);
            assert_eq!(
                pair.insert_pair(a, w0, w1),
                general.insert_first(a, &[w0, w1]),
                "insert {n} at {a:#x}"
            );
            for &b in &addrs {
                assert_eq!(pair.get(b), general.get(b), "after insert {n}: {b:#x}");
            }
            if n % 3 == 0 {
                pair.remove(a);
                general.remove(a);
            }
        }
        assert_eq!(pair.live(), general.live());
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
        assert!(m.hold_for_test(a).is_some());
        assert_eq!(m.get(a), None, "a reader gives up");
        assert_eq!(m.get_word(a, 1), None);
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
        m.find_any(0x4000).unwrap().poison(0x4000);
        assert_eq!(m.get(0x4000), None);
        assert_eq!(m.get_word(0x4000, 0), None);
        m.set(0x4000, 0, 5);
        assert_eq!(m.get(0x4000), None, "a set keeps the mark");
        assert_eq!(m.live(), 1, "it keeps its slot");
        assert!(m.insert(0x4000, [7, 8, 9]));
        assert_eq!(m.get(0x4000), Some([7, 8, 9]));
        assert_eq!(m.live(), 1, "made again in its own slot");
        m.find_any(0x4000).unwrap().poison(0x4000);
        m.remove(0x4000);
        assert_eq!(m.live(), 0, "a destroy frees a poisoned object's slot");
        assert!(
            !m.insert(0x4000 | POISONED, [1, 1, 1]),
            "no address has the bit"
        );
    }

    /// A change that could not get in while another writer was inside the object's slot
    /// (that writer preempted for long, or interrupted by a signal handler making the
    /// change) is lost, so the object must read as unknown after that writer leaves too:
    /// the writer's leaving is a plain store of the state, which must not undo the mark.
    #[test]
    fn a_change_lost_to_a_writer_inside_keeps_the_object_unknown_after_it_leaves() {
        let m = Map::new();
        let a = 0x4800;
        assert!(m.insert(a, [1, 2, 3]));
        let held = m.hold_for_test(a).unwrap();
        m.set(a, 2, 9);
        m.leave_for_test(a, held);
        assert_eq!(m.get(a), None, "the lost set poisoned it");
        assert!(m.insert(a, [4, 5, 6]));
        assert_eq!(m.get(a), Some([4, 5, 6]));
    }

    #[test]
    fn one_word_reads_as_the_whole_object_does() {
        let m = Map::new();
        assert!(m.insert(0x5000, [10, 20, 30]));
        assert_eq!(m.get_word(0x5000, 0), Some(10));
        assert_eq!(m.get_word(0x5000, 2), Some(30));
        m.set(0x5000, 2, 31);
        assert_eq!(m.get_word(0x5000, 2), Some(31));
        assert_eq!(m.get_word(0x5100, 0), None);
        m.remove(0x5000);
        assert_eq!(m.get_word(0x5000, 0), None);
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

    /// Two addresses whose probes start at one slot of a [`Map`].
    fn two_at_one_home() -> [usize; 2] {
        same_home::<3, 64>(2).try_into().unwrap()
    }

    /// The home-slot-only paths of a set and a destroy: an object pushed past its home slot
    /// (another object lives there) is not found or freed there, and is left whole for the
    /// full probe; one in its home slot is.
    #[test]
    fn home_slot_paths_leave_an_object_past_its_home_to_the_probe() {
        let m = Map::new();
        let [a, b] = two_at_one_home();
        assert!(m.insert(a, [1, 1, 1]));
        assert!(
            m.insert(b, [2, 2, 2]),
            "b goes past its home, which a holds"
        );
        assert!(m.find_home(b).is_none());
        assert_eq!(m.take_home(b, 0), None);
        assert_eq!(m.get(b), Some([2, 2, 2]), "left whole");
        assert_eq!(m.find_home(a).map(|f| f.word(1)), Some(1));
        assert_eq!(m.take_home(a, 1), Some(1));
        assert_eq!(m.get(a), None, "freed");
        assert_eq!(m.take_home(a, 1), None, "not freed twice");
        assert_eq!(m.take(b, 2), Some(2), "the probe finds it");
        assert_eq!(m.live(), 0);
        assert!(m.find_home(0).is_none() && m.take_home(TOMB, 0).is_none());
    }

    /// The reader's race, step by step: it found its object's slot; the object is
    /// destroyed and another, at another address, takes the freed slot; the reader then
    /// reads the slot and must get nothing, not the other object's words.
    #[test]
    fn a_reader_of_a_slot_freed_and_taken_by_another_address_gets_nothing() {
        let m = Map::new();
        let [a, b] = two_at_one_home();
        assert!(m.insert(a, [1, 1, 1]));
        let found = m.find_any(a).unwrap();
        m.remove(a);
        assert!(m.insert(b, [2, 2, 2]));
        assert!(
            std::ptr::eq(m.find_any(b).unwrap(), found),
            "b took a's slot"
        );
        let words = |s: &Slot<3>| std::array::from_fn(|i| s.words[i].load(Ordering::Relaxed));
        assert_eq!(found.read_retrying(a, words), None);
        assert_eq!(found.read_retrying(b, words), Some([2, 2, 2]));
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
        assert!(M.hold_for_test(0x6000).is_some());
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
