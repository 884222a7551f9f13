//! The near-shape rule: a missed problem may take the row of the same layer at the nearest
//! tuned token count.
//!
//! Dynamic shapes (prompt tails, chunk + decode mixes such as `512 + 1..21`) are not worth a
//! row each and no grid enumerates them, yet the solution tuned for the chunk usually fits
//! its neighbours. [`NearIndex`]: per family ([`crate::family`]), the token counts that have
//! rows, sorted; [`NearIndex::nearest`] finds the closest one within a window. The
//! interposer serves by it (`preload/src/rocblas/near.rs`: the verdict per key, validation,
//! the serve path); `coverage` and `report` predict with it.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use rustc_hash::FxHasher;

use crate::family::{family_of, instantiate};
use crate::key::ProblemKey;
use crate::table::{Action, Table};

/// The token window when `TUNEDBLAS_NEAR` is unset. On, because measured on refblas over
/// M = chunk + 1..32 (BENCHMARKS.md, "Near-shape serving") the chunk row's solution, where it
/// validated, beat the heuristic at every such M (0.55x the time) and was never slower;
/// where nothing validates the call is the heuristic anyway.
pub const DEFAULT_WINDOW: i64 = 32;

/// [`NearIndex::servable`]'s answer for a key without a row of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NearChoice {
    /// No row of the layer within the window: the heuristic.
    Nothing,
    /// The nearest row (at this token count) says `Default`: the heuristic.
    DefaultRow(i64),
    /// The nearest row (at this token count) is quarantined: the heuristic.
    Quarantined(i64),
    /// Try the nearest row's (token count, solution), once it validates for the exact
    /// problem at run time.
    Try(i64, i32),
}

/// Token counts with rows, per family.
#[derive(Debug, Default)]
pub struct NearIndex {
    by_family: HashMap<ProblemKey, Vec<(i64, Action)>, BuildHasherDefault<FxHasher>>,
}

impl NearIndex {
    /// Indexes the exact rows of `table` (`*` rows already match every token count).
    pub fn new(table: &Table) -> NearIndex {
        let mut ix = NearIndex::default();
        for (key, entry) in table.iter() {
            ix.by_family
                .entry(family_of(key))
                .or_default()
                .push((key.n, entry.action));
        }
        for v in ix.by_family.values_mut() {
            v.sort_by_key(|&(n, _)| n);
        }
        ix
    }

    /// The row nearest to `key`'s token count among rows of its family, at most `window`
    /// tokens away and not the key itself; on a tie the smaller token count (the chunk a
    /// chunk + decode step extends). Returns (token count, action).
    pub fn nearest(&self, key: &ProblemKey, window: i64) -> Option<(i64, Action)> {
        if window <= 0 {
            return None;
        }
        let rows = self.by_family.get(&family_of(key))?;
        let n = key.n;
        let at = rows.partition_point(|&(t, _)| t < n);
        let below = at.checked_sub(1).map(|i| rows[i]);
        let above = rows[at..].iter().find(|&&(t, _)| t != n).copied();
        let best = match (below, above) {
            (Some(b), Some(a)) => {
                if n - b.0 <= a.0 - n {
                    b
                } else {
                    a
                }
            }
            (Some(b), None) => b,
            (None, Some(a)) => a,
            (None, None) => return None,
        };
        ((best.0 - n).abs() <= window).then_some(best)
    }

    /// What the interposer serves `key` (which has no row of its own in `table`, the table
    /// this index was built from) with, before the run-time validation for the exact
    /// problem: the nearest row's solution, unless that row says `Default` or is
    /// quarantined. The one decision the interposer serves by and `report` shows.
    ///
    /// A key a `*` row matches is that row's (PyTorch's rule, [`Table::get_wildcard`]), even
    /// where the row says `Default` or is quarantined (PyTorch then runs the library's
    /// default, never another candidate): near serving never takes it, so [`NearChoice::Nothing`].
    pub fn servable(&self, table: &Table, key: &ProblemKey, window: i64) -> NearChoice {
        if table.has_wildcards() && table.get_wildcard(key).is_some() {
            return NearChoice::Nothing;
        }
        let Some((from, action)) = self.nearest(key, window) else {
            return NearChoice::Nothing;
        };
        let row = instantiate(&family_of(key), from).and_then(|k| table.get(&k));
        match action {
            Action::Default => NearChoice::DefaultRow(from),
            Action::Solution(_) if row.is_some_and(|e| e.is_quarantined()) => {
                NearChoice::Quarantined(from)
            }
            Action::Solution(id) => NearChoice::Try(from, id),
        }
    }

    pub fn families(&self) -> usize {
        self.by_family.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::key::half_linear as linear;

    #[test]
    fn nearest_row_of_the_same_layer_within_the_window() {
        let table = Table::new([
            (linear(64, 512, 32), Action::Solution(7)),
            (linear(64, 1024, 32), Action::Solution(8)),
            (linear(64, 540, 32), Action::Default),
            (linear(96, 512, 32), Action::Solution(9)),
        ]);
        let ix = NearIndex::new(&table);
        assert_eq!(ix.families(), 2);
        let [seven, eight, nine] = [7, 8, 9].map(Action::Solution);
        let default = Action::Default;
        // (layer rows, tokens, layer columns, window), the row chosen, why: the nearer row
        // wins whatever it says, a tie goes to the smaller token count, never the key itself.
        let cases = [
            ((64, 513, 32, 32), Some((512, seven)), "the nearest"),
            ((64, 530, 32, 32), Some((540, default)), "whatever it says"),
            ((64, 526, 32, 32), Some((512, seven)), "a tie: the smaller"),
            ((64, 1000, 32, 32), Some((1024, eight)), "the nearest"),
            ((64, 600, 32, 32), None, "outside the window"),
            ((64, 513, 32, 0), None, "window 0 is off"),
            ((64, 513, 33, 32), None, "another layer"),
            ((64, 512, 32, 32), Some((540, default)), "never itself"),
            ((96, 500, 32, 32), Some((512, nine)), "its own layer's row"),
        ];
        for ((n_out, tokens, k, window), want, why) in cases {
            let key = linear(n_out, tokens, k);
            assert_eq!(
                ix.nearest(&key, window),
                want,
                "{n_out}x{tokens}x{k}: {why}"
            );
        }
    }

    /// A `*` row decides every call it matches, as in PyTorch (its solution, or the
    /// library's default where it says `Default`): near serving never overrides it, while a
    /// call of another layer still takes its nearest row.
    #[test]
    fn a_matching_wildcard_row_is_never_overridden_by_near_serving() {
        use crate::tunableop::KeyParse;
        let KeyParse::Wildcard(p) =
            crate::tunableop::parse_key("GemmTunableOp_Half_TN", "tn_64_*_32_ld_32_32_64")
        else {
            panic!("a pattern")
        };
        let table = Table::with_wildcards(
            [
                (linear(64, 512, 32), Action::Solution(7)),
                (linear(96, 512, 32), Action::Solution(9)),
            ],
            [(p, "tn_64_*_32".to_string(), Action::Default)],
        );
        let ix = NearIndex::new(&table);
        assert_eq!(
            ix.servable(&table, &linear(64, 513, 32), 32),
            NearChoice::Nothing,
            "the `*` row (Default) decides, not the 512 row"
        );
        assert_eq!(
            ix.servable(&table, &linear(96, 513, 32), 32),
            NearChoice::Try(512, 9)
        );
    }

    #[test]
    fn servable_is_the_nearest_rows_solution_unless_default() {
        let table = Table::new([
            (linear(64, 512, 32), Action::Solution(7)),
            (linear(64, 540, 32), Action::Default),
        ]);
        let ix = NearIndex::new(&table);
        assert_eq!(
            ix.servable(&table, &linear(64, 513, 32), 32),
            NearChoice::Try(512, 7)
        );
        assert_eq!(
            ix.servable(&table, &linear(64, 535, 32), 32),
            NearChoice::DefaultRow(540),
            "the nearest row says Default: the heuristic, not the next row"
        );
        assert_eq!(
            ix.servable(&table, &linear(64, 600, 32), 32),
            NearChoice::Nothing
        );
        assert_eq!(
            ix.servable(&table, &linear(64, 513, 32), 0),
            NearChoice::Nothing
        );
    }
}
