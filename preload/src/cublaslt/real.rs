//! The real cuBLASLt: the typed table of its functions (and CUDA's `cuCtxGetDevice`),
//! one call's arguments and the call itself, the build each handle belongs to
//! (`crate::libs`), and the device a call runs on.

use std::ffi::{c_int, c_void, CString};

use tunedblas_core::cublaslt::*;

use crate::libs::{handle_store, BuildRegistry, BuildSpec};

const CUBLASLT_LIBS: &[&str] = &["libcublasLt.so"];
const CUDA_LIBS: &[&str] = &["libcuda.so"];

/// `cuCtxGetDevice(CUdevice*)`: the device of the calling thread's current context.
type CtxGetDeviceFn = unsafe extern "C" fn(*mut c_int) -> c_int;

crate::real::hook_table! {
    pub struct LtHooks; static LT; libs = CUBLASLT_LIBS;
    matmul: MatmulFn = c"cublasLtMatmul",
    desc_get: GetAttributeFn = c"cublasLtMatmulDescGetAttribute",
    layout_get: GetAttributeFn = c"cublasLtMatrixLayoutGetAttribute",
    algo_init: AlgoInitFn = c"cublasLtMatmulAlgoInit",
    config_set: AlgoSetAttributeFn = c"cublasLtMatmulAlgoConfigSetAttribute",
    config_get: AlgoGetAttributeFn = c"cublasLtMatmulAlgoConfigGetAttribute",
    cap_get: AlgoGetAttributeFn = c"cublasLtMatmulAlgoCapGetAttribute",
    algo_check: AlgoCheckFn = c"cublasLtMatmulAlgoCheck",
    desc_create: DescCreateFn = c"cublasLtMatmulDescCreate",
    desc_destroy: DestroyFn = c"cublasLtMatmulDescDestroy",
    desc_set: SetAttributeFn = c"cublasLtMatmulDescSetAttribute",
    layout_create: LayoutCreateFn = c"cublasLtMatrixLayoutCreate",
    layout_destroy: DestroyFn = c"cublasLtMatrixLayoutDestroy",
    layout_set: SetAttributeFn = c"cublasLtMatrixLayoutSetAttribute",
    create: LtCreateFn = c"cublasLtCreate",
    destroy: LtDestroyFn = c"cublasLtDestroy",
    ctx_get_device: CtxGetDeviceFn = c"cuCtxGetDevice" in CUDA_LIBS,
}

/// `cublasLtCreate(cublasLtHandle_t*)`.
pub type LtCreateFn = unsafe extern "C" fn(*mut LtHandle) -> LtStatus;
/// `cublasLtDestroy(cublasLtHandle_t)`.
pub type LtDestroyFn = unsafe extern "C" fn(LtHandle) -> LtStatus;

handle_store!(
    /// The handles of the registry below.
    LtHandles
);
/// cuBLASLt's builds and handles.
pub static CUBLASLT: BuildRegistry<LtHooks, LtHandles> = BuildRegistry::new(BuildSpec {
    what: "cuBLASLt",
    create: c"cublasLtCreate",
    hooks: &LT,
    changed: || super::STATE.library_changed(),
    several: || {},
    device: current_device,
    serving: |_| {},
});

/// The device of the calling thread's current CUDA context, 0 if unknown.
pub fn current_device() -> i32 {
    crate::real::device_or_zero(LT.ctx_get_device())
}
