//! What hipBLASLt will not tell back about its descriptors, kept from the calls that made
//! them.
//!
//! hipBLASLt 7.1.1 takes a matmul descriptor's compute and scale types at
//! `hipblasLtMatmulDescCreate` and has no attribute to read them; and its
//! `hipblasLtMatrixLayoutGetAttribute` answers only the batch count and stride: type, order,
//! rows, columns and leading dimension return `HIPBLAS_STATUS_INVALID_VALUE` (measured on
//! the real library, tests/conformance/hipblaslt.rs). Yet all of them make the key. So the
//! interposer wraps the creates, `hipblasLtMatrixLayoutSetAttribute` and the destroys, and
//! keeps `object address -> fields` in two lock-free address maps
//! (`tunedblas_core::address_map`), read once per matmul.
//!
//! PyTorch creates and destroys its descriptors around every GEMM, and in a long-running
//! process its allocator hands out ever new addresses: a destroyed object's slot is freed
//! for the next one, so each map holds what is alive now. A destroy frees the slot
//! *before* the real destroy frees the address, and a create fills it *after* the real
//! create returned it, so a racing create at a just-freed address is never undone. A
//! matmul that reads an object while another thread destroys it (the caller's race) gets
//! its fields whole or not at all, never those of an object made meanwhile at another
//! address in the same slot.
//!
//! Nothing here blocks or allocates: the maps are statics, and a fork child keeps them
//! (its objects are the parent's, copied; one a parent's thread was writing at the fork
//! reads as unknown).
//!
//! An object the maps do not know (made before the interposer was loaded, or while
//! [`SLOTS`] others were alive around its address) has unknown fields: its calls pass
//! through untouched, and the first such object is said once.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use tunedblas_core::address_map::AddressMap;

/// Objects of one kind alive at once that are kept (PyTorch has a handful alive).
pub const SLOTS: usize = 1 << 13;

/// One kind of object (matmul descriptors, or matrix layouts), `N` fields each.
pub struct Objects<const N: usize> {
    map: AddressMap<N, SLOTS>,
    /// "descriptors" or "layouts", for the line at the bound.
    what: &'static str,
    /// The line for an object that could not be kept was said.
    full_said: AtomicBool,
}

/// Matmul descriptors: [compute type, scale type, an attribute the key does not hold was
/// set (`super::key::DESC_UNSERVED`)].
pub static DESCS: Objects<3> = Objects::new("matmul descriptors");
/// Matrix layouts: each attribute at its hipBLASLt number (`HIPBLASLT_MATRIX_LAYOUT_*`: 0
/// batch count, 1 stride, 2 type, 3 order, 4 rows, 5 cols, 6 leading dimension).
pub static LAYOUTS: Objects<7> = Objects::new("matrix layouts");

impl<const N: usize> Objects<N> {
    const fn new(what: &'static str) -> Objects<N> {
        Objects {
            map: AddressMap::new(),
            what,
            full_said: AtomicBool::new(false),
        }
    }

    /// An object was made at `object` with these fields (the rest 0).
    pub fn created(&self, object: *mut c_void, values: &[u64]) {
        if object.is_null() {
            return;
        }
        let fields = std::array::from_fn(|i| values.get(i).copied().unwrap_or(0));
        if !self.map.insert(object as usize, fields)
            && !self.full_said.swap(true, Ordering::Relaxed)
        {
            self.say_full();
        }
    }

    /// Once, when an object could not be kept: how many are alive (all the map holds are:
    /// destroyed ones free their slots).
    #[cold]
    #[inline(never)]
    fn say_full(&self) {
        crate::log::info!(
            "hipBLASLt: {} {} are alive at once, as many as the interposer keeps around a new one's address (it keeps up to {SLOTS}); calls using one it could not keep pass through untuned, and objects made once others are destroyed are kept again",
            self.map.live(),
            self.what
        );
    }

    /// Field `i` of the object at `object` was set (a known object only).
    pub fn set(&self, object: *mut c_void, i: usize, value: u64) {
        self.map.set(object as usize, i, value);
    }

    /// The object at `object` is about to be destroyed: its slot is freed.
    pub fn destroyed(&self, object: *mut c_void) {
        self.map.remove(object as usize);
    }

    /// The fields of the object at `object`, if known.
    #[inline]
    pub fn get(&self, object: *mut c_void) -> Option<[u64; N]> {
        self.map.get(object as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_create_set_and_destroy_at_a_reused_address() {
        static O: Objects<7> = Objects::new("layouts");
        let o = &O;
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

    /// A host making and destroying its objects at ever new addresses, as a long-running
    /// PyTorch process does: every one is known while it lives, long past the number of
    /// slots, and only the live ones hold slots.
    #[test]
    fn objects_at_ever_new_addresses_are_known_long_past_the_slot_count() {
        static O: Objects<3> = Objects::new("descriptors");
        let o = &O;
        for n in 1..=(4 * SLOTS) {
            let d = (n * 0x50) as *mut c_void;
            o.created(d, &[n as u64, 0]);
            assert_eq!(o.get(d), Some([n as u64, 0, 0]), "object {n}");
            o.destroyed(d);
        }
        assert_eq!(o.map.live(), 0);
        assert!(!o.full_said.load(Ordering::Relaxed), "never full");
    }
}
