//! Reliability, process life: fork without exec, vfork + failed exec, `_exit`, SIGTERM and
//! SIGKILL (from inside and from outside, mid-run), an unwritable miss folder and a full
//! disk. Each test checks the host's results against a run without tunedblas, that the host
//! ended as it meant to (no crash, no hang), and that every shape seen is on disk.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::faults::*;
use crate::common::*;

const A: &str = "ex:TN:h:24:8:16";
const B: &str = "sgemm:NN:s:16:8:8";
const HIT: &str = "ex:TN:h:64:24:40";

fn served() -> [(&'static str, i32); 1] {
    [(HIT, tuned(HIT))]
}

fn counts_of(files: &[std::path::PathBuf]) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    for f in files
        .iter()
        .filter(|f| f.to_string_lossy().ends_with(".counts.csv"))
    {
        let log = tunedblas_core::misses::file::read(f).unwrap();
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
    let dir = scratch_with_hit(name, HIT);
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
    // (Each process's live status, `<process>.status.json`, is `tests/status.rs`'s.)
    let child_files: Vec<_> = all
        .into_iter()
        .filter(|p| !parent.contains(p) && !p.to_string_lossy().ends_with(".status.json"))
        .collect();
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

/// Runs the fork step `step` in a fresh folder `name`; checks the host and its child ended
/// well. Returns the folder and the host's output.
fn forked(name: &str, step: &str) -> (std::path::PathBuf, std::process::Output) {
    let dir = scratch_with_hit(name, HIT);
    let (out, _) = run_ok(fault_cmd(&dir, true, &[step]));
    let stdout = text(&out.stdout);
    assert_has(&stdout, "child=0\n");
    (dir, out)
}

#[test]
fn fork_while_other_threads_are_recording_does_not_deadlock() {
    let (dir, _) = forked("rel-fork-busy", &format!("@fork-busy:6:{A}"));
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
    let (dir, out) = forked("rel-fork-init", &format!("@fork-init:4:{A}"));
    let want = expected("rel-fork-init", &[A], &served());
    assert_eq!(results(&out), want, "the child's call is right");
    // The parent recorded its shape; a child forked mid start-up passes its calls through.
    let (lines, _) = whole_miss_files(&dir);
    assert!(lines.first() == Some(&miss_line(A)), "{lines:?}");
}

/// A library whose constructor makes a GEMM (inside `dlopen`, under the loader's lock)
/// while another thread is starting the interposer up, which needs that lock too: a caller
/// that waited for the start-up without bound hung both threads (an outside tester's plugin
/// host, 5 hangs in 8 runs). The constructor's call now waits a short while, then passes
/// through; the start-up finishes once `dlopen` returns. (refblas answers its version
/// string 600 ms late, so the start-up is still running when the module is loaded.)
#[test]
fn a_gemm_in_a_library_constructor_during_start_up_does_not_hang() {
    let module = hosts().at_load4.to_str().unwrap().to_owned();
    let step = format!("@load-racing:{module}:100:{HIT}");
    let run_it = |name: &str, preload: bool| {
        let dir = scratch_with_hit(name, HIT);
        let mut cmd = fault_cmd(&dir, preload, &[&step]);
        cmd.env("REFBLAS_SLOW_VERSION_MS", "600")
            .env("GEMM_HOST_AT_LOAD", A);
        let out = run_guarded_for(cmd, Duration::from_secs(60));
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
        assert_has(&stdout, "loaded=");
        let at_load: Vec<String> = stdout
            .lines()
            .filter(|l| l.starts_with("at-load="))
            .map(str::to_owned)
            .collect();
        (at_load, results(&out))
    };
    let (at_load, worker) = run_it("rel-at-load", true);
    let (want_at_load, _) = run_it("rel-at-load-ref", false);
    assert_eq!(at_load.len(), 1, "{at_load:?}");
    assert_eq!(
        at_load, want_at_load,
        "the constructor's GEMM computed as without tunedblas"
    );
    assert_eq!(
        worker,
        expected("rel-at-load", &[HIT], &served()),
        "the starting thread's call is served"
    );
}

/// A host under an address-space cap (`ulimit -v`, or a server that caps itself) with 1 MiB
/// to spare: the start-up's 1 MiB hashing buffer, then a new segment of the miss set (2 MiB
/// and more), could not be allocated, and Rust's out-of-memory handling aborted the host
/// (an outside tester's finding). Now the hash reads through a smaller buffer and a segment
/// that cannot be had counts its shapes as ones the set had no room for; near-shape serving,
/// whose verdicts could not be had either, is off.
#[test]
fn an_address_space_limit_does_not_abort_the_host() {
    let run_it = |name: &str, preload: bool| {
        let dir = scratch_with_hit(name, HIT);
        let mut cmd = life_cmd(&dir, preload, &["@as-limit:1024", "@distinct:20000"]);
        // Near-shape serving on, as by default: its 2.5 MB of verdicts, taken at start-up
        // whatever the profile's size, once aborted an outside tester's host here.
        cmd.env("TUNEDBLAS_NEAR", "32");
        let out = run_guarded(cmd);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{:?}: {stdout}{}",
            out.status,
            text(&out.stderr)
        );
        (stdout, text(&out.stderr))
    };
    let (stdout, stderr) = run_it("rel-as-limit", true);
    assert_has(&stdout, "distinct=20000 failed=0");
    assert_has(&stderr, "no memory for more of the miss log");
    assert_has(&stderr, "no memory for near-shape serving");
    let (plain, _) = run_it("rel-as-limit-ref", false);
    assert_has(&plain, "distinct=20000 failed=0");
}

/// A file-size limit (`ulimit -f`) with SIGXFSZ at its default action: our writes (the hash
/// cache entry, the miss log, the status) once raised it and an outside tester's host died
/// at its first GEMM (rc 153) where it ran whole without us. Now they fail, and are said.
#[test]
fn a_file_size_limit_does_not_kill_the_host() {
    for preload in [true, false] {
        let dir = scratch_with_hit(&format!("rel-fsize-{preload}"), HIT);
        let mut cmd = life_cmd(&dir, preload, &["@fsize-limit:0", "@distinct:20"]);
        // refblas's own trace is a file the host writes: the limit would end it either way.
        cmd.env_remove("REFBLAS_TRACE");
        let out = run_guarded(cmd);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{:?}: {stdout}{stderr}", out.status);
        assert_has(&stdout, "distinct=20 failed=0");
    }
}

/// A host that sends itself SIGXFSZ or SIGPIPE (its own, handled) while our writes run: the
/// first fix for the file-size limit took back any of these that arrived during a write of
/// ours, the host's own included (an outside tester: 1 in 10 runs lost one during the
/// start-up, 3 to 5 in 10,000 during miss-log writes). Only one our failed write raised is
/// taken back now.
#[test]
fn the_hosts_own_sigxfsz_and_sigpipe_reach_it_during_our_writes() {
    for which in ["xfsz", "pipe"] {
        let dir = scratch_with_hit(&format!("rel-own-signals-{which}"), HIT);
        let step = format!("@own-signals:{which}:300");
        let out = run_guarded(life_cmd(&dir, true, &[&step]));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{which}: {stdout}{stderr}");
        let sent: u64 = stdout
            .split("sent=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(sent > 10, "{which}: {stdout}");
        assert_has(&stdout, "lost=0");
    }
}

/// A process that makes GEMMs and then `exec`s a program that makes more, with one stats
/// path (or `%p`: the same pid): the first image's stats, written at the exec, were
/// replaced by the second's, so its misses vanished and `verify --stats` said OK (an
/// outside tester's finding). They are kept beside, as `<path>.<pid>`, which verify reads.
#[test]
fn an_exec_keeps_the_first_images_stats_beside_the_second_images() {
    let dir = scratch_with_hit("rel-exec-stats", HIT);
    let second = dir.join("second.sh");
    let script = format!(
        "#!/bin/sh\nexec {} @gemm:16 @gemm:24\n",
        hosts().life4.display()
    );
    write_executable(&second, &script);
    let stats = dir.join("stats.json");
    let exec = format!("@exec:{}", second.display());
    let mut cmd = life_cmd(&dir, true, &["@gemm:3000", &exec]);
    cmd.env("TUNEDBLAS_STATS", &stats);
    let out = run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let read = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let last = read(&stats);
    let pid = last["pid"].as_u64().unwrap();
    assert_eq!(last["calls"], 2, "the second image's: {last}");
    let first = read(&dir.join(format!("stats.json.{pid}")));
    assert_eq!(first["calls"], 1, "the first image's, beside: {first}");
    assert_eq!(first["missed_calls"], 1, "{first}");
}

/// A host whose umask takes every bit away (`umask 0777`): the folders and files made for
/// us once came out mode 000 (a non-root user could not open the miss log again, and a
/// `~/.cache` we made was unusable by every program after). They are made with exactly
/// their modes, folders above included.
#[test]
fn a_umask_that_takes_every_bit_leaves_what_we_make_usable() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_with_hit("rel-umask", HIT);
    let out = run_guarded(life_cmd(&dir, true, &["@umask:0777", "@distinct:3"]));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // The cache folder (TUNEDBLAS_CACHE_DIR, made with its parents) and the miss folder.
    for folder in [dir.join("cache"), dir.join("misses")] {
        assert_eq!(mode(&folder), 0o700, "{}", folder.display());
    }
    let logs: Vec<_> = std::fs::read_dir(dir.join("misses"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    assert!(!logs.is_empty(), "{stderr}");
    for f in logs {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
}

/// A host that confines itself (`chroot`) after its first calls: the miss folder's path
/// then leads into its jail, and an outside tester's sandboxed worker found a miss folder
/// made there. Nothing of ours is written under the new root; one line says why.
#[test]
fn a_host_that_chroots_after_start_up_gets_nothing_written_into_its_jail() {
    let dir = scratch_with_hit("rel-chroot", HIT);
    let jail = dir.join("jail");
    std::fs::create_dir_all(&jail).unwrap();
    let step = format!("@chroot:{}", jail.display());
    let out = run_guarded(life_cmd(&dir, true, &["@gemm:3", &step, "@distinct:3"]));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    if stdout.contains("chroot=denied") {
        eprintln!("skipped: this process may not chroot");
        return;
    }
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_has(&stdout, "chroot=ok");
    let inside: Vec<_> = std::fs::read_dir(&jail).unwrap().collect();
    assert!(inside.is_empty(), "written into the jail: {inside:?}");
    assert_has(&stderr, "changed its root directory");
}

#[test]
fn vfork_child_exiting_does_not_finish_the_parent() {
    let dir = scratch_with_hit("rel-vfork", HIT);
    let args = [
        format!("{A}:2"),
        "@vfork-fail".into(),
        format!("{A}:3"),
        B.into(),
    ];
    let args = strs(&args);
    let (out, stderr) = run_ok(fault_cmd(&dir, true, &args));
    assert!(text(&out.stdout).contains("vfork-child=127"));
    assert_eq!(results(&out), expected("rel-vfork", &args, &served()));
    // The vfork child shares the parent's memory: had its _exit finished the run, the
    // parent's real exit would have written nothing more.
    assert_eq!(stderr.matches(" calls: ").count(), 1, "{stderr}");
    assert_has(&stderr, "6 calls: 0 served, 0 default, 6 missed (2 shapes)");
    let (lines, counts) = whole_miss_files(&dir);
    assert_eq!(lines, vec![miss_line(A), miss_line(B)]);
    assert_eq!(
        sorted(counts),
        sorted(vec![(miss_line(A), 5), (miss_line(B), 1)])
    );
}

#[test]
fn exit_underscore_skips_atexit_but_nothing_is_lost() {
    let dir = scratch_with_hit("rel-exit", HIT);
    let args = [format!("{A}:3"), HIT.into(), "@exit_".into(), B.into()];
    let args = strs(&args);
    let (out, stderr) = run_ok(fault_cmd(&dir, true, &args));
    assert_eq!(results(&out), expected("rel-exit", &args, &served()));
    assert_has(&stderr, "4 calls: 1 served, 0 default, 3 missed (1 shapes)");
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

/// Runs fault_host on `args` in a fresh folder `name`, sends `signal` once `ready` says so,
/// checks the host died of it and that each of the (at least `at_least`) shapes it printed
/// is logged, once; returns the folder.
fn signalled_mid_run(
    name: &str,
    args: &[String],
    signal: i32,
    ready: impl Fn(&[String]) -> bool,
    at_least: usize,
) -> std::path::PathBuf {
    let dir = scratch_with_hit(name, HIT);
    let (lines, status, _) = signal_when(fault_cmd(&dir, true, &strs(args)), signal, ready);
    assert_eq!(signalled_by(&status), Some(signal));
    every_printed_shape_is_logged(&dir, &lines, at_least);
    dir
}

#[test]
fn sigkill_mid_run_loses_no_shape_seen() {
    let args = distinct_specs(400);
    signalled_mid_run("rel-sigkill", &args, libc::SIGKILL, |l| l.len() >= 40, 40);
}

#[test]
fn sigkill_with_threads_keeps_every_shape_seen() {
    let mut args: Vec<String> = (1..=12)
        .map(|n| format!("@threads:8:ex:TN:h:12:{n}:8:20"))
        .collect();
    args.extend(distinct_specs(20));
    args.push("@pause".into());
    let paused = |l: &[String]| l.last().is_some_and(|x| x == "paused");
    let dir = signalled_mid_run("rel-sigkill-threads", &args, libc::SIGKILL, paused, 20);
    let (logged, _) = whole_miss_files(&dir);
    for n in 1..=12 {
        assert!(logged.contains(&miss_line(&format!("ex:TN:h:12:{n}:8"))));
    }
    assert_eq!(logged.len(), 32);
}

#[test]
fn sigterm_from_outside_and_inside_keeps_every_shape_seen() {
    let args = distinct_specs(400);
    signalled_mid_run("rel-sigterm", &args, libc::SIGTERM, |l| l.len() >= 25, 25);

    let dir = scratch_with_hit("rel-sigterm-raise", HIT);
    let args = [
        format!("{A}:2"),
        B.into(),
        HIT.into(),
        "@raise:15".into(),
        "ex:TN:h:4:4:4".into(),
    ];
    let args = strs(&args);
    let out = run_guarded(fault_cmd(&dir, true, &args));
    assert_eq!(signalled_by(&out.status), Some(libc::SIGTERM));
    let want = expected("rel-sigterm-raise", &args[..3], &served());
    assert_eq!(results(&out), want, "results up to the signal are right");
    assert_eq!(whole_miss_files(&dir).0, vec![miss_line(A), miss_line(B)]);
}

#[test]
fn unwritable_miss_folder_warns_once_and_serving_continues() {
    let dir = scratch_with_hit("rel-unwritable", HIT);
    std::fs::write(dir.join("not-a-folder"), "").unwrap();
    let mut args = distinct_specs(5);
    args.push(format!("{HIT}:2"));
    args.push(format!("{A}:3"));
    let argv = strs(&args);
    let mut cmd = fault_cmd(&dir, true, &argv);
    cmd.env("TUNEDBLAS_MISS_DIR", dir.join("not-a-folder/misses"));
    let (out, stderr) = run_ok(cmd);
    one_warning(&stderr);
    assert_eq!(results(&out), expected("rel-unwritable", &argv, &served()));
    assert_has(
        &stderr,
        "10 calls: 2 served, 0 default, 8 missed (6 shapes)",
    );
    let served = trace(&dir).iter().filter(|t| t["heuristic"] == "0").count();
    assert_eq!(served, 2, "tuned rows still served");
}

/// Whether this machine lets a user namespace mount a tmpfs; says the test is skipped if not
/// (`meanwhile`: what still covers the case).
fn mount_allowed(meanwhile: &str) -> bool {
    let allowed = can_unshare_mount();
    if !allowed {
        eprintln!(
            "skipped: this machine does not allow a user namespace to mount a tmpfs ({meanwhile})"
        );
    }
    allowed
}

/// fault_host on `argv` under `sh -c script` in a user and mount namespace of its own
/// (`unshare -Urm`); the script's arguments are `before`, then the host's command line. The
/// misses go to `misses`.
fn unshared(dir: &Path, script: &str, before: &[&Path], misses: &Path, argv: &[&str]) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["-Urm", "sh", "-c", script])
        .args(before)
        .arg(&hosts().fault4)
        .args(argv);
    host_env(&mut cmd, dir, true);
    cmd.env("TUNEDBLAS_MISS_DIR", misses);
    cmd
}

#[test]
fn read_only_miss_folder_warns_once_and_serving_continues() {
    if !mount_allowed("the ENOTDIR case still runs") {
        return;
    }
    let dir = scratch_with_hit("rel-readonly", HIT);
    let ro = dir.join("ro");
    std::fs::create_dir_all(&ro).unwrap();
    let mut args = distinct_specs(4);
    args.push(HIT.into());
    let argv = strs(&args);
    let script = "mount -t tmpfs -o ro,size=64k tmpfs \"$0\" && exec \"$@\"";
    let (out, stderr) = run_ok(unshared(&dir, script, &[&ro], &ro, &argv));
    one_warning(&stderr);
    assert_has(&stderr, "Read-only file system");
    assert_eq!(results(&out), expected("rel-readonly", &argv, &served()));
    assert_has(&stderr, "5 calls: 1 served");
}

#[test]
fn full_disk_warns_once_and_every_shape_reaches_the_log_once_space_returns() {
    if !mount_allowed("the file-size-limit case still runs") {
        return;
    }
    let dir = scratch_with_hit("rel-fulldisk", HIT);
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
    let argv = strs(&args);
    let script = "d=$0; out=$1; shift 1; \
        mount -t tmpfs -o size=32k tmpfs \"$d\" || exit 90; \
        head -c 28672 /dev/zero > \"$d/filler\" || exit 91; \
        \"$@\"; rc=$?; cp \"$d\"/*.csv \"$out\"/ 2>/dev/null; ls -a \"$d\" >&2; exit $rc";
    let (out, stderr) = run_ok(unshared(&dir, script, &[&disk, &copy], &disk, &argv));
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
    assert_has(&stderr, "162 calls: 2 served");
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
    let dir = scratch_with_hit("rel-fsize", HIT);
    let specs = distinct_specs(120);
    let mut args = specs.clone();
    args.push(HIT.into());
    let argv = strs(&args);
    let mut cmd = fault_cmd(&dir, true, &argv);
    cmd.env_remove("REFBLAS_TRACE");
    with_file_size_limit(&mut cmd, 2010);
    let (out, stderr) = run_ok(cmd);
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

// ---------------------------------------------------------------------------------------
// The lifecycle cases an outside tester found (life_host): every one hung, crashed, aborted
// or lost records before the shared lifecycle. Each runs the host under the preload and
// checks it ended as it meant to, within the hang guard.
// ---------------------------------------------------------------------------------------

/// life_host's GEMM number `n` (m = k = 2) as a spec, for its miss line.
fn life_shape(n: usize) -> String {
    format!("ex:NN:s:2:{n}:2")
}

/// A life_host run with no trace file (refblas's trace writer would be one more lock in
/// the way of a signal handler, with or without the preload).
fn life(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = life_cmd(dir, true, args);
    cmd.env_remove("REFBLAS_TRACE");
    run_guarded(cmd)
}

/// life_host's shape number `i` (`@distinct`, `@repeat`: m = 2 + i / 4096, n = i % 4096 + 1,
/// k = 1) as a spec.
fn life_number(i: usize) -> String {
    format!("ex:NN:s:{}:{}:1", 2 + i / 4096, i % 4096 + 1)
}

fn calls_of(counts: &[(String, u64)], spec: &str) -> u64 {
    let line = miss_line(spec);
    counts
        .iter()
        .filter(|(l, _)| *l == line)
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn forking_while_eight_threads_record_never_hangs_a_child() {
    // Python's multiprocessing and PyTorch's DataLoader fork a threaded process like this.
    for round in 0..3 {
        let dir = scratch(&format!("rel-storm-{round}"));
        let out = life(&dir, &["@gemm:3", "@storm:8:30"]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(stdout.contains("storm-hung=0\n"), "round {round}: {stdout}");
        whole_miss_files(&dir);
    }
}

#[test]
fn a_signal_handler_that_exits_never_hangs_and_writes_the_counts() {
    for mode in ["_exit", "exit", "Exit"] {
        for round in 0..4 {
            let dir = scratch(&format!("rel-sigexit-{mode}-{round}"));
            let out = life(&dir, &["@gemm:3", &format!("@sigexit:8:{mode}")]);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(7), "{mode} round {round}: {stderr}");
            assert!(stderr.contains(" calls: "), "{mode}: the summary: {stderr}");
            let (lines, counts) = whole_miss_files(&dir);
            assert!(!lines.is_empty(), "{mode}: shapes were logged");
            assert!(
                !counts.is_empty(),
                "{mode}: the counts were written at the exit"
            );
        }
    }
}

#[test]
fn a_gemm_from_a_signal_handler_does_not_deadlock() {
    // refblas allocates while it computes, so a GEMM from a signal handler that interrupts
    // one corrupts its heap with or without us (4 runs in 30 without the preload): here it
    // returns at once, and everything the handler's call does is the interposer's.
    let dir = scratch("rel-siggemm");
    let mut cmd = life_cmd(&dir, true, &["@gemm:3", "@siggemm:400"]);
    cmd.env_remove("REFBLAS_TRACE")
        .env("REFBLAS_NO_COMPUTE", "return");
    let out = run_guarded(cmd);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let made: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("siggemm="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(made > 0, "{stdout}");
    // Every shape ends up counted, the handler's included.
    let (_, counts) = whole_miss_files(&dir);
    assert!(calls_of(&counts, &life_shape(7)) > 0, "{counts:?}");
}

#[test]
fn cancelling_a_thread_inside_a_gemm_does_not_abort_the_host() {
    // Cancellation acted on between GEMMs (the host's own cancellation point), and inside
    // the real library (refblas's REFBLAS_CANCEL_POINT, as rocBLAS's device waits): the
    // unwinding passes through the interposer's frames back to the host. Without the
    // interposer both runs survive, so must they with it.
    for inside in [false, true] {
        for preload in [false, true] {
            let dir = scratch(&format!("rel-cancel-{inside}-{preload}"));
            let mut cmd = life_cmd(&dir, preload, &["@gemm:3", "@cancel:20"]);
            cmd.env_remove("REFBLAS_TRACE");
            if inside {
                cmd.env("REFBLAS_CANCEL_POINT", "1");
            }
            let out = run_guarded(cmd);
            assert!(
                out.status.success(),
                "inside the library: {inside}, preload: {preload}: {:?}: {}",
                out.status,
                text(&out.stderr)
            );
            assert!(text(&out.stdout).contains("cancelled=20\n"));
            if preload {
                whole_miss_files(&dir);
            }
        }
    }
}

/// Runs life_host with `last` after two misses (shape 0 twice, shape 1 once) and checks
/// that the counts and the summary were written on the way out.
fn way_out(name: &str, last: &[&str]) {
    let dir = scratch(name);
    let mut args = vec!["@repeat:0:2", "@repeat:1:1"];
    args.extend_from_slice(last);
    let out = life(&dir, &args);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{name}: {stderr}");
    assert!(
        stderr.contains("3 calls: 0 served, 0 default, 3 missed (2 shapes)"),
        "{name}: the summary: {stderr}"
    );
    let (lines, counts) = whole_miss_files(&dir);
    assert_eq!(lines.len(), 2, "{name}: {lines:?}");
    assert_eq!(calls_of(&counts, &life_number(0)), 2, "{name}: {counts:?}");
    assert_eq!(calls_of(&counts, &life_number(1)), 1, "{name}: {counts:?}");
}

#[test]
fn every_way_out_writes_counts_and_the_summary() {
    way_out("rel-out-exit", &[]);
    way_out("rel-out-Exit", &["@Exit"]);
    way_out("rel-out-quick-exit", &["@quick-exit"]);
    way_out("rel-out-exec", &["@exec:/bin/true"]);
}

#[test]
fn a_failed_exec_leaves_the_run_going_and_the_real_exit_writes_again() {
    let dir = scratch("rel-exec-fail");
    let out = life(
        &dir,
        &["@repeat:0:2", "@exec:/nonexistent/tunedblas", "@repeat:1:1"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(text(&out.stdout).contains("exec-failed="));
    assert_has(&stderr, "3 calls: 0 served, 0 default, 3 missed (2 shapes)");
    let (_, counts) = whole_miss_files(&dir);
    assert_eq!(calls_of(&counts, &life_number(1)), 1, "{counts:?}");
}

#[test]
fn a_raw_exit_group_keeps_every_shape_and_the_last_periodic_counts() {
    // Counts are rewritten at least once a second while new shapes come: a process that
    // leaves with a raw exit_group (or SIGKILL) keeps counts that fresh.
    let dir = scratch("rel-exit-group");
    let out = life(
        &dir,
        &["@repeat:4:100", "@sleep:1100", "@repeat:5:1", "@exit-group"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (lines, counts) = whole_miss_files(&dir);
    assert_eq!(
        lines,
        vec![miss_line(&life_number(4)), miss_line(&life_number(5))]
    );
    assert_eq!(calls_of(&counts, &life_number(4)), 100, "{counts:?}");
}

#[test]
fn gemms_from_late_destructors_reach_the_counts() {
    // An exit handler registered before the first GEMM runs after the interposer's.
    let dir = scratch("rel-late-dtor");
    let out = life(&dir, &["@atexit-gemm", "@repeat:0:1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (lines, counts) = whole_miss_files(&dir);
    assert!(lines.contains(&miss_line(&life_shape(4095))), "{lines:?}");
    assert_eq!(calls_of(&counts, &life_shape(4095)), 1, "{counts:?}");
}

#[test]
fn more_than_sixteen_thousand_shapes_are_all_recorded() {
    let dir = scratch("rel-many-shapes");
    let n = 20_001;
    let out = life(&dir, &[&format!("@distinct:{n}")]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_has(&text(&out.stdout), "failed=0");
    assert!(!stderr.contains("not recorded"), "{stderr}");
    let (lines, counts) = whole_miss_files(&dir);
    assert_eq!(lines.len(), n, "every shape in the log");
    assert_eq!(counts.len(), n, "every shape in the counts");
    assert!(counts.iter().all(|(_, c)| *c == 1));
}

#[test]
fn relative_miss_and_stats_paths_survive_a_chdir() {
    let dir = scratch("rel-chdir");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let mut cmd = life_cmd(
        &dir,
        true,
        &[
            "@repeat:0:1",
            &format!("@chdir:{}", elsewhere.display()),
            "@repeat:1:1",
        ],
    );
    cmd.env_remove("REFBLAS_TRACE")
        .current_dir(&dir)
        .env("TUNEDBLAS_MISS_DIR", "misses")
        .env("TUNEDBLAS_STATS", "stats.json");
    let out = run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written in the folder the host moved to"
    );
    let (lines, counts) = whole_miss_files(&dir);
    assert_eq!(lines.len(), 2);
    assert_eq!(counts.len(), 2);
    let stats = std::fs::read_to_string(dir.join("stats.json")).expect("stats where asked");
    assert_has(&stats, "\"missed_shapes\": 2");
}

#[test]
fn a_fork_child_writes_its_own_stats_beside_the_parents() {
    let dir = scratch_with_hit("rel-fork-stats", HIT);
    let stats = dir.join("stats.json");
    let mut cmd = fault_cmd(&dir, true, &[&format!("{A}:3"), "@forkx", B]);
    cmd.env("TUNEDBLAS_STATS", &stats);
    let out = run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let parent: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    // The parent made A three times and B once; the child B once.
    assert_eq!(parent["calls"], 4, "{parent}");
    let child: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("stats.json.") && !n.contains(".tmp."))
        .collect();
    assert_eq!(child.len(), 1, "{child:?}");
    let child: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(&child[0])).unwrap()).unwrap();
    assert_eq!(child["calls"], 1, "{child}");
}

#[test]
fn a_restarted_process_with_the_same_host_and_pid_keeps_the_first_runs_counts() {
    // A container's PID 1 restarted: two runs as pid 1 of their own pid namespace.
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!(
            "skipped: this machine does not allow `unshare --pid` (needs root or user namespaces)"
        );
        return;
    }
    let dir = scratch("rel-pid-reuse");
    for run in 0..2 {
        let mut inner = life_cmd(&dir, true, &["@repeat:0:45"]);
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork"])
            .arg(inner.get_program())
            .args(inner.get_args());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.env_remove("REFBLAS_TRACE");
        let _ = &mut inner;
        let out = run_guarded(cmd);
        assert!(out.status.success(), "run {run}: {}", text(&out.stderr));
    }
    let (_, counts) = whole_miss_files(&dir);
    assert_eq!(
        counts,
        vec![
            (miss_line(&life_number(0)), 45),
            (miss_line(&life_number(0)), 45)
        ],
        "both runs' counts are kept"
    );
}

/// The bytes of an alternate signal stack a SIGTERM handler touched while the interposer ran
/// its whole exit path in it (life_host `@altexit:...:measure`), with and without the
/// preload, after `steps`. Every symbol is bound at load (`LD_BIND_NOW`): the loader's lazy
/// binding saves the whole vector state on the stack at a function's first call, which
/// would measure the loader, not us.
fn altstack_used(dir: &Path, preload: bool, steps: &[&str]) -> usize {
    let mut args = steps.to_vec();
    args.push("@altexit:min+65536:measure");
    let mut cmd = life_cmd(dir, preload, &args);
    cmd.env_remove("REFBLAS_TRACE")
        .env("LD_BIND_NOW", "1")
        .env("TUNEDBLAS_STATS", dir.join("stats.json"));
    let out = run_guarded(cmd);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("altstack-used="))
        .and_then(|n| n.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"))
}

#[test]
fn the_exit_paths_fit_a_small_signal_stack_and_a_small_thread_stack() {
    // A SIGTERM handler on an alternate stack calls _exit, exit or _Exit after misses were
    // made: the interposer writes the counts, the stats, the status and the summary there.
    // The stack is this CPU's signal frame (sysconf(_SC_MINSIGSTKSZ)) plus 8 KiB, well under
    // SIGSTKSZ (the size Rust's runtime gives every thread), with a guard page below it.
    for mode in ["_exit", "exit", "Exit"] {
        let dir = scratch(&format!("rel-altexit-{mode}"));
        let mut cmd = life_cmd(
            &dir,
            true,
            &[
                "@distinct:40",
                "@repeat:3:70",
                &format!("@altexit:min+8192:{mode}"),
            ],
        );
        cmd.env_remove("REFBLAS_TRACE")
            .env("TUNEDBLAS_STATS", dir.join("stats.json"));
        let out = run_guarded(cmd);
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(7),
            "{mode}: {:?} {stderr}",
            out.status
        );
        assert!(
            stderr.contains("110 calls: "),
            "{mode}: the summary: {stderr}"
        );
        let (_, counts) = whole_miss_files(&dir);
        assert_eq!(calls_of(&counts, &life_number(3)), 71, "{mode}: {counts:?}");
        assert!(dir.join("stats.json").is_file(), "{mode}: the stats");
    }
    // _exit from a thread with a 16 KiB stack (PTHREAD_STACK_MIN).
    let dir = scratch("rel-thread-exit");
    let out = life(&dir, &["@distinct:40", "@thread-exit:16384"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    let (_, counts) = whole_miss_files(&dir);
    assert_eq!(counts.len(), 40);
    // What the interposer's own frames take: the same handler's high-water mark with and
    // without it (counts, stats file, status files and summary: 3.1 KiB,
    // docs/benchmarks/history.md).
    let steps = ["@distinct:40", "@repeat:3:70"];
    let with = altstack_used(&scratch("rel-altstack-with"), true, &steps);
    let without = altstack_used(&scratch("rel-altstack-without"), false, &steps);
    println!("alternate stack used: {with} bytes with the preload, {without} without");
    assert!(
        with <= without + 4 * 1024,
        "the exit path takes {} bytes of stack beyond the host's own",
        with - without
    );
}

/// A life_host run under the preload with `TUNEDBLAS_STATS` set; returns its output and
/// the stats it wrote.
fn life_with_stats(dir: &Path, args: &[&str]) -> (std::process::Output, serde_json::Value) {
    let stats = dir.join("stats.json");
    let mut cmd = life_cmd(dir, true, args);
    cmd.env_remove("REFBLAS_TRACE")
        .env("TUNEDBLAS_STATS", &stats);
    let out = run_guarded(cmd);
    assert!(
        out.status.success(),
        "{:?}: {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    let json = std::fs::read_to_string(&stats).unwrap_or_else(|e| panic!("the stats: {e}"));
    (out, serde_json::from_str(&json).unwrap())
}

/// A GEMM from a signal handler on the very thread that is finishing the interposer's
/// start-up (a profiling timer's handler): it waited for its own thread's start-up until
/// the stall limit (an outside tester's host: 1.02 s in 10 runs of 10), and the first call
/// of another thread, waiting for that start-up meanwhile, hit the limit too and went
/// unrecorded. The handler's call now passes through at once (counted as passed through),
/// the start-up ends, and the other thread's call is recorded. (life_host raises the signal
/// inside the start-up's last step, 100 ms after the other thread began its call.)
#[test]
fn a_signal_handler_gemm_on_the_starting_thread_passes_through_at_once() {
    let dir = scratch("rel-start-signal");
    let (out, stats) = life_with_stats(&dir, &["@start-signal:100"]);
    assert_has(&text(&out.stdout), "start-signal=0\n");
    assert_eq!(stats["passed_through"], 1, "the handler's call: {stats}");
    assert_eq!(
        stats["missed_calls"], 2,
        "the starting thread's and the other thread's: {stats}"
    );
    let (mut lines, _) = whole_miss_files(&dir);
    lines.sort();
    let mut want = vec![miss_line(&life_shape(100)), miss_line(&life_shape(101))];
    want.sort();
    assert_eq!(lines, want, "not the handler's shape (passed through)");
}

/// The process's first GEMM made in a signal handler on a 12 KiB alternate signal stack:
/// the start-up it began (hashing, the profile, the miss folder) overflowed it (SIGSEGV; an
/// outside tester: 9 to 11 KiB in the release build, up to 16 KiB in the debug one). A call
/// on the alternate signal stack never starts the interposer up: it passes through, counted,
/// and the next call outside the handler starts it.
#[test]
fn a_first_gemm_on_a_small_signal_stack_passes_through_and_a_later_call_starts_up() {
    let dir = scratch("rel-alt-gemm");
    let (out, stats) = life_with_stats(&dir, &["@alt-gemm:12288", "@gemm:5"]);
    let stdout = text(&out.stdout);
    assert_has(&stdout, "alt-gemm=0\n");
    assert_has(&stdout, "status=0\n");
    assert_eq!(stats["passed_through"], 1, "the handler's call: {stats}");
    assert_eq!(stats["missed_calls"], 1, "the later call: {stats}");
    let (lines, _) = whole_miss_files(&dir);
    assert_eq!(lines, vec![miss_line(&life_shape(5))]);
}
