//! Builds the exception guard of the hipBLASLt backend (`cxx/hipblaslt_guard.cpp`) with the
//! system's C++ compiler and leaves it in OUT_DIR for `include_bytes!`
//! (`src/hipblaslt/guard.rs`). Without a C++ compiler the guard is empty and the
//! interposer serves no hipBLASLt index rows (it says so once); everything else builds and
//! works.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "cxx/hipblaslt_guard.cpp";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CXX");
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("hipblaslt_guard.so");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let built = Command::new(&cxx)
        .args([
            "-std=c++17",
            "-O2",
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            "-Wall",
            "-Werror",
            "-Wl,-soname,libtunedblas-hipblaslt-guard.so",
            "-o",
        ])
        .arg(&out)
        .arg(src)
        .status();
    match built {
        Ok(s) if s.success() => {}
        other => {
            println!(
                "cargo:warning=no C++ compiler ({cxx}: {other:?}): libtunedblas.so is built without the hipBLASLt exception guard and will serve no Gemm_Hipblaslt rows"
            );
            std::fs::write(&out, b"").expect("write an empty guard");
        }
    }
}
