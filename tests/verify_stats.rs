//! `tunedblas verify --stats` (issue 26): a finished run checked by the `TUNEDBLAS_STATS`
//! files it wrote, for every backend. There was none for rocBLAS, and `lt verify --stats`
//! counted shapes served near as missed.

mod common;

use common::faults::*;
use common::*;
use serde_json::Value;

/// The profile of the counters test: a served row, a row whose layer serves a nearby token
/// count (TUNEDBLAS_NEAR=8), and the workload's stats file.
fn run_with_stats(dir: &std::path::Path, extra: &[&str]) -> std::path::PathBuf {
    let (served, near_row, near) = ("ex:TN:h:64:24:40", "ex:TN:h:64:24:48", "ex:TN:h:64:28:48");
    let near_sol = untuned_by_heuristic(near)
        .into_iter()
        .find(|s| untuned_by_heuristic(near_row).contains(s))
        .expect("a solution for both");
    Profile::v4(dir)
        .tuned(served, tuned(served))
        .tuned(near_row, near_sol)
        .write();
    let stats = dir.join("stats.json");
    let mut steps = vec![served, near_row, "ex:TN:h:64:28:48:3"];
    steps.extend(extra);
    let mut cmd = fault_cmd(dir, true, &steps);
    cmd.env("TUNEDBLAS_NEAR", "8")
        .env("TUNEDBLAS_STATS", &stats);
    let out = run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    stats
}

fn verify(dir: &std::path::Path, stats: &std::path::Path) -> std::process::Output {
    tunedblas_cmd(dir, &["verify", "--stats", stats.to_str().unwrap()])
        .output()
        .unwrap()
}

#[test]
fn verify_stats_counts_calls_served_near_as_served() {
    let dir = scratch("verify-stats-near");
    let stats = run_with_stats(&dir, &[]);
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(
        (&s["near"], &s["missed_calls"]),
        (&3.into(), &0.into()),
        "{s}"
    );
    let out = verify(&dir, &stats);
    let shown = ok(&out);
    assert_has(&shown, "(rocblas): 5 calls: 2 served, 0 default, 3 near (1 shapes), 0 missed (0 shapes), 0 passed through, 0 fallbacks; hit rate 100.0%; 2 of 2 rows hit -> OK");
    assert_has(&shown, "note: 3 calls of 1 shapes were served a nearby");
    // The JSON says the same, per backend.
    let j: Value = serde_json::from_str(&ok(&tunedblas_cmd(
        &dir,
        &["verify", "--stats", stats.to_str().unwrap(), "--json"],
    )
    .output()
    .unwrap()))
    .unwrap();
    assert_eq!(j[0]["backend"], "rocblas", "{j}");
    assert_eq!(j[0]["ok"], true, "{j}");
}

#[test]
fn verify_stats_fails_on_a_missed_call_in_any_backend() {
    let dir = scratch("verify-stats-missed");
    let stats = run_with_stats(&dir, &["ex:TN:h:8:8:8:2"]);
    let out = verify(&dir, &stats);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let shown = text(&out.stdout);
    assert_has(
        &shown,
        "2 calls missed (1 shapes with no row, not served near)",
    );
    assert_has(&text(&out.stderr), "not verified");

    // rocBLAS clean, hipBLASLt beside it (the file the interposer writes there when both
    // ran) with a missed call and a row never hit: named by its backend.
    let dir = scratch("verify-stats-lt");
    let stats = run_with_stats(&dir, &[]);
    let lt = serde_json::json!({
        "library": "hipblaslt", "calls": 5, "served": 4, "default": 0, "missed_calls": 1,
        "missed_shapes": 1, "hit_rate": 0.8, "over_capacity_calls": 0, "passed_through": 0,
        "fallbacks": 0, "rows": 2, "rows_hit": 1,
        "rows_not_hit": ["GemmTunableOp_BFloat16_TN,tn_64_8_64_ld_64_64_64"],
        "rows_quarantined": [],
    });
    std::fs::write(
        format!("{}.hipblaslt.json", stats.display()),
        lt.to_string(),
    )
    .unwrap();
    let out = verify(&dir, &stats);
    assert_eq!(out.status.code(), Some(1));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("(rocblas): ") && shown.contains("-> OK"),
        "{shown}"
    );
    assert_has(&shown, "stats.json.hipblaslt.json (hipblaslt): 5 calls: 4 served, 0 default, 0 near (0 shapes), 1 missed (1 shapes), 0 passed through, 0 fallbacks; hit rate 80.0%; 1 of 2 rows hit -> FAILED");
    assert_has(
        &shown,
        "1 of 2 rows were never hit: GemmTunableOp_BFloat16_TN",
    );
}

/// The processes of one server share one `TUNEDBLAS_STATS` (vLLM spawns its workers; they
/// are not fork children): each replaced the last one's file, so a worker's missed calls
/// vanished when a clean worker left after it, and `verify --stats` said OK without a word
/// (an outside tester's finding). The process that replaces another's file written while
/// it ran now says so, and `%p` in the path gives each process its own file, which
/// `verify --stats` takes all of.
#[test]
fn workers_sharing_a_stats_path_are_warned_and_percent_p_keeps_each_ones() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = scratch("verify-stats-workers");
    let (served, near_row) = ("ex:TN:h:64:24:40", "ex:TN:h:64:24:48");
    Profile::v4(&dir)
        .tuned(served, tuned(served))
        .tuned(near_row, tuned(near_row))
        .write();
    // Two workers of one run, both started before either leaves: the one that misses a
    // shape leaves first, the clean one last (the order that hid the miss).
    let run = |stats: &std::path::Path, tag: &str| {
        let worker = |steps: &[&str], go: &str| {
            let go = dir.join(format!("{tag}-{go}"));
            let wait = format!("@wait:{}", go.display());
            let mut all = steps.to_vec();
            all.push(&wait);
            let mut cmd = fault_cmd(&dir, true, &all);
            cmd.env("TUNEDBLAS_STATS", stats)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            while !line.contains("waiting") {
                line.clear();
                assert!(
                    out.read_line(&mut line).unwrap() > 0,
                    "the worker left early"
                );
            }
            (child, go)
        };
        let (missing, go_first) = worker(&[served, "ex:TN:h:8:8:8:2"], "first");
        let (clean, go_last) = worker(&[served, near_row], "last");
        std::fs::write(&go_first, "").unwrap();
        assert!(missing.wait_with_output().unwrap().status.success());
        std::fs::write(&go_last, "").unwrap();
        let out = clean.wait_with_output().unwrap();
        assert!(out.status.success());
        text(&out.stderr)
    };

    // One path: the clean worker's file replaces the other's, and it says so.
    let shared = dir.join("stats.json");
    let said = run(&shared, "shared");
    assert_has(&said, "holds another process's counters");
    assert_has(&said, "put %p in TUNEDBLAS_STATS for one file per process");

    // %p: a file each, all checked; the missing worker's misses fail the run.
    let each = dir.join("each-%p.json");
    run(&each, "each");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path().to_str().unwrap().to_string())
        .filter(|p| p.contains("/each-") && p.ends_with(".json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let mut args = vec!["verify", "--stats"];
    args.extend(files.iter().map(String::as_str));
    let out = tunedblas_cmd(&dir, &args).output().unwrap();
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert_has(
        &shown,
        "2 calls missed (1 shapes with no row, not served near)",
    );
    assert_eq!(
        shown.lines().filter(|l| l.starts_with("verify ")).count(),
        2,
        "{shown}"
    );
}
