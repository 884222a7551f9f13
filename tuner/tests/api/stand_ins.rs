//! The cuBLASLt and CUDA runtime stand-ins of the CPU tests (`tests/hosts/fake_*.c`), built
//! once per test run, for the tests that run the engine on them.

use std::path::PathBuf;
use std::sync::OnceLock;

use tunedblas_tuner::backends::cublaslt::Cublaslt;
use tunedblas_tuner::backends::Spec;
use tunedblas_tuner::runtime::{Api, Runtime};

fn stand_ins() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tunedblas-tuner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let hosts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/hosts");
        let build = |src: &str, name: &str| {
            let out = dir.join(name);
            let cc = std::process::Command::new("cc")
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(&out)
                .arg(hosts.join(src))
                .output()
                .expect("a C compiler (cc) is needed for this test");
            assert!(
                cc.status.success(),
                "{}",
                String::from_utf8_lossy(&cc.stderr)
            );
            out
        };
        (
            build("fake_cublaslt.c", "libcublasLt.so.13"),
            build("fake_cudart.c", "libcudart.so.13"),
        )
    })
}

/// The CUDA runtime stand-in, loaded: host memory, events that read a host clock, no
/// graphs.
pub fn cuda_runtime() -> Runtime {
    let (_, rt) = stand_ins();
    let h = tunedblas_tuner::dl::open(rt, libc::RTLD_NOW | libc::RTLD_LOCAL).unwrap();
    // SAFETY: the stand-in's symbols have the CUDA runtime's C types.
    unsafe { Runtime::load(Api::Cuda, h, rt.clone()) }.unwrap()
}

pub fn cublaslt_stand_in() -> Cublaslt {
    let (lib, rt) = stand_ins();
    Cublaslt::open(&Spec {
        lib: Some(lib.clone()),
        runtime: Some(rt.clone()),
        arch: None,
    })
    .unwrap()
}
