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
    let mut cmd = lib_cmd(
        &dir,
        "report",
        &lib,
        &[
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
        (&1.into(), &4.into(), &8.into(), &3.into()),
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
    the_tune_next_command_runs_as_written(&dir, next);
}

/// Issue 26: "tune next" lists each shape by the report's labels (N, K, the token count M)
/// and prints `tunedblas tune ... --shape TYPE:AB:m:n:k`. Run as printed (its words are the
/// shell's: no path here holds a space), with TUNEDBLAS_PROFILE_DIR naming another store, it
/// tunes exactly the listed shapes, N as rocBLAS's m and M as its n, into the profile the
/// report showed.
fn the_tune_next_command_runs_as_written(dir: &std::path::Path, next: &Value) {
    let command = next["command"].as_str().expect("a tune next command");
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[..2], ["tunedblas", "tune"], "{command}");
    let decoy = dir.join("decoy-store");
    let mut cmd = std::process::Command::new(tunedblas());
    cmd.args(&words[1..]);
    host_env(&mut cmd, dir, false);
    cmd.env("TUNEDBLAS_PROFILE_DIR", &decoy)
        .env_remove("REFBLAS_TRACE");
    let out = ok(&run(cmd));
    assert!(!decoy.exists(), "tuned into another store: {out}");
    // The listed shapes, each from its label: "TN f16 N=<n> K=<k>[ B=<b>]" at M.
    let mut listed: Vec<String> = next["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let label = item["label"].as_str().unwrap();
            let field = |f: &str| {
                label
                    .split(' ')
                    .find_map(|w| w.strip_prefix(f))
                    .map(|v| v.parse::<i64>().unwrap())
            };
            let (n, k, m) = (
                field("N=").unwrap(),
                field("K=").unwrap(),
                item["m"].as_i64().unwrap(),
            );
            let spec = match field("B=") {
                Some(3) => format!("sb:TN:h:{n}:{m}:{k}"),
                Some(b) => panic!("no spec form for batch {b}"),
                None => format!("ex:TN:h:{n}:{m}:{k}"),
            };
            let (op, sig) = tunedblas_core::tunableop::op_and_signature(&spec_key(&spec));
            format!("{op},{sig}")
        })
        .collect();
    listed.sort();
    // What the campaign measured, from the profile's provenance.
    let store = dir.join("profiles");
    let folder = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("provenance.json").is_file())
        .expect("the profile's folder");
    let prov: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("provenance.json")).unwrap())
            .unwrap();
    let last = prov["campaigns"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let mut tuned: Vec<String> = last["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["shape"].as_str().unwrap().to_string())
        .collect();
    tuned.sort();
    assert_eq!(tuned, listed, "{command}\n{out}");
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

/// `--coverage`: the problems a serving configuration issues are cells marked predicted,
/// each at the token counts coverage gives its layer and nowhere else.
#[test]
fn predicted_cells_are_the_problems_coverage_lists() {
    let dir = scratch("report-coverage");
    Profile::v4(&dir).tuned("ex:TN:h:64:24:40", 1).write();
    let shapes = dir.join("shapes.txt");
    std::fs::write(&shapes, "64,40\n96,32\n").unwrap();
    let store = dir.join("profiles");
    let cov = ok(&run(tunedblas_cmd(
        &dir,
        &[
            "coverage",
            "--shapes",
            shapes.to_str().unwrap(),
            "--profiles",
            store.to_str().unwrap(),
            "--profile",
            "ref-v4",
            "--max-num-batched-tokens",
            "64",
            "--max-num-seqs",
            "4",
            "--enforce-eager",
            "--json",
        ],
    )));
    let cov_file = dir.join("coverage.json");
    std::fs::write(&cov_file, &cov).unwrap();
    let c: Value = serde_json::from_str(&cov).unwrap();
    let mut expected: Vec<(i64, i64, i64)> = c["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let n = |f: &str| p[f].as_i64().unwrap();
            (n("n"), n("k"), n("m"))
        })
        .collect();
    assert!(expected.len() > 2, "{cov}");
    let lib = artifacts().lib4();
    let j: Value = serde_json::from_str(&ok(&run(lib_cmd(
        &dir,
        "report",
        &lib,
        &[
            "--profiles",
            store.to_str().unwrap(),
            "--coverage",
            cov_file.to_str().unwrap(),
            "--out",
            dir.join("report.html").to_str().unwrap(),
            "--json",
        ],
    ))))
    .unwrap();
    let mut predicted = Vec::new();
    for row in j["report"]["rows"].as_array().unwrap() {
        let label = row["label"].as_str().unwrap();
        let (n, k) = if label.contains("N=64 K=40") {
            (64, 40)
        } else {
            assert_has(label, "N=96 K=32");
            (96, 32)
        };
        for cell in row["cells"].as_array().unwrap() {
            if cell["predicted"] == true {
                predicted.push((n, k, cell["m"].as_i64().unwrap()));
                assert_ne!(cell["status"], "missed", "{cell}");
            } else {
                assert_eq!(
                    (n, k, cell["m"].as_i64()),
                    (64, 40, Some(24)),
                    "only the profile row is not predicted"
                );
            }
        }
    }
    expected.sort_unstable();
    expected.dedup();
    predicted.sort_unstable();
    assert_eq!(predicted, expected);
}
