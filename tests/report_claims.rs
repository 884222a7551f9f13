//! End-to-end: `tunedblas report` against the interposer. A workload runs under the preload
//! with a profile, near serving on and `TUNEDBLAS_STATS`; the report over the same profile
//! and the miss logs it wrote must claim exactly what the interposer counted (issue 16).

mod common;

use serde_json::Value;

use common::*;

#[test]
fn the_reports_claims_are_the_interposers_counters() {
    let dir = scratch("report-claims");
    // The 64x40 layer has a tuned row at 24 tokens and a Default row at 64. 28 tokens take
    // the 24 row (near); 70 tokens are nearest the Default row, so the heuristic serves
    // them (the old report called them near). The 96x32 layer and the batched layer have
    // no rows.
    let (tuned, near) = ("ex:TN:h:64:24:40", "ex:TN:h:64:28:40");
    let sol = solution_for_both(tuned, near);
    Profile::v4(&dir)
        .tuned(tuned, sol)
        .row("ex:TN:h:64:64:40", "Default")
        .write();
    let workload = [
        "ex:TN:h:64:24:40:3",
        "ex:TN:h:64:28:40:4",
        "ex:TN:h:64:70:40:2",
        "ex:TN:h:96:16:32:5",
        "sb:TN:h:64:8:64:1",
    ];
    let stats = dir.join("stats.json");
    let mut cmd = host4_cmd(&dir, true, &workload);
    cmd.env("TUNEDBLAS_NEAR", "32")
        .env("TUNEDBLAS_STATS", &stats);
    let out = run(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();

    let lib = artifacts().lib4();
    let mut cmd = tunedblas_cmd(
        &dir,
        &[
            "report",
            "--lib",
            lib.to_str().unwrap(),
            "--profiles",
            dir.join("profiles").to_str().unwrap(),
            "--misses",
            dir.join("misses").to_str().unwrap(),
            "--out",
            dir.join("report.html").to_str().unwrap(),
            "--json",
        ],
    );
    cmd.env("TUNEDBLAS_NEAR", "32");
    let j: Value = serde_json::from_str(&ok(&run(cmd))).unwrap();
    let claims = &j["report"]["claims"];
    // What the interposer did, as the report says it.
    for (claim, counter) in [
        ("rows", "rows"),
        ("missed_shapes", "missed_shapes"),
        ("near_keys", "near_keys_served"),
        ("near_calls", "near"),
        ("missed_calls", "missed_calls"),
    ] {
        assert_eq!(
            claims[claim], s[counter],
            "the report's {claim} vs the interposer's {counter}:\nreport {claims}\nstats {s}"
        );
    }
    // The workload above, so neither side can agree by both being empty.
    assert_eq!(
        (
            &s["near_keys_served"],
            &s["near"],
            &s["missed_calls"],
            &s["missed_shapes"]
        ),
        (&1.into(), &4.into(), &8.into(), &4.into()),
        "{s}"
    );
    // The batched layer has one cell, at the M it ran.
    let rows = j["report"]["rows"].as_array().unwrap();
    let batched = rows
        .iter()
        .find(|r| r["label"].as_str().unwrap().contains("B=3"))
        .unwrap_or_else(|| panic!("a batched layer: {rows:?}"));
    let ms: Vec<&Value> = batched["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["m"])
        .collect();
    assert_eq!(ms, [&Value::from(8)], "{batched}");
    // Tune next leads with what the heuristic serves most, and gives the command.
    let next = &j["report"]["tune_next"];
    assert!(
        next["all_missed"]
            .as_str()
            .unwrap()
            .starts_with(&format!("tunedblas tune --lib {} ", lib.display())),
        "{next}"
    );
}

/// A solution refblas offers for both specs that is not the heuristic's for either, so
/// near serving it validates.
fn solution_for_both(a: &str, b: &str) -> i32 {
    let host = &artifacts().host4;
    let at_b = solutions(host, b);
    let hb = heuristic_solution(host, b);
    non_heuristic_solutions(host, a)
        .into_iter()
        .find(|s| at_b.contains(s) && *s != hb)
        .expect("a solution both specs take")
}
