//! The live status (issue 16): `tunedblas status` on the files a running host writes under
//! the interposer, the Prometheus file, dead processes, planted symlinks and fork children.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::faults::{life_cmd, wait_guarded};
use common::*;

fn status_json(miss_dir: &Path) -> serde_json::Value {
    let out = Command::new(tunedblas())
        .args(["status", "--json"])
        .arg(miss_dir)
        .output()
        .expect("run tunedblas status");
    serde_json::from_str(&ok(&out)).expect("status --json is JSON")
}

/// The process of `pid` in a `status --json` answer.
fn process(v: &serde_json::Value, pid: u32) -> Option<serde_json::Value> {
    v["processes"]
        .as_array()?
        .iter()
        .find(|p| p["pid"].as_u64() == Some(u64::from(pid)))
        .cloned()
}

fn counter(p: &serde_json::Value, name: &str) -> u64 {
    p["backends"][0]["counters"][name].as_u64().unwrap_or(0)
}

/// Every line of a Prometheus text file: comments, or `name{labels} value` with a numeric
/// value. Returns (name, labels, value).
fn prom_samples(text: &str) -> Vec<(String, String, f64)> {
    let mut v = Vec::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let (name, rest) = line.split_once('{').unwrap_or_else(|| panic!("{line}"));
        let (labels, value) = rest.rsplit_once("} ").unwrap_or_else(|| panic!("{line}"));
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        for l in labels.split(',') {
            let (k, val) = l.split_once('=').unwrap_or_else(|| panic!("{line}"));
            assert!(k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            assert!(val.starts_with('"') && val.ends_with('"'), "{line}");
        }
        v.push((
            name.to_owned(),
            labels.to_owned(),
            value.parse().unwrap_or_else(|_| panic!("{line}")),
        ));
    }
    v
}

/// A life_host under the interposer that runs `steps`, then waits for the file `go`, with
/// its status written by the writer thread (opt-in), which shows an idle process exactly as
/// it stands.
fn waiting_for(dir: &Path, steps: &[&str], go: &Path) -> Command {
    let wait = format!("@wait-file:{}", go.display());
    let mut cmd = life_cmd(dir, true, &[steps, &[wait.as_str()]].concat());
    cmd.env("TUNEDBLAS_STATUS_THREAD", "1");
    cmd
}

/// Starts `cmd` (a life_host) with stdin closed and these stdout and stderr; returns the
/// child and its pid.
fn spawn(mut cmd: Command, stdout: Stdio, stderr: Stdio) -> (Child, u32) {
    cmd.stdout(stdout).stderr(stderr).stdin(Stdio::null());
    let child = cmd.spawn().expect("spawn life_host");
    let pid = child.id();
    (child, pid)
}

/// Looks every 20 ms, for up to two minutes, until `look` finds something; `None` if it
/// never did. The hosts wait for the test, so what a test waits for here comes unless it
/// is broken: no time limit is asserted.
fn poll<T>(mut look: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..6000 {
        if let Some(found) = look() {
            return Some(found);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

/// That the status `p` of a process says it is in `state`, whether it is the final one,
/// and that it counted `missed` missed calls.
fn assert_process(p: &serde_json::Value, state: &str, fin: bool, missed: u64) {
    assert_eq!(p["state"], state, "{p}");
    assert_eq!(p["final"], fin, "{p}");
    assert_eq!(counter(p, "missed"), missed, "{p}");
}

fn files_ending(dir: &Path, end: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.to_string_lossy().ends_with(end));
    v
}

#[test]
fn status_shows_a_running_hosts_counters_and_its_prometheus_file_parses() {
    let dir = scratch("status-live");
    let miss_dir = dir.join("misses");
    let go = dir.join("go");
    let steps = ["@pid", "@distinct:5", "@repeat:0:300"];
    let (mut child, pid) = spawn(
        waiting_for(&dir, &steps, &go),
        Stdio::piped(),
        Stdio::piped(),
    );
    // The writer thread writes within about a second; look until it has (the host waits
    // for us: no time limit is asserted, the hang guard of the run below bounds it).
    let seen =
        poll(|| process(&status_json(&miss_dir), pid).filter(|p| counter(p, "missed") >= 305));
    let p = seen.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("no live status with the host's 305 missed calls")
    });
    assert_process(&p, "running", false, 305);
    assert_eq!(p["backends"][0]["missed_shapes"], 5, "{p}");
    assert_eq!(p["backends"][0]["ranks"][0]["missed_calls"], 305, "{p}");
    let top = &p["backends"][0]["top_missed"];
    assert_eq!(top[0]["calls"], 301, "the most called shape first: {p}");
    assert_eq!(top.as_array().unwrap().len(), 5, "{p}");
    // The text form says the same while it runs.
    let out = Command::new(tunedblas())
        .arg("status")
        .arg(&miss_dir)
        .output()
        .unwrap();
    let shown = ok(&out);
    assert_has(&shown, "running");
    assert_has(&shown, "305 missed (5 shapes)");
    // The Prometheus file of the live process parses and carries the same numbers.
    let prom = files_ending(&miss_dir, ".prom");
    assert_eq!(prom.len(), 1, "{prom:?}");
    let samples = prom_samples(&std::fs::read_to_string(&prom[0]).unwrap());
    let missed = samples
        .iter()
        .find(|(n, l, _)| n == "tunedblas_calls_total" && l.contains("outcome=\"missed\""))
        .expect("a missed counter");
    assert_eq!(missed.2, 305.0);
    assert_has(&missed.1, &format!("pid=\"{pid}\""));
    assert!(samples
        .iter()
        .any(|(n, l, v)| n == "tunedblas_missed_shapes" && l.contains("rank=\"0\"") && *v == 5.0));
    // Files are the user's alone.
    use std::os::unix::fs::PermissionsExt;
    for f in files_ending(&miss_dir, ".status.json").iter().chain(&prom) {
        let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
    }
    // Let it go: the final status says it exited; its Prometheus file is gone.
    std::fs::write(&go, "").unwrap();
    let out = wait_guarded(child, "life_host");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let p = process(&status_json(&miss_dir), pid).expect("still listed");
    assert_process(&p, "exited", true, 305);
    assert!(files_ending(&miss_dir, ".prom").is_empty());
}

#[test]
fn a_killed_process_is_gone_and_a_reused_pid_is_not_taken_for_it() {
    let dir = scratch("status-gone");
    let miss_dir = dir.join("misses");
    // A real host killed with SIGKILL while it waits: its last update stays, shown gone.
    let go = dir.join("never");
    let (mut killed, kpid) = spawn(
        waiting_for(&dir, &["@distinct:3"], &go),
        Stdio::null(),
        Stdio::null(),
    );
    let live =
        poll(|| process(&status_json(&miss_dir), kpid).filter(|p| counter(p, "missed") == 3))
            .is_some();
    let _ = killed.kill();
    let _ = killed.wait();
    assert!(live, "the host's status never showed its 3 misses");
    let p = process(&status_json(&miss_dir), kpid).expect("a killed process stays listed");
    assert_process(&p, "gone", false, 3);
    let me = std::process::id();
    let host = {
        let mut buf = [0u8; 256];
        unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        let end = buf.iter().position(|&b| b == 0).unwrap();
        String::from_utf8_lossy(&buf[..end])
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    let body = |pid: u32, start: u64, fin: bool| {
        format!(
            r#"{{"format":1,"host":"{host}","pid":{pid},"start_ticks":{start},"updated_unix_ms":1,"final":{fin},"backends":[{{"backend":"rocblas","counters":{{"served":1,"default":2,"near":0,"missed":3,"passed_through":0,"fallbacks":0}},"missed_shapes":1,"ranks":[],"top_missed":[]}}]}}"#
        )
    };
    std::fs::create_dir_all(&miss_dir).unwrap();
    // This test's own pid with another start time: a reused pid, not the old process.
    std::fs::write(
        miss_dir.join(format!("{host}-{me}-1.status.json")),
        body(me, 1, false),
    )
    .unwrap();
    std::fs::write(miss_dir.join(format!("{host}-{me}-1.prom")), "x 1\n").unwrap();
    // A pid that cannot be alive, finished properly.
    std::fs::write(
        miss_dir.join(format!("{host}-4194999-7.status.json")),
        body(4_194_999, 7, true),
    )
    .unwrap();
    // Another host's process.
    std::fs::write(
        miss_dir.join("otherhost-1-1.status.json"),
        body(1, 1, false).replace(&format!("\"{host}\""), "\"otherhost\""),
    )
    .unwrap();
    let v = status_json(&miss_dir);
    let state = |pid: u32, start: u64| {
        v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == pid && p["start_ticks"] == start)
            .map(|p| p["state"].as_str().unwrap().to_owned())
    };
    assert_eq!(state(me, 1).as_deref(), Some("gone"), "{v}");
    assert_eq!(state(4_194_999, 7).as_deref(), Some("exited"), "{v}");
    assert_eq!(state(1, 1).as_deref(), Some("elsewhere"), "{v}");
    // --prune removes the stale Prometheus file of the gone process.
    let out = Command::new(tunedblas())
        .args(["status", "--prune"])
        .arg(&miss_dir)
        .output()
        .unwrap();
    let shown = ok(&out);
    assert_has(&shown, "gone");
    assert!(!miss_dir.join(format!("{host}-{me}-1.prom")).exists());
    assert!(
        files_ending(&miss_dir, ".prom").is_empty(),
        "the killed host's Prometheus file is pruned too"
    );
}

#[test]
fn a_symlink_planted_at_the_status_name_is_not_followed_and_a_fork_child_has_its_own() {
    let dir = scratch("status-symlink");
    let miss_dir = dir.join("misses");
    std::fs::create_dir_all(&miss_dir).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    // The names hold a random part: the host makes its calls (the first writes its status),
    // then waits while its files are replaced by links to the victim.
    let go = dir.join("go");
    let cmd = life_cmd(
        &dir,
        true,
        &[
            "@pid",
            "@distinct:2",
            &format!("@wait-file:{}", go.display()),
            "@fork-gemm:40:3",
        ],
    );
    let (mut child, pid) = spawn(cmd, Stdio::piped(), Stdio::piped());
    let name = poll(|| files_ending(&miss_dir, ".status.json").into_iter().next());
    let name = name.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("the host wrote no status")
    });
    let stem = name
        .to_string_lossy()
        .trim_end_matches(".status.json")
        .to_owned();
    for suffix in [".status.json", ".prom"] {
        let at = format!("{stem}{suffix}");
        let _ = std::fs::remove_file(&at);
        std::os::unix::fs::symlink(&victim, &at).unwrap();
    }
    std::fs::write(&go, "").unwrap();
    let _ = child.stdin.take();
    let out = wait_guarded(child, "life_host");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(!std::fs::symlink_metadata(&name)
        .unwrap()
        .file_type()
        .is_symlink());
    let v = status_json(&miss_dir);
    let parent = process(&v, pid).expect("the parent's status");
    assert_eq!(counter(&parent, "missed"), 2, "{parent}");
    let child_pid: u32 = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("child="))
        .expect("child=")
        .parse()
        .unwrap();
    let child = process(&v, child_pid).expect("the fork child's own status");
    assert_eq!(
        counter(&child, "missed"),
        3,
        "the child's calls only: {child}"
    );
    assert_eq!(child["final"], true, "{child}");
}

/// Starts life_host with `steps` (which end by printing `pid=` and waiting), `env` set, and
/// waits until it printed its pid: the host then waits. Returns the child and its pid.
fn waiting_host(dir: &Path, steps: &[&str], env: &[(&str, &str)]) -> (std::process::Child, u32) {
    let mut cmd = life_cmd(dir, true, steps);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (mut child, pid) = spawn(cmd, Stdio::piped(), Stdio::null());
    use std::io::{BufRead, BufReader};
    let stdout = child.stdout.take().unwrap();
    let waiting = BufReader::new(stdout)
        .lines()
        .any(|l| l.is_ok_and(|l| l.starts_with("pid=")));
    assert!(waiting, "the host got to its wait");
    (child, pid)
}

/// The threads of a running process, from /proc.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// The calls counted in a process's counts files, from the files on disk.
fn counted_calls(miss_dir: &Path) -> u64 {
    files_ending(miss_dir, ".counts.csv")
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .skip(1)
                .map(|l| l.rsplit(',').next().unwrap().parse::<u64>().unwrap())
                .collect::<Vec<_>>()
        })
        .sum()
}

#[test]
fn by_default_the_calling_threads_write_the_status_and_a_killed_process_keeps_its_counts() {
    // No thread of ours: the host's one thread is all /proc shows while it waits. Its calls
    // wrote the status (the first at once, then about once a second while calls arrive),
    // and the miss counts with it, so a SIGKILL loses at most a second of counts, although
    // no shape reached 1,024 calls.
    let dir = scratch("status-no-thread");
    let miss_dir = dir.join("misses");
    let go = dir.join("never");
    let (mut child, pid) = waiting_host(
        &dir,
        &[
            "@distinct:2",
            "@repeat:0:100",
            "@sleep:1100",
            "@repeat:0:100",
            "@pid",
            &format!("@wait-file:{}", go.display()),
        ],
        &[],
    );
    let during = threads(pid);
    let status = process(&status_json(&miss_dir), pid);
    let counted = counted_calls(&miss_dir);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(during, 1, "no thread of the interposer's own");
    let status = status.expect("the calls wrote a status");
    // 202 missed calls; the second burst ticked at its 128th count, more than a second
    // after the first: at least that many, at most all, on disk and in the status.
    let missed = counter(&status, "missed");
    assert!((128..=202).contains(&missed), "{status}");
    assert!(
        (128..=202).contains(&counted),
        "{counted} calls counted on disk"
    );
}

#[test]
fn the_status_thread_is_opt_in() {
    let dir = scratch("status-thread");
    let go = dir.join("never");
    let (mut child, pid) = waiting_host(
        &dir,
        &[
            "@distinct:1",
            "@pid",
            &format!("@wait-file:{}", go.display()),
        ],
        &[("TUNEDBLAS_STATUS_THREAD", "1")],
    );
    let during = threads(pid);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(during, 2, "the host's thread and the status writer");
}

#[test]
fn debug_says_each_shapes_decision_once_and_the_no_profile_line_names_the_miss_folder() {
    let (hit, dflt, miss) = ("ex:NN:s:32:16:24", "ex:NN:s:8:8:8", "ex:NN:s:4:4:4");
    let dir = scratch("status-debug");
    let sol = common::faults::tuned(hit);
    Profile::v4(&dir)
        .tuned(hit, sol)
        .row(dflt, "Default")
        .write();
    let mut cmd = host4_cmd(
        &dir,
        true,
        &[
            &format!("{hit}:3"),
            &format!("{dflt}:3"),
            &format!("{miss}:3"),
        ],
    );
    cmd.env("TUNEDBLAS_LOG", "debug");
    let out = run(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let once = |needle: &str| {
        let n = stderr.lines().filter(|l| l.contains(needle)).count();
        assert_eq!(n, 1, "one line with {needle:?}: {stderr}");
    };
    once(&format!("served with solution {sol}"));
    once("a Default row: the caller's own call");
    once(&format!(
        "missed {} (rank 0): no row; recorded in",
        miss_line(miss)
    ));
    // At the default level, none of these.
    let out = run(host4_cmd(
        &dir,
        true,
        &[&format!("{hit}:3"), &format!("{miss}:3")],
    ));
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains("served with solution") && !stderr.contains("no row;"),
        "{stderr}"
    );
    // No profile at all: the start line says where the misses go.
    let bare = scratch("status-no-profile");
    let out = run(host4_cmd(&bare, true, &[miss]));
    let stderr = text(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("no profile") || l.contains("profiles.json"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert_has(
        line,
        &format!("misses go to {}", bare.join("misses").display()),
    );
}

/// A status file as the interposer writes it (format 1), for a process on another host (so
/// its liveness is not looked at): one backend per `(name, [served, default, near, missed,
/// passed through, fallbacks], missed shapes, near shapes)`, with the calls and hit rate the
/// interposer would write.
fn plant_status(dir: &Path, pid: u32, backends: &[(&str, [u64; 6], u64, u64)]) {
    let names = [
        "served",
        "default",
        "near",
        "missed",
        "passed_through",
        "fallbacks",
    ];
    let b: Vec<serde_json::Value> = backends
        .iter()
        .map(|(name, c, missed_shapes, near_shapes)| {
            let counters: serde_json::Map<String, serde_json::Value> = names
                .iter()
                .zip(c)
                .map(|(n, v)| (n.to_string(), (*v).into()))
                .collect();
            let hit = c[0] + c[1] + c[2];
            let decided = hit + c[3] + c[5];
            let rate =
                (decided > 0).then(|| ((hit * 1000 + decided / 2) / decided) as f64 / 1000.0);
            serde_json::json!({
                "backend": name, "counters": counters, "calls": c.iter().sum::<u64>(),
                "missed_shapes": missed_shapes, "near_shapes": near_shapes, "hit_rate": rate,
                "ranks": [], "top_missed": [],
            })
        })
        .collect();
    let v = serde_json::json!({
        "format": 1, "host": "another-host.example", "pid": pid, "start_ticks": pid,
        "updated_unix_ms": 0, "final": true, "backends": b,
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join(format!(
            "another-host.example-{pid}-{pid}.0123456789abcdef.status.json"
        )),
        v.to_string(),
    )
    .unwrap();
}

/// Issue 26: `status` gave no hit rate and no total across processes. Each backend line
/// says the hit rate its file holds; the totals are the sums of the files' figures, their
/// hit rate over the summed counters.
#[test]
fn status_gives_each_backends_hit_rate_and_the_total_over_processes() {
    let dir = scratch("status-totals").join("misses");
    plant_status(
        &dir,
        101,
        &[
            ("rocblas", [6, 1, 2, 3, 10, 0], 2, 1),
            ("hipblaslt", [0, 0, 0, 4, 0, 0], 4, 0),
        ],
    );
    plant_status(&dir, 102, &[("rocblas", [1, 0, 0, 1, 0, 0], 1, 0)]);
    plant_status(&dir, 103, &[("rocblas", [0, 0, 0, 0, 7, 0], 0, 0)]);
    let out = Command::new(tunedblas())
        .arg("status")
        .arg(&dir)
        .output()
        .unwrap();
    let shown = ok(&out);
    for line in [
        "  rocblas: 22 calls: 6 served, 1 default, 2 near (1 shapes), 3 missed (2 shapes), 10 passed through, 0 fallbacks; hit rate 75.0%",
        "  hipblaslt: 4 calls: 0 served, 0 default, 0 near (0 shapes), 4 missed (4 shapes), 0 passed through, 0 fallbacks; hit rate 0.0%",
        "  rocblas: 2 calls: 1 served, 0 default, 0 near (0 shapes), 1 missed (1 shapes), 0 passed through, 0 fallbacks; hit rate 50.0%",
        "  rocblas: 7 calls: 0 served, 0 default, 0 near (0 shapes), 0 missed (0 shapes), 7 passed through, 0 fallbacks; no hit rate (no call decided)",
        "total over 3 processes:",
        // (6 + 1 + 2 + 1) of (6 + 1 + 2 + 3 + 1 + 1) decided calls.
        "  rocblas (3 processes): 31 calls: 7 served, 1 default, 2 near, 4 missed, 17 passed through, 0 fallbacks; hit rate 71.4%",
        "  hipblaslt (1 process): 4 calls: 0 served, 0 default, 0 near, 4 missed, 0 passed through, 0 fallbacks; hit rate 0.0%",
    ] {
        assert!(shown.lines().any(|l| l == line), "no line {line:?} in:\n{shown}");
    }
    let v = status_json(&dir);
    let totals = v["totals"].as_array().unwrap();
    assert_eq!(totals[0]["backend"], "rocblas");
    assert_eq!(totals[0]["calls"], 31);
    assert_eq!(totals[0]["hit_rate"], 0.714);
    assert_eq!(totals[1]["counters"]["missed"], 4);
    // Every process keeps its file's own figures in the JSON too.
    let p = process(&v, 101).unwrap();
    assert_eq!(p["backends"][0]["hit_rate"], 0.75, "{p}");
    assert_eq!(p["backends"][0]["calls"], 22, "{p}");
}

/// Issue 26: a service user's miss folder (0700, its files 0600) read by another user said
/// "Permission denied ... (set TUNEDBLAS_MISS_DIR or name the folder)". It says whose folder
/// it is and the command that reads it. Run as root, the reader is `nobody` (setpriv); as
/// another user, a folder of one's own that its mode keeps closed.
#[test]
fn a_folder_of_another_user_is_read_as_that_user() {
    use std::os::unix::fs::PermissionsExt;
    let base = scratch("status-denied");
    let dir = base.join("misses");
    plant_status(&dir, 201, &[("rocblas", [1, 0, 0, 1, 0, 0], 1, 0)]);
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let as_reader = |dir: &Path| {
        let mut cmd = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(tunedblas());
            c
        } else {
            Command::new(tunedblas())
        };
        cmd.arg("status").arg(dir);
        cmd.output().expect("run tunedblas status")
    };
    if !root {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o000)).unwrap();
        let out = as_reader(&dir);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success());
        assert_has(&err, "it is yours, but its mode 0000");
        assert!(!err.contains("set TUNEDBLAS_MISS_DIR"), "{err}");
        return;
    }
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The folder as the interposer makes it: 0700, the user's own.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = as_reader(&dir);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_has(&err, &format!(
            "it belongs to user 'root' (mode 0700): the interposer keeps its files to the user it runs as; read them as that user: sudo -u root {} status {}",
            tunedblas().display(),
            dir.display()
        ));
    assert!(!err.contains("set TUNEDBLAS_MISS_DIR"), "{err}");
    // A folder the reader may list (0755) still holds files only their user reads.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for f in files_ending(&dir, ".status.json") {
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let out = as_reader(&dir);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("1 of 1 status files cannot be read: it belongs to user 'root' (mode 0600)")
            && err.contains("sudo -u root"),
        "{err}"
    );
}

/// Issue 26: with `TUNEDBLAS_GROUP_READ=1` the miss folder the interposer makes and every
/// file it writes there are readable by the group (a node-exporter or an operator of the
/// service's group), even under a service's `UMask=0077`; without it they are the user's
/// alone.
#[test]
fn group_read_makes_the_miss_folder_and_files_readable_by_the_group() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for (group, folder_mode, file_mode) in [(true, 0o750, 0o640), (false, 0o700, 0o600)] {
        let dir = scratch(&format!("status-group-{group}"));
        let miss_dir = dir.join("misses");
        let mut cmd = life_cmd(&dir, true, &["@distinct:3"]);
        if group {
            cmd.env("TUNEDBLAS_GROUP_READ", "1");
        }
        // SAFETY: umask is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0o077);
                Ok(())
            });
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let out = wait_guarded(cmd.spawn().expect("spawn life_host"), "life_host");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            !text(&out.stderr).contains("TUNEDBLAS_GROUP_READ"),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(mode(&miss_dir), folder_mode, "group {group}");
        let files: Vec<_> = std::fs::read_dir(&miss_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        assert!(
            files
                .iter()
                .any(|f| f.to_string_lossy().ends_with(".status.json")),
            "{files:?}"
        );
        assert!(files.len() >= 2, "a miss log and the status: {files:?}");
        for f in &files {
            assert_eq!(mode(f), file_mode, "group {group}: {}", f.display());
        }
    }
}
