//! `tunedblas misses`'s answer, as text for people and JSON for tools.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};
use tunedblas_core::misses::{Group, GroupKind, Miss};
use tunedblas_core::tunableop;

/// What was read and what it adds up to.
pub struct Summary<'a> {
    /// The folders and files read, for the header.
    pub inputs: String,
    /// Miss files read.
    pub files: usize,
    pub processes: BTreeSet<&'a str>,
    pub ranks: BTreeSet<i32>,
    pub all: &'a [Miss],
    /// Lines that could not be read.
    pub problems: &'a [String],
    /// Ranked, most expensive first.
    pub groups: &'a [Group],
}

impl Summary<'_> {
    fn calls(&self) -> u64 {
        self.all.iter().fold(0u64, |t, m| t.saturating_add(m.calls))
    }
}

/// `2 processes, rank 0,1`.
fn seen_in(processes: usize, ranks: &BTreeSet<i32>) -> String {
    let ranks: Vec<String> = ranks.iter().map(i32::to_string).collect();
    format!(
        "{processes} process{}{}",
        if processes == 1 { "" } else { "es" },
        if ranks.is_empty() {
            String::new()
        } else {
            format!(", rank {}", ranks.join(","))
        }
    )
}

/// The header, then the `top` groups worth tuning first; `out` is where `--out` wrote
/// the shapes.
pub fn text(s: &Summary, top: usize, out: Option<&Path>) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "misses in {}: {} shapes, {} calls, from {} ({} files)",
        s.inputs,
        s.all.len(),
        s.calls(),
        seen_in(s.processes.len(), &s.ranks),
        s.files
    );
    let lower_bounds = s.all.iter().filter(|m| !m.counted).count();
    if lower_bounds > 0 {
        let _ = writeln!(
            o,
            "{lower_bounds} shapes were logged by a process that never wrote its counts (killed?): their calls are lower bounds, marked +"
        );
    }
    for p in s.problems.iter().take(10) {
        let _ = writeln!(o, "skipped: {p}");
    }
    if s.groups.is_empty() {
        let _ = writeln!(o, "no misses recorded");
        return o;
    }
    group_table(&mut o, s, top);
    if let Some(out) = out {
        let _ = writeln!(
            o,
            "\n{} shapes written to {} in this order (PyTorch untuned-file lines)",
            s.all.len(),
            out.display()
        );
    }
    o
}

fn group_table(o: &mut String, s: &Summary, top: usize) {
    let _ = writeln!(
        o,
        "\ngaps worth tuning first ({} of {} groups; calls x FLOPs summed over each group):",
        top.min(s.groups.len()),
        s.groups.len()
    );
    let _ = writeln!(
        o,
        "  {:<4} {:<22} {:<22} {:>6} {:>10} {:>12}  seen in",
        "rank", "shape", "tokens (M)", "shapes", "calls", "FLOP x calls"
    );
    for (i, g) in s.groups.iter().take(top).enumerate() {
        let members: Vec<&Miss> = g.members.iter().map(|&i| &s.all[i]).collect();
        let lower = if members.iter().any(|m| !m.counted) {
            "+"
        } else {
            ""
        };
        let procs: BTreeSet<&String> = members.iter().flat_map(|m| m.processes.iter()).collect();
        let rk: BTreeSet<i32> = members
            .iter()
            .flat_map(|m| m.ranks.iter().copied())
            .collect();
        let mut tokens = g.tokens(s.all);
        if tokens.len() > 22 {
            tokens = format!("{}...", &tokens[..19]);
        }
        let _ = writeln!(
            o,
            "  {:<4} {:<22} {:<22} {:>6} {:>10} {:>12}  {}",
            i + 1,
            g.label(),
            tokens,
            members.len(),
            format!("{}{lower}", g.calls),
            format!("{:.3e}", g.cost),
            seen_in(procs.len(), &rk)
        );
    }
}

/// Everything, groups with their shapes.
pub fn json(s: &Summary) -> Value {
    let groups: Vec<Value> = s.groups.iter().map(|g| group_json(s.all, g)).collect();
    json!({
        "inputs": s.inputs,
        "files": s.files,
        "processes": s.processes.len(),
        "ranks": s.ranks.iter().collect::<Vec<_>>(),
        "shapes": s.all.len(),
        "calls": s.calls(),
        "problems": s.problems,
        "groups": groups,
    })
}

fn group_json(all: &[Miss], g: &Group) -> Value {
    let kind = match g.kind {
        GroupKind::ChunkDecode { base } => json!({"chunk_decode": base}),
        GroupKind::Decode => json!("decode"),
        GroupKind::Other => json!("other"),
    };
    let shapes: Vec<Value> = g
        .members
        .iter()
        .map(|&i| {
            let m = &all[i];
            let (op, sig) = tunableop::op_and_signature(&m.key);
            json!({
                "op": op, "signature": sig, "m": m.key.n, "calls": m.calls,
                "calls_are_lower_bound": !m.counted,
                "processes": m.processes.len(),
                "ranks": m.ranks.iter().collect::<Vec<_>>(),
                "cost": m.cost(),
            })
        })
        .collect();
    json!({
        "family": g.label(),
        "kind": kind,
        "tokens": g.tokens(all),
        "calls": g.calls,
        "cost": g.cost,
        "shapes": shapes,
    })
}
