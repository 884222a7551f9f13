//! One meaning per counter, in every view: the exit summary, the live status (per backend,
//! per rank), the Prometheus file and the stats file all say a backend's calls through one
//! [`Tally`], taken in one walk of its miss set.
//!
//! - `missed` is calls of shapes with no row that were not served near; `near` is counted
//!   apart (a shape served from a nearby token count's row is still recorded as a miss, to be
//!   tuned, but its calls are not missed calls). A shape served by a `*` row is recorded too
//!   (PyTorch records such a shape as untuned), noted [`SERVED_BY_PATTERN`]: its calls are
//!   counted where the row put them (served, `Default`), never as missed.
//! - Missed calls and shapes come from the miss set (per rank, and summed for the backend),
//!   so a rank's missed calls always add up to the backend's; the other outcomes come from
//!   the call counters; `calls` is the sum of the outcomes shown, so every snapshot agrees
//!   with itself.
//! - The hit rate is the share of the calls the profile decided (served, `Default`, near,
//!   missed, fallbacks: not the calls passed through, whose solution the caller chose) that
//!   a row answered (served, `Default`, near).

use std::fmt;

use tunedblas_core::misslog::MissSet;

/// A backend's calls by outcome; see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub served: u64,
    pub default: u64,
    pub near: u64,
    pub near_shapes: u64,
    pub missed: u64,
    pub missed_shapes: u64,
    pub passed_through: u64,
    pub fallbacks: u64,
}

/// The miss-set note of a shape served by a `*` row (the top two bits 3, which the near
/// path's notes never use): recorded to get a row of its own, its calls not missed.
pub const SERVED_BY_PATTERN: u64 = 3 << 62;

/// Whether a slot's note says its shape is served by a `*` row.
pub fn by_pattern(note: u64) -> bool {
    note == SERVED_BY_PATTERN
}

impl Tally {
    /// From the counters (served, default, near, -, passed through, fallbacks: the order of
    /// `status::OUTCOMES`) and the miss set, whose shapes `near` says are served near by
    /// their note; `over_capacity` calls (shapes the set had no room for) are missed too.
    pub fn of<K: Copy + Eq + std::hash::Hash>(
        counters: [u64; 6],
        set: &MissSet<K>,
        near: fn(u64) -> bool,
        over_capacity: u64,
    ) -> Tally {
        let mut t = Tally {
            served: counters[0],
            default: counters[1],
            near: counters[2],
            passed_through: counters[4],
            fallbacks: counters[5],
            missed: over_capacity,
            ..Tally::default()
        };
        set.for_each_slot(|slot, _, _, calls, _| {
            let note = set.note(slot);
            if by_pattern(note) {
                // Counted by the row that served it.
            } else if near(note) {
                t.near_shapes += 1;
            } else {
                t.missed += calls;
                t.missed_shapes += 1;
            }
        });
        t
    }

    /// The stats file's fields every backend writes (`tunedblas verify` reads them): the
    /// calls by outcome, and of the profile's `rows` which were hit (`unhit`: the op and
    /// signature of each that was not). A backend adds its own fields to the object.
    pub fn stats_json(
        &self,
        over_capacity: u64,
        rows: usize,
        unhit: Vec<String>,
    ) -> serde_json::Map<String, serde_json::Value> {
        let serde_json::Value::Object(map) = serde_json::json!({
            "calls": self.calls(),
            "served": self.served,
            "default": self.default,
            "missed_calls": self.missed,
            "missed_shapes": self.missed_shapes,
            "hit_rate": self.hit_permille().map(|p| p as f64 / 1000.0),
            "over_capacity_calls": over_capacity,
            "passed_through": self.passed_through,
            "fallbacks": self.fallbacks,
            "rows": rows,
            "rows_hit": rows - unhit.len(),
            "rows_not_hit": unhit,
        }) else {
            unreachable!("json! of an object literal is an object")
        };
        map
    }

    pub fn calls(&self) -> u64 {
        self.served + self.default + self.near + self.missed + self.passed_through + self.fallbacks
    }

    /// The hit rate in tenths of a percent (`None`: no call was decided).
    pub fn hit_permille(&self) -> Option<u64> {
        let hit = self.served + self.default + self.near;
        let decided = hit + self.missed + self.fallbacks;
        (decided > 0).then(|| (hit * 1000 + decided / 2) / decided)
    }

    /// The counters in `status::OUTCOMES` order, with missed as tallied.
    pub fn outcomes(&self) -> [u64; 6] {
        [
            self.served,
            self.default,
            self.near,
            self.missed,
            self.passed_through,
            self.fallbacks,
        ]
    }
}

/// A shape's note never says "served near" (the Lt backends serve nothing near).
pub fn never_near(_: u64) -> bool {
    false
}

/// The exit summary: `N calls: S served, D default, M missed (K shapes), P passed through, F
/// fallbacks[, X near (Y shapes)]; hit rate H%`. Written without allocating.
pub struct Summary {
    pub tally: Tally,
    /// Near serving is on (or served something): its part is shown.
    pub near_on: bool,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let t = &self.tally;
        write!(
            f,
            "{} calls: {} served, {} default, {} missed ({} shapes), {} passed through, {} fallbacks",
            t.calls(),
            t.served,
            t.default,
            t.missed,
            t.missed_shapes,
            t.passed_through,
            t.fallbacks
        )?;
        if self.near_on || t.near > 0 {
            write!(f, ", {} near ({} shapes)", t.near, t.near_shapes)?;
        }
        if let Some(p) = t.hit_permille() {
            write!(f, "; hit rate {}.{}%", p / 10, p % 10)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hit_rate_leaves_out_what_the_caller_chose_and_rounds_to_a_tenth() {
        let t = Tally {
            served: 2,
            default: 0,
            near: 1,
            missed: 3,
            passed_through: 100,
            ..Tally::default()
        };
        assert_eq!(t.hit_permille(), Some(500));
        assert_eq!(t.calls(), 106);
        assert_eq!(Tally::default().hit_permille(), None);
        let s = Summary {
            tally: Tally {
                served: 1,
                missed: 2,
                missed_shapes: 1,
                ..Tally::default()
            },
            near_on: false,
        };
        assert_eq!(
            s.to_string(),
            "3 calls: 1 served, 0 default, 2 missed (1 shapes), 0 passed through, 0 fallbacks; hit rate 33.3%"
        );
    }
}
