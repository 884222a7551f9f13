//! Reliability, hot reload of the Lt backends (issue 26), each body run over cuBLASLt and
//! hipBLASLt on their stand-ins: a host making F.linear calls in a loop serves the rows
//! committed to the store while it runs (a row gained, changed, removed: what a fresh
//! process runs, one line each), never a store switched to another build's rows, nor a store
//! broken mid-run in place of the rows it serves, and keeps its start-up rows with
//! `TUNEDBLAS_RELOAD=0`; a fork child or a signal exit in the middle of a reload does not
//! hang, and the child reloads on its own. Rows are committed as the store commits them
//! (`Profile::commit`); what ran is read from the stand-in's trace. Every wait is bounded
//! (a minute for a line, two for the host); nothing is timed.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use crate::common::lt::{self as lts, Side};
use crate::common::*;
use tunedblas_core::cublaslt::{op_and_signature, LtKey, R_16BF};

/// The call every host makes, and the one a fork child makes (`N,M,K`).
const CALL: &str = "64,8,64";
const CHILD_CALL: &str = "32,8,64";

/// One Lt backend's stand-in (`common::lt::Side`) and two solutions it runs.
struct Backend {
    side: &'static Side,
    /// Two tuned solutions, and the trace's `algo` of each.
    tuned: [(&'static str, &'static str); 2],
    /// The `algo` of the heuristic's answer (what the host passes) in the trace.
    heuristic: &'static str,
}

fn cublaslt() -> Backend {
    let side = lts::cublaslt();
    Backend {
        side,
        tuned: [
            side.tuned,
            (
                "Gemm_Cublaslt_algo66_tile20_stages35_splitk1_red0_swizzle0_custom0_inner0_cluster2",
                "66",
            ),
        ],
        heuristic: "6",
    }
}

fn hipblaslt() -> Backend {
    let side = lts::hipblaslt();
    Backend {
        side,
        tuned: [side.tuned, ("Gemm_Hipblaslt_43", "43")],
        heuristic: "6",
    }
}

/// Runs `body` on each backend in a fresh folder named after `name`.
fn on_both(name: &str, body: fn(&Backend, &Path)) {
    body(&cublaslt(), &scratch(&format!("rel-ltreload-{name}-cu")));
    body(&hipblaslt(), &scratch(&format!("rel-ltreload-{name}-hip")));
}

impl Backend {
    /// Commits the profile `lt` for build `sha` with `rows` to `dir`'s store.
    fn commit(&self, dir: &Path, sha: &str, rows: &[String]) {
        Profile::new(&dir.join("profiles"), "lt", sha)
            .validators(self.side.validators)
            .lines(rows)
            .commit();
    }

    /// The rank file of `dir`'s profile.
    fn rank0(&self, dir: &Path) -> PathBuf {
        dir.join("profiles/lt/tunableop_results0.csv")
    }

    /// The row serving `solution` for `call` (`N,M,K`).
    fn row(&self, call: &str, solution: &str) -> String {
        let [n, m, k] = dims(call);
        let (op, sig) = op_and_signature(&LtKey::linear(R_16BF, n, m, k));
        format!("{op},{sig},{solution},0.01")
    }

    /// The host on `dir`'s store, its trace in `trace`.
    fn host(&self, dir: &Path, trace: &str, steps: &[String]) -> Command {
        let mut cmd = Command::new(&self.side.host);
        cmd.arg(&self.side.module).args(steps);
        host_env(&mut cmd, dir, true);
        cmd.env_remove("REFBLAS_TRACE")
            .env_remove(self.side.var("CANCEL_POINT"))
            .env(self.side.var("TRACE"), dir.join(trace));
        cmd
    }

    /// The trace line of one `call` made by a fresh process on `dir`'s store now.
    fn fresh(&self, dir: &Path, call: &str) -> HashMap<String, String> {
        let name = "fresh.log";
        let _ = std::fs::remove_file(dir.join(name));
        let out = self.host(dir, name, &[call.into()]).output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let t = trace_file(&dir.join(name));
        assert_eq!(t.len(), 1, "{t:?}");
        t.into_iter().next().unwrap()
    }
}

fn dims(call: &str) -> [i64; 3] {
    let v: Vec<i64> = call.split(',').map(|d| d.parse().unwrap()).collect();
    [v[0], v[1], v[2]]
}

/// The `algo` of each traced call of the shape `like` (a fresh process's line) has.
fn algos_of(path: &Path, like: &HashMap<String, String>) -> Vec<String> {
    let shape = |l: &HashMap<String, String>| ["m", "n", "k"].map(|f| l.get(f).cloned());
    trace_file(path)
        .into_iter()
        .filter(|l| shape(l) == shape(like))
        .map(|l| l["algo"].clone())
        .collect()
}

/// The algorithms in the order they ran, each run of calls to one algorithm named once.
fn order(algos: &[String]) -> Vec<&str> {
    runs(algos).iter().map(|r| r.0).collect()
}

/// `algos` as runs of one algorithm each: [(algo, how many)].
fn runs(algos: &[String]) -> Vec<(&str, usize)> {
    let mut out: Vec<(&str, usize)> = Vec::new();
    for a in algos {
        match out.last_mut() {
            Some((last, n)) if *last == a.as_str() => *n += 1,
            _ => out.push((a, 1)),
        }
    }
    out
}

/// A running host and its output lines as they come; killed if the test ends first.
struct Running {
    child: Child,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    out_seen: Vec<String>,
    err_seen: Vec<String>,
}

fn lines_of(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (at most a minute) until `seen`, filled from `rx`, has `times` lines holding
/// `what`; panics with what was seen.
fn wait_for(rx: &Receiver<String>, seen: &mut Vec<String>, what: &str, times: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.iter().filter(|l| l.contains(what)).count() < times {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => seen.push(l),
            Err(_) => panic!("never saw {what:?} {times} times: {seen:#?}"),
        }
    }
}

impl Running {
    fn start(mut cmd: Command) -> Running {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        let mut child = cmd.spawn().expect("the Lt host");
        let stdout = lines_of(child.stdout.take().unwrap());
        let stderr = lines_of(child.stderr.take().unwrap());
        Running {
            child,
            stdout,
            stderr,
            out_seen: Vec::new(),
            err_seen: Vec::new(),
        }
    }

    /// Waits for `n` results, each a success.
    fn results(&mut self, n: usize) {
        wait_for(&self.stdout, &mut self.out_seen, "status=", n);
        assert!(
            self.out_seen
                .iter()
                .filter(|l| l.contains("status="))
                .all(|l| l.ends_with("status=0")),
            "{:?}",
            self.out_seen
        );
    }

    /// Waits for a line on stdout holding `what`.
    fn printed(&mut self, what: &str) {
        wait_for(&self.stdout, &mut self.out_seen, what, 1);
    }

    /// Waits for `times` stderr lines holding `what` in all.
    fn said_times(&mut self, what: &str, times: usize) {
        wait_for(&self.stderr, &mut self.err_seen, what, times);
    }

    fn said(&mut self, what: &str) {
        self.said_times(what, 1);
    }

    /// Waits (at most two minutes: a hang fails the test) for the host to end; returns its
    /// status, stdout and stderr.
    fn end(mut self) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the host hung: {:#?}", self.err_seen);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        // Both streams end once the host and any child it forked are gone.
        for (rx, seen) in [
            (&self.stdout, &mut self.out_seen),
            (&self.stderr, &mut self.err_seen),
        ] {
            while let Ok(l) = rx.recv_timeout(Duration::from_secs(60)) {
                seen.push(l);
            }
        }
        (status, self.out_seen.join("\n"), self.err_seen.join("\n"))
    }

    /// [`Running::end`] for a host that must end well; returns its stderr.
    fn finish(self) -> String {
        let (status, _, stderr) = self.end();
        assert!(status.success(), "{status:?}: {stderr}");
        stderr
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The host's steps: calls until each of `gates` exists in `dir`, then `tail_ms` more.
fn steps(dir: &Path, gates: &[&str], tail_ms: u32) -> Vec<String> {
    let mut s: Vec<String> = gates
        .iter()
        .map(|g| format!("@until:{}:{CALL}", dir.join(g).display()))
        .collect();
    s.push(format!("@for:{tail_ms}:{CALL}"));
    s
}

fn open(dir: &Path, gate: &str) {
    std::fs::write(dir.join(gate), "").unwrap();
}

/// Puts `what` in place of `path` by renaming a file made beside it (as an editor or a copy
/// does): a reader sees the old file or the new one.
fn replace(path: &Path, what: impl FnOnce(&Path)) {
    let tmp = path.with_extension("planted");
    let _ = std::fs::remove_file(&tmp);
    what(&tmp);
    std::fs::rename(&tmp, path).unwrap();
}

/// A row gained, changed, then removed while the host runs: each served (or no longer)
/// from the next look at the store on, as a fresh process on the store serves it, with one
/// line each; the call key missed many times before the row came (the repeated-miss cache
/// starts afresh with the new rows).
fn gained_changed_and_removed(b: &Backend, dir: &Path) {
    let other = b.row(CHILD_CALL, b.tuned[0].0);
    b.commit(dir, &b.side.sha, std::slice::from_ref(&other));
    let mut host = Running::start(b.host(dir, "trace.log", &steps(dir, &["g1", "g2", "g3"], 300)));
    host.results(5);
    let (gained, changed, removed) = (
        "profile lt reloaded: +1 rows, 0 changed, 0 removed",
        "profile lt reloaded: +0 rows, 1 changed, 0 removed",
        "profile lt reloaded: +0 rows, 0 changed, 1 removed",
    );
    // Each change: committed, said by the host, then what a fresh process runs for CALL.
    let mut change = |rows: &[String], said: &str| {
        b.commit(dir, &b.side.sha, rows);
        host.said(said);
        b.fresh(dir, CALL)
    };
    let fresh0 = change(&[other.clone(), b.row(CALL, b.tuned[0].0)], gained);
    assert_eq!(fresh0["algo"], b.tuned[0].1, "{fresh0:?}");
    open(dir, "g1");
    let fresh1 = change(&[other.clone(), b.row(CALL, b.tuned[1].0)], changed);
    assert_eq!(fresh1["algo"], b.tuned[1].1, "{fresh1:?}");
    open(dir, "g2");
    let fresh2 = change(std::slice::from_ref(&other), removed);
    open(dir, "g3");
    let stderr = host.finish();
    // One line per change, and none for the looks between.
    for line in [gained, changed, removed] {
        assert_eq!(stderr.matches(line).count(), 1, "{line}: {stderr}");
    }
    assert_eq!(stderr.matches("reloaded").count(), 3, "{stderr}");
    assert_has(&stderr, &format!("{}: profile lt", b.side.label));
    // Missed, then each row as a fresh process ran it, then missed again: in that order.
    let t: Vec<_> = trace_file(&dir.join("trace.log"));
    let algos: Vec<String> = t.iter().map(|l| l["algo"].clone()).collect();
    let r = runs(&algos);
    let order: Vec<&str> = r.iter().map(|(a, _)| *a).collect();
    assert_eq!(
        order,
        [b.heuristic, b.tuned[0].1, b.tuned[1].1, b.heuristic],
        "{r:?}"
    );
    assert!(r[0].1 >= 5, "{r:?}");
    for (l, fresh) in t.iter().zip(
        std::iter::repeat_n(&fresh2, r[0].1)
            .chain(std::iter::repeat_n(&fresh0, r[1].1))
            .chain(std::iter::repeat_n(&fresh1, r[2].1))
            .chain(std::iter::repeat_n(&fresh2, r[3].1)),
    ) {
        assert_eq!(l, fresh, "{t:?}");
    }
}

#[test]
fn lt_rows_gained_changed_and_removed_while_a_host_runs_are_served_without_a_restart() {
    on_both("rows", gained_changed_and_removed);
}

/// Served at start; then the store names another build for the profile, with another
/// solution in its row: never served, said once. And `TUNEDBLAS_RELOAD=0`: a host beside
/// one that reloads keeps its start-up row.
fn another_builds_rows_and_reload_off(b: &Backend, dir: &Path) {
    b.commit(dir, &b.side.sha, &[b.row(CALL, b.tuned[0].0)]);
    let mut host = Running::start(b.host(dir, "trace.log", &steps(dir, &["go"], 2500)));
    host.results(5);
    b.commit(dir, &b.side.sha2, &[b.row(CALL, b.tuned[1].0)]);
    host.said("names no profile for this build any more");
    open(dir, "go");
    let stderr = host.finish();
    crate::reload::warned_once_and_not_reloaded(&stderr);
    let served = algos_of(&dir.join("trace.log"), &b.fresh(dir, CALL));
    assert!(served.len() >= 5, "{served:?}");
    assert!(served.iter().all(|a| a == b.tuned[0].1), "{served:?}");

    // Two hosts on one store, one with reloading off: the row changed while they run
    // reaches the one, never the other.
    let _ = std::fs::remove_file(dir.join("go"));
    b.commit(dir, &b.side.sha, &[b.row(CALL, b.tuned[0].0)]);
    let gated = steps(dir, &["go"], 2500);
    let mut on = Running::start(b.host(dir, "on.log", &gated));
    let mut off_cmd = b.host(dir, "off.log", &gated);
    off_cmd.env("TUNEDBLAS_RELOAD", "0");
    let mut off = Running::start(off_cmd);
    on.results(5);
    off.results(5);
    b.commit(dir, &b.side.sha, &[b.row(CALL, b.tuned[1].0)]);
    on.said("profile lt reloaded: +0 rows, 1 changed, 0 removed");
    open(dir, "go");
    let (on_err, off_err) = (on.finish(), off.finish());
    assert!(!off_err.contains("reloaded"), "{off_err}");
    let fresh = b.fresh(dir, CALL);
    assert_eq!(fresh["algo"], b.tuned[1].1);
    let reloaded = algos_of(&dir.join("on.log"), &fresh);
    assert_eq!(order(&reloaded), [b.tuned[0].1, b.tuned[1].1], "{on_err}");
    let kept = algos_of(&dir.join("off.log"), &fresh);
    assert!(kept.len() >= 5, "{kept:?}");
    assert!(kept.iter().all(|a| a == b.tuned[0].1), "{kept:?}");
}

#[test]
fn lt_stores_of_another_build_are_never_served_and_lt_reload_can_be_turned_off() {
    on_both("other", another_builds_rows_and_reload_off);
}

/// While the host serves a row, the store breaks three ways, each put in place whole: its
/// rank file cut short inside a row (a full disk, a copy killed midway), a FIFO planted as
/// the rank file (never opened for reading, never waited on), a registry that does not
/// parse. The row loaded is served throughout, each said; the store repaired with another
/// row, that row is served.
fn broken_stores_keep_the_rows_served(b: &Backend, dir: &Path) {
    b.commit(dir, &b.side.sha, &[b.row(CALL, b.tuned[0].0)]);
    let gates = ["cut", "fifo", "registry", "fixed"];
    let mut host = Running::start(b.host(dir, "trace.log", &steps(dir, &gates, 300)));
    host.results(5);
    let not_reloaded = "profile lt not reloaded: 1 problems reading the store, where the rows served had 0; profile lt's rows loaded are still served";

    let rank0 = b.rank0(dir);
    let validators: String = b
        .side
        .validators
        .iter()
        .map(|(k, v)| format!("Validator,{k},{v}\n"))
        .collect();
    let whole = b.row(CALL, b.tuned[1].0);
    // Cut inside the solution: no time, no newline.
    let cut = &whole[..whole.rfind(",0.01").unwrap() - 1];
    replace(&rank0, |tmp| {
        std::fs::write(tmp, format!("{validators}{cut}")).unwrap()
    });
    host.said(not_reloaded);
    host.said("the file was cut short");
    open(dir, "cut");

    replace(&rank0, |tmp| {
        let c = std::ffi::CString::new(tmp.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a plain mkfifo of a path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    });
    host.said_times(not_reloaded, 2);
    host.said("a FIFO (named pipe), not a regular file");
    open(dir, "fifo");

    replace(&dir.join("profiles/profiles.json"), |tmp| {
        std::fs::write(tmp, "{\"profiles\": {\"lt\": ").unwrap()
    });
    host.said("names no profile for this build any more");
    open(dir, "registry");

    b.commit(dir, &b.side.sha, &[b.row(CALL, b.tuned[1].0)]);
    host.said("profile lt reloaded: +0 rows, 1 changed, 0 removed");
    open(dir, "fixed");
    let stderr = host.finish();
    assert_eq!(stderr.matches(not_reloaded).count(), 2, "{stderr}");
    assert_eq!(stderr.matches("lt reloaded:").count(), 1, "{stderr}");
    let fresh = b.fresh(dir, CALL);
    assert_eq!(fresh["algo"], b.tuned[1].1);
    let served = algos_of(&dir.join("trace.log"), &fresh);
    assert_eq!(
        order(&served),
        [b.tuned[0].1, b.tuned[1].1],
        "{:?}",
        runs(&served)
    );
}

#[test]
fn lt_a_store_broken_while_a_host_runs_leaves_the_rows_served() {
    on_both("broken", broken_stores_keep_the_rows_served);
}

/// A reload held midway through reading the store (its lock taken, the rank file being
/// opened) while another thread of the host forks: the child, whose copy of the lock
/// names a thread it does not have, takes the lock over and reloads on its own (the change
/// the parent was reading, then a row for the child's own call); nothing hangs, the child
/// leaves with status 0.
fn a_fork_child_during_a_reload(b: &Backend, dir: &Path) {
    b.commit(dir, &b.side.sha, &[b.row(CALL, b.tuned[0].0)]);
    let hold = format!(
        "@hold:fork:{CHILD_CALL}:{}:{}",
        dir.join("child-go").display(),
        b.rank0(dir).display()
    );
    // A first call starts the runtime (reading the rank file) before the hold is set.
    let mut s = vec![CALL.to_string(), hold];
    s.extend(steps(dir, &["go"], 0));
    s.push("@join".into());
    let mut host = Running::start(b.host(dir, "trace.log", &s));
    host.results(5);
    b.commit(dir, &b.side.sha, &[b.row(CALL, b.tuned[1].0)]);
    host.printed("hold=forked");
    // The parent's reload, then the child's own of the same change.
    host.said_times("profile lt reloaded: +0 rows, 1 changed, 0 removed", 2);
    let both = [b.row(CALL, b.tuned[1].0), b.row(CHILD_CALL, b.tuned[0].0)];
    b.commit(dir, &b.side.sha, &both);
    host.said_times("profile lt reloaded: +1 rows, 0 changed, 0 removed", 2);
    // The child's next call is served (it may have said the line before its call ended).
    let child_fresh = b.fresh(dir, CHILD_CALL);
    assert_eq!(child_fresh["algo"], b.tuned[0].1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !algos_of(&dir.join("trace.log"), &child_fresh).contains(&b.tuned[0].1.to_string()) {
        assert!(Instant::now() < deadline, "the child never served its row");
        std::thread::sleep(Duration::from_millis(20));
    }
    open(dir, "child-go");
    open(dir, "go");
    let (status, stdout, stderr) = host.end();
    assert!(status.success(), "{status:?}: {stderr}");
    assert_has(&stdout, "hold-child=0");
    // Two summaries: the child's and the parent's.
    assert_eq!(stderr.matches(" calls: ").count(), 2, "{stderr}");
    let child = algos_of(&dir.join("trace.log"), &child_fresh);
    assert_eq!(
        order(&child),
        [b.heuristic, b.tuned[0].1],
        "the child missed, then served its row: {child:?}"
    );
    let parent = algos_of(&dir.join("trace.log"), &b.fresh(dir, CALL));
    assert_eq!(order(&parent), [b.tuned[0].1, b.tuned[1].1], "{parent:?}");
}

#[test]
fn lt_a_fork_child_made_during_a_reload_reloads_on_its_own() {
    on_both("fork", a_fork_child_during_a_reload);
}

/// A reload held midway through reading the store while the reloading thread takes a
/// SIGTERM whose handler calls `_exit(7)`: the process leaves with 7 and its summary.
fn a_signal_exit_during_a_reload(b: &Backend, dir: &Path) {
    b.commit(dir, &b.side.sha, &[b.row(CALL, b.tuned[0].0)]);
    let s = [
        CALL.to_string(),
        format!("@hold:exit:{}", b.rank0(dir).display()),
        format!("@until:{}:{CALL}", dir.join("never").display()),
    ];
    let mut host = Running::start(b.host(dir, "trace.log", &s));
    host.results(5);
    b.commit(dir, &b.side.sha, &[b.row(CALL, b.tuned[1].0)]);
    host.printed("hold=exit");
    let (status, _, stderr) = host.end();
    assert_eq!(status.code(), Some(7), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: ", b.side.label)) && stderr.contains(" calls: "),
        "{stderr}"
    );
}

#[test]
fn lt_a_signal_exit_during_a_reload_does_not_hang() {
    on_both("sigexit", a_signal_exit_during_a_reload);
}
