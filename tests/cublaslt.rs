//! End-to-end on the CPU: the interposer's cuBLASLt path against a stand-in cuBLASLt
//! (`tests/hosts/fake_cublaslt.c`, the real C ABI, no GPU). The host loads a module linked
//! against `libcublasLt.so.13` with `RTLD_LOCAL`, as Python loads PyTorch, so the real
//! `cublasLtMatmul` is only found through the interposer's fallback search. What ran is read
//! from the stand-in's trace.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::build::lt;
use common::{artifacts, build, host_env, scratch, text, trace, Profile};
use tunedblas_core::cublaslt::{op_and_signature, LtKey, R_16BF};

/// The bf16 `F.linear` key of a call `N,M,K`.
fn key(n: i64, m: i64, k: i64) -> LtKey {
    LtKey::linear(R_16BF, n, m, k)
}

fn row(k: &LtKey, solution: &str) -> String {
    let (op, sig) = op_and_signature(k);
    format!("{op},{sig},{solution},0.01")
}

fn profile(dir: &Path, rows: &[String]) {
    Profile::new(&dir.join("profiles"), "fake-lt", &lt().sha)
        .validators(&[("CUBLASLT_VERSION", "130100")])
        .lines(rows)
        .write();
}

fn host(dir: &Path, preload: bool, calls: &[&str]) -> Output {
    host_cmd(dir, preload, calls).output().expect("run lt_host")
}

fn host_cmd(dir: &Path, preload: bool, calls: &[&str]) -> Command {
    host_cmd_with(&lt().module, dir, preload, calls)
}

/// [`host_cmd`] with another first module (`-`: none, see lt_host.c).
fn host_cmd_with(module: &Path, dir: &Path, preload: bool, calls: &[&str]) -> Command {
    let mut cmd = Command::new(&lt().host);
    cmd.arg(module).args(calls);
    // The rocBLAS hosts' environment, with the stand-in's trace and a stats file.
    host_env(&mut cmd, dir, preload);
    cmd.env_remove("REFBLAS_TRACE")
        .env("TUNEDBLAS_STATS", dir.join("stats.json"))
        .env("FAKELT_TRACE", dir.join("trace.log"));
    cmd
}

fn stats(dir: &Path) -> serde_json::Value {
    common::stats_json(dir)
}

fn miss_lines(dir: &Path) -> Vec<String> {
    common::lt_miss_lines(dir, "-cublaslt")
}

const TUNED: &str =
    "Gemm_Cublaslt_algo21_tile20_stages35_splitk1_red0_swizzle1_custom0_inner0_cluster2";

#[test]
fn without_the_preload_the_heuristic_runs() {
    let dir = scratch("lt-plain");
    let out = host(&dir, false, &["2560,16,1536"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = trace(&dir);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0]["algo"], "6");
    assert!(lt().libdir.join("libcublasLt.so.13").is_file());
}

#[test]
fn misses_are_recorded_under_pytorch_names_when_no_profile_matches() {
    let dir = scratch("lt-miss");
    let out = host(&dir, true, &["2560,16,1536", "2560,16,1536", "512,4,2560"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The startup line names the registry it looked in and the library it identified.
    let startup = stderr.lines().next().unwrap_or("");
    assert!(startup.starts_with("tunedblas: cuBLASLt: "), "{stderr}");
    assert!(startup.contains("profiles.json"), "{stderr}");
    assert!(startup.contains("libcublasLt.so.13"), "{stderr}");
    // The caller's own algorithm ran every time.
    assert!(trace(&dir)
        .iter()
        .all(|l| l["algo"] == "6" && l["ok"] == "1"));
    assert_eq!(
        miss_lines(&dir),
        [
            "GemmTunableOp_BFloat16_TN,tn_2560_16_1536_ld_1536_1536_2560",
            "GemmTunableOp_BFloat16_TN,tn_512_4_2560_ld_2560_2560_512",
        ]
    );
    let s = stats(&dir);
    assert_eq!(s["calls"], 3);
    assert_eq!(s["missed_calls"], 3);
    assert_eq!(s["missed_shapes"], 2);
    // The start line says where misses go; the live status (issue 16) has the cuBLASLt
    // counters, final at exit.
    assert!(
        startup.contains(&format!("misses go to {}", dir.join("misses").display())),
        "{startup}"
    );
    let status: Vec<_> = std::fs::read_dir(dir.join("misses"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".status.json"))
        .collect();
    assert_eq!(status.len(), 1, "{status:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&status[0]).unwrap()).unwrap();
    assert_eq!(v["final"], true, "{v}");
    let lt = &v["backends"][0];
    assert_eq!(lt["backend"], "cublaslt", "{v}");
    assert_eq!(lt["counters"]["missed"], 3, "{v}");
    assert_eq!(lt["missed_shapes"], 2, "{v}");
    assert_eq!(lt["top_missed"][0]["calls"], 2, "{v}");
}

#[test]
fn a_tuned_row_is_rebuilt_and_served_and_other_shapes_still_miss() {
    let dir = scratch("lt-serve");
    profile(
        &dir,
        &[
            row(&key(2560, 16, 1536), TUNED),
            row(&key(512, 4, 2560), "Default"),
        ],
    );
    let out = host(
        &dir,
        true,
        &["2560,16,1536", "512,4,2560", "2560,16,1536", "336,32,10240"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cuBLASLt: profile fake-lt auto-selected for cuBLASLt build {} (2 rows, rank 0",
            &lt().sha[..12]
        )),
        "{stderr}"
    );
    let t = trace(&dir);
    assert_eq!(t.len(), 4, "{t:?}");
    for i in [0, 2] {
        assert_eq!(t[i]["algo"], "21", "{t:?}");
        assert_eq!(t[i]["tile"], "20");
        assert_eq!(t[i]["stages"], "35");
        assert_eq!(t[i]["cluster"], "2");
        assert_eq!(t[i]["ok"], "1");
    }
    assert_eq!(
        t[1]["algo"], "6",
        "a Default row keeps the caller's algorithm"
    );
    assert_eq!(t[3]["algo"], "6");
    assert_eq!(
        miss_lines(&dir),
        ["GemmTunableOp_BFloat16_TN,tn_336_32_10240_ld_10240_10240_336"]
    );
    let s = stats(&dir);
    assert_eq!(s["served"], 2, "{s}");
    assert_eq!(s["default"], 1);
    assert_eq!(s["missed_calls"], 1);
    assert_eq!(s["rows_hit"], 2);
    assert!(stderr.contains("cuBLASLt: 4 calls: 2 served, 1 default, 1 missed (1 shapes), 0 passed through, 0 fallbacks"), "{stderr}");
}

/// Rows whose algorithm cannot be checked, run or rebuilt: every call still succeeds
/// with the caller's algorithm; each row is tried on two calls (a first failure may be a
/// caller's race, not the row's) and then quarantined for good.
#[test]
fn rows_that_fail_twice_fall_back_to_the_callers_algorithm_for_good() {
    let dir = scratch("lt-fallback");
    let check_fails = TUNED.replace("tile20", "tile999");
    let run_fails = TUNED.replace("tile20", "tile998");
    let bad_id = TUNED.replace("algo21", "algo150");
    profile(
        &dir,
        &[
            row(&key(64, 1, 64), &check_fails),
            row(&key(64, 2, 64), &run_fails),
            row(&key(64, 4, 64), &bad_id),
        ],
    );
    let calls = [
        "64,1,64", "64,2,64", "64,4,64", "64,1,64", "64,2,64", "64,4,64",
    ];
    let out = host(&dir, true, &calls);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "every call still succeeds: {stderr}");
    let t = trace(&dir);
    // Two attempts with the algorithm that fails to run, each followed by the caller's;
    // the caller's every other time.
    let algos: Vec<&str> = t.iter().map(|l| l["algo"].as_str()).collect();
    assert_eq!(algos, ["6", "21", "6", "6", "6", "21", "6", "6"], "{t:?}");
    assert_eq!((t[1]["ok"].as_str(), t[5]["ok"].as_str()), ("0", "0"));
    assert!(
        stderr.contains("cublasLtMatmulAlgoCheck returned 15"),
        "{stderr}"
    );
    assert!(
        stderr.contains("cublasLtMatmulAlgoInit(algo 150) returned 15"),
        "{stderr}"
    );
    assert!(
        stderr.contains("failed with status 15; the row is quarantined"),
        "{stderr}"
    );
    let s = stats(&dir);
    assert_eq!(s["served"], 0);
    assert_eq!(s["fallbacks"], 6, "{s}");
    assert_eq!(s["rows_quarantined"].as_array().unwrap().len(), 3);
    assert_eq!(
        stderr.matches("quarantined").count(),
        1,
        "said once: {stderr}"
    );
    assert_eq!(
        stderr.matches("cannot be used").count(),
        2,
        "said once each: {stderr}"
    );
}

/// A matmul given a descriptor another thread destroyed meanwhile (the caller's race)
/// reads freed memory through cuBLASLt's getters: a key no caller could have made
/// (compute type 1564224282 here; `ct1564696069_dt5` was seen in a real miss log). It is
/// passed through, not recorded; the host gets the library's own status, as without the
/// preload.
#[test]
fn a_key_read_from_a_destroyed_descriptor_is_not_recorded() {
    let dir = scratch("lt-stale");
    let run = |preload| {
        host_cmd(&dir, preload, &["64,8,64"])
            .env("LT_HOST_VARIANT", "stale")
            .env("FAKELT_KEEP_DESTROYED", "1")
            .output()
            .unwrap()
    };
    let (plain, preloaded) = (run(false), run(true));
    let stderr = text(&preloaded.stderr);
    assert_eq!(text(&plain.stdout), "call=64,8,64 status=7\n");
    assert_eq!(text(&preloaded.stdout), text(&plain.stdout), "{stderr}");
    assert!(miss_lines(&dir).is_empty(), "{:?}", miss_lines(&dir));
    let s = stats(&dir);
    assert_eq!(s["missed_calls"], 0, "{s}");
    assert_eq!(s["passed_through"], 1, "{s}");
}

#[test]
fn calls_the_tuned_algorithm_cannot_take_pass_through_without_quarantine() {
    let dir = scratch("lt-unfit");
    let splitk = TUNED.replace("splitk1", "splitk4"); // needs 4096 bytes of workspace
    profile(
        &dir,
        &[
            row(&key(128, 8, 64), &splitk),
            row(&key(128, 16, 64), TUNED),
        ],
    );
    let calls = [
        "128,8,64,0",
        "128,8,64,8192",
        "128,16,64,0,1",
        "128,16,64,0",
    ];
    let out = host(&dir, true, &calls);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = trace(&dir);
    let algos: Vec<&str> = t.iter().map(|l| l["algo"].as_str()).collect();
    assert_eq!(algos, ["6", "21", "6", "21"], "{t:?}");
    assert_eq!(t[1]["splitk"], "4");
    let s = stats(&dir);
    assert_eq!(s["served"], 2);
    assert_eq!(s["passed_through"], 2);
    assert_eq!(s["fallbacks"], 0);
}

#[test]
fn serving_can_be_switched_off_and_on_inside_the_process() {
    let dir = scratch("lt-switch");
    profile(&dir, &[row(&key(2560, 16, 1536), TUNED)]);
    let out = host(
        &dir,
        true,
        &["2560,16,1536", "off", "2560,16,1536", "on", "2560,16,1536"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let algos: Vec<String> = trace(&dir).iter().map(|l| l["algo"].clone()).collect();
    assert_eq!(algos, ["21", "6", "21"]);
    // Without the preload the switch does not exist and the host says so.
    let plain = host(&scratch("lt-switch-plain"), false, &["off"]);
    assert!(text(&plain.stdout).contains("call=off status=-1"));
}

#[test]
fn disabled_means_untouched() {
    let dir = scratch("lt-disabled");
    profile(&dir, &[row(&key(2560, 16, 1536), TUNED)]);
    let mut cmd = Command::new(&lt().host);
    cmd.arg(&lt().module)
        .arg("2560,16,1536")
        .env("LD_PRELOAD", &artifacts().preload)
        .env("TUNEDBLAS_DISABLE", "1")
        .env("TUNEDBLAS_PROFILE_DIR", dir.join("profiles"))
        .env("TUNEDBLAS_MISS_DIR", dir.join("misses"))
        .env("FAKELT_TRACE", dir.join("trace.log"));
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    assert_eq!(trace(&dir)[0]["algo"], "6");
    assert!(miss_lines(&dir).is_empty());
}

// ---------------------------------------------------------------------------------------
// The lifecycle's fault rows for the cuBLASLt backend (the rocBLAS side's are in
// reliability/life.rs): the two backends share one lifecycle, and these show it holds for
// this one too.
// ---------------------------------------------------------------------------------------

/// The counts written for the cuBLASLt miss files: total calls over every shape.
fn lt_counted_calls(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir.join("misses")).into_iter().flatten() {
        let p = e.unwrap().path();
        if p.to_string_lossy().ends_with("-cublaslt-rank0.counts.csv") {
            let log = tunedblas_core::misses::file::read(&p).unwrap();
            total += log.misses.iter().filter_map(|m| m.calls).sum::<u64>();
        }
    }
    total
}

#[test]
fn cublaslt_forking_while_threads_record_never_hangs_a_child() {
    let dir = scratch("lt-storm");
    profile(&dir, &[]);
    let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8", "@storm:6:20"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("storm-hung=0"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn cublaslt_a_signal_handler_exit_writes_counts_and_summary() {
    for round in 0..3 {
        let dir = scratch(&format!("lt-sigexit-{round}"));
        profile(&dir, &[]);
        let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8", "@sigexit:6"]));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(7), "{stderr}");
        assert!(
            stderr.contains("cuBLASLt: ") && stderr.contains(" calls: "),
            "{stderr}"
        );
        assert!(lt_counted_calls(&dir) > 0, "counts written at _exit");
        assert!(stats(&dir)["calls"].as_u64().unwrap() > 0);
    }
}

#[test]
fn cublaslt_a_vfork_child_does_not_finish_the_parents_run() {
    let dir = scratch("lt-vfork");
    profile(&dir, &[]);
    let out =
        common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8", "@vfork-fail", "16,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches(" calls: ").count(),
        1,
        "one summary: {stderr}"
    );
    assert!(stderr.contains("cuBLASLt: 2 calls"), "{stderr}");
    assert_eq!(lt_counted_calls(&dir), 2, "the parent's counts");
}

#[test]
fn cublaslt_every_way_out_writes_counts_stats_and_summary() {
    for last in ["@Exit", "@exec:/bin/true"] {
        let dir = scratch(&format!("lt-out-{}", last.len()));
        profile(&dir, &[]);
        let out =
            common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8", "8,8,8", "16,8,8", last]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{last}: {stderr}");
        assert!(stderr.contains("cuBLASLt: 3 calls"), "{last}: {stderr}");
        assert_eq!(lt_counted_calls(&dir), 3, "{last}");
        assert_eq!(stats(&dir)["calls"], 3, "{last}");
    }
}

#[test]
fn cublaslt_stats_are_never_written_through_a_planted_symlink() {
    let dir = scratch("lt-stats-symlink");
    profile(&dir, &[]);
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("stats.json")).unwrap();
    let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // The stats went to the file itself, replacing the link.
    assert!(!std::fs::symlink_metadata(dir.join("stats.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(stats(&dir)["calls"], 1);
}

// ---------------------------------------------------------------------------------------
// Library lifetime for cuBLASLt: a second build side by side, and the served build closed
// and another opened (libs.rs's Registry, as for rocBLAS in reliability/loading.rs).
// ---------------------------------------------------------------------------------------

/// A profile for each stand-in build, each with a tuned row for F.linear 8x8x8.
fn two_build_lt_profiles(dir: &Path) {
    let p = dir.join("profiles");
    let mut reg = serde_json::Map::new();
    for (name, sha) in [("fake-lt", &lt().sha), ("fake-lt2", &lt().sha2)] {
        std::fs::create_dir_all(p.join(name)).unwrap();
        let text = format!(
            "Validator,CUBLASLT_VERSION,130100\n{}\n",
            row(&key(8, 8, 8), TUNED)
        );
        std::fs::write(p.join(name).join("tunableop_results0.csv"), text).unwrap();
        reg.insert(
            name.into(),
            serde_json::json!({"dir": name, "lib_sha256": sha}),
        );
    }
    std::fs::write(
        p.join("profiles.json"),
        serde_json::json!({ "profiles": reg }).to_string(),
    )
    .unwrap();
}

fn builds_in_trace(dir: &Path) -> Vec<String> {
    trace(dir)
        .iter()
        .filter_map(|t| t.get("build").cloned())
        .collect()
}

#[test]
fn cublaslt_two_builds_side_by_side_each_call_runs_in_its_own_build() {
    let dir = scratch("lt-two-builds");
    two_build_lt_profiles(&dir);
    let module2 = format!("@module:{}", lt().module2.display());
    let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8", &module2, "8,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The first build's call is served (the tuned algorithm, 21, in the trace); the second
    // build's runs untouched, with the caller's own algorithm (the stand-in's heuristic
    // answer, 6), in build 2.
    assert_eq!(
        builds_in_trace(&dir),
        ["1", "2"],
        "{:?}: {stderr}",
        trace(&dir)
    );
    let t = trace(&dir);
    assert_eq!(t[0]["algo"], "21", "{t:?}");
    assert_eq!(t[1]["algo"], "6", "{t:?}");
    assert_eq!(stats(&dir)["served"], 1);
    assert_eq!(stats(&dir)["passed_through"], 1);
    assert_eq!(
        stderr.matches("a second cuBLASLt build").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn cublaslt_the_served_build_closed_and_another_opened_serves_the_new_one() {
    let dir = scratch("lt-switch");
    two_build_lt_profiles(&dir);
    let module2 = format!("@module:{}", lt().module2.display());
    let out = common::faults::run_guarded(host_cmd(
        &dir,
        true,
        &["8,8,8", "@close", &module2, "8,8,8"],
    ));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    let builds = builds_in_trace(&dir);
    assert_eq!(
        builds.last().map(String::as_str),
        Some("2"),
        "{builds:?}: {stderr}"
    );
    assert!(
        stderr.contains("profile fake-lt2 auto-selected"),
        "{stderr}"
    );
    assert_eq!(
        stats(&dir)["served"],
        2,
        "both builds served their own row: {stderr}"
    );
}

/// A served call and a repeated miss read their key from what the descriptor and layouts
/// were made and set with, in the interposer: no cuBLASLt attribute getter runs (it made
/// 25 per call, at 13-19 ns each on an H200, a third to a half of what it added).
#[test]
fn cublaslt_served_calls_and_misses_read_no_attribute_getter() {
    let dir = scratch("lt-no-getters");
    profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
    let out = host_cmd(&dir, true, &["8,8,8", "8,8,8", "16,8,8", "16,8,8"])
        .env("FAKELT_TRACE_GETTERS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = trace(&dir);
    let algos: Vec<&str> = t.iter().map(|l| l["algo"].as_str()).collect();
    assert_eq!(algos, ["21", "21", "6", "6"], "{t:?}");
    let getters: Vec<&str> = t.iter().map(|l| l["getters"].as_str()).collect();
    assert_eq!(getters, ["0"; 4], "{t:?}");
    assert_eq!(stats(&dir)["served"], 2);
    assert_eq!(stats(&dir)["missed_calls"], 2);
}

/// The same module closed and opened again, and a module of the other build opened where
/// it was: every call site is looked up again after each close, so each call runs in its
/// caller's build, with objects that build made, and serving follows the build loaded.
#[test]
fn cublaslt_modules_closed_and_opened_again_keep_each_call_in_its_own_build() {
    let dir = scratch("lt-reopen");
    two_build_lt_profiles(&dir);
    let module1 = format!("@module:{}", lt().module.display());
    let module2 = format!("@module:{}", lt().module2.display());
    let out = common::faults::run_guarded(host_cmd(
        &dir,
        true,
        &[
            "8,8,8", "@close", &module1, "8,8,8", "@close", &module2, "8,8,8", "@close", &module1,
            "8,8,8",
        ],
    ));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    let t = trace(&dir);
    let runs: Vec<(&str, &str)> = t
        .iter()
        .map(|l| (l["algo"].as_str(), l["build"].as_str()))
        .collect();
    assert_eq!(
        runs,
        [("21", "1"), ("21", "1"), ("21", "2"), ("21", "1")],
        "{t:?}: {stderr}"
    );
    assert_eq!(stats(&dir)["served"], 4, "{stderr}");
}

#[test]
fn cublaslt_cancelling_a_thread_inside_a_matmul_does_not_abort_the_host() {
    // Cancellation acted on between calls, and inside the library (the stand-in's
    // FAKELT_CANCEL_POINT): with or without the interposer the host survives.
    for inside in [false, true] {
        for preload in [false, true] {
            let dir = scratch(&format!("lt-cancel-{inside}-{preload}"));
            profile(&dir, &[]);
            let mut cmd = host_cmd(&dir, preload, &["8,8,8", "@cancel:20"]);
            cmd.env_remove("FAKELT_TRACE");
            if inside {
                cmd.env("FAKELT_CANCEL_POINT", "1");
            }
            let out = common::faults::run_guarded(cmd);
            assert!(
                out.status.success(),
                "inside: {inside}, preload: {preload}: {:?}: {}",
                out.status,
                text(&out.stderr)
            );
            assert!(
                text(&out.stdout).contains("cancelled=20"),
                "{}",
                text(&out.stdout)
            );
        }
    }
}

// ---- The profile's files, for cuBLASLt (the rocBLAS rows are in reliability/loading.rs) ---

#[test]
fn cublaslt_a_fifo_or_dev_zero_as_the_rank_file_never_blocks_the_host() {
    for what in ["fifo", "zero"] {
        let dir = scratch(&format!("lt-special-{what}"));
        profile(&dir, &[]);
        let rank = dir.join("profiles/fake-lt/tunableop_results0.csv");
        std::fs::remove_file(&rank).unwrap();
        if what == "fifo" {
            let c = std::ffi::CString::new(rank.to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        } else {
            std::os::unix::fs::symlink("/dev/zero", &rank).unwrap();
        }
        let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8", "16,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
        assert!(
            stderr.contains("not a regular file"),
            "{what}: one line says why: {stderr}"
        );
        assert_eq!(
            miss_lines(&dir).len(),
            2,
            "{what}: the shapes are still recorded"
        );
    }
}

#[test]
fn cublaslt_a_byte_order_mark_does_not_hide_the_first_row() {
    let dir = scratch("lt-bom");
    let r = row(&key(8, 8, 8), TUNED);
    profile(&dir, &[]);
    // The row first, right after a BOM (no validator line before it).
    std::fs::write(
        dir.join("profiles/fake-lt/tunableop_results0.csv"),
        format!("\u{feff}{r}\n"),
    )
    .unwrap();
    let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stats(&dir)["served"], 1, "{stderr}");
}

// ---- The miss folder, for cuBLASLt (the rocBLAS rows are in reliability/security.rs and
// reliability/life.rs) ---------------------------------------------------------------------

#[test]
fn cublaslt_a_symlinked_or_unwritable_miss_folder_warns_once_and_serving_goes_on() {
    for what in ["symlink", "enotdir"] {
        let dir = scratch(&format!("lt-missdir-{what}"));
        profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
        let elsewhere = dir.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let miss_dir = if what == "symlink" {
            std::os::unix::fs::symlink(&elsewhere, dir.join("link")).unwrap();
            dir.join("link")
        } else {
            std::fs::write(dir.join("a-file"), "x").unwrap();
            dir.join("a-file/misses")
        };
        let mut cmd = host_cmd(&dir, true, &["8,8,8", "16,8,8", "24,8,8"]);
        cmd.env("TUNEDBLAS_MISS_DIR", &miss_dir);
        let out = common::faults::run_guarded(cmd);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
        assert_eq!(
            stderr.matches("cannot write the miss log").count(),
            1,
            "{what}: one warning: {stderr}"
        );
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "{what}");
        assert_eq!(
            stats(&dir)["served"],
            1,
            "{what}: serving goes on: {stderr}"
        );
        assert_eq!(
            stats(&dir)["missed_shapes"],
            2,
            "{what}: the shapes are kept in memory"
        );
    }
}

// ---- Bad input and file modes, for cuBLASLt (the rocBLAS rows are in reliability/input.rs
// and reliability/security.rs) -------------------------------------------------------------

#[test]
fn cublaslt_malformed_rows_and_an_invalid_registry_are_said_and_nothing_breaks() {
    // A malformed line is skipped with its file and line; every valid row is served.
    let dir = scratch("lt-malformed");
    profile(&dir, &[]);
    std::fs::write(
        dir.join("profiles/fake-lt/tunableop_results0.csv"),
        format!(
            "Validator,CUBLASLT_VERSION,130100\nGemmTunableOp_BFloat16_TN,tn_8_8,Gemm_Cublaslt_nonsense,x\n{}\n",
            row(&key(8, 8, 8), TUNED)
        ),
    )
    .unwrap();
    let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("tunableop_results0.csv:2:"), "{stderr}");
    assert_eq!(stats(&dir)["served"], 1, "{stderr}");
    // profiles.json that is not JSON: said with its line, every call passes through and is
    // recorded.
    let dir = scratch("lt-bad-registry");
    profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
    let reg = dir.join("profiles/profiles.json");
    std::fs::write(&reg, "{\"profiles\": {,,}}\n").unwrap();
    let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8", "16,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("not valid JSON"), "{stderr}");
    assert_eq!(stats(&dir)["served"], 0);
    assert_eq!(miss_lines(&dir).len(), 2, "every shape is recorded");
}

#[test]
fn cublaslt_folders_are_0700_and_files_0600_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("lt-modes");
    profile(&dir, &[]);
    let miss_dir = dir.join("m1/m2");
    let mut cmd = host_cmd(&dir, true, &["8,8,8"]);
    cmd.env("TUNEDBLAS_MISS_DIR", &miss_dir);
    common::faults::with_umask(&mut cmd, 0);
    let out = common::faults::run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for d in [dir.join("m1"), miss_dir.clone()] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&miss_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.push(dir.join("stats.json"));
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
}

// ---- Killed from outside, and profiles that serve nothing, for cuBLASLt ------------------

#[test]
fn cublaslt_sigkill_and_sigterm_from_outside_keep_every_shape_seen() {
    use std::io::{BufRead, BufReader};
    for sig in [libc::SIGKILL, libc::SIGTERM] {
        let dir = scratch(&format!("lt-kill-{sig}"));
        profile(&dir, &[]);
        let calls: Vec<String> = (1..=40).map(|n| format!("{n},8,8")).collect();
        let mut args: Vec<&str> = calls.iter().map(String::as_str).collect();
        args.push("@pause");
        let mut cmd = host_cmd(&dir, true, &args);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut paused = false;
        for line in BufReader::new(stdout).lines() {
            if line.unwrap() == "paused" {
                paused = true;
                break;
            }
        }
        assert!(paused, "the host got to its pause");
        // SAFETY: a plain kill of our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = child.wait().unwrap();
        assert!(!status.success(), "{sig}: {status:?}");
        assert_eq!(
            miss_lines(&dir).len(),
            40,
            "signal {sig}: every shape seen is in the log"
        );
    }
}

#[test]
fn cublaslt_a_profile_for_another_build_or_an_unreadable_rank_serves_nothing_and_records() {
    // Registered for another sha256: never chosen.
    let dir = scratch("lt-other-sha");
    profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
    let reg = dir.join("profiles/profiles.json");
    let other = std::fs::read_to_string(&reg)
        .unwrap()
        .replace(&lt().sha, &"0".repeat(64));
    std::fs::write(&reg, other).unwrap();
    let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stats(&dir)["served"], 0, "{stderr}");
    assert_eq!(miss_lines(&dir).len(), 1);
    // The rank file is a directory: one line, nothing served, the shape recorded.
    let dir = scratch("lt-unreadable");
    profile(&dir, &[]);
    let rank = dir.join("profiles/fake-lt/tunableop_results0.csv");
    std::fs::remove_file(&rank).unwrap();
    std::fs::create_dir(&rank).unwrap();
    let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("tunableop_results0.csv"),
        "one line names the file: {stderr}"
    );
    assert_eq!(miss_lines(&dir).len(), 1);
}

#[test]
fn cublaslt_thirty_two_threads_give_exact_counts() {
    // One tuned shape and one missed, each called 32 x 100 times at once (after one call
    // each from the main thread): exact totals, one first sight, exact counts on disk.
    let dir = scratch("lt-threads");
    profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
    let out = common::faults::run_guarded(host_cmd(
        &dir,
        true,
        &["8,8,8", "16,8,8", "@threads:32:100"],
    ));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let s = stats(&dir);
    assert_eq!(s["calls"], 6402, "{s}");
    assert_eq!(s["served"], 3201, "{s}");
    assert_eq!(s["missed_calls"], 3201, "{s}");
    assert_eq!(miss_lines(&dir).len(), 1, "one first sight");
    assert_eq!(lt_counted_calls(&dir), 3201, "exact counts on disk");
}

/// Plants what `@VERB:DIR:VICTIM` plants in place of this process's cuBLASLt miss files in
/// a sticky shared folder (like /tmp; after a first miss made them), runs a call, and
/// checks: the host ends well, one warning, the victim untouched.
fn planted_case(verb: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch(&format!("lt-plant-{verb}"));
    profile(&dir, &[]);
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let step = format!("@{verb}:{}:{}", shared.display(), victim.display());
    let mut cmd = host_cmd(&dir, true, &["4,8,8", &step, "8,8,8", "16,8,8"]);
    cmd.env("TUNEDBLAS_MISS_DIR", &shared);
    let out = common::faults::run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{verb}: {stderr}");
    assert_eq!(
        stderr.matches("cannot write the miss log").count(),
        1,
        "{verb}: {stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "{verb}"
    );
}

#[test]
fn cublaslt_planted_symlinks_under_its_miss_file_names_are_not_followed() {
    planted_case("plant");
}

#[test]
fn cublaslt_a_file_size_limit_leaves_only_whole_lines_and_serving_goes_on() {
    // RLIMIT_FSIZE: writes past the limit are short, then fail (EFBIG), SIGXFSZ ignored as a
    // server would: the paths of a disk filling up.
    let dir = scratch("lt-fsize");
    profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
    let calls: Vec<String> = (100..200).map(|n| format!("{n},8,8")).collect();
    let mut args: Vec<&str> = calls.iter().map(String::as_str).collect();
    args.push("8,8,8");
    let mut cmd = host_cmd(&dir, true, &args);
    cmd.env_remove("FAKELT_TRACE");
    common::faults::with_file_size_limit(&mut cmd, 2010);
    let out = common::faults::run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("cannot write the miss log").count(),
        1,
        "{stderr}"
    );
    let lines = miss_lines(&dir);
    let want: Vec<String> = (100..200)
        .map(|n| {
            let (op, sig) = op_and_signature(&key(n, 8, 8));
            format!("{op},{sig}")
        })
        .collect();
    assert!(
        !lines.is_empty() && lines.len() < want.len(),
        "{}",
        lines.len()
    );
    assert_eq!(lines[..], want[..lines.len()], "a clean prefix, in order");
    assert_eq!(stats(&dir)["served"], 1, "serving goes on");
}

#[test]
fn cublaslt_a_planted_hard_link_or_fifo_under_its_log_name_is_refused() {
    planted_case("link");
    planted_case("fifo");
}

#[test]
fn cublaslt_calls_before_cublaslt_is_loaded_decide_nothing_for_good() {
    // A call reaching the interposer before any cuBLASLt exists gets NOT_INITIALIZED; once
    // a module brings cuBLASLt in, the profile is chosen and its row served.
    let dir = scratch("lt-late");
    profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
    let module = format!("@module:{}", lt().module.display());
    let out = common::faults::run_guarded(host_cmd_with(
        Path::new("-"),
        &dir,
        true,
        &[&module, "8,8,8"],
    ));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        text(&out.stdout).contains("early=1\n"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(stats(&dir)["served"], 1, "{stderr}");
}

#[test]
fn cublaslt_four_processes_at_once_each_record_their_own_shapes() {
    let dir = scratch("lt-four");
    profile(&dir, &[]);
    let children: Vec<_> = (0..4)
        .map(|p| {
            let calls: Vec<String> = (0..20)
                .map(|n| format!("{},8,8", 100 + p * 100 + n))
                .collect();
            let mut args: Vec<&str> = calls.iter().map(String::as_str).collect();
            args.push("@threads:4:25");
            let mut cmd = host_cmd(&dir, true, &args);
            cmd.env_remove("TUNEDBLAS_STATS")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    for c in children {
        let out = common::faults::wait_guarded(c, "lt_host");
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    // Each process: its own log with its 20 shapes and the 2 shared ones; every counts file
    // names them with exact calls (the shared ones 4 x 25 each).
    let mut logs = 0;
    for e in std::fs::read_dir(dir.join("misses")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with("-cublaslt-rank0.csv") {
            logs += 1;
            let lines = std::fs::read_to_string(&p).unwrap();
            assert_eq!(lines.lines().count(), 22, "{name}: {lines}");
        }
        if name.ends_with("-cublaslt-rank0.counts.csv") {
            let log = tunedblas_core::misses::file::read(&p).unwrap();
            assert!(log.malformed.is_empty());
            let shared: Vec<u64> = log
                .misses
                .iter()
                .filter(|m| [8, 16].contains(&m.key.m))
                .filter_map(|m| m.calls)
                .collect();
            assert_eq!(shared, vec![100, 100], "{name}");
        }
    }
    assert_eq!(logs, 4);
}

#[test]
fn cublaslt_a_truncated_results_file_serves_its_whole_rows_only() {
    // The last row cut inside its configuration (no time, no newline) could name another
    // algorithm: it is never served; the whole row before it is.
    let dir = scratch("lt-truncated");
    profile(&dir, &[]);
    let whole = row(&key(8, 8, 8), TUNED);
    let cut = row(&key(16, 8, 8), TUNED);
    let cut = &cut[..cut.rfind("_cluster").unwrap()];
    std::fs::write(
        dir.join("profiles/fake-lt/tunableop_results0.csv"),
        format!("Validator,CUBLASLT_VERSION,130100\n{whole}\n{cut}"),
    )
    .unwrap();
    let out = common::faults::run_guarded(host_cmd(&dir, true, &["8,8,8", "16,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stats(&dir)["served"], 1, "{stderr}");
    assert_eq!(
        miss_lines(&dir).len(),
        1,
        "the cut row's shape is a miss: {stderr}"
    );
}

/// `tunedblas lt ARGS` (and `tunedblas-lt ARGS`, which runs it) as built; (exit code,
/// stdout, stderr).
fn lt_cli(entry: &[&str], args: &[&str]) -> (i32, String, String) {
    let (program, first) = entry.split_first().unwrap();
    let out = Command::new(common::built(program))
        .args(first)
        .args(args)
        .env_remove("TUNEDBLAS_CUBLASLT")
        .env_remove("TUNEDBLAS_CUDART")
        .output()
        .expect("run tunedblas lt");
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn tunedblas_lt_reads_its_arguments_strictly_with_the_documented_exit_codes() {
    let dir = scratch("lt-cli");
    let stats = dir.join("s.json");
    std::fs::write(
        &stats,
        r#"{"calls":4,"served":4,"rows":1,"rows_hit":1,"rows_not_hit":[]}"#,
    )
    .unwrap();
    let stats = stats.to_str().unwrap();
    for entry in [&["tunedblas", "lt"][..], &["tunedblas-lt"]] {
        // The issue's example: an unknown option was ignored and the run passed.
        let (code, _, err) = lt_cli(entry, &["verify", "--stats", stats, "--no-such-flag", "1"]);
        assert_eq!(code, 2, "{entry:?}: {err}");
        assert!(
            err.contains("unexpected argument '--no-such-flag' found")
                && err.contains("run 'tunedblas help lt'"),
            "{err}"
        );
        let (code, _, err) = lt_cli(entry, &["verify", "--stat", stats]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("tip: a similar argument exists: '--stats'"),
            "{err}"
        );
        let (code, _, err) = lt_cli(entry, &["verify", "--stats"]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("a value is required for '--stats <STATS>'"),
            "{err}"
        );
        let (code, _, err) = lt_cli(entry, &["verify", "--stats", stats, "stray"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("unexpected argument 'stray'"), "{err}");
        let (code, _, err) = lt_cli(entry, &["tnue"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("(did you mean 'tune'?)"), "{err}");
        let (code, out, err) = lt_cli(entry, &["verify", "--stats", stats]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("1 of 1 rows hit"), "{out}");
    }
    // A stats file that shows a miss fails the check: exit 1.
    std::fs::write(
        dir.join("miss.json"),
        r#"{"rows":1,"rows_hit":1,"missed_shapes":1}"#,
    )
    .unwrap();
    let miss = dir.join("miss.json");
    let (code, _, err) = lt_cli(
        &["tunedblas", "lt"],
        &["verify", "--stats", miss.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{err}");
    // The options of tune are read before anything is loaded: a mistake is exit 2 on a
    // machine without CUDA; a library that cannot be loaded is exit 3.
    let tune = [
        "tune",
        "--shape",
        "512,256,2560",
        "--profiles",
        stats,
        "--name",
        "x",
    ];
    let (code, _, err) = lt_cli(
        &["tunedblas", "lt"],
        &[&tune[..], &["--timing", "clock"]].concat(),
    );
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = lt_cli(
        &["tunedblas", "lt"],
        &[&tune[..], &["--delay", "sleep"]].concat(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--delay takes spin or gemm"), "{err}");
    for bad in ["-1", "11", "NaN"] {
        let (code, _, err) = lt_cli(
            &["tunedblas", "lt"],
            &[&tune[..], &["--rest", bad]].concat(),
        );
        assert_eq!(code, 2, "--rest {bad}: {err}");
        assert!(
            err.contains("--rest takes a multiple of the sample's time from 0 to 10"),
            "{err}"
        );
    }
    let (code, _, err) = lt_cli(
        &["tunedblas", "lt"],
        &[&tune[..], &["--shape", "1,2"]].concat(),
    );
    assert_eq!(code, 2, "{err}");
    // --margin is in percent, as in `tunedblas tune`; a fraction is refused, not read as 0.03%.
    let (code, _, err) = lt_cli(
        &["tunedblas", "lt"],
        &[&tune[..], &["--margin", "0.03"]].concat(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--margin takes a percentage like 3 (for 3%)"),
        "{err}"
    );
    let (code, _, err) = lt_cli(
        &["tunedblas", "lt"],
        &[&tune[..], &["--cudart", "/no/such/libcudart.so"]].concat(),
    );
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("cannot load the CUDA runtime"), "{err}");
    let (code, out, _) = lt_cli(&["tunedblas"], &["help", "lt"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("tunedblas lt "), "{out}");
}

/// How many matmuls of a trace computed a D with `cols` columns (tokens) for the test's
/// 64-out, 64-in shapes.
fn matmuls_of(trace: &Path, cols: u32) -> usize {
    let needle = format!("matmul m=64 n={cols} k=64 ");
    std::fs::read_to_string(trace)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(&needle))
        .count()
}

/// The stand-in CUDA runtime (host memory, clock events) and the stand-in cuBLASLt, under
/// which the whole of `tunedblas lt tune` runs without a GPU (with `FAKELT_COMPUTE=1`).
fn stand_in_libs() -> (PathBuf, PathBuf) {
    let cudart = build::c_program(
        "libcudart.so.12",
        &["-shared", "-fPIC", "{hosts}/fake_cudart.c"].map(String::from),
    );
    (lt().libdir.join("libcublasLt.so.13"), cudart)
}

#[test]
fn tunedblas_lt_tune_killed_midway_resumes_and_tunes_each_shape_once() {
    let (lib, cudart) = stand_in_libs();
    let dir = scratch("lt-resume");
    let profiles = dir.join("profiles");
    let folder = profiles.join("stand-in");
    let run = |trace: &str, die_at_tokens: Option<&str>| {
        let mut cmd = Command::new(common::tunedblas());
        cmd.args(["lt", "tune", "--lib"])
            .arg(&lib)
            .arg("--cudart")
            .arg(&cudart)
            .args([
                "--shape", "64,2,64", "--shape", "64,3,64", "--shape", "64,4,64",
            ])
            .arg("--profiles")
            .arg(&profiles)
            .args(["--name", "stand-in", "--trials", "3", "--copy-mib", "1"])
            .args(["--confirm", "off"])
            .env("FAKELT_COMPUTE", "1")
            .env("FAKELT_TRACE", dir.join(trace))
            .env_remove("FAKELT_DIE_COLS")
            .env_remove("TUNEDBLAS_CUBLASLT")
            .env_remove("TUNEDBLAS_CUDART");
        if let Some(n) = die_at_tokens {
            cmd.env("FAKELT_DIE_COLS", n);
        }
        cmd.output().expect("run tunedblas lt tune")
    };
    // The process dies in the second shape's first matmul.
    let first = run("t1", Some("3"));
    assert_eq!(first.status.code(), Some(9), "{}", text(&first.stderr));
    assert!(folder.join(".campaign.partial.jsonl").is_file());
    assert!(!folder.join("tunableop_results0.csv").exists());
    // Rerun with the same inputs: the first shape comes from the checkpoint.
    let second = run("t2", None);
    let err = text(&second.stderr);
    assert!(second.status.success(), "{err}");
    assert!(
        err.contains("resuming: 1 of 3 shapes")
            && err.contains("[1/3] tn_64_2_64_ld_64_64_64: from the checkpoint"),
        "{err}"
    );
    let (t1, t2) = (dir.join("t1"), dir.join("t2"));
    assert!(matmuls_of(&t1, 2) > 0 && matmuls_of(&t2, 2) == 0);
    assert!(matmuls_of(&t1, 4) == 0 && matmuls_of(&t2, 3) > 0 && matmuls_of(&t2, 4) > 0);
    let rows = tunedblas_core::cublaslt::parse_results(
        &std::fs::read_to_string(folder.join("tunableop_results0.csv")).unwrap(),
    )
    .rows;
    let keys: Vec<LtKey> = rows.iter().map(|r| r.key).collect();
    assert_eq!(keys, [key(64, 2, 64), key(64, 3, 64), key(64, 4, 64)]);
    // Finished: the checkpoint is the campaign's record now.
    assert!(!folder.join(".campaign.partial.jsonl").exists());
    let records = std::fs::read_dir(folder.join("campaigns")).unwrap().count();
    assert_eq!(records, 1);
}

#[test]
fn tunedblas_lt_tune_adopts_only_what_its_fresh_recheck_child_confirms() {
    // The heuristic's algorithm is 4 times slower on the stand-in: the wider search finds
    // a faster one, and the `tunedblas lt recheck --rows` child tune starts confirms it.
    // Started as tunedblas-lt, which runs `tunedblas lt`.
    let (lib, cudart) = stand_in_libs();
    let dir = scratch("lt-fresh");
    let profiles = dir.join("profiles");
    let lt_cmd = |program: &str, args: &[&str]| {
        Command::new(common::built(program))
            .args(args)
            .arg("--lib")
            .arg(&lib)
            .arg("--cudart")
            .arg(&cudart)
            .arg("--profiles")
            .arg(&profiles)
            .args(["--name", "stand-in", "--trials", "3"])
            .env("FAKELT_COMPUTE", "1")
            .env("FAKELT_SLOW_HEURISTIC", "1")
            .env_remove("FAKELT_TRACE")
            .env_remove("FAKELT_DIE_COLS")
            .output()
            .expect("run the cuBLASLt harness")
    };
    let tune = [
        "tune",
        "--shape",
        "64,4,64",
        "--budget",
        "0.3",
        "--copy-mib",
        "1",
        "--rest",
        "0.5",
    ];
    let out = lt_cmd("tunedblas-lt", &tune);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("; idle 0.5x each sample's time after it"),
        "{err}"
    );
    assert!(err.contains("tunedblas lt recheck)"), "{err}");
    assert!(
        err.contains("fresh process: 1 of 1 proposed rows confirmed by the 3% margin"),
        "{err}"
    );
    // The shape is reported against its limits: which binds, and the grid of the fastest
    // configuration on the stand-in card's 8 SMs (its tiles are in the table; how many CTAs
    // depends on the split-K of the configuration that won).
    assert!(err.contains("matmul ") && err.contains("8 SMs"), "{err}");
    let stdout = text(&out.stdout);
    let why = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("limit: "))
        .unwrap_or_else(|| panic!("no limit line in {stdout}"));
    assert!(
        why.contains("-bound; fastest found")
            && why.contains(" CTAs (")
            && (why.contains("on 8 SMs: ") || why.contains(" waves")),
        "{why}"
    );
    let rank = profiles.join("stand-in/tunableop_results0.csv");
    let rows =
        tunedblas_core::cublaslt::parse_results(&std::fs::read_to_string(rank).unwrap()).rows;
    assert_eq!(rows.len(), 1);
    assert!(
        matches!(rows[0].action, tunedblas_core::cublaslt::LtAction::Config(c) if c.algo != 6),
        "{:?}",
        rows[0]
    );
    // The adopted row still wins when rechecked on its own.
    let out = lt_cmd("tunedblas", &["lt", "recheck"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("recheck: 1 of 1 adopted rows still win"),
        "{}",
        text(&out.stdout)
    );
}
