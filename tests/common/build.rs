//! The C and C++ programs and libraries the end-to-end tests run, built once per test run
//! for every test binary: each lands in `target/<profile>/test-hosts/<name>-<hash>/`, where
//! the hash covers what goes into it (the sources under `tests/hosts/`, the compiler and its
//! arguments, the bytes of a copied library). The first binary to need one builds it into a
//! temporary folder under a file lock and renames it into place; the others (and later runs)
//! find it there. A finished folder is never written again, so readers need no lock.

use std::fs::File;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::{repo, target_dir, text};

/// `target/<profile>/test-hosts`.
pub fn cache_root() -> PathBuf {
    target_dir().join("test-hosts")
}

/// Holds an exclusive `flock` on the cache's lock file until dropped.
struct Lock(File);

impl Lock {
    fn take(root: &Path) -> Lock {
        std::fs::create_dir_all(root).unwrap();
        let f = File::create(root.join(".lock")).unwrap();
        // SAFETY: flock on a descriptor this process owns; blocks until it is ours.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock {}", root.display());
        Lock(f)
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: as above; closing the file would release it too.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The folder `<root>/<name>-<hash of parts>`, made by `make` (which fills the temporary
/// folder it is given) unless an earlier build left it there.
pub fn cached(name: &str, parts: &[&[u8]], make: impl FnOnce(&Path)) -> PathBuf {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    let hash: String = h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let root = cache_root();
    let dir = root.join(format!("{name}-{hash}"));
    if dir.is_dir() {
        return dir;
    }
    let _lock = Lock::take(&root);
    if dir.is_dir() {
        return dir;
    }
    let tmp = root.join(format!(".{name}-{hash}.tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    make(&tmp);
    std::fs::rename(&tmp, &dir).unwrap_or_else(|e| panic!("rename to {}: {e}", dir.display()));
    dir
}

/// Every file of `tests/hosts/` (sources and headers), in name order: a change to any of
/// them rebuilds every host, which is a second or two once per run.
fn host_sources() -> Vec<u8> {
    let dir = repo().join("tests/hosts");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let mut all = Vec::new();
    for p in names {
        all.extend_from_slice(p.file_name().unwrap().as_encoded_bytes());
        all.extend_from_slice(&std::fs::read(&p).unwrap());
    }
    all
}

/// The compilers the hosts are built with: `cc` for C, `g++` for the C++ stand-in.
#[derive(Clone, Copy)]
pub enum Compiler {
    C,
    Cxx,
}

impl Compiler {
    fn command(self) -> &'static str {
        match self {
            Compiler::C => "cc",
            Compiler::Cxx => "g++",
        }
    }

    /// What `<compiler> --version` says: part of every build's hash, so a new compiler
    /// rebuilds.
    fn version(self) -> &'static [u8] {
        static V: [OnceLock<Vec<u8>>; 2] = [OnceLock::new(), OnceLock::new()];
        V[self as usize].get_or_init(|| {
            Command::new(self.command())
                .arg("--version")
                .output()
                .map(|o| o.stdout)
                .unwrap_or_default()
        })
    }
}

/// `<compiler> -O1 -Wall -o <out> <args>`, failing the test with the compiler's words.
pub fn compile(compiler: Compiler, out: &Path, args: &[String]) {
    let name = compiler.command();
    let mut c = Command::new(name);
    c.args(["-O1", "-Wall", "-o"]).arg(out).args(args);
    let o = c
        .output()
        .unwrap_or_else(|e| panic!("a compiler ({name}) is needed for these tests: {e}"));
    assert!(o.status.success(), "{c:?}:\n{}", text(&o.stderr));
}

/// `name` built from `tests/hosts/` by `compiler` with `args` (`{hosts}` in an argument is
/// that folder) into its cached folder, with `link` -> `name` beside it when given: the
/// folder.
fn hosts_build(compiler: Compiler, name: &str, args: &[String], link: Option<&str>) -> PathBuf {
    let hosts = repo().join("tests/hosts").display().to_string();
    let args: Vec<String> = args.iter().map(|a| a.replace("{hosts}", &hosts)).collect();
    let sources = host_sources();
    let joined = args.join("\0");
    let link_name = link.unwrap_or("");
    let parts: [&[u8]; 4] = [
        compiler.version(),
        &sources,
        joined.as_bytes(),
        link_name.as_bytes(),
    ];
    cached(name, &parts, |tmp| {
        compile(compiler, &tmp.join(name), &args);
        if let Some(link) = link {
            std::os::unix::fs::symlink(name, tmp.join(link)).unwrap();
        }
    })
}

/// A program or library built from `tests/hosts/` with `args` (`{hosts}` in an argument is
/// that folder): the path of `<name>` in its cached folder.
pub fn c_program(name: &str, args: &[String]) -> PathBuf {
    hosts_build(Compiler::C, name, args, None).join(name)
}

/// A shared library built from `tests/hosts/` by `compiler` with `args` (sources and link
/// flags; `-shared -fPIC` and the soname are added) under its soname, with `link` ->
/// `soname` beside it (what `-l` finds): the folder holding both.
pub fn shared_lib(compiler: Compiler, soname: &str, link: &str, args: &[String]) -> PathBuf {
    let mut all: Vec<String> = vec![
        "-shared".into(),
        "-fPIC".into(),
        format!("-Wl,-soname,{soname}"),
    ];
    all.extend_from_slice(args);
    hosts_build(compiler, soname, &all, Some(link))
}

/// A folder holding `lib` under `soname`, plus `link` -> `soname` when given (what `-l`
/// finds), keyed by the library's bytes.
pub fn lib_dir(name: &str, lib: &Path, soname: &str, link: Option<&str>) -> PathBuf {
    let bytes = std::fs::read(lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
    cached(name, &[&bytes, soname.as_bytes()], |tmp| {
        let mut f = File::create(tmp.join(soname)).unwrap();
        f.write_all(&bytes).unwrap();
        if let Some(link) = link {
            std::os::unix::fs::symlink(soname, tmp.join(link)).unwrap();
        }
    })
}

/// The `-L` and `-Wl,-rpath` arguments for linking against a library in `dir`.
pub fn link_args(dir: &Path) -> [String; 2] {
    [
        format!("-L{}", dir.display()),
        format!("-Wl,-rpath,{}", dir.display()),
    ]
}

/// The F.linear hosts export their `open64` (`linear_host.h`), so the interposer's opens
/// reach it: the `@hold` step holds a reload midway through reading the store.
pub const EXPORT_OPEN: &str = "-Wl,--export-dynamic-symbol=open64";

/// The hipBLASLt stand-in (`tests/hosts/fake_hipblaslt.cpp`, C++ against the real libstdc++,
/// linked against the HIP runtime stand-in `fake_hip.c`) and its test host
/// (`tests/hosts/hiplt_host.c`): the fields of `tests/cublaslt.rs`'s `Lt`.
pub struct HipLt {
    /// `libhipblaslt.so.1` (its soname) and `libhipblaslt.so` -> it.
    pub libdir: PathBuf,
    /// `libamdhip64.so.6` and `libamdhip64.so` -> it: the HIP runtime the stand-in loads.
    pub hip_libdir: PathBuf,
    /// The program `hiplt_host`.
    pub host: PathBuf,
    /// `libhipltmod.so`: the module the host loads, linked against `libhipblaslt.so.1`.
    pub module: PathBuf,
    /// The sha256 of `libhipblaslt.so.1`.
    pub sha: String,
    /// A second build of the stand-in (`-DFAKE_BUILD=2`) under a file name no global
    /// search expects, `libhipblaslt-b.so.1` (as a wheel's bundled copy may be named), and
    /// a module linked against it: for the two-builds and renamed-library cases.
    pub module2: PathBuf,
    pub sha2: String,
}

impl HipLt {
    /// The stand-in as the host loads it (`<libdir>/libhipblaslt.so.1`).
    pub fn lib(&self) -> PathBuf {
        self.libdir.join("libhipblaslt.so.1")
    }
}

/// [`HipLt`], built once per test run.
pub fn hiplt() -> &'static HipLt {
    static H: OnceLock<HipLt> = OnceLock::new();
    H.get_or_init(|| {
        let strings = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let hip_libdir = shared_lib(
            Compiler::C,
            "libamdhip64.so.6",
            "libamdhip64.so",
            &strings(&["{hosts}/fake_hip.c"]),
        );
        let mut args = strings(&["-std=c++17", "{hosts}/fake_hipblaslt.cpp"]);
        args.extend(link_args(&hip_libdir));
        args.extend(strings(&["-l:libamdhip64.so.6", "-lpthread"]));
        let libdir = shared_lib(Compiler::Cxx, "libhipblaslt.so.1", "libhipblaslt.so", &args);
        args.push("-DFAKE_BUILD=2".into());
        let libdir2 = shared_lib(
            Compiler::Cxx,
            "libhipblaslt-b.so.1",
            "libhipblaslt-b.so",
            &args,
        );
        let module_of = |name: &str, dir: &Path, soname: &str| {
            let mut args = strings(&["-shared", "-fPIC", "-DHIPLT_MODULE", "{hosts}/hiplt_host.c"]);
            args.extend(link_args(dir));
            args.push(format!("-l:{soname}"));
            c_program(name, &args)
        };
        let module = module_of("libhipltmod.so", &libdir, "libhipblaslt.so.1");
        let module2 = module_of("libhipltmod2.so", &libdir2, "libhipblaslt-b.so.1");
        let host = c_program(
            "hiplt_host",
            &strings(&["{hosts}/hiplt_host.c", "-ldl", "-lpthread", EXPORT_OPEN]),
        );
        let sha = tunedblas_core::identity::sha256_file(&libdir.join("libhipblaslt.so.1")).unwrap();
        let sha2 =
            tunedblas_core::identity::sha256_file(&libdir2.join("libhipblaslt-b.so.1")).unwrap();
        HipLt {
            libdir,
            hip_libdir,
            host,
            module,
            sha,
            module2,
            sha2,
        }
    })
}
