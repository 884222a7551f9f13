//! Builds the exception guard of the hipBLASLt backend (`cxx/hipblaslt_guard.cpp`) with the
//! C++ compiler for the target and leaves it in OUT_DIR for `include_bytes!`
//! (`src/hipblaslt/guard.rs`). Without one the guard is empty and the interposer serves no
//! hipBLASLt index rows (it says so once); everything else builds and works.

use std::path::PathBuf;
use std::process::Command;

const NO_GUARD: &str = "libtunedblas.so is built without the hipBLASLt exception guard and will serve no Gemm_Hipblaslt rows";

fn main() {
    let src = "cxx/hipblaslt_guard.cpp";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CXX");
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("hipblaslt_guard.so");
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    // The compiler for the target: CXX_<target> (as the cc crate reads it), else CXX, else
    // c++ when building for this machine. A cross build without one embeds no guard.
    let target_var = format!("CXX_{}", target.replace('-', "_"));
    println!("cargo:rerun-if-env-changed={target_var}");
    let cxx = match (std::env::var(&target_var).ok(), std::env::var("CXX").ok()) {
        (Some(c), _) | (None, Some(c)) => c,
        (None, None) if target == host => "c++".into(),
        (None, None) => {
            println!("cargo:warning=cross build for {target} with no {target_var}: {NO_GUARD}");
            std::fs::write(&out, b"").expect("write an empty guard");
            return;
        }
    };
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
            let why = match other {
                Ok(s) => format!("{cxx} failed ({s})"),
                Err(e) => format!("no C++ compiler ({cxx}: {e})"),
            };
            println!("cargo:warning={why}: {NO_GUARD}");
            std::fs::write(&out, b"").expect("write an empty guard");
        }
    }
}
