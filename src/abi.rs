//! The rocBLAS ABI as this project uses it: enum values, opaque pointer types and the C
//! signatures of every entry point that the interposer wraps, the harness calls or refblas
//! exports. One definition, shared by every crate, so the three can never disagree.
//!
//! Values come from rocBLAS's public headers (`rocblas-types.h`, `rocblas-functions.h`,
//! `rocblas-beta.h`); see FACTS.md section 1.

use std::ffi::{c_char, c_void};

/// `rocblas_status`: every entry point returns one (a 32-bit C enum).
pub type Status = i32;
c_values!(Status:
    STATUS_SUCCESS = 0, STATUS_INVALID_HANDLE = 1, STATUS_NOT_IMPLEMENTED = 2,
    STATUS_INVALID_POINTER = 3, STATUS_INVALID_SIZE = 4, STATUS_MEMORY_ERROR = 5,
    STATUS_INTERNAL_ERROR = 6, STATUS_INVALID_VALUE = 11,
);

/// `rocblas_operation`.
pub type Operation = i32;
c_values!(Operation: OP_NONE = 111, OP_TRANSPOSE = 112, OP_CONJUGATE_TRANSPOSE = 113);

/// `rocblas_datatype`.
pub type Datatype = i32;
c_values!(Datatype:
    DT_F16_R = 150, DT_F32_R = 151, DT_F64_R = 152, DT_F16_C = 153, DT_F32_C = 154, DT_F64_C = 155,
    DT_I8_R = 160, DT_U8_R = 161, DT_I32_R = 162, DT_U32_R = 163, DT_BF16_R = 168, DT_BF16_C = 169,
);

/// `rocblas_gemm_algo`.
pub type GemmAlgo = i32;
pub const ALGO_STANDARD: GemmAlgo = 0;
pub const ALGO_SOLUTION_INDEX: GemmAlgo = 1;

// `rocblas_gemm_flags` (a bit set passed as uint32).
c_values!(u32:
    FLAG_NONE = 0,
    /// int8 inputs packed four to a 32-bit word: another problem (other kernels) than plain int8.
    /// rocBLAS up to 3.x (ROCm 5.7); ROCm 6.0 removed it from the headers and keeps 0x1 reserved.
    FLAG_PACK_INT8X4 = 0x1,
    FLAG_USE_CU_EFFICIENCY = 0x2, FLAG_FP16_ALT_IMPL = 0x4, FLAG_CHECK_SOLUTION_INDEX = 0x8,
    FLAG_FP16_ALT_IMPL_RNZ = 0x10, FLAG_STOCHASTIC_ROUNDING = 0x20,
);
/// Flags that select a different kernel, data layout or rounding: they are part of the
/// problem key. Only `check_solution_index` (validate, run nothing) is left out.
pub const KERNEL_FLAGS: u32 = FLAG_PACK_INT8X4
    | FLAG_USE_CU_EFFICIENCY
    | FLAG_FP16_ALT_IMPL
    | FLAG_FP16_ALT_IMPL_RNZ
    | FLAG_STOCHASTIC_ROUNDING;

/// `rocblas_pointer_mode` (a 32-bit C enum).
pub type PointerMode = i32;
pub const POINTER_MODE_HOST: PointerMode = 0;
pub const POINTER_MODE_DEVICE: PointerMode = 1;

pub type Handle = *mut c_void;
pub type Stream = *mut c_void;

/// The name rocBLAS uses for a datatype (`f16_r`, ...), as in its bench logs.
pub fn datatype_name(t: Datatype) -> Option<&'static str> {
    Some(match t {
        DT_F16_R => "f16_r",
        DT_F32_R => "f32_r",
        DT_F64_R => "f64_r",
        DT_F16_C => "f16_c",
        DT_F32_C => "f32_c",
        DT_F64_C => "f64_c",
        DT_I8_R => "i8_r",
        DT_U8_R => "u8_r",
        DT_I32_R => "i32_r",
        DT_U32_R => "u32_r",
        DT_BF16_R => "bf16_r",
        DT_BF16_C => "bf16_c",
        _ => return None,
    })
}

/// Inverse of [`datatype_name`].
pub fn datatype_from_name(s: &str) -> Option<Datatype> {
    [
        DT_F16_R, DT_F32_R, DT_F64_R, DT_F16_C, DT_F32_C, DT_F64_C, DT_I8_R, DT_U8_R, DT_I32_R,
        DT_U32_R, DT_BF16_R, DT_BF16_C,
    ]
    .into_iter()
    .find(|&t| datatype_name(t) == Some(s))
}

/// Bytes per element of a datatype, for buffer sizing.
pub fn datatype_size(t: Datatype) -> Option<usize> {
    Some(match t {
        DT_F16_R | DT_BF16_R => 2,
        DT_F32_R | DT_I32_R | DT_U32_R | DT_F16_C | DT_BF16_C => 4,
        DT_F64_R | DT_F32_C => 8,
        DT_F64_C => 16,
        DT_I8_R | DT_U8_R => 1,
        _ => return None,
    })
}

// ---- C signatures -------------------------------------------------------------------------
// `I` is the integer width of sizes: i32 (`rocblas_int`) or i64 for the `_64` twins.
// The GEMM entry points are "C-unwind": a thread cancelled inside the real rocBLAS (a C++
// library, whose waits are cancellation points) unwinds through the interposer's frames back
// to the host, as it would without it; through a plain "C" frame it would abort the process.
// The GEMM signatures are written a group of C arguments to a line: handle, transposes,
// m, n, k, alpha and A (pointer, type, ld[, stride]); B; beta, C and D; the rest.

#[rustfmt::skip]
pub type GemmExFn<I> = unsafe extern "C-unwind" fn(
    Handle, Operation, Operation, I, I, I, *const c_void, *const c_void, Datatype, I,
    *const c_void, Datatype, I,
    *const c_void, *const c_void, Datatype, I, *mut c_void, Datatype, I,
    Datatype, GemmAlgo, i32, u32,
) -> Status;

#[rustfmt::skip]
pub type GemmBatchedExFn<I> = unsafe extern "C-unwind" fn(
    Handle, Operation, Operation, I, I, I, *const c_void, *const c_void, Datatype, I,
    *const c_void, Datatype, I,
    *const c_void, *const c_void, Datatype, I, *mut c_void, Datatype, I,
    I, Datatype, GemmAlgo, i32, u32,
) -> Status;

#[rustfmt::skip]
pub type GemmStridedBatchedExFn<I> = unsafe extern "C-unwind" fn(
    Handle, Operation, Operation, I, I, I, *const c_void, *const c_void, Datatype, I, i64,
    *const c_void, Datatype, I, i64,
    *const c_void, *const c_void, Datatype, I, i64, *mut c_void, Datatype, I, i64,
    I, Datatype, GemmAlgo, i32, u32,
) -> Status;

/// `rocblas_hgemm` / `rocblas_sgemm` (alpha, beta, A, B, C typed by the function).
#[rustfmt::skip]
pub type TypedGemmFn<I> = unsafe extern "C-unwind" fn(
    Handle, Operation, Operation, I, I, I, *const c_void, *const c_void, I,
    *const c_void, I,
    *const c_void, *mut c_void, I,
) -> Status;

#[rustfmt::skip]
pub type TypedGemmStridedBatchedFn<I> = unsafe extern "C-unwind" fn(
    Handle, Operation, Operation, I, I, I, *const c_void, *const c_void, I, i64,
    *const c_void, I, i64,
    *const c_void, *mut c_void, I, i64,
    I,
) -> Status;

/// `rocblas_gemm_ex_get_solutions`: the gemm_ex arguments without `solution_index`, then
/// `list` (may be NULL to query the count) and `size` (in: capacity, out: count).
#[rustfmt::skip]
pub type GemmExGetSolutionsFn = unsafe extern "C" fn(
    Handle, Operation, Operation, i32, i32, i32, *const c_void, *const c_void, Datatype, i32,
    *const c_void, Datatype, i32,
    *const c_void, *const c_void, Datatype, i32, *mut c_void, Datatype, i32,
    Datatype, GemmAlgo, u32, *mut i32, *mut i32,
) -> Status;

#[rustfmt::skip]
pub type GemmStridedBatchedExGetSolutionsFn = unsafe extern "C" fn(
    Handle, Operation, Operation, i32, i32, i32, *const c_void, *const c_void, Datatype, i32, i64,
    *const c_void, Datatype, i32, i64,
    *const c_void, *const c_void, Datatype, i32, i64, *mut c_void, Datatype, i32, i64,
    i32, Datatype, GemmAlgo, u32, *mut i32, *mut i32,
) -> Status;

pub type CreateHandleFn = unsafe extern "C" fn(*mut Handle) -> Status;
pub type DestroyHandleFn = unsafe extern "C" fn(Handle) -> Status;
pub type SetStreamFn = unsafe extern "C" fn(Handle, Stream) -> Status;
pub type GetStreamFn = unsafe extern "C" fn(Handle, *mut Stream) -> Status;
pub type GetPointerModeFn = unsafe extern "C" fn(Handle, *mut PointerMode) -> Status;
pub type SetPointerModeFn = unsafe extern "C" fn(Handle, PointerMode) -> Status;
pub type GetVersionStringFn = unsafe extern "C" fn(*mut c_char, usize) -> Status;
pub type GetVersionStringSizeFn = unsafe extern "C" fn(*mut usize) -> Status;
pub type StatusToStringFn = unsafe extern "C" fn(Status) -> *const c_char;

// ---- The HIP runtime subset the harness needs (hipError_t is a 32-bit enum, 0 = success) --
pub type HipError = i32;
pub const HIP_SUCCESS: HipError = 0;
/// `hipMemcpyKind` (a 32-bit C enum).
pub type HipMemcpyKind = i32;
c_values!(HipMemcpyKind:
    HIP_MEMCPY_HOST_TO_DEVICE = 1, HIP_MEMCPY_DEVICE_TO_HOST = 2, HIP_MEMCPY_DEFAULT = 4,
);
pub type HipEvent = *mut c_void;

pub type HipGetDeviceCountFn = unsafe extern "C" fn(*mut i32) -> HipError;
pub type HipSetDeviceFn = unsafe extern "C" fn(i32) -> HipError;
pub type HipGetDeviceFn = unsafe extern "C" fn(*mut i32) -> HipError;
pub type HipMallocFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> HipError;
pub type HipFreeFn = unsafe extern "C" fn(*mut c_void) -> HipError;
pub type HipMemcpyFn =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, HipMemcpyKind) -> HipError;
pub type HipDeviceSynchronizeFn = unsafe extern "C" fn() -> HipError;
pub type HipEventCreateFn = unsafe extern "C" fn(*mut HipEvent) -> HipError;
pub type HipEventRecordFn = unsafe extern "C" fn(HipEvent, Stream) -> HipError;
pub type HipEventSynchronizeFn = unsafe extern "C" fn(HipEvent) -> HipError;
pub type HipEventElapsedTimeFn = unsafe extern "C" fn(*mut f32, HipEvent, HipEvent) -> HipError;
pub type HipEventDestroyFn = unsafe extern "C" fn(HipEvent) -> HipError;
/// `hipMemset(ptr, value, bytes)`, `hipStreamCreate(stream*)`, `hipStreamSynchronize(stream)`,
/// `hipStreamDestroy(stream)`, `hipRuntimeGetVersion(int*)`: the rest of what the hipBLASLt
/// tuner asks of HIP.
pub type HipMemsetFn = unsafe extern "C" fn(*mut c_void, i32, usize) -> HipError;
pub type HipStreamCreateFn = unsafe extern "C" fn(*mut Stream) -> HipError;
pub type HipStreamSynchronizeFn = unsafe extern "C" fn(Stream) -> HipError;
pub type HipStreamDestroyFn = unsafe extern "C" fn(Stream) -> HipError;
/// `hipStreamBeginCapture(stream, hipStreamCaptureMode)`, `hipStreamEndCapture(stream,
/// hipGraph_t*)`, `hipGraphInstantiateWithFlags(hipGraphExec_t*, hipGraph_t, unsigned long
/// long)`, `hipGraphLaunch(hipGraphExec_t, stream)`, `hipGraphExecDestroy` /
/// `hipGraphDestroy`: the rocBLAS harness's graph timing mode.
pub type HipStreamCaptureMode = i32;
pub type HipStreamBeginCaptureFn = unsafe extern "C" fn(Stream, HipStreamCaptureMode) -> HipError;
pub type HipStreamEndCaptureFn = unsafe extern "C" fn(Stream, *mut *mut c_void) -> HipError;
pub type HipGraphInstantiateWithFlagsFn =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, u64) -> HipError;
pub type HipGraphLaunchFn = unsafe extern "C" fn(*mut c_void, Stream) -> HipError;
pub type HipGraphDestroyFn = unsafe extern "C" fn(*mut c_void) -> HipError;
/// `hipStreamCaptureModeThreadLocal`: other threads' HIP calls do not break the capture.
pub const HIP_STREAM_CAPTURE_MODE_THREAD_LOCAL: HipStreamCaptureMode = 1;
pub type HipRuntimeGetVersionFn = unsafe extern "C" fn(*mut i32) -> HipError;

// ---- hipBLASLt: what the hipBLASLt backend calls (FACTS.md section 10) ---------------------
// Used by `preload/src/hipblaslt/` (through `crate::hipblaslt`). Checked against hipBLASLt
// 7.1.1's headers and library by tests/conformance (prototypes, struct layouts, every
// `HIPBLAS*` / `HIP_R_*` value below, the C++ symbols of `hipblaslt_ext`, libstdc++'s
// `std::vector` layout).

/// `hipblasStatus_t` (a 32-bit C enum; 0 = success).
pub type HipblasStatus = i32;
c_values!(HipblasStatus:
    HIPBLAS_STATUS_SUCCESS = 0, HIPBLAS_STATUS_NOT_INITIALIZED = 1,
    HIPBLAS_STATUS_INVALID_VALUE = 3, HIPBLAS_STATUS_NOT_SUPPORTED = 7,
);

/// `hipDataType`, `hipblasComputeType_t` and the descriptor attribute enums: 32-bit C enums.
pub type HipDataType = i32;
pub type HipblasComputeType = i32;
pub type HipblasLtAttribute = i32;

// `hipblasOperation_t` (hipblas-common.h): hipBLAS numbers its transposes from 111.
c_values!(i32: HIPBLAS_OP_N = 111, HIPBLAS_OP_T = 112, HIPBLAS_OP_C = 113);

// `hipDataType` (hip/library_types.h): the same numbers as CUDA's `cudaDataType_t` for
// every type tunedblas serves.
c_values!(i32: HIP_R_32F = 0, HIP_R_64F = 1, HIP_R_16F = 2, HIP_R_16BF = 14);

// `hipblasComputeType_t` (hipblas-common.h): numbered from 0, unlike cuBLAS's (from 64).
c_values!(i32:
    HIPBLAS_COMPUTE_16F = 0, HIPBLAS_COMPUTE_16F_PEDANTIC = 1, HIPBLAS_COMPUTE_32F = 2,
    HIPBLAS_COMPUTE_32F_PEDANTIC = 3, HIPBLAS_COMPUTE_32F_FAST_16F = 4,
    HIPBLAS_COMPUTE_32F_FAST_16BF = 5, HIPBLAS_COMPUTE_32F_FAST_TF32 = 6, HIPBLAS_COMPUTE_64F = 7,
    HIPBLAS_COMPUTE_64F_PEDANTIC = 8, HIPBLAS_COMPUTE_32I = 9, HIPBLAS_COMPUTE_32I_PEDANTIC = 10,
);

// `hipblasLtMatmulDescAttributes_t`: the ones tunedblas reads. There is no attribute for
// the compute and scale types: they are given to `hipblasLtMatmulDescCreate` only, so the
// interposer wraps it (`preload/src/hipblaslt/objects.rs`).
c_values!(i32:
    HIPBLASLT_MATMUL_DESC_TRANSA = 0, HIPBLASLT_MATMUL_DESC_TRANSB = 1,
    HIPBLASLT_MATMUL_DESC_EPILOGUE = 2, HIPBLASLT_MATMUL_DESC_BIAS_POINTER = 3,
    HIPBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 4, HIPBLASLT_MATMUL_DESC_POINTER_MODE = 13,
);

// `hipblasLtMatrixLayoutAttribute_t` (cuBLASLt's attributes, numbered otherwise). hipBLASLt
// 7.1.1 reads back only the first two; the interposer keeps the rest from the calls that
// set them (`preload/src/hipblaslt/objects.rs`).
c_values!(i32:
    HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 0, HIPBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 1,
    HIPBLASLT_MATRIX_LAYOUT_TYPE = 2, HIPBLASLT_MATRIX_LAYOUT_ORDER = 3,
    HIPBLASLT_MATRIX_LAYOUT_ROWS = 4, HIPBLASLT_MATRIX_LAYOUT_COLS = 5,
    HIPBLASLT_MATRIX_LAYOUT_LD = 6,
);

// `hipblasLtEpilogue_t`, `hipblasLtOrder_t`, `hipblasLtPointerMode_t`: cuBLASLt's numbers.
c_values!(i32:
    HIPBLASLT_EPILOGUE_DEFAULT = 1, HIPBLASLT_EPILOGUE_BIAS = 4, HIPBLASLT_ORDER_COL = 0,
    HIPBLASLT_POINTER_MODE_HOST = 0,
);
pub type HipblasLtHandle = *mut c_void;
pub type HipblasLtMatmulDesc = *mut c_void;
pub type HipblasLtMatrixLayout = *mut c_void;
pub type HipblasLtMatmulPreference = *mut c_void;

/// `hipblasLtMatmulAlgo_t`: an opaque 16-byte algorithm id and the workspace it may use.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HipblasLtMatmulAlgo {
    pub data: [u8; 16],
    pub max_workspace_bytes: usize,
}

/// `hipblasLtMatmulHeuristicResult_t`, as `hipblasLtMatmulAlgoGetHeuristic` and
/// `hipblaslt_ext::getAllAlgos` fill it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HipblasLtMatmulHeuristicResult {
    pub algo: HipblasLtMatmulAlgo,
    pub workspace_size: usize,
    pub state: HipblasStatus,
    pub waves_count: f32,
    pub reserved: [i32; 4],
}

pub type HipblasLtCreateFn = unsafe extern "C" fn(*mut HipblasLtHandle) -> HipblasStatus;
pub type HipblasLtDestroyFn = unsafe extern "C" fn(HipblasLtHandle) -> HipblasStatus;
/// `hipblasLtMatmulDescCreate(desc*, hipblasComputeType_t, hipDataType scaleType)`.
#[rustfmt::skip]
pub type HipblasLtMatmulDescCreateFn = unsafe extern "C" fn(
    *mut HipblasLtMatmulDesc, HipblasComputeType, HipDataType,
) -> HipblasStatus;
/// `hipblasLtMatmulDescDestroy(desc)`.
pub type HipblasLtMatmulDescDestroyFn = unsafe extern "C" fn(HipblasLtMatmulDesc) -> HipblasStatus;
/// `hipblasLtMatrixLayoutCreate(layout*, hipDataType, rows, cols, ld)`.
pub type HipblasLtMatrixLayoutCreateFn =
    unsafe extern "C" fn(*mut HipblasLtMatrixLayout, HipDataType, u64, u64, i64) -> HipblasStatus;
/// `hipblasLtMatrixLayoutDestroy(layout)`.
pub type HipblasLtMatrixLayoutDestroyFn =
    unsafe extern "C" fn(HipblasLtMatrixLayout) -> HipblasStatus;
/// `hipblasLtMatmulDescSetAttribute(desc, attr, buf, size)`.
#[rustfmt::skip]
pub type HipblasLtMatmulDescSetAttributeFn = unsafe extern "C" fn(
    HipblasLtMatmulDesc, HipblasLtAttribute, *const c_void, usize,
) -> HipblasStatus;
/// `hipblasLtMatrixLayoutSetAttribute(layout, attr, buf, size)`.
#[rustfmt::skip]
pub type HipblasLtMatrixLayoutSetAttributeFn = unsafe extern "C" fn(
    HipblasLtMatrixLayout, HipblasLtAttribute, *const c_void, usize,
) -> HipblasStatus;
/// `hipblasLtMatmulDescGetAttribute` / `hipblasLtMatrixLayoutGetAttribute`:
/// (object, attr, buf, size, size written).
#[rustfmt::skip]
pub type HipblasLtMatmulDescGetAttributeFn = unsafe extern "C" fn(
    HipblasLtMatmulDesc, HipblasLtAttribute, *mut c_void, usize, *mut usize,
) -> HipblasStatus;
#[rustfmt::skip]
pub type HipblasLtMatrixLayoutGetAttributeFn = unsafe extern "C" fn(
    HipblasLtMatrixLayout, HipblasLtAttribute, *mut c_void, usize, *mut usize,
) -> HipblasStatus;

/// `hipblasLtMatmul`: cuBLASLt's 16 arguments. "C-unwind": a thread cancelled inside
/// hipBLASLt unwinds through the interposer back to its host.
#[rustfmt::skip]
pub type HipblasLtMatmulFn = unsafe extern "C-unwind" fn(
    HipblasLtHandle, HipblasLtMatmulDesc,
    *const c_void, *const c_void, HipblasLtMatrixLayout,
    *const c_void, HipblasLtMatrixLayout,
    *const c_void, *const c_void, HipblasLtMatrixLayout,
    *mut c_void, HipblasLtMatrixLayout,
    *const HipblasLtMatmulAlgo,
    *mut c_void, usize, Stream,
) -> HipblasStatus;

/// `hipblasLtMatmulPreferenceCreate(pref*)`, `...Destroy(pref)`, `...SetAttribute(pref, attr,
/// buf, size)`: the heuristic's preferences (the harness sets the workspace only).
pub type HipblasLtMatmulPreferenceCreateFn =
    unsafe extern "C" fn(*mut HipblasLtMatmulPreference) -> HipblasStatus;
pub type HipblasLtMatmulPreferenceDestroyFn =
    unsafe extern "C" fn(HipblasLtMatmulPreference) -> HipblasStatus;
#[rustfmt::skip]
pub type HipblasLtMatmulPreferenceSetAttributeFn = unsafe extern "C" fn(
    HipblasLtMatmulPreference, HipblasLtAttribute, *const c_void, usize,
) -> HipblasStatus;
/// `hipblasLtGetVersion(handle, int*)`.
pub type HipblasLtGetVersionFn = unsafe extern "C" fn(HipblasLtHandle, *mut i32) -> HipblasStatus;
/// `HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES` (uint64_t).
pub const HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: i32 = 1;
/// `hipblaslt_ext::GemmType::HIPBLASLT_GEMM`, the plain GEMM `getAllAlgos` lists for (not
/// named `HIPBLAS*`: the header has no such constant; tests/conformance checks the value).
pub const EXT_GEMM_TYPE_GEMM: i32 = 1;

#[rustfmt::skip]
pub type HipblasLtMatmulAlgoGetHeuristicFn = unsafe extern "C" fn(
    HipblasLtHandle, HipblasLtMatmulDesc,
    HipblasLtMatrixLayout, HipblasLtMatrixLayout, HipblasLtMatrixLayout, HipblasLtMatrixLayout,
    HipblasLtMatmulPreference, i32, *mut HipblasLtMatmulHeuristicResult, *mut i32,
) -> HipblasStatus;

/// The hipBLASLt exception guard (`preload/cxx/hipblaslt_guard.cpp`): tunedblas's own C
/// functions around `hipblaslt_ext`, each taking the `hipblaslt_ext` function to call
/// first, used by the interposer and the tuner; tests/conformance checks these types
/// against that file. What a C++ exception thrown inside becomes:
pub const GUARD_THREW: i32 = -1000;
/// `tunedblas_guard_algo_from_index(f, handle, index, algo*)`: -1 when the build has none.
pub type GuardAlgoFromIndexFn =
    unsafe extern "C" fn(*mut c_void, *mut c_void, i32, *mut HipblasLtMatmulAlgo) -> i32;
/// `tunedblas_guard_index_of(f, algo*, index*)`.
pub type GuardIndexOfFn =
    unsafe extern "C" fn(*mut c_void, *mut HipblasLtMatmulAlgo, *mut i32) -> i32;
/// `tunedblas_guard_is_supported(f, handle, desc, alpha, A, B, beta, C, D, algo*, workspace*)`.
#[rustfmt::skip]
pub type GuardIsSupportedFn = unsafe extern "C" fn(
    *mut c_void, *mut c_void, *mut c_void,
    *const c_void, *mut c_void, *mut c_void,
    *const c_void, *mut c_void, *mut c_void,
    *mut HipblasLtMatmulAlgo, *mut usize,
) -> i32;
/// `tunedblas_guard_all_algos(f, handle, gemm_type, opA, opB, typeA, typeB, typeC, typeD,
/// compute, results*, capacity, total*)`.
#[rustfmt::skip]
pub type GuardAllAlgosFn = unsafe extern "C" fn(
    *mut c_void, *mut c_void,
    i32,
    i32, i32,
    i32, i32, i32, i32, i32,
    *mut HipblasLtMatmulHeuristicResult, usize, *mut usize,
) -> i32;

/// The C++ entry points of `hipblaslt_ext` PyTorch TunableOp uses for `Gemm_Hipblaslt_<index>`
/// rows, by their mangled names (libstdc++ `std::vector`; what `dlsym` needs):
/// `getAllAlgos(handle, GemmType, opA, opB, typeA, typeB, typeC, typeD, computeType,
/// std::vector<hipblasLtMatmulHeuristicResult_t>&)`.
pub const HIPBLASLT_EXT_GET_ALL_ALGOS: &str = "_ZN13hipblaslt_ext11getAllAlgosEPvNS_8GemmTypeE18hipblasOperation_tS2_11hipDataTypeS3_S3_S3_20hipblasComputeType_tRSt6vectorI33_hipblasLtMatmulHeuristicResult_tSaIS6_EE";
/// `int getIndexFromAlgo(hipblasLtMatmulAlgo_t&)`.
pub const HIPBLASLT_EXT_GET_INDEX_FROM_ALGO: &str =
    "_ZN13hipblaslt_ext16getIndexFromAlgoER22_hipblasLtMatmulAlgo_t";
/// `getAlgosFromIndex(handle, std::vector<int>&, std::vector<hipblasLtMatmulHeuristicResult_t>&)`.
pub const HIPBLASLT_EXT_GET_ALGOS_FROM_INDEX: &str = "_ZN13hipblaslt_ext17getAlgosFromIndexEPvRSt6vectorIiSaIiEERS1_I33_hipblasLtMatmulHeuristicResult_tSaIS5_EE";
/// `matmulIsAlgoSupported(handle, matmulDesc, alpha, Adesc, Bdesc, beta, Cdesc, Ddesc,
/// hipblasLtMatmulAlgo_t&, size_t&)`.
pub const HIPBLASLT_EXT_MATMUL_IS_ALGO_SUPPORTED: &str = "_ZN13hipblaslt_ext21matmulIsAlgoSupportedEPvP27hipblasLtMatmulDescOpaque_tPKvP29hipblasLtMatrixLayoutOpaque_tS6_S4_S6_S6_R22_hipblasLtMatmulAlgo_tRm";
