//! Call counters with no shared cache line written on the hot path.
//!
//! Each thread takes one cache-line-aligned block of counters on its first call and is the
//! only writer of it, so an increment is a plain load and store to a line no other thread
//! writes: two threads scale like one. A thread gives its block back when it ends (its counts
//! are folded into a retired block), so a host whose threads come and go keeps this fast
//! path; only more than 64 threads alive at once share one block with atomic adds (still
//! exact, just slower). The summary sums every block.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// What happened to one intercepted call. Each call is counted once, in the one counter
/// for its outcome; `Calls` is never bumped, its total is the sum of the rocBLAS outcomes
/// (cuBLASLt's and hipBLASLt's calls are the sums of theirs, `lt::Counters::calls`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Counter {
    /// Every intercepted GEMM call (the sum of the outcomes below).
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
    /// The outcomes again, for `cublasLtMatmul` calls (`cublaslt/`).
    LtServed,
    LtDefault,
    LtMissed,
    LtPassedThrough,
    LtFallbacks,
    /// The same for `hipblasLtMatmul` calls (`hipblaslt/`).
    HipLtServed,
    HipLtDefault,
    HipLtMissed,
    HipLtPassedThrough,
    HipLtFallbacks,
}
const N: usize = 17;
/// The rocBLAS outcomes, whose sum is [`Counter::Calls`].
const OUTCOMES: [Counter; 6] = [
    Counter::Served,
    Counter::Default,
    Counter::Missed,
    Counter::PassedThrough,
    Counter::Fallbacks,
    Counter::Near,
];

#[repr(align(128))]
struct Block([AtomicU64; N], AtomicU64);

impl Block {
    const fn new() -> Block {
        Block([const { AtomicU64::new(0) }; N], AtomicU64::new(0))
    }
}

const BLOCKS: usize = 64;
static OWNED: [Block; BLOCKS] = [const { Block::new() }; BLOCKS];
/// Bit i set: block i has an owner.
static USED: AtomicU64 = AtomicU64::new(0);
/// Threads that found every block taken count here, with atomic adds.
static SHARED: Block = Block::new();
/// Counts of threads that have ended, folded in when their block was given back.
static RETIRED: Block = Block::new();

/// `MINE` before the thread's first count.
const UNCLAIMED: usize = usize::MAX;
/// `MINE` of a thread that counts in `SHARED`.
const IN_SHARED: usize = BLOCKS;

// The calling thread's block: `mine` and `set_mine`.
//
// On x86-64 Linux it is a thread-local word of the initial-exec model, defined here in
// assembly (stable Rust cannot choose a thread-local's model): reading it is two
// instructions (its offset from the GOT, a load through `%fs`), where Rust's own
// `thread_local!` in a shared object calls `__tls_get_addr` on every access (about ten
// more, on every intercepted call). The whole TLS block of this library (160 bytes) then
// sits in the static TLS area: at start-up for `LD_PRELOAD`, or in glibc's reserve of
// static TLS when the library is `dlopen`ed.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
std::arch::global_asm!(
    ".pushsection .tdata.tunedblas_stats_mine,\"awT\",@progbits",
    ".p2align 3",
    // Global for the other codegen units that read it, hidden: never exported.
    ".globl tunedblas_stats_mine",
    ".hidden tunedblas_stats_mine",
    ".type tunedblas_stats_mine,@tls_object",
    ".size tunedblas_stats_mine,8",
    "tunedblas_stats_mine:",
    ".quad -1",
    ".popsection",
);

/// The calling thread's block ([`UNCLAIMED`], [`IN_SHARED`] or an index of [`OWNED`]).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
fn mine() -> usize {
    let v: usize;
    // SAFETY: reads this thread's word at its thread-pointer offset (initial-exec TLS).
    unsafe {
        std::arch::asm!(
            "mov {v}, qword ptr [rip + tunedblas_stats_mine@GOTTPOFF]",
            "mov {v}, qword ptr fs:[{v}]",
            v = out(reg) v,
            options(nostack, readonly, preserves_flags),
        );
    }
    v
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn set_mine(i: usize) {
    // SAFETY: writes this thread's word, as above.
    unsafe {
        std::arch::asm!(
            "mov {t}, qword ptr [rip + tunedblas_stats_mine@GOTTPOFF]",
            "mov qword ptr fs:[{t}], {i}",
            t = out(reg) _,
            i = in(reg) i,
            options(nostack, preserves_flags),
        );
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
thread_local! {
    static MINE: Cell<usize> = const { Cell::new(UNCLAIMED) };
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[inline(always)]
fn mine() -> usize {
    MINE.with(Cell::get)
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn set_mine(i: usize) {
    MINE.with(|m| m.set(i));
}

thread_local! {
    /// Touched once per thread, when it claims a block: its destructor gives the block back
    /// at thread exit, so threads that come and go never run the pool dry.
    static GIVE_BACK: GiveBack = const { GiveBack(Cell::new(UNCLAIMED)) };
}

struct GiveBack(Cell<usize>);

impl Drop for GiveBack {
    fn drop(&mut self) {
        let i = self.0.get();
        if i >= BLOCKS {
            return;
        }
        // Later counts on this thread (a GEMM from another TLS destructor) go to SHARED.
        set_mine(IN_SHARED);
        for (mine, retired) in OWNED[i].0.iter().zip(&RETIRED.0) {
            retired.fetch_add(mine.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        }
        USED.fetch_and(!(1u64 << i), Ordering::Release);
    }
}

/// Every this many calls a thread asks whether the live status is due (`status::tick`):
/// the threads making GEMMs write it, not a thread of ours.
const TICK_EVERY: u64 = 64;

/// Counts one call. The hot path is one TLS read, an increment of a line only this thread
/// writes (no atomic read-modify-write, no shared line written), and a decrement of the
/// thread's countdown to the status tick in the same line (two instructions: a `dec` of a
/// byte and a branch; a test of the count itself took four).
#[inline(always)]
pub fn bump(c: Counter) {
    let i = mine();
    if i < BLOCKS {
        let a = &OWNED[i].0[c as usize];
        a.store(a.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        count_down(i);
    } else {
        bump_slow(c);
    }
}

/// One step of thread block `i`'s countdown to the status tick: `dec` of the word and a
/// jump on zero (written out because the compiler keeps the decremented value in a register
/// and compares it, four instructions on every call; the address is given as the block's
/// offset and the table's base, which the count's increment already has in registers).
/// Only this thread writes the word.
#[inline(always)]
fn count_down(i: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a decrement of a word of this thread's block, which only this thread writes
    // (other threads only read it, as an atomic); no stack, flags clobbered.
    unsafe {
        std::arch::asm!(
            "dec qword ptr [{base} + {at} + {field}]",
            "jz {ran_out}",
            base = in(reg) OWNED.as_ptr(),
            at = in(reg) i * std::mem::size_of::<Block>(),
            field = const std::mem::offset_of!(Block, 1),
            ran_out = label { tick_mine() },
            options(nostack),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let b = &OWNED[i];
        let left = b.1.load(Ordering::Relaxed).wrapping_sub(1);
        b.1.store(left, Ordering::Relaxed);
        if left == 0 {
            tick(b);
        }
    }
}

/// [`tick`] for the calling thread's block, found again (keeping the block's address live
/// across the countdown for the rare tick cost an instruction on every call).
#[cold]
#[inline(never)]
fn tick_mine() {
    if let Some(b) = OWNED.get(mine()) {
        tick(b);
    }
}

/// The thread's countdown ran out: the status tick, and a new countdown.
#[cold]
#[inline(never)]
fn tick(b: &Block) {
    b.1.store(TICK_EVERY, Ordering::Relaxed);
    crate::status::tick();
}

/// The first count of a thread (claims a block), or one by a thread without a block.
#[cold]
#[inline(never)]
fn bump_slow(c: Counter) {
    let mut i = mine();
    if i == UNCLAIMED {
        i = claim();
        set_mine(i);
        // Registers the destructor; a thread already being torn down cannot, and then
        // simply keeps the block.
        let _ = GIVE_BACK.try_with(|g| g.0.set(i));
    }
    let n = if i < BLOCKS {
        let a = &OWNED[i].0[c as usize];
        let n = a.load(Ordering::Relaxed) + 1;
        a.store(n, Ordering::Relaxed);
        OWNED[i].1.store(TICK_EVERY, Ordering::Relaxed);
        n
    } else {
        SHARED.0[c as usize].fetch_add(1, Ordering::Relaxed) + 1
    };
    // A thread's first count asks too (a process whose threads each make a few calls is
    // still seen live), and so does every 64th count of a thread without a block of its own.
    if n == 1 || n.is_multiple_of(TICK_EVERY) {
        crate::status::tick();
    }
}

/// A free block for the calling thread, or `IN_SHARED` when all are taken.
fn claim() -> usize {
    let mut used = USED.load(Ordering::Relaxed);
    loop {
        if used == u64::MAX {
            return IN_SHARED;
        }
        let i = (!used).trailing_zeros() as usize;
        match USED.compare_exchange_weak(used, used | 1 << i, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => return i,
            Err(now) => used = now,
        }
    }
}

/// The sum over all threads, live and ended. Exact once counting has stopped (at exit); a
/// thread ending at the same moment may be seen twice or not at all.
pub fn total(c: Counter) -> u64 {
    if c == Counter::Calls {
        return OUTCOMES.iter().map(|&o| total(o)).sum();
    }
    OWNED
        .iter()
        .chain([&SHARED, &RETIRED])
        .map(|b| b.0[c as usize].load(Ordering::Relaxed))
        .sum()
}

/// Whether any call was counted (since the process started, or in a fork child since the
/// fork): a fork child that made none leaves no trace at all.
pub fn any() -> bool {
    OWNED
        .iter()
        .chain([&SHARED, &RETIRED])
        .any(|b| b.0.iter().any(|a| a.load(Ordering::Relaxed) != 0))
}

/// Zeroes every counter: for a forked child, which starts its own account. Only the forking
/// thread exists in the child, so only its block stays taken.
pub fn reset() {
    for b in OWNED.iter().chain([&SHARED, &RETIRED]) {
        for a in &b.0 {
            a.store(0, Ordering::Relaxed);
        }
    }
    let mine = mine();
    USED.store(
        if mine < BLOCKS { 1u64 << mine } else { 0 },
        Ordering::Relaxed,
    );
}

/// Tests that count calls run one at a time: the counters are process-wide, so one test's
/// calls would show up in another's totals (and a test holding every block would send
/// another's thread to the shared one).
#[cfg(test)]
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    // The counters are process-wide, so one test checks everything in order.
    #[test]
    fn threads_that_end_give_their_block_back_and_nothing_is_lost() {
        let _alone = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        // The interposer's own hook (installed when a test started the runtime) prints
        // panics only at its log level: the test's messages need the default one.
        drop(std::panic::take_hook());
        // Counters no other test bumps: a thread of another test ending while `total` runs
        // can be seen twice (its block and the retired one), which made `before` too high.
        let before = total(Counter::LtServed);
        // Far more threads than blocks, one after another: each must find a block.
        for _ in 0..3 * BLOCKS {
            std::thread::spawn(|| {
                for _ in 0..10 {
                    bump(Counter::LtServed);
                }
                assert!(mine() < BLOCKS, "a thread found no free block");
            })
            .join()
            .unwrap();
        }
        assert_eq!(total(Counter::LtServed) - before, 30 * BLOCKS as u64);
        // More live threads than blocks: the rest count in SHARED, exactly.
        let before = total(Counter::LtDefault);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(BLOCKS + 8));
        let threads: Vec<_> = (0..BLOCKS + 8)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    bump(Counter::LtDefault);
                    barrier.wait();
                    for _ in 0..99 {
                        bump(Counter::LtDefault);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(
            total(Counter::LtDefault) - before,
            100 * (BLOCKS as u64 + 8)
        );
        assert_eq!(
            total(Counter::Calls),
            OUTCOMES.iter().map(|&o| total(o)).sum::<u64>()
        );
    }
}
