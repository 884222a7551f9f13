//! The real rocBLAS: the typed table of its functions (resolved in the documented order,
//! `crate::real`), the build each handle belongs to (`crate::libs`), and the device a
//! call runs on.

use std::ffi::{c_void, CString};

use tunedblas_core::abi::*;

use crate::libs::{handle_store, BuildRegistry, BuildSpec};
use crate::real::hook_table;

/// The libraries searched when rocBLAS sits in a local scope.
const ROCBLAS_LIBS: &[&str] = &["librocblas.so", "libamdhip64.so"];

hook_table! {
    pub struct Hooks; static HOOKS; libs = ROCBLAS_LIBS;
    gemm_ex: GemmExFn<i32> = c"rocblas_gemm_ex",
    gemm_ex_64: GemmExFn<i64> = c"rocblas_gemm_ex_64",
    gemm_batched_ex: GemmBatchedExFn<i32> = c"rocblas_gemm_batched_ex",
    gemm_batched_ex_64: GemmBatchedExFn<i64> = c"rocblas_gemm_batched_ex_64",
    gemm_strided_batched_ex: GemmStridedBatchedExFn<i32> = c"rocblas_gemm_strided_batched_ex",
    gemm_strided_batched_ex_64: GemmStridedBatchedExFn<i64> = c"rocblas_gemm_strided_batched_ex_64",
    hgemm: TypedGemmFn<i32> = c"rocblas_hgemm",
    hgemm_64: TypedGemmFn<i64> = c"rocblas_hgemm_64",
    sgemm: TypedGemmFn<i32> = c"rocblas_sgemm",
    sgemm_64: TypedGemmFn<i64> = c"rocblas_sgemm_64",
    hgemm_strided_batched: TypedGemmStridedBatchedFn<i32> = c"rocblas_hgemm_strided_batched",
    hgemm_strided_batched_64: TypedGemmStridedBatchedFn<i64> = c"rocblas_hgemm_strided_batched_64",
    sgemm_strided_batched: TypedGemmStridedBatchedFn<i32> = c"rocblas_sgemm_strided_batched",
    sgemm_strided_batched_64: TypedGemmStridedBatchedFn<i64> = c"rocblas_sgemm_strided_batched_64",
    get_version_string: GetVersionStringFn = c"rocblas_get_version_string",
    get_version_string_size: GetVersionStringSizeFn = c"rocblas_get_version_string_size",
    hip_get_device: HipGetDeviceFn = c"hipGetDevice",
    create_handle: CreateHandleFn = c"rocblas_create_handle",
    destroy_handle: DestroyHandleFn = c"rocblas_destroy_handle",
}

handle_store!(
    /// The handles of the registry below.
    RocblasHandles
);
/// rocBLAS's builds and handles.
pub static ROCBLAS: BuildRegistry<Hooks, RocblasHandles> = BuildRegistry::new(BuildSpec {
    what: "rocBLAS",
    create: c"rocblas_create_handle",
    hooks: &HOOKS,
    changed: super::library_changed,
    several: super::serve::close_pass_gate,
    device: current_device,
    serving: super::dynsym::follow,
});

/// The hooks of the other rocBLAS build `h` belongs to, if any ([`Registry::other_build`]).
#[inline(always)]
pub fn other_build(h: Handle) -> Option<&'static Hooks> {
    ROCBLAS.other_build(h)
}

/// Whether a handle of another rocBLAS build was ever made.
pub fn several_builds() -> bool {
    ROCBLAS.several_builds()
}

/// The device rocBLAS handle `h` was made on, if it was made through us.
pub fn device_of(h: Handle) -> Option<i32> {
    ROCBLAS.device_of(h)
}

/// `rocblas_create_handle` from a caller whose return address is `ret` (exports.rs).
pub fn create_handle(out: *mut Handle, ret: *const c_void) -> Status {
    ROCBLAS
        .create(out, ret, || HOOKS.create_handle.get())
        .unwrap_or(STATUS_NOT_IMPLEMENTED)
}

/// `rocblas_destroy_handle`: in the build the handle came from.
pub fn destroy_handle(h: Handle) -> Status {
    match ROCBLAS.destroy_fn(h, |t| t.destroy_handle()) {
        // SAFETY: the caller's own handle.
        Some(f) => unsafe { f(h) },
        None => STATUS_NOT_IMPLEMENTED,
    }
}

/// The device of a call on handle `h`: the one `h` was made on, else the calling thread's.
#[inline]
pub fn device_for(h: Handle) -> i32 {
    device_of(h).unwrap_or_else(current_device)
}

/// The device the calling thread's work runs on (HIP's current device), 0 if unknown.
#[inline]
pub fn current_device() -> i32 {
    crate::real::device_or_zero(HOOKS.hip_get_device())
}

/// The real rocBLAS version string (`5.6.0.8d1ae90e`), if the library offers it.
pub fn version_string() -> Option<String> {
    // SAFETY: the served build's own two functions.
    unsafe {
        tunedblas_core::version::reported(
            HOOKS.get_version_string_size(),
            HOOKS.get_version_string(),
        )
    }
}
