//! GPU tests of the cuBLASLt side. They run only where an NVIDIA driver and cuBLASLt load;
//! anywhere else each prints why it skipped and passes (CI has no GPU). On a GPU machine:
//!
//! ```sh
//! cargo test -p tunedblas-cli --test gpu_cublaslt -- --nocapture
//! # or, with no Rust toolchain there, the built test binary and tunedblas beside it:
//! TUNEDBLAS_BIN=path/to/tunedblas path/to/gpu_cublaslt-<hash> --nocapture
//! ```
//!
//! `TUNEDBLAS_CUBLASLT` / `TUNEDBLAS_CUDART` name the libraries when they are not on the
//! loader's path (PyTorch wheels keep them in `site-packages/nvidia/cu13/lib/`).

use std::path::PathBuf;
use std::process::Command;

fn loads(name: &str) -> bool {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: dlopen/dlclose with a valid name; the handle is only tested and closed.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return false;
    }
    unsafe { libc::dlclose(h) };
    true
}

/// Why the GPU tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    if !loads("libcuda.so.1") {
        return Some("no NVIDIA driver (libcuda.so.1 does not load)".into());
    }
    let lt = std::env::var("TUNEDBLAS_CUBLASLT").unwrap_or_else(|_| "libcublasLt.so.13".into());
    if !loads(&lt) && !loads("libcublasLt.so.12") {
        return Some(format!(
            "no cuBLASLt ({lt} does not load; set TUNEDBLAS_CUBLASLT)"
        ));
    }
    None
}

fn tool() -> PathBuf {
    if let Some(p) = std::env::var_os("TUNEDBLAS_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/<test> -> target/<profile>/tunedblas
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("tunedblas")
}

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(tool())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tool().display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Whether the GPU tests can run here; where not, says why (the test then passes empty).
fn on_a_gpu() -> bool {
    match skip_reason() {
        Some(why) => {
            println!("skipped: {why}");
            false
        }
        None => true,
    }
}

/// `<temp>/<name>-<pid>`, emptied of what an earlier run left.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The one profile folder of a store.
fn one_profile(store: &std::path::Path) -> PathBuf {
    std::fs::read_dir(store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap()
}

#[test]
fn selftest_on_the_gpu() {
    if !on_a_gpu() {
        return;
    }
    let (ok, text) = run(&["selftest"]);
    println!("{text}");
    assert!(ok, "selftest failed:\n{text}");
    assert!(text.contains("selftest: passed"));
}

#[test]
fn tune_then_recheck_one_shape_on_the_gpu() {
    if !on_a_gpu() {
        return;
    }
    use tunedblas_core::cublaslt::{op_and_signature, parse_results, LtKey, R_16BF};
    let dir = fresh_dir("tunedblas-gpu");
    std::fs::create_dir_all(&dir).unwrap();
    let key = LtKey::linear(R_16BF, 2560, 256, 1536);
    let (op, sig) = op_and_signature(&key);
    let misses = dir.join("h-1-cublaslt-rank0.csv");
    std::fs::write(&misses, format!("{op},{sig}\n")).unwrap();
    let profiles = dir.join("profiles");
    let (ok, text) = run(&[
        "tune",
        misses.to_str().unwrap(),
        "--profiles",
        profiles.to_str().unwrap(),
        "--name",
        "gpu-test",
        "--trials",
        "5",
    ]);
    println!("{text}");
    assert!(ok, "tune failed:\n{text}");
    let rows = parse_results(
        &std::fs::read_to_string(one_profile(&profiles).join("tunableop_results0.csv")).unwrap(),
    )
    .rows;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].key, key);
    assert!(profiles.join("profiles.json").is_file());
    let lib = std::env::var("TUNEDBLAS_CUBLASLT").unwrap_or_else(|_| "libcublasLt.so.13".into());
    let (ok, text) = run(&[
        "confirm",
        "--lib",
        &lib,
        "--profiles",
        profiles.to_str().unwrap(),
        "--trials",
        "5",
    ]);
    println!("{text}");
    assert!(ok, "confirm failed:\n{text}");
    assert!(text.contains("confirm: "));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wider_search_and_fresh_confirmation_on_the_gpu() {
    if !on_a_gpu() {
        return;
    }
    let dir = fresh_dir("tunedblas-gpu-search");
    let profiles = dir.join("profiles");
    // A prefill shape where the heuristic's first answer has been beaten
    // (docs/benchmarks/history.md).
    let (ok, text) = run(&[
        "tune",
        "--shape",
        "10240,2048,320",
        "--profiles",
        profiles.to_str().unwrap(),
        "--name",
        "gpu-search",
        "--trials",
        "5",
        "--budget",
        "1",
    ]);
    println!("{text}");
    assert!(ok, "tune failed:\n{text}");
    assert!(text.contains("[  1/1]"), "progress line:\n{text}");
    assert!(
        text.contains("screening: ") && text.contains(" probed"),
        "search line:\n{text}"
    );
    // The spin kernel loaded (else it says so), the card's matmul rate was measured, and
    // the shape is set against its limits with its grid.
    assert!(!text.contains("no spin kernel"), "delay:\n{text}");
    assert!(text.contains(" TFLOP/s (8192^3"), "matmul rate:\n{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("limit: ") && l.contains(" CTAs (")),
        "limit line:\n{text}"
    );
    let rows =
        std::fs::read_to_string(one_profile(&profiles).join("tunableop_results0.csv")).unwrap();
    if rows.contains("Gemm_Cublaslt_") {
        // An adoption stands only with the fresh process's word.
        assert!(text.contains("in a fresh process"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
