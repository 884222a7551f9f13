//! End-to-end on the CPU: the interposer's cuBLASLt path against a stand-in cuBLASLt
//! (`tests/hosts/fake_cublaslt.c`, the real C ABI, no GPU). The host loads a module linked
//! against `libcublasLt.so.13` with `RTLD_LOCAL`, as Python loads PyTorch, so the real
//! `cublasLtMatmul` is only found through the interposer's fallback search. What ran is read
//! from the stand-in's trace.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::lt::{builds_in_trace, cublaslt as lt, cudart, key, row, stats, TUNED};
use common::{artifacts, assert_has, scratch, text, trace};
use tunedblas_core::cublaslt::{op_and_signature, LtKey};

#[test]
fn without_the_preload_the_heuristic_runs() {
    let dir = scratch("lt-plain");
    let out = lt().host(&dir, false, &["2560,16,1536"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = trace(&dir);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0]["algo"], "6");
    assert!(lt().libdir.join("libcublasLt.so.13").is_file());
}

#[test]
fn a_tuned_row_is_rebuilt_and_served_and_other_shapes_still_miss() {
    let dir = scratch("lt-serve");
    lt().profile(
        &dir,
        &[
            row(&key(2560, 16, 1536), TUNED),
            row(&key(512, 4, 2560), "Default"),
        ],
    );
    let out = lt().host(
        &dir,
        true,
        &["2560,16,1536", "512,4,2560", "2560,16,1536", "336,32,10240"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_has(
        &stderr,
        &format!(
            "cuBLASLt: profile fake-lt auto-selected for cuBLASLt build {} (2 rows, rank 0",
            &lt().sha[..12]
        ),
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
        lt().miss_lines(&dir),
        ["GemmTunableOp_BFloat16_TN,tn_336_32_10240_ld_10240_10240_336"]
    );
    let s = stats(&dir);
    assert_eq!(s["served"], 2, "{s}");
    assert_eq!(s["default"], 1);
    assert_eq!(s["missed_calls"], 1);
    assert_eq!(s["rows_hit"], 2);
    assert_has(&stderr, "cuBLASLt: 4 calls: 2 served, 1 default, 1 missed (1 shapes), 0 passed through, 0 fallbacks");
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
    lt().profile(
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
    let out = lt().host(&dir, true, &calls);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "every call still succeeds: {stderr}");
    let t = trace(&dir);
    // Two attempts with the algorithm that fails to run, each followed by the caller's;
    // the caller's every other time.
    let algos: Vec<&str> = t.iter().map(|l| l["algo"].as_str()).collect();
    assert_eq!(algos, ["6", "21", "6", "6", "6", "21", "6", "6"], "{t:?}");
    assert_eq!((t[1]["ok"].as_str(), t[5]["ok"].as_str()), ("0", "0"));
    assert_has(&stderr, "cublasLtMatmulAlgoCheck returned 15");
    assert_has(&stderr, "cublasLtMatmulAlgoInit(algo 150) returned 15");
    assert_has(&stderr, "failed with status 15; the row is quarantined");
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
        lt().host_cmd(&dir, preload, &["64,8,64"])
            .env("LT_HOST_VARIANT", "stale")
            .env("FAKELT_KEEP_DESTROYED", "1")
            .output()
            .unwrap()
    };
    let (plain, preloaded) = (run(false), run(true));
    let stderr = text(&preloaded.stderr);
    assert_eq!(text(&plain.stdout), "call=64,8,64 status=7\n");
    assert_eq!(text(&preloaded.stdout), text(&plain.stdout), "{stderr}");
    assert!(
        lt().miss_lines(&dir).is_empty(),
        "{:?}",
        lt().miss_lines(&dir)
    );
    let s = stats(&dir);
    assert_eq!(s["missed_calls"], 0, "{s}");
    assert_eq!(s["passed_through"], 1, "{s}");
}

#[test]
fn disabled_means_untouched() {
    let dir = scratch("lt-disabled");
    lt().profile(&dir, &[row(&key(2560, 16, 1536), TUNED)]);
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
    assert!(lt().miss_lines(&dir).is_empty());
}

// ---------------------------------------------------------------------------------------
// The lifecycle's fault rows for the cuBLASLt backend (the rocBLAS side's are in
// reliability/life.rs): the two backends share one lifecycle, and these show it holds for
// this one too.
// ---------------------------------------------------------------------------------------

#[test]
fn cublaslt_a_vfork_child_does_not_finish_the_parents_run() {
    let dir = scratch("lt-vfork");
    lt().profile(&dir, &[]);
    let out =
        common::faults::run_guarded(lt().host_cmd(&dir, true, &["8,8,8", "@vfork-fail", "16,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches(" calls: ").count(),
        1,
        "one summary: {stderr}"
    );
    assert_has(&stderr, "cuBLASLt: 2 calls");
    assert_eq!(lt().counted_calls(&dir), 2, "the parent's counts");
}

#[test]
fn cublaslt_every_way_out_writes_counts_stats_and_summary() {
    for last in ["@Exit", "@exec:/bin/true"] {
        let dir = scratch(&format!("lt-out-{}", last.len()));
        lt().profile(&dir, &[]);
        let out = common::faults::run_guarded(lt().host_cmd(
            &dir,
            true,
            &["8,8,8", "8,8,8", "16,8,8", last],
        ));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{last}: {stderr}");
        assert!(stderr.contains("cuBLASLt: 3 calls"), "{last}: {stderr}");
        assert_eq!(lt().counted_calls(&dir), 3, "{last}");
        assert_eq!(stats(&dir)["calls"], 3, "{last}");
    }
}

#[test]
fn cublaslt_stats_are_never_written_through_a_planted_symlink() {
    let dir = scratch("lt-stats-symlink");
    lt().profile(&dir, &[]);
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("stats.json")).unwrap();
    let out = common::faults::run_guarded(lt().host_cmd(&dir, true, &["8,8,8"]));
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

#[test]
fn cublaslt_two_builds_side_by_side_each_call_runs_in_its_own_build() {
    let dir = scratch("lt-two-builds");
    lt().two_build_profiles(&dir, &key(8, 8, 8));
    let module2 = format!("@module:{}", lt().module2.display());
    let out = common::faults::run_guarded(lt().host_cmd(&dir, true, &["8,8,8", &module2, "8,8,8"]));
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

/// The same module closed and opened again, and a module of the other build opened where
/// it was: every call site is looked up again after each close, so each call runs in its
/// caller's build, with objects that build made, and serving follows the build loaded.
#[test]
fn cublaslt_modules_closed_and_opened_again_keep_each_call_in_its_own_build() {
    let dir = scratch("lt-reopen");
    lt().two_build_profiles(&dir, &key(8, 8, 8));
    let module1 = format!("@module:{}", lt().module.display());
    let module2 = format!("@module:{}", lt().module2.display());
    let out = common::faults::run_guarded(lt().host_cmd(
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

// ---- The profile's files, for cuBLASLt (the rocBLAS rows are in reliability/loading.rs) ---

#[test]
fn cublaslt_a_fifo_or_dev_zero_as_the_rank_file_never_blocks_the_host() {
    for what in ["fifo", "zero"] {
        let dir = scratch(&format!("lt-special-{what}"));
        lt().profile(&dir, &[]);
        let rank = dir.join("profiles/fake-lt/tunableop_results0.csv");
        std::fs::remove_file(&rank).unwrap();
        if what == "fifo" {
            let c = std::ffi::CString::new(rank.to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        } else {
            std::os::unix::fs::symlink("/dev/zero", &rank).unwrap();
        }
        let out = common::faults::run_guarded(lt().host_cmd(&dir, true, &["8,8,8", "16,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
        assert!(
            stderr.contains("not a regular file"),
            "{what}: one line says why: {stderr}"
        );
        assert_eq!(
            lt().miss_lines(&dir).len(),
            2,
            "{what}: the shapes are still recorded"
        );
    }
}

#[test]
fn cublaslt_a_byte_order_mark_does_not_hide_the_first_row() {
    let dir = scratch("lt-bom");
    let r = row(&key(8, 8, 8), TUNED);
    lt().profile(&dir, &[]);
    // The row first, right after a BOM (no validator line before it).
    std::fs::write(
        dir.join("profiles/fake-lt/tunableop_results0.csv"),
        format!("\u{feff}{r}\n"),
    )
    .unwrap();
    let out = common::faults::run_guarded(lt().host_cmd(&dir, true, &["8,8,8"]));
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
        lt().profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
        let elsewhere = dir.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let miss_dir = if what == "symlink" {
            std::os::unix::fs::symlink(&elsewhere, dir.join("link")).unwrap();
            dir.join("link")
        } else {
            std::fs::write(dir.join("a-file"), "x").unwrap();
            dir.join("a-file/misses")
        };
        let mut cmd = lt().host_cmd(&dir, true, &["8,8,8", "16,8,8", "24,8,8"]);
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
    lt().profile(&dir, &[]);
    std::fs::write(
        dir.join("profiles/fake-lt/tunableop_results0.csv"),
        format!(
            "Validator,CUBLASLT_VERSION,130100\nGemmTunableOp_BFloat16_TN,tn_8_8,Gemm_Cublaslt_nonsense,x\n{}\n",
            row(&key(8, 8, 8), TUNED)
        ),
    )
    .unwrap();
    let out = common::faults::run_guarded(lt().host_cmd(&dir, true, &["8,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_has(&stderr, "tunableop_results0.csv:2:");
    assert_eq!(stats(&dir)["served"], 1, "{stderr}");
    // profiles.json that is not JSON: said with its line, every call passes through and is
    // recorded.
    let dir = scratch("lt-bad-registry");
    lt().profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
    let reg = dir.join("profiles/profiles.json");
    std::fs::write(&reg, "{\"profiles\": {,,}}\n").unwrap();
    let out = common::faults::run_guarded(lt().host_cmd(&dir, true, &["8,8,8", "16,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_has(&stderr, "not valid JSON");
    assert_eq!(stats(&dir)["served"], 0);
    assert_eq!(lt().miss_lines(&dir).len(), 2, "every shape is recorded");
}

#[test]
fn cublaslt_folders_are_0700_and_files_0600_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("lt-modes");
    lt().profile(&dir, &[]);
    let miss_dir = dir.join("m1/m2");
    let mut cmd = lt().host_cmd(&dir, true, &["8,8,8"]);
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
        lt().profile(&dir, &[]);
        let calls: Vec<String> = (1..=40).map(|n| format!("{n},8,8")).collect();
        let mut args: Vec<&str> = calls.iter().map(String::as_str).collect();
        args.push("@pause");
        let mut cmd = lt().host_cmd(&dir, true, &args);
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
            lt().miss_lines(&dir).len(),
            40,
            "signal {sig}: every shape seen is in the log"
        );
    }
}

#[test]
fn cublaslt_a_profile_for_another_build_or_an_unreadable_rank_serves_nothing_and_records() {
    // Registered for another sha256: never chosen.
    let dir = scratch("lt-other-sha");
    lt().profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
    let reg = dir.join("profiles/profiles.json");
    let other = std::fs::read_to_string(&reg)
        .unwrap()
        .replace(&lt().sha, &"0".repeat(64));
    std::fs::write(&reg, other).unwrap();
    let out = common::faults::run_guarded(lt().host_cmd(&dir, true, &["8,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stats(&dir)["served"], 0, "{stderr}");
    assert_eq!(lt().miss_lines(&dir).len(), 1);
    // The rank file is a directory: one line, nothing served, the shape recorded.
    let dir = scratch("lt-unreadable");
    lt().profile(&dir, &[]);
    let rank = dir.join("profiles/fake-lt/tunableop_results0.csv");
    std::fs::remove_file(&rank).unwrap();
    std::fs::create_dir(&rank).unwrap();
    let out = common::faults::run_guarded(lt().host_cmd(&dir, true, &["8,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("tunableop_results0.csv"),
        "one line names the file: {stderr}"
    );
    assert_eq!(lt().miss_lines(&dir).len(), 1);
}

/// Plants what `@VERB:DIR:VICTIM` plants in place of this process's cuBLASLt miss files in
/// a sticky shared folder (like /tmp; after a first miss made them), runs a call, and
/// checks: the host ends well, one warning, the victim untouched.
fn planted_case(verb: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch(&format!("lt-plant-{verb}"));
    lt().profile(&dir, &[]);
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let step = format!("@{verb}:{}:{}", shared.display(), victim.display());
    let mut cmd = lt().host_cmd(&dir, true, &["4,8,8", &step, "8,8,8", "16,8,8"]);
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
    lt().profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
    let calls: Vec<String> = (100..200).map(|n| format!("{n},8,8")).collect();
    let mut args: Vec<&str> = calls.iter().map(String::as_str).collect();
    args.push("8,8,8");
    let mut cmd = lt().host_cmd(&dir, true, &args);
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
    let lines = lt().miss_lines(&dir);
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
    lt().profile(&dir, &[row(&key(8, 8, 8), TUNED)]);
    let module = format!("@module:{}", lt().module.display());
    let out = common::faults::run_guarded(lt().host_cmd_with(
        Path::new("-"),
        &dir,
        true,
        &[&module, "8,8,8"],
    ));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_has(&text(&out.stdout), "early=1\n");
    assert_eq!(stats(&dir)["served"], 1, "{stderr}");
}

#[test]
fn cublaslt_four_processes_at_once_each_record_their_own_shapes() {
    let dir = scratch("lt-four");
    lt().profile(&dir, &[]);
    let children: Vec<_> = (0..4)
        .map(|p| {
            let calls: Vec<String> = (0..20)
                .map(|n| format!("{},8,8", 100 + p * 100 + n))
                .collect();
            let mut args: Vec<&str> = calls.iter().map(String::as_str).collect();
            args.push("@threads:4:25");
            let mut cmd = lt().host_cmd(&dir, true, &args);
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
    lt().profile(&dir, &[]);
    let whole = row(&key(8, 8, 8), TUNED);
    let cut = row(&key(16, 8, 8), TUNED);
    let cut = &cut[..cut.rfind("_cluster").unwrap()];
    std::fs::write(
        dir.join("profiles/fake-lt/tunableop_results0.csv"),
        format!("Validator,CUBLASLT_VERSION,130100\n{whole}\n{cut}"),
    )
    .unwrap();
    let out = common::faults::run_guarded(lt().host_cmd(&dir, true, &["8,8,8", "16,8,8"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stats(&dir)["served"], 1, "{stderr}");
    assert_eq!(
        lt().miss_lines(&dir).len(),
        1,
        "the cut row's shape is a miss: {stderr}"
    );
}

/// `tunedblas ARGS` as built, without the environment's choice of cuBLASLt; (exit code,
/// stdout, stderr).
fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(common::tunedblas())
        .args(args)
        .env_remove("TUNEDBLAS_CUBLASLT")
        .env_remove("TUNEDBLAS_CUDART")
        .output()
        .expect("run tunedblas");
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// `tunedblas lt` is gone: each of its subcommands says what replaces it. `verify --stats`
/// checks a cuBLASLt run's counters and `tune` reads a cuBLASLt campaign's options, both
/// strictly, with the exit codes of every command: a mistake is exit 2 before anything is
/// loaded, a library that cannot be loaded exit 3.
#[test]
fn the_lt_commands_are_gone_and_cublaslt_arguments_are_read_strictly() {
    let dir = scratch("lt-cli");
    let stats = dir.join("s.json");
    std::fs::write(
        &stats,
        r#"{"library":"cublaslt","calls":4,"served":4,"default":0,"missed_calls":0,"missed_shapes":0,"fallbacks":0,"rows":1,"rows_hit":1,"rows_not_hit":[]}"#,
    )
    .unwrap();
    let stats = stats.to_str().unwrap();
    let (code, _, err) = cli(&["lt", "verify", "--stats", stats]);
    assert_eq!(code, 2, "{err}");
    assert_has(&err, "`lt verify` is now `tunedblas verify --stats FILE`");
    let (code, out, err) = cli(&["verify", "--stats", stats]);
    assert_eq!(code, 0, "{err}");
    assert_has(&out, "1 of 1 rows hit");
    let (code, _, err) = cli(&["verify", "--stats", stats, "--no-such-flag", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("unexpected argument '--no-such-flag' found")
            && err.contains("run 'tunedblas help verify'"),
        "{err}"
    );
    let (code, _, err) = cli(&["verify", "--stat", stats]);
    assert_eq!(code, 2, "{err}");
    assert_has(&err, "tip: a similar argument exists: '--stats'");
    let (code, _, err) = cli(&["verify", "--stats"]);
    assert_eq!(code, 2, "{err}");
    assert_has(&err, "a value is required for '--stats <FILE>'");
    // A stats file that shows a miss fails the check: exit 1.
    let miss = dir.join("miss.json");
    std::fs::write(
        &miss,
        r#"{"library":"cublaslt","calls":1,"served":0,"default":0,"missed_calls":1,"missed_shapes":1,"fallbacks":0,"rows":1,"rows_hit":1}"#,
    )
    .unwrap();
    let (code, _, err) = cli(&["verify", "--stats", miss.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    // A cuBLASLt campaign's options, read before anything is loaded.
    let lib = lt().libdir.join("libcublasLt.so.13");
    let tune = [
        "tune",
        "--lib",
        lib.to_str().unwrap(),
        "--shape",
        "512,256,2560",
        "--profiles",
        stats,
    ];
    for (extra, said) in [
        (
            &["--timing", "clock"][..],
            "invalid value 'clock' for '--timing",
        ),
        (
            &["--rest", "-1"],
            "--rest takes a multiple of the sample's time from 0 to 10",
        ),
        (
            &["--rest", "11"],
            "--rest takes a multiple of the sample's time from 0 to 10",
        ),
        (&["--shape", "1,2"], "--shape takes N,M,K"),
        // --margin is in percent in every command; a fraction is refused, not read as 0.03%.
        (
            &["--margin", "0.03"],
            "--margin takes a percentage like 3 (for 3%)",
        ),
    ] {
        let (code, _, err) = cli(&[&tune[..], extra].concat());
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(said), "{extra:?}: {err}");
    }
    let (code, _, err) = cli(&[&tune[..], &["--cudart", "/no/such/libcudart.so"]].concat());
    assert_eq!(code, 3, "{err}");
    assert_has(&err, "cannot load the CUDA runtime");
    let (code, out, _) = cli(&["help", "lt"]);
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

#[test]
fn a_cublaslt_campaign_killed_midway_resumes_and_tunes_each_shape_once() {
    let (lib, cudart) = (lt().lib(), cudart());
    let dir = scratch("lt-resume");
    let profiles = dir.join("profiles");
    let run = |trace: &str, die_at_tokens: Option<&str>| {
        let mut cmd = Command::new(common::tunedblas());
        cmd.args(["tune", "--lib"])
            .arg(&lib)
            .arg("--cudart")
            .arg(&cudart)
            .args([
                "--shape", "64,2,64", "--shape", "64,3,64", "--shape", "64,4,64",
            ])
            .arg("--profiles")
            .arg(&profiles)
            .args([
                "--trials",
                "3",
                "--budget",
                "0.5",
                "--rest",
                "0",
                "--no-limits",
            ])
            .args(["--confirm", "off", "--rotate-mib", "0.02"])
            // The stand-in's algorithms all time alike, on a noisy CPU: every shape gets
            // its Default row, however wide its spread.
            .args(["--noisy", "100000"])
            .env("FAKELT_COMPUTE", "1")
            .env("FAKELT_TRACE", dir.join(trace))
            .env_remove("FAKELT_DIE_COLS")
            .env_remove("TUNEDBLAS_CUBLASLT")
            .env_remove("TUNEDBLAS_CUDART");
        if let Some(n) = die_at_tokens {
            cmd.env("FAKELT_DIE_COLS", n);
        }
        cmd.output().expect("run tunedblas tune")
    };
    // The process dies in the second shape's first matmul.
    let first = run("t1", Some("3"));
    assert_eq!(first.status.code(), Some(9), "{}", text(&first.stderr));
    let folder = common::profile_folder(&profiles);
    assert!(folder.join(".campaign.partial.jsonl").is_file());
    assert!(!folder.join("tunableop_results0.csv").exists());
    // Rerun with the same inputs: the first shape comes from the checkpoint.
    let second = run("t2", None);
    let out = common::ok(&second);
    assert_has(
        &out,
        "resuming: 1 of 3 shapes were finished before; 2 to go",
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

/// cuBLASLt's limits line says why the fastest configuration is where it is: the grid it
/// launches on the card's SMs (8 on the stand-in; its tiles are in the table). The
/// heuristic's algorithm is 4 times slower on the stand-in: the wider search finds faster.
#[test]
fn the_limit_line_says_why_with_the_grid_the_fastest_launches() {
    let (lib, cudart) = (lt().lib(), cudart());
    let dir = scratch("lt-limits");
    let out = Command::new(common::tunedblas())
        .args(["tune", "--lib"])
        .arg(&lib)
        .arg("--cudart")
        .arg(&cudart)
        .arg("--profiles")
        .arg(dir.join("profiles"))
        .args([
            "--shape", "64,4,64", "--trials", "3", "--budget", "0.3", "--rest", "0",
        ])
        .args(["--confirm", "off", "--rotate-mib", "0.02"])
        .env("FAKELT_COMPUTE", "1")
        .env("FAKELT_SLOW_HEURISTIC", "1")
        .env_remove("FAKELT_TRACE")
        .env_remove("FAKELT_DIE_COLS")
        .output()
        .unwrap();
    let stdout = common::ok(&out);
    assert_has(&stdout, "matmul ");
    let why = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("limit: "))
        .unwrap_or_else(|| panic!("no limit line in {stdout}"));
    assert!(
        why.contains("-bound")
            && why.contains(" CTAs (")
            && (why.contains("on 8 SMs: ") || why.contains(" waves")),
        "{why}"
    );
    let rank = common::profile_folder(&dir.join("profiles")).join("tunableop_results0.csv");
    let rows =
        tunedblas_core::cublaslt::parse_results(&std::fs::read_to_string(rank).unwrap()).rows;
    assert_eq!(rows.len(), 1);
    assert!(
        matches!(rows[0].action, tunedblas_core::cublaslt::LtAction::Config(c) if c.algo != 6),
        "{:?}",
        rows[0]
    );
}
