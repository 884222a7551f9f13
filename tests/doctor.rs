//! `tunedblas doctor`, as an operator runs it: on refblas and on the cuBLASLt and hipBLASLt
//! stand-ins every step passes and the bundle holds what the doctor says it does; nothing is
//! written outside the bundle (not the user's profile store, miss folder, cache or temp
//! folder); a broken setup is one FAIL line naming its step, SKIP after it, and a non-zero
//! exit.

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{assert_has, scratch, text};
use serde_json::Value;

/// One library's stand-in: the arguments that name it, and what makes it compute.
struct Backend {
    name: &'static str,
    lib: PathBuf,
    /// Found by the doctor through this variable and `--backend`, not named by `--lib`.
    found_by: Option<(&'static str, &'static str)>,
    args: Vec<OsString>,
    env: Vec<(&'static str, &'static str)>,
}

fn refblas() -> Backend {
    Backend {
        name: "rocBLAS",
        lib: common::artifacts().lib5(),
        found_by: None,
        args: vec![],
        env: vec![("REFBLAS_SLOW_HEURISTIC", "4")],
    }
}

fn cublaslt() -> Backend {
    Backend {
        name: "cuBLASLt",
        lib: common::lt::cublaslt().lib(),
        found_by: Some(("TUNEDBLAS_CUBLASLT", "cublaslt")),
        args: vec!["--cudart".into(), common::lt::cudart().into()],
        env: vec![("FAKELT_COMPUTE", "1"), ("FAKELT_SLOW_HEURISTIC", "1")],
    }
}

fn hipblaslt() -> Backend {
    Backend {
        name: "hipBLASLt",
        lib: common::lt::hipblaslt().lib(),
        found_by: None,
        args: vec!["--workspace".into(), "8192".into()],
        env: vec![
            ("FAKEHIPLT_COMPUTE", "1"),
            ("FAKEHIPLT_SLOW_HEURISTIC", "1"),
        ],
    }
}

/// The user's own settings, as a user has them: a profile store, a miss folder, a cache
/// and a temp folder of their own, each holding a file the doctor must leave alone.
fn user_env(cmd: &mut Command, home: &Path) {
    for d in ["profiles", "misses", "cache", "tmp", "xdg"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
        std::fs::write(home.join(d).join("mine.txt"), d).unwrap();
    }
    common::folders_under(cmd, home);
    cmd.env("HOME", home)
        .env("XDG_CACHE_HOME", home.join("xdg"))
        .env("TMPDIR", home.join("tmp"))
        .env_remove("LD_PRELOAD")
        .env_remove("TUNEDBLAS_PROFILE")
        .env_remove("TUNEDBLAS_DISABLE")
        .env_remove("REFBLAS_TRACE");
    for v in common::LT_LIBRARY_VARS {
        cmd.env_remove(v);
    }
}

/// Every file under `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// `tunedblas doctor` on `b` from the working folder `cwd`, the user's files in `home`.
fn doctor(b: &Backend, cwd: &Path, home: &Path, extra: &[&str]) -> Output {
    let mut cmd = Command::new(common::tunedblas());
    cmd.current_dir(cwd).arg("doctor").args(&b.args).args(extra);
    user_env(&mut cmd, home);
    match b.found_by {
        Some((var, backend)) => cmd.env(var, &b.lib).args(["--backend", backend]),
        None => cmd.arg("--lib").arg(&b.lib),
    };
    cmd.envs(b.env.iter().copied());
    cmd.output().expect("run tunedblas doctor")
}

/// The step lines: (number, verdict, name).
fn steps(stdout: &str) -> Vec<(usize, String, String)> {
    stdout
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (n, total) = f.next()?.split_once('/')?;
            (total == "11").then_some(())?;
            Some((
                n.parse().ok()?,
                f.next()?.to_string(),
                f.next()?.to_string(),
            ))
        })
        .collect()
}

const NAMES: [&str; 11] = [
    "library",
    "preload",
    "device",
    "intercept",
    "record",
    "baseline",
    "tune",
    "profile",
    "serve",
    "outputs",
    "timing",
];

fn passes_every_step_and_the_bundle_holds_what_it_says(b: Backend, dir: &Path) {
    let (cwd, home) = (dir.join("cwd"), dir.join("home"));
    std::fs::create_dir_all(&cwd).unwrap();
    let user_files = |home: &Path| {
        ["profiles", "misses", "cache", "tmp", "xdg"]
            .map(|d| (d, tree(&home.join(d))))
            .to_vec()
    };
    // No --out: a fresh doctor-<date>-<time> in the working folder.
    let out = doctor(&b, &cwd, &home, &[]);
    let stdout = text(&out.stdout);
    let said = format!("{stdout}\nstderr:\n{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{said}");
    let s = steps(&stdout);
    assert_eq!(
        s.iter().map(|x| x.2.as_str()).collect::<Vec<_>>(),
        NAMES,
        "{said}"
    );
    for (n, verdict, name) in &s {
        // A slower served run is said, not failed (the stand-ins time on a busy CPU); the
        // result line then counts it as the one WARN.
        let ok = verdict == "PASS" || (name == "timing" && verdict == "WARN");
        assert!(ok, "step {n} {name}: {verdict}\n{said}");
    }
    assert!(
        stdout.contains(&format!("tunes and serves {} on this machine", b.name))
            && stdout
                .lines()
                .any(|l| l.starts_with("RESULT: PASS  11 of 11 steps passed")
                    || l.starts_with("RESULT: PASS  10 of 11 steps passed, 1 WARN")),
        "{said}"
    );
    // It says which library it took and why.
    let why = match b.found_by {
        Some((var, _)) => format!("(${var}; {} (--backend))", b.name),
        None => "(--lib)".into(),
    };
    let first = stdout.lines().find(|l| l.contains(" library ")).unwrap();
    assert!(
        first.contains(&format!("{} {} {why}", b.name, b.lib.display())),
        "{said}"
    );
    // Nothing outside the bundle: the user's folders hold only their own file, the working
    // folder only the bundle.
    for (d, files) in user_files(&home) {
        assert_eq!(files, vec!["mine.txt".to_string()], "{d}: {said}");
    }
    let made: Vec<_> = std::fs::read_dir(&cwd)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    let bundle = &made[0];
    let name = bundle.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("doctor-") && name.len() == "doctor-20260101-120000".len(),
        "{name}"
    );

    // The lines printed, the environment, the misses, the profile, the status files, the
    // counters and every child's output.
    let files = tree(bundle);
    let printed = std::fs::read_to_string(bundle.join("doctor.txt")).unwrap();
    assert!(stdout.starts_with(&printed), "{printed}\n---\n{stdout}");
    let env: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("environment.json")).unwrap()).unwrap();
    let sha = tunedblas_core::identity::sha256_file(&b.lib).unwrap();
    assert_eq!(env["sha256"], sha.as_str(), "{env}");
    assert_eq!(env["backend"], b.name, "{env}");
    assert_eq!(Path::new(env["library"].as_str().unwrap()), b.lib, "{env}");
    assert!(
        env["version"].as_str().is_some_and(|v| !v.is_empty()),
        "{env}"
    );
    let shapes = env["shapes"].as_array().unwrap().len();
    assert_eq!(shapes, 4, "{env}");
    let has = |pred: &dyn Fn(&str) -> bool| files.iter().any(|f| pred(f));
    assert!(
        has(&|f| f.starts_with("misses/") && f.ends_with("-rank0.csv")),
        "{files:?}"
    );
    assert!(
        has(&|f| f.starts_with("misses/") && f.ends_with(".status.json")),
        "{files:?}"
    );
    for log in ["device", "record", "baseline", "tune", "served"] {
        assert!(
            has(&|f| f == format!("logs/{log}.stderr.txt")),
            "{log}: {files:?}"
        );
    }
    let tune_log = std::fs::read_to_string(bundle.join("logs/tune.stderr.txt")).unwrap();
    assert!(!tune_log.is_empty());
    // The profile is for exactly this build, and it was served: every row hit.
    let reg: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("profiles/profiles.json")).unwrap())
            .unwrap();
    let entries: Vec<&Value> = reg["profiles"].as_object().unwrap().values().collect();
    assert_eq!(entries.len(), 1, "{reg}");
    assert_eq!(entries[0]["lib_sha256"], sha.as_str(), "{reg}");
    let rows = std::fs::read_to_string(
        bundle
            .join("profiles")
            .join(entries[0]["dir"].as_str().unwrap())
            .join("tunableop_results0.csv"),
    )
    .unwrap();
    let n_rows = rows
        .lines()
        .filter(|l| !l.starts_with("Validator,"))
        .count();
    assert!(n_rows >= 1, "{rows}");
    let served: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("stats/served.json")).unwrap()).unwrap();
    assert_eq!(served["rows"], n_rows as u64, "{served}");
    assert_eq!(served["rows_hit"], served["rows"], "{served}");
    assert_eq!(served["fallbacks"], 0, "{served}");
    let record: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("stats/record.json")).unwrap()).unwrap();
    assert_eq!(record["missed_shapes"], shapes as u64, "{record}");
    // The steps as data, and the archive holding every file of the folder.
    let report: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("doctor.json")).unwrap()).unwrap();
    assert_eq!(report["passed"], true);
    assert_eq!(report["steps"].as_array().unwrap().len(), 11);
    let tar = Command::new("tar")
        .arg("tzf")
        .arg(bundle.join("doctor-bundle.tar.gz"))
        .output()
        .expect("tar lists the archive");
    assert!(tar.status.success(), "{}", text(&tar.stderr));
    let mut listed: Vec<String> = text(&tar.stdout)
        .lines()
        .map(|l| l.strip_prefix(&format!("{name}/")).unwrap_or(l).to_string())
        .collect();
    listed.sort();
    let mut want: Vec<String> = files
        .into_iter()
        .filter(|f| f != "doctor-bundle.tar.gz")
        .collect();
    want.sort();
    assert_eq!(listed, want);
}

#[test]
fn refblas_passes_every_step() {
    one(
        |d| passes_every_step_and_the_bundle_holds_what_it_says(refblas(), d),
        "refblas",
    );
}

#[test]
fn the_cublaslt_stand_in_passes_every_step() {
    one(
        |d| passes_every_step_and_the_bundle_holds_what_it_says(cublaslt(), d),
        "cublaslt",
    );
}

#[test]
fn the_hipblaslt_stand_in_passes_every_step() {
    one(
        |d| passes_every_step_and_the_bundle_holds_what_it_says(hipblaslt(), d),
        "hipblaslt",
    );
}

/// The doctor's campaigns time on the host's CPU: one at a time.
fn one(test: impl FnOnce(&Path), name: &str) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let dir = scratch(&format!("doctor-{name}"));
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    test(&dir);
}

/// A broken setup: exit `code`, step `failed` FAIL with what to do, every later step SKIP,
/// the RESULT line naming the step, and the bundle written anyway.
fn fails_at(out: &Output, bundle: &Path, failed: usize, code: i32) {
    let stdout = text(&out.stdout);
    let said = format!("{stdout}\nstderr:\n{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(code), "{said}");
    let s = steps(&stdout);
    assert_eq!(s.len(), 11, "{said}");
    for (n, verdict, _) in &s {
        let want = match n.cmp(&failed) {
            std::cmp::Ordering::Less => "PASS",
            std::cmp::Ordering::Equal => "FAIL",
            std::cmp::Ordering::Greater => "SKIP",
        };
        assert_eq!(verdict, want, "step {n}\n{said}");
    }
    let name = NAMES[failed - 1];
    let fail_line = stdout.lines().position(|l| l.contains(" FAIL ")).unwrap();
    assert!(
        stdout
            .lines()
            .nth(fail_line + 1)
            .unwrap()
            .trim_start()
            .starts_with("-> "),
        "{said}"
    );
    assert!(
        stdout.contains(&format!("RESULT: FAIL  step {failed} ({name}) failed")),
        "{said}"
    );
    assert!(
        text(&out.stderr).contains(&format!("step {failed} ({name}) failed")),
        "{said}"
    );
    let printed = std::fs::read_to_string(bundle.join("doctor.txt")).unwrap();
    assert!(printed.contains(" FAIL ") && bundle.join("doctor-bundle.tar.gz").is_file());
}

#[test]
fn a_library_that_is_none_of_the_three_fails_the_first_step() {
    let dir = scratch("doctor-not-a-library");
    let bundle = dir.join("bundle");
    // The interposer exports the GEMMs of all three but none of their heuristics.
    let b = Backend {
        lib: common::artifacts().preload.clone(),
        ..refblas()
    };
    let out = doctor(
        &b,
        &dir,
        &dir.join("home"),
        &["--out", bundle.to_str().unwrap()],
    );
    fails_at(&out, &bundle, 1, 3);
    assert!(text(&out.stdout).contains("not rocBLAS, hipBLASLt or cuBLASLt"));
}

/// The doctor on refblas with `--preload <preload>` (in `dir`): it must fail at step
/// `failed` with exit code 1, saying `says`.
fn a_wrong_preload_fails_at(dir: &Path, preload: &Path, failed: usize, says: &str) {
    let bundle = dir.join("bundle");
    let out = doctor(
        &refblas(),
        dir,
        &dir.join("home"),
        &[
            "--out",
            bundle.to_str().unwrap(),
            "--preload",
            preload.to_str().unwrap(),
        ],
    );
    fails_at(&out, &bundle, failed, 1);
    assert_has(&text(&out.stdout), says);
}

#[test]
fn a_preload_that_cannot_be_found_fails_its_step() {
    let dir = scratch("doctor-no-preload");
    let missing = dir.join("nowhere/libtunedblas.so");
    a_wrong_preload_fails_at(&dir, &missing, 2, "no such file");
}

#[test]
fn a_preload_that_does_not_interpose_fails_the_intercept_step() {
    let dir = scratch("doctor-wrong-preload");
    // refblas exports rocblas_gemm_ex too, but it is no interposer: it counts nothing.
    let wrong = common::artifacts().lib5();
    a_wrong_preload_fails_at(&dir, &wrong, 4, "it did not load in the child");
}

#[test]
fn a_bundle_folder_that_is_not_empty_is_refused_untouched() {
    let dir = scratch("doctor-busy-out");
    std::fs::write(dir.join("keep.txt"), "mine").unwrap();
    let out = doctor(
        &refblas(),
        &dir,
        &dir.join("home"),
        &["--out", dir.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_has(&text(&out.stderr), "not empty");
    let mut left = tree(&dir);
    left.retain(|f| !f.starts_with("home/"));
    assert_eq!(left, vec!["keep.txt".to_string()]);
}
