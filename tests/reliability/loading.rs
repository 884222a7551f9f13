//! Reliability, loading: rocBLAS loaded with `RTLD_GLOBAL`, with `RTLD_LOCAL`, late with
//! `dlopen` after the first GEMM calls already reached the interposer, two copies of the
//! same build from two paths; and processes that never use rocBLAS (a shell, a compiler,
//! Python) where the interposer stays inert and creates nothing. (The library linked
//! directly is every test in tests/interposer.rs.) Then the profile itself: files that are
//! not regular files (a FIFO, a symlink to `/dev/zero`), a byte order mark, and rank files
//! loaded on first use from their device.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::common::faults::*;
use crate::common::*;
use tunedblas_core::profile::{LazyTables, RankState, RankTable};
use tunedblas_core::table::Action;

const HIT: &str = "ex:TN:h:64:24:40";
const MISS: &str = "ex:TN:h:8:8:8";

fn dl_cmd(dir: &Path, preload: bool, steps: &[&str]) -> Command {
    host_cmd(&hosts().dl, dir, preload, steps)
}

/// Runs dl_host under the preload with `steps`, checks it exited 0; returns its stderr and
/// what refblas traced.
fn dl_run(dir: &Path, steps: &[&str]) -> (String, Vec<HashMap<String, String>>) {
    let out = run_guarded(dl_cmd(dir, true, steps));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    (stderr, trace(dir))
}

/// The builds the traced calls ran in: "4 5" for librocblas.so.4 then librocblas.so.5.
fn builds(t: &[HashMap<String, String>]) -> String {
    let libs: Vec<&str> = t
        .iter()
        .map(|c| c["lib"].trim_start_matches("librocblas.so."))
        .collect();
    libs.join(" ")
}

/// dl_host's step that dlopens `module` with RTLD_LOCAL.
fn open_local(module: String) -> String {
    format!("@open:{module}:local")
}

fn module() -> String {
    artifacts().module4.display().to_string()
}

/// Runs dl_host with `steps` then `@main HIT MISS:2`, checks the results and what was
/// served and recorded; returns the run's stdout.
fn served_through_dlopen(name: &str, steps: &[String]) -> String {
    let dir = scratch(name);
    let sol = profile_with_hit(&dir, HIT);
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
    assert_has(
        &stderr,
        &format!("auto-selected for rocBLAS build {}", &sha4()[..12]),
    );
    assert_has(&stderr, "3 calls: 1 served, 0 default, 2 missed (1 shapes)");
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
    served_through_dlopen("rel-local", &[open_local(module())]);
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
        &["@early".into(), "@early".into(), open_local(module())],
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
            open_local(module()),
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

/// Two copies of the interposer at two paths (an installed one and a build), for
/// `LD_PRELOAD` or `dlopen`.
fn two_interposers(dir: &Path) -> (PathBuf, PathBuf) {
    let (a, b) = (
        dir.join("installed/libtunedblas.so"),
        dir.join("build/libtunedblas.so"),
    );
    for p in [&a, &b] {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        copy_executable(&artifacts().preload, p);
    }
    (a, b)
}

#[test]
fn a_second_copy_of_the_interposer_stands_aside() {
    // Both in LD_PRELOAD: the first serves, the second passes everything to it (before,
    // their rocblas_create_handle called each other until the stack ran out: SIGSEGV).
    let name = "rel-two-interposers";
    let dir = scratch(name);
    let sol = profile_with_hit(&dir, HIT);
    let (a, b) = two_interposers(&dir);
    let mut cmd = fault_cmd(&dir, true, &[HIT, MISS, MISS]);
    cmd.env("LD_PRELOAD", format!("{} {}", a.display(), b.display()))
        .env("TUNEDBLAS_LOG", "debug");
    let out = run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert_eq!(
        results(&out),
        expected(name, &[HIT, MISS, MISS], &[(HIT, sol)])
    );
    assert_eq!(
        stderr.matches(" calls: ").count(),
        1,
        "one summary, the first copy's: {stderr}"
    );
    assert_has(&stderr, "3 calls: 1 served, 0 default, 2 missed (1 shapes)");
    let (lines, counts) = whole_miss_files(&dir);
    assert_eq!(lines, vec![miss_line(MISS)]);
    assert_eq!(counts, vec![(miss_line(MISS), 2)]);
    // Disabled, whatever the order: the host's own results, nothing recorded.
    for order in [[&a, &b], [&b, &a]] {
        let dir = scratch(&format!("{name}-off"));
        let (a2, b2) = two_interposers(&dir);
        let [x, y] = if order[0] == &a {
            [&a2, &b2]
        } else {
            [&b2, &a2]
        };
        let mut cmd = fault_cmd(&dir, true, &[HIT, MISS]);
        cmd.env("LD_PRELOAD", format!("{} {}", x.display(), y.display()))
            .env("TUNEDBLAS_DISABLE", "1");
        let (out, _) = run_ok(cmd);
        assert_eq!(
            results(&out),
            reference(&format!("{name}-off"), &[HIT, MISS])
        );
        assert!(!dir.join("misses").exists());
    }
    // A copy dlopen'ed into a process the first copy serves: no second summary, no
    // second set of files, the calls served by the first.
    let dir = scratch(&format!("{name}-dlopen"));
    let sol = profile_with_hit(&dir, HIT);
    let (_, b) = two_interposers(&dir);
    let miss2 = format!("{MISS}:2");
    let steps = [
        format!("@open:{}:global", b.display()),
        open_local(module()),
        "@main".into(),
        HIT.into(),
        miss2.clone(),
    ];
    let argv = strs(&steps);
    let (out, stderr) = run_ok(dl_cmd(&dir, true, &argv));
    assert_eq!(
        results(&out),
        expected(&format!("{name}-dlopen"), &[HIT, &miss2], &[(HIT, sol)])
    );
    assert_eq!(stderr.matches(" calls: ").count(), 1, "{stderr}");
    let statuses = std::fs::read_dir(dir.join("misses"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".status.json")
        })
        .count();
    assert_eq!(statuses, 1, "one set of files");
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

// ---------------------------------------------------------------------------------------
// Library lifetime: the module that linked rocBLAS closed and opened again, a 4.x module
// closed and a 5.x one opened, and both builds loaded side by side in local scopes.
// ---------------------------------------------------------------------------------------

/// A profile store with one profile per build: `HIT` tuned to a solution of each build's
/// own (never its heuristic's). Returns (v4 solution, v5 solution).
/// [`two_build_profiles`] in a fresh folder `name`: (folder, v4 solution, v5 solution).
fn two_builds(name: &str) -> (PathBuf, i32, i32) {
    let dir = scratch(name);
    let (s4, s5) = two_build_profiles(&dir);
    (dir, s4, s5)
}

fn two_build_profiles(dir: &Path) -> (i32, i32) {
    let s4 = tuned(HIT);
    let s5 = *non_heuristic_solutions(&artifacts().host5, HIT)
        .last()
        .unwrap();
    let profiles = dir.join("profiles");
    let sha5 = sha5();
    let mut reg = serde_json::Map::new();
    for (name, sha, sol) in [("ref-v4", sha4(), s4), ("ref-v5", sha5, s5)] {
        std::fs::create_dir_all(profiles.join(name)).unwrap();
        let text = format!(
            "Validator,PT_VERSION,2.7.0\n{}\n",
            row(HIT, &format!("Gemm_Rocblas_{sol}"))
        );
        std::fs::write(profiles.join(name).join("tunableop_results0.csv"), text).unwrap();
        reg.insert(
            name.into(),
            serde_json::json!({"dir": name, "lib_sha256": sha, "rows_per_rank": 1, "status": "test"}),
        );
    }
    std::fs::write(
        profiles.join("profiles.json"),
        serde_json::json!({ "profiles": reg }).to_string(),
    )
    .unwrap();
    (s4, s5)
}

fn module5() -> String {
    hosts().module5.display().to_string()
}

#[test]
fn closing_and_reopening_the_module_that_links_rocblas_does_not_crash() {
    let (dir, s4, _) = two_builds("rel-reopen");
    let open = open_local(module());
    let run = format!("@run:{HIT}");
    // Another library opened in between takes the freed addresses, so the build comes
    // back somewhere else: addresses found before the close must not be used.
    let other = open_local(module5());
    let (stderr, t) = dl_run(
        &dir,
        &[&open, &run, "@close", &other, &open, &run, "@close"],
    );
    assert_eq!(t.len(), 2, "{t:?}");
    for call in &t {
        assert_eq!(call["lib"], "librocblas.so.4");
        assert_eq!(
            call["solution"],
            s4.to_string(),
            "served both times: {stderr}"
        );
    }
    assert_has(&stderr, "2 calls: 2 served");
}

#[test]
fn a_5x_build_opened_after_the_4x_one_was_closed_gets_its_own_profile() {
    let (dir, s4, s5) = two_builds("rel-4-then-5");
    let (open4, open5, run) = (
        open_local(module()),
        open_local(module5()),
        format!("@run:{HIT}"),
    );
    let (stderr, t) = dl_run(&dir, &[&open4, &run, "@close", &open5, &run]);
    assert_eq!(builds(&t), "4 5", "{t:?}");
    assert_eq!(t[0]["solution"], s4.to_string());
    assert_eq!(
        t[1]["solution"],
        s5.to_string(),
        "the 5.x call ran in 5.x with the 5.x profile's solution: {stderr}"
    );
    assert_has(&stderr, "profile ref-v5 auto-selected");
    assert_has(&stderr, "2 calls: 2 served");
}

#[test]
fn two_builds_side_by_side_each_call_runs_in_its_own_build() {
    let (dir, s4, _) = two_builds("rel-two-builds");
    let steps = [
        open_local(module()),
        open_local(module5()),
        format!("@runat:0:{HIT}"),
        format!("@runat:1:{HIT}"),
        format!("@runat:0:{HIT}"),
    ];
    let (stderr, t) = dl_run(&dir, &strs(&steps));
    assert_eq!(builds(&t), "4 5 4", "{stderr}");
    assert_eq!(t[0]["solution"], s4.to_string());
    assert_eq!(
        t[1]["heuristic"], "1",
        "the second build's call is untouched"
    );
    assert_eq!(t[2]["solution"], s4.to_string());
    assert_eq!(
        stderr.matches("a second rocBLAS build").count(),
        1,
        "{stderr}"
    );
    assert_has(
        &stderr,
        "3 calls: 2 served, 0 default, 0 missed (0 shapes), 1 passed through",
    );
}

#[test]
fn a_second_build_loaded_after_serving_settled_still_gets_its_own_calls() {
    // Two calls through the served build open the exports' pass-through gate (serving, one
    // build: no handle lookup, `serve::pass_gate`). The second build's first handle must
    // close it: its calls, the plain one and one whose caller chose a solution, go to that
    // build untouched, and the served build's calls are still served.
    let (dir, s4, s5) = two_builds("rel-second-build-later");
    let run0 = format!("@runat:0:{HIT}");
    let steps = [
        open_local(module()),
        run0.clone(),
        run0.clone(),
        open_local(module5()),
        format!("@runat:1:{HIT}"),
        run0.clone(),
        "@main".into(),
        "--solution".into(),
        s5.to_string(),
        HIT.into(),
    ];
    let (stderr, t) = dl_run(&dir, &strs(&steps));
    assert_eq!(builds(&t), "4 4 5 4 5", "{stderr}");
    for i in [0, 1, 3] {
        assert_eq!(t[i]["solution"], s4.to_string(), "call {i}: {stderr}");
    }
    assert_eq!(
        t[2]["heuristic"], "1",
        "the second build's call is untouched"
    );
    assert_eq!(
        t[4]["solution"],
        s5.to_string(),
        "the caller's own solution, in its own build: {stderr}"
    );
    assert_has(
        &stderr,
        "5 calls: 3 served, 0 default, 0 missed (0 shapes), 2 passed through",
    );
}

#[test]
fn a_call_uses_the_rank_file_of_the_device_its_handle_was_made_on() {
    // The handle is made on device 1; the thread then makes device 0 current and calls.
    // rocBLAS runs the call on the handle's device, so rank 1's row serves it.
    let dir = scratch("rel-handle-device");
    let spec = "ex:NN:s:2:9:2";
    let sol = tuned(spec);
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(profiles.join("ref-v4")).unwrap();
    for (rank, solution) in [
        (0, "Default".to_string()),
        (1, format!("Gemm_Rocblas_{sol}")),
    ] {
        std::fs::write(
            profiles
                .join("ref-v4")
                .join(format!("tunableop_results{rank}.csv")),
            format!("Validator,PT_VERSION,2.7.0\n{}\n", row(spec, &solution)),
        )
        .unwrap();
    }
    std::fs::write(
        profiles.join("profiles.json"),
        serde_json::json!({"profiles": {"ref-v4": {"dir": "ref-v4", "lib_sha256": sha4(), "rows_per_rank": 1, "status": "test"}}}).to_string(),
    )
    .unwrap();
    let (_, stderr) = run_ok(life_cmd(&dir, true, &["@handle-on:1", "@gemm:9"]));
    let t = trace(&dir);
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0]["solution"], sol.to_string(), "rank 1's row: {stderr}");
    assert_has(&stderr, "1 calls: 1 served");
}

// ---- The profile's files (issue 12) ------------------------------------------------------

/// The bug these cases guard against is a hang (a FIFO) or a host eating the machine's
/// memory (`/dev/zero`): each run must end well inside this.
const QUICK: Duration = Duration::from_secs(30);

fn rank_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("profiles/ref-v4/tunableop_results{rank}.csv"))
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// The `tunedblas:` lines of a run that name `path`.
fn lines_naming(out: &std::process::Output, path: &Path) -> Vec<String> {
    let p = path.display().to_string();
    log_lines(out)
        .into_iter()
        .filter(|l| l.contains(&p))
        .collect()
}

#[test]
fn a_fifo_in_the_profile_does_not_block_the_host() {
    // Rank 0's file, rank 1's (the host runs on device 0, which is still served), and
    // profiles.json: opening a FIFO for reading waits for a writer that never comes.
    for case in ["rank0", "rank1", "registry"] {
        let name = format!("rel-fifo-{case}");
        let dir = scratch(&name);
        let sol = profile_with_hit(&dir, HIT);
        let rank1 = rank_file(&dir, 1);
        if case == "rank1" {
            std::fs::copy(rank_file(&dir, 0), &rank1).unwrap();
        }
        let fifo = match case {
            "rank0" => rank_file(&dir, 0),
            "rank1" => rank1,
            _ => dir.join("profiles/profiles.json"),
        };
        mkfifo(&fifo);
        let began = Instant::now();
        let out = run_guarded_for(fault_cmd(&dir, true, &[HIT, MISS]), QUICK);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{case}: {stderr}");
        assert!(began.elapsed() < QUICK, "{case}: {:?}", began.elapsed());
        let lines = lines_naming(&out, &fifo);
        assert_eq!(lines.len(), 1, "{case}: one line names the FIFO: {stderr}");
        assert!(
            lines[0].contains("a FIFO (named pipe), not a regular file"),
            "{case}: {stderr}"
        );
        let served: &[(&str, i32)] = if case == "rank1" { &[(HIT, sol)] } else { &[] };
        assert_eq!(
            results(&out),
            expected(&name, &[HIT, MISS], served),
            "{case}"
        );
        let (logged, _) = whole_miss_files(&dir);
        let want = if case == "rank1" { 1 } else { 2 };
        assert_eq!(
            logged.len(),
            want,
            "{case}: every shape without a row is recorded"
        );
    }
}

#[test]
fn a_rank_file_linked_to_dev_zero_is_refused_at_once() {
    let name = "rel-dev-zero";
    let dir = scratch_with_hit(name, HIT);
    let rank0 = rank_file(&dir, 0);
    std::fs::remove_file(&rank0).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &rank0).unwrap();
    let mut cmd = fault_cmd(&dir, true, &[HIT]);
    // A reader that follows the link reads zeros until memory runs out (13-24 GB before
    // the fix): cap the host's address space so such a run dies at 4 GiB, not the machine.
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let began = Instant::now();
    let out = run_guarded_for(cmd, QUICK);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
    let lines = lines_naming(&out, &rank0);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains(
            "a symlink to /dev/zero (a character device), not a regular file, so it is not read; rank 0 serves nothing"
        ),
        "{stderr}"
    );
    assert_eq!(results(&out), reference(name, &[HIT]));
}

#[test]
fn a_byte_order_mark_does_not_hide_the_first_row() {
    // The served row is the file's first line, behind a UTF-8 BOM (as an editor saving
    // "UTF-8 with BOM" writes it); before, it was read as a malformed line and not served.
    let name = "rel-bom";
    let dir = scratch(name);
    let sol = profile_with_hit(&dir, HIT);
    let first = row(HIT, &format!("Gemm_Rocblas_{sol}"));
    std::fs::write(
        rank_file(&dir, 0),
        format!("\u{feff}{first}\nValidator,PT_VERSION,2.7.0\n"),
    )
    .unwrap();
    let (out, stderr) = run_ok(fault_cmd(&dir, true, &[HIT]));
    assert!(!stderr.contains("skipped"), "{stderr}");
    assert_has(&stderr, "(1 rows, rank 0)");
    assert_eq!(results(&out), expected(name, &[HIT], &[(HIT, sol)]));
    assert_eq!(trace(&dir)[0]["solution"], sol.to_string());
}

/// A profile whose rank 0 and rank 1 serve `HIT` with different solutions; returns them.
fn two_rank_profile(dir: &Path) -> (i32, i32) {
    let sols = untuned_by_heuristic(HIT);
    assert!(sols.len() >= 2, "{sols:?}");
    let (r0, r1) = (sols[0], sols[sols.len() - 1]);
    Profile::v4(dir).tuned(HIT, r0).write();
    let rank1 = format!("{}\n", row(HIT, &format!("Gemm_Rocblas_{r1}")));
    std::fs::write(rank_file(dir, 1), rank1).unwrap();
    (r0, r1)
}

fn action(t: RankTable<'_>) -> Option<Action> {
    match t {
        RankTable::Ready(t) => t.get(&spec_key(HIT)).map(|e| e.action),
        _ => None,
    }
}

#[test]
fn only_the_calling_devices_rank_file_is_read_at_start() {
    let dir = scratch("rel-lazy-start");
    let (r0, r1) = two_rank_profile(&dir);
    let folder = dir.join("profiles/ref-v4");
    let (lazy, start) = LazyTables::open(&folder, 1, None);
    assert!(start.problems.is_empty(), "{:?}", start.problems);
    assert_eq!(start.rank_files, 2);
    assert_eq!(
        lazy.parsed_ranks(),
        vec![1],
        "only device 1's file at start"
    );
    assert_eq!(lazy.rank_state(0), Some(RankState::Unloaded));
    assert_eq!(action(lazy.table_for(1)), Some(Action::Solution(r1)));
    // A call from device 3 (no file of its own: rank 0's) reads rank 0, once.
    let mut loads = Vec::new();
    let got = lazy.table_for_with(3, |r| loads.push((r.rank, r.rows, r.parsed)));
    assert_eq!(action(got), Some(Action::Solution(r0)));
    assert_eq!(loads, vec![(0, 1, true)]);
    assert_eq!(action(lazy.table_for(0)), Some(Action::Solution(r0)));
    assert_eq!(lazy.parsed_ranks(), vec![0, 1]);
    assert!(lazy.single().is_none(), "the ranks differ");
}

#[test]
fn the_other_rank_is_served_when_a_call_comes_from_its_device() {
    // One process, device 0 then device 1: each call gets its own rank's solution,
    // whichever rank the interposer read first.
    let name = "rel-lazy-serve";
    let dir = scratch(name);
    let (r0, r1) = two_rank_profile(&dir);
    let mut cmd = fault_cmd(&dir, true, &[HIT, "@device:1", HIT, "@device:0", HIT]);
    cmd.env("TUNEDBLAS_LOG", "debug");
    let (_, stderr) = run_ok(cmd);
    assert_has(&stderr, "3 calls: 3 served");
    // Start-up read rank 0 only; rank 1 was read when device 1 first called.
    assert_eq!(
        stderr
            .matches("rank 1 loaded on its device's first call")
            .count(),
        1,
        "{stderr}"
    );
    let ran: Vec<String> = trace(&dir).iter().map(|t| t["solution"].clone()).collect();
    assert_eq!(ran, [r0, r1, r0].map(|s| s.to_string()));
    assert_eq!(misses(&dir).0, Vec::<String>::new());
}

/// A rank file of `rows` distinct rows, large enough that reading it takes a while.
#[test]
fn a_rank_read_after_the_store_changed_never_serves_another_builds_row() {
    // Chosen on device 0; then profiles.json names another build for the profile and rank 1
    // becomes a link to another build's file. Device 1's first call must not serve that
    // file's row: its rank is refused and the device gets rank 0's rows, checked at start.
    let dir = scratch("rel-lazy-changed");
    let (r0, r1) = two_rank_profile(&dir);
    let profiles = dir.join("profiles");
    let folder = profiles.join("ref-v4");
    let chosen = tunedblas_core::profile::ChosenEntry::read(&profiles, "ref-v4").expect("chosen");
    let (lazy, start) = LazyTables::guarded(&folder, 0, None, Some(chosen.clone()));
    assert!(start.problems.is_empty(), "{:?}", start.problems);
    assert_eq!(action(lazy.table_for(0)), Some(Action::Solution(r0)));
    let registry = profiles.join("profiles.json");
    let before = std::fs::read_to_string(&registry).unwrap();
    let other = before.replace(&sha4(), &"e".repeat(64));
    assert_ne!(other, before);
    std::fs::write(&registry, other).unwrap();
    let elsewhere = dir.join("other-build");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::rename(rank_file(&dir, 1), elsewhere.join("tunableop_results1.csv")).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("tunableop_results1.csv"), rank_file(&dir, 1))
        .unwrap();
    let mut said = Vec::new();
    let got = lazy.table_for_with(1, |r| said.extend(r.problems.clone()));
    assert_eq!(
        action(got),
        Some(Action::Solution(r0)),
        "rank 0's row, not {r1}'s"
    );
    assert!(
        said.iter().any(|l| l.contains("restart the process")),
        "{said:?}"
    );
    // The registry as it was, the link still there: the file lies outside the folder.
    std::fs::write(&registry, &before).unwrap();
    let (lazy, _) = LazyTables::guarded(&folder, 0, None, Some(chosen));
    let mut said = Vec::new();
    let got = lazy.table_for_with(1, |r| said.extend(r.problems.clone()));
    assert_eq!(action(got), Some(Action::Solution(r0)));
    assert!(
        said.iter()
            .any(|l| l.contains("outside the profile folder")),
        "{said:?}"
    );
}

/// A two-rank profile in a fresh folder `name` whose rank 1 has `rows` rows, opened with
/// rank 0 read.
fn lazy_big_rank(name: &str, rows: usize) -> LazyTables {
    let dir = scratch(name);
    two_rank_profile(&dir);
    big_rank(&rank_file(&dir, 1), rows);
    LazyTables::open(&dir.join("profiles/ref-v4"), 0, None).0
}

fn big_rank(path: &Path, rows: usize) {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for n in 1..=rows {
        writeln!(
            out,
            "GemmTunableOp_Half_TN,tn_4096_{n}_4096_ld_4096_4096_4096,Gemm_Rocblas_-1086327687,0.01"
        )
        .unwrap();
    }
    out.flush().unwrap();
}

#[test]
fn concurrent_first_calls_load_a_rank_once_and_none_waits() {
    const ROWS: usize = 100_000;
    let lazy = lazy_big_rank("rel-lazy-threads", ROWS);
    assert_eq!(lazy.parsed_ranks(), vec![0]);
    let lazy = Arc::new(lazy);
    let loads = Arc::new(AtomicUsize::new(0));
    let passed = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Barrier::new(16));
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let (lazy, loads, passed, gate) =
                (lazy.clone(), loads.clone(), passed.clone(), gate.clone());
            std::thread::spawn(move || {
                gate.wait();
                let began = Instant::now();
                loop {
                    match lazy.table_for_with(1, |_| {
                        loads.fetch_add(1, Ordering::SeqCst);
                    }) {
                        RankTable::Ready(t) => break t.len(),
                        // Someone else is reading it: the call passes through, at once.
                        RankTable::Loading => {
                            passed.fetch_add(1, Ordering::SeqCst);
                            assert!(began.elapsed() < QUICK, "never loaded");
                            std::thread::yield_now();
                        }
                        RankTable::None => panic!("rank 1 has a table"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), ROWS);
    }
    assert_eq!(loads.load(Ordering::SeqCst), 1, "one thread read the file");
    assert_eq!(lazy.parsed_ranks(), vec![0, 1]);
    assert_eq!(lazy.ready_tables().len(), 2);
    eprintln!(
        "{} calls passed through while rank 1 loaded",
        passed.load(Ordering::SeqCst)
    );
}

#[test]
fn a_child_forked_while_a_rank_loads_reads_it_itself() {
    const ROWS: usize = 400_000;
    let lazy = Arc::new(lazy_big_rank("rel-lazy-fork", ROWS));
    let loader = {
        let lazy = lazy.clone();
        std::thread::spawn(move || matches!(lazy.table_for(1), RankTable::Ready(_)))
    };
    let began = Instant::now();
    while lazy.rank_state(1) == Some(RankState::Unloaded) {
        assert!(began.elapsed() < QUICK);
        std::hint::spin_loop();
    }
    assert_eq!(
        lazy.rank_state(1),
        Some(RankState::Loading),
        "forking mid-load needs a larger file here"
    );
    // SAFETY: the child only reads files, allocates (glibc's malloc is fork-safe) and
    // leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // The thread that claimed rank 1 does not exist here; waiting for it would hang.
        let code = match lazy.table_for(1) {
            RankTable::Ready(t) if t.len() == ROWS => 0,
            RankTable::Loading => 2,
            _ => 1,
        };
        // SAFETY: leaving the child without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    let waited = Instant::now();
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if waited.elapsed() > QUICK {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child hung on the rank its parent was loading");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(libc::WIFEXITED(status), "child status {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child read rank 1 itself");
    assert!(loader.join().unwrap());
}
