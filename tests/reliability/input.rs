//! Reliability, bad input: malformed CSV lines, an unreadable or truncated results file,
//! an invalid `profiles.json`, validators that contradict the build, unknown op names,
//! absurd dimensions and ids (in rows and in calls), a miss log from an older format. Each
//! gives a one-line message naming the file (and line) and what to do; everything valid is
//! still served, and the host's results are right. (A profile whose sha256 does not match
//! the loaded build: `a_profile_for_another_build_is_not_chosen` in tests/interposer.rs.)

use std::path::Path;

use crate::common::faults::*;
use crate::common::*;

const HIT: &str = "ex:TN:h:64:24:40";
const MISS: &str = "ex:TN:h:8:8:8";

fn hit_row() -> String {
    row(HIT, &format!("Gemm_Rocblas_{}", tuned(HIT)))
}

/// A fresh folder `name` whose profile has the one row [`hit_row`].
fn with_hit_row(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    Profile::v4(&dir).line(hit_row()).write();
    dir
}

/// Runs HIT and MISS under the preload and checks HIT was served, MISS recorded and both
/// results right. Returns stderr.
fn run_served(name: &str, dir: &Path, extra: &[&str]) -> String {
    let mut args = vec![HIT, MISS];
    args.extend(extra);
    let (out, stderr) = run_ok(fault_cmd(dir, true, &args));
    assert_eq!(
        results(&out),
        expected(name, &args, &[(HIT, tuned(HIT))]),
        "{stderr}"
    );
    assert_eq!(
        trace(dir)[0]["solution"],
        tuned(HIT).to_string(),
        "{stderr}"
    );
    assert_eq!(trace(dir)[0]["heuristic"], "0");
    assert!(!stderr.contains("internal error"), "{stderr}");
    assert_eq!(whole_miss_files(dir).0[0], miss_line(MISS));
    stderr
}

fn rank0(dir: &Path) -> std::path::PathBuf {
    dir.join("profiles/ref-v4/tunableop_results0.csv")
}

/// Rewrites the rank-0 file of `dir` with `edit`.
fn edit_rank0(dir: &Path, edit: impl FnOnce(String) -> String) {
    let text = std::fs::read_to_string(rank0(dir)).unwrap();
    std::fs::write(rank0(dir), edit(text)).unwrap();
}

/// Fails unless `stderr` says `what` right after the rank-0 file's path.
#[track_caller]
fn said_of_rank0(stderr: &str, dir: &Path, what: &str) {
    assert_has(stderr, &format!("{}{what}", rank0(dir).display()));
}

#[test]
fn malformed_lines_are_skipped_reported_and_counted() {
    let dir = scratch("rel-malformed");
    let mut rows: Vec<String> = (0..22).map(|i| format!("garbage line {i}")).collect();
    rows.push("GemmTunableOp_Half_TN,tn_x_1_1,Default,1".into());
    rows.push("GemmTunableOp_Half_TN,tn_8_8_8,Default,-3".into());
    rows.push("Validator,ONLY_KEY".into());
    rows.insert(5, hit_row());
    Profile::v4(&dir).lines(&rows).write();
    let stderr = run_served("rel-malformed", &dir, &[]);
    let file = rank0(&dir).display().to_string();
    assert_has(&stderr, &format!("{file}:3: skipped: "));
    assert_has(&stderr, "fix or delete the line");
    assert_eq!(stderr.matches(": skipped: ").count(), 20, "{stderr}");
    assert_has(&stderr, "5 more problems in the profile not shown");
    assert_has(&stderr, "(1 rows, rank 0)");
}

#[test]
fn an_unreadable_rank_file_is_reported_and_the_others_serve() {
    let dir = with_hit_row("rel-unreadable");
    // Rank 1's "file" cannot be read (a folder in its place); device 1 falls back to rank 0.
    let rank1 = dir.join("profiles/ref-v4/tunableop_results1.csv");
    std::fs::create_dir_all(&rank1).unwrap();
    let out = run_guarded(fault_cmd(&dir, true, &[HIT]));
    let stderr = text(&out.stderr);
    assert_has(
        &stderr,
        &format!(
            "{}: unreadable (Is a directory (os error 21)); rank 1 serves nothing",
            rank1.display()
        ),
    );
    let stderr = run_served("rel-unreadable", &dir, &[]);
    assert_has(&stderr, "(1 rows, rank 0)");
}

#[test]
fn a_truncated_results_file_serves_its_whole_rows_only() {
    let dir = with_hit_row("rel-truncated");
    // The next row was being written when the disk filled: cut inside the solution index,
    // which would otherwise read as another (valid-looking) index.
    let sol = tuned(MISS);
    let cut = row(MISS, &format!("Gemm_Rocblas_{sol}"));
    let cut = &cut[..cut.rfind(',').unwrap() - 1];
    edit_rank0(&dir, |text| text + cut);
    let stderr = run_served("rel-truncated", &dir, &[]);
    said_of_rank0(
        &stderr,
        &dir,
        ":4: skipped: the last line has no time_ms and no newline: the file was cut short",
    );
    assert_eq!(
        trace(&dir)[1]["heuristic"],
        "1",
        "the cut row is not served"
    );
}

#[test]
fn invalid_profiles_json_passes_through_and_records() {
    let dir = with_hit_row("rel-bad-registry");
    let reg = dir.join("profiles/profiles.json");
    std::fs::write(
        &reg,
        "{\"profiles\": {\"ref-v4\": {\"dir\": \"ref-v4\",, }}}\n",
    )
    .unwrap();
    let (out, stderr) = run_ok(fault_cmd(&dir, true, &[HIT, MISS]));
    assert!(
        stderr.contains(&format!("{}:1:", reg.display()))
            && stderr.contains("not valid JSON")
            && stderr.contains("fix the file"),
        "{stderr}"
    );
    assert_eq!(
        results(&out),
        expected("rel-bad-registry", &[HIT, MISS], &[])
    );
    assert!(trace(&dir).iter().all(|t| t["heuristic"] == "1"));
    assert_eq!(
        whole_miss_files(&dir).0,
        vec![miss_line(HIT), miss_line(MISS)],
        "every shape is recorded for tuning"
    );
}

#[test]
fn a_contradicting_validator_is_reported_and_serving_continues() {
    let dir = with_hit_row("rel-validator");
    edit_rank0(&dir, |text| {
        format!("Validator,ROCBLAS_VERSION,0.0.0.deadbeef\n{text}")
    });
    let stderr = run_served("rel-validator", &dir, &[]);
    said_of_rank0(
        &stderr,
        &dir,
        ": Validator ROCBLAS_VERSION is 0.0.0.deadbeef, but the loaded rocBLAS reports",
    );
    assert!(stderr.contains("check that this profile belongs to this build"));
}

#[test]
fn unknown_ops_and_other_backends_are_counted_not_served() {
    let dir = scratch("rel-unknown-ops");
    let rows = [
        "FutureGemmTunableOp_Half_TN,tn_8_8_8_ld_8_8_8,Default,0.1".to_string(),
        row(MISS, "Gemm_Hipblaslt_12345"),
        "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_Half_TN,tn_8_8_8_ld_8_8_8_rw_0_bias_None,Gemm_Hipblaslt_1,0.1".into(),
        hit_row(),
    ];
    Profile::v4(&dir).lines(&rows).write();
    let stderr = run_served("rel-unknown-ops", &dir, &[]);
    assert_has(&stderr, "3 rows name ops or solutions rocBLAS cannot serve");
    assert_has(&stderr, "(1 rows, rank 0)");
}

#[test]
fn absurd_dimensions_and_ids_in_rows_and_calls() {
    let dir = scratch("rel-absurd");
    let rows = [
        "GemmTunableOp_Half_TN,tn_99999999999999999999_1_1,Default,1".to_string(),
        "GemmTunableOp_Half_TN,tn_8_8_8,Gemm_Rocblas_4294967296,1".into(),
        "GemmTunableOp_Half_TN,tn_8_8_8_ld_-8_8_8,Default,1".into(),
        "GemmStridedBatchedTunableOp_Half_TN,tn_4611686018427387904_4_4_B_4611686018427387904,Default,1".into(),
        // Huge but consistent: loads, never matches a real call.
        "GemmTunableOp_Half_TN,tn_1099511627776_1_1,Default,1".into(),
        hit_row(),
    ];
    Profile::v4(&dir).lines(&rows).write();
    // Calls with absurd arguments before and after the served ones: rocBLAS's own answer
    // reaches the host, and nothing in the interposer gives up (no internal error latch).
    let stderr = run_served("rel-absurd", &dir, &["@absurd", HIT]);
    assert_eq!(stderr.matches(": skipped: ").count(), 4, "{stderr}");
    assert_has(&stderr, "(2 rows, rank 0)");
    let t = trace(&dir);
    assert_eq!(
        t.last().unwrap()["heuristic"],
        "0",
        "still served after: {t:?}"
    );
}

#[test]
fn a_miss_log_from_an_older_format_still_reads() {
    // PyTorch <= 2.6 signatures, a counts header, PyTorch's BLAS_PARAMS field, CRLF, and a
    // fragment cut by a full disk; the reader keeps every whole line and names the rest.
    let dir = scratch("rel-old-misslog");
    let misses = dir.join("misses");
    std::fs::create_dir_all(&misses).unwrap();
    std::fs::write(
        misses.join("host-1-rank0.csv"),
        "GemmTunableOp_Half_TN,tn_64_24_40\r\n\
         GemmStridedBatchedTunableOp_Half_NT,nt_8_8_8_B_3\n\
         GemmTunableOp_float_NN,nn_16_16_16,BLAS_PARAMS: transa=N transb=N m=16, n=16\n\
         GemmTunableOp_Half_TN,tn_8_8",
    )
    .unwrap();
    std::fs::write(
        misses.join("host-1-rank0.counts.csv"),
        "op_name,param_signature,calls\nGemmTunableOp_Half_TN,tn_64_24_40_ld_40_40_64,9\n",
    )
    .unwrap();
    std::fs::write(misses.join("host-2-rank0.counts.tmp.2"), "junk").unwrap();
    let read = tunedblas_core::misses::file::read_dir(&misses).unwrap();
    assert_eq!(read.misses.len(), 3, "{read:?}");
    assert_eq!(
        read.misses[0].key,
        spec_key(HIT),
        "the 2.6 form is the same key"
    );
    assert_eq!(read.misses[0].calls, Some(9));
    assert_eq!(read.misses[1].key, spec_key("sb:NT:h:8:8:8"));
    assert_eq!(read.misses[2].key, spec_key("ex:NN:s:16:16:16"));
    assert_eq!(read.problems.len(), 1, "{:?}", read.problems);
    assert!(
        read.problems[0].contains("host-1-rank0.csv:4: skipped:"),
        "{:?}",
        read.problems
    );
    assert_eq!(read.files.len(), 2, "temporaries are not read");
}
