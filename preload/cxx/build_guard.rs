//! Compiles the hipBLASLt exception guard (`hipblaslt_guard.cpp`, beside this file) with the
//! C++ compiler for the target into OUT_DIR, for `include_bytes!`. Shared by the build
//! scripts of the interposer (`preload/build.rs`) and of the command (`cli/build.rs`),
//! each of which embeds the object. Without a compiler the object is empty and `without`
//! is said as a cargo warning; everything else builds and works.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds `src` into `$OUT_DIR/hipblaslt_guard.so`.
pub fn build(src: &Path, without: &str) {
    println!("cargo:rerun-if-changed={}", src.display());
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
            println!("cargo:warning=cross build for {target} with no {target_var}: {without}");
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
            println!("cargo:warning={why}: {without}");
            std::fs::write(&out, b"").expect("write an empty guard");
        }
    }
}
