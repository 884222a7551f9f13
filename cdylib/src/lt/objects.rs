//! An Lt library's descriptors and layouts as their create and set calls left them
//! (hipBLASLt's: `crate::hipblaslt::objects`): `object address -> fields` in a lock-free
//! address map (`tunedblas_core::address_map`), written by the wrapped create, set and
//! destroy calls (`exports.rs`) and read once per matmul for its key, with no library call.
//!
//! PyTorch creates and destroys its descriptors around every GEMM, and in a long-running
//! process its allocator hands out ever new addresses: a destroyed object's slot is freed
//! for the next one, so a map holds what is alive now. A destroy frees the slot *before*
//! the real destroy frees the address, and a create fills it *after* the real create
//! returned it, so a racing create at a just-freed address is never undone. A matmul that
//! reads an object while another thread destroys it (the caller's race) gets its fields
//! whole or not at all, never those of an object made meanwhile at another address in the
//! same slot.
//!
//! Nothing here blocks or allocates: the maps are statics, and a fork child keeps them
//! (its objects are the parent's, copied; one a parent's thread was writing at the fork
//! reads as unknown). An object a map does not know (made before the interposer was
//! loaded, or while [`SLOTS`] others were alive around its address) has unknown fields,
//! and the first such object is said once.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use tunedblas_core::address_map::AddressMap;

/// Objects of one kind alive at once that are kept (PyTorch has a handful alive).
pub const SLOTS: usize = 1 << 13;

/// One kind of object of one library (matmul descriptors, or matrix layouts), `N` fields
/// each.
pub struct Objects<const N: usize> {
    map: AddressMap<N, SLOTS>,
    /// "hipBLASLt matmul descriptors", ..., for the line at the bound.
    what: &'static str,
    /// The line for an object that could not be kept was said.
    full_said: AtomicBool,
}

impl<const N: usize> Objects<N> {
    pub const fn new(what: &'static str) -> Objects<N> {
        Objects {
            map: AddressMap::new(),
            what,
            full_said: AtomicBool::new(false),
        }
    }

    /// An object was made at `object` with these fields.
    #[inline]
    pub fn created(&self, object: *mut c_void, fields: [u64; N]) {
        if !object.is_null()
            && !self.map.insert(object as usize, fields)
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
            "{}: {} are alive at once, as many as the interposer keeps around a new one's address (it keeps up to {SLOTS}); calls using one it could not keep pass through untuned, and objects made once others are destroyed are kept again",
            self.what,
            self.map.live()
        );
    }

    /// Field `i` of the object at `object` was set (a known object only).
    #[inline]
    pub fn set(&self, object: *mut c_void, i: usize, value: u64) {
        self.map.set(object as usize, i, value);
    }

    /// The object at `object` is about to be destroyed: its slot is freed.
    #[inline]
    pub fn destroyed(&self, object: *mut c_void) {
        self.map.remove(object as usize);
    }

    /// The fields of the object at `object`, if known.
    #[inline]
    pub fn get(&self, object: *mut c_void) -> Option<[u64; N]> {
        self.map.get(object as usize)
    }
}

/// A set-attribute call's value as the field it is kept in: read with the attribute's own
/// size (`four`: 4 bytes, else 8), sign-extended where `signed`. `None` for a buffer smaller
/// than the attribute (the library refuses those too).
///
/// # Safety
/// `buf` points to `size` readable bytes (the caller's own set-attribute arguments).
#[inline]
pub unsafe fn field_value(
    buf: *const c_void,
    size: usize,
    four: bool,
    signed: bool,
) -> Option<u64> {
    if buf.is_null() {
        return None;
    }
    // SAFETY: per the contract, with the size checked against the attribute's.
    unsafe {
        match (four, size) {
            (true, 4..) if signed => Some(buf.cast::<i32>().read_unaligned() as i64 as u64),
            (true, 4..) => Some(u64::from(buf.cast::<u32>().read_unaligned())),
            (false, 8..) => Some(buf.cast::<u64>().read_unaligned()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_create_set_and_destroy_at_a_reused_address() {
        static O: Objects<7> = Objects::new("layouts");
        let a = 0x1000 as *mut c_void;
        assert_eq!(O.get(a), None);
        O.created(a, [1, 0, 14, 0, 64, 32, 64]);
        assert_eq!(O.get(a), Some([1, 0, 14, 0, 64, 32, 64]));
        O.set(a, 6, 96);
        assert_eq!(O.get(a).unwrap()[6], 96);
        O.destroyed(a);
        assert_eq!(O.get(a), None, "a destroyed object has no fields");
        O.set(a, 6, 128);
        assert_eq!(
            O.get(a),
            None,
            "setting a destroyed object makes it no better known"
        );
        // The allocator hands the address out again.
        O.created(a, [7, 1, 0, 0, 0, 0, 0]);
        assert_eq!(O.get(a), Some([7, 1, 0, 0, 0, 0, 0]));
        O.created(std::ptr::null_mut(), [2; 7]);
        assert_eq!(O.get(std::ptr::null_mut()), None);
    }

    /// A host making and destroying its objects at ever new addresses, as a long-running
    /// PyTorch process does: every one is known while it lives, long past the number of
    /// slots, and only the live ones hold slots.
    #[test]
    fn objects_at_ever_new_addresses_are_known_long_past_the_slot_count() {
        static O: Objects<3> = Objects::new("descriptors");
        for n in 1..=(4 * SLOTS) {
            let d = (n * 0x50) as *mut c_void;
            O.created(d, [n as u64, 0, 0]);
            assert_eq!(O.get(d), Some([n as u64, 0, 0]), "object {n}");
            O.destroyed(d);
        }
        assert_eq!(O.map.live(), 0);
        assert!(!O.full_said.load(Ordering::Relaxed), "never full");
    }

    #[test]
    fn set_values_are_read_with_the_attributes_own_size() {
        let v: i64 = -2;
        let p = (&v as *const i64).cast();
        unsafe {
            assert_eq!(field_value(p, 8, false, true), Some(-2i64 as u64));
            assert_eq!(field_value(p, 4, false, true), None, "too small");
            assert_eq!(
                field_value(p, 8, true, true),
                Some(-2i64 as u64),
                "its first 4 bytes"
            );
            assert_eq!(field_value(p, 4, true, false), Some(0xffff_fffe));
            assert_eq!(field_value(std::ptr::null(), 8, false, false), None);
        }
    }
}
