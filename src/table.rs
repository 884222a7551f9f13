//! The lookup table the interposer serves from: built once at start-up, then only read.
//!
//! The hit path must take no lock, allocate nothing and write no shared cache line in the
//! steady state, so the table is an immutable hash map (FxHash: measured ~8.5 ns per lookup
//! here versus ~36 ns for SipHash). The only per-row mutable state is two flags, each written
//! at most once per process (first hit, quarantine), so after warm-up every access is a read.
//!
//! PyTorch's `*` rows (a dynamic dimension, usually the token count) cannot be hashed; they
//! sit beside the map in file order and are only scanned when the exact lookup misses
//! ([`Table::get_wildcard`]), so the hit path never pays for them. An exact row wins over a
//! pattern; among patterns, the first in the file wins.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, Ordering};

use rustc_hash::FxHasher;

use crate::key::ProblemKey;
use crate::tunableop::KeyPattern;

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

/// A `*` row: the pattern, its row as the file wrote it (`op,signature`), and its entry.
#[derive(Debug)]
pub struct Wildcard {
    pub pattern: KeyPattern,
    pub text: String,
    pub entry: Entry,
}

/// An immutable key -> row map, and the `*` rows beside it.
#[derive(Debug, Default)]
pub struct Table {
    rows: HashMap<ProblemKey, Entry, FxBuild>,
    wildcards: Vec<Wildcard>,
}

impl Table {
    /// Builds a table; the first row for a key wins, as in PyTorch.
    pub fn new(rows: impl IntoIterator<Item = (ProblemKey, Action)>) -> Table {
        let mut map: HashMap<ProblemKey, Entry, FxBuild> = HashMap::default();
        for (key, action) in rows {
            map.entry(key).or_insert_with(|| Entry::new(action));
        }
        map.shrink_to_fit();
        Table {
            rows: map,
            wildcards: Vec::new(),
        }
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
                entry: Entry::new(action),
            })
            .collect();
        t
    }

    /// The first `*` row whose pattern matches `key`: the miss path's second look.
    pub fn get_wildcard(&self, key: &ProblemKey) -> Option<&Entry> {
        self.wildcards
            .iter()
            .find(|w| w.pattern.matches(key))
            .map(|w| &w.entry)
    }

    pub fn wildcards(&self) -> &[Wildcard] {
        &self.wildcards
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
            && self.wildcards.len() == other.wildcards.len()
            && self
                .wildcards
                .iter()
                .zip(&other.wildcards)
                .all(|(a, b)| a.pattern == b.pattern && a.entry.action == b.entry.action)
    }

    /// Bytes the map allocates, for the memory budget (capacity x slot + control bytes).
    pub fn heap_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(ProblemKey, Entry)>();
        let wild: usize = self
            .wildcards
            .iter()
            .map(|w| std::mem::size_of::<Wildcard>() + w.text.capacity())
            .sum();
        self.rows.capacity() * (slot + 1) + wild
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
}
