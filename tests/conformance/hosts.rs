//! Hosts under the preload with the real libraries, inside the root: a C host linked against
//! rocBLAS, the same code as a module `dlopen`ed with `RTLD_LOCAL`, that module loaded by
//! Python ctypes, and (rocBLAS 6.4.4) a host calling real hipBLAS. Each runs with and without
//! `libtunedblas.so` and a profile registered for the real file's sha256 with a row for every
//! call the host makes; then:
//! - the host's output (every status) is the same with and without the preload;
//! - the start line names that profile and the build's sha256 as `sha256sum` prints it;
//! - every call reached the interposer with the key we expect (the stats count each call and
//!   every row was hit; a key computed differently would miss its row);
//! - nothing is recorded as a miss.

use std::path::Path;

use serde_json::Value;
use tunedblas_core::abi;
use tunedblas_core::key::{Batching, ProblemKey, Trans, Types};

use crate::common;
use crate::suite::{out_text, Suite};

/// Calls the C hosts make in every suite (KIND:AB:TYPE:M:N:K, as tests/hosts/real_host.c),
/// each of a different shape so each has its own row.
const SPECS: &[&str] = &[
    "ex:TN:h:64:32:16",
    "ex:NN:b:48:24:8",
    "sb:NN:h:32:16:8",
    "bx:TN:s:16:16:16",
    "hgemm:NN:x:32:8:8",
    "sgemm:TN:x:24:8:4",
    "hsb:NN:x:8:8:8",
    "ssb:TN:x:8:8:12",
];

/// The `_64` twins (rocBLAS 4.x).
const SPECS_64: &[&str] = &[
    "ex64:TN:h:128:32:16",
    "sb64:NN:h:128:16:8",
    "bx64:TN:s:128:16:16",
    "hgemm64:NN:x:128:8:8",
    "sgemm64:TN:x:128:8:4",
    "hsb64:NN:x:128:8:8",
    "ssb64:TN:x:128:8:12",
];

/// The key the interposer must compute for a host spec (the `_64` kinds share the 32-bit
/// kinds' keys).
pub fn key_of(spec: &str) -> ProblemKey {
    let (kind, rest) = spec.split_once(':').unwrap();
    common::spec_key(&format!("{}:{rest}", kind.trim_end_matches("64")))
}

pub fn specs(s: &Suite) -> Vec<&'static str> {
    let mut v = SPECS.to_vec();
    if s.has_64() {
        v.extend_from_slice(SPECS_64);
    }
    v
}

/// hipBLAS calls (tests/hosts/hipblas_host.c) and the rocBLAS key each must arrive as.
pub fn hipblas_calls() -> Vec<(&'static str, ProblemKey)> {
    let half = Types::uniform(abi::DT_F16_R, abi::DT_F32_R);
    let bf16 = Types::uniform(abi::DT_BF16_R, abi::DT_F32_R);
    let (t, n) = (Trans::T, Trans::N);
    let sb = ProblemKey::single(n, n, half, 40, 24, 8, 40, 8, 40, 40, 0);
    vec![
        // hipblasGemmEx -> rocblas_gemm_ex with d = c (ldd = ldc), algo standard, flags 0.
        (
            "gemmex:64:32:16",
            ProblemKey::single(t, n, half, 64, 32, 16, 16, 16, 64, 64, 0),
        ),
        (
            "gemmexb:56:32:16",
            ProblemKey::single(t, n, bf16, 56, 32, 16, 16, 16, 56, 56, 0),
        ),
        (
            "sbex:40:24:8",
            sb.with_batch(Batching::Strided, 3, sb.packed_strides()),
        ),
        (
            "hgemm:32:16:8",
            ProblemKey::single(n, n, Types::HGEMM, 32, 16, 8, 32, 8, 32, 32, 0),
        ),
        (
            "sgemm:24:16:4",
            ProblemKey::single(t, n, Types::SGEMM, 24, 16, 4, 4, 4, 24, 24, 0),
        ),
    ]
}

/// A profile folder `dir/profiles` registering `name` for the suite's build, one
/// `Gemm_Rocblas_<id>` row per key.
pub fn write_profile(s: &Suite, dir: &Path, name: &str, keys: &[ProblemKey]) {
    let rows: Vec<String> = keys
        .iter()
        .map(|k| {
            let (op, sig) = tunedblas_core::tunableop::op_and_signature(k);
            format!("{op},{sig},Gemm_Rocblas_7,0.01")
        })
        .collect();
    common::write_profile(&dir.join("profiles"), name, &s.sha256, &rows, 1);
}

/// The environment of a run under the preload, every path inside `inside`.
pub fn preload_env(s: &Suite, inside: &str) -> String {
    format!(
        "env LD_PRELOAD={} TUNEDBLAS_PROFILE_DIR={inside}/profiles TUNEDBLAS_MISS_DIR={inside}/misses TUNEDBLAS_CACHE_DIR={} TUNEDBLAS_STATS={inside}/stats.json TUNEDBLAS_NEAR=0",
        s.hosts().preload,
        s.shared_cache()
    )
}

/// What a run under the preload left: its stderr, the stats and the miss-log lines.
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub stats: Option<Value>,
    pub misses: Vec<String>,
}

/// Runs `command` once without and once with the preload (fresh folders each time) and
/// checks the outputs are identical.
pub fn run_both(s: &Suite, name: &str, keys: &[ProblemKey], command: &str) -> Run {
    let (_, plain_dir) = s.scratch(&format!("{name}-plain"));
    let plain = s.sh(&format!("cd {plain_dir} && {command}"));
    let (plain_out, plain_err) = out_text(&plain);
    assert!(
        plain.status.success(),
        "{}: {name} without the preload: {plain_out}{plain_err}",
        s.name
    );

    let (host, inside) = s.scratch(name);
    write_profile(s, &host, &format!("conf-{}", s.name), keys);
    let pre = s.sh(&format!(
        "cd {inside} && {} {command}",
        preload_env(s, &inside)
    ));
    let (out, err) = out_text(&pre);
    assert!(
        pre.status.success(),
        "{}: {name} under the preload: {out}{err}",
        s.name
    );
    assert_eq!(
        out, plain_out,
        "{}: {name}: the host's output differs under the preload (stderr: {err})",
        s.name
    );
    // Nothing on stderr but our own lines: a loader complaint about the preload (glibc's
    // "Relink ... for IFUNC symbol", printed for every BIND_NOW library that binds an IFUNC
    // of an object relocated after it, as Debian's hipBLAS would) changes the host too.
    let foreign: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("tunedblas:") && !plain_err.lines().any(|p| p == *l))
        .collect();
    assert!(
        foreign.is_empty(),
        "{}: {name}: lines on stderr that only the preload brings: {foreign:?}",
        s.name
    );
    let stats = std::fs::read_to_string(host.join("stats.json"))
        .ok()
        .map(|t| serde_json::from_str(&t).expect("stats JSON"));
    let mut misses = Vec::new();
    if let Ok(rd) = std::fs::read_dir(host.join("misses")) {
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "csv")
                && !p.to_string_lossy().ends_with(".counts.csv")
            {
                misses.extend(
                    std::fs::read_to_string(&p)
                        .unwrap()
                        .lines()
                        .map(str::to_string),
                );
            }
        }
    }
    Run {
        stdout: out,
        stderr: err,
        stats,
        misses,
    }
}

/// The checks every intercepted host must pass.
pub fn check_intercepted(s: &Suite, what: &str, run: &Run, calls: usize) {
    let start = run
        .stderr
        .lines()
        .find(|l| l.starts_with("tunedblas: profile "))
        .unwrap_or_else(|| panic!("{}: {what}: no start line in:\n{}", s.name, run.stderr));
    let expect = format!(
        "tunedblas: profile conf-{} auto-selected for rocBLAS build {}",
        s.name,
        &s.sha256[..12]
    );
    assert!(
        start.starts_with(&expect),
        "{}: {what}: start line {start:?}, expected it to begin {expect:?} (sha256sum of {})",
        s.name,
        s.rocblas_file
    );
    let stats = run
        .stats
        .as_ref()
        .unwrap_or_else(|| panic!("{}: {what}: no stats file; stderr:\n{}", s.name, run.stderr));
    assert_eq!(
        stats["calls"], calls,
        "{}: {what}: calls counted: {stats}",
        s.name
    );
    assert_eq!(
        stats["rows_not_hit"],
        serde_json::json!([]),
        "{}: {what}: rows no call hit (a call arrived with another key): {stats}",
        s.name
    );
    assert_eq!(stats["rows_hit"], calls, "{}: {what}: {stats}", s.name);
    assert!(
        run.misses.is_empty(),
        "{}: {what}: recorded as misses: {:?}",
        s.name,
        run.misses
    );
}

/// Distinct keys of the specs (the `_64` twins have their own sizes, so all differ).
fn spec_keys(specs: &[&str]) -> Vec<ProblemKey> {
    let keys: Vec<ProblemKey> = specs.iter().map(|s| key_of(s)).collect();
    let mut distinct = keys.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), keys.len(), "every spec has its own key");
    keys
}

/// The expected host output: the handle fails, every call returns invalid_handle.
fn check_statuses(s: &Suite, what: &str, out: &str, specs: &[&str]) {
    let create = out.lines().find(|l| l.starts_with("create=")).unwrap_or("");
    assert!(
        create.starts_with("create=")
            && create.ends_with("handle=null")
            && create != "create=0 handle=null",
        "{}: {what}: with no GPU rocblas_create_handle fails and leaves the handle NULL: {out}",
        s.name
    );
    for spec in specs {
        let line = format!("spec={spec} status={}", abi::STATUS_INVALID_HANDLE);
        assert!(
            out.lines().any(|l| l == line),
            "{}: {what}: expected {line:?} in:\n{out}",
            s.name
        );
    }
}

pub fn linked(s: &Suite) {
    let h = s.hosts();
    let specs = specs(s);
    let keys = spec_keys(&specs);
    let cmd = format!("{} --version {}", h.linked, specs.join(" "));
    let run = run_both(s, "linked", &keys, &cmd);
    check_statuses(s, "linked host", &run.stdout, &specs);
    assert!(
        run.stdout.contains(&format!("version={}\n", s.version)),
        "{}: {}",
        s.name,
        run.stdout
    );
    check_intercepted(s, "linked host", &run, specs.len());
}

pub fn rtld_local_module(s: &Suite) {
    let h = s.hosts();
    let specs = specs(s);
    let keys = spec_keys(&specs);
    let cmd = format!(
        "{} @open:{}:local @main {}",
        h.dl_host,
        h.module,
        specs.join(" ")
    );
    let run = run_both(s, "dlopen-local", &keys, &cmd);
    check_statuses(s, "RTLD_LOCAL module", &run.stdout, &specs);
    check_intercepted(s, "RTLD_LOCAL module", &run, specs.len());
}

pub fn python_ctypes(s: &Suite) {
    let h = s.hosts();
    let specs = specs(s);
    let keys = spec_keys(&specs);
    let cmd = format!("python3 {} {} {}", h.py_host, h.module, specs.join(" "));
    let run = run_both(s, "python", &keys, &cmd);
    check_statuses(
        s,
        "Python ctypes (module loaded RTLD_LOCAL)",
        &run.stdout,
        &specs,
    );
    check_intercepted(s, "Python ctypes", &run, specs.len());
}

/// ctypes calling the library object it loaded itself searches that library's own scope:
/// the preload cannot see those calls (FACTS section 11, README). With the real library:
/// same statuses, the interposer counts nothing, and says at exit why.
pub fn python_ctypes_direct(s: &Suite) {
    let script = format!(
        "import ctypes\nl = ctypes.CDLL('{}')\nh = ctypes.c_void_p()\nprint('create=%d' % l.rocblas_create_handle(ctypes.byref(h)))\nb = (ctypes.c_float * 64)()\nf = ctypes.c_float(1.0)\nprint('sgemm=%d' % l.rocblas_sgemm(h, 111, 111, 4, 4, 4, ctypes.byref(f), b, 4, b, 4, ctypes.byref(f), b, 4))\n",
        s.soname
    );
    let (host, inside) = s.scratch("ctypes-direct-src");
    std::fs::write(host.join("direct.py"), script).unwrap();
    let key = ProblemKey::single(Trans::N, Trans::N, Types::SGEMM, 4, 4, 4, 4, 4, 4, 4, 0);
    let run = run_both(
        s,
        "ctypes-direct",
        &[key],
        &format!("python3 {inside}/direct.py"),
    );
    assert!(run.stdout.contains("sgemm=1"), "{}: {}", s.name, run.stdout);
    let calls = run
        .stats
        .as_ref()
        .map_or(0, |st| st["calls"].as_u64().unwrap_or(0));
    assert_eq!(
        calls, 0,
        "{}: ctypes through its own handle is not intercepted: {:?}",
        s.name, run.stats
    );
    assert!(run.misses.is_empty());
    // Nothing links the real library in that process: the exit says why no call was seen.
    assert!(
        run.stderr
            .contains("is loaded but no call reached the interposer: the process opened it with its own dlopen"),
        "{}: {}",
        s.name,
        run.stderr
    );
}

/// `bind_now`: the loader binds every reference at start-up (`LD_BIND_NOW=1`), so hipBLAS's
/// references to the `_64` IFUNCs are resolved while hipBLAS is relocated, before the preload
/// itself is (the resolver must not touch anything unrelocated then: `exports.rs`).
pub fn hipblas(s: &Suite, bind_now: bool) {
    let Some(host) = s.hosts().hipblas.clone() else {
        return;
    };
    let calls = hipblas_calls();
    let keys: Vec<ProblemKey> = calls.iter().map(|c| c.1).collect();
    let names: Vec<&str> = calls.iter().map(|c| c.0).collect();
    let (name, env) = match bind_now {
        true => ("hipblas-bind-now", "env LD_BIND_NOW=1 "),
        false => ("hipblas", ""),
    };
    let run = run_both(s, name, &keys, &format!("{env}{host} {}", names.join(" ")));
    assert!(
        run.stdout.starts_with("create=")
            && run.stdout.lines().next().unwrap().ends_with("handle=null"),
        "{}: hipblasCreate with no GPU: {}",
        s.name,
        run.stdout
    );
    for n in &names {
        // rocBLAS's invalid_handle comes back as HIPBLAS_STATUS_NOT_INITIALIZED (1).
        let line = format!("call={n} status=1");
        assert!(
            run.stdout.lines().any(|l| l == line),
            "{}: expected {line:?} in {}",
            s.name,
            run.stdout
        );
    }
    check_intercepted(s, "hipBLAS host", &run, calls.len());
}

/// The real version strings (`2.47.0.`, `4.4.1.`: no commit id) at load: a profile whose
/// validator says `2.47.0` is no contradiction, and a row naming solution 0 is called out
/// (rocBLAS up to 4.x runs its heuristic for ids <= 0).
pub fn version_at_load(s: &Suite) {
    let (host, inside) = s.scratch("version-at-load");
    let key = key_of("ex:TN:h:64:32:16");
    let (op, sig) = tunedblas_core::tunableop::op_and_signature(&key);
    common::write_profile(
        &host.join("profiles"),
        &format!("conf-{}", s.name),
        &s.sha256,
        &[format!("{op},{sig},Gemm_Rocblas_0,0.01")],
        1,
    );
    let rank0 = host.join(format!("profiles/conf-{}/tunableop_results0.csv", s.name));
    let text = std::fs::read_to_string(&rank0).unwrap();
    let label = s.version.trim_end_matches('.');
    std::fs::write(&rank0, format!("Validator,ROCBLAS_VERSION,{label}\n{text}")).unwrap();
    let out = s.sh(&format!(
        "cd {inside} && {} {} ex:TN:h:64:32:16",
        preload_env(s, &inside),
        s.hosts().linked
    ));
    let (_, err) = out_text(&out);
    assert!(
        !err.contains("Validator ROCBLAS_VERSION is"),
        "{}: {err}",
        s.name
    );
    let rocm = tunedblas_core::version::Version::parse(&s.version)
        .unwrap()
        .rocm();
    assert!(
        err.contains(&format!("names solution 0, and 0 more rows name ids <= 0: rocBLAS {label} ({rocm}) runs its heuristic")),
        "{}: {err}",
        s.name
    );
}
