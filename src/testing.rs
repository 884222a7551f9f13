//! Helpers of the unit tests.

/// Runs `f` on `n` threads at once and waits for all of them.
pub(crate) fn on_threads(n: usize, f: impl Fn() + Sync) {
    std::thread::scope(|threads| {
        for _ in 0..n {
            threads.spawn(&f);
        }
    });
}
