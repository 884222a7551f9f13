//! Values built once, published to every thread with one compare-exchange, and never
//! freed: the interposer's lazily made tables and names, read after that without a lock.

use std::sync::atomic::{AtomicPtr, Ordering};

/// Publishes `fresh` in `slot` unless another thread published first, and returns what
/// `slot` holds then: `fresh`, or the other thread's value (`fresh` is dropped). Nothing
/// published is ever freed, so the reference lives as long as the slot (a `static`'s: for
/// the whole process).
pub fn publish<T>(slot: &AtomicPtr<T>, fresh: Box<T>) -> &T {
    let fresh = Box::into_raw(fresh);
    match slot.compare_exchange(
        std::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: published now and never freed.
        Ok(_) => unsafe { &*fresh },
        // SAFETY: `fresh` was never shared; `theirs` is a published Box, never freed.
        Err(theirs) => unsafe {
            drop(Box::from_raw(fresh));
            &*theirs
        },
    }
}

/// What `slot` holds, if anything was published there.
pub fn get<T>(slot: &AtomicPtr<T>) -> Option<&T> {
    // SAFETY: a non-null pointer in a slot is a published Box, never freed.
    unsafe { slot.load(Ordering::Acquire).as_ref() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_value_published_is_the_one_every_caller_gets() {
        let slot = AtomicPtr::new(std::ptr::null_mut());
        assert!(get(&slot).is_none());
        let first = publish(&slot, Box::new(1));
        assert_eq!(*first, 1);
        assert_eq!(*publish(&slot, Box::new(2)), 1, "a later value is dropped");
        assert!(std::ptr::eq(get(&slot).unwrap(), first));
        // Many threads racing: all get the one value published.
        let slot: &'static AtomicPtr<u32> =
            Box::leak(Box::new(AtomicPtr::new(std::ptr::null_mut())));
        let got: Vec<u32> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8u32)
                .map(|i| s.spawn(move || *publish(slot, Box::new(i))))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.iter().all(|&v| v == got[0]), "{got:?}");
    }
}
