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
/// vanished when a clean worker left after it, and `verify --stats` said OK (an outside
/// tester's finding). The first to leave keeps the name, the others write beside it
/// (`<path>.<pid>`), and `verify --stats` checks every one: each process's misses are its
/// own failure, a row is unhit only if no process hit it. A file from an earlier run is
/// replaced, not kept beside.
#[test]
fn verify_stats_checks_every_process_of_a_run_and_replaces_an_earlier_runs_file() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = scratch("verify-stats-workers");
    let (served, near_row) = ("ex:TN:h:64:24:40", "ex:TN:h:64:24:48");
    Profile::v4(&dir)
        .tuned(served, tuned(served))
        .tuned(near_row, tuned(near_row))
        .write();
    let stats = dir.join("stats.json");
    // An earlier run's file, an hour old, that says nothing of this run.
    std::fs::write(&stats, "{\"earlier\": true}\n").unwrap();
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&stats)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    // Two workers of one run, both started before either leaves: the one that misses a
    // shape leaves first, the clean one last (the order that hid the miss).
    let worker = |steps: &[&str], go: &str| {
        let go = dir.join(go);
        let wait = format!("@wait:{}", go.display());
        let mut all = steps.to_vec();
        all.push(&wait);
        let mut cmd = fault_cmd(&dir, true, &all);
        cmd.env("TUNEDBLAS_STATS", &stats)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
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
    let (mut missing, go_first) = worker(&[served, "ex:TN:h:8:8:8:2"], "go-first");
    let (mut clean, go_last) = worker(&[served, near_row], "go-last");
    std::fs::write(&go_first, "").unwrap();
    assert!(missing.wait().unwrap().success());
    std::fs::write(&go_last, "").unwrap();
    assert!(clean.wait().unwrap().success());

    let out = verify(&dir, &stats);
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert_has(
        &shown,
        "2 calls missed (1 shapes with no row, not served near)",
    );
    let checked = shown.lines().filter(|l| l.starts_with("verify ")).count();
    assert_eq!(checked, 2, "both workers' files: {shown}");
    assert!(!shown.contains("earlier"), "{shown}");
    // The missing worker never made the second row's shape; the clean one served it: no
    // row went unhit in the run.
    assert!(
        !shown.contains("never hit") && !shown.contains("hit by none"),
        "{shown}"
    );
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(
        kept["missed_calls"], 2,
        "the first to leave kept the name: {kept}"
    );
}
