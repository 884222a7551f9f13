//! Gives the shared object the SONAME a rocBLAS 4.x build carries, so library discovery
//! (and DT_NEEDED entries of anything linked against it) see `librocblas.so.4`.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librocblas.so.4");
    println!("cargo:rerun-if-changed=build.rs");
}
