//! A counter that long work moves on as it goes (hashing a library, reading a profile's
//! lines), so a thread waiting for another thread's start-up can tell a slow start-up, which
//! it waits for, from a stuck one, which it does not (`preload/src/lifecycle.rs`): a
//! start-up blocked on a lock the waiting thread holds (the loader's, when the waiter is a
//! library constructor inside `dlopen`) moves nothing.

use std::sync::atomic::{AtomicU64, Ordering};

static TICKS: AtomicU64 = AtomicU64::new(0);

/// Some long work moved on.
#[inline]
pub fn tick() {
    TICKS.fetch_add(1, Ordering::Relaxed);
}

/// How far long work has moved, in this process, so far.
#[inline]
pub fn ticks() -> u64 {
    TICKS.load(Ordering::Relaxed)
}
