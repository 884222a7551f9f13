//! The footprint suite (issue 24): the interposer owns nothing its host can see. Each host of
//! [`HOSTS`] runs on each backend (rocBLAS through refblas, cuBLASLt and hipBLASLt through
//! their stand-ins) twice, with and without `LD_PRELOAD=libtunedblas.so`, and everything it
//! can observe is compared: what it records about itself at its key points (the observer
//! `tests/hosts/footprint.h`: threads, descriptors, signals, errno across our calls,
//! environment, working directory, umask, limits ...), its exit, the bytes on its stdout and
//! stderr, and every file under its scratch HOME, TMPDIR and working directory. Any
//! difference that [`ALLOWED`] does not name fails. With the preload, what it records must
//! also be whole: no foreign line in a miss log, every missed shape in one, every call of a
//! profile's shape served.
//!
//! One test per backend; each runs every host and reports every difference at once.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::build::{c_program, hiplt, link_args};
use common::{artifacts, repo, scratch, Profile};
use tunedblas_core::cublaslt::{op_and_signature, LtKey, R_16BF};

#[derive(Clone, Copy, Debug)]
enum Backend {
    Rocblas,
    Cublaslt,
    Hipblaslt,
}

/// The host program: footprint_host.c loading the backend's module with RTLD_LOCAL (as
/// Python loads PyTorch), the same linked against it (the library in the global scope, as
/// in a program linked against rocBLAS), or footprint_host.py.
#[derive(Clone, Copy, PartialEq)]
enum Driver {
    C,
    Linked,
    Python,
}

/// How a host is started, beyond its steps.
#[derive(Clone, Copy, PartialEq)]
enum Start {
    Plain,
    /// With this descriptor closed (`>&-`).
    Closed(i32),
    /// With stderr a pipe whose reading end is closed (`2>&1 | head -0`, a dead logger).
    BrokenStderr,
    /// With two copies of the interposer, at two paths, in `LD_PRELOAD`.
    PreloadTwice,
    /// With a profile holding the row of the shape `64,8,8`.
    Row,
}

struct Host {
    name: &'static str,
    driver: Driver,
    /// The steps of `tests/hosts/footprint_mod.c`, in order, separated by spaces.
    steps: &'static str,
    start: Start,
    /// The exit code the host has without the preload (checked, so the host does what it
    /// is meant to).
    exit: i32,
    /// Whether every missed shape must be in the miss log. Not where the host takes away
    /// what writing it needs (a user namespace with no uid map, no descriptors left, a
    /// umask of 0777).
    lossless: bool,
}

const fn host(name: &'static str, driver: Driver, steps: &'static str) -> Host {
    Host {
        name,
        driver,
        steps,
        start: Start::Plain,
        exit: 0,
        lossless: true,
    }
}

impl Host {
    const fn start(self, start: Start) -> Host {
        Host { start, ..self }
    }
    const fn exit(self, exit: i32) -> Host {
        Host { exit, ..self }
    }
    const fn lossy(self) -> Host {
        Host {
            lossless: false,
            ..self
        }
    }
}

use Driver::{Linked, Python, C};

/// The hosts: each runs on every backend. `M,N,K` is a GEMM (rocBLAS: `m,n,k`; Lt: an
/// `F.linear` of `out,tokens,k`); the other steps are footprint_mod.c's.
#[rustfmt::skip] // one host a line
const HOSTS: &[Host] = &[
    host("plain", C, "8,8,8 16,8,8 8,8,8"),
    host("plain-linked", Linked, "8,8,8 16,8,8 8,8,8"),
    host("no-gemm", C, ""),
    host("python", Python, "8,8,8 16,8,8 8,8,8"),
    host("fork-without-gemm", C, "8,8,8 fork"),
    host("fork-with-gemm", C, "8,8,8 fork-gemm"),
    host("fork-before-any-gemm", C, "fork 8,8,8"),
    host("python-fork", Python, "8,8,8 fork fork-gemm"),
    host("exec-after-gemm", C, "8,8,8 exec 16,8,8"),
    // A daemon closes its descriptors, then opens its own file (it gets fd 3); or closes
    // them all and opens /dev/null three times (it gets 0, 1, 2).
    host("daemon-closes-from-3", C, "8,8,8 close-from:3 own:own.txt 16,8,8 24,8,8 check:own.txt"),
    host("daemon-closes-all", C, "8,8,8 close-from:0 devnull3 own:own.txt 16,8,8 check:own.txt"),
    // Started with stdout, stderr or stdin closed: the host's own opens take 0, 1, 2.
    host("stdout-closed", C, "8,8,8 own:own.txt print:hello 16,8,8 check:own.txt").start(Start::Closed(1)),
    host("stderr-closed", C, "8,8,8 own:own.txt eprint:hello 16,8,8 check:own.txt").start(Start::Closed(2)),
    host("stdin-closed", C, "8,8,8 own:own.txt 16,8,8 check:own.txt").start(Start::Closed(0)),
    // SIGTERM's handler calls _exit(7) on a guarded alternate stack of 8 KiB and of
    // SIGSTKSZ; a thread with a 16 KiB stack calls _exit(7).
    host("altstack-8k-exit", C, "8,8,8 16,8,8 altstack:8192").exit(7),
    host("altstack-sigstksz-exit", C, "8,8,8 16,8,8 altstack:0").exit(7),
    host("python-altstack-exit", Python, "8,8,8 altstack:8192").exit(7),
    host("thread-16k-exit", C, "8,8,8 16,8,8 thread-exit:16384").exit(7),
    // Descriptors and layouts (rocBLAS: handles) made and destroyed around every call, at
    // new addresses; the profile has the shape's row.
    host("churn-20000", C, "repeat:20000:64,8,8").start(Start::Row),
    host("unshare-user-ns", C, "8,8,8 unshare 16,8,8").lossy(),
    // Hostile hosts beyond the list.
    host("dup2-over-fd-3", C, "8,8,8 dup-own:own.txt:3 16,8,8 check:own.txt"),
    host("nofile-limit-7", C, "nofile:7 8,8,8 own:a.txt own:b.txt 16,8,8 check:a.txt").lossy(),
    host("umask-0777", C, "umask:777 8,8,8 16,8,8").lossy(),
    host("cwd-deleted", C, "cwd-gone 8,8,8 16,8,8"),
    host("all-signals-blocked", C, "block-all 8,8,8 fork-gemm"),
    host("eintr-storm", C, "alarm:50 distinct:40 alarm:0"),
    host("stderr-broken-pipe", C, "8,8,8 16,8,8").start(Start::BrokenStderr),
    host("preload-twice", Linked, "8,8,8 16,8,8").start(Start::PreloadTwice),
];

/// What the preload may change that a host can see; nothing else. RELIABILITY.md lists the
/// same entries. Each is `(what, allowed(context, observation, line))`, applied to the run
/// with the preload only; an allowed line may be there or not.
type Rule = fn(&Ctx, &str, &str) -> bool;
const ALLOWED: &[(&str, Rule)] = &[
    // The variable that loads the interposer is in the environment, as the user set it.
    ("LD_PRELOAD in the environment", |_, obs, line| {
        obs.starts_with("dump ") && line.starts_with("env LD_PRELOAD=")
    }),
    // The user cache folder (`$HOME/.cache/tunedblas`; the default, as no TUNEDBLAS_*_DIR
    // is set here) with the build-hash cache and the miss folder, made once a process has
    // made a GEMM.
    ("the user cache folder, after a GEMM", |ctx, obs, line| {
        obs == "files"
            && ctx.gemm_images > 0
            && line.starts_with("home/.cache/")
            && (!line.starts_with("home/.cache/tunedblas/misses/")
                || line.starts_with("home/.cache/tunedblas/misses/ "))
    }),
    // In the miss folder: the miss log, counts and live status of a process that made a
    // GEMM, named with its pid.
    (
        "miss files of a process that made a GEMM",
        |ctx, obs, line| {
            obs == "files"
                && line
                    .strip_prefix("home/.cache/tunedblas/misses/")
                    .and_then(|rest| rest.split(' ').next())
                    .is_some_and(|name| {
                        ctx.gemm_pids.iter().any(|p| {
                            name.contains(&format!("-{p}-")) || name.contains(&format!("-{p}."))
                        })
                    })
        },
    ),
    // `tunedblas:` lines on stderr (start, problems, summary) from processes that made a
    // GEMM: at most one summary (`N calls: ...`) per process image that made one.
    (
        "tunedblas: lines on stderr after a GEMM",
        |ctx, obs, line| {
            obs == "stderr"
                && ctx.gemm_images > 0
                && line.starts_with("tunedblas: ")
                && (!line.contains(" calls: ") || ctx.summary_fits())
        },
    ),
];

/// What the rules know of the run with the preload.
struct Ctx {
    gemm_pids: BTreeSet<u32>,
    /// Process images (pid, role) that made a GEMM: an exec is a new image of one pid.
    gemm_images: usize,
    summaries: std::cell::Cell<usize>,
}

impl Ctx {
    fn summary_fits(&self) -> bool {
        let n = self.summaries.get() + 1;
        self.summaries.set(n);
        n <= self.gemm_images
    }
}

/// One run of a host: what it observed, by source (`exit`, `stdout`, `stderr`, `files`,
/// `dump <role>.<label>`), each a list of lines.
struct Run {
    root: PathBuf,
    obs: BTreeMap<String, Vec<String>>,
    /// Each dump's (pid, role, GEMMs its process had made).
    dumps: Vec<(u32, String, u64)>,
    /// Every shape any of its processes called (`MxNxK`).
    shapes: BTreeSet<String>,
}

struct Built {
    host: PathBuf,
    modules: [PathBuf; 3],
    /// footprint_host with each module's code compiled in ([`Driver::Linked`]).
    linked: [PathBuf; 3],
    /// A copy of libtunedblas.so at another path ([`Start::PreloadTwice`]).
    second_preload: PathBuf,
    lt_sha: String,
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let a = artifacts();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // footprint_mod.c for one backend as a module, and compiled into footprint_host.c
        // linked against the backend's library.
        let build = |name: &str, define: &str, libdir: &Path, lib: &str| {
            let mut module = s(&["-shared", "-fPIC", define, "{hosts}/footprint_mod.c"]);
            let mut linked = s(&["-DFP_LINKED", define, "{hosts}/footprint_host.c"]);
            linked.push("{hosts}/footprint_mod.c".into());
            for args in [&mut module, &mut linked] {
                args.extend(link_args(libdir));
                args.extend(s(&[lib, "-lpthread", "-ldl"]));
            }
            (
                c_program(&format!("libfp_{name}.so"), &module),
                c_program(&format!("footprint_host_{name}"), &linked),
            )
        };
        // The cuBLASLt stand-in as tests/cublaslt.rs builds it.
        let lt = c_program(
            "libcublasLt.so.13",
            &s(&["-shared", "-fPIC", "{hosts}/fake_cublaslt.c"]),
        );
        let [roc, cu, hip] = [
            build("rocblas", "-DFP_ROCBLAS", &a.libdir4, "-lrocblas"),
            build(
                "cublaslt",
                "-DFP_CUBLASLT",
                lt.parent().unwrap(),
                "-l:libcublasLt.so.13",
            ),
            build(
                "hipblaslt",
                "-DFP_HIPBLASLT",
                &hiplt().libdir,
                "-l:libhipblaslt.so.1",
            ),
        ];
        let modules = [roc.0, cu.0, hip.0];
        let linked = [roc.1, cu.1, hip.1];
        let second = a.work.join("footprint-second-copy");
        std::fs::create_dir_all(&second).unwrap();
        let second_preload = second.join("libtunedblas.so");
        common::copy_executable(&a.preload, &second_preload);
        Built {
            host: c_program("footprint_host", &s(&["{hosts}/footprint_host.c", "-ldl"])),
            modules,
            linked,
            second_preload,
            lt_sha: tunedblas_core::identity::sha256_file(&lt).unwrap(),
        }
    })
}

/// A profile with the row of `64,8,8` for the backend, in `<root>/profiles`.
fn profile_with_row(root: &Path, backend: Backend) {
    let lt_row = |solution: &str| {
        let (op, sig) = op_and_signature(&LtKey::linear(R_16BF, 64, 8, 8));
        format!("{op},{sig},{solution},0.01")
    };
    let store = root.join("profiles");
    match backend {
        Backend::Rocblas => {
            let spec = "ex:NN:s:64:8:8";
            Profile::new(&store, "ref-v4", &common::sha4())
                .tuned(spec, common::faults::tuned(spec))
                .write()
        }
        Backend::Cublaslt => Profile::new(&store, "fake-lt", &built().lt_sha)
            .validators(&[("CUBLASLT_VERSION", "130100")])
            .line(lt_row(
                "Gemm_Cublaslt_algo21_tile20_stages35_splitk1_red0_swizzle1_custom0_inner0_cluster2",
            ))
            .write(),
        Backend::Hipblaslt => Profile::new(&store, "fake-hiplt", &hiplt().sha)
            .validators(&[
                ("PT_VERSION", "2.7.0"),
                ("ROCM_VERSION", "7.1.1"),
                ("HIPBLASLT_VERSION", "100100"),
                ("GCN_ARCH_NAME", "gfx942:sramecc+:xnack-"),
            ])
            .line(lt_row("Gemm_Hipblaslt_42"))
            .write(),
    };
}

/// A run that has not ended by then hung: it is killed and recorded so.
const HANG: Duration = Duration::from_secs(60);

fn run(h: &Host, backend: Backend, preload: bool) -> Run {
    let b = built();
    let root = scratch(&format!(
        "footprint-{backend:?}-{}-{}",
        h.name,
        if preload { "with" } else { "without" }
    ));
    for d in ["out", "tree/home", "tree/tmp", "tree/cwd"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    if h.start == Start::Row {
        profile_with_row(&root, backend);
    }
    let module = &b.modules[backend as usize];
    let mut cmd = match h.driver {
        C => Command::new(&b.host),
        Linked => Command::new(&b.linked[backend as usize]),
        Python => {
            let mut c = Command::new("python3");
            c.arg(repo().join("tests/hosts/footprint_host.py"));
            c
        }
    };
    cmd.arg(module)
        .args(h.steps.split_whitespace())
        .current_dir(root.join("tree/cwd"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root.join("tree/home"))
        .env("TMPDIR", root.join("tree/tmp"))
        .env("FOOTPRINT_OUT", root.join("out"))
        .env("TUNEDBLAS_PROFILE_DIR", root.join("profiles"));
    if h.start == Start::Row {
        // The served count (a test setting, so only where it is read).
        cmd.env("TUNEDBLAS_STATS", root.join("out/stats.json"));
    }
    if preload {
        let mut p = artifacts().preload.clone().into_os_string();
        if h.start == Start::PreloadTwice {
            p.push(":");
            p.push(&b.second_preload);
        }
        cmd.env("LD_PRELOAD", p);
    }
    let (exit, stdout, stderr) = spawn_bounded(cmd, h.start);
    let mut r = Run {
        root: root.clone(),
        obs: BTreeMap::new(),
        dumps: Vec::new(),
        shapes: BTreeSet::new(),
    };
    r.obs.insert("exit".into(), vec![exit]);
    r.obs.insert("stdout".into(), lines(&stdout));
    r.obs.insert("stderr".into(), lines(&stderr));
    let mut files = Vec::new();
    list_tree(&root.join("tree"), "", &mut files);
    r.obs.insert("files".into(), files);
    let mut dumps: Vec<PathBuf> = std::fs::read_dir(root.join("out"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            !p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("stats.json")
        })
        .collect();
    dumps.sort();
    for p in dumps {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let text = normalize(&std::fs::read_to_string(&p).unwrap(), &root);
        let mut pid = 0;
        let mut kept = Vec::new();
        for l in text.lines() {
            if let Some(v) = l.strip_prefix("pid ") {
                pid = v.parse().unwrap();
            } else {
                if let Some(v) = l.strip_prefix("gemms ") {
                    let role = name.split('.').next().unwrap().to_owned();
                    r.dumps.push((pid, role, v.parse().unwrap()));
                }
                if let Some(v) = l.strip_prefix("shapes") {
                    r.shapes.extend(v.split_whitespace().map(str::to_owned));
                }
                kept.push(l.to_owned());
            }
        }
        r.obs.insert(format!("dump {name}"), kept);
    }
    r
}

/// Runs the command in a process group of its own; after [`HANG`] the group is killed.
/// Returns its end (`exit N`, `signal N`, `hung`) and the bytes on stdout and stderr.
fn spawn_bounded(mut cmd: Command, start: Start) -> (String, Vec<u8>, Vec<u8>) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if start == Start::BrokenStderr {
        let mut fds = [0; 2];
        // SAFETY: a fresh pipe; its reading end is closed at once, its writing end handed
        // to the child (owned by the Stdio).
        let write_end = unsafe {
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
            libc::close(fds[0]);
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1])
        };
        cmd.stderr(Stdio::from(write_end));
    }
    let closed = match start {
        Start::Closed(fd) => fd,
        _ => -1,
    };
    // SAFETY: close_range and close are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            // Descriptors this test process leaked (a jobserver's) are not the host's.
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                !0u32,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            if closed >= 0 {
                libc::close(closed);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let reader = |s: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut s) = s {
                let _ = s.read_to_end(&mut v);
            }
            v
        })
    };
    let out = reader(child.stdout.take().map(|s| Box::new(s) as _));
    let err = reader(child.stderr.take().map(|s| Box::new(s) as _));
    let began = Instant::now();
    let end = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break match (s.code(), s.signal()) {
                (Some(c), _) => format!("exit {c}"),
                (_, Some(sig)) => format!("signal {sig}"),
                _ => format!("{s}"),
            };
        }
        if began.elapsed() > HANG {
            // SAFETY: the child's own process group (process_group(0)).
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break format!("hung for {HANG:?}, killed");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Whatever the host's own children left in the group goes too (they hold the pipes).
    // SAFETY: as above; the group may be gone already.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    (end, out.join().unwrap(), err.join().unwrap())
}

fn lines(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut v: Vec<String> = text.lines().map(str::to_owned).collect();
    if !text.is_empty() && !text.ends_with('\n') {
        v.push("(no newline at the end)".into());
    }
    v
}

/// Every entry under `dir`: `path/ dir MODE`, `path MODE SIZE HASH` (FNV-1a of the bytes),
/// `path -> TARGET`.
fn list_tree(dir: &Path, rel: &str, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.map(|e| e.unwrap()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        use std::os::unix::fs::PermissionsExt;
        let path = format!("{rel}{}", e.file_name().to_string_lossy());
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        let mode = m.permissions().mode() & 0o7777;
        if m.is_dir() {
            out.push(format!("{path}/ dir {mode:o}"));
            list_tree(&e.path(), &format!("{path}/"), out);
        } else if m.is_symlink() {
            let to = std::fs::read_link(e.path()).unwrap();
            out.push(format!("{path} -> {}", to.display()));
        } else {
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            let hash = bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ *b as u64).wrapping_mul(0x100000001b3)
            });
            out.push(format!("{path} {mode:o} {} {hash:016x}", bytes.len()));
        }
    }
}

/// The run's folder as `$ROOT`; pipe and socket inode numbers dropped.
fn normalize(text: &str, root: &Path) -> String {
    let mut t = text.replace(&root.display().to_string(), "$ROOT");
    for kind in ["pipe:[", "socket:["] {
        let mut out = String::new();
        let mut rest = t.as_str();
        while let Some(i) = rest.find(kind) {
            out.push_str(&rest[..i + kind.len()]);
            rest = rest[i + kind.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
        }
        out.push_str(rest);
        t = out;
    }
    t
}

/// The differences between the two runs that [`ALLOWED`] does not name, and what the run
/// with the preload failed to record.
fn differences(h: &Host, without: &Run, with: &Run) -> Vec<String> {
    let images: BTreeSet<(u32, &str)> = with
        .dumps
        .iter()
        .filter(|d| d.2 > 0)
        .map(|d| (d.0, d.1.as_str()))
        .collect();
    let ctx = Ctx {
        gemm_pids: images.iter().map(|i| i.0).collect(),
        gemm_images: images.len(),
        summaries: std::cell::Cell::new(0),
    };
    let mut diffs = Vec::new();
    let keys: BTreeSet<&String> = without.obs.keys().chain(with.obs.keys()).collect();
    let none = Vec::new();
    for key in keys {
        let a = without.obs.get(key).unwrap_or(&none);
        let b: Vec<&String> = with
            .obs
            .get(key)
            .unwrap_or(&none)
            .iter()
            .filter(|l| !ALLOWED.iter().any(|(_, ok)| ok(&ctx, key, l)))
            .collect();
        if a.iter().collect::<Vec<_>>() == b {
            continue;
        }
        diffs.push(format!("{key}:"));
        let mut left: Vec<&String> = b.clone();
        for l in a {
            match left.iter().position(|x| *x == l) {
                Some(i) => {
                    left.remove(i);
                }
                None => diffs.push(format!("  - {l}")),
            }
        }
        diffs.extend(left.iter().map(|l| format!("  + {l}")));
        if diffs.last().is_some_and(|l| l.ends_with(':')) {
            diffs.push("  (the same lines in another order)".into());
        }
    }
    diffs.extend(recorded(h, with));
    diffs
}

/// What the run with the preload recorded: miss logs hold only whole shape lines, every
/// missed shape is in one (where [`Host::lossless`]), and a profile's shape is served on
/// every call.
fn recorded(h: &Host, with: &Run) -> Vec<String> {
    let mut problems = Vec::new();
    let mut shapes = BTreeSet::new();
    let dir = with.root.join("tree/home/.cache/tunedblas/misses");
    for e in std::fs::read_dir(&dir).into_iter().flatten() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".csv") || name.ends_with(".counts.csv") {
            continue;
        }
        let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
        for m in tunedblas_core::misses::file::parse(&text).malformed {
            let line = text.lines().nth(m.line - 1).unwrap_or("");
            problems.push(format!(
                "miss log {name}:{}: {line:?} ({})",
                m.line, m.reason
            ));
        }
        shapes.extend(
            text.lines()
                .filter(|l| l.contains(',') && !l.starts_with("op_name,"))
                .map(str::to_owned),
        );
    }
    let served_shapes = usize::from(h.start == Start::Row);
    let missed = with.shapes.len().saturating_sub(served_shapes);
    if h.lossless && shapes.len() != missed {
        problems.push(format!(
            "the miss logs hold {} shapes; the host missed {missed}",
            shapes.len()
        ));
    }
    if h.start == Start::Row {
        let calls: u64 = with.dumps.iter().map(|d| d.2).max().unwrap_or(0);
        let stats = std::fs::read_to_string(with.root.join("out/stats.json")).unwrap_or_default();
        let served = serde_json::from_str::<serde_json::Value>(&stats)
            .ok()
            .and_then(|v| v["served"].as_u64());
        if served != Some(calls) {
            problems.push(format!(
                "{served:?} of {calls} calls served (TUNEDBLAS_STATS)"
            ));
        }
    }
    problems
}

/// Runs every host on `backend`; fails with every difference found.
fn footprint(backend: Backend) {
    let mut report = String::new();
    for h in HOSTS {
        let without = run(h, backend, false);
        let end = &without.obs["exit"][0];
        assert_eq!(
            end,
            &format!("exit {}", h.exit),
            "{} on {backend:?} without the preload (stderr: {:?})",
            h.name,
            without.obs["stderr"]
        );
        let with = run(h, backend, true);
        let diffs = differences(h, &without, &with);
        if !diffs.is_empty() {
            report.push_str(&format!("== {} on {backend:?}\n", h.name));
            for d in diffs {
                report.push_str(&d);
                report.push('\n');
            }
        }
    }
    assert!(
        report.is_empty(),
        "the host sees the preload (allowed: {:?}):\n{report}",
        ALLOWED.iter().map(|a| a.0).collect::<Vec<_>>()
    );
}

#[test]
fn rocblas_hosts_see_no_difference() {
    footprint(Backend::Rocblas);
}

#[test]
fn cublaslt_hosts_see_no_difference() {
    footprint(Backend::Cublaslt);
}

#[test]
fn hipblaslt_hosts_see_no_difference() {
    footprint(Backend::Hipblaslt);
}
