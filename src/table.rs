//! The lookup table the interposer serves from: built once at start-up, then only read.
//!
//! The hit path must take no lock, allocate nothing and write no shared cache line in the
//! steady state, so the table is an immutable hash map (FxHash: measured ~8.5 ns per lookup
//! here versus ~36 ns for SipHash). The only per-row mutable state is two flags, each written
//! at most once per process (first hit, quarantine), so after warm-up every access is a read.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, Ordering};

use rustc_hash::FxHasher;

use crate::key::ProblemKey;

/// What a row tells the interposer to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Tuning found the library heuristic best: pass the call through, count it as served.
    Default,
    /// Re-issue with `algo = solution_index` and this index.
    Solution(i32),
}

/// One row as the interposer holds it.
#[derive(Debug)]
pub struct Entry {
    pub action: Action,
    hit: AtomicBool,
    quarantined: AtomicBool,
}

impl Entry {
    fn new(action: Action) -> Entry {
        Entry {
            action,
            hit: AtomicBool::new(false),
            quarantined: AtomicBool::new(false),
        }
    }

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

type FxBuild = BuildHasherDefault<FxHasher>;

/// An immutable key -> row map.
#[derive(Debug, Default)]
pub struct Table {
    rows: HashMap<ProblemKey, Entry, FxBuild>,
}

impl Table {
    /// Builds a table; the first row for a key wins, as in PyTorch.
    pub fn new(rows: impl IntoIterator<Item = (ProblemKey, Action)>) -> Table {
        let mut map: HashMap<ProblemKey, Entry, FxBuild> = HashMap::default();
        for (key, action) in rows {
            map.entry(key).or_insert_with(|| Entry::new(action));
        }
        map.shrink_to_fit();
        Table { rows: map }
    }

    #[inline]
    pub fn get(&self, key: &ProblemKey) -> Option<&Entry> {
        self.rows.get(key)
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ProblemKey, &Entry)> {
        self.rows.iter()
    }

    /// True when both tables hold the same rows (identical rank files make one table).
    pub fn same_rows(&self, other: &Table) -> bool {
        self.len() == other.len()
            && self
                .rows
                .iter()
                .all(|(k, e)| other.get(k).is_some_and(|o| o.action == e.action))
    }

    /// Bytes the map allocates, for the memory budget (capacity x slot + control bytes).
    pub fn heap_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(ProblemKey, Entry)>();
        self.rows.capacity() * (slot + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi;
    use crate::key::{Trans, Types};

    fn key(n: i64) -> ProblemKey {
        let t = Types::uniform(abi::DT_F16_R, abi::DT_F32_R);
        ProblemKey::single(Trans::T, Trans::N, t, 512, n, 64, 64, 64, 512, 512, 0)
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
}
