//! End-to-end: real host processes (a C program linked against `librocblas.so.N`, and a
//! Python program that loads rocBLAS in a local scope) run under `LD_PRELOAD=libtunedblas.so`
//! against refblas, the CPU reference rocBLAS. What was served is read from refblas's trace.

mod common;

use std::process::Command;

use common::*;

fn host4(dir: &std::path::Path, preload: bool, args: &[&str]) -> std::process::Output {
    run(host4_cmd(dir, preload, args))
}

/// Runs a host command, checks it exited 0; returns its output and stderr.
fn run_ok(cmd: Command) -> (std::process::Output, String) {
    let out = run(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    (out, stderr)
}

/// The gemm_host (`.so.4`) under the preload, checked to exit 0.
fn served4(dir: &std::path::Path, args: &[&str]) -> (std::process::Output, String) {
    run_ok(host4_cmd(dir, true, args))
}

/// A `ref-v4` profile serving [`tuned_solution`] for `spec`; returns that solution.
fn serve_tuned(dir: &std::path::Path, spec: &str) -> i32 {
    let sol = tuned_solution(spec);
    Profile::v4(dir).tuned(spec, sol).write();
    sol
}

/// A profile `ref-v5` (the 5.x build's) serving `sol` for [`SPEC`].
fn v5_profile(dir: &std::path::Path, sol: i32) {
    Profile::new(&dir.join("profiles"), "ref-v5", &sha5())
        .tuned(SPEC, sol)
        .write();
}

/// A solution other than the heuristic's, so serving it is visible.
fn tuned_solution(spec: &str) -> i32 {
    let sols = solutions(&artifacts().host4, spec);
    assert!(
        sols.len() >= 2,
        "refblas offers several solutions for {spec}: {sols:?}"
    );
    *sols.last().unwrap()
}

const SPEC: &str = "ex:TN:h:64:24:40";

#[test]
fn serves_the_tuned_solution_of_the_matching_build() {
    let dir = scratch("serve");
    let sol = tuned_solution(SPEC);
    let sha = sha4();
    Profile::new(&dir.join("profiles"), "ref-v4", &sha)
        .tuned(SPEC, sol)
        .write();

    let (served, stderr) = served4(&dir, &[SPEC]);
    assert_has(
        &stderr,
        &format!(
            "profile ref-v4 auto-selected for rocBLAS build {}",
            &sha[..12]
        ),
    );
    assert_has(&stderr, "(1 rows, rank 0)");
    // The start line names the interposer's version, as `tunedblas --version` does.
    let tag = format!("[tunedblas {}]", env!("CARGO_PKG_VERSION"));
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("auto-selected") && l.ends_with(&tag)),
        "{stderr}"
    );
    assert_has(&stderr, "1 calls: 1 served, 0 default, 0 missed (0 shapes)");
    let t = trace(&dir);
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0]["solution"], sol.to_string());
    assert_eq!(t[0]["heuristic"], "0");

    // The result is exactly what that solution computes when asked for directly.
    let direct_dir = scratch("serve-direct");
    let direct = host4(&direct_dir, false, &["--solution", &sol.to_string(), SPEC]);
    assert_eq!(results(&served), results(&direct));
    // ... and differs in bits from the heuristic's (refblas solutions differ in summation
    // order), so the comparison above really tells the two apart.
    let plain = host4(&scratch("serve-plain"), false, &[SPEC]);
    assert_eq!(trace(&scratch_path("serve-plain"))[0]["heuristic"], "1");
    assert_eq!(results(&plain)[0].1, 0);
}

fn scratch_path(name: &str) -> std::path::PathBuf {
    artifacts().work.join(name)
}

#[test]
fn a_profile_for_another_build_is_not_chosen() {
    let dir = scratch("other-build");
    let sol = tuned_solution(SPEC);
    v5_profile(&dir, sol);
    let (_, stderr) = served4(&dir, &[SPEC]);
    assert_has(&stderr, "no profile in");
    assert_eq!(
        trace(&dir)[0]["heuristic"],
        "1",
        "nothing served from another build's profile"
    );
    assert_eq!(
        misses(&dir).0,
        vec![miss_line(SPEC)],
        "the shape is recorded instead"
    );

    // Naming it explicitly is refused too, unless the operator forces it.
    let named = |name: &str, forced: bool| {
        let dir = scratch(name);
        v5_profile(&dir, sol);
        let mut cmd = host4_cmd(&dir, true, &[SPEC]);
        cmd.env("TUNEDBLAS_PROFILE", "ref-v5");
        if forced {
            cmd.env("TUNEDBLAS_ALLOW_MISMATCH", "1");
        }
        (text(&run(cmd).stderr), trace(&dir).remove(0))
    };
    let (stderr, t) = named("other-build-explicit", false);
    assert_has(&stderr, "refusing TUNEDBLAS_PROFILE=ref-v5");
    assert_eq!(t["heuristic"], "1");

    let (stderr, t) = named("other-build-forced", true);
    assert_has(&stderr, "forced by TUNEDBLAS_ALLOW_MISMATCH");
    assert_eq!(t["solution"], sol.to_string());
    assert_eq!(t["heuristic"], "0");
}

#[test]
fn a_bad_solution_falls_back_and_the_result_is_still_right() {
    let dir = scratch("bad-id");
    // 77777 is no refblas solution: rocBLAS answers invalid_value.
    Profile::v4(&dir).row(SPEC, "Gemm_Rocblas_77777").write();
    let (out, stderr) = served4(&dir, &[&format!("{SPEC}:3")]);
    assert_eq!(
        stderr.matches("quarantined").count(),
        1,
        "reported once: {stderr}"
    );
    assert_has(
        &stderr,
        "3 calls: 0 served, 0 default, 0 missed (0 shapes), 2 passed through, 1 fallbacks",
    );
    let plain = host4(&scratch("bad-id-plain"), false, &[&format!("{SPEC}:3")]);
    assert_eq!(
        results(&out)[0].2,
        results(&plain)[0].2,
        "same output as without tunedblas"
    );
    assert!(trace(&dir).iter().all(|t| t["heuristic"] == "1"));
}

#[test]
fn every_missing_shape_is_logged_once_with_its_count() {
    let dir = scratch("misses");
    let served = "ex:TN:h:32:8:16";
    serve_tuned(&dir, served);
    let a = "ex:TN:h:48:512:32";
    let b = "sgemm:NN:s:16:16:16";
    let c = "sb:NT:b:8:8:8";
    let args = [
        format!("{a}:5"),
        format!("{served}:2"),
        b.into(),
        format!("{c}:2"),
        format!("{a}:2"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_, stderr) = served4(&dir, &args);
    let (lines, counts) = misses(&dir);
    assert_eq!(
        lines,
        vec![miss_line(a), miss_line(b), miss_line(c)],
        "each shape once, in order of first sight"
    );
    let mut counts = counts;
    counts.sort();
    let mut want = vec![(miss_line(a), 7), (miss_line(b), 1), (miss_line(c), 2)];
    want.sort();
    assert_eq!(counts, want);
    assert_has(
        &stderr,
        "12 calls: 2 served, 0 default, 10 missed (3 shapes)",
    );
}

#[test]
fn eight_threads_at_once_lose_nothing() {
    let dir = scratch("threads");
    let hit = "ex:TN:h:16:8:16";
    let sol = serve_tuned(&dir, hit);
    let specs = [
        "ex:TN:h:16:4:16:25",
        "ex:TN:h:16:12:16:25",
        "ex:TN:h:16:8:16:25",
        "sgemm:NN:s:8:8:8:25",
    ];
    let mut args = vec!["--threads", "8"];
    args.extend(specs);
    let (_, stderr) = served4(&dir, &args);
    let (lines, counts) = misses(&dir);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(counts.iter().all(|(_, n)| *n == 8 * 25), "{counts:?}");
    assert_has(
        &stderr,
        "800 calls: 200 served, 0 default, 600 missed (3 shapes)",
    );
    let t = trace(&dir);
    assert_eq!(
        t.iter()
            .filter(|l| l["solution"] == sol.to_string() && l["heuristic"] == "0")
            .count(),
        200
    );
}

#[test]
fn python_loading_rocblas_locally_is_served() {
    let dir = scratch("python");
    let sol = serve_tuned(&dir, SPEC);
    let miss = "ex:TN:h:8:8:8";
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("tests/hosts/py_host.py"))
        .arg(&artifacts().module4)
        .args(["--exit-hard", SPEC, &format!("{miss}:4")]);
    host_env(&mut cmd, &dir, true);
    let (_, stderr) = run_ok(cmd);
    assert_has(&stderr, "auto-selected");
    let t = trace(&dir);
    assert_eq!(
        t[0]["solution"],
        sol.to_string(),
        "served although dlsym(RTLD_NEXT) finds nothing"
    );
    // os._exit skips atexit: the interposed _exit still flushed the counts and the summary.
    assert_eq!(misses(&dir).1, vec![(miss_line(miss), 4)]);
    assert_has(&stderr, "5 calls: 1 served");
}

#[test]
fn typed_sgemm_and_hgemm_rows_are_served_through_gemm_ex() {
    let dir = scratch("typed");
    let s = "sgemm:NN:s:32:16:24";
    let h = "hgemm:NT:hh:32:16:24";
    let ss = tuned_solution(s);
    let hs = tuned_solution(h);
    let rows = [
        row(s, &format!("Gemm_Rocblas_{ss}")),
        row(h, &format!("Gemm_Rocblas_{hs}")),
    ];
    Profile::v4(&dir).lines(&rows).write();
    let (out, _) = served4(&dir, &[s, h]);
    let t = trace(&dir);
    assert_eq!(
        (t[0]["func"].as_str(), t[0]["solution"].clone()),
        ("rocblas_gemm_ex", ss.to_string())
    );
    assert_eq!(
        (t[1]["func"].as_str(), t[1]["solution"].clone()),
        ("rocblas_gemm_ex", hs.to_string())
    );
    // Same bits as asking gemm_ex for that solution directly.
    let direct = host4(
        &scratch("typed-direct"),
        false,
        &["--solution", &ss.to_string(), "ex:NN:s:32:16:24"],
    );
    assert_eq!(results(&out)[0].2, results(&direct)[0].2);
}

#[test]
fn default_rows_pass_through_and_count_as_served_by_design() {
    let dir = scratch("default");
    Profile::v4(&dir).row(SPEC, "Default").write();
    let out = host4(&dir, true, &[&format!("{SPEC}:2")]);
    let stderr = text(&out.stderr);
    assert_has(&stderr, "2 calls: 0 served, 2 default, 0 missed (0 shapes)");
    assert!(trace(&dir).iter().all(|t| t["heuristic"] == "1"));
    assert!(misses(&dir).0.is_empty());
}

#[test]
fn a_caller_that_chose_a_solution_is_left_alone() {
    let dir = scratch("caller-chose");
    let sols = solutions(&artifacts().host4, SPEC);
    let (tuned, chosen) = (sols[sols.len() - 1], sols[0]);
    Profile::v4(&dir).tuned(SPEC, tuned).write();
    let out = host4(&dir, true, &["--solution", &chosen.to_string(), SPEC]);
    assert_has(
        &text(&out.stderr),
        "1 calls: 0 served, 0 default, 0 missed (0 shapes), 1 passed through",
    );
    assert_eq!(trace(&dir)[0]["solution"], chosen.to_string());
}

#[test]
fn inert_in_processes_that_never_call_rocblas() {
    let dir = scratch("inert");
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo hello; true"]);
    host_env(&mut cmd, &dir, true);
    let out = run(cmd);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "hello\n");
    assert_eq!(
        text(&out.stderr),
        "",
        "no log line in a process without rocBLAS"
    );
    for sub in ["misses", "cache", "profiles"] {
        assert!(!dir.join(sub).exists(), "{sub} must not be created");
    }
}

#[test]
fn the_5x_flavour_serves_large_negative_ids() {
    let dir = scratch("v5");
    let sols = solutions(&artifacts().host5, SPEC);
    let tensile = *sols
        .iter()
        .find(|&&s| s <= -11)
        .expect("refblas 5.x offers Tensile-style ids");
    v5_profile(&dir, tensile);
    let mut cmd = Command::new(&artifacts().host5);
    cmd.arg(SPEC);
    host_env(&mut cmd, &dir, true);
    run_ok(cmd);
    assert_eq!(trace(&dir)[0]["solution"], tensile.to_string());
    assert_eq!(trace(&dir)[0]["heuristic"], "0");
}

#[test]
fn each_device_is_served_from_its_own_rank_file() {
    let dir = scratch("ranks");
    let sols = non_heuristic_solutions(&artifacts().host4, SPEC);
    assert!(sols.len() >= 2, "{sols:?}");
    let (r0, r1) = (sols[0], sols[sols.len() - 1]);
    Profile::v4(&dir).tuned(SPEC, r0).write();
    let rank1 = format!("{}\n", row(SPEC, &format!("Gemm_Rocblas_{r1}")));
    std::fs::write(dir.join("profiles/ref-v4/tunableop_results1.csv"), rank1).unwrap();
    let miss = "ex:TN:h:8:8:8";
    served4(&dir, &["--device", "1", SPEC, miss]);
    assert_eq!(
        trace(&dir)[0]["solution"],
        r1.to_string(),
        "device 1 uses tunableop_results1.csv"
    );
    let names: Vec<String> = std::fs::read_dir(dir.join("misses"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // (The live status, `<process>.status.json`, is one per process, not per device.)
        .filter(|n| !n.ends_with(".status.json"))
        .collect();
    assert!(
        names.iter().all(|n| n.contains("-rank1.")),
        "misses go to the device's file: {names:?}"
    );
}

#[test]
fn strided_batched_rows_are_served_typed_and_ex() {
    let dir = scratch("strided");
    let ex = "sb:NT:h:16:12:8";
    let typed = "ssb:NN:s:16:12:8";
    let (se, st) = (tuned_solution(ex), tuned_solution(typed));
    let rows = [
        row(ex, &format!("Gemm_Rocblas_{se}")),
        row(typed, &format!("Gemm_Rocblas_{st}")),
    ];
    Profile::v4(&dir).lines(&rows).write();
    let (_, stderr) = served4(&dir, &[ex, typed]);
    assert_has(&stderr, "2 calls: 2 served");
    let t = trace(&dir);
    let seen: Vec<[&str; 3]> = t
        .iter()
        .map(|l| [&l["func"], &l["solution"], &l["batch"]].map(String::as_str))
        .collect();
    let strided = "rocblas_gemm_strided_batched_ex";
    assert_eq!(
        seen,
        [
            [strided, se.to_string().as_str(), "3"],
            [strided, st.to_string().as_str(), "2"]
        ]
    );
}

/// rocBLAS reads ROCBLAS_INTERNAL_FP16_ALT_IMPL and then runs every f16 call with (or
/// without) fp16_alt_impl, whatever flag the caller passed: the key is the problem that
/// runs, so a process with the variable set is served the fp16_alt_impl row.
#[test]
fn rocblas_internal_fp16_alt_impl_is_in_the_key() {
    let dir = scratch("fp16-alt-impl-env");
    let sols = solutions(&artifacts().host4, SPEC);
    assert!(sols.len() >= 2, "{sols:?}");
    let (plain_sol, alt_sol) = (sols[0], *sols.last().unwrap());
    let plain = spec_key(SPEC);
    let alt = plain.with_flags(tunedblas_core::abi::FLAG_FP16_ALT_IMPL);
    let rows: Vec<String> = [(plain, plain_sol), (alt, alt_sol)]
        .iter()
        .map(|(k, s)| {
            let (op, sig) = tunedblas_core::tunableop::op_and_signature(k);
            format!("{op},{sig},Gemm_Rocblas_{s},0.01")
        })
        .collect();
    Profile::v4(&dir).lines(&rows).write();
    for (value, want) in [
        (None, plain_sol),
        (Some("1"), alt_sol),
        (Some("0"), plain_sol),
    ] {
        let _ = std::fs::remove_file(dir.join("trace.log"));
        let mut cmd = host4_cmd(&dir, true, &[SPEC]);
        match value {
            Some(v) => cmd.env("ROCBLAS_INTERNAL_FP16_ALT_IMPL", v),
            None => cmd.env_remove("ROCBLAS_INTERNAL_FP16_ALT_IMPL"),
        };
        let (_, stderr) = run_ok(cmd);
        let t = trace(&dir);
        assert_eq!(
            t[0]["solution"],
            want.to_string(),
            "ROCBLAS_INTERNAL_FP16_ALT_IMPL={value:?}: {stderr}"
        );
    }
}
