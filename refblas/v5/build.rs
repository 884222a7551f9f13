//! Gives the shared object the SONAME a rocBLAS 5.x build carries (`librocblas.so.5`).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librocblas.so.5");
    println!("cargo:rerun-if-changed=build.rs");
}
