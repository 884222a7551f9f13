//! `tunedblas coverage`'s report, as text for people and JSON for tools. The analysis is
//! the core's ([`tunedblas_core::coverage`]); how it reads is the command's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{json, Value};
use tunedblas_core::coverage::{compress, gap_groups, Group, Problem, Report, Role, Status};
use tunedblas_core::tunableop;

/// Problems per [`Group`].
type Groups<'r> = BTreeMap<Group, Vec<&'r Problem>>;

/// Problems grouped by [`Group`], in report order.
fn by_group(r: &Report) -> Groups<'_> {
    let mut groups: BTreeMap<Group, Vec<&Problem>> = BTreeMap::new();
    for p in &r.problems {
        groups.entry(Group::of(p)).or_default().push(p);
    }
    groups
}

fn short(f: f64) -> String {
    if f >= 1e12 {
        format!("{:.1}T", f / 1e12)
    } else if f >= 1e9 {
        format!("{:.1}G", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.1}M", f / 1e6)
    } else {
        format!("{:.0}k", f / 1e3)
    }
}

fn ms_text(ps: &[&Problem]) -> String {
    let mut ms: Vec<i64> = ps.iter().map(|p| p.m).collect();
    ms.sort_unstable();
    ms.dedup();
    compress(&ms)
}

/// As [`ms_text`], at most about 24 characters: `1..496 (47 values)` for long lists.
fn ms_short(ps: &[&Problem]) -> String {
    let full = ms_text(ps);
    if full.len() <= 24 {
        return full;
    }
    let lo = ps.iter().map(|p| p.m).min().unwrap_or(0);
    let hi = ps.iter().map(|p| p.m).max().unwrap_or(0);
    let n = ps.iter().map(|p| p.m).collect::<BTreeSet<_>>().len();
    format!("{lo}..{hi} ({n} values)")
}

fn count_words(ps: &[&Problem]) -> String {
    let mut parts = Vec::new();
    for w in ["tuned", "Default", "missing", "unservable"] {
        let n = ps.iter().filter(|p| p.status.word() == w).count();
        if n > 0 {
            parts.push(format!("{n} {w}"));
        }
    }
    parts.join(", ")
}

/// The report as text: header, token grid, per-group status across shapes, the per-shape
/// matrix at the prefill token counts, and the gap groups worth tuning first (`top`).
pub fn text(r: &Report, top: usize) -> String {
    let mut o = String::new();
    header(&mut o, r);
    token_grid(&mut o, r);
    summary(&mut o, r);
    let groups = by_group(r);
    prefill_counts(&mut o, r, &groups);
    by_token_count(&mut o, r, &groups);
    shape_matrix(&mut o, r, &groups);
    gaps(&mut o, r, top);
    unused_rows(&mut o, r);
    let _ = writeln!(
        o,
        "prompt tails (the last chunk of a prompt) can be any length; only near-shape serving covers them"
    );
    o
}

fn header(o: &mut String, r: &Report) {
    let _ = writeln!(
        o,
        "coverage of {} for {} ({} shapes)",
        r.profile.as_deref().unwrap_or("no profile"),
        r.source,
        r.shapes.len(),
    );
    let _ = writeln!(o, "serving: {}", r.serving.describe());
}

/// Every token count the configuration runs, per reason.
fn token_grid(o: &mut String, r: &Report) {
    let _ = writeln!(o, "\ntoken counts (M) and why:");
    for (role, g) in &r.grids {
        let mut by_reason: BTreeMap<_, Vec<i64>> = BTreeMap::new();
        for (&m, whys) in g {
            for w in whys {
                let v = by_reason.entry(w.reason).or_default();
                if v.last() != Some(&m) {
                    v.push(m);
                }
            }
        }
        let who = if *role == Role::LmHead {
            " (lm_head)"
        } else {
            ""
        };
        for (reason, ms) in by_reason {
            let _ = writeln!(
                o,
                "  {:<22} {}",
                format!("{}{who}", reason.label()),
                compress(&ms)
            );
        }
    }
}

fn summary(o: &mut String, r: &Report) {
    let _ = writeln!(
        o,
        "\n{} problems: {} tuned, {} Default, {} missing, {} unservable; tuned + Default carry {:.1}% of the predicted cost per step",
        r.problems.len(),
        r.count("tuned"),
        r.count("Default"),
        r.count("missing"),
        r.count("unservable"),
        100.0 * r.covered_cost_share()
    );
    let near = r.problems.iter().filter(|p| p.near.is_some()).count();
    if r.near_window > 0 && r.count("missing") > 0 {
        let _ = writeln!(
            o,
            "near serving (window {}): {near} of the missing have a tuned row of their layer within reach; it serves them where that solution validates for the exact M",
            r.near_window
        );
    }
}

/// The groups of a single token count (prefill-type), in report order.
fn single<'g, 'r>(groups: &'g Groups<'r>) -> Vec<(&'g Group, &'g Vec<&'r Problem>)> {
    groups.iter().filter(|(g, _)| g.m > 0).collect()
}

/// Which prefill token counts are missing for every shape, and which are present.
fn prefill_counts(o: &mut String, r: &Report, groups: &Groups) {
    let single = single(groups);
    let mut all_missing: Vec<i64> = single
        .iter()
        .filter(|(_, ps)| ps.iter().all(|p| p.status == Status::Missing))
        .map(|(g, _)| g.m)
        .collect();
    let present: Vec<String> = single
        .iter()
        .filter(|(_, ps)| ps.iter().any(|p| p.status.is_covered()))
        .map(|(g, ps)| format!("{} ({})", g.m, count_words(ps)))
        .collect();
    let _ = writeln!(o, "\nprefill token counts:");
    if !all_missing.is_empty() {
        all_missing.sort_unstable();
        let _ = writeln!(
            o,
            "  missing for all {} shapes: M = {}",
            r.shapes.len(),
            all_missing
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !present.is_empty() {
        let _ = writeln!(o, "  present at: M = {}", present.join("; "));
    }
}

/// One line per group of token counts: its status across the shapes.
fn by_token_count(o: &mut String, r: &Report, groups: &Groups) {
    let _ = writeln!(
        o,
        "\nby token count (across the {} shapes):",
        r.shapes.len()
    );
    for (g, ps) in groups {
        let label = g.label(ps);
        let head = if g.m > 0 {
            format!("M = {} ({label})", g.m)
        } else {
            format!("M = {} ({label})", ms_text(ps))
        };
        let shapes_in: BTreeSet<usize> = ps.iter().map(|p| p.shape).collect();
        let verdict = if ps.iter().all(|p| p.status == Status::Missing) {
            format!("MISSING for all {} shapes", shapes_in.len())
        } else {
            let mut v = count_words(ps);
            if g.m > 0 {
                for w in ["Default", "missing", "unservable"] {
                    let names: Vec<String> = ps
                        .iter()
                        .filter(|p| p.status.word() == w)
                        .map(|p| r.shapes[p.shape].label())
                        .collect();
                    if !names.is_empty() && names.len() < shapes_in.len() {
                        let _ = write!(v, "; {w}: {}", names.join(", "));
                    }
                }
            }
            v
        };
        let _ = writeln!(o, "  {head}: {verdict}");
    }
}

/// The per-shape matrix at the single-M (prefill-type) token counts.
fn shape_matrix(o: &mut String, r: &Report, groups: &Groups) {
    let cols: Vec<i64> = single(groups)
        .iter()
        .map(|(g, _)| g.m)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if cols.is_empty() || cols.len() > 24 {
        return;
    }
    let _ = writeln!(
        o,
        "\nby shape at those token counts (T tuned, D Default, - missing, U unservable):"
    );
    let width = r
        .shapes
        .iter()
        .map(|s| s.label().len())
        .max()
        .unwrap_or(8)
        .max(8);
    let mut head = format!("  {:<width$}", "shape");
    for c in &cols {
        let _ = write!(head, " {c:>5}");
    }
    let _ = writeln!(o, "{head}   other M covered");
    for (i, s) in r.shapes.iter().enumerate() {
        let mut line = format!("  {:<width$}", s.label());
        for c in &cols {
            let st = r
                .problems
                .iter()
                .find(|p| p.shape == i && p.m == *c)
                .map_or(' ', |p| p.status.letter());
            let _ = write!(line, " {st:>5}");
        }
        let rest: Vec<&Problem> = r
            .problems
            .iter()
            .filter(|p| p.shape == i && !cols.contains(&p.m))
            .collect();
        let covered = rest.iter().filter(|p| p.status.is_covered()).count();
        let _ = writeln!(o, "{line}   {covered}/{}", rest.len());
    }
}

/// The gaps, grouped per shape and ranked.
fn gaps(o: &mut String, r: &Report, top: usize) {
    let gaps = gap_groups(r);
    if gaps.is_empty() {
        let _ = writeln!(o, "\nno gaps: every predicted problem has a row");
        return;
    }
    let _ = writeln!(
        o,
        "\nworth tuning first ({} of {} gap groups; cost = calls per step x FLOPs of the largest M):",
        top.min(gaps.len()),
        gaps.len()
    );
    let _ = writeln!(
        o,
        "  {:<4} {:<22} {:<24} {:>5} {:>8}  why",
        "rank", "shape", "M", "calls", "FLOP"
    );
    for (i, g) in gaps.iter().take(top).enumerate() {
        let s = &r.shapes[g.shape];
        let unservable = g
            .problems
            .iter()
            .filter(|p| matches!(p.status, Status::Unservable(_)))
            .count();
        let near_from: BTreeSet<i64> = g.problems.iter().filter_map(|p| p.near).collect();
        let mut note = if unservable > 0 {
            format!(" [{unservable} unservable]")
        } else {
            String::new()
        };
        if !near_from.is_empty() {
            let from: Vec<String> = near_from.iter().map(i64::to_string).collect();
            let _ = write!(note, " [near: row at {}]", from.join(","));
        }
        let biggest = g.problems.iter().map(|p| p.key.flops()).fold(0.0, f64::max);
        let _ = writeln!(
            o,
            "  {:<4} {:<22} {:<24} {:>5} {:>8}  {}{note}",
            i + 1,
            s.label(),
            ms_short(&g.problems),
            s.calls_per_step,
            short(biggest),
            g.label,
        );
    }
}

fn unused_rows(o: &mut String, r: &Report) {
    if r.unused_rows.is_empty() {
        return;
    }
    let mut ms: Vec<i64> = r.unused_rows.iter().map(|k| k.n).collect();
    ms.sort_unstable();
    ms.dedup();
    let _ = writeln!(
        o,
        "\n{} profile rows are at token counts this configuration does not predict (M = {})",
        r.unused_rows.len(),
        compress(&ms)
    );
}

/// The report as JSON: every problem with its status and reasons, ranked.
pub fn json(r: &Report) -> Value {
    let shapes: Vec<Value> = r
        .shapes
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "label": s.label(),
                "n": s.family.m,
                "k": s.family.k,
                "calls_per_step": s.calls_per_step,
                "role": if s.role == Role::LmHead { "lm_head" } else { "body" },
            })
        })
        .collect();
    let problems: Vec<Value> = r
        .problems
        .iter()
        .map(|p| {
            let (op, sig) = tunableop::op_and_signature(&p.key);
            let mut v = json!({
                "shape": r.shapes[p.shape].label(),
                "n": p.key.m,
                "k": p.key.k,
                "m": p.m,
                "status": p.status.word(),
                "op": op,
                "signature": sig,
                "calls_per_step": r.shapes[p.shape].calls_per_step,
                "flops": p.key.flops(),
                "cost": p.cost,
                "reasons": p.whys.iter().map(|w| json!({"reason": w.reason.label(), "detail": w.detail})).collect::<Vec<_>>(),
            });
            if let Some(t) = p.near {
                v["near_row"] = json!(t);
            }
            match &p.status {
                Status::Tuned(id) => v["solution"] = json!(id),
                Status::Unservable(why) => v["why"] = json!(why),
                _ => {}
            }
            v
        })
        .collect();
    json!({
        "source": r.source,
        "profile": r.profile,
        "serving": r.serving.describe(),
        "summary": {
            "problems": r.problems.len(),
            "tuned": r.count("tuned"),
            "default": r.count("Default"),
            "missing": r.count("missing"),
            "unservable": r.count("unservable"),
            "covered_cost_share": r.covered_cost_share(),
            "unused_profile_rows": r.unused_rows.len(),
            "near_window": r.near_window,
            "missing_with_near_row": r.problems.iter().filter(|p| p.near.is_some()).count(),
        },
        "shapes": shapes,
        "gap_groups": gap_groups(r).iter().map(|g| json!({
            "shape": r.shapes[g.shape].label(),
            "group": g.label,
            "m": g.problems.iter().map(|p| p.m).collect::<Vec<_>>(),
            "statuses": g.problems.iter().map(|p| p.status.word()).collect::<Vec<_>>(),
            "cost": g.cost,
        })).collect::<Vec<_>>(),
        "problems": problems,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use tunedblas_core::coverage::{analyse, shapes_from_profile, ProfileIndex, Reason};
    use tunedblas_core::tunableop;

    use super::*;
    use crate::serving::tests::serving;

    const PROFILE: &str = "Validator,PT_VERSION,2.7.0\n\
        GemmTunableOp_Half_TN,tn_512_1024_2560_ld_2560_2560_512,Gemm_Rocblas_-1086327686,0.14\n\
        GemmTunableOp_Half_TN,tn_512_2048_2560_ld_2560_2560_512,Default,0.25\n\
        GemmTunableOp_Half_TN,tn_512_256_2560_ld_2560_2560_512,Gemm_Hipblaslt_77,0.05\n\
        GemmTunableOp_Half_TN,tn_4096_*_2560_ld_2560_2560_4096,Gemm_Rocblas_-1086327700,0.1\n\
        GemmTunableOp_Half_TN,tn_336_800_10240_ld_10240_10240_336,Gemm_Rocblas_-5,0.4\n";

    #[test]
    fn analysis_ranks_gaps_by_cost_and_lists_unused_rows() {
        let f = tunableop::parse(PROFILE);
        let ix = ProfileIndex::new(&f);
        let sv = serving(
            "--block-size 1024 --max-num-batched-tokens 2048 --max-num-seqs 4 --mix-decodes 0",
        );
        let r = analyse("test", shapes_from_profile(&f), &sv, Some(("p", &ix)), 32);
        let costs: Vec<f64> = r.problems.iter().map(|p| p.cost).collect();
        assert!(costs.windows(2).all(|w| w[0] >= w[1]));
        let gap = r.gaps().next().unwrap();
        assert_eq!(
            (gap.key.m, gap.m),
            (336, 2048),
            "the biggest missing problem first"
        );
        assert_eq!(r.unused_rows.len(), 1, "M=800 is not predicted");
        let out = text(&r, 5);
        assert!(out.contains("M = 800"), "{out}");
        let j = json(&r);
        assert_eq!(
            j["summary"]["problems"].as_u64().unwrap() as usize,
            r.problems.len()
        );
        assert_eq!(j["problems"][0]["m"], 2048);
    }

    fn fixture(rel: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/vllm-rdna")
            .join(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The case: the published 70-row gfx1030 profile under the seed's live
    /// configuration (block size 1024, 2048 batched tokens, dynamic prefill on).
    #[test]
    fn the_seed_live_configuration_on_the_70_row_profile() {
        let f = tunableop::parse(&fixture("rocblas-c27e2252cc7a/tunableop_results0.csv"));
        assert_eq!(f.rows.len(), 70);
        let ix = ProfileIndex::new(&f);
        let shapes = shapes_from_profile(&f);
        let pairs: BTreeSet<(i64, i64)> = shapes.iter().map(|s| (s.family.m, s.family.k)).collect();
        assert_eq!(
            pairs,
            BTreeSet::from([
                (3584, 2560),
                (10240, 2560),
                (512, 2560),
                (2560, 1536),
                (4096, 2560),
                (10240, 320),
                (336, 10240)
            ])
        );
        let live = serving("--block-size 1024 --max-num-batched-tokens 2048 --dynamic-prefill");
        let r = analyse("fixture", shapes.clone(), &live, Some(("c27e", &ix)), 32);
        let at = |m: i64| -> Vec<&Problem> { r.problems.iter().filter(|p| p.m == m).collect() };
        for m in [256, 512] {
            let ps = at(m);
            assert_eq!(ps.len(), 7, "M={m}");
            assert!(ps.iter().all(|p| p.status == Status::Missing), "M={m}");
            assert!(ps
                .iter()
                .all(|p| p.whys.iter().any(|w| w.reason == Reason::DynamicRung)));
        }
        let defaults = |m: i64| -> BTreeSet<(i64, i64)> {
            at(m)
                .iter()
                .filter(|p| p.status == Status::Default)
                .map(|p| (p.key.m, p.key.k))
                .collect()
        };
        for m in [1024, 2048] {
            assert!(at(m).iter().all(|p| p.status.is_covered()), "M={m}");
        }
        assert_eq!(defaults(1024), BTreeSet::from([(4096, 2560), (10240, 320)]));
        assert_eq!(
            defaults(2048),
            BTreeSet::from([(10240, 2560), (10240, 320)])
        );
        // Near serving would try the 1024 rows for 1024 + d on the five tuned layers, and
        // nothing for 512 + d (no row at 512 to take).
        let near_at = |m: i64| at(m).iter().filter(|p| p.near == Some(1024)).count();
        assert_eq!(near_at(1030), 5);
        assert!(at(520).iter().all(|p| p.near.is_none()));
        // The chunk-plus-decode mixes of the 512 chunk run eagerly and are missing too.
        assert!(at(533)
            .iter()
            .all(|p| p.status == Status::Missing && p.whys[0].reason == Reason::ChunkDecodeMix));

        let out = text(&r, 10);
        assert!(
            out.contains("missing for all 7 shapes: M = 256, 512"),
            "{out}"
        );
        assert!(
            out.contains("present at: M = 1024 (5 tuned, 2 Default); 2048 (5 tuned, 2 Default)"),
            "{out}"
        );
        assert!(out.contains("M = 1024 (dynamic rung, dynamic shared cap, prefill chunk): 5 tuned, 2 Default; Default: 4096x2560, 10240x320"), "{out}");

        // The seed's checker model (block multiples only) cannot see the 256/512 family.
        let blocks_only = serving("--block-size 1024 --max-num-batched-tokens 2048");
        let r0 = analyse("fixture", shapes, &blocks_only, Some(("c27e", &ix)), 32);
        assert!(r0
            .problems
            .iter()
            .filter(|p| p.m == 256 || p.m == 512)
            .all(|p| p.whys.iter().all(|w| w.reason == Reason::DecodeCapture)));
        assert!(!text(&r0, 10).contains("missing for all"));
    }
}
