//! Heap bytes of the lookup table, counted by this program's allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use tunedblas_core::abi::{DT_BF16_R, DT_F16_R, DT_F32_R};
use tunedblas_core::key::{Batching, ProblemKey, Trans, Types};
use tunedblas_core::table::{Action, Table};

/// The system allocator, keeping a count of the bytes live.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            LIVE.fetch_add(l.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            LIVE.fetch_add(l.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
            LIVE.fetch_add(new, Ordering::Relaxed);
        }
        q
    }
}

pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// `rows` distinct keys of the kinds real profiles hold: linear layers of several widths at
/// many token counts, a few strided-batched ones, three type combinations.
pub fn keys(rows: usize) -> Vec<ProblemKey> {
    let widths = [
        (2560, 2560),
        (10240, 2560),
        (2560, 10240),
        (7680, 2560),
        (336, 10240),
    ];
    let types = [
        Types::uniform(DT_F16_R, DT_F32_R),
        Types::uniform(DT_BF16_R, DT_F32_R),
        Types::uniform(DT_F32_R, DT_F32_R),
    ];
    (0..rows)
        .map(|i| {
            let (n_out, k) = widths[i % widths.len()];
            let tokens = 1 + (i / widths.len()) as i64;
            let key = ProblemKey::single(
                Trans::T,
                Trans::N,
                types[i % types.len()],
                n_out,
                tokens,
                k,
                k,
                k,
                n_out,
                n_out,
                0,
            );
            if i % 10 == 9 {
                let s = key.packed_strides();
                key.with_batch(Batching::Strided, 8, s)
            } else {
                key
            }
        })
        .collect()
}

pub fn table_report() {
    println!("### Table memory");
    println!();
    println!("| rows | heap bytes (counted) | bytes per row | budget | |");
    println!("|---|---|---|---|---|");
    for rows in [1_000, 10_000] {
        let keys = keys(rows);
        let before = live();
        let table = Table::new(keys.iter().enumerate().map(|(i, k)| {
            let action = if i % 4 == 0 {
                Action::Default
            } else {
                Action::Solution(-1_086_326_047 + i as i32)
            };
            (*k, action)
        }));
        let bytes = live() - before;
        assert_eq!(table.len(), rows, "the benchmark's keys must be distinct");
        let per_row = bytes as f64 / rows as f64;
        println!(
            "| {rows} | {bytes} | {per_row:.0} | <= 200 | {} |",
            if per_row <= 200.0 { "met" } else { "OVER" }
        );
        drop(table);
    }
    println!();
}
