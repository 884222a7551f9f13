//! The roots the conformance checks run in, and how a check runs a command inside one.
//!
//! `scripts/conformance setup SUITE` makes (or finds complete) a minimal Debian root under
//! `target/conformance/SUITE/root` with the real ROCm libraries; every check asks for its
//! suite through [`suite`], which runs that set-up once per test process. When the Debian
//! packages cannot be reached (or the tests do not run as root), [`suite`] returns `None`,
//! the checks return early, and one line on stderr says why; any other set-up failure
//! fails the checks.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Once, OnceLock};

pub const SUITES: [&str; 2] = ["rocblas-5.5", "rocblas-6.4"];

/// Where the distribution keeps its libraries, inside a root.
pub const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/` of this build (the test binary is `target/<profile>/deps/<name>`).
pub fn target_root() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors().nth(3).expect("target/").to_path_buf()
}

/// `target/<profile>/`, where the built interposer and harness are.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors()
        .nth(2)
        .expect("target/<profile>")
        .to_path_buf()
}

/// One root, ready.
#[derive(Debug)]
pub struct Suite {
    pub name: &'static str,
    /// The root, as this machine sees it.
    pub root: PathBuf,
    /// `librocblas.so.<N>` as the loader finds it inside the root.
    pub soname: String,
    /// The real file behind it, inside the root (`/usr/lib/x86_64-linux-gnu/librocblas.so.0.1`).
    pub rocblas_file: String,
    /// What `rocblas_get_version_string` says (`2.47.0.`).
    pub version: String,
    /// `sha256sum` of the real file, run inside the root.
    pub sha256: String,
    /// rocblas-bench, inside the root.
    pub bench: String,
    /// A folder of this test process inside the root: (host path, root path).
    work: (PathBuf, String),
    hosts: OnceLock<Result<Hosts, String>>,
}

/// The test hosts, compiled inside the root with its own compiler (paths inside the root).
#[derive(Debug, Clone)]
pub struct Hosts {
    /// `real_host.c` linked against the real rocBLAS.
    pub linked: String,
    /// The same built as a module (`host_main`), linked against rocBLAS, for RTLD_LOCAL.
    pub module: String,
    /// `dl_host.c`: dlopen()s the module with RTLD_LOCAL and calls it.
    pub dl_host: String,
    /// `py_host.py`: Python ctypes loading the module with RTLD_LOCAL.
    pub py_host: String,
    /// `hipblas_host.c` linked against real hipBLAS, where the suite has it.
    pub hipblas: Option<String>,
    /// `real_hiplt_host.cpp` linked against real hipBLASLt, where the suite has it.
    pub hiplt: Option<String>,
    /// The interposer and the harness, copied in.
    pub preload: String,
    pub tunedblas: String,
}

/// Says once per suite and test process, on the terminal (not captured), why that suite's
/// checks are skipped. Per suite: one suite can be skipped while the other runs (a failed
/// set-up of one root says nothing of the other), and the line must not claim more.
fn notice(name: &str, why: &str) {
    static NOTICE: [Once; SUITES.len()] = [Once::new(), Once::new()];
    let i = SUITES.iter().position(|s| *s == name).unwrap_or(0);
    NOTICE[i].call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "conformance: SKIPPED, every {name} check: {why}"
        );
    });
}

/// The suite's root, set up on first use. `None` (after one line on stderr) when the Debian
/// packages cannot be reached or the tests do not run as root.
pub fn suite(name: &'static str) -> Option<&'static Suite> {
    static READY: [OnceLock<Option<Suite>>; SUITES.len()] = [OnceLock::new(), OnceLock::new()];
    let i = SUITES
        .iter()
        .position(|s| *s == name)
        .unwrap_or_else(|| panic!("no suite {name}"));
    READY[i].get_or_init(|| set_up(name)).as_ref()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn set_up(name: &'static str) -> Option<Suite> {
    if let Ok(v) = std::env::var("TUNEDBLAS_CONFORMANCE") {
        if v == "off" || v == "0" {
            notice(name, "TUNEDBLAS_CONFORMANCE is off");
            return None;
        }
    }
    let out = Command::new(repo().join("scripts/conformance"))
        .args(["setup", name, "--target"])
        .arg(target_root())
        .output()
        .expect("run scripts/conformance");
    let stdout = text(&out.stdout);
    match out.status.code() {
        Some(0) => {}
        Some(75) | Some(76) => {
            notice(
                name,
                &format!(
                    "the Debian packages cannot be used here ({})",
                    stdout.trim()
                ),
            );
            return None;
        }
        _ => panic!(
            "scripts/conformance setup {name} failed ({}):\n{stdout}\n{}",
            out.status,
            text(&out.stderr)
        ),
    }
    let root = PathBuf::from(stdout.lines().last().expect("the root's path").trim());
    let soname = match name {
        "rocblas-5.5" => "librocblas.so.0",
        _ => "librocblas.so.4",
    };
    let pid = std::process::id();
    let tmp = root.join("tmp");
    // Folders left by earlier test processes that are gone.
    if let Ok(rd) = std::fs::read_dir(&tmp) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if let Some(p) = n.strip_prefix("conf-") {
                let alive = Path::new("/proc").join(p).exists();
                if !alive || p == pid.to_string() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    let work = (tmp.join(format!("conf-{pid}")), format!("/tmp/conf-{pid}"));
    std::fs::create_dir_all(&work.0).unwrap();
    let mut s = Suite {
        name,
        root,
        soname: soname.to_string(),
        rocblas_file: String::new(),
        version: String::new(),
        sha256: String::new(),
        bench: String::new(),
        work,
        hosts: OnceLock::new(),
    };
    let probe = s.sh(&format!(
        "f=$(readlink -f {LIBDIR}/{soname}) && echo \"$f\" && sha256sum \"$f\" && ls /usr/libexec/rocm/*/rocblas-bench && python3 -c 'import ctypes; l = ctypes.CDLL(\"{soname}\"); b = ctypes.create_string_buffer(256); l.rocblas_get_version_string(b, 256); print(b.value.decode())'"
    ));
    assert!(
        probe.status.success(),
        "probing {name}: {}",
        text(&probe.stderr)
    );
    let lines: Vec<String> = text(&probe.stdout).lines().map(str::to_string).collect();
    s.rocblas_file = lines[0].clone();
    s.sha256 = lines[1].split_whitespace().next().unwrap().to_string();
    s.bench = lines[2].clone();
    s.version = lines[3].clone();
    Some(s)
}

impl Suite {
    /// Runs `script` with `sh -c` inside the root (clean environment, /proc mounted).
    pub fn sh(&self, script: &str) -> Output {
        Command::new(repo().join("scripts/conformance"))
            .arg("run")
            .arg(&self.root)
            .args(["--", "/bin/sh", "-c", script])
            .output()
            .expect("run scripts/conformance run")
    }

    /// [`Suite::sh`], checked to exit 0 (else the check fails with its stderr).
    pub fn sh_ok(&self, script: &str) -> Output {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "{}: {script}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Runs the `tunedblas` command inside the root, in `inside` (its store there), with
    /// `args`: (exit code, stdout, stderr).
    pub fn tunedblas(&self, inside: &str, args: &str) -> (Option<i32>, String, String) {
        let out = self.sh(&format!(
            "cd {inside} && env TUNEDBLAS_PROFILE_DIR={inside}/profiles TUNEDBLAS_CACHE_DIR={} NO_COLOR=1 {} {args}",
            self.shared_cache(),
            self.hosts().tunedblas
        ));
        let (o, e) = out_text(&out);
        (out.status.code(), o, e)
    }

    /// A path inside the root, as this machine sees it.
    pub fn host_path(&self, inside: &str) -> PathBuf {
        self.root.join(inside.trim_start_matches('/'))
    }

    /// A fresh folder for one check: (host path, path inside the root).
    pub fn scratch(&self, name: &str) -> (PathBuf, String) {
        let host = self.work.0.join(name);
        let _ = std::fs::remove_dir_all(&host);
        std::fs::create_dir_all(&host).unwrap();
        (host, format!("{}/{name}", self.work.1))
    }

    /// A hash cache shared by this process's runs in the root (inside path): the first run
    /// under the preload hashes the real library, later ones find it cached.
    pub fn shared_cache(&self) -> String {
        format!("{}/cache", self.work.1)
    }

    /// The rocBLAS library major version (2 for rocBLAS 2.47 in ROCm 5.5).
    pub fn major(&self) -> u32 {
        self.version.split('.').next().unwrap().parse().unwrap()
    }

    /// Whether this suite has the `_64` API (rocBLAS 4.x of ROCm 6.3+).
    pub fn has_64(&self) -> bool {
        self.name != "rocblas-5.5"
    }

    pub fn has_hipblas(&self) -> bool {
        self.name == "rocblas-6.4"
    }

    /// The hosts, built once per suite per test process.
    pub fn hosts(&self) -> &Hosts {
        self.hosts
            .get_or_init(|| self.build_hosts())
            .as_ref()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn build_hosts(&self) -> Result<Hosts, String> {
        let (host, inside) = self.scratch("hosts");
        let src = repo().join("tests/hosts");
        for f in [
            "real_host.c",
            "spec.h",
            "dl_host.c",
            "py_host.py",
            "hipblas_host.c",
            "real_hiplt_host.cpp",
        ] {
            std::fs::copy(src.join(f), host.join(f)).map_err(|e| format!("{f}: {e}"))?;
        }
        for f in ["libtunedblas.so", "tunedblas"] {
            let from = build_dir().join(f);
            if !from.is_file() {
                return Err(format!("{} is missing: run `cargo build --workspace` before the tests (the README's test command does)", from.display()));
            }
            // `tunedblas` is run later, maybe while another test thread forks.
            crate::common::copy_executable(&from, &host.join(f));
        }
        let def64 = if self.has_64() {
            "-DHAVE_ROCBLAS_64"
        } else {
            ""
        };
        let mut script = format!(
            "set -e; cd {inside}
             gcc -O1 -Wall -Werror {def64} -o real_host real_host.c -lrocblas
             gcc -O1 -Wall -Werror {def64} -shared -fPIC -DREAL_HOST_MODULE -o libreal_host.so real_host.c -lrocblas
             gcc -O1 -Wall -o dl_host dl_host.c -ldl"
        );
        if self.has_hipblas() {
            script.push_str(
                "\n gcc -O1 -Wall -Werror -DHIPBLAS_V2 -D__HIP_PLATFORM_AMD__ -o hipblas_host hipblas_host.c -lhipblas
                 g++ -O1 -Wall -D__HIP_PLATFORM_AMD__ -D__HIP_DISABLE_CPP_FUNCTIONS__ -o real_hiplt_host real_hiplt_host.cpp -lhipblaslt",
            );
        }
        let out = self.sh(&script);
        if !out.status.success() {
            return Err(format!(
                "building the hosts in {}: {}{}",
                self.name,
                text(&out.stdout),
                text(&out.stderr)
            ));
        }
        Ok(Hosts {
            linked: format!("{inside}/real_host"),
            module: format!("{inside}/libreal_host.so"),
            dl_host: format!("{inside}/dl_host"),
            py_host: format!("{inside}/py_host.py"),
            hipblas: self.has_hipblas().then(|| format!("{inside}/hipblas_host")),
            hiplt: self
                .has_hipblas()
                .then(|| format!("{inside}/real_hiplt_host")),
            preload: format!("{inside}/libtunedblas.so"),
            tunedblas: format!("{inside}/tunedblas"),
        })
    }
}

/// Runs `check` for every suite that is available.
pub fn each(check: impl Fn(&Suite)) {
    for name in SUITES {
        if let Some(s) = suite(name) {
            check(s);
        }
    }
}

pub fn out_text(o: &Output) -> (String, String) {
    (text(&o.stdout), text(&o.stderr))
}
