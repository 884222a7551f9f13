//! Conformance: the interposer and the harness against the real ROCm libraries Debian ships.
//!
//! Every other test runs against refblas, our own CPU library. These run against real
//! rocBLAS 5.5.1 (Debian trixie; library 2.47, `librocblas.so.0`) and 6.4.4 (Debian sid;
//! library 4.4, `librocblas.so.4`, with the `_64` API), real hipBLAS and hipBLASLt 7.1.1, in
//! minimal roots that `scripts/conformance` makes under `target/conformance/` (this machine's
//! glibc is too old for those libraries; the interposer needs only glibc 2.34). There is no
//! AMD GPU: `rocblas_create_handle` fails with status 1 and no GEMM runs, but everything up to
//! that point is the real library: its headers, its exports, its loader behaviour, its status
//! codes, its rocblas-bench parser.
//!
//! When the Debian packages cannot be reached, one line on stderr says so and every check
//! here returns at once (the rest of the test suite is unaffected); on a machine that
//! reaches them they run. `TUNEDBLAS_CONFORMANCE=off` skips them on purpose.

#[path = "../common/mod.rs"]
mod common;

/// One test per suite for a check taking `&Suite`: `check => test_5_5, test_6_4;`. A check
/// only one suite can run is `per_suite!(@test "rocblas-6.4", check, test);`. (Defined
/// before the modules, which use it too.)
macro_rules! per_suite {
    (@test $suite:literal, $check:expr, $t:ident) => {
        #[test]
        fn $t() {
            if let Some(s) = $crate::suite::suite($suite) {
                ($check)(s);
            }
        }
    };
    ($($check:expr => $t55:ident, $t64:ident;)*) => {
        $(
            per_suite!(@test "rocblas-5.5", $check, $t55);
            per_suite!(@test "rocblas-6.4", $check, $t64);
        )*
    };
}

mod abi;
mod amd;
mod exports;
mod harness;
mod hipblaslt;
mod hosts;
mod logs;
mod pending;
mod sources;
mod suite;

per_suite! {
    exports::check => exports_rocblas_5_5, exports_rocblas_6_4;
    abi::check => abi_rocblas_5_5, abi_rocblas_6_4;
    harness::no_device => harness_no_device_rocblas_5_5, harness_no_device_rocblas_6_4;
    harness::finds_the_distribution_library => env_finds_the_library_rocblas_5_5, env_finds_the_library_rocblas_6_4;
    harness::bench_lines_pass_the_real_parser => bench_lines_rocblas_5_5, bench_lines_rocblas_6_4;
    harness::gemm_tune_export_matches_what_the_library_reads => gemm_tune_export_rocblas_5_5, gemm_tune_export_rocblas_6_4;
    hosts::version_at_load => version_at_load_rocblas_5_5, version_at_load_rocblas_6_4;
    hosts::linked => linked_host_rocblas_5_5, linked_host_rocblas_6_4;
    hosts::rtld_local_module => rtld_local_module_rocblas_5_5, rtld_local_module_rocblas_6_4;
    hosts::python_ctypes => python_ctypes_rocblas_5_5, python_ctypes_rocblas_6_4;
    hosts::python_ctypes_direct => python_ctypes_direct_rocblas_5_5, python_ctypes_direct_rocblas_6_4;
}

per_suite!(@test "rocblas-6.4", hipblaslt::check, hipblaslt_7_1_rocblas_6_4);
per_suite!(@test "rocblas-6.4", hipblaslt::host, hipblaslt_host_rocblas_6_4);
per_suite!(@test "rocblas-6.4", |s| hosts::hipblas(s, false), hipblas_host_rocblas_6_4);
per_suite!(
    @test "rocblas-6.4",
    |s| hosts::hipblas(s, true),
    hipblas_host_bound_at_load_rocblas_6_4
);
per_suite!(@test "rocblas-6.4", amd::check, amd_formats_rocblas_6_4);
