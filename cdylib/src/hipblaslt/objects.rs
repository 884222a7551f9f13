//! What hipBLASLt will not tell back about its descriptors, kept from the calls that made
//! them.
//!
//! hipBLASLt 7.1.1 takes a matmul descriptor's compute and scale types at
//! `hipblasLtMatmulDescCreate` and has no attribute to read them; and its
//! `hipblasLtMatrixLayoutGetAttribute` answers only the batch count and stride: type, order,
//! rows, columns and leading dimension return `HIPBLAS_STATUS_INVALID_VALUE` (measured on
//! the real library, tests/conformance/hipblaslt.rs). Yet all of them make the key. So the
//! interposer wraps the creates, `hipblasLtMatrixLayoutSetAttribute` and the destroys, and
//! keeps `object address -> fields` in two lock-free claim maps
//! (`tunedblas_core::claim_map`), read once per matmul.
//!
//! PyTorch creates and destroys its descriptors around every GEMM and the allocator hands
//! the same few addresses out again, so each map holds a handful of slots: a destroyed
//! object's slot keeps its address, marked unknown, and the next object made there fills
//! it again. A destroy marks the slot unknown *before* the real destroy frees the address,
//! and a create fills it *after* the real create returned it, so a racing create at a
//! just-freed address is never undone.
//!
//! Each slot is a small sequence lock (a state word and the fields, all atomics): a reader
//! retries while a writer is inside, and gives up (unknown) after a bounded number of
//! tries; a writer that finds the slot held for as long (a signal handler interrupting a
//! writer on its own thread) takes it over. A fork child starts with empty maps
//! ([`Objects::forget_all_in_child`]), so nothing a parent's thread was doing at the fork
//! can hold it. Nothing here can block.
//!
//! An object the maps do not know (made before the interposer was loaded, or beyond the
//! bounded probe of a host holding thousands at once) has unknown fields: its calls pass
//! through untouched.

use std::ffi::c_void;
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};

use tunedblas_core::claim_map::{hash_of, ClaimMap, Probe, Zeroed};

/// Fields per object: a descriptor uses 2 (compute, scale), a layout 7.
pub const FIELDS: usize = 7;

/// Slots (objects alive or recently freed at distinct addresses) and the longest probe.
const SLOTS: usize = 1 << 13;
const MAX_PROBE: usize = 64;
/// How many times a reader or writer looks at a busy slot before giving up / taking over.
const SPINS: u32 = 1 << 16;

/// `state`: bit 0 a writer is inside, bit 1 the fields are known, the rest a sequence.
const WRITING: u64 = 1;
const KNOWN: u64 = 2;
const STEP: u64 = 4;

/// One object's fields behind its sequence lock.
pub struct Fields {
    state: AtomicU64,
    values: [AtomicU64; FIELDS],
}

// SAFETY: atomics only; all-zero is "unknown, no writer".
unsafe impl Zeroed for Fields {}

impl Fields {
    /// Enters as the writer; returns the state to leave from.
    fn lock(&self) -> u64 {
        let mut spins = 0;
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & WRITING == 0 || spins >= SPINS {
                let from = s & !WRITING;
                if self
                    .state
                    .compare_exchange_weak(s, from | WRITING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    // The WRITING mark before any field store: a reader that sees a new
                    // field (its Acquire fence) then sees the state moved on.
                    fence(Ordering::Release);
                    return from;
                }
            }
            spins += 1;
            std::hint::spin_loop();
        }
    }

    fn unlock(&self, from: u64, known: bool) {
        let next = (from & !(WRITING | KNOWN)).wrapping_add(STEP) | if known { KNOWN } else { 0 };
        self.state.store(next, Ordering::Release);
    }

    fn read(&self) -> Option<[u64; FIELDS]> {
        for _ in 0..SPINS {
            let before = self.state.load(Ordering::Acquire);
            if before & WRITING != 0 {
                std::hint::spin_loop();
                continue;
            }
            if before & KNOWN == 0 {
                return None;
            }
            let v = std::array::from_fn(|i| self.values[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if self.state.load(Ordering::Relaxed) == before {
                return Some(v);
            }
        }
        None
    }
}

/// One kind of object (matmul descriptors, or matrix layouts).
pub struct Objects {
    map: AtomicPtr<ClaimMap<usize, Fields>>,
    /// The one line for a full map was said.
    full_said: AtomicBool,
}

/// Matmul descriptors: [compute type, scale type].
pub static DESCS: Objects = Objects::new();
/// Matrix layouts: each attribute at its hipBLASLt number (`HIPBLASLT_MATRIX_LAYOUT_*`: 0
/// batch count, 1 stride, 2 type, 3 order, 4 rows, 5 cols, 6 leading dimension).
pub static LAYOUTS: Objects = Objects::new();

impl Objects {
    const fn new() -> Objects {
        Objects {
            map: AtomicPtr::new(std::ptr::null_mut()),
            full_said: AtomicBool::new(false),
        }
    }

    /// The map, made on first use without a lock (two threads racing both build one and
    /// the loser frees its own).
    fn map(&self) -> &ClaimMap<usize, Fields> {
        // SAFETY: a non-null pointer is a leaked Box, never freed.
        if let Some(m) = unsafe { self.map.load(Ordering::Acquire).as_ref() } {
            return m;
        }
        let fresh = Box::into_raw(Box::new(ClaimMap::new(SLOTS, MAX_PROBE)));
        match self.map.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: ours, now published and never freed.
            Ok(_) => unsafe { &*fresh },
            Err(theirs) => {
                // SAFETY: `fresh` was never shared; `theirs` is a leaked Box.
                unsafe {
                    drop(Box::from_raw(fresh));
                    &*theirs
                }
            }
        }
    }

    fn slot(&self, object: *mut c_void, claim: bool) -> Option<&Fields> {
        let p = object as usize;
        if p == 0 {
            return None;
        }
        let hash = hash_of(0, (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        match self.map().probe(hash, 0, &p, || claim, |_| {}) {
            Probe::Found(_, f) | Probe::Claimed(_, f) => Some(f),
            Probe::Absent => None,
        }
    }

    /// An object was made at `object` with these fields (the rest 0).
    pub fn created(&self, object: *mut c_void, values: &[u64]) {
        if let Some(f) = self.slot(object, true) {
            let from = f.lock();
            for (i, slot) in f.values.iter().enumerate() {
                slot.store(values.get(i).copied().unwrap_or(0), Ordering::Relaxed);
            }
            f.unlock(from, true);
        } else if !object.is_null() && !self.full_said.swap(true, Ordering::Relaxed) {
            crate::log::info!(
                "hipBLASLt: more descriptors or layouts alive at distinct addresses than the interposer keeps ({SLOTS}); calls using the others pass through untuned"
            );
        }
    }

    /// In a fork child: a parent's thread may have been inside a claim or a write; the
    /// child starts with empty maps (objects it inherited pass through; new ones are kept).
    /// Allocates nothing and frees nothing (the old map is left).
    pub fn forget_all_in_child(&self) {
        self.map.store(std::ptr::null_mut(), Ordering::Release);
    }

    /// Field `i` of the object at `object` was set (a known object only).
    pub fn set(&self, object: *mut c_void, i: usize, value: u64) {
        if let Some(f) = self.slot(object, false) {
            let from = f.lock();
            if from & KNOWN != 0 {
                if let Some(slot) = f.values.get(i) {
                    slot.store(value, Ordering::Relaxed);
                }
            }
            f.unlock(from, from & KNOWN != 0);
        }
    }

    /// The object at `object` is about to be destroyed.
    pub fn destroyed(&self, object: *mut c_void) {
        if let Some(f) = self.slot(object, false) {
            let from = f.lock();
            f.unlock(from, false);
        }
    }

    /// The fields of the object at `object`, if known.
    #[inline]
    pub fn get(&self, object: *mut c_void) -> Option<[u64; FIELDS]> {
        // SAFETY: as in `map`.
        unsafe { self.map.load(Ordering::Acquire).as_ref() }?;
        self.slot(object, false)?.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_create_set_and_destroy_at_a_reused_address() {
        let o = Objects::new();
        let a = 0x1000 as *mut c_void;
        assert_eq!(o.get(a), None);
        o.created(a, &[1, 0, 14, 0, 64, 32, 64]);
        assert_eq!(o.get(a), Some([1, 0, 14, 0, 64, 32, 64]));
        o.set(a, 6, 96);
        assert_eq!(o.get(a).unwrap()[6], 96);
        o.destroyed(a);
        assert_eq!(o.get(a), None, "a destroyed object has no fields");
        o.set(a, 6, 128);
        assert_eq!(
            o.get(a),
            None,
            "setting a destroyed object makes it no better known"
        );
        // The allocator hands the address out again.
        o.created(a, &[7, 1]);
        assert_eq!(o.get(a), Some([7, 1, 0, 0, 0, 0, 0]));
        o.created(std::ptr::null_mut(), &[2, 0]);
        assert_eq!(o.get(std::ptr::null_mut()), None);
    }

    /// Threads making, changing and destroying objects at their own addresses only ever
    /// read their own whole writes.
    #[test]
    fn threads_read_only_whole_writes() {
        static O: Objects = Objects::new();
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..3000u64 {
                        let d = (0x10_0000 + (t * 64 + i % 16) * 0x100) as *mut c_void;
                        O.created(d, &[t, i, t, i, t, i, t]);
                        O.set(d, 6, i);
                        let got = O.get(d).unwrap();
                        assert_eq!(got, [t, i, t, i, t, i, i]);
                        O.destroyed(d);
                        assert_eq!(O.get(d), None);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_fork_child_starts_with_empty_maps() {
        let o = Objects::new();
        let a = 0x3000 as *mut c_void;
        o.created(a, &[2, 0]);
        o.forget_all_in_child();
        assert_eq!(o.get(a), None);
        o.created(a, &[6, 0]);
        assert_eq!(o.get(a).unwrap()[0], 6);
    }

    /// A writer that never left (a signal handler on its thread) does not hang the next
    /// writer or reader.
    #[test]
    fn a_writer_that_never_left_does_not_hang_anyone() {
        let o = Objects::new();
        let a = 0x2000 as *mut c_void;
        o.created(a, &[2, 0]);
        let f = o.slot(a, false).unwrap();
        let _ = f.lock(); // never unlocked
        assert_eq!(o.get(a), None, "a reader gives up");
        o.created(a, &[6, 0]);
        assert_eq!(o.get(a), Some([6, 0, 0, 0, 0, 0, 0]), "a writer takes over");
    }
}
