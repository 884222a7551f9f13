//! The two Lt stand-ins side by side (`tests/hosts/fake_cublaslt.c`, `fake_hipblaslt.cpp`),
//! each with its test host (`lt_host.c`, `hiplt_host.c`, one `linear_host.h`): what a test
//! of the interposer's Lt path needs of either, so a test of both backends is written once
//! (`tests/lt_backends.rs`) and each backend's own tests use the same helpers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use tunedblas_core::cublaslt::{op_and_signature, LtKey, R_16BF};

use super::{build, host_env, trace, Profile};

/// One Lt backend's stand-in, host and profile conventions.
pub struct Side {
    /// `cublaslt` or `hipblaslt`, as files and the stats name it.
    pub name: &'static str,
    /// `cuBLASLt` or `hipBLASLt`, as the interposer's lines say it.
    pub label: &'static str,
    /// The file name the module links (`libcublasLt.so.13`, `libhipblaslt.so.1`).
    pub soname: &'static str,
    pub libdir: PathBuf,
    pub host: PathBuf,
    /// The module the host loads first, linked against the stand-in.
    pub module: PathBuf,
    pub sha: String,
    /// A second build of the stand-in (another sha256) and a module linked against it.
    pub module2: PathBuf,
    pub sha2: String,
    /// The stand-in's environment prefix (`FAKELT`, `FAKEHIPLT`): `_TRACE`,
    /// `_CANCEL_POINT`, `_TRACE_GETTERS`, ...
    pub env: &'static str,
    /// The validators of a profile of this stand-in's build.
    pub validators: &'static [(&'static str, &'static str)],
    /// The profile name of the build ([`Side::sha`]; `<name>2` for the second).
    pub profile: &'static str,
    /// A row's solution the stand-in runs as algorithm `.1` on any shape.
    pub tuned: (&'static str, &'static str),
    /// A solution needing 4096 bytes of workspace, its algorithm, and a trace field it shows.
    pub big: (
        &'static str,
        &'static str,
        Option<(&'static str, &'static str)>,
    ),
}

/// The tail of a `tunedblas tune` campaign on a stand-in: no rest, no limits, no
/// confirmation, a small input rotation, and any spread taken for noise: the stand-in's
/// algorithms all time alike on a noisy CPU, so a shape the heuristic's algorithm does not
/// clearly lose gets its Default row, however wide its spread.
pub const STANDIN_TUNE: [&str; 9] = [
    "--rest",
    "0",
    "--no-limits",
    "--confirm",
    "off",
    "--rotate-mib",
    "0.02",
    "--noisy",
    "100000",
];

/// The bf16 `F.linear` key of a call `N,M,K`.
pub fn key(n: i64, m: i64, k: i64) -> LtKey {
    LtKey::linear(R_16BF, n, m, k)
}

/// A row as PyTorch TunableOp writes it.
pub fn row(k: &LtKey, solution: &str) -> String {
    let (op, sig) = op_and_signature(k);
    format!("{op},{sig},{solution},0.01")
}

pub fn stats(dir: &Path) -> serde_json::Value {
    super::stats_json(dir)
}

/// The algorithm each matmul ran with, as the stand-in traced it.
pub fn algos(dir: &Path) -> Vec<String> {
    trace(dir).iter().map(|l| l["algo"].clone()).collect()
}

/// The stand-in build each traced matmul ran in (the hipBLASLt stand-in names only its
/// second build: "1" where a line names none).
pub fn builds_in_trace(dir: &Path) -> Vec<String> {
    trace(dir)
        .iter()
        .map(|t| t.get("build").map_or("1", String::as_str).to_owned())
        .collect()
}

impl Side {
    /// `<prefix>_<what>`: the stand-in's variable for `what`.
    pub fn var(&self, what: &str) -> String {
        format!("{}_{what}", self.env)
    }

    /// The stand-in as the host loads it.
    pub fn lib(&self) -> PathBuf {
        self.libdir.join(self.soname)
    }

    /// A profile of `rows` for the stand-in's build in `<dir>/profiles`; its rank-0
    /// results file.
    pub fn profile(&self, dir: &Path, rows: &[String]) -> PathBuf {
        Profile::new(&dir.join("profiles"), self.profile, &self.sha)
            .validators(self.validators)
            .lines(rows)
            .write()
            .join("tunableop_results0.csv")
    }

    /// A profile for each stand-in build, each with its tuned row for `k`.
    pub fn two_build_profiles(&self, dir: &Path, k: &LtKey) {
        let p = dir.join("profiles");
        let mut reg = serde_json::Map::new();
        let second = format!("{}2", self.profile);
        for (name, sha) in [(self.profile, &self.sha), (second.as_str(), &self.sha2)] {
            std::fs::create_dir_all(p.join(name)).unwrap();
            let (v, value) = self.validators[0];
            let text = format!("Validator,{v},{value}\n{}\n", row(k, self.tuned.0));
            std::fs::write(p.join(name).join("tunableop_results0.csv"), text).unwrap();
            reg.insert(
                name.into(),
                serde_json::json!({"dir": name, "lib_sha256": sha}),
            );
        }
        std::fs::write(
            p.join("profiles.json"),
            serde_json::json!({ "profiles": reg }).to_string(),
        )
        .unwrap();
    }

    pub fn host(&self, dir: &Path, preload: bool, calls: &[&str]) -> Output {
        self.host_cmd(dir, preload, calls)
            .output()
            .expect("run the Lt host")
    }

    /// The host's stderr, run under the interposer, after checking it exited 0.
    pub fn host_ok(&self, dir: &Path, calls: &[&str]) -> String {
        let out = self.host(dir, true, calls);
        let stderr = super::text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        stderr
    }

    pub fn host_cmd(&self, dir: &Path, preload: bool, calls: &[&str]) -> Command {
        self.host_cmd_with(&self.module, dir, preload, calls)
    }

    /// [`Side::host_cmd`] with another first module (`-`: none, see linear_host.h): the
    /// rocBLAS hosts' environment, with the stand-in's trace and a stats file.
    pub fn host_cmd_with(
        &self,
        module: &Path,
        dir: &Path,
        preload: bool,
        calls: &[&str],
    ) -> Command {
        let mut cmd = Command::new(&self.host);
        cmd.arg(module).args(calls);
        host_env(&mut cmd, dir, preload);
        cmd.env_remove("REFBLAS_TRACE")
            .env_remove(self.var("CANCEL_POINT"))
            .env("TUNEDBLAS_STATS", dir.join("stats.json"))
            .env(self.var("TRACE"), dir.join("trace.log"));
        cmd
    }

    /// The miss-log lines of this backend's rank-0 files in `<dir>/misses`.
    pub fn miss_lines(&self, dir: &Path) -> Vec<String> {
        super::lt_miss_lines(dir, &format!("-{}", self.name))
    }

    /// The calls counted in this backend's miss files, over every shape.
    pub fn counted_calls(&self, dir: &Path) -> u64 {
        let suffix = format!("-{}-rank0.counts.csv", self.name);
        let mut total = 0;
        for e in std::fs::read_dir(dir.join("misses")).into_iter().flatten() {
            let p = e.unwrap().path();
            if p.to_string_lossy().ends_with(&suffix) {
                let log = tunedblas_core::misses::file::read(&p).unwrap();
                total += log.misses.iter().filter_map(|m| m.calls).sum::<u64>();
            }
        }
        total
    }
}

/// The cuBLASLt stand-in as `libcublasLt.so.13`, a second build of it as `.so.12` (two
/// files of one soname cannot be loaded side by side), and a module linked against each.
pub fn cublaslt() -> &'static Side {
    static L: OnceLock<Side> = OnceLock::new();
    L.get_or_init(|| {
        let fake = |soname: &str, extra: &[&str]| {
            let mut args: Vec<String> = vec!["-shared".into(), "-fPIC".into()];
            args.extend(extra.iter().map(|s| s.to_string()));
            args.push("{hosts}/fake_cublaslt.c".into());
            build::c_program(soname, &args)
        };
        let module = |name: &str, lib: &Path| {
            let soname = lib.file_name().unwrap().to_str().unwrap();
            let mut args: Vec<String> = ["-shared", "-fPIC", "-DLT_MODULE", "{hosts}/lt_host.c"]
                .map(String::from)
                .to_vec();
            args.extend(build::link_args(lib.parent().unwrap()));
            args.push(format!("-l:{soname}"));
            build::c_program(name, &args)
        };
        let lib = fake("libcublasLt.so.13", &[]);
        let lib2 = fake("libcublasLt.so.12", &["-DFAKE_BUILD=2"]);
        let host = build::c_program(
            "lt_host",
            &["{hosts}/lt_host.c", "-ldl", "-lpthread", build::EXPORT_OPEN].map(String::from),
        );
        Side {
            name: "cublaslt",
            label: "cuBLASLt",
            soname: "libcublasLt.so.13",
            libdir: lib.parent().unwrap().to_path_buf(),
            host,
            module: module("libltmod.so", &lib),
            sha: tunedblas_core::identity::sha256_file(&lib).unwrap(),
            module2: module("libltmod2.so", &lib2),
            sha2: tunedblas_core::identity::sha256_file(&lib2).unwrap(),
            env: "FAKELT",
            validators: &[("CUBLASLT_VERSION", "130100")],
            profile: "fake-lt",
            tuned: (TUNED, "21"),
            big: (
                "Gemm_Cublaslt_algo21_tile20_stages35_splitk4_red0_swizzle1_custom0_inner0_cluster2",
                "21",
                Some(("splitk", "4")),
            ),
        }
    })
}

/// A configuration the cuBLASLt stand-in rebuilds as algorithm 21.
pub const TUNED: &str =
    "Gemm_Cublaslt_algo21_tile20_stages35_splitk1_red0_swizzle1_custom0_inner0_cluster2";

/// The CUDA runtime stand-in (`fake_cudart.c`), for the tuner.
pub fn cudart() -> PathBuf {
    build::c_program(
        "libcudart.so.12",
        &["-shared", "-fPIC", "{hosts}/fake_cudart.c"].map(String::from),
    )
}

/// The hipBLASLt stand-in ([`build::hiplt`]) as a [`Side`].
pub fn hipblaslt() -> &'static Side {
    static H: OnceLock<Side> = OnceLock::new();
    H.get_or_init(|| {
        let h = build::hiplt();
        Side {
            name: "hipblaslt",
            label: "hipBLASLt",
            soname: "libhipblaslt.so.1",
            libdir: h.libdir.clone(),
            host: h.host.clone(),
            module: h.module.clone(),
            sha: h.sha.clone(),
            module2: h.module2.clone(),
            sha2: h.sha2.clone(),
            env: "FAKEHIPLT",
            validators: &[
                ("PT_VERSION", "2.7.0"),
                ("ROCM_VERSION", "7.1.1"),
                ("HIPBLASLT_VERSION", "100100"),
                ("GCN_ARCH_NAME", "gfx942:sramecc+:xnack-"),
            ],
            profile: "fake-hiplt",
            tuned: ("Gemm_Hipblaslt_42", "42"),
            big: ("Gemm_Hipblaslt_500", "500", None),
        }
    })
}
