//! Helpers of the unit tests.

/// Runs `f` on `n` threads at once and waits for all of them.
pub(crate) fn on_threads(n: usize, f: impl Fn() + Sync) {
    std::thread::scope(|threads| {
        for _ in 0..n {
            threads.spawn(&f);
        }
    });
}

/// A small xorshift generator for the property tests: deterministic (a failure
/// reproduces from its seed), no dependency.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 for an `n` of 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// One of `xs` (not empty).
    pub(crate) fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}
