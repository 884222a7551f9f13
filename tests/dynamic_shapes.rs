//! End-to-end: shapes whose token count changes from step to step. PyTorch's `*` rows, and
//! near-shape serving (a tuned row of the same layer at a nearby token count, validated for
//! the exact problem first), under LD_PRELOAD against refblas.

mod common;

use common::*;

/// The gemm host under the preload with near-shape serving at its default (unless `env`
/// sets it), checked to exit 0; returns the output and its stderr.
fn host4_env(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> (std::process::Output, String) {
    let mut cmd = host4_cmd(dir, true, args);
    cmd.env_remove("TUNEDBLAS_NEAR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    (out, stderr)
}

/// [`host4_env`] with a near-shape window of 8 tokens and the stats file; returns the
/// output, its stderr and the stats.
fn near8(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> (std::process::Output, String, serde_json::Value) {
    let stats = dir.join("stats.json");
    let mut all = vec![
        ("TUNEDBLAS_NEAR", "8"),
        ("TUNEDBLAS_STATS", stats.to_str().unwrap()),
    ];
    all.extend_from_slice(env);
    let (out, stderr) = host4_env(dir, &all, args);
    (out, stderr, stats_of(&stats))
}

/// The host's output without the interposer, in a fresh folder `name`.
fn plain(name: &str, args: &[&str]) -> std::process::Output {
    run(host4_cmd(&scratch(name), false, args))
}

/// A fresh folder `name` whose profile has a row at `tuned` with a solution refblas also
/// offers (not as its heuristic) at `missed`; returns the folder and the solution.
fn layer_row(name: &str, tuned: &str, missed: &str) -> (std::path::PathBuf, i32) {
    let dir = scratch(name);
    let sol = common_non_heuristic(&[tuned, missed]);
    Profile::v4(&dir).tuned(tuned, sol).write();
    (dir, sol)
}

/// Near-shape serving is on by default (window 32, BENCHMARKS.md): with no TUNEDBLAS_NEAR,
/// 28 tokens take the 24-token row of the same layer and 60 (36 away) does not.
#[test]
fn near_serving_is_on_by_default_within_32_tokens() {
    let (tuned, missed) = ("ex:TN:h:64:24:40", "ex:TN:h:64:28:40");
    let (dir, sol) = layer_row("near-default-on", tuned, missed);
    let (_, stderr) = host4_env(&dir, &[], &[missed, "ex:TN:h:64:60:40"]);
    assert_has(&stderr, "2 calls: 0 served, 0 default, 1 missed (1 shapes), 0 passed through, 0 fallbacks, 1 near (1 shapes)");
    let t = trace(&dir);
    assert_eq!(t[0]["solution"], sol.to_string());
    assert_eq!(t[1]["heuristic"], "1");
}

/// A solution refblas offers for every spec and that is not the heuristic's for any.
fn common_non_heuristic(specs: &[&str]) -> i32 {
    let host = &artifacts().host4;
    let mut sols = non_heuristic_solutions(host, specs[0]);
    for s in &specs[1..] {
        let other = solutions(host, s);
        let h = heuristic_solution(host, s);
        sols.retain(|x| other.contains(x) && *x != h);
    }
    *sols.first().expect("a shared non-heuristic solution")
}

#[test]
fn wildcard_rows_serve_every_token_count_of_their_layer() {
    let dir = scratch("wildcard");
    let (a, b, exact) = ("ex:TN:h:64:24:40", "ex:TN:h:64:28:40", "ex:TN:h:64:32:40");
    let sol = common_non_heuristic(&[a, b, exact]);
    let others: Vec<i32> = solutions(&artifacts().host4, exact)
        .into_iter()
        .filter(|s| *s != sol)
        .collect();
    let exact_sol = others[0];
    // tn_64_*_40: every token count of the 64x40 layer; an exact row for 32 wins over it;
    // a Default pattern for another layer passes its calls through, counted as Default.
    let rows = [
        format!("GemmTunableOp_Half_TN,tn_64_*_40_ld_40_40_64,Gemm_Rocblas_{sol},0.01"),
        row(exact, &format!("Gemm_Rocblas_{exact_sol}")),
        "GemmTunableOp_Half_TN,tn_48_*_16_ld_16_16_48,Default,0.01".to_string(),
    ];
    Profile::v4(&dir).lines(&rows).write();
    let stats = dir.join("stats.json");
    let (_, stderr) = host4_env(
        &dir,
        &[("TUNEDBLAS_STATS", stats.to_str().unwrap())],
        &[a, b, exact, "ex:TN:h:48:8:16", "ex:TN:h:64:24:41"],
    );
    assert_has(&stderr, "(3 rows, rank 0)");
    assert_has(&stderr, "5 calls: 3 served, 1 default, 1 missed (1 shapes)");
    let t = trace(&dir);
    let solution_of = |n: &str, k: &str| {
        t.iter()
            .find(|l| l["n"] == n && l["k"] == k)
            .map(|l| (l["solution"].clone(), l["heuristic"].clone()))
            .unwrap()
    };
    assert_eq!(solution_of("24", "40"), (sol.to_string(), "0".into()));
    assert_eq!(solution_of("28", "40"), (sol.to_string(), "0".into()));
    assert_eq!(solution_of("32", "40"), (exact_sol.to_string(), "0".into()));
    assert_eq!(
        solution_of("8", "16").1,
        "1",
        "a Default pattern passes through"
    );
    assert_eq!(solution_of("24", "41").1, "1", "another layer is no match");
    // Every shape without a row of its own is recorded, to be tuned (PyTorch records a
    // shape a `*` row served as untuned); only the unmatched shape's calls are missed.
    let mut recorded = misses(&dir).0;
    recorded.sort();
    let mut want: Vec<String> = [a, b, "ex:TN:h:48:8:16", "ex:TN:h:64:24:41"]
        .iter()
        .map(|s| miss_line(s))
        .collect();
    want.sort();
    assert_eq!(recorded, want);
    let s = stats_of(&stats);
    assert_eq!(s["missed_calls"], 1, "{s}");
    assert_eq!(s["missed_shapes"], 1, "{s}");
    assert_eq!(s["wildcard_rows"], 2);
    assert_eq!(s["wildcard_rows_hit"], 2);
    assert_eq!(s["rows"], 1, "verify's replay counts concrete rows only");
    assert_eq!(s["rows_hit"], 1);
}

#[test]
fn a_failing_wildcard_row_is_quarantined_and_the_call_still_right() {
    let dir = scratch("wildcard-bad");
    let rows = ["GemmTunableOp_Half_TN,tn_64_*_40_ld_40_40_64,Gemm_Rocblas_77777,0.01".to_string()];
    Profile::v4(&dir).lines(&rows).write();
    let args = ["ex:TN:h:64:24:40:2", "ex:TN:h:64:28:40"];
    let (out, stderr) = host4_env(&dir, &[], &args);
    assert_eq!(stderr.matches("quarantined").count(), 1, "{stderr}");
    assert_has(
        &stderr,
        "3 calls: 0 served, 0 default, 0 missed (0 shapes), 2 passed through, 1 fallbacks",
    );
    assert_eq!(results(&out), results(&plain("wildcard-bad-plain", &args)));
}

/// Solutions refblas offers at `a` but not at `b` (kernels with size constraints).
fn only_at(a: &str, b: &str) -> Vec<i32> {
    let at_b = solutions(&artifacts().host4, b);
    solutions(&artifacts().host4, a)
        .into_iter()
        .filter(|s| !at_b.contains(s))
        .collect()
}

fn stats_of(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn near_serving_uses_the_validated_solution_of_the_nearest_token_count() {
    // The layer 64x40 has a row at 24 tokens; 28 tokens missed (a chunk + decode step).
    let (tuned, missed) = ("ex:TN:h:64:24:40", "ex:TN:h:64:28:40");
    let (dir, sol) = layer_row("near", tuned, missed);
    let (out, stderr, s) = near8(&dir, &[], &[&format!("{missed}:3"), "ex:TN:h:64:33:40"]);
    // 3 calls at 28 served near; 33 is 9 tokens away, outside the window: a plain miss.
    assert_has(&stderr, "4 calls: 0 served, 0 default, 1 missed (1 shapes), 0 passed through, 0 fallbacks, 3 near (1 shapes); hit rate 75.0%");
    let t = trace(&dir);
    let at_28: Vec<_> = t.iter().filter(|l| l["n"] == "28").collect();
    assert_eq!(at_28.len(), 3);
    assert!(at_28
        .iter()
        .all(|l| l["solution"] == sol.to_string() && l["heuristic"] == "0"));
    assert_eq!(t.iter().find(|l| l["n"] == "33").unwrap()["heuristic"], "1");
    // The exact shape is still recorded as a miss, with every call counted.
    let (lines, counts) = misses(&dir);
    assert!(lines.contains(&miss_line(missed)), "{lines:?}");
    assert!(counts.contains(&(miss_line(missed), 3)), "{counts:?}");
    assert_eq!(s["near"], 3);
    assert_eq!(s["near_keys_served"], 1, "validated once for the key");
    assert_eq!(s["near_keys_refused"], 0);
    // The result is what that solution computes for the exact problem when asked directly.
    let direct = plain(
        "near-direct",
        &["--solution", &sol.to_string(), &format!("{missed}:3")],
    );
    assert_eq!(results(&out)[0], results(&direct)[0]);

    // Off: TUNEDBLAS_NEAR=0 serves nothing near.
    let off = scratch("near-off");
    Profile::v4(&off).tuned(tuned, sol).write();
    let (_, stderr) = host4_env(&off, &[("TUNEDBLAS_NEAR", "0")], &[missed]);
    assert_has(&stderr, "1 calls: 0 served, 0 default, 1 missed (1 shapes)");
    assert_eq!(trace(&off)[0]["heuristic"], "1");
}

#[test]
fn a_near_solution_whose_call_fails_is_refused_for_good() {
    // Validation passes, then the call itself fails (a kernel that cannot be launched):
    // the caller's own call is made, and every later call of the shape is the heuristic's
    // (the refusal must reach the verdict the miss set keeps for repeated misses).
    let (tuned, missed) = ("ex:TN:h:64:24:40", "ex:TN:h:64:28:40");
    let (dir, sol) = layer_row("near-call-fails", tuned, missed);
    let fail = sol.to_string();
    let (_, stderr, s) = near8(
        &dir,
        &[("REFBLAS_FAIL_SOLUTIONS", &fail)],
        &[&format!("{missed}:5")],
    );
    assert_has(&stderr, "5 calls: 0 served, 0 default, 5 missed (1 shapes), 0 passed through, 0 fallbacks, 0 near (0 shapes)");
    assert_eq!(s["near_keys_refused"], 1);
    assert_eq!(s["near_keys_served"], 0);
    assert_eq!(misses(&dir).1, vec![(miss_line(missed), 5)]);
    assert!(trace(&dir).iter().all(|l| l["heuristic"] == "1"));
}

#[test]
fn near_serving_is_refused_when_validation_fails() {
    let dir = scratch("near-refused");
    // A solution that solves 24 tokens but not 25 (refblas's 4x4 register tiles).
    let (tuned, missed) = ("ex:TN:h:64:24:40", "ex:TN:h:64:25:40");
    let sol = *only_at(tuned, missed)
        .first()
        .expect("refblas has a kernel that needs n % 4 == 0");
    Profile::v4(&dir).tuned(tuned, sol).write();
    let arg = format!("{missed}:3");
    let (out, stderr, s) = near8(&dir, &[], &[&arg]);
    // Refused at validation: no failed call, no fallback, nothing near; all heuristic.
    assert_has(
        &stderr,
        "3 calls: 0 served, 0 default, 3 missed (1 shapes), 0 passed through, 0 fallbacks, 0 near",
    );
    assert!(trace(&dir).iter().all(|l| l["heuristic"] == "1"));
    assert_eq!(
        s["near_keys_refused"], 1,
        "validated once, refused for good"
    );
    assert_eq!(s["near_keys_served"], 0);
    assert_eq!(misses(&dir).1, vec![(miss_line(missed), 3)]);
    assert_eq!(
        results(&out),
        results(&plain("near-refused-plain", &[&arg]))
    );
}

#[test]
fn a_default_row_nearby_means_the_heuristic() {
    let dir = scratch("near-default");
    let (tuned, missed) = ("ex:TN:h:64:24:40", "ex:TN:h:64:28:40");
    Profile::v4(&dir).row(tuned, "Default").write();
    let (_, stderr) = host4_env(&dir, &[("TUNEDBLAS_NEAR", "8")], &[missed]);
    assert_has(
        &stderr,
        "1 calls: 0 served, 0 default, 1 missed (1 shapes), 0 passed through, 0 fallbacks, 0 near",
    );
    assert_eq!(trace(&dir)[0]["heuristic"], "1");
}
