//! The compute and scale types of each live hipBLASLt matmul descriptor.
//!
//! hipBLASLt takes them at `hipblasLtMatmulDescCreate(desc*, computeType, scaleType)` and has
//! no attribute to read them back (cuBLASLt has), yet they belong to the key (f32 against
//! tf32 compute is another kernel). So the interposer wraps the create and destroy calls and
//! keeps `descriptor address -> types` in a lock-free claim map (`tunedblas_core::claim_map`),
//! read once per matmul. PyTorch creates and destroys a descriptor around every GEMM, and
//! the allocator hands the same few addresses out again, so the map holds a handful of
//! slots: a destroyed descriptor's slot keeps its address with no types, and the next
//! descriptor made there fills it again.
//!
//! Order matters against address reuse: a destroy clears the types *before* the real
//! destroy frees the address, and a create stores them *after* the real create returned
//! the address, so a racing create at a just-freed address is never undone.
//!
//! A descriptor the map does not know (made before the interposer was loaded, or beyond
//! the map's bounded probe of a host holding thousands at once) has unknown types: its
//! calls pass through untouched.

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use tunedblas_core::claim_map::{hash_of, ClaimMap, Probe};

/// Slots (descriptors alive or recently freed at distinct addresses) and the longest probe.
const SLOTS: usize = 1 << 14;
const MAX_PROBE: usize = 64;
/// A slot's value: `KNOWN | scale << 32 | compute`, or 0 once the descriptor is destroyed.
const KNOWN: u64 = 1 << 62;

type Map = ClaimMap<usize, AtomicU64>;

static MAP: AtomicPtr<Map> = AtomicPtr::new(std::ptr::null_mut());

/// The map, made on first use (without a lock: a fork child or a signal handler may be the
/// first user; two threads racing both build one and the loser frees its own).
fn map() -> &'static Map {
    // SAFETY: a non-null pointer is a leaked Box, never freed.
    if let Some(m) = unsafe { MAP.load(Ordering::Acquire).as_ref() } {
        return m;
    }
    let fresh = Box::into_raw(Box::new(Map::new(SLOTS, MAX_PROBE)));
    match MAP.compare_exchange(
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

#[inline]
fn hash(desc: usize) -> u64 {
    hash_of(0, (desc as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// A descriptor was made at `desc` with these types.
pub fn created(desc: *mut c_void, compute: i32, scale: i32) {
    let d = desc as usize;
    if d == 0 {
        return;
    }
    let value = KNOWN | (u64::from(scale as u32 & 0x3fff_ffff) << 32) | u64::from(compute as u32);
    match map().probe(hash(d), 0, &d, || true, |_| {}) {
        Probe::Found(_, v) | Probe::Claimed(_, v) => v.store(value, Ordering::Release),
        Probe::Absent => {} // full here: this descriptor's calls pass through
    }
}

/// The descriptor at `desc` is about to be destroyed.
pub fn destroyed(desc: *mut c_void) {
    let d = desc as usize;
    let m = map();
    if let Some(i) = m.find(hash(d), 0, &d) {
        m.value(i).store(0, Ordering::Release);
    }
}

/// (compute, scale) given when the descriptor at `desc` was made, if known.
#[inline]
pub fn types_of(desc: *mut c_void) -> Option<(i32, i32)> {
    let d = desc as usize;
    // SAFETY: as in `map`.
    let m = unsafe { MAP.load(Ordering::Acquire).as_ref() }?;
    let v = m.value(m.find(hash(d), 0, &d)?).load(Ordering::Acquire);
    (v & KNOWN != 0).then_some((v as u32 as i32, ((v >> 32) as u32 & 0x3fff_ffff) as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_follow_create_and_destroy_at_a_reused_address() {
        let a = 0x1000 as *mut c_void;
        let b = 0x2000 as *mut c_void;
        assert_eq!(types_of(a), None);
        created(a, 2, 0);
        created(b, 6, 0);
        assert_eq!(types_of(a), Some((2, 0)));
        assert_eq!(types_of(b), Some((6, 0)));
        destroyed(a);
        assert_eq!(types_of(a), None, "a destroyed descriptor has no types");
        // The allocator hands the address out again, for a double GEMM.
        created(a, 7, 1);
        assert_eq!(types_of(a), Some((7, 1)));
        destroyed(std::ptr::null_mut());
        created(std::ptr::null_mut(), 2, 0);
        assert_eq!(types_of(std::ptr::null_mut()), None);
    }

    /// Many threads making and destroying descriptors at their own addresses never see
    /// another's types.
    #[test]
    fn threads_see_their_own_descriptors() {
        let threads: Vec<_> = (0..8usize)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..2000usize {
                        let d = (0x10_0000 + (t * 64 + i % 16) * 0x100) as *mut c_void;
                        created(d, t as i32, i as i32 % 3);
                        assert_eq!(types_of(d), Some((t as i32, i as i32 % 3)));
                        destroyed(d);
                        assert_eq!(types_of(d), None);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
