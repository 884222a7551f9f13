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
    Datatype, GemmAlgo, Handle, HipError, Operation, Status, ALGO_STANDARD, DT_F16_R, DT_F32_R,
    FLAG_NONE, STATUS_INTERNAL_ERROR,
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

/// `rocblas_gemm_ex` and friends, widened to 64-bit sizes. `batch` is `(count, layout)`.
///
/// # Safety
/// The pointers must be valid as rocBLAS documents for the call.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_ex(
    flavour: Flavour,
    func: &'static str,
    handle: Handle,
    trans_a: Operation,
    trans_b: Operation,
    m: i64,
    n: i64,
    k: i64,
    alpha: *const c_void,
    a: *const c_void,
    a_type: Datatype,
    lda: i64,
    b: *const c_void,
    b_type: Datatype,
    ldb: i64,
    beta: *const c_void,
    c: *const c_void,
    c_type: Datatype,
    ldc: i64,
    d: *mut c_void,
    d_type: Datatype,
    ldd: i64,
    batch: (i64, Layout),
    compute_type: Datatype,
    algo: GemmAlgo,
    solution_index: i32,
    flags: u32,
) -> Status {
    let call = GemmCall {
        func,
        trans_a,
        trans_b,
        m,
        n,
        k,
        alpha,
        a,
        a_type,
        lda,
        b,
        b_type,
        ldb,
        beta,
        c,
        c_type,
        ldc,
        d,
        d_type,
        ldd,
        batch_count: batch.0,
        layout: batch.1,
        compute_type,
        algo,
        solution_index,
        flags,
    };
    gemm::gemm(flavour, handle, &call)
}

/// The get_solutions twin of [`gemm_ex`] (no solution index).
///
/// # Safety
/// As [`gemm::get_solutions`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_ex_get_solutions(
    flavour: Flavour,
    func: &'static str,
    handle: Handle,
    trans_a: Operation,
    trans_b: Operation,
    m: i64,
    n: i64,
    k: i64,
    alpha: *const c_void,
    a: *const c_void,
    a_type: Datatype,
    lda: i64,
    b: *const c_void,
    b_type: Datatype,
    ldb: i64,
    beta: *const c_void,
    c: *const c_void,
    c_type: Datatype,
    ldc: i64,
    d: *mut c_void,
    d_type: Datatype,
    ldd: i64,
    batch: (i64, Layout),
    compute_type: Datatype,
    algo: GemmAlgo,
    flags: u32,
    list: *mut i32,
    size: *mut i32,
) -> Status {
    let call = GemmCall {
        func,
        trans_a,
        trans_b,
        m,
        n,
        k,
        alpha,
        a,
        a_type,
        lda,
        b,
        b_type,
        ldb,
        beta,
        c,
        c_type,
        ldc,
        d,
        d_type,
        ldd,
        batch_count: batch.0,
        layout: batch.1,
        compute_type,
        algo,
        solution_index: 0,
        flags,
    };
    gemm::get_solutions(flavour, handle, &call, list, size)
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
    gemm_ex(
        flavour,
        func,
        handle,
        trans_a,
        trans_b,
        m,
        n,
        k,
        alpha,
        a,
        t,
        lda,
        b,
        t,
        ldb,
        beta,
        c,
        t,
        ldc,
        c,
        t,
        ldc,
        batch,
        t,
        ALGO_STANDARD,
        0,
        FLAG_NONE,
    )
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
#[macro_export]
macro_rules! export_rocblas {
    ($flavour:expr) => {
        /// The flavour this build speaks.
        const REFBLAS_FLAVOUR: $crate::Flavour = $flavour;

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
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_misc_exports {
    () => {
        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn rocblas_create_handle(
            handle: *mut $crate::abi::Handle,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| $crate::handle::create(handle))
        }

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn rocblas_destroy_handle(
            handle: $crate::abi::Handle,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| $crate::handle::destroy(handle))
        }

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn rocblas_set_stream(
            handle: $crate::abi::Handle,
            stream: $crate::abi::Stream,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| $crate::handle::set_stream(handle, stream))
        }

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn rocblas_get_stream(
            handle: $crate::abi::Handle,
            stream: *mut $crate::abi::Stream,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| $crate::handle::get_stream(handle, stream))
        }

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn rocblas_set_pointer_mode(
            handle: $crate::abi::Handle,
            mode: i32,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| $crate::handle::set_pointer_mode(handle, mode))
        }

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn rocblas_get_pointer_mode(
            handle: $crate::abi::Handle,
            mode: *mut i32,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| $crate::handle::get_pointer_mode(handle, mode))
        }

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn rocblas_get_version_string(
            buf: *mut ::std::ffi::c_char,
            len: usize,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| $crate::info::get_version_string(REFBLAS_FLAVOUR, buf, len))
        }

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn rocblas_get_version_string_size(
            len: *mut usize,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| $crate::info::get_version_string_size(REFBLAS_FLAVOUR, len))
        }

        #[no_mangle]
        pub extern "C" fn rocblas_status_to_string(
            status: $crate::abi::Status,
        ) -> *const ::std::ffi::c_char {
            $crate::exports::status_to_string(status)
        }

        // The signatures must be the ones the rest of the project calls through.
        const _: $crate::abi::CreateHandleFn = rocblas_create_handle;
        const _: $crate::abi::DestroyHandleFn = rocblas_destroy_handle;
        const _: $crate::abi::SetStreamFn = rocblas_set_stream;
        const _: $crate::abi::GetStreamFn = rocblas_get_stream;
        const _: $crate::abi::SetPointerModeFn = rocblas_set_pointer_mode;
        const _: $crate::abi::GetPointerModeFn = rocblas_get_pointer_mode;
        const _: $crate::abi::GetVersionStringFn = rocblas_get_version_string;
        const _: $crate::abi::GetVersionStringSizeFn = rocblas_get_version_string_size;
        const _: $crate::abi::StatusToStringFn = rocblas_status_to_string;
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_gemm_exports {
    ($I:ty, $gemm_ex:ident, $batched_ex:ident, $strided_ex:ident, $hgemm:ident, $sgemm:ident,
     $hgemm_sb:ident, $sgemm_sb:ident) => {
        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C-unwind" fn $gemm_ex(
            handle: $crate::abi::Handle,
            trans_a: $crate::abi::Operation,
            trans_b: $crate::abi::Operation,
            m: $I,
            n: $I,
            k: $I,
            alpha: *const ::std::ffi::c_void,
            a: *const ::std::ffi::c_void,
            a_type: $crate::abi::Datatype,
            lda: $I,
            b: *const ::std::ffi::c_void,
            b_type: $crate::abi::Datatype,
            ldb: $I,
            beta: *const ::std::ffi::c_void,
            c: *const ::std::ffi::c_void,
            c_type: $crate::abi::Datatype,
            ldc: $I,
            d: *mut ::std::ffi::c_void,
            d_type: $crate::abi::Datatype,
            ldd: $I,
            compute_type: $crate::abi::Datatype,
            algo: $crate::abi::GemmAlgo,
            solution_index: i32,
            flags: u32,
        ) -> $crate::abi::Status {
            $crate::exports::cancel_point();
            $crate::exports::guard(|| {
                $crate::exports::gemm_ex(
                    REFBLAS_FLAVOUR,
                    stringify!($gemm_ex),
                    handle,
                    trans_a,
                    trans_b,
                    m as i64,
                    n as i64,
                    k as i64,
                    alpha,
                    a,
                    a_type,
                    lda as i64,
                    b,
                    b_type,
                    ldb as i64,
                    beta,
                    c,
                    c_type,
                    ldc as i64,
                    d,
                    d_type,
                    ldd as i64,
                    (1, $crate::gemm::Layout::SINGLE),
                    compute_type,
                    algo,
                    solution_index,
                    flags,
                )
            })
        }
        const _: $crate::abi::GemmExFn<$I> = $gemm_ex;

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C-unwind" fn $batched_ex(
            handle: $crate::abi::Handle,
            trans_a: $crate::abi::Operation,
            trans_b: $crate::abi::Operation,
            m: $I,
            n: $I,
            k: $I,
            alpha: *const ::std::ffi::c_void,
            a: *const ::std::ffi::c_void,
            a_type: $crate::abi::Datatype,
            lda: $I,
            b: *const ::std::ffi::c_void,
            b_type: $crate::abi::Datatype,
            ldb: $I,
            beta: *const ::std::ffi::c_void,
            c: *const ::std::ffi::c_void,
            c_type: $crate::abi::Datatype,
            ldc: $I,
            d: *mut ::std::ffi::c_void,
            d_type: $crate::abi::Datatype,
            ldd: $I,
            batch_count: $I,
            compute_type: $crate::abi::Datatype,
            algo: $crate::abi::GemmAlgo,
            solution_index: i32,
            flags: u32,
        ) -> $crate::abi::Status {
            $crate::exports::cancel_point();
            $crate::exports::guard(|| {
                $crate::exports::gemm_ex(
                    REFBLAS_FLAVOUR,
                    stringify!($batched_ex),
                    handle,
                    trans_a,
                    trans_b,
                    m as i64,
                    n as i64,
                    k as i64,
                    alpha,
                    a,
                    a_type,
                    lda as i64,
                    b,
                    b_type,
                    ldb as i64,
                    beta,
                    c,
                    c_type,
                    ldc as i64,
                    d,
                    d_type,
                    ldd as i64,
                    (batch_count as i64, $crate::gemm::Layout::PointerArray),
                    compute_type,
                    algo,
                    solution_index,
                    flags,
                )
            })
        }
        const _: $crate::abi::GemmBatchedExFn<$I> = $batched_ex;

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C-unwind" fn $strided_ex(
            handle: $crate::abi::Handle,
            trans_a: $crate::abi::Operation,
            trans_b: $crate::abi::Operation,
            m: $I,
            n: $I,
            k: $I,
            alpha: *const ::std::ffi::c_void,
            a: *const ::std::ffi::c_void,
            a_type: $crate::abi::Datatype,
            lda: $I,
            stride_a: i64,
            b: *const ::std::ffi::c_void,
            b_type: $crate::abi::Datatype,
            ldb: $I,
            stride_b: i64,
            beta: *const ::std::ffi::c_void,
            c: *const ::std::ffi::c_void,
            c_type: $crate::abi::Datatype,
            ldc: $I,
            stride_c: i64,
            d: *mut ::std::ffi::c_void,
            d_type: $crate::abi::Datatype,
            ldd: $I,
            stride_d: i64,
            batch_count: $I,
            compute_type: $crate::abi::Datatype,
            algo: $crate::abi::GemmAlgo,
            solution_index: i32,
            flags: u32,
        ) -> $crate::abi::Status {
            $crate::exports::cancel_point();
            $crate::exports::guard(|| {
                $crate::exports::gemm_ex(
                    REFBLAS_FLAVOUR,
                    stringify!($strided_ex),
                    handle,
                    trans_a,
                    trans_b,
                    m as i64,
                    n as i64,
                    k as i64,
                    alpha,
                    a,
                    a_type,
                    lda as i64,
                    b,
                    b_type,
                    ldb as i64,
                    beta,
                    c,
                    c_type,
                    ldc as i64,
                    d,
                    d_type,
                    ldd as i64,
                    (
                        batch_count as i64,
                        $crate::exports::strided(stride_a, stride_b, stride_c, stride_d),
                    ),
                    compute_type,
                    algo,
                    solution_index,
                    flags,
                )
            })
        }
        const _: $crate::abi::GemmStridedBatchedExFn<$I> = $strided_ex;

        $crate::__refblas_typed_exports!($I, $hgemm, $hgemm_sb, true);
        $crate::__refblas_typed_exports!($I, $sgemm, $sgemm_sb, false);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_typed_exports {
    ($I:ty, $plain:ident, $strided:ident, $half:expr) => {
        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C-unwind" fn $plain(
            handle: $crate::abi::Handle,
            trans_a: $crate::abi::Operation,
            trans_b: $crate::abi::Operation,
            m: $I,
            n: $I,
            k: $I,
            alpha: *const ::std::ffi::c_void,
            a: *const ::std::ffi::c_void,
            lda: $I,
            b: *const ::std::ffi::c_void,
            ldb: $I,
            beta: *const ::std::ffi::c_void,
            c: *mut ::std::ffi::c_void,
            ldc: $I,
        ) -> $crate::abi::Status {
            $crate::exports::cancel_point();
            $crate::exports::guard(|| {
                $crate::exports::typed_gemm(
                    REFBLAS_FLAVOUR,
                    stringify!($plain),
                    $half,
                    handle,
                    trans_a,
                    trans_b,
                    m as i64,
                    n as i64,
                    k as i64,
                    alpha,
                    a,
                    lda as i64,
                    b,
                    ldb as i64,
                    beta,
                    c,
                    ldc as i64,
                    (1, $crate::gemm::Layout::SINGLE),
                )
            })
        }
        const _: $crate::abi::TypedGemmFn<$I> = $plain;

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C-unwind" fn $strided(
            handle: $crate::abi::Handle,
            trans_a: $crate::abi::Operation,
            trans_b: $crate::abi::Operation,
            m: $I,
            n: $I,
            k: $I,
            alpha: *const ::std::ffi::c_void,
            a: *const ::std::ffi::c_void,
            lda: $I,
            stride_a: i64,
            b: *const ::std::ffi::c_void,
            ldb: $I,
            stride_b: i64,
            beta: *const ::std::ffi::c_void,
            c: *mut ::std::ffi::c_void,
            ldc: $I,
            stride_c: i64,
            batch_count: $I,
        ) -> $crate::abi::Status {
            $crate::exports::cancel_point();
            $crate::exports::guard(|| {
                $crate::exports::typed_gemm(
                    REFBLAS_FLAVOUR,
                    stringify!($strided),
                    $half,
                    handle,
                    trans_a,
                    trans_b,
                    m as i64,
                    n as i64,
                    k as i64,
                    alpha,
                    a,
                    lda as i64,
                    b,
                    ldb as i64,
                    beta,
                    c,
                    ldc as i64,
                    (
                        batch_count as i64,
                        $crate::exports::strided(stride_a, stride_b, stride_c, stride_c),
                    ),
                )
            })
        }
        const _: $crate::abi::TypedGemmStridedBatchedFn<$I> = $strided;
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __refblas_query_exports {
    () => {
        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn rocblas_gemm_ex_get_solutions(
            handle: $crate::abi::Handle,
            trans_a: $crate::abi::Operation,
            trans_b: $crate::abi::Operation,
            m: i32,
            n: i32,
            k: i32,
            alpha: *const ::std::ffi::c_void,
            a: *const ::std::ffi::c_void,
            a_type: $crate::abi::Datatype,
            lda: i32,
            b: *const ::std::ffi::c_void,
            b_type: $crate::abi::Datatype,
            ldb: i32,
            beta: *const ::std::ffi::c_void,
            c: *const ::std::ffi::c_void,
            c_type: $crate::abi::Datatype,
            ldc: i32,
            d: *mut ::std::ffi::c_void,
            d_type: $crate::abi::Datatype,
            ldd: i32,
            compute_type: $crate::abi::Datatype,
            algo: $crate::abi::GemmAlgo,
            flags: u32,
            list: *mut i32,
            size: *mut i32,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| {
                $crate::exports::gemm_ex_get_solutions(
                    REFBLAS_FLAVOUR,
                    "rocblas_gemm_ex_get_solutions",
                    handle,
                    trans_a,
                    trans_b,
                    m as i64,
                    n as i64,
                    k as i64,
                    alpha,
                    a,
                    a_type,
                    lda as i64,
                    b,
                    b_type,
                    ldb as i64,
                    beta,
                    c,
                    c_type,
                    ldc as i64,
                    d,
                    d_type,
                    ldd as i64,
                    (1, $crate::gemm::Layout::SINGLE),
                    compute_type,
                    algo,
                    flags,
                    list,
                    size,
                )
            })
        }
        const _: $crate::abi::GemmExGetSolutionsFn = rocblas_gemm_ex_get_solutions;

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn rocblas_gemm_batched_ex_get_solutions(
            handle: $crate::abi::Handle,
            trans_a: $crate::abi::Operation,
            trans_b: $crate::abi::Operation,
            m: i32,
            n: i32,
            k: i32,
            alpha: *const ::std::ffi::c_void,
            a: *const ::std::ffi::c_void,
            a_type: $crate::abi::Datatype,
            lda: i32,
            b: *const ::std::ffi::c_void,
            b_type: $crate::abi::Datatype,
            ldb: i32,
            beta: *const ::std::ffi::c_void,
            c: *const ::std::ffi::c_void,
            c_type: $crate::abi::Datatype,
            ldc: i32,
            d: *mut ::std::ffi::c_void,
            d_type: $crate::abi::Datatype,
            ldd: i32,
            batch_count: i32,
            compute_type: $crate::abi::Datatype,
            algo: $crate::abi::GemmAlgo,
            flags: u32,
            list: *mut i32,
            size: *mut i32,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| {
                $crate::exports::gemm_ex_get_solutions(
                    REFBLAS_FLAVOUR,
                    "rocblas_gemm_batched_ex_get_solutions",
                    handle,
                    trans_a,
                    trans_b,
                    m as i64,
                    n as i64,
                    k as i64,
                    alpha,
                    a,
                    a_type,
                    lda as i64,
                    b,
                    b_type,
                    ldb as i64,
                    beta,
                    c,
                    c_type,
                    ldc as i64,
                    d,
                    d_type,
                    ldd as i64,
                    (batch_count as i64, $crate::gemm::Layout::PointerArray),
                    compute_type,
                    algo,
                    flags,
                    list,
                    size,
                )
            })
        }

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn rocblas_gemm_strided_batched_ex_get_solutions(
            handle: $crate::abi::Handle,
            trans_a: $crate::abi::Operation,
            trans_b: $crate::abi::Operation,
            m: i32,
            n: i32,
            k: i32,
            alpha: *const ::std::ffi::c_void,
            a: *const ::std::ffi::c_void,
            a_type: $crate::abi::Datatype,
            lda: i32,
            stride_a: i64,
            b: *const ::std::ffi::c_void,
            b_type: $crate::abi::Datatype,
            ldb: i32,
            stride_b: i64,
            beta: *const ::std::ffi::c_void,
            c: *const ::std::ffi::c_void,
            c_type: $crate::abi::Datatype,
            ldc: i32,
            stride_c: i64,
            d: *mut ::std::ffi::c_void,
            d_type: $crate::abi::Datatype,
            ldd: i32,
            stride_d: i64,
            batch_count: i32,
            compute_type: $crate::abi::Datatype,
            algo: $crate::abi::GemmAlgo,
            flags: u32,
            list: *mut i32,
            size: *mut i32,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| {
                $crate::exports::gemm_ex_get_solutions(
                    REFBLAS_FLAVOUR,
                    "rocblas_gemm_strided_batched_ex_get_solutions",
                    handle,
                    trans_a,
                    trans_b,
                    m as i64,
                    n as i64,
                    k as i64,
                    alpha,
                    a,
                    a_type,
                    lda as i64,
                    b,
                    b_type,
                    ldb as i64,
                    beta,
                    c,
                    c_type,
                    ldc as i64,
                    d,
                    d_type,
                    ldd as i64,
                    (
                        batch_count as i64,
                        $crate::exports::strided(stride_a, stride_b, stride_c, stride_d),
                    ),
                    compute_type,
                    algo,
                    flags,
                    list,
                    size,
                )
            })
        }
        const _: $crate::abi::GemmStridedBatchedExGetSolutionsFn =
            rocblas_gemm_strided_batched_ex_get_solutions;

        /// # Safety
        /// As rocBLAS documents.
        #[no_mangle]
        pub unsafe extern "C" fn rocblas_gemm_ex_get_solutions_by_type(
            handle: $crate::abi::Handle,
            input_type: $crate::abi::Datatype,
            output_type: $crate::abi::Datatype,
            compute_type: $crate::abi::Datatype,
            flags: u32,
            list: *mut i32,
            size: *mut i32,
        ) -> $crate::abi::Status {
            $crate::exports::guard(|| {
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
        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipGetDeviceCount(count: *mut i32) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::get_device_count(count))
        }

        #[no_mangle]
        pub extern "C" fn hipSetDevice(device: i32) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::set_device(device))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipGetDevice(device: *mut i32) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::get_device(device))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipMalloc(
            ptr: *mut *mut ::std::ffi::c_void,
            size: usize,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::malloc(ptr, size))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipFree(ptr: *mut ::std::ffi::c_void) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::free(ptr))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipMemcpy(
            dst: *mut ::std::ffi::c_void,
            src: *const ::std::ffi::c_void,
            size: usize,
            kind: i32,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::memcpy(dst, src, size, kind))
        }

        #[no_mangle]
        pub extern "C" fn hipDeviceSynchronize() -> $crate::abi::HipError {
            $crate::exports::guard_hip($crate::hip::device_synchronize)
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipEventCreate(
            event: *mut $crate::abi::HipEvent,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::event_create(event))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipEventRecord(
            event: $crate::abi::HipEvent,
            stream: $crate::abi::Stream,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::event_record(event, stream))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipEventSynchronize(
            event: $crate::abi::HipEvent,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::event_synchronize(event))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipEventElapsedTime(
            ms: *mut f32,
            start: $crate::abi::HipEvent,
            stop: $crate::abi::HipEvent,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::event_elapsed_time(ms, start, stop))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipEventDestroy(
            event: $crate::abi::HipEvent,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::hip::event_destroy(event))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipStreamCreate(
            stream: *mut $crate::abi::Stream,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::graph::stream_create(stream))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipStreamDestroy(
            stream: $crate::abi::Stream,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::graph::stream_destroy(stream))
        }

        #[no_mangle]
        pub extern "C" fn hipStreamSynchronize(
            stream: $crate::abi::Stream,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::graph::stream_synchronize(stream))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipStreamBeginCapture(
            stream: $crate::abi::Stream,
            mode: i32,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::graph::begin_capture(stream, mode))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipStreamEndCapture(
            stream: $crate::abi::Stream,
            graph: *mut *mut ::std::ffi::c_void,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::graph::end_capture(stream, graph))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipGraphInstantiateWithFlags(
            exec: *mut *mut ::std::ffi::c_void,
            graph: *mut ::std::ffi::c_void,
            flags: u64,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::graph::instantiate(exec, graph, flags))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipGraphLaunch(
            exec: *mut ::std::ffi::c_void,
            stream: $crate::abi::Stream,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::graph::launch(exec, stream))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipGraphExecDestroy(
            exec: *mut ::std::ffi::c_void,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::graph::destroy(exec))
        }

        /// # Safety
        /// As HIP documents.
        #[no_mangle]
        pub unsafe extern "C" fn hipGraphDestroy(
            graph: *mut ::std::ffi::c_void,
        ) -> $crate::abi::HipError {
            $crate::exports::guard_hip(|| $crate::graph::destroy(graph))
        }

        const _: $crate::abi::HipStreamCreateFn = hipStreamCreate;
        const _: $crate::abi::HipStreamDestroyFn = hipStreamDestroy;
        const _: $crate::abi::HipStreamSynchronizeFn = hipStreamSynchronize;
        const _: $crate::abi::HipStreamBeginCaptureFn = hipStreamBeginCapture;
        const _: $crate::abi::HipStreamEndCaptureFn = hipStreamEndCapture;
        const _: $crate::abi::HipGraphInstantiateWithFlagsFn = hipGraphInstantiateWithFlags;
        const _: $crate::abi::HipGraphLaunchFn = hipGraphLaunch;
        const _: $crate::abi::HipGraphDestroyFn = hipGraphExecDestroy;
        const _: $crate::abi::HipGraphDestroyFn = hipGraphDestroy;
        const _: $crate::abi::HipGetDeviceCountFn = hipGetDeviceCount;
        const _: $crate::abi::HipSetDeviceFn = hipSetDevice;
        const _: $crate::abi::HipGetDeviceFn = hipGetDevice;
        const _: $crate::abi::HipMallocFn = hipMalloc;
        const _: $crate::abi::HipFreeFn = hipFree;
        const _: $crate::abi::HipMemcpyFn = hipMemcpy;
        const _: $crate::abi::HipDeviceSynchronizeFn = hipDeviceSynchronize;
        const _: $crate::abi::HipEventCreateFn = hipEventCreate;
        const _: $crate::abi::HipEventRecordFn = hipEventRecord;
        const _: $crate::abi::HipEventSynchronizeFn = hipEventSynchronize;
        const _: $crate::abi::HipEventElapsedTimeFn = hipEventElapsedTime;
        const _: $crate::abi::HipEventDestroyFn = hipEventDestroy;
    };
}
