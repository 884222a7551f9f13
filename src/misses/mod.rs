//! Reading the miss logs back ([`crate::misslog`] writes them): [`file`] reads one file
//! or one folder; this module adds up every process's and rank's missed shapes, groups
//! them into families a tuning run should take together and ranks them by calls x FLOPs.
//!
//! The interposer writes, per process and device, `<host>-<pid>-<start>-rank<d>.csv` (one
//! `op_name,param_signature` line per first sight) and `<host>-<pid>-<start>-rank<d>.counts.csv`
//! (`op_name,param_signature,calls`, rewritten whole at flushes and at exit); see
//! [`crate::misslog`]. A process killed before its first flush leaves only the first file:
//! its shapes count as one call each and are marked as lower bounds. Each file is read with
//! [`file::parse`], the one reader of every miss-file form.
//!
//! Grouping: shapes of one layer family ([`crate::family`]) whose token counts sit at most
//! `window` above a multiple of `align` form a chunk + decode group (`512 + 1..21`, the
//! chunk itself included when it missed too); token counts up to `window` are the decode
//! group; the rest are clustered so that each cluster spans at most `window` tokens.

use std::collections::{BTreeMap, BTreeSet};

use crate::family::{describe, family_of};
use crate::key::ProblemKey;

pub mod file;

/// The files of one process and rank, as text.
#[derive(Clone, Debug, Default)]
pub struct Source {
    /// `<host>-<pid>-<start>` (or the file's stem for files not named by the interposer).
    pub process: String,
    pub rank: Option<i32>,
    /// The first-sight file (`op,sig` lines; PyTorch's untuned files read the same).
    pub first_sights: Option<String>,
    /// The counts file (`op,sig,calls` after a header).
    pub counts: Option<String>,
}

/// Splits a miss-file name into (process, rank, is-counts). `None` for other files.
pub fn parse_file_name(name: &str) -> Option<(String, Option<i32>, bool)> {
    let (stem, counts) = if let Some(s) = name.strip_suffix(".counts.csv") {
        (s, true)
    } else {
        (name.strip_suffix(".csv")?, false)
    };
    match stem.rsplit_once("-rank") {
        Some((process, rank)) if !rank.is_empty() && rank.bytes().all(|b| b.is_ascii_digit()) => {
            Some((process.to_string(), rank.parse().ok(), counts))
        }
        _ => Some((stem.to_string(), None, counts)),
    }
}

/// One missed problem, added up over every source.
#[derive(Clone, Debug, PartialEq)]
pub struct Miss {
    pub key: ProblemKey,
    pub calls: u64,
    /// False when some source had no count for it (its calls are a lower bound).
    pub counted: bool,
    pub processes: BTreeSet<String>,
    pub ranks: BTreeSet<i32>,
}

impl Miss {
    pub fn cost(&self) -> f64 {
        self.calls as f64 * self.key.flops()
    }
}

/// Every missed problem of `sources`, most expensive first, and the lines that could not
/// be read (with their source).
pub fn aggregate(sources: &[Source]) -> (Vec<Miss>, Vec<String>) {
    let mut by_key: BTreeMap<ProblemKey, Miss> = BTreeMap::new();
    let mut problems = Vec::new();
    for src in sources {
        let mut seen: BTreeMap<ProblemKey, Option<u64>> = BTreeMap::new();
        let files = [(&src.counts, "counts"), (&src.first_sights, "log")];
        for (text, what) in files {
            let Some(text) = text else { continue };
            // One reader for every miss-file form (fragments, older signatures, BLAS_PARAMS).
            let log = file::parse(text);
            for p in &log.malformed {
                problems.push(format!(
                    "{} {what} line {}: {}",
                    src.process, p.line, p.reason
                ));
            }
            for (line, op) in &log.unservable {
                problems.push(format!(
                    "{} {what} line {line}: {op} is not an op rocBLAS serves",
                    src.process
                ));
            }
            for m in log.misses {
                let slot = seen.entry(m.key).or_insert(None);
                if let Some(c) = m.calls {
                    *slot = Some(slot.unwrap_or(0).max(c));
                }
            }
        }
        for (key, calls) in seen {
            let m = by_key.entry(key).or_insert_with(|| Miss {
                key,
                calls: 0,
                counted: true,
                processes: BTreeSet::new(),
                ranks: BTreeSet::new(),
            });
            // Counts come from files anyone may have written: added without wrapping.
            m.calls = m.calls.saturating_add(calls.unwrap_or(1));
            m.counted &= calls.is_some();
            m.processes.insert(src.process.clone());
            if let Some(r) = src.rank {
                m.ranks.insert(r);
            }
        }
    }
    let mut misses: Vec<Miss> = by_key.into_values().collect();
    misses.sort_by(|a, b| b.cost().total_cmp(&a.cost()).then(a.key.cmp(&b.key)));
    (misses, problems)
}

/// What kind of token counts a group holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupKind {
    /// `base + 1..window` (and `base` itself): a chunk and the decodes sharing its step.
    ChunkDecode { base: i64 },
    /// Token counts up to `window`: decode and verify batches.
    Decode,
    /// Anything else, clustered.
    Other,
}

/// Missed shapes a tuning run should take together.
#[derive(Clone, Debug)]
pub struct Group {
    pub family: ProblemKey,
    pub kind: GroupKind,
    /// Indices into the misses, by token count.
    pub members: Vec<usize>,
    pub calls: u64,
    pub cost: f64,
}

impl Group {
    /// `10240x2560`, plus anything unusual about the family.
    pub fn label(&self) -> String {
        describe(&self.family)
    }

    /// `512 + 1..21`, `1..17`, `800 1600`.
    pub fn tokens(&self, misses: &[Miss]) -> String {
        let ms: Vec<i64> = self.members.iter().map(|&i| misses[i].key.n).collect();
        match self.kind {
            GroupKind::ChunkDecode { base } => {
                let offsets: Vec<i64> = ms.iter().map(|m| m - base).filter(|&d| d > 0).collect();
                let with_base = ms.contains(&base);
                let lo = offsets.iter().min().copied().unwrap_or(0);
                let hi = offsets.iter().max().copied().unwrap_or(0);
                let run = if offsets.len() as i64 == hi - lo + 1 && offsets.len() > 2 {
                    format!("{lo}..{hi}")
                } else {
                    offsets
                        .iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                };
                if with_base {
                    format!("{base} (+ {run})")
                } else {
                    format!("{base} + {run}")
                }
            }
            _ => crate::coverage::compress(&ms),
        }
    }
}

/// Groups the misses (see the module docs) and ranks the groups by total calls x FLOPs.
pub fn group(misses: &[Miss], align: i64, window: i64) -> Vec<Group> {
    let align = align.max(1);
    let mut by_family: BTreeMap<ProblemKey, Vec<usize>> = BTreeMap::new();
    for (i, m) in misses.iter().enumerate() {
        by_family.entry(family_of(&m.key)).or_default().push(i);
    }
    let mut groups = Vec::new();
    for (family, mut idx) in by_family {
        idx.sort_by_key(|&i| misses[i].key.n);
        let mut kinds: BTreeMap<GroupKind, Vec<usize>> = BTreeMap::new();
        let mut rest = Vec::new();
        for &i in &idx {
            let n = misses[i].key.n;
            let base = n - n % align;
            if n <= window {
                kinds.entry(GroupKind::Decode).or_default().push(i);
            } else if base > 0 && n - base <= window {
                kinds
                    .entry(GroupKind::ChunkDecode { base })
                    .or_default()
                    .push(i);
            } else {
                rest.push(i);
            }
        }
        // A chunk + decode "group" of the chunk alone is just that chunk.
        let lone: Vec<GroupKind> = kinds
            .iter()
            .filter(|(k, v)| {
                matches!(k, GroupKind::ChunkDecode { base } if v.len() == 1 && misses[v[0]].key.n == *base)
            })
            .map(|(k, _)| *k)
            .collect();
        for k in lone {
            rest.extend(kinds.remove(&k).unwrap());
        }
        rest.sort_by_key(|&i| misses[i].key.n);
        let mut clusters: Vec<Vec<usize>> = Vec::new();
        for i in rest {
            let n = misses[i].key.n;
            match clusters.last_mut() {
                Some(c) if n - misses[c[0]].key.n <= window => c.push(i),
                _ => clusters.push(vec![i]),
            }
        }
        let all = kinds
            .into_iter()
            .chain(clusters.into_iter().map(|c| (GroupKind::Other, c)));
        for (kind, members) in all {
            let calls = members
                .iter()
                .fold(0u64, |t, &i| t.saturating_add(misses[i].calls));
            let cost = members.iter().map(|&i| misses[i].cost()).sum();
            groups.push(Group {
                family,
                kind,
                members,
                calls,
                cost,
            });
        }
    }
    groups.sort_by(|a, b| b.cost.total_cmp(&a.cost).then(a.family.cmp(&b.family)));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n_out: i64, m: i64, k: i64) -> String {
        format!("GemmTunableOp_Half_TN,tn_{n_out}_{m}_{k}_ld_{k}_{k}_{n_out}")
    }

    fn src(process: &str, rank: i32, log: &[String], counts: Option<&[(String, u64)]>) -> Source {
        Source {
            process: process.into(),
            rank: Some(rank),
            first_sights: Some(log.iter().map(|l| format!("{l}\n")).collect()),
            counts: counts.map(|c| {
                let mut t = String::from("op_name,param_signature,calls\n");
                for (l, n) in c {
                    t.push_str(&format!("{l},{n}\n"));
                }
                t
            }),
        }
    }

    #[test]
    fn file_names() {
        assert_eq!(
            parse_file_name("node1-4242-rank3.csv"),
            Some(("node1-4242".into(), Some(3), false))
        );
        assert_eq!(
            parse_file_name("node1-4242-rank3.counts.csv"),
            Some(("node1-4242".into(), Some(3), true))
        );
        assert_eq!(
            parse_file_name("tunableop_untuned0.csv"),
            Some(("tunableop_untuned0".into(), None, false))
        );
        assert_eq!(parse_file_name("node1-4242-rank3.counts.tmp.4242"), None);
    }

    #[test]
    fn processes_and_ranks_add_up_and_missing_counts_are_lower_bounds() {
        let a = line(10240, 513, 2560);
        let b = line(10240, 514, 2560);
        let sources = [
            src(
                "h-1",
                0,
                &[a.clone(), b.clone()],
                Some(&[(a.clone(), 100), (b.clone(), 7)]),
            ),
            src("h-1", 1, std::slice::from_ref(&a), Some(&[(a.clone(), 50)])),
            // Killed before its first flush: no counts file.
            src("h-2", 0, &[a.clone(), b.clone()], None),
        ];
        let (misses, problems) = aggregate(&sources);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(misses.len(), 2);
        let ma = misses.iter().find(|m| m.key.n == 513).unwrap();
        assert_eq!(ma.calls, 151);
        assert!(!ma.counted);
        assert_eq!(ma.processes.len(), 2);
        assert_eq!(ma.ranks, BTreeSet::from([0, 1]));
        // A shape counted after it was logged (and one only in the counts) is fine.
        let (m, _) = aggregate(&[src("h-3", 0, &[], Some(&[(b.clone(), 9)]))]);
        assert_eq!((m[0].calls, m[0].counted), (9, true));
        // Garbage is reported, not fatal.
        let (m, problems) = aggregate(&[src("h-4", 0, &["nonsense".into(), a.clone()], None)]);
        assert_eq!(m.len(), 1);
        assert_eq!(problems.len(), 1);
    }

    #[test]
    fn chunk_and_decode_shapes_form_families_ranked_by_cost() {
        let mut log = Vec::new();
        let mut counts = Vec::new();
        // 512 + 1..21 on the big layer, 20 calls each.
        for d in 1..=21 {
            log.push(line(10240, 512 + d, 2560));
            counts.push((line(10240, 512 + d, 2560), 20));
        }
        // The 1024 chunk itself and 1024 + 3 on the big layer.
        for m in [1024, 1027] {
            log.push(line(10240, m, 2560));
            counts.push((line(10240, m, 2560), 5));
        }
        // Decodes on a small layer, many calls.
        for m in [1, 2, 4, 8] {
            log.push(line(512, m, 2560));
            counts.push((line(512, m, 2560), 10_000));
        }
        // A lone prompt tail and a lone chunk.
        log.push(line(10240, 3001, 2560));
        counts.push((line(10240, 3001, 2560), 1));
        log.push(line(10240, 2048, 2560));
        counts.push((line(10240, 2048, 2560), 1));
        let (misses, _) = aggregate(&[src("h-1", 0, &log, Some(&counts))]);
        let groups = group(&misses, 256, 32);
        let first = &groups[0];
        assert_eq!(first.kind, GroupKind::ChunkDecode { base: 512 });
        assert_eq!(first.members.len(), 21);
        assert_eq!(first.calls, 420);
        assert_eq!(first.tokens(&misses), "512 + 1..21");
        let chunk_1024 = groups
            .iter()
            .find(|g| g.kind == GroupKind::ChunkDecode { base: 1024 })
            .unwrap();
        assert_eq!(chunk_1024.tokens(&misses), "1024 (+ 3)");
        let decode = groups.iter().find(|g| g.kind == GroupKind::Decode).unwrap();
        assert_eq!(decode.tokens(&misses), "1 2 4 8");
        assert_eq!(decode.label(), "512x2560");
        // The lone chunk at 2048 is not a mix; the tail stands alone.
        assert!(groups
            .iter()
            .any(|g| g.kind == GroupKind::Other && g.tokens(&misses) == "2048"));
        assert!(groups
            .iter()
            .any(|g| g.kind == GroupKind::Other && g.tokens(&misses) == "3001"));
        let costs: Vec<f64> = groups.iter().map(|g| g.cost).collect();
        assert!(costs.windows(2).all(|w| w[0] >= w[1]));
    }
}
