//! The lookup table the interposer serves from: built once at start-up, then only read.
//!
//! The hit path must take no lock, allocate nothing and write no shared cache line in the
//! steady state. The table is an immutable open-addressing index over a packed array of
//! rows: the index holds, per slot, 32 bits of the key's hash and a row number, at most 3/4
//! full, so a lookup reads one or two index slots and one row. Compared with a
//! `HashMap<ProblemKey, Entry>` (about 240-300 bytes per row once its buckets are sized for
//! growth) a row costs its 144 bytes plus 10-16 bytes of index. The hash is
//! [`ProblemKey::lookup_hash`]. The only per-row mutable state is two flags, each written
//! at most once per process (first hit, quarantine), so after warm-up every access is a read.
//!
//! PyTorch's `*` rows (a dynamic dimension, usually the token count) cannot be hashed; they
//! sit beside the index in file order and are only scanned when the exact lookup misses
//! ([`Table::get_wildcard`]), so the hit path never pays for them. An exact row wins over a
//! pattern; among patterns, the first in the file wins.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::key::ProblemKey;
use crate::rocblas;
use crate::tunableop::{KeyPattern, Solution};

/// What a row tells the interposer to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Tuning found the library heuristic best: pass the call through, count it as served.
    Default,
    /// Re-issue with `algo = solution_index` and this index.
    Solution(i32),
}

impl Action {
    /// What a row with this solution tells the interposer; `None` for another backend's.
    pub fn of(solution: &Solution) -> Option<Action> {
        match solution {
            Solution::Default => Some(Action::Default),
            Solution::Rocblas(id) => Some(Action::Solution(*id)),
            Solution::Other(_) => None,
        }
    }
}

/// What happens to a served row in one process: whether it was hit, whether it was taken
/// out of service. The one such state for every backend's rows (rocBLAS's [`Entry`]; the
/// cuBLASLt rows can hold one too). Each flag is written at most once per process.
#[derive(Debug, Default)]
pub struct RowState {
    hit: AtomicBool,
    quarantined: AtomicBool,
}

impl RowState {
    /// Marks the row as used; a read after the first time, so no shared line is written.
    #[inline]
    pub fn mark_hit(&self) {
        if !self.hit.load(Ordering::Relaxed) {
            self.hit.store(true, Ordering::Relaxed);
        }
    }

    pub fn was_hit(&self) -> bool {
        self.hit.load(Ordering::Relaxed)
    }

    #[inline]
    pub fn is_quarantined(&self) -> bool {
        self.quarantined.load(Ordering::Relaxed)
    }

    /// Takes the row out of service for this process. Returns true for the first caller,
    /// so the failure is reported exactly once.
    pub fn quarantine(&self) -> bool {
        !self.quarantined.swap(true, Ordering::Relaxed)
    }
}

/// One row as the interposer holds it; its [`RowState`] methods (`mark_hit`,
/// `quarantine`, ...) are called on the entry itself.
#[derive(Debug)]
pub struct Entry {
    pub action: Action,
    /// The key is a problem rocBLAS would run ([`rocblas::is_real_problem`]): a call that
    /// matches a row without it is passed through untouched, as if it had no key. Known
    /// when the table is built, so the hot path checks a call only after its lookup.
    pub servable: bool,
    state: RowState,
}

impl std::ops::Deref for Entry {
    type Target = RowState;

    #[inline]
    fn deref(&self) -> &RowState {
        &self.state
    }
}

impl Entry {
    fn new(key: &ProblemKey, action: Action) -> Entry {
        Entry::with_servable(action, rocblas::is_real_problem(key))
    }

    /// A `*` row's entry: looked up only for calls already checked, so always servable.
    fn for_pattern(action: Action) -> Entry {
        Entry::with_servable(action, true)
    }

    fn with_servable(action: Action, servable: bool) -> Entry {
        Entry {
            action,
            servable,
            state: RowState::default(),
        }
    }
}

/// One index slot: the high half of the key's hash and the row's position.
#[derive(Clone, Copy, Debug)]
struct Slot {
    tag: u32,
    row: u32,
}

const EMPTY: u32 = u32::MAX;

/// The slot of `slots` (`mask` = length - 1) holding `key` (`Ok`), or the empty slot where
/// it would go (`Err`); `row_key` gives the key of a row number. The one probe of the
/// table and its builder.
#[inline(always)]
fn probe<'a>(
    slots: &[Slot],
    mask: usize,
    key: &ProblemKey,
    hash: u64,
    row_key: impl Fn(usize) -> &'a ProblemKey,
) -> Result<usize, usize> {
    let tag = tag_of(hash);
    let mut i = hash as usize & mask;
    // The interposer's hit path runs this outside its unwinding guard: it cannot panic,
    // since `mask` keeps `i` within the slots, every row number stored is below the row
    // count, and the index is never full (a builder grows before 3/4), so the loop ends.
    loop {
        let s = slots[i];
        if s.row == EMPTY {
            return Err(i);
        }
        if s.tag == tag && row_key(s.row as usize).same_as(key) {
            return Ok(i);
        }
        i = (i + 1) & mask;
    }
}

/// A `*` row: the pattern, its row as the file wrote it (`op,signature`), and its entry.
#[derive(Debug)]
pub struct Wildcard {
    pub pattern: KeyPattern,
    pub text: String,
    pub entry: Entry,
}

/// Whether two tables (rocBLAS's or cuBLASLt's) hold the same rows: as many, each with the
/// same action in the other (`in_other`), and the same `*` rows (pattern and action) in the
/// same order.
pub(crate) fn same_rows<K, A: PartialEq, W: PartialEq>(
    (len, other_len): (usize, usize),
    mut rows: impl Iterator<Item = (K, A)>,
    in_other: impl Fn(K) -> Option<A>,
    (wild, other_wild): (Vec<W>, Vec<W>),
) -> bool {
    len == other_len && rows.all(|(k, a)| in_other(k) == Some(a)) && wild == other_wild
}

/// An immutable key -> row map, and the `*` rows beside it.
#[derive(Debug)]
pub struct Table {
    rows: Box<[(ProblemKey, Entry)]>,
    slots: Box<[Slot]>,
    mask: usize,
    wildcards: Vec<Wildcard>,
}

impl Default for Table {
    fn default() -> Table {
        Table::new([])
    }
}

#[inline]
fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32
}

impl Table {
    /// Builds a table; the first row for a key wins, as in PyTorch.
    pub fn new(rows: impl IntoIterator<Item = (ProblemKey, Action)>) -> Table {
        let rows = rows.into_iter();
        let mut b = TableBuilder::with_capacity(rows.size_hint().0);
        for (key, action) in rows {
            let _ = b.insert(key, action);
        }
        b.finish()
    }

    /// As [`Table::new`], with `*` rows `(pattern, "op,signature", action)` in file order.
    pub fn with_wildcards(
        rows: impl IntoIterator<Item = (ProblemKey, Action)>,
        wildcards: impl IntoIterator<Item = (KeyPattern, String, Action)>,
    ) -> Table {
        let mut t = Table::new(rows);
        t.wildcards = wildcards
            .into_iter()
            .map(|(pattern, text, action)| Wildcard {
                pattern,
                text,
                entry: Entry::for_pattern(action),
            })
            .collect();
        t
    }

    /// The first `*` row whose pattern matches `key`: the miss path's second look.
    pub fn get_wildcard(&self, key: &ProblemKey) -> Option<&Entry> {
        self.get_wildcard_row(key).map(|w| &w.entry)
    }

    /// [`Table::get_wildcard`], with the row's pattern and text.
    pub fn get_wildcard_row(&self, key: &ProblemKey) -> Option<&Wildcard> {
        self.wildcards.iter().find(|w| w.pattern.matches(key))
    }

    /// `op,signature` of the row (exact or `*`) that holds `entry`, for messages.
    pub fn describe(&self, entry: &Entry) -> Option<String> {
        if let Some((k, _)) = self.rows.iter().find(|(_, e)| std::ptr::eq(e, entry)) {
            let (op, sig) = crate::tunableop::op_and_signature(k);
            return Some(format!("{op},{sig}"));
        }
        self.wildcards
            .iter()
            .find(|w| std::ptr::eq(&w.entry, entry))
            .map(|w| w.text.clone())
    }

    /// Whether the table has `*` rows at all (a miss skips [`Table::get_wildcard`] if not).
    #[inline]
    pub fn has_wildcards(&self) -> bool {
        !self.wildcards.is_empty()
    }

    pub fn wildcards(&self) -> &[Wildcard] {
        &self.wildcards
    }

    /// The row for `key`, with the key as the table holds it. Inlined into the interposer's
    /// entry points, so the key goes from the call's arguments to the hash in registers.
    #[inline(always)]
    pub fn get_row(&self, key: &ProblemKey) -> Option<&(ProblemKey, Entry)> {
        self.get_row_hashed(key, key.lookup_hash())
    }

    /// [`Table::get_row`] with the key's [`ProblemKey::lookup_hash`] already computed (the
    /// interposer reuses it for the miss set).
    #[inline(always)]
    pub fn get_row_hashed(&self, key: &ProblemKey, hash: u64) -> Option<&(ProblemKey, Entry)> {
        let i = probe(&self.slots, self.mask, key, hash, |r| &self.rows[r].0).ok()?;
        Some(&self.rows[self.slots[i].row as usize])
    }

    #[inline]
    pub fn get(&self, key: &ProblemKey) -> Option<&Entry> {
        self.get_row(key).map(|(_, e)| e)
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Every row, in the order the rows were given.
    pub fn iter(&self) -> impl Iterator<Item = (&ProblemKey, &Entry)> {
        self.rows.iter().map(|(k, e)| (k, e))
    }

    /// True when both tables hold the same rows (identical rank files make one table).
    pub fn same_rows(&self, other: &Table) -> bool {
        let wild = |t: &Table| -> Vec<(KeyPattern, Action)> {
            t.wildcards
                .iter()
                .map(|w| (w.pattern, w.entry.action))
                .collect()
        };
        same_rows(
            (self.len(), other.len()),
            self.iter().map(|(k, e)| (k, e.action)),
            |k| other.get(k).map(|o| o.action),
            (wild(self), wild(other)),
        )
    }

    /// Bytes the table allocates: the rows, the index and the `*` rows.
    pub fn heap_bytes(&self) -> usize {
        let wild: usize = self
            .wildcards
            .iter()
            .map(|w| std::mem::size_of::<Wildcard>() + w.text.capacity())
            .sum();
        std::mem::size_of_val(&*self.rows) + std::mem::size_of_val(&*self.slots) + wild
    }
}

/// Builds a [`Table`] one row at a time, answering for duplicates as it goes: what the
/// profile loader feeds while it reads a file, so the rows are never held twice (as parsed
/// rows and again as the table). The index grows by doubling and stays at most 3/4 full,
/// so the finished table is the one [`Table::new`] makes from the same rows.
#[derive(Debug)]
pub struct TableBuilder {
    rows: Vec<(ProblemKey, Entry)>,
    slots: Vec<Slot>,
    mask: usize,
    wildcards: Vec<Wildcard>,
}

impl Default for TableBuilder {
    fn default() -> TableBuilder {
        TableBuilder::with_capacity(0)
    }
}

impl TableBuilder {
    /// A builder with room for `rows` rows before it grows.
    pub fn with_capacity(rows: usize) -> TableBuilder {
        let n = slots_for(rows);
        TableBuilder {
            rows: Vec::with_capacity(rows),
            slots: vec![Slot { tag: 0, row: EMPTY }; n],
            mask: n - 1,
            wildcards: Vec::new(),
        }
    }

    /// The slot holding `key` (`Ok`) or the empty slot where it would go (`Err`).
    fn probe(&self, key: &ProblemKey, hash: u64) -> Result<usize, usize> {
        probe(&self.slots, self.mask, key, hash, |r| &self.rows[r].0)
    }

    /// The position (in insertion order) of the row for `key`, if it has one.
    pub fn find(&self, key: &ProblemKey) -> Option<usize> {
        let i = self.probe(key, key.lookup_hash()).ok()?;
        Some(self.slots[i].row as usize)
    }

    /// Adds the row for `key` and returns its position, unless the key already has a row:
    /// then nothing changes and the error is the earlier row's position (the first wins).
    pub fn insert(&mut self, key: ProblemKey, action: Action) -> Result<usize, usize> {
        // A row number must stay below EMPTY; a table that large (4 billion rows, over
        // 600 GB) cannot be built anyway.
        if slots_for(self.rows.len() + 1) > self.slots.len() {
            self.grow();
        }
        let hash = key.lookup_hash();
        match self.probe(&key, hash) {
            Ok(i) => Err(self.slots[i].row as usize),
            Err(free) => {
                let row = self.rows.len();
                self.slots[free] = Slot {
                    tag: tag_of(hash),
                    row: row as u32,
                };
                let entry = Entry::new(&key, action);
                self.rows.push((key, entry));
                Ok(row)
            }
        }
    }

    /// Doubles the index and puts every row back in it.
    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        self.slots = vec![Slot { tag: 0, row: EMPTY }; n];
        self.mask = n - 1;
        for (row, (key, _)) in self.rows.iter().enumerate() {
            let hash = key.lookup_hash();
            let mut i = hash as usize & self.mask;
            while self.slots[i].row != EMPTY {
                i = (i + 1) & self.mask;
            }
            self.slots[i] = Slot {
                tag: tag_of(hash),
                row: row as u32,
            };
        }
    }

    /// Adds a `*` row (`pattern`, its `op,signature` text); patterns keep their order.
    pub fn push_wildcard(&mut self, pattern: KeyPattern, text: String, action: Action) {
        self.wildcards.push(Wildcard {
            pattern,
            text,
            entry: Entry::for_pattern(action),
        });
    }

    /// Rows added so far.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table, its row array trimmed to the rows it holds.
    pub fn finish(self) -> Table {
        Table {
            rows: self.rows.into_boxed_slice(),
            slots: self.slots.into_boxed_slice(),
            mask: self.mask,
            wildcards: self.wildcards,
        }
    }
}

/// Index slots for `rows` rows: at most 3/4 full, a power of two for the mask.
fn slots_for(rows: usize) -> usize {
    (rows * 4 / 3 + 1).next_power_of_two().max(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi;
    use crate::key::{Batching, Trans, Types};

    /// The 512 x 64 layer at `n` tokens.
    fn key(n: i64) -> ProblemKey {
        crate::key::half_linear(512, n, 64)
    }

    #[test]
    fn first_row_wins_and_lookup_finds_it() {
        let t = Table::new([
            (key(1), Action::Solution(-1086326047)),
            (key(1), Action::Solution(7)),
            (key(2), Action::Default),
        ]);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.get(&key(1)).unwrap().action,
            Action::Solution(-1086326047)
        );
        assert_eq!(t.get(&key(2)).unwrap().action, Action::Default);
        assert!(t.get(&key(3)).is_none());
        let (op, sig) = crate::tunableop::op_and_signature(&key(2));
        assert_eq!(
            t.describe(t.get(&key(2)).unwrap()),
            Some(format!("{op},{sig}"))
        );
        assert_eq!(t.describe(&Entry::for_pattern(Action::Default)), None);
    }

    #[test]
    fn wildcard_rows_answer_only_what_exact_rows_do_not() {
        let pattern = |n: Option<i64>| KeyPattern {
            batching: crate::key::Batching::Single,
            trans_a: Trans::T,
            trans_b: Trans::N,
            types: Types::uniform(abi::DT_F16_R, abi::DT_F32_R),
            flags: 0,
            m: Some(512),
            n,
            k: Some(64),
            lds: Some([Some(64), Some(64), Some(512), Some(512)]),
            batch: Some(1),
            strides: None,
            ldd_is_ldc: true,
        };
        let t = Table::with_wildcards(
            [(key(1), Action::Solution(3))],
            [
                (pattern(None), "a".to_string(), Action::Solution(9)),
                (pattern(None), "b".to_string(), Action::Solution(10)),
            ],
        );
        assert_eq!(t.get(&key(1)).unwrap().action, Action::Solution(3));
        assert!(
            t.get(&key(700)).is_none(),
            "the hit path never sees patterns"
        );
        let w = t.get_wildcard(&key(700)).unwrap();
        assert_eq!(
            w.action,
            Action::Solution(9),
            "first pattern in the file wins"
        );
        w.mark_hit();
        assert!(t.wildcards()[0].entry.was_hit());
        let mut other_k = key(700);
        other_k.k = 65;
        assert!(t.get_wildcard(&other_k).is_none());
        // Identical tables compare equal with their patterns; different patterns do not.
        let same = Table::with_wildcards(
            [(key(1), Action::Solution(3))],
            [
                (pattern(None), "a".to_string(), Action::Solution(9)),
                (pattern(None), "b".to_string(), Action::Solution(10)),
            ],
        );
        assert!(t.same_rows(&same));
        let fewer = Table::with_wildcards(
            [(key(1), Action::Solution(3))],
            [(pattern(Some(700)), "a".to_string(), Action::Solution(9))],
        );
        assert!(!t.same_rows(&fewer));
        assert!(!t.same_rows(&Table::new([(key(1), Action::Solution(3))])));
    }

    #[test]
    fn quarantine_reports_once() {
        let t = Table::new([(key(1), Action::Solution(3))]);
        let e = t.get(&key(1)).unwrap();
        assert!(!e.is_quarantined());
        assert!(e.quarantine());
        assert!(!e.quarantine());
        assert!(e.is_quarantined());
    }

    #[test]
    fn hit_flag_and_same_rows() {
        let a = Table::new([(key(1), Action::Solution(3)), (key(2), Action::Default)]);
        let b = Table::new([(key(2), Action::Default), (key(1), Action::Solution(3))]);
        let c = Table::new([(key(2), Action::Default), (key(1), Action::Solution(4))]);
        assert!(a.same_rows(&b));
        assert!(!a.same_rows(&c));
        assert!(!a.get(&key(1)).unwrap().was_hit());
        a.get(&key(1)).unwrap().mark_hit();
        assert!(a.get(&key(1)).unwrap().was_hit());
    }

    #[test]
    fn many_rows_all_found_and_absent_keys_not() {
        let rows: Vec<_> = (0..5000)
            .map(|n| (key(n), Action::Solution(n as i32)))
            .collect();
        let t = Table::new(rows.iter().copied());
        assert_eq!(t.len(), 5000);
        for (k, a) in &rows {
            assert_eq!(t.get(k).map(|e| e.action), Some(*a));
        }
        for n in 5000..6000 {
            assert!(t.get(&key(n)).is_none());
        }
        // Rows keep the order they were given in.
        assert!(t.iter().map(|(k, _)| k.n).eq(0..5000));
        assert!(Table::default().get(&key(0)).is_none());
    }

    #[test]
    fn a_builder_that_grows_makes_the_table_new_makes() {
        let mut b = TableBuilder::default();
        for n in 0..10_000 {
            assert_eq!(b.insert(key(n), Action::Solution(n as i32)), Ok(n as usize));
        }
        // A second row for a key changes nothing and names the first.
        assert_eq!(b.insert(key(7), Action::Default), Err(7));
        assert_eq!(b.find(&key(9_999)), Some(9_999));
        assert_eq!(b.find(&key(10_000)), None);
        assert_eq!(b.len(), 10_000);
        let grown = b.finish();
        let direct = Table::new((0..10_000).map(|n| (key(n), Action::Solution(n as i32))));
        assert!(grown.same_rows(&direct));
        assert!(grown.iter().map(|(k, _)| k.n).eq(0..10_000));
        assert_eq!(grown.heap_bytes(), direct.heap_bytes());
        assert_eq!(grown.get(&key(7)).unwrap().action, Action::Solution(7));
    }

    #[test]
    fn keys_differing_in_one_field_are_different_rows() {
        let base = key(64);
        let mut variants = vec![base];
        let f = |f: fn(&mut ProblemKey)| {
            let mut k = base;
            f(&mut k);
            k
        };
        variants.push(f(|k| k.trans_a = Trans::N));
        variants.push(f(|k| k.trans_b = Trans::T));
        variants.push(f(|k| k.types.a = abi::DT_BF16_R));
        variants.push(f(|k| k.types.b = abi::DT_BF16_R));
        variants.push(f(|k| k.types.c = abi::DT_F32_R));
        variants.push(f(|k| k.types.d = abi::DT_F32_R));
        variants.push(f(|k| k.types.compute = abi::DT_F16_R));
        variants.push(f(|k| k.flags = abi::FLAG_FP16_ALT_IMPL));
        variants.push(f(|k| k.m += 1));
        variants.push(f(|k| k.k += 1));
        variants.push(f(|k| k.lda += 1));
        variants.push(f(|k| k.ldb += 1));
        variants.push(f(|k| k.ldc += 1));
        variants.push(f(|k| k.ldd += 1));
        variants.push(f(|k| *k = k.with_batch(Batching::PointerArray, 1, [0; 4])));
        variants.push(f(|k| *k = k.with_batch(Batching::Strided, 1, [0; 4])));
        variants.push(f(|k| *k = k.with_batch(Batching::Strided, 2, [0; 4])));
        for s in 0..4 {
            let mut strides = [0; 4];
            strides[s] = 4096;
            variants.push(base.with_batch(Batching::Strided, 2, strides));
        }
        variants.sort();
        variants.dedup();
        let t = Table::new(
            variants
                .iter()
                .enumerate()
                .map(|(i, k)| (*k, Action::Solution(i as i32))),
        );
        assert_eq!(t.len(), variants.len());
        for (i, k) in variants.iter().enumerate() {
            assert_eq!(
                t.get(k).unwrap().action,
                Action::Solution(i as i32),
                "{k:?}"
            );
        }
    }

    #[test]
    fn rows_rocblas_would_not_run_are_marked() {
        let quick = ProblemKey { n: 0, ..key(1) };
        let short_ld = ProblemKey { ldc: 1, ..key(2) };
        let t = Table::new([
            (key(1), Action::Default),
            (quick, Action::Default),
            (short_ld, Action::Default),
        ]);
        assert!(t.get(&key(1)).unwrap().servable);
        assert!(!t.get(&quick).unwrap().servable);
        assert!(!t.get(&short_ld).unwrap().servable);
    }

    #[test]
    fn memory_per_row_within_budget() {
        assert_eq!(std::mem::size_of::<(ProblemKey, Entry)>(), 144);
        for rows in [1_000, 10_000] {
            let t = Table::new((0..rows).map(|n| (key(n), Action::Default)));
            let per_row = t.heap_bytes() / rows as usize;
            assert!(per_row <= 200, "{rows} rows: {per_row} bytes per row");
        }
    }
}

#[cfg(test)]
mod hash_quality {
    use super::*;

    /// The hash on real rows: every row of the real 1,601-row profile (and a second rank
    /// with other solutions) is found within a few probes. A weak hash shows up here as
    /// long probe chains, long before it shows up as time.
    #[test]
    fn real_profile_rows_sit_near_their_home_slot() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/vllm-rdna/rocm7.14-rocblas5.5");
        for rank in [0, 2] {
            let text =
                std::fs::read_to_string(dir.join(format!("tunableop_results{rank}.csv"))).unwrap();
            let rows = crate::tunableop::parse(&text).rows;
            let t = Table::new(rows.iter().map(|r| (r.key, Action::Default)));
            assert_eq!(t.len(), rows.len());
            let mut worst = 0;
            let mut total = 0;
            for r in &rows {
                let h = r.key.lookup_hash();
                let mut i = h as usize & t.mask;
                let mut d = 0;
                while !t.rows[t.slots[i].row as usize].0.same_as(&r.key) {
                    i = (i + 1) & t.mask;
                    d += 1;
                }
                worst = worst.max(d);
                total += d;
            }
            let mean = total as f64 / rows.len() as f64;
            assert!(
                worst <= 12 && mean < 1.0,
                "rank {rank}: worst {worst} probes, mean {mean:.2}"
            );
        }
    }
}
