//! The one support module of the end-to-end tests: every helper they share is here, once.
//! Build the host programs (once per run, [`build`]), lay out a profile folder
//! ([`profile::Profile`]), run a host under the preload against refblas, read what
//! happened; the fault-injection plumbing of the reliability tests is [`faults`].
//!
//! The tests need the workspace's shared objects (`libtunedblas.so`, `librocblas_v4.so`,
//! `librocblas_v5.so`); the README's test command builds them first (`cargo build
//! --workspace`), and [`artifacts`] says so clearly when they are missing.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use tunedblas_core::abi;
use tunedblas_core::key::{Batching, ProblemKey, Trans, Types};
use tunedblas_core::tunableop;

pub mod build;
pub mod faults;
pub mod lt;
pub mod profile;

/// The one-call form the conformance suite uses.
#[allow(unused_imports)]
pub use profile::write_profile;
pub use profile::Profile;

/// Copies a program that a test will then run. The copy is made by `cp`, never by this
/// process: while `std::fs::copy` holds the new file open for writing, any other test
/// thread that forks (every `Command` does) hands that descriptor to its child until the
/// child execs, and running the copy in that window fails with ETXTBSY ("Text file
/// busy"). CI saw exactly that once. A `cp` child is the only holder and has exited by
/// the time this returns.
pub fn copy_executable(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .output()
        .expect("cp runs");
    assert!(
        out.status.success(),
        "cp {} {}: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/<profile>` of this build.
pub fn target_dir() -> PathBuf {
    // The test binary lives in target/<profile>/deps/.
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

pub struct Artifacts {
    pub preload: PathBuf,
    /// `lib4-<hash>/librocblas.so.4` and `lib5-<hash>/librocblas.so.5` (with
    /// `librocblas.so` links) under `target/<profile>/test-hosts`: refblas under rocBLAS's
    /// names.
    pub libdir4: PathBuf,
    pub libdir5: PathBuf,
    pub host4: PathBuf,
    pub host5: PathBuf,
    /// The C host built as a module (for the Python host), linked against `.so.4`.
    pub module4: PathBuf,
    /// This test binary's scratch folder (`target/<profile>/e2e-<pid>`).
    pub work: PathBuf,
}

impl Artifacts {
    /// refblas v4 as the hosts load it (`<libdir4>/librocblas.so.4`).
    pub fn lib4(&self) -> PathBuf {
        self.libdir4.join("librocblas.so.4")
    }

    /// refblas v5 as the hosts load it (`<libdir5>/librocblas.so.5`).
    pub fn lib5(&self) -> PathBuf {
        self.libdir5.join("librocblas.so.5")
    }
}

/// A file the workspace build makes (`target/<profile>/<name>`); says how to make it when
/// it is missing.
pub fn built(name: &str) -> PathBuf {
    let p = target_dir().join(name);
    assert!(
        p.is_file(),
        "{} is missing: run `cargo build --workspace` before the tests (scripts/test does)",
        p.display()
    );
    p
}

/// The `tunedblas` command as built.
pub fn tunedblas() -> PathBuf {
    built("tunedblas")
}

/// A `tunedblas` command with the test environment of `dir` (no refblas trace).
pub fn tunedblas_cmd(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(tunedblas());
    cmd.args(args);
    host_env(&mut cmd, dir, false);
    cmd.env_remove("REFBLAS_TRACE");
    cmd
}

/// `tunedblas <command> --lib <lib> <args...>` with the test environment of `dir`: the form
/// every command that reads a rocBLAS (tune, report, merge ...) is run in.
pub fn lib_cmd(dir: &Path, command: &str, lib: &Path, args: &[&str]) -> Command {
    let mut cmd = tunedblas_cmd(dir, &[command, "--lib", lib.to_str().unwrap()]);
    cmd.args(args);
    cmd
}

/// A command's stdout, after checking it exited 0 (else the test fails with both streams).
pub fn ok(out: &Output) -> String {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status.code(),
        text(&out.stderr)
    );
    stdout
}

/// The built objects, the refblas folders and the gemm hosts: built once per test run
/// (see [`build`]), looked up once per test binary.
pub fn artifacts() -> &'static Artifacts {
    static A: OnceLock<Artifacts> = OnceLock::new();
    A.get_or_init(|| {
        let preload = built("libtunedblas.so");
        let libdir4 = build::lib_dir(
            "lib4",
            &built("librocblas_v4.so"),
            "librocblas.so.4",
            Some("librocblas.so"),
        );
        let libdir5 = build::lib_dir(
            "lib5",
            &built("librocblas_v5.so"),
            "librocblas.so.5",
            Some("librocblas.so"),
        );
        let gemm_host = |name: &str, libdir: &Path, extra: &[&str]| {
            let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            args.push("{hosts}/gemm_host.c".into());
            args.extend(build::link_args(libdir));
            args.extend(["-lrocblas".into(), "-lpthread".into()]);
            build::c_program(name, &args)
        };
        let host4 = gemm_host("gemm_host4", &libdir4, &[]);
        let host5 = gemm_host("gemm_host5", &libdir5, &[]);
        let module4 = gemm_host(
            "libhostmod.so",
            &libdir4,
            &["-shared", "-fPIC", "-DGEMM_HOST_MODULE"],
        );
        let work = target_dir().join(format!("e2e-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        remove_dead_scratch(&target_dir());
        std::fs::create_dir_all(&work).unwrap();
        Artifacts {
            preload,
            libdir4,
            libdir5,
            host4,
            host5,
            module4,
            work,
        }
    })
}

/// Removes the scratch folders (`e2e-<pid>`) of test processes that are gone. Each test
/// binary leaves its folder for a look after a failure; a few runs of the suite would
/// otherwise fill the disk (some hold traces of hundreds of MB) that the conformance
/// roots also need.
fn remove_dead_scratch(target: &Path) {
    let Ok(rd) = std::fs::read_dir(target) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("e2e-") else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The sha256 of refblas v4 as the tests install it.
pub fn sha4() -> String {
    sha_of(&artifacts().libdir4, "librocblas.so.4")
}

/// The sha256 of refblas v5 as the tests install it.
pub fn sha5() -> String {
    sha_of(&artifacts().libdir5, "librocblas.so.5")
}

/// A gemm_host (linked against `.so.4`) command with the test environment of `dir`.
pub fn host4_cmd(dir: &Path, preload: bool, args: &[&str]) -> Command {
    host_cmd(&artifacts().host4, dir, preload, args)
}

/// A host program's command with the test environment of `dir`.
pub fn host_cmd(program: &Path, dir: &Path, preload: bool, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    host_env(&mut cmd, dir, preload);
    cmd
}

/// The profile folder of a store that holds one (a campaign writes its profile into a
/// folder named by the build or by --name, which the tests need not spell).
pub fn profile_folder(store: &Path) -> PathBuf {
    std::fs::read_dir(store)
        .unwrap_or_else(|e| panic!("{}: {e}", store.display()))
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no profile folder in {}", store.display()))
}

/// The variables that point tunedblas at a cuBLASLt or hipBLASLt and its runtime: a test
/// that names its backend by flags removes them, so the caller's shell cannot choose for it.
pub const LT_LIBRARY_VARS: [&str; 4] = [
    "TUNEDBLAS_CUBLASLT",
    "TUNEDBLAS_CUDART",
    "TUNEDBLAS_HIPBLASLT",
    "TUNEDBLAS_HIP",
];

/// A fresh folder for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = artifacts().work.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The problem key the C host's SPEC produces (same layout rules as gemm_host.c).
pub fn spec_key(spec: &str) -> ProblemKey {
    let f: Vec<&str> = spec.split(':').collect();
    let (kind, ab, ty) = (f[0], f[1], f[2]);
    let [m, n, k]: [i64; 3] = [
        f[3].parse().unwrap(),
        f[4].parse().unwrap(),
        f[5].parse().unwrap(),
    ];
    let ta = Trans::from_letter(ab.chars().next().unwrap()).unwrap();
    let tb = Trans::from_letter(ab.chars().nth(1).unwrap()).unwrap();
    let types = match (kind, ty) {
        ("hgemm" | "hsb", _) | (_, "hh") => Types::HGEMM,
        ("sgemm" | "ssb", _) | (_, "s") => Types::SGEMM,
        (_, "h") => Types::uniform(abi::DT_F16_R, abi::DT_F32_R),
        (_, "b") => Types::uniform(abi::DT_BF16_R, abi::DT_F32_R),
        (_, "d") => Types::uniform(abi::DT_F64_R, abi::DT_F64_R),
        _ => panic!("bad spec type {ty}"),
    };
    let [lda, ldb, ldc] = ProblemKey::packed_lds(ta, tb, m, n, k);
    let key = ProblemKey::single(ta, tb, types, m, n, k, lda, ldb, ldc, ldc, 0);
    match kind {
        "sb" => key.with_batch(Batching::Strided, 3, key.packed_strides()),
        "hsb" | "ssb" => key.with_batch(Batching::Strided, 2, key.packed_strides()),
        "bx" => key.with_batch(Batching::PointerArray, 2, [0; 4]),
        _ => key,
    }
}

/// One TunableOp row for a spec: `op,signature,solution,time`.
pub fn row(spec: &str, solution: &str) -> String {
    let (op, sig) = tunableop::op_and_signature(&spec_key(spec));
    format!("{op},{sig},{solution},0.01")
}

/// Writes `text` to `path` as a program (mode 0755): a shell script a test runs.
pub fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

pub fn sha_of(lib_dir: &Path, soname: &str) -> String {
    tunedblas_core::identity::sha256_file(&lib_dir.join(soname)).unwrap()
}

/// Points the interposer's and the command's folders (profile store, miss folder, cache)
/// at `profiles`, `misses` and `cache` under `dir`.
pub fn folders_under(cmd: &mut Command, dir: &Path) {
    cmd.env("TUNEDBLAS_PROFILE_DIR", dir.join("profiles"))
        .env("TUNEDBLAS_MISS_DIR", dir.join("misses"))
        .env("TUNEDBLAS_CACHE_DIR", dir.join("cache"));
}

/// A host run's environment: everything under `dir`, nothing from the user's own setup.
/// Near-shape serving is off, so a miss stays a miss in every count; the tests about it
/// (tests/dynamic_shapes.rs) turn it on.
pub fn host_env(cmd: &mut Command, dir: &Path, preload: bool) {
    folders_under(cmd, dir);
    cmd.env_remove("LD_PRELOAD")
        .env("REFBLAS_TRACE", dir.join("trace.log"))
        .env_remove("TUNEDBLAS_PROFILE")
        .env_remove("TUNEDBLAS_ALLOW_MISMATCH")
        .env_remove("TUNEDBLAS_DISABLE")
        .env_remove("TUNEDBLAS_LOG")
        .env("TUNEDBLAS_NEAR", "0");
    if preload {
        cmd.env("LD_PRELOAD", &artifacts().preload);
    }
}

pub fn run(mut cmd: Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    out
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `spec=... status=S digest=D` lines of a host's stdout, as (spec, status, digest).
pub fn results(out: &Output) -> Vec<(String, i32, String)> {
    text(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut spec = None;
            let mut status = None;
            let mut digest = None;
            for f in l.split_whitespace() {
                match f.split_once('=') {
                    Some(("spec", v)) => spec = Some(v.to_owned()),
                    Some(("status", v)) => status = v.parse().ok(),
                    Some(("digest", v)) => digest = Some(v.to_owned()),
                    _ => {}
                }
            }
            Some((spec?, status?, digest?))
        })
        .collect()
}

/// The rows of a profile folder's rank file, as (`op,signature`, solution).
pub fn rank_rows(profile: &Path, rank: usize) -> Vec<(String, String)> {
    let path = profile.join(format!("tunableop_results{rank}.csv"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.starts_with("Validator"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (format!("{},{}", f[0], f[1]), f[2].to_string())
        })
        .collect()
}

/// The refblas trace: one map of key=value per executed GEMM.
pub fn trace(dir: &Path) -> Vec<std::collections::HashMap<String, String>> {
    trace_file(&dir.join("trace.log"))
}

/// A trace file's lines (refblas's or an Lt stand-in's) as key=value maps; none if it is
/// not there.
pub fn trace_file(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .collect()
}

/// The solutions refblas offers for a spec (`gemm_host --list`), no preload.
pub fn solutions(host: &Path, spec: &str) -> Vec<i32> {
    let out = Command::new(host).arg("--list").arg(spec).output().unwrap();
    let t = text(&out.stdout);
    let list = t.split("solutions=").nth(1).unwrap_or("").trim();
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect()
}

/// The solution refblas's heuristic runs for a spec (read from its trace), no preload.
pub fn heuristic_solution(host: &Path, spec: &str) -> i32 {
    // A folder of its own per call: two tests asking about one spec at once would otherwise
    // share it, and `scratch` empties it under the other's run.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch(&format!("heuristic-{}-{n}", spec.replace(':', "_")));
    let mut cmd = Command::new(host);
    cmd.arg(spec);
    host_env(&mut cmd, &dir, false);
    run(cmd);
    let t = trace(&dir);
    assert_eq!(t[0]["heuristic"], "1");
    t[0]["solution"].parse().unwrap()
}

/// Solutions other than the heuristic's, so serving one is visible in the trace.
pub fn non_heuristic_solutions(host: &Path, spec: &str) -> Vec<i32> {
    let h = heuristic_solution(host, spec);
    let sols: Vec<i32> = solutions(host, spec)
        .into_iter()
        .filter(|&s| s != h)
        .collect();
    assert!(
        !sols.is_empty(),
        "refblas offers a solution besides the heuristic's for {spec}"
    );
    sols
}

/// Every miss-log line and counts-file line under `dir/misses`: (lines, counts).
pub fn misses(dir: &Path) -> (Vec<String>, Vec<(String, u64)>) {
    let mut lines = Vec::new();
    let mut counts = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir.join("misses")) else {
        return (lines, counts);
    };
    let mut paths: Vec<PathBuf> = rd.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for p in paths {
        let body = std::fs::read_to_string(&p).unwrap();
        if p.to_string_lossy().ends_with(".counts.csv") {
            for l in body.lines().skip(1) {
                let (key, n) = l.rsplit_once(',').unwrap();
                counts.push((key.to_owned(), n.parse().unwrap()));
            }
        } else if p.extension().is_some_and(|e| e == "csv") {
            lines.extend(body.lines().map(str::to_owned));
        }
    }
    (lines, counts)
}

/// `op,signature` of a spec, as the miss log writes it.
pub fn miss_line(spec: &str) -> String {
    let (op, sig) = tunableop::op_and_signature(&spec_key(spec));
    format!("{op},{sig}")
}

/// The stats file a host run wrote to `<dir>/stats.json` (`TUNEDBLAS_STATS`).
pub fn stats_json(dir: &Path) -> serde_json::Value {
    let t = std::fs::read_to_string(dir.join("stats.json")).expect("the stats file is written");
    serde_json::from_str(&t).unwrap()
}

/// The miss-log lines of one Lt backend's rank-0 files in `<dir>/misses` (`tag`:
/// `-cublaslt`, `-hipblaslt`), in file order.
pub fn lt_miss_lines(dir: &Path, tag: &str) -> Vec<String> {
    let mut out = Vec::new();
    let suffix = format!("{tag}-rank0.csv");
    for e in std::fs::read_dir(dir.join("misses")).into_iter().flatten() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().ends_with(&suffix) {
            out.extend(
                std::fs::read_to_string(&p)
                    .unwrap()
                    .lines()
                    .map(str::to_owned),
            );
        }
    }
    out
}

/// Fails unless `text` (a run's stderr: its summary line, a warning) contains `want`,
/// showing the whole text.
#[track_caller]
pub fn assert_has(text: &str, want: &str) {
    assert!(text.contains(want), "{text}");
}

/// The device time (ms) of the timed samples of a campaign outcome's `tuned` record: each
/// round's per-call times of the heuristic, the current row and the new one, times the
/// calls in a sample.
pub fn samples_device_ms(tuned: &serde_json::Value) -> f64 {
    let calls = tuned["calls_per_sample"].as_f64().unwrap();
    tuned["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| ["heuristic", "current", "new"].map(|c| r[c].as_f64().unwrap_or(0.0)))
        .sum::<f64>()
        * calls
}

/// That a command exited with `code` and said `says` on stderr (else the test fails
/// showing its stderr): how the commands refuse.
#[track_caller]
pub fn assert_refused(out: &Output, code: i32, says: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert_has(&stderr, says);
}

/// `tunedblas tune` options that make a campaign quick: three trials, a 1 MiB input
/// rotation, no rest and no limits (the tests check plumbing, not timing).
pub const QUICK_TUNE: [&str; 9] = [
    "--trials",
    "3",
    "--max-trials",
    "3",
    "--rotate-mib",
    "1",
    "--rest",
    "0",
    "--no-limits",
];
