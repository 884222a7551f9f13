//! End-to-end on the CPU: the interposer's cuBLASLt path against a stand-in cuBLASLt
//! (`tests/hosts/fake_cublaslt.c`, the real C ABI, no GPU). The host loads a module linked
//! against `libcublasLt.so.13` with `RTLD_LOCAL`, as Python loads PyTorch, so the real
//! `cublasLtMatmul` is only found through the interposer's fallback search. What ran is read
//! from the stand-in's trace. What both Lt backends do alike (the lifecycle's fault rows,
//! the profile's and the miss folder's bad files, builds side by side) is written once in
//! `tests/lt_backends.rs` and runs here on both.

mod common;

use std::path::Path;
use std::process::Command;

use common::lt::{cublaslt as lt, cudart, key, row, stats, STANDIN_TUNE, TUNED};
use common::{assert_has, scratch, text, trace};
use tunedblas_core::cublaslt::LtKey;

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
    let stderr = lt().host_ok(
        &dir,
        &["2560,16,1536", "512,4,2560", "2560,16,1536", "336,32,10240"],
    );
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
            .args(["--trials", "3", "--budget", "0.5"])
            // The stand-in's algorithms all time alike: every shape gets its Default row.
            .args(STANDIN_TUNE)
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
