//! Reliability, bad solutions: a tuned id the library rejects, one it accepts for
//! validation but that fails when run, and a library that fails every call. In each case
//! the call is redone with the caller's own arguments, the row is quarantined (said once),
//! and the host gets exactly what it would have got without tunedblas.

use crate::common::faults::*;
use crate::common::*;

const EX: &str = "ex:TN:h:64:24:40";
const SB: &str = "sb:NT:h:16:12:8";
const SG: &str = "sgemm:NN:s:32:16:24";

fn repeated(specs: &[&str], reps: u32) -> Vec<String> {
    specs.iter().map(|s| format!("{s}:{reps}")).collect()
}

#[test]
fn rejected_ids_fall_back_on_every_entry_point() {
    let dir = scratch("rel-rejected");
    // 77777 is no refblas solution: rocBLAS 4.x answers invalid_value, nothing runs.
    let rows: Vec<String> = [EX, SB, SG]
        .iter()
        .map(|s| row(s, "Gemm_Rocblas_77777"))
        .collect();
    Profile::v4(&dir).lines(&rows).write();
    let args = repeated(&[EX, SB, SG], 3);
    let args = strs(&args);
    let (out, stderr) = run_ok(fault_cmd(&dir, true, &args));
    assert_eq!(results(&out), reference("rel-rejected", &args));
    assert_eq!(
        stderr.matches("quarantined").count(),
        3,
        "one line per row: {stderr}"
    );
    assert_has(&stderr, "status 11");
    assert_has(
        &stderr,
        "9 calls: 0 served, 0 default, 0 missed (0 shapes), 6 passed through, 3 fallbacks",
    );
    assert!(trace(&dir).iter().all(|t| t["heuristic"] == "1"));
}

#[test]
fn an_id_that_validates_but_fails_when_run_falls_back() {
    let dir = scratch("rel-runfail");
    let sol = tuned(EX);
    // The library still offers the id (so a tuner or a check_solution_index call would
    // accept it) ...
    let listed = {
        let mut cmd = host4_cmd(&dir, false, &["--list", EX]);
        cmd.env("REFBLAS_FAIL_SOLUTIONS", sol.to_string());
        text(&run_guarded(cmd).stdout)
    };
    assert_has(&listed, &sol.to_string());
    // ... but asking for it directly fails at run time.
    let mut direct = host4_cmd(
        &scratch("rel-runfail-direct"),
        false,
        &["--solution", &sol.to_string(), EX],
    );
    direct.env("REFBLAS_FAIL_SOLUTIONS", sol.to_string());
    let direct = run_guarded(direct);
    assert_eq!(results(&direct)[0].1, 6, "internal_error from the library");

    Profile::v4(&dir).tuned(EX, sol).write();
    let args = [format!("{EX}:4")];
    let args = strs(&args);
    let mut cmd = fault_cmd(&dir, true, &args);
    cmd.env("REFBLAS_FAIL_SOLUTIONS", sol.to_string());
    let (out, stderr) = run_ok(cmd);
    assert_eq!(results(&out), reference("rel-runfail", &args));
    assert_eq!(stderr.matches("quarantined").count(), 1, "{stderr}");
    assert_has(&stderr, &format!("solution {sol} for"));
    assert_has(&stderr, "status 6");
    assert_has(
        &stderr,
        "4 calls: 0 served, 0 default, 0 missed (0 shapes), 3 passed through, 1 fallbacks",
    );
    // Every GEMM that ran was the caller's own call (the failing one never ran).
    let t = trace(&dir);
    assert_eq!(t.len(), 4, "{t:?}");
    assert!(t.iter().all(|l| l["heuristic"] == "1"));
}

#[test]
fn a_library_that_fails_everything_gets_the_callers_call_and_its_error() {
    let dir = scratch("rel-failall");
    let miss = "ex:TN:h:8:8:8";
    Profile::v4(&dir).tuned(EX, tuned(EX)).write();
    let args = [format!("{EX}:1"), format!("{EX}:1"), miss.to_string()];
    let args = strs(&args);
    let reference = {
        let mut cmd = fault_cmd(&scratch("rel-failall-ref"), false, &args);
        cmd.env("REFBLAS_FAIL_ALL", "6");
        results(&run_guarded(cmd))
    };
    assert!(reference.iter().all(|r| r.1 == 6), "{reference:?}");
    let mut cmd = fault_cmd(&dir, true, &args);
    cmd.env("REFBLAS_FAIL_ALL", "6");
    let out = run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(
        out.status.code().is_some(),
        "the host ended normally: {stderr}"
    );
    assert_eq!(
        results(&out),
        reference,
        "the library's own error reaches the host"
    );
    // The caller's own call fails too, so the row is not to blame: it is not quarantined,
    // and each such call counts as passed through (a call rocBLAS rejects).
    assert_eq!(stderr.matches("quarantined").count(), 0, "{stderr}");
    assert_has(
        &stderr,
        "3 calls: 0 served, 0 default, 1 missed (1 shapes), 2 passed through, 0 fallbacks",
    );
    // The shape that missed is still recorded for tuning.
    assert_eq!(whole_miss_files(&dir).0, vec![miss_line(miss)]);
}

#[test]
fn a_bad_call_from_the_caller_does_not_quarantine_a_good_row() {
    // alpha = NULL on a served shape: rocBLAS rejects the tuned call and the caller's own
    // alike. The row is not at fault, so the next good call is served.
    let dir = scratch("rel-null-alpha");
    let spec = "ex:NN:s:2:9:2";
    Profile::v4(&dir).tuned(spec, tuned(spec)).write();
    let mut cmd = life_cmd(
        &dir,
        true,
        &[
            "@null-alpha:9",
            "@gemm:9",
            "@null-handle:9",
            "@null-handle:10",
        ],
    );
    cmd.env_remove("REFBLAS_TRACE");
    let (out, stderr) = run_ok(cmd);
    let stdout = text(&out.stdout);
    let statuses: Vec<&str> = stdout.lines().collect();
    assert_eq!(statuses[1], "status=0", "{statuses:?}");
    assert_ne!(
        statuses[0], "status=0",
        "alpha = NULL is rejected: {statuses:?}"
    );
    assert_eq!(stderr.matches("quarantined").count(), 0, "{stderr}");
    assert_has(
        &stderr,
        "4 calls: 1 served, 0 default, 0 missed (0 shapes), 3 passed through, 0 fallbacks",
    );
    // A call on no handle is not a shape to tune.
    assert!(whole_miss_files(&dir).0.is_empty());
}
