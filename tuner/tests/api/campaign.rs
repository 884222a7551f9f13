//! A campaign's outcomes and its fresh-process confirmation (`tunedblas_tuner::campaign`)
//! through their public API.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::json;
use tunedblas_tuner::campaign::*;
use tunedblas_tuner::curate::{Decision, RowChoice, Rules, Verdict as Decided};
use tunedblas_tuner::pipeline::{Method, Tuned};

fn proposed(shape: &str, adopted: bool) -> Outcome {
    let (decision, row) = match adopted {
        true => (Decision::Adopt, RowChoice::Mine("Gemm_X_7".into())),
        false => (Decision::Default, RowChoice::Default),
    };
    let verdict = Decided {
        decision,
        row: Some(row),
        reason: "-5.0% vs heuristic".into(),
        heuristic_ms: 1.0,
        current_ms: None,
        new_ms: Some(0.95),
        delta: Some(-0.05),
        spread: 0.01,
    };
    let tuned: Tuned = serde_json::from_value(json!({
        "heuristic": "Default", "screen": {}, "dropped": [], "survivors": 1,
        "calls_per_sample": 8, "input_sets": 1, "leaders": [], "rounds": [],
        "confirm_delta": -0.05, "heuristic_spread": 0.01, "warm_up_ms": 200.0,
        "timing": "graph", "seconds": 1.0, "verdict": verdict,
    }))
    .unwrap();
    Outcome {
        shape: shape.into(),
        calls: 1,
        tuned: Some(tuned),
        ..Outcome::default()
    }
}

/// A shape whose figures were not all measured (a current row that failed: no rounds,
/// no spread) is finished all the same: its checkpoint line reads back, so a resumed
/// campaign does not tune it again (serde_json writes NaN and infinity as null).
#[test]
fn an_outcome_with_figures_not_measured_reads_back_from_its_checkpoint_line() {
    let mut o = proposed("a", false);
    let t = o.tuned.as_mut().unwrap();
    (t.heuristic_spread, t.warm_up_ms) = (f64::NAN, f64::NAN);
    (t.verdict.heuristic_ms, t.verdict.spread) = (f64::NAN, f64::INFINITY);
    let line = serde_json::to_string(&o).unwrap();
    let back: Outcome = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
    let t = back.tuned.unwrap();
    let figures = [
        t.heuristic_spread,
        t.warm_up_ms,
        t.verdict.heuristic_ms,
        t.verdict.spread,
    ];
    assert!(figures.iter().all(|x| x.is_nan()), "{figures:?}");
}

#[test]
fn only_what_the_fresh_process_confirms_by_the_margin_is_adopted() {
    let rules = Rules::default();
    let fresh: std::result::Result<Vec<Verdict>, String> = Ok(read_fresh(&json!({ "rows": [
        { "shape": "a", "solution": "Gemm_X_7", "delta": -0.04, "error": null },
        { "shape": "b", "solution": "Gemm_X_7", "delta": -0.01, "error": null },
        { "shape": "c", "solution": "Gemm_X_7", "delta": 0.02, "error": null },
        { "shape": "d", "solution": "Gemm_X_7", "delta": null, "error": "refused" },
        { "shape": "e", "solution": "Gemm_Other", "delta": -0.5, "error": null },
    ]})));
    assert_eq!(fresh.as_ref().unwrap().len(), 5);
    let mut o: Vec<Outcome> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|s| proposed(s, true))
        .collect();
    let withdrawn: Vec<bool> = o
        .iter_mut()
        .map(|x| apply_fresh(x, &fresh, &rules, None))
        .collect();
    assert_eq!(withdrawn, [false, true, true, true, true]);
    let t = o[0].tuned.as_ref().unwrap();
    assert_eq!(
        (t.verdict.decision, t.fresh_delta),
        (Decision::Adopt, Some(-0.04))
    );
    assert!(
        t.verdict.reason.contains("-4.0% in a fresh process"),
        "{}",
        t.verdict.reason
    );
    let reason = |i: usize| o[i].tuned.as_ref().unwrap().verdict.reason.clone();
    assert!(
        reason(1).contains("only -1.0% in a fresh process"),
        "{}",
        reason(1)
    );
    assert!(reason(2).contains("+2.0%") && reason(3).contains("could not run it"));
    assert!(reason(4).contains("did not measure it"));
    for x in &o[1..] {
        let v = &x.tuned.as_ref().unwrap().verdict;
        assert_eq!(
            (v.decision, &v.row),
            (Decision::Default, &Some(RowChoice::Default))
        );
    }
    // A withdrawn adoption over a current row keeps that row; Default stays Default.
    let mut kept = proposed("b", true);
    assert!(apply_fresh(
        &mut kept,
        &fresh,
        &rules,
        Some(RowChoice::Mine("Gemm_X_3".into()))
    ));
    let v = &kept.tuned.as_ref().unwrap().verdict;
    assert_eq!(
        (v.decision, v.row.clone()),
        (Decision::Keep, Some(RowChoice::Mine("Gemm_X_3".into())))
    );
    assert!(!apply_fresh(
        &mut proposed("a", false),
        &fresh,
        &rules,
        None
    ));
    // The child failed as a whole: nothing is adopted.
    let mut x = proposed("a", true);
    assert!(apply_fresh(
        &mut x,
        &Err("the child exit status: 1".into()),
        &rules,
        None
    ));
    assert!(x
        .tuned
        .unwrap()
        .verdict
        .reason
        .contains("confirmation failed"));
}

/// A stand-in for the child a campaign starts: a shell script that checks how it was
/// called and answers for the first row of the file it was given, as `confirm --log`.
fn stand_in_child(dir: &Path, exit: i32) -> PathBuf {
    let script = dir.join(format!("child-{exit}.sh"));
    let body = format!(
        r#"#!/bin/sh
[ "$1" = confirm ] && [ "$2" = -q ] || exit 3
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows=$2 ;; --log) log=$2 ;; --lib) lib=$2 ;; --timing) timing=$2 ;; --margin) margin=$2 ;;
    --rest) rest=$2 ;;
  esac
  shift
done
[ "$lib" = /the/lib.so ] && [ "$timing" = graph ] && [ "$margin" = 3 ] && [ "$rest" = 1.5 ] || exit 4
row=$(grep -v '^Validator' "$rows" | head -1)
shape=$(echo "$row" | cut -d, -f1-2)
sol=$(echo "$row" | cut -d, -f3)
printf '{{"rows":[{{"shape":"%s","solution":"%s","delta":-0.05,"error":null}}]}}' "$shape" "$sol" >"$log"
echo "confirm: 1 of 1 tuned rows still win"
exit {exit}
"#
    );
    // Written by a `sh` child, not by this process: a fork by another test thread while
    // this process held the file open for writing would pass that descriptor on until
    // its exec, and running the script in that window fails with ETXTBSY.
    use std::io::Write;
    let mut sh = std::process::Command::new("sh")
        .args(["-c", "cat >\"$0\" && chmod 700 \"$0\""])
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    sh.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    assert!(sh.wait().unwrap().success());
    script
}

#[test]
fn the_fresh_process_gets_the_proposed_rows_and_its_verdicts_come_back() {
    let dir = std::env::temp_dir().join(format!("tunedblas-fresh-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The child times as the campaign does: its rest and margin too.
    let m = Method {
        rest: 1.5,
        ..Method::default()
    };
    let libs: Vec<OsString> = ["--lib", "/the/lib.so"].iter().map(Into::into).collect();
    let rows = "Validator,X,1\nGemmTunableOp_BFloat16_TN,tn_512_256_2560,Gemm_X_7,0.0064\n";
    let work = dir.join("work");
    let verdicts = |child: &Path| fresh_verdicts(child, &libs, &m, &Rules::default(), rows, &work);
    assert_eq!(
        verdicts(&stand_in_child(&dir, 0)).unwrap(),
        [(
            "GemmTunableOp_BFloat16_TN,tn_512_256_2560".to_string(),
            "Gemm_X_7".to_string(),
            Some(-0.05)
        )]
    );
    // A child that fails gives no verdicts, whatever it wrote.
    let e = verdicts(&stand_in_child(&dir, 1)).unwrap_err();
    assert!(e.contains("exit status: 1"), "{e}");
    assert!(verdicts(&dir.join("no-such-program")).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
