//! Builds the exception guard of the hipBLASLt backend (`cxx/hipblaslt_guard.cpp`) and leaves
//! it in OUT_DIR for `include_bytes!` (`src/hipblaslt/guard.rs`). Without a C++ compiler the
//! guard is empty and the interposer serves no hipBLASLt index rows (it says so once);
//! everything else builds and works.

#[path = "cxx/build_guard.rs"]
mod build_guard;

fn main() {
    build_guard::build(
        std::path::Path::new("cxx/hipblaslt_guard.cpp"),
        "libtunedblas.so is built without the hipBLASLt exception guard and will serve no Gemm_Hipblaslt rows",
    );
}
