//! Reliability, process life: fork without exec, vfork + failed exec, `_exit`, SIGTERM and
//! SIGKILL (from inside and from outside, mid-run), an unwritable miss folder and a full
//! disk. Each test checks the host's results against a run without tunedblas, that the host
//! ended as it meant to (no crash, no hang), and that every shape seen is on disk.

mod common;
mod faults;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use faults::*;

const A: &str = "ex:TN:h:24:8:16";
const B: &str = "sgemm:NN:s:16:8:8";
const HIT: &str = "ex:TN:h:64:24:40";

fn profile_with_hit(dir: &Path) {
    write_profile(
        &dir.join("profiles"),
        "ref-v4",
        &sha4(),
        &[row(HIT, &format!("Gemm_Rocblas_{}", tuned(HIT)))],
        1,
    );
}

fn served() -> [(&'static str, i32); 1] {
    [(HIT, tuned(HIT))]
}

fn counts_of(files: &[std::path::PathBuf]) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    for f in files
        .iter()
        .filter(|f| f.to_string_lossy().ends_with(".counts.csv"))
    {
        let log = tunedblas_core::untuned::read(f).unwrap();
        for m in log.misses {
            let (op, sig) = tunedblas_core::tunableop::op_and_signature(&m.key);
            v.push((format!("{op},{sig}"), m.calls.unwrap()));
        }
    }
    v.sort();
    v
}

fn log_of(files: &[std::path::PathBuf]) -> Vec<String> {
    let f = files
        .iter()
        .find(|f| {
            let n = f.to_string_lossy();
            n.ends_with(".csv") && !n.ends_with(".counts.csv")
        })
        .expect("a miss log");
    std::fs::read_to_string(f)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn sorted(mut v: Vec<(String, u64)>) -> Vec<(String, u64)> {
    v.sort();
    v
}

fn fork_case(name: &str, fork_step: &str) {
    let dir = scratch(name);
    profile_with_hit(&dir);
    let a2 = format!("{A}:2");
    let b3 = format!("{B}:3");
    let args = [a2.as_str(), HIT, fork_step, b3.as_str(), A];
    let child = {
        let mut cmd = fault_cmd(&dir, true, &args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let parent_pid = child.id();
    let out = wait_guarded(child, name);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        text(&out.stdout).contains("child=0\n"),
        "the child ended well"
    );
    assert_eq!(
        results(&out),
        expected(name, &args, &served()),
        "same results, parent and child"
    );

    let (lines, _) = whole_miss_files(&dir);
    assert_eq!(
        lines.len(),
        4,
        "two shapes in each process's log: {lines:?}"
    );
    let parent = miss_files_of(&dir, parent_pid);
    assert_eq!(log_of(&parent), vec![miss_line(A), miss_line(B)]);
    assert_eq!(
        counts_of(&parent),
        sorted(vec![(miss_line(A), 3), (miss_line(B), 3)])
    );
    let all: Vec<_> = std::fs::read_dir(dir.join("misses"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let child_files: Vec<_> = all.into_iter().filter(|p| !parent.contains(p)).collect();
    assert_eq!(
        child_files.len(),
        2,
        "the child has its own log and counts: {child_files:?}"
    );
    assert_eq!(log_of(&child_files), vec![miss_line(B), miss_line(A)]);
    assert_eq!(
        counts_of(&child_files),
        sorted(vec![(miss_line(A), 1), (miss_line(B), 3)]),
        "the child counts only its own calls"
    );
    // One summary per process, each with its own account; the parent's tuned row served.
    assert_eq!(stderr.matches(" calls: ").count(), 2, "{stderr}");
    assert!(stderr.contains("4 calls: 0 served"), "child: {stderr}");
    assert!(stderr.contains("7 calls: 1 served"), "parent: {stderr}");
}

#[test]
fn fork_without_exec_child_records_into_its_own_file() {
    fork_case("rel-fork", "@fork");
}

#[test]
fn fork_child_leaving_with_exit_underscore_still_writes_counts() {
    fork_case("rel-forkx", "@forkx");
}

#[test]
fn fork_while_other_threads_are_recording_does_not_deadlock() {
    let dir = scratch("rel-fork-busy");
    profile_with_hit(&dir);
    let out = run_guarded(fault_cmd(&dir, true, &[&format!("@fork-busy:6:{A}")]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        text(&out.stdout).contains("child=0\n"),
        "{}",
        text(&out.stdout)
    );
    let (lines, counts) = whole_miss_files(&dir);
    assert_eq!(lines, vec![miss_line(A), miss_line(A)], "parent and child");
    assert!(
        counts.iter().any(|(_, n)| *n == 1),
        "the child's one call: {counts:?}"
    );
}

#[test]
fn fork_during_start_up_does_not_hang_the_child() {
    // A fresh cache: start-up hashes the library, so the fork lands inside it.
    let dir = scratch("rel-fork-init");
    profile_with_hit(&dir);
    let out = run_guarded(fault_cmd(&dir, true, &[&format!("@fork-init:4:{A}")]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        text(&out.stdout).contains("child=0\n"),
        "{}",
        text(&out.stdout)
    );
    let want = expected("rel-fork-init", &[A], &served());
    assert_eq!(results(&out), want, "the child's call is right");
    // The parent recorded its shape; a child forked mid start-up passes its calls through.
    let (lines, _) = whole_miss_files(&dir);
    assert!(lines.first() == Some(&miss_line(A)), "{lines:?}");
}

#[test]
fn vfork_child_exiting_does_not_finish_the_parent() {
    let dir = scratch("rel-vfork");
    profile_with_hit(&dir);
    let args = [
        format!("{A}:2"),
        "@vfork-fail".into(),
        format!("{A}:3"),
        B.into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_guarded(fault_cmd(&dir, true, &args));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(text(&out.stdout).contains("vfork-child=127"));
    assert_eq!(results(&out), expected("rel-vfork", &args, &served()));
    // The vfork child shares the parent's memory: had its _exit finished the run, the
    // parent's real exit would have written nothing more.
    assert_eq!(stderr.matches(" calls: ").count(), 1, "{stderr}");
    assert!(
        stderr.contains("6 calls: 0 served, 0 default, 6 missed (2 shapes)"),
        "{stderr}"
    );
    let (lines, counts) = whole_miss_files(&dir);
    assert_eq!(lines, vec![miss_line(A), miss_line(B)]);
    assert_eq!(
        sorted(counts),
        sorted(vec![(miss_line(A), 5), (miss_line(B), 1)])
    );
}

#[test]
fn exit_underscore_skips_atexit_but_nothing_is_lost() {
    let dir = scratch("rel-exit");
    profile_with_hit(&dir);
    let args = [format!("{A}:3"), HIT.into(), "@exit_".into(), B.into()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_guarded(fault_cmd(&dir, true, &args));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(results(&out), expected("rel-exit", &args, &served()));
    assert!(
        stderr.contains("4 calls: 1 served, 0 default, 3 missed (1 shapes)"),
        "{stderr}"
    );
    let (lines, counts) = whole_miss_files(&dir);
    assert_eq!(lines, vec![miss_line(A)]);
    assert_eq!(counts, vec![(miss_line(A), 3)]);
}

/// Distinct miss shapes, one call each.
fn distinct_specs(count: usize) -> Vec<String> {
    (1..=count).map(|n| format!("ex:TN:h:8:{n}:8")).collect()
}

/// Spawns the host, waits until `ready(lines so far)` says so, sends `signal`, and returns
/// the output lines seen and how the host ended.
fn signal_when(
    mut cmd: Command,
    signal: i32,
    ready: impl Fn(&[String]) -> bool,
) -> (Vec<String>, std::process::ExitStatus, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut lines = Vec::new();
    let mut sent = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(l) => lines.push(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !sent && ready(&lines) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, signal) };
            sent = true;
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            panic!("the host hung");
        }
    }
    let status = child.wait().unwrap();
    assert!(
        sent,
        "the host ended before it could be signalled: {lines:?}"
    );
    (lines, status, err_reader.join().unwrap())
}

fn signalled_by(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// Every spec whose result was printed was seen before the signal: its shape must be in
/// the log (the log line is written before the GEMM runs, so before the result is printed).
fn every_printed_shape_is_logged(dir: &Path, lines: &[String], at_least: usize) {
    let printed: Vec<String> = lines
        .iter()
        .filter_map(|l| {
            l.strip_prefix("spec=")?
                .split(' ')
                .next()
                .map(str::to_owned)
        })
        .collect();
    assert!(printed.len() >= at_least, "{printed:?}");
    let (logged, _) = whole_miss_files(dir);
    for spec in &printed {
        assert!(
            logged.contains(&miss_line(spec)),
            "{spec} ran before the kill but is not in the log"
        );
    }
    let mut distinct = logged.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), logged.len(), "each shape once");
}

#[test]
fn sigkill_mid_run_loses_no_shape_seen() {
    let dir = scratch("rel-sigkill");
    profile_with_hit(&dir);
    let specs = distinct_specs(400);
    let args: Vec<&str> = specs.iter().map(String::as_str).collect();
    let (lines, status, _) = signal_when(fault_cmd(&dir, true, &args), libc::SIGKILL, |l| {
        l.len() >= 40
    });
    assert_eq!(signalled_by(&status), Some(libc::SIGKILL));
    every_printed_shape_is_logged(&dir, &lines, 40);
}

#[test]
fn sigkill_with_threads_keeps_every_shape_seen() {
    let dir = scratch("rel-sigkill-threads");
    profile_with_hit(&dir);
    let mut args: Vec<String> = (1..=12)
        .map(|n| format!("@threads:8:ex:TN:h:12:{n}:8:20"))
        .collect();
    args.extend(distinct_specs(20));
    args.push("@pause".into());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (lines, status, _) = signal_when(fault_cmd(&dir, true, &argv), libc::SIGKILL, |l| {
        l.last().is_some_and(|x| x == "paused")
    });
    assert_eq!(signalled_by(&status), Some(libc::SIGKILL));
    every_printed_shape_is_logged(&dir, &lines, 20);
    let (logged, _) = whole_miss_files(&dir);
    for n in 1..=12 {
        assert!(logged.contains(&miss_line(&format!("ex:TN:h:12:{n}:8"))));
    }
    assert_eq!(logged.len(), 32);
}

#[test]
fn sigterm_from_outside_and_inside_keeps_every_shape_seen() {
    let dir = scratch("rel-sigterm");
    profile_with_hit(&dir);
    let specs = distinct_specs(400);
    let args: Vec<&str> = specs.iter().map(String::as_str).collect();
    let (lines, status, _) = signal_when(fault_cmd(&dir, true, &args), libc::SIGTERM, |l| {
        l.len() >= 25
    });
    assert_eq!(signalled_by(&status), Some(libc::SIGTERM));
    every_printed_shape_is_logged(&dir, &lines, 25);

    let dir = scratch("rel-sigterm-raise");
    profile_with_hit(&dir);
    let args = [
        format!("{A}:2"),
        B.into(),
        HIT.into(),
        "@raise:15".into(),
        "ex:TN:h:4:4:4".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_guarded(fault_cmd(&dir, true, &args));
    assert_eq!(signalled_by(&out.status), Some(libc::SIGTERM));
    let want = expected("rel-sigterm-raise", &args[..3], &served());
    assert_eq!(results(&out), want, "results up to the signal are right");
    assert_eq!(whole_miss_files(&dir).0, vec![miss_line(A), miss_line(B)]);
}

fn one_warning(stderr: &str) {
    assert_eq!(
        stderr.matches("cannot write the miss log").count(),
        1,
        "exactly one warning: {stderr}"
    );
}

#[test]
fn unwritable_miss_folder_warns_once_and_serving_continues() {
    let dir = scratch("rel-unwritable");
    profile_with_hit(&dir);
    std::fs::write(dir.join("not-a-folder"), "").unwrap();
    let mut args = distinct_specs(5);
    args.push(format!("{HIT}:2"));
    args.push(format!("{A}:3"));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = fault_cmd(&dir, true, &argv);
    cmd.env("TUNEDBLAS_MISS_DIR", dir.join("not-a-folder/misses"));
    let out = run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    one_warning(&stderr);
    assert_eq!(results(&out), expected("rel-unwritable", &argv, &served()));
    assert!(
        stderr.contains("10 calls: 2 served, 0 default, 8 missed (6 shapes)"),
        "{stderr}"
    );
    let served = trace(&dir).iter().filter(|t| t["heuristic"] == "0").count();
    assert_eq!(served, 2, "tuned rows still served");
}

#[test]
fn read_only_miss_folder_warns_once_and_serving_continues() {
    if !can_unshare_mount() {
        eprintln!("skipped: this machine does not allow a user namespace to mount (the ENOTDIR case still runs)");
        return;
    }
    let dir = scratch("rel-readonly");
    profile_with_hit(&dir);
    let ro = dir.join("ro");
    std::fs::create_dir_all(&ro).unwrap();
    let mut args = distinct_specs(4);
    args.push(HIT.into());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = Command::new("unshare");
    cmd.args([
        "-Urm",
        "sh",
        "-c",
        "mount -t tmpfs -o ro,size=64k tmpfs \"$0\" && exec \"$@\"",
    ])
    .arg(&ro)
    .arg(&hosts().fault4)
    .args(&argv);
    host_env(&mut cmd, &dir, true);
    cmd.env("TUNEDBLAS_MISS_DIR", &ro);
    let out = run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    one_warning(&stderr);
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    assert_eq!(results(&out), expected("rel-readonly", &argv, &served()));
    assert!(stderr.contains("5 calls: 1 served"), "{stderr}");
}

#[test]
fn full_disk_warns_once_and_every_shape_reaches_the_log_once_space_returns() {
    if !can_unshare_mount() {
        eprintln!("skipped: this machine does not allow a user namespace to mount a tmpfs (the file-size-limit case still runs)");
        return;
    }
    let dir = scratch("rel-fulldisk");
    profile_with_hit(&dir);
    let disk = dir.join("disk");
    let copy = dir.join("misses");
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::create_dir_all(&copy).unwrap();
    // A 32 KiB tmpfs with 28 KiB taken: one page left, ~90 log lines; 150 shapes overflow it.
    let before = distinct_specs(150);
    let after: Vec<String> = (1..=10).map(|n| format!("sgemm:NN:s:8:{n}:8")).collect();
    let mut args = before.clone();
    args.push(format!("{HIT}:2"));
    args.push(format!("@rm:{}", disk.join("filler").display()));
    args.extend(after.iter().cloned());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let script = "d=$0; out=$1; shift 1; \
        mount -t tmpfs -o size=32k tmpfs \"$d\" || exit 90; \
        head -c 28672 /dev/zero > \"$d/filler\" || exit 91; \
        \"$@\"; rc=$?; cp \"$d\"/*.csv \"$out\"/ 2>/dev/null; ls -a \"$d\" >&2; exit $rc";
    let mut cmd = Command::new("unshare");
    cmd.args(["-Urm", "sh", "-c", script])
        .arg(&disk)
        .arg(&copy)
        .arg(&hosts().fault4)
        .args(&argv);
    host_env(&mut cmd, &dir, true);
    cmd.env("TUNEDBLAS_MISS_DIR", &disk);
    let out = run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    one_warning(&stderr);
    assert!(
        stderr.contains("No space left on device") || stderr.contains("disk full"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(".tmp."),
        "no temporary left behind: {stderr}"
    );
    let want = expected("rel-fulldisk", &argv, &served());
    let got = results(&out);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
    assert!(stderr.contains("162 calls: 2 served"), "{stderr}");
    // Nothing lost: once space came back, the shapes whose first write failed were written,
    // in order of first sight, each once, and the counts at exit name every shape.
    let (lines, counts) = whole_miss_files(&dir);
    let want: Vec<String> = before.iter().chain(&after).map(|s| miss_line(s)).collect();
    assert_eq!(lines, want);
    assert_eq!(counts.len(), 160);
    assert!(counts.iter().all(|(_, n)| *n == 1));
}

#[test]
fn file_size_limit_short_writes_leave_only_whole_lines() {
    // RLIMIT_FSIZE makes writes past the limit short, then fail (EFBIG), with SIGXFSZ
    // ignored as a server would: the same paths as a disk filling up, without mounting.
    let dir = scratch("rel-fsize");
    profile_with_hit(&dir);
    let specs = distinct_specs(120);
    let mut args = specs.clone();
    args.push(HIT.into());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = fault_cmd(&dir, true, &argv);
    cmd.env_remove("REFBLAS_TRACE");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 2010,
                rlim_max: 2010,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    one_warning(&stderr);
    assert_eq!(results(&out), expected("rel-fsize", &argv, &served()));
    let (lines, _) = whole_miss_files(&dir);
    let want: Vec<String> = specs.iter().map(|s| miss_line(s)).collect();
    assert!(
        !lines.is_empty() && lines.len() < want.len(),
        "{}",
        lines.len()
    );
    assert_eq!(lines[..], want[..lines.len()], "a clean prefix, in order");
}
