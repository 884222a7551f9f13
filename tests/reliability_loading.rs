//! Reliability, loading: rocBLAS loaded with `RTLD_GLOBAL`, with `RTLD_LOCAL`, late with
//! `dlopen` after the first GEMM calls already reached the interposer, two copies of the
//! same build from two paths; and processes that never use rocBLAS (a shell, a compiler,
//! Python) where the interposer stays inert and creates nothing. (The library linked
//! directly is every test in tests/interposer.rs.)

mod common;
mod faults;

use std::path::Path;
use std::process::Command;

use common::*;
use faults::*;

const HIT: &str = "ex:TN:h:64:24:40";
const MISS: &str = "ex:TN:h:8:8:8";

fn profile(dir: &Path) -> i32 {
    let sol = tuned(HIT);
    write_profile(
        &dir.join("profiles"),
        "ref-v4",
        &sha4(),
        &[row(HIT, &format!("Gemm_Rocblas_{sol}"))],
        1,
    );
    sol
}

fn dl_cmd(dir: &Path, preload: bool, steps: &[&str]) -> Command {
    let mut cmd = Command::new(&hosts().dl);
    cmd.args(steps);
    host_env(&mut cmd, dir, preload);
    cmd
}

fn module() -> String {
    artifacts().module4.display().to_string()
}

/// Runs dl_host with `steps` then `@main HIT MISS:2`, checks the results and what was
/// served and recorded; returns the run's stdout.
fn served_through_dlopen(name: &str, steps: &[String]) -> String {
    let dir = scratch(name);
    let sol = profile(&dir);
    let miss2 = format!("{MISS}:2");
    let mut argv: Vec<&str> = steps.iter().map(String::as_str).collect();
    argv.extend(["@main", HIT, &miss2]);
    let out = run_guarded(dl_cmd(&dir, true, &argv));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{}", text(&out.stdout));
    assert_eq!(
        results(&out),
        expected(name, &[HIT, &miss2], &[(HIT, sol)]),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "auto-selected for rocBLAS build {}",
            &sha4()[..12]
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("3 calls: 1 served, 0 default, 2 missed (1 shapes)"),
        "{stderr}"
    );
    let t = trace(&dir);
    assert_eq!(t[0]["solution"], sol.to_string());
    assert_eq!(t[0]["heuristic"], "0");
    let (lines, counts) = whole_miss_files(&dir);
    assert_eq!(lines, vec![miss_line(MISS)]);
    assert_eq!(counts, vec![(miss_line(MISS), 2)]);
    text(&out.stdout)
}

#[test]
fn rocblas_loaded_with_rtld_local() {
    served_through_dlopen("rel-local", &[format!("@open:{}:local", module())]);
}

#[test]
fn rocblas_loaded_with_rtld_global() {
    served_through_dlopen("rel-global", &[format!("@open:{}:global", module())]);
}

#[test]
fn rocblas_dlopened_late_after_the_first_calls() {
    // The first GEMM call reaches the interposer before any rocBLAS is loaded: it must
    // answer cleanly (not_implemented, as a missing library would) without deciding
    // anything for good, then serve once rocBLAS arrives.
    let stdout = served_through_dlopen(
        "rel-late",
        &[
            "@early".into(),
            "@early".into(),
            format!("@open:{}:local", module()),
        ],
    );
    assert_eq!(stdout.matches("early=2\n").count(), 2, "{stdout}");
    // Without the interposer the symbol does not exist at all.
    let dir = scratch("rel-late-plain");
    let out = run_guarded(dl_cmd(&dir, false, &["@early"]));
    assert_eq!(text(&out.stdout), "early=absent\n");
}

#[test]
fn two_copies_of_one_build_from_two_paths() {
    // A wheel-style copy (`torch/lib/librocblas.so`) loaded first, then the system-style
    // one: two distinct files with the same bytes, both mapped. The build is identified by
    // content, so the profile is found whichever copy serves.
    let work = scratch("rel-two-copies-lib");
    let wheel = work.join("site-packages/torch/lib");
    std::fs::create_dir_all(&wheel).unwrap();
    let copy = wheel.join("librocblas.so");
    std::fs::copy(artifacts().libdir4.join("librocblas.so.4"), &copy).unwrap();
    let system = artifacts().libdir4.join("librocblas.so.4");
    let stdout = served_through_dlopen(
        "rel-two-copies",
        &[
            format!("@open:{}:local", copy.display()),
            format!("@open:{}:local", module()),
            format!("@open:{}:local", system.display()),
            "@maps:librocblas".into(),
        ],
    );
    let mapped: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("mapped="))
        .collect();
    assert_eq!(mapped.len(), 2, "both copies are loaded: {stdout}");
}

/// A folder with nothing in it but `home/`, and an environment that points every
/// default of the interposer into it, so anything it created would show.
fn inert_env(cmd: &mut Command, dir: &Path) {
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.join("home"))
        .env("TMPDIR", dir.join("home"))
        .env("LD_PRELOAD", &artifacts().preload);
}

fn assert_untouched(dir: &Path) {
    let mut left: Vec<String> = walk(dir)
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let allowed = ["home", "home/hello.c", "home/hello"];
    left.retain(|p| !allowed.contains(&p.as_str()));
    assert!(left.is_empty(), "created by the interposer: {left:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn inert_in_a_shell_a_compiler_and_python_without_rocblas() {
    let dir = scratch("rel-inert");
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::fs::write(
        dir.join("home/hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n",
    )
    .unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["sh".into(), "-c".into(), "echo hello | tr h j; exit 3".into()],
            "jello\n",
        ),
        (
            vec![
                "cc".into(),
                "-o".into(),
                dir.join("home/hello").display().to_string(),
                dir.join("home/hello.c").display().to_string(),
            ],
            "",
        ),
        (vec![dir.join("home/hello").display().to_string()], "hi\n"),
        (
            vec![
                "python3".into(),
                "-c".into(),
                "import os, subprocess, sys; print(subprocess.run(['true']).returncode); sys.stdout.flush(); os._exit(0)"
                    .into(),
            ],
            "0\n",
        ),
    ];
    for (argv, want) in cases {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        inert_env(&mut cmd, &dir);
        let out = run_guarded(cmd);
        let code = if argv[0] == "sh" { 3 } else { 0 };
        assert_eq!(
            out.status.code(),
            Some(code),
            "{argv:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), want, "{argv:?}");
        assert!(
            !text(&out.stderr).contains("tunedblas"),
            "{argv:?}: {}",
            text(&out.stderr)
        );
    }
    assert_untouched(&dir);
}
