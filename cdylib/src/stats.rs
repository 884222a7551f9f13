//! Call counters with no shared cache line written on the hot path.
//!
//! Each thread takes one cache-line-aligned block of counters on its first call and is the
//! only writer of it, so an increment is a plain load and store to a line no other thread
//! writes: two threads scale like one. Threads beyond the block count share one block with
//! atomic adds (still exact, just slower). The summary sums every block.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// What happened to one intercepted call.
#[derive(Clone, Copy, Debug)]
#[repr(usize)]
pub enum Counter {
    /// Every intercepted GEMM call.
    Calls = 0,
    /// Re-issued with a tuned solution that succeeded.
    Served,
    /// A `Default` row: passed through by design.
    Default,
    /// No row: passed through and recorded.
    Missed,
    /// The caller chose a solution, asked for validation only, or the call was not a
    /// problem rocBLAS would run (quick return, invalid arguments).
    PassedThrough,
    /// A tuned call failed and the original call was made instead.
    Fallbacks,
    /// No row, served with the validated solution of the same layer's nearest token count
    /// (the shape is still recorded as a miss).
    Near,
    /// The first six again, for `cublasLtMatmul` calls (`cublaslt.rs`).
    LtCalls,
    LtServed,
    LtDefault,
    LtMissed,
    LtPassedThrough,
    LtFallbacks,
}
const N: usize = 13;

#[repr(align(128))]
struct Block([AtomicU64; N]);

impl Block {
    const fn new() -> Block {
        Block([const { AtomicU64::new(0) }; N])
    }
}

const BLOCKS: usize = 64;
static OWNED: [Block; BLOCKS] = [const { Block::new() }; BLOCKS];
static SHARED: Block = Block::new();
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
pub fn bump(c: Counter) {
    let idx = MINE.with(|m| {
        let i = m.get();
        if i != usize::MAX {
            return i;
        }
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        m.set(i);
        i
    });
    if idx < BLOCKS {
        let a = &OWNED[idx].0[c as usize];
        a.store(a.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    } else {
        SHARED.0[c as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// The sum over all threads.
pub fn total(c: Counter) -> u64 {
    OWNED
        .iter()
        .chain(std::iter::once(&SHARED))
        .map(|b| b.0[c as usize].load(Ordering::Relaxed))
        .sum()
}

/// Zeroes every counter: for a forked child, which starts its own account.
pub fn reset() {
    for b in OWNED.iter().chain(std::iter::once(&SHARED)) {
        for a in &b.0 {
            a.store(0, Ordering::Relaxed);
        }
    }
}
