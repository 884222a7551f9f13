//! Builds the hipBLASLt exception guard (the interposer's, `preload/cxx/hipblaslt_guard.cpp`)
//! for the command's hipBLASLt tuner, which lists algorithms with `hipblaslt_ext::getAllAlgos`
//! through it (`src/backends/hipblaslt/guard.rs`). Without a C++ compiler `tunedblas tune` cannot tune
//! hipBLASLt (it says so); everything else builds and works.

#[path = "../preload/cxx/build_guard.rs"]
mod build_guard;

fn main() {
    build_guard::build(
        std::path::Path::new("../preload/cxx/hipblaslt_guard.cpp"),
        "tunedblas is built without the hipBLASLt exception guard and cannot tune hipBLASLt",
    );
}
