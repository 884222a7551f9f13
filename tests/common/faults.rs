//! Plumbing shared by the reliability tests (`tests/reliability/`): the extra host
//! programs, runs with a hang guard, and the checks every fault case makes (the host's
//! results equal a run without the interposer, the miss files are whole).

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::build::{c_program, link_args};
use super::*;

/// Any host run longer than this is a hang (the runs here take well under a second).
pub const HANG: Duration = Duration::from_secs(120);

pub struct Hosts {
    /// fault_host linked against `lib4/librocblas.so.4`.
    pub fault4: PathBuf,
    /// dl_host: not linked against rocBLAS.
    pub dl: PathBuf,
    /// gemm_host.c built as a module linked against `lib5/librocblas.so.5` (the common
    /// artifacts have the `.so.4` one).
    pub module5: PathBuf,
    /// gemm_host.c built as a module linked against `lib4/librocblas.so.4` whose
    /// constructor runs the spec in `$GEMM_HOST_AT_LOAD` (a GEMM made inside `dlopen`).
    pub at_load4: PathBuf,
    /// life_host (process life and death: fork storms, signal-handler exits, cancellation,
    /// every way out) linked against `lib4/librocblas.so.4`; it exports its own
    /// `__cxa_at_quick_exit`, to act inside the interposer's start-up (`@start-signal`).
    pub life4: PathBuf,
}

pub fn hosts() -> &'static Hosts {
    static H: OnceLock<Hosts> = OnceLock::new();
    H.get_or_init(|| {
        let a = artifacts();
        let linked = |name: &str, src: &str, libdir: &Path, extra: &[&str]| {
            let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            args.push(format!("{{hosts}}/{src}"));
            args.extend(link_args(libdir));
            args.extend(["-lrocblas".into(), "-lpthread".into()]);
            c_program(name, &args)
        };
        Hosts {
            fault4: linked("fault_host4", "fault_host.c", &a.libdir4, &["-I{hosts}"]),
            dl: c_program("dl_host", &["{hosts}/dl_host.c".into(), "-ldl".into()]),
            module5: linked(
                "libhostmod5.so",
                "gemm_host.c",
                &a.libdir5,
                &["-shared", "-fPIC", "-DGEMM_HOST_MODULE"],
            ),
            at_load4: linked(
                "libatload4.so",
                "gemm_host.c",
                &a.libdir4,
                &[
                    "-shared",
                    "-fPIC",
                    "-DGEMM_HOST_MODULE",
                    "-DGEMM_HOST_AT_LOAD",
                ],
            ),
            life4: linked(
                "life_host4",
                "life_host.c",
                &a.libdir4,
                &["-Wl,--export-dynamic-symbol=__cxa_at_quick_exit"],
            ),
        }
    })
}

/// Runs a command to the end, killing it (and failing the test) if it hangs.
pub fn run_guarded(cmd: Command) -> Output {
    run_guarded_for(cmd, HANG)
}

/// [`run_guarded`] with a shorter limit, for cases whose bug is a hang: the test fails in
/// `limit`, not in [`HANG`].
pub fn run_guarded_for(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    wait_guarded_for(child, &format!("{cmd:?}"), limit)
}

/// Waits for a spawned child with piped stdout/stderr, failing the test on a hang.
pub fn wait_guarded(child: Child, what: &str) -> Output {
    wait_guarded_for(child, what, HANG)
}

fn wait_guarded_for(mut child: Child, what: &str, limit: Duration) -> Output {
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} hung for {limit:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// A fault_host command with the test environment of `dir`.
pub fn fault_cmd(dir: &Path, preload: bool, args: &[&str]) -> Command {
    host_cmd(&hosts().fault4, dir, preload, args)
}

/// A life_host command with the test environment of `dir`.
pub fn life_cmd(dir: &Path, preload: bool, args: &[&str]) -> Command {
    host_cmd(&hosts().life4, dir, preload, args)
}

/// The last solution refblas lists for a spec: never the heuristic's choice for the
/// shapes used here, so serving it shows in the trace.
pub fn tuned(spec: &str) -> i32 {
    *untuned_by_heuristic(spec).last().unwrap()
}

/// [`non_heuristic_solutions`] on refblas v4, cached and serialised: the helper runs in a
/// scratch folder named after the spec, which tests running in parallel would otherwise
/// share.
pub fn untuned_by_heuristic(spec: &str) -> Vec<i32> {
    static CACHE: std::sync::Mutex<Vec<(String, Vec<i32>)>> = std::sync::Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, ids)) = cache.iter().find(|(s, _)| s == spec) {
        return ids.clone();
    }
    let ids = non_heuristic_solutions(&artifacts().host4, spec);
    cache.push((spec.to_owned(), ids.clone()));
    ids
}

/// `ref-v4` with one row serving [`tuned`] for `spec`; returns that solution.
pub fn profile_with_hit(dir: &Path, spec: &str) -> i32 {
    let sol = tuned(spec);
    Profile::v4(dir).tuned(spec, sol).write();
    sol
}

/// What the host computes for `args` without the interposer: `(spec, status, digest)`.
pub fn reference(name: &str, args: &[&str]) -> Vec<(String, i32, String)> {
    let dir = scratch(&format!("{name}-reference"));
    let out = run_guarded(fault_cmd(&dir, false, args));
    results(&out)
}

/// What the host must compute for `args`: the run without tunedblas, except that each spec
/// in `served` (with any `:reps`) must carry the bits of its tuned solution, asked for
/// directly (refblas's solutions differ in summation order, so the bits tell them apart).
pub fn expected(name: &str, args: &[&str], served: &[(&str, i32)]) -> Vec<(String, i32, String)> {
    let mut want = reference(name, args);
    for r in want.iter_mut() {
        let tuned = served
            .iter()
            .find(|(s, _)| r.0 == *s || r.0.starts_with(&format!("{s}:")));
        if let Some((_, id)) = tuned {
            let dir = scratch(&format!("{name}-direct"));
            let direct = run_guarded(host4_cmd(
                &dir,
                false,
                &["--solution", &id.to_string(), &r.0],
            ));
            r.2 = results(&direct)[0].2.clone();
        }
    }
    want
}

/// `tunedblas:` lines of a run's stderr.
pub fn log_lines(out: &Output) -> Vec<String> {
    text(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("tunedblas:"))
        .map(str::to_owned)
        .collect()
}

/// Every miss file under `dir/misses` must be whole: lines end in a newline and every line
/// parses as a shape (or is the counts header). Returns the miss log lines and counts.
pub fn whole_miss_files(dir: &Path) -> (Vec<String>, Vec<(String, u64)>) {
    if let Ok(rd) = std::fs::read_dir(dir.join("misses")) {
        for e in rd {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let body = std::fs::read_to_string(&p).unwrap();
            if name.ends_with(".status.json") {
                // The live status (one per process): whole JSON, never a cut file.
                let v: serde_json::Value = serde_json::from_str(&body)
                    .unwrap_or_else(|e| panic!("{name} is not whole JSON ({e}): {body:?}"));
                assert!(v["pid"].is_u64(), "{name}: {body}");
                continue;
            }
            assert!(
                name.ends_with(".csv") || name.ends_with(".prom"),
                "only miss logs, counts, status and Prometheus files are left behind: {name}"
            );
            if name.ends_with(".prom") {
                assert!(body.ends_with('\n'), "{name} ends in a cut line: {body:?}");
                continue;
            }
            assert!(
                body.is_empty() || body.ends_with('\n'),
                "{name} ends in a cut line: {body:?}"
            );
            let log = tunedblas_core::misses::file::parse(&body);
            assert!(log.malformed.is_empty(), "{name}: {:?}", log.malformed);
            assert!(log.unservable.is_empty(), "{name}: {:?}", log.unservable);
        }
    }
    misses(dir)
}

/// The miss files (logs and counts) of one process, by pid.
pub fn miss_files_of(dir: &Path, pid: u32) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("misses"))
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    // `<host>-<pid>-<start>-rank<d>...`: the pid is the second field from the right of the
    // process part.
    v.retain(|p| {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let Some((process, _)) = name.rsplit_once("-rank") else {
            return false;
        };
        process.rsplit('-').nth(1) == Some(pid.to_string().as_str())
    });
    v.sort();
    v
}

/// Whether this machine lets an unprivileged user namespace mount a tmpfs (then the
/// full-disk and read-only-folder cases run on real file systems).
pub fn can_unshare_mount() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        Command::new("unshare")
            .args([
                "-Urm",
                "sh",
                "-c",
                "mount -t tmpfs -o size=64k tmpfs \"$0\"",
                &std::env::temp_dir().display().to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Limits the command's files to `bytes` (a full disk for every write past it) and
/// ignores SIGXFSZ, so a write past the limit fails with EFBIG.
pub fn with_file_size_limit(cmd: &mut Command, bytes: u64) {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs the command with this umask (set between fork and exec).
pub fn with_umask(cmd: &mut Command, mask: libc::mode_t) {
    // SAFETY: umask is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            libc::umask(mask);
            Ok(())
        });
    }
}

/// Runs `cmd` as [`run_guarded`] does and checks that it exited 0 (else the test fails with
/// its stderr); returns the output and its stderr as text.
pub fn run_ok(cmd: Command) -> (Output, String) {
    let out = run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    (out, stderr)
}

/// A fresh folder `name` whose profile serves [`tuned`] for `spec` ([`profile_with_hit`]).
pub fn scratch_with_hit(name: &str, spec: &str) -> PathBuf {
    let dir = scratch(name);
    profile_with_hit(&dir, spec);
    dir
}

/// Owned arguments as the `&str`s the host commands take.
pub fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The run warned exactly once that it cannot write the miss log (however many writes
/// failed).
#[track_caller]
pub fn one_warning(stderr: &str) {
    assert_eq!(
        stderr.matches("cannot write the miss log").count(),
        1,
        "exactly one warning: {stderr}"
    );
}
