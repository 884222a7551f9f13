//! The C exports, emitted by [`export_rocblas!`](crate::export_rocblas) in each cdylib crate
//! (`refblas/v4`, `refblas/v5`) so that each build is bound to its flavour at compile time.
//!
//! The `extern "C"` functions are thin shims: they catch panics (a panic unwinding into C
//! aborts the host) and call the plain Rust functions below, never another export. That
//! matters under an LD_PRELOAD interposer exporting the same names: a call through a
//! symbol would land in the interposer.

use crate::flavour::Flavour;
use crate::gemm::{self, GemmCall, Layout};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tunedblas_core::abi::{
    Handle, HipError, Operation, Status, DT_F16_R, DT_F32_R, FLAG_NONE, STATUS_INTERNAL_ERROR,
};

/// Runs a rocBLAS entry point; a panic becomes `rocblas_status_internal_error`.
pub fn guard<F: FnOnce() -> Status>(f: F) -> Status {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(STATUS_INTERNAL_ERROR)
}

/// `REFBLAS_CANCEL_POINT=1` (read once): each GEMM entry point begins with
/// `pthread_testcancel`, a cancellation point as real rocBLAS has inside its device waits.
/// The GEMM exports are "C-unwind" and this runs before anything that could need dropping,
/// so a thread cancelled here unwinds back to its caller as it would through C++ rocBLAS.
pub fn cancel_point() {
    static ON: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    let mut on = ON.load(std::sync::atomic::Ordering::Relaxed);
    if on == 0 {
        on = if std::env::var_os("REFBLAS_CANCEL_POINT").is_some_and(|v| v == "1") {
            2
        } else {
            1
        };
        ON.store(on, std::sync::atomic::Ordering::Relaxed);
    }
    if on == 2 {
        extern "C-unwind" {
            fn pthread_testcancel();
        }
        // SAFETY: no preconditions; it unwinds (forced) only if this thread was cancelled.
        unsafe { pthread_testcancel() };
    }
}

/// Runs a HIP entry point; a panic becomes `hipErrorUnknown`.
pub fn guard_hip<F: FnOnce() -> HipError>(f: F) -> HipError {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(crate::hip::HIP_ERROR_UNKNOWN)
}

/// `rocblas_status_to_string`, guarded (a panic gives the internal-error name).
pub fn status_to_string(s: Status) -> *const std::ffi::c_char {
    catch_unwind(|| crate::info::status_to_string(s))
        .unwrap_or(c"rocblas_status_internal_error")
        .as_ptr()
}

/// `rocblas_gemm_ex` and its batched, strided and `_64` twins, once their shim has gathered
/// the arguments (sizes widened to 64 bits) into `call`: a cancellation point, then the GEMM
/// under [`guard`]. `solution_index` and `flags` are the C calls' last two arguments.
///
/// # Safety
/// The pointers in `call` must be valid as rocBLAS documents for the call.
pub unsafe fn gemm_ex(
    flavour: Flavour,
    handle: Handle,
    call: GemmCall,
    solution_index: i32,
    flags: u32,
) -> Status {
    cancel_point();
    let call = GemmCall {
        solution_index,
        flags,
        ..call
    };
    guard(|| gemm::gemm(flavour, handle, &call))
}

/// The get_solutions twin of [`gemm_ex`]: no solution index; `list` and `size` come last.
///
/// # Safety
/// As [`gemm::get_solutions`].
pub unsafe fn gemm_ex_get_solutions(
    flavour: Flavour,
    handle: Handle,
    call: GemmCall,
    flags: u32,
    list: *mut i32,
    size: *mut i32,
) -> Status {
    let call = GemmCall { flags, ..call };
    guard(|| gemm::get_solutions(flavour, handle, &call, list, size))
}

/// `rocblas_hgemm` / `rocblas_sgemm` (and strided-batched): gemm_ex with one type throughout
/// (f16 with f16 compute, or f32), C updated in place, the heuristic's solution.
///
/// # Safety
/// As [`gemm_ex`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn typed_gemm(
    flavour: Flavour,
    func: &'static str,
    half: bool,
    handle: Handle,
    trans_a: Operation,
    trans_b: Operation,
    m: i64,
    n: i64,
    k: i64,
    alpha: *const c_void,
    a: *const c_void,
    lda: i64,
    b: *const c_void,
    ldb: i64,
    beta: *const c_void,
    c: *mut c_void,
    ldc: i64,
    batch: (i64, Layout),
) -> Status {
    let t = if half { DT_F16_R } else { DT_F32_R };
    let call = GemmCall {
        batch_count: batch.0,
        layout: batch.1,
        ..GemmCall::single(
            func,
            [trans_a, trans_b],
            [m, n, k],
            [alpha, beta],
            [a, b, c],
            c,
            [lda, ldb, ldc, ldc],
            (t, t),
        )
    };
    gemm_ex(flavour, handle, call, 0, FLAG_NONE)
}

/// Strided layout with the four strides (the typed calls pass C's stride for D too).
pub fn strided(stride_a: i64, stride_b: i64, stride_c: i64, stride_d: i64) -> Layout {
    Layout::Strided {
        stride_a,
        stride_b,
        stride_c,
        stride_d,
    }
}

/// Emits the complete C ABI of librocblas (GEMM subset + HIP subset) for one flavour.
/// Invoke once, at the root of a cdylib crate: `refblas::export_rocblas!(refblas::Flavour::V4);`
///
/// The exports live in a private module (so that its `use`s keep the tables short); a
/// `#[no_mangle]` function is exported from the shared object wherever it is declared.
#[macro_export]
macro_rules! export_rocblas {
    ($flavour:expr) => {
        /// The flavour this build speaks.
        const REFBLAS_FLAVOUR: $crate::Flavour = $flavour;

        mod refblas_exports {
            use super::REFBLAS_FLAVOUR;
            use ::std::ffi::{c_char, c_void};
            use $crate::abi::*;
            use $crate::exports::{guard, guard_hip};
            use $crate::gemm::Layout;
            use $crate::{graph, handle, hip, info};

            $crate::__refblas_misc_exports!();
            $crate::__refblas_gemm_exports!(
                i32,
                rocblas_gemm_ex,
                rocblas_gemm_batched_ex,
                rocblas_gemm_strided_batched_ex,
                rocblas_hgemm,
                rocblas_sgemm,
                rocblas_hgemm_strided_batched,
                rocblas_sgemm_strided_batched
            );
            $crate::__refblas_gemm_exports!(
                i64,
                rocblas_gemm_ex_64,
                rocblas_gemm_batched_ex_64,
                rocblas_gemm_strided_batched_ex_64,
                rocblas_hgemm_64,
                rocblas_sgemm_64,
                rocblas_hgemm_strided_batched_64,
                rocblas_sgemm_strided_batched_64
            );
            $crate::__refblas_query_exports!();
            $crate::__refblas_hip_exports!();
        }
    };
}

/// Shims that only forward their arguments, in order, to a plain Rust function under a
/// guard: `name(args) -> Ret = guard(callee) as CheckFn;`. `CheckFn` is the signature in
/// `tunedblas_core::abi` that the rest of the project calls the export through.
#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_forward {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $guard:ident($f:expr) as $check:ty;)*) => {
        $(
            /// # Safety
            /// As the library it stands in for documents.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                $guard(|| ($f)($($arg),*))
            }
            const _: $check = $name;
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_misc_exports {
    () => {
        $crate::__refblas_forward! {
            rocblas_create_handle(h: *mut Handle) -> Status = guard(handle::create) as CreateHandleFn;
            rocblas_destroy_handle(h: Handle) -> Status = guard(handle::destroy) as DestroyHandleFn;
            rocblas_set_stream(h: Handle, s: Stream) -> Status
                = guard(handle::set_stream) as SetStreamFn;
            rocblas_get_stream(h: Handle, s: *mut Stream) -> Status
                = guard(handle::get_stream) as GetStreamFn;
            rocblas_set_pointer_mode(h: Handle, mode: i32) -> Status
                = guard(handle::set_pointer_mode) as SetPointerModeFn;
            rocblas_get_pointer_mode(h: Handle, mode: *mut i32) -> Status
                = guard(handle::get_pointer_mode) as GetPointerModeFn;
            rocblas_get_version_string(buf: *mut c_char, len: usize) -> Status
                = guard(|b, l| info::get_version_string(REFBLAS_FLAVOUR, b, l))
                as GetVersionStringFn;
            rocblas_get_version_string_size(len: *mut usize) -> Status
                = guard(|l| info::get_version_string_size(REFBLAS_FLAVOUR, l))
                as GetVersionStringSizeFn;
        }

        #[no_mangle]
        pub extern "C" fn rocblas_status_to_string(status: Status) -> *const c_char {
            $crate::exports::status_to_string(status)
        }
        const _: StatusToStringFn = rocblas_status_to_string;
    };
}

/// One shim for the `_ex` calls and their get_solutions twins. Sizes arrive as `$I` (i32, or
/// i64 for the `_64` twins); the strided calls add a stride after each matrix's ld, the
/// batched ones a count after D; `batch` is the `(count, Layout)` the call describes;
/// `$entry` (`gemm_ex` or `gemm_ex_get_solutions`) takes the call and the last arguments.
#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_ex_shim {
    (
        extern $abi:literal fn $name:ident($I:ty) $(as $check:ty)?,
        strides($($sa:ident, $sb:ident, $sc:ident, $sd:ident)?),
        count($($count:ident)?),
        batch = $batch:expr,
        $entry:ident($($last:ident: $last_ty:ty),*)
    ) => {
        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern $abi fn $name(
            handle: Handle, trans_a: Operation, trans_b: Operation, m: $I, n: $I, k: $I,
            alpha: *const c_void,
            a: *const c_void, a_type: Datatype, lda: $I, $($sa: i64,)?
            b: *const c_void, b_type: Datatype, ldb: $I, $($sb: i64,)?
            beta: *const c_void,
            c: *const c_void, c_type: Datatype, ldc: $I, $($sc: i64,)?
            d: *mut c_void, d_type: Datatype, ldd: $I, $($sd: i64,)?
            $($count: $I,)?
            compute_type: Datatype, algo: GemmAlgo, $($last: $last_ty),*
        ) -> Status {
            let (batch_count, layout): (i64, Layout) = $batch;
            let call = $crate::GemmCall {
                func: stringify!($name), trans_a, trans_b, m: m as i64, n: n as i64, k: k as i64,
                alpha, a, a_type, lda: lda as i64, b, b_type, ldb: ldb as i64, beta,
                c, c_type, ldc: ldc as i64, d, d_type, ldd: ldd as i64, batch_count, layout,
                compute_type, algo, solution_index: 0, flags: 0,
            };
            $crate::exports::$entry(REFBLAS_FLAVOUR, handle, call, $($last),*)
        }
        $(const _: $check = $name;)?
    };
}

/// One shim for `rocblas_hgemm` / `rocblas_sgemm` and their strided-batched twins: A, B and
/// C without types (`half` says which), each with a stride when strided, then the count.
#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_typed_shim {
    (
        fn $name:ident($I:ty) as $check:ty, half = $half:expr,
        strides($($sa:ident, $sb:ident, $sc:ident)?),
        count($($count:ident)?),
        batch = $batch:expr
    ) => {
        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C-unwind" fn $name(
            handle: Handle, trans_a: Operation, trans_b: Operation, m: $I, n: $I, k: $I,
            alpha: *const c_void,
            a: *const c_void, lda: $I, $($sa: i64,)?
            b: *const c_void, ldb: $I, $($sb: i64,)?
            beta: *const c_void,
            c: *mut c_void, ldc: $I, $($sc: i64,)?
            $($count: $I,)?
        ) -> Status {
            let (m, n, k) = (m as i64, n as i64, k as i64);
            let (lda, ldb, ldc) = (lda as i64, ldb as i64, ldc as i64);
            $crate::exports::typed_gemm(
                REFBLAS_FLAVOUR, stringify!($name), $half, handle, trans_a, trans_b, m, n, k,
                alpha, a, lda, b, ldb, beta, c, ldc, $batch,
            )
        }
        const _: $check = $name;
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_gemm_exports {
    ($I:ty, $gemm_ex:ident, $batched_ex:ident, $strided_ex:ident, $hgemm:ident, $sgemm:ident,
     $hgemm_sb:ident, $sgemm_sb:ident) => {
        $crate::__refblas_ex_shim!(
            extern "C-unwind" fn $gemm_ex($I) as GemmExFn<$I>, strides(), count(),
            batch = (1, Layout::SINGLE), gemm_ex(solution_index: i32, flags: u32)
        );
        $crate::__refblas_ex_shim!(
            extern "C-unwind" fn $batched_ex($I) as GemmBatchedExFn<$I>, strides(),
            count(batch_count), batch = (batch_count as i64, Layout::PointerArray),
            gemm_ex(solution_index: i32, flags: u32)
        );
        $crate::__refblas_ex_shim!(
            extern "C-unwind" fn $strided_ex($I) as GemmStridedBatchedExFn<$I>,
            strides(sa, sb, sc, sd), count(batch_count),
            batch = (batch_count as i64, $crate::exports::strided(sa, sb, sc, sd)),
            gemm_ex(solution_index: i32, flags: u32)
        );
        $crate::__refblas_typed_exports!($I, $hgemm, $hgemm_sb, true);
        $crate::__refblas_typed_exports!($I, $sgemm, $sgemm_sb, false);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_typed_exports {
    ($I:ty, $plain:ident, $strided:ident, $half:expr) => {
        $crate::__refblas_typed_shim!(
            fn $plain($I) as TypedGemmFn<$I>, half = $half, strides(), count(),
            batch = (1, Layout::SINGLE)
        );
        // The typed strided calls have no D: C's stride serves as D's.
        $crate::__refblas_typed_shim!(
            fn $strided($I) as TypedGemmStridedBatchedFn<$I>, half = $half,
            strides(sa, sb, sc), count(batch_count),
            batch = (batch_count as i64, $crate::exports::strided(sa, sb, sc, sc))
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_query_exports {
    () => {
        $crate::__refblas_ex_shim!(
            extern "C" fn rocblas_gemm_ex_get_solutions(i32) as GemmExGetSolutionsFn,
            strides(), count(), batch = (1, Layout::SINGLE),
            gemm_ex_get_solutions(flags: u32, list: *mut i32, size: *mut i32)
        );
        $crate::__refblas_ex_shim!(
            extern "C" fn rocblas_gemm_batched_ex_get_solutions(i32), strides(),
            count(batch_count), batch = (batch_count as i64, Layout::PointerArray),
            gemm_ex_get_solutions(flags: u32, list: *mut i32, size: *mut i32)
        );
        $crate::__refblas_ex_shim!(
            extern "C" fn rocblas_gemm_strided_batched_ex_get_solutions(i32)
                as GemmStridedBatchedExGetSolutionsFn,
            strides(sa, sb, sc, sd), count(batch_count),
            batch = (batch_count as i64, $crate::exports::strided(sa, sb, sc, sd)),
            gemm_ex_get_solutions(flags: u32, list: *mut i32, size: *mut i32)
        );

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn rocblas_gemm_ex_get_solutions_by_type(
            handle: Handle,
            input_type: Datatype,
            output_type: Datatype,
            compute_type: Datatype,
            flags: u32,
            list: *mut i32,
            size: *mut i32,
        ) -> Status {
            guard(|| {
                $crate::gemm::get_solutions_by_type(
                    REFBLAS_FLAVOUR,
                    handle,
                    input_type,
                    output_type,
                    compute_type,
                    flags,
                    list,
                    size,
                )
            })
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_hip_exports {
    () => {
        $crate::__refblas_forward! {
            hipGetDeviceCount(n: *mut i32) -> HipError = guard_hip(hip::get_device_count)
                as HipGetDeviceCountFn;
            hipSetDevice(dev: i32) -> HipError = guard_hip(hip::set_device) as HipSetDeviceFn;
            hipGetDevice(dev: *mut i32) -> HipError = guard_hip(hip::get_device) as HipGetDeviceFn;
            hipMalloc(p: *mut *mut c_void, size: usize) -> HipError = guard_hip(hip::malloc)
                as HipMallocFn;
            hipFree(p: *mut c_void) -> HipError = guard_hip(hip::free) as HipFreeFn;
            hipMemcpy(dst: *mut c_void, src: *const c_void, size: usize, kind: i32) -> HipError
                = guard_hip(hip::memcpy) as HipMemcpyFn;
            hipDeviceSynchronize() -> HipError = guard_hip(hip::device_synchronize)
                as HipDeviceSynchronizeFn;
        }
        $crate::__refblas_forward! {
            hipEventCreate(ev: *mut HipEvent) -> HipError = guard_hip(hip::event_create)
                as HipEventCreateFn;
            hipEventRecord(ev: HipEvent, s: Stream) -> HipError = guard_hip(hip::event_record)
                as HipEventRecordFn;
            hipEventSynchronize(ev: HipEvent) -> HipError = guard_hip(hip::event_synchronize)
                as HipEventSynchronizeFn;
            hipEventElapsedTime(ms: *mut f32, start: HipEvent, stop: HipEvent) -> HipError
                = guard_hip(hip::event_elapsed_time) as HipEventElapsedTimeFn;
            hipEventDestroy(ev: HipEvent) -> HipError = guard_hip(hip::event_destroy)
                as HipEventDestroyFn;
        }
        $crate::__refblas_forward! {
            hipStreamCreate(s: *mut Stream) -> HipError = guard_hip(graph::stream_create)
                as HipStreamCreateFn;
            hipStreamDestroy(s: Stream) -> HipError = guard_hip(graph::stream_destroy)
                as HipStreamDestroyFn;
            hipStreamSynchronize(s: Stream) -> HipError = guard_hip(graph::stream_synchronize)
                as HipStreamSynchronizeFn;
            hipStreamBeginCapture(s: Stream, mode: i32) -> HipError
                = guard_hip(graph::begin_capture) as HipStreamBeginCaptureFn;
            hipStreamEndCapture(s: Stream, g: *mut *mut c_void) -> HipError
                = guard_hip(graph::end_capture) as HipStreamEndCaptureFn;
        }
        $crate::__refblas_forward! {
            hipGraphInstantiateWithFlags(exec: *mut *mut c_void, g: *mut c_void, flags: u64)
                -> HipError = guard_hip(graph::instantiate) as HipGraphInstantiateWithFlagsFn;
            hipGraphLaunch(exec: *mut c_void, s: Stream) -> HipError = guard_hip(graph::launch)
                as HipGraphLaunchFn;
            hipGraphExecDestroy(exec: *mut c_void) -> HipError = guard_hip(graph::destroy)
                as HipGraphDestroyFn;
            hipGraphDestroy(g: *mut c_void) -> HipError = guard_hip(graph::destroy)
                as HipGraphDestroyFn;
        }
    };
}
