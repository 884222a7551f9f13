//! Properties of the built interposer that must hold on every build: what it exports (each
//! export interposes the whole host process), what it links (never rocBLAS or HIP: that
//! would tie it to one soname and defeat run-time resolution), its glibc floor, and how
//! much initialized writable data it carries.

mod common;

use std::process::Command;

use common::*;

/// Every symbol `libtunedblas.so` may define for the dynamic linker.
const ALLOWED: &[&str] = &[
    "rocblas_gemm_ex",
    "rocblas_gemm_ex_64",
    "rocblas_gemm_batched_ex",
    "rocblas_gemm_batched_ex_64",
    "rocblas_gemm_strided_batched_ex",
    "rocblas_gemm_strided_batched_ex_64",
    "rocblas_hgemm",
    "rocblas_hgemm_64",
    "rocblas_sgemm",
    "rocblas_sgemm_64",
    "rocblas_hgemm_strided_batched",
    "rocblas_hgemm_strided_batched_64",
    "rocblas_sgemm_strided_batched",
    "rocblas_sgemm_strided_batched_64",
    "cublasLtCreate",
    "cublasLtDestroy",
    "cublasLtMatmul",
    "cublasLtMatmulDescCreate",
    "cublasLtMatmulDescDestroy",
    "cublasLtMatmulDescSetAttribute",
    "cublasLtMatrixLayoutCreate",
    "cublasLtMatrixLayoutSetAttribute",
    "cublasLtMatrixLayoutDestroy",
    "tunedblas_cublaslt_serving",
    "hipblasLtCreate",
    "hipblasLtDestroy",
    "hipblasLtMatmulDescCreate",
    "hipblasLtMatmulDescDestroy",
    "hipblasLtMatmulDescSetAttribute",
    "hipblasLtMatrixLayoutCreate",
    "hipblasLtMatrixLayoutSetAttribute",
    "hipblasLtMatrixLayoutDestroy",
    "hipblasLtMatmul",
    "tunedblas_hipblaslt_serving",
    "rocblas_create_handle",
    "rocblas_destroy_handle",
    "_exit",
    "_Exit",
    "execve",
    "execv",
    "execvp",
    "execvpe",
    "fexecve",
    // The Lt descriptor and layout calls are kept per call site, looked up again after a
    // library may have been unloaded (preload/src/lt/callers.rs).
    "dlclose",
];

fn tool(name: &str, args: &[&str]) -> String {
    let out = Command::new(name)
        .args(args)
        .arg(&artifacts().preload)
        .output()
        .unwrap_or_else(|e| panic!("{name} is needed for this test (binutils): {e}"));
    assert!(out.status.success(), "{name} failed: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn exports_only_the_wrapped_entry_points() {
    let listing = tool("nm", &["-D", "--defined-only"]);
    let exported: Vec<&str> = listing
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_addr, kind, name) = (f.next()?, f.next()?, f.next()?);
            // Text, data and weak definitions all interpose.
            matches!(kind, "T" | "D" | "B" | "R" | "W" | "V" | "i").then_some(name)
        })
        .collect();
    let extra: Vec<&&str> = exported.iter().filter(|n| !ALLOWED.contains(n)).collect();
    assert!(extra.is_empty(), "unexpected exports: {extra:?}");
    for want in ALLOWED {
        assert!(exported.contains(want), "{want} is not exported");
    }
}

#[test]
fn links_neither_rocblas_nor_hip() {
    let dynamic = tool("readelf", &["-d"]);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(
        !needed.is_empty(),
        "readelf output has NEEDED entries: {dynamic}"
    );
    for l in &needed {
        assert!(
            !l.contains("rocblas") && !l.contains("amdhip") && !l.contains("hipblas"),
            "{l}"
        );
    }
}

#[test]
fn glibc_floor_is_2_34() {
    // The README documents glibc >= 2.34 (Rust std uses dlsym@GLIBC_2.34 and friends).
    let versions = tool("objdump", &["-T"]);
    let mut max = (0u32, 0u32);
    for v in versions.split("GLIBC_").skip(1) {
        let num: String = v
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let mut parts = num.split('.').filter_map(|p| p.parse::<u32>().ok());
        if let (Some(a), Some(b)) = (parts.next(), parts.next()) {
            max = max.max((a, b));
        }
    }
    assert!(max >= (2, 2), "found GLIBC version references: {versions}");
    assert!(
        max <= (2, 34),
        "needs glibc {}.{}, above the documented 2.34 floor",
        max.0,
        max.1
    );
}

/// The interposer's big tables (the Lt object maps, 852 KB each; the handle maps, 98 KB
/// each) start all zero and lie in `.bss`, which costs neither file bytes nor memory until
/// a page is touched. One that drifts into `.data` (a pointer or any non-zero byte beside
/// its slots, issue 29: the handle maps sat inside their registries, which name their
/// backend) is copied into every process the preload enters, untouched or not. What is
/// left in `.data` is about 68 KB (the Lt call-site caches, 5 KB each, name their function).
#[test]
fn big_tables_start_zero_in_bss() {
    const BOUND: u64 = 128 * 1024;
    let sections = tool("size", &["-A"]);
    let data: u64 = sections
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [".data", size, ..] => size.parse::<u64>().ok(),
            _ => None,
        })
        .sum();
    assert!(data > 0, "size -A lists a .data section: {sections}");
    assert!(
        data <= BOUND,
        "{data} bytes of .data, over {BOUND}: a table that could start zero (in .bss) is \
         initialized (nm -S --size-sort -C names it)"
    );
}
