//! Every symbol `libtunedblas.so` exports, in one file.
//!
//! Each export interposes the whole process, so the list is short on purpose: the rocBLAS
//! GEMM entry points we serve, the Lt matmuls, handle, descriptor and layout calls and their
//! serving switches, `dlclose` (so a call site kept for an Lt descriptor call is looked up
//! again once a library may be gone), the exec family, and `_exit` (so `os._exit` and friends
//! still flush the miss counts). `tests/build_properties.rs` checks that nothing else is exported. Each function
//! only packs its arguments and hands them to its backend's `serve` (`rocblas/serve.rs`,
//! `cublaslt/serve.rs`), which makes the tuned call. Our own panics never unwind into C;
//! the GEMM entry points are "C-unwind" only so a thread cancelled inside the real library
//! unwinds back to its host through our frames (which hold nothing to drop around the real
//! call) instead of aborting the process.

use std::ffi::{c_int, c_void};

use tunedblas_core::abi::{self, *};
use tunedblas_core::cublaslt as lt;
use tunedblas_core::key::Types;
use tunedblas_core::rocblas::{ex_types, single_key_unchecked, Dims};

use crate::lt::callers::with_caller;
use crate::rocblas::near;
use crate::rocblas::real::{self as rocblas, HOOKS};
use crate::rocblas::serve::{self, ExArgs, TypedArgs};

macro_rules! ex_args {
    ($h:ident, $ta:ident, $tb:ident, $m:ident, $n:ident, $k:ident, $alpha:ident, $a:ident, $at:ident,
     $lda:ident, $b:ident, $bt:ident, $ldb:ident, $beta:ident, $c:ident, $ct:ident, $ldc:ident,
     $d:ident, $dt:ident, $ldd:ident, $ctype:ident, $algo:ident, $sol:ident, $flags:ident) => {
        ExArgs {
            handle: $h,
            trans_a: $ta,
            trans_b: $tb,
            m: $m,
            n: $n,
            k: $k,
            alpha: $alpha,
            a: $a,
            a_type: $at,
            lda: $lda,
            b: $b,
            b_type: $bt,
            ldb: $ldb,
            beta: $beta,
            c: $c,
            c_type: $ct,
            ldc: $ldc,
            d: $d,
            d_type: $dt,
            ldd: $ldd,
            compute: $ctype,
            algo: $algo,
            solution: $sol,
            flags: $flags,
        }
    };
}

/// Where a `gemm_ex`-family call goes: the real function itself for a caller that chose its
/// solution (counted as passed through), `$serve_it` for every other call, and another
/// rocBLAS build's own function, untouched, for a handle of that build. While the
/// pass-through gate is open (serving, one build: `serve::pass_gate`) that takes one load
/// and branch before the caller's choice is read; otherwise the handle is looked up and
/// the runtime asked, and the gate opened again when it can be.
macro_rules! route {
    ($h:ident, $algo:ident, $flags:ident, $hook:ident, $serve_it:ident) => {{
        let gate = serve::pass_gate();
        if gate == serve::GATE_OPEN {
            if !serve::caller_chose($algo, $flags) {
                $serve_it
            } else if let Some(f) = HOOKS.$hook() {
                serve::count_pass_through_open();
                f
            } else {
                $serve_it
            }
        } else if let Some(other) = rocblas::other_build($h) {
            // A handle of another rocBLAS build: its own function, untouched.
            match other.$hook() {
                Some(f) => {
                    serve::count_pass_through();
                    f
                }
                None => return STATUS_NOT_IMPLEMENTED,
            }
        } else {
            let target = if !serve::caller_chose($algo, $flags) {
                $serve_it
            } else if let Some(f) = HOOKS.$hook() {
                serve::count_pass_through();
                f
            } else {
                $serve_it
            };
            if gate == serve::GATE_SHUT {
                serve::open_pass_gate();
            }
            target
        }
    }};
}

/// A `gemm_ex`-family export and its `serve_it`, from one parameter list: a caller that
/// chose its solution goes straight to the real function, every other call to `serve_it`
/// (see `route!`). One call site in tail position, so the compiler jumps to either with the
/// caller's arguments where they are (nothing is copied). `route` names the parameters
/// `route!` reads (given from where the parameters are written, for macro hygiene).
macro_rules! routed_export {
    ($name:ident: $Fn:ty, $hook:ident, route($h:ident, $algo:ident, $flags:ident),
     ($($p:ident: $t:ty),* $(,)?) => $serve:block) => {
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name($($p: $t),*) -> Status {
            let target: $Fn = route!($h, $algo, $flags, $hook, serve_it);
            return target($($p),*);

            #[inline(never)]
            unsafe extern "C-unwind" fn serve_it($($p: $t),*) -> Status $serve
        }
    };
}

macro_rules! gemm_ex_export {
    ($name:ident, $hook:ident, $I:ty) => {
        routed_export! {
            $name: GemmExFn<$I>, $hook, route(h, algo, flags),
            (h: Handle, ta: Operation, tb: Operation, m: $I, n: $I, k: $I,
                alpha: *const c_void, a: *const c_void, at: Datatype, lda: $I,
                b: *const c_void, bt: Datatype, ldb: $I, beta: *const c_void,
                c: *const c_void, ct: Datatype, ldc: $I, d: *mut c_void, dt: Datatype, ldd: $I,
                ctype: Datatype, algo: GemmAlgo, sol: i32, flags: u32) => {
                let Some(f) = HOOKS.$hook() else {
                    return STATUS_NOT_IMPLEMENTED;
                };
                // (The export only sends chosen calls here when the real function was not
                // found yet; it may be now.)
                let chose = serve::caller_chose(algo, flags);
                // The key straight from the arguments, and both calls below pass the
                // caller's arguments themselves: no copy of the whole call is made (about 40
                // fewer instructions per call, docs/benchmarks/history.md).
                let key = move || {
                    let dims = Dims {
                        m: m.into(),
                        n: n.into(),
                        k: k.into(),
                        lda: lda.into(),
                        ldb: ldb.into(),
                        ldc: ldc.into(),
                        ldd: ldd.into(),
                    };
                    let types = ex_types(at, bt, ct, dt, ctype);
                    single_key_unchecked(ta, tb, types, dims, flags)
                };
                // Every call `make_call!` makes passes the caller's arguments themselves,
                // with the route's algo, solution and flags. A miss served from a
                // neighbouring token count is rare, so out of line, with the arguments
                // handed over by value and the key rebuilt there. (Handing this function's
                // `key` closure over made it keep the captured arguments on the stack on
                // every call: ~20 instructions on the served path, docs/benchmarks/history.md.)
                serve::make_call!(
                    serve::decide(key, chose, h),
                    route => {
                        let (algo, sol, flags) = route.apply(algo, sol, flags);
                        f(
                            h, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc,
                            d, dt, ldd, ctype, algo, sol, flags,
                        )
                    },
                    plan => {
                        let x = ex_args!(
                            h, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct,
                            ldc, d, dt, ldd, ctype, algo, sol, flags
                        );
                        near::serve_ex(plan, f, x)
                    }
                )
            }
        }
    };
}

macro_rules! gemm_batched_ex_export {
    ($name:ident, $hook:ident, $I:ty) => {
        routed_export! {
            $name: GemmBatchedExFn<$I>, $hook, route(h, algo, flags),
            (h: Handle, ta: Operation, tb: Operation, m: $I, n: $I, k: $I,
                alpha: *const c_void, a: *const c_void, at: Datatype, lda: $I,
                b: *const c_void, bt: Datatype, ldb: $I, beta: *const c_void,
                c: *const c_void, ct: Datatype, ldc: $I, d: *mut c_void, dt: Datatype, ldd: $I,
                batch: $I, ctype: Datatype, algo: GemmAlgo, sol: i32, flags: u32) => {
                let x = ex_args!(
                    h, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, d, dt,
                    ldd, ctype, algo, sol, flags
                );
                serve::gemm_batched_ex(HOOKS.$hook(), x, batch)
            }
        }
    };
}

macro_rules! gemm_strided_batched_ex_export {
    ($name:ident, $hook:ident, $I:ty) => {
        routed_export! {
            $name: GemmStridedBatchedExFn<$I>, $hook, route(h, algo, flags),
            (h: Handle, ta: Operation, tb: Operation, m: $I, n: $I, k: $I,
                alpha: *const c_void, a: *const c_void, at: Datatype, lda: $I, sa: i64,
                b: *const c_void, bt: Datatype, ldb: $I, sb: i64, beta: *const c_void,
                c: *const c_void, ct: Datatype, ldc: $I, sc: i64,
                d: *mut c_void, dt: Datatype, ldd: $I, sd: i64,
                batch: $I, ctype: Datatype, algo: GemmAlgo, sol: i32, flags: u32) => {
                let x = ex_args!(
                    h, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, d, dt,
                    ldd, ctype, algo, sol, flags
                );
                serve::gemm_strided_batched_ex(HOOKS.$hook(), x, [sa, sb, sc, sd], batch)
            }
        }
    };
}

macro_rules! typed_gemm_export {
    ($name:ident, $hook:ident, $I:ty, $types:expr) => {
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(
            h: Handle,
            ta: Operation,
            tb: Operation,
            m: $I,
            n: $I,
            k: $I,
            alpha: *const c_void,
            a: *const c_void,
            lda: $I,
            b: *const c_void,
            ldb: $I,
            beta: *const c_void,
            c: *mut c_void,
            ldc: $I,
        ) -> Status {
            if let Some(other) = rocblas::other_build(h) {
                let Some(f) = other.$hook() else {
                    return STATUS_NOT_IMPLEMENTED;
                };
                serve::count_pass_through();
                return f(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
            }
            let x = TypedArgs {
                handle: h,
                trans_a: ta,
                trans_b: tb,
                m,
                n,
                k,
                alpha,
                a,
                lda,
                b,
                ldb,
                beta,
                c,
                ldc,
            };
            serve::typed_gemm(HOOKS.$hook(), $types, x)
        }
    };
}

macro_rules! typed_gemm_strided_batched_export {
    ($name:ident, $hook:ident, $I:ty, $types:expr) => {
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(
            h: Handle,
            ta: Operation,
            tb: Operation,
            m: $I,
            n: $I,
            k: $I,
            alpha: *const c_void,
            a: *const c_void,
            lda: $I,
            sa: i64,
            b: *const c_void,
            ldb: $I,
            sb: i64,
            beta: *const c_void,
            c: *mut c_void,
            ldc: $I,
            sc: i64,
            batch: $I,
        ) -> Status {
            if let Some(other) = rocblas::other_build(h) {
                let Some(f) = other.$hook() else {
                    return STATUS_NOT_IMPLEMENTED;
                };
                serve::count_pass_through();
                return f(
                    h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch,
                );
            }
            let x = TypedArgs {
                handle: h,
                trans_a: ta,
                trans_b: tb,
                m,
                n,
                k,
                alpha,
                a,
                lda,
                b,
                ldb,
                beta,
                c,
                ldc,
            };
            serve::typed_gemm_strided_batched(HOOKS.$hook(), $types, x, [sa, sb, sc], batch)
        }
    };
}

gemm_ex_export!(rocblas_gemm_ex, gemm_ex, i32);
gemm_ex_export!(rocblas_gemm_ex_64, gemm_ex_64, i64);
gemm_batched_ex_export!(rocblas_gemm_batched_ex, gemm_batched_ex, i32);
gemm_batched_ex_export!(rocblas_gemm_batched_ex_64, gemm_batched_ex_64, i64);
gemm_strided_batched_ex_export!(
    rocblas_gemm_strided_batched_ex,
    gemm_strided_batched_ex,
    i32
);
gemm_strided_batched_ex_export!(
    rocblas_gemm_strided_batched_ex_64,
    gemm_strided_batched_ex_64,
    i64
);
typed_gemm_export!(rocblas_hgemm, hgemm, i32, Types::HGEMM);
typed_gemm_export!(rocblas_hgemm_64, hgemm_64, i64, Types::HGEMM);
typed_gemm_export!(rocblas_sgemm, sgemm, i32, Types::SGEMM);
typed_gemm_export!(rocblas_sgemm_64, sgemm_64, i64, Types::SGEMM);
typed_gemm_strided_batched_export!(
    rocblas_hgemm_strided_batched,
    hgemm_strided_batched,
    i32,
    Types::HGEMM
);
typed_gemm_strided_batched_export!(
    rocblas_hgemm_strided_batched_64,
    hgemm_strided_batched_64,
    i64,
    Types::HGEMM
);
typed_gemm_strided_batched_export!(
    rocblas_sgemm_strided_batched,
    sgemm_strided_batched,
    i32,
    Types::SGEMM
);
typed_gemm_strided_batched_export!(
    rocblas_sgemm_strided_batched_64,
    sgemm_strided_batched_64,
    i64,
    Types::SGEMM
);

/// `rocblas_create_handle`: made in the build the caller links (`libs.rs` says why). A
/// naked entry hands the caller's return address over, so we can tell who called.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn rocblas_create_handle(handle: *mut Handle) -> Status {
    // At entry the return address is at the top of the stack: pass it as the 2nd argument.
    std::arch::naked_asm!("mov rsi, [rsp]", "jmp {inner}", inner = sym create_handle_from)
}

#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn rocblas_create_handle(handle: *mut Handle) -> Status {
    // The link register holds the return address: pass it as the 2nd argument.
    std::arch::naked_asm!("mov x1, x30", "b {inner}", inner = sym create_handle_from)
}

extern "C" fn create_handle_from(handle: *mut Handle, ret: *const c_void) -> Status {
    std::panic::catch_unwind(|| rocblas::create_handle(handle, ret))
        .unwrap_or(STATUS_INTERNAL_ERROR)
}

/// `rocblas_destroy_handle`: in the build the handle came from.
#[no_mangle]
pub unsafe extern "C" fn rocblas_destroy_handle(handle: Handle) -> Status {
    std::panic::catch_unwind(|| rocblas::destroy_handle(handle)).unwrap_or(STATUS_INTERNAL_ERROR)
}

/// hipBLAS's `HIPBLAS_STATUS_INTERNAL_ERROR`, for a panic of ours.
const HIPBLAS_INTERNAL_ERROR: abi::HipblasStatus = 6;

/// One Lt library's handle calls (`Create`, `Destroy`) and descriptor and layout calls
/// (`MatmulDesc{Create,SetAttribute,Destroy}`, `MatrixLayout{Create,SetAttribute,Destroy}`).
/// A handle is made in the build the caller links and destroyed in the build it came from
/// (`libs.rs`), as rocBLAS's; `internal` is the library's status for a panic of ours. A
/// descriptor or layout export goes to the library its caller
/// links (`lt/callers.rs`: a trampoline passes the caller's return address on) and keeps
/// what the key reads as it is made and set (`lt/objects.rs`, through the library's
/// `Kinds`): the real create first, then its object kept; the real set, then what it set
/// kept if it succeeded; a destroy forgets the object first, then the real destroy.
/// Nothing kept fails a call: a panic of ours is caught and the call's own status returned.
macro_rules! lt_exports {
    (mod $m:ident; kinds: $kinds:ty, hooks: $hooks:path, builds: $builds:path,
     internal: $internal:expr;
     $handle_create:ident, $handle_destroy:ident,
     $desc_create:ident, $desc_set:ident, $desc_destroy:ident,
     $layout_create:ident, $layout_set:ident, $layout_destroy:ident) => {
        mod $m {
            use std::ffi::{c_void, CStr};
            use std::panic::catch_unwind;

            use tunedblas_core::cublaslt::{desc_word_edit, LayoutAttrs};

            use crate::lt::callers::Callers;
            use crate::lt::objects::{plain_desc, plain_layout, Kinds};

            type Out = *mut *mut c_void;
            type DescCreateFn = unsafe extern "C" fn(Out, i32, i32) -> i32;
            type LayoutCreateFn = unsafe extern "C" fn(Out, i32, u64, u64, i64) -> i32;
            type SetFn = unsafe extern "C" fn(*mut c_void, i32, *const c_void, usize) -> i32;
            type DestroyFn = unsafe extern "C" fn(*mut c_void) -> i32;

            /// Both libraries' NOT_INITIALIZED: no such function anywhere.
            const NOT_INITIALIZED: i32 = 1;

            /// A hook of the served build's table, resolved in its scope.
            fn served(hook: &crate::real::Hook) -> Option<*mut c_void> {
                $hooks.in_scope(hook)
            }

            pub extern "C" fn create(out: Out, ret: *const c_void) -> i32 {
                catch_unwind(|| {
                    $builds
                        .create(out, ret, || $hooks.create().map(|f| f as *mut c_void))
                        .unwrap_or(NOT_INITIALIZED)
                })
                .unwrap_or($internal)
            }

            pub fn destroy(h: *mut c_void) -> i32 {
                catch_unwind(|| match $builds.destroy_fn(h, |t| t.destroy()) {
                    // SAFETY: the caller's own handle.
                    Some(f) => unsafe { f(h) },
                    None => NOT_INITIALIZED,
                })
                .unwrap_or($internal)
            }

            const fn name(s: &'static str) -> &'static CStr {
                match CStr::from_bytes_with_nul(s.as_bytes()) {
                    Ok(c) => c,
                    Err(_) => panic!("not a C name"),
                }
            }

            /// A create's call sites: the create function, and the set and destroy
            /// functions of its library, kept with each object it makes.
            macro_rules! creates {
                ($create:ident, $set:ident, $destroy:ident) => {
                    Callers::with_fns(
                        name(concat!(stringify!($create), "\0")),
                        Some((
                            name(concat!(stringify!($set), "\0")),
                            name(concat!(stringify!($destroy), "\0")),
                        )),
                    )
                };
            }

            /// A set or destroy of an object not known (or whose library's functions are
            /// not): the function of the caller's library, by call site.
            macro_rules! routed {
                ($f:ident, $hook:ident, $ty:ty, $ret:expr) => {{
                    static CALLERS: Callers =
                        Callers::new(name(concat!(stringify!($f), "\0")));
                    // SAFETY: the cache was made for this function, of this type.
                    unsafe { CALLERS.real_fn::<$ty>($ret, &$hooks.$hook, served) }
                }};
            }

            /// The create functions by call site.
            static DESC_CREATES: Callers = creates!($desc_create, $desc_set, $desc_destroy);
            static LAYOUT_CREATES: Callers = creates!($layout_create, $layout_set, $layout_destroy);

            /// A call site kept in its home slot and a descriptor its word holds (PyTorch's)
            /// are made here, with only `out`, the word and the functions kept across the
            /// call; every other case out of line.
            pub extern "C" fn desc_create(out: Out, compute: i32, scale: i32, ret: *const c_void) -> i32 {
                let (mm, flags) = <$kinds>::new_desc(compute, scale);
                let word = plain_desc(&mm, flags);
                // SAFETY: the cache was made for this function, of this type.
                match unsafe { DESC_CREATES.home_fn_and_fns::<DescCreateFn>(ret) } {
                    Some((f, fns)) if word != 0 => {
                        // SAFETY: the caller's library's function, its own arguments.
                        let status = unsafe { f(out, compute, scale) };
                        if status == 0 && !out.is_null() {
                            // SAFETY: the library wrote the new descriptor there.
                            <$kinds>::DESCS.created_plain(<$kinds>::LIBRARY, unsafe { *out }, word, fns);
                        }
                        status
                    }
                    _ => desc_create_elsewhere(out, compute, scale, ret),
                }
            }

            #[cold]
            #[inline(never)]
            fn desc_create_elsewhere(out: Out, compute: i32, scale: i32, ret: *const c_void) -> i32 {
                // SAFETY: the cache was made for this function, of this type.
                let f = unsafe {
                    DESC_CREATES.real_fn_and_fns::<DescCreateFn>(ret, &$hooks.desc_create, served)
                };
                let Some((f, fns)) = f else { return NOT_INITIALIZED };
                let (mm, flags) = <$kinds>::new_desc(compute, scale);
                let word = plain_desc(&mm, flags);
                if word == 0 {
                    return desc_create_full(f, fns, out, mm, flags, compute, scale);
                }
                // SAFETY: the caller's library's function, its own arguments.
                let status = unsafe { f(out, compute, scale) };
                if status == 0 && !out.is_null() {
                    // SAFETY: the library wrote the new descriptor there.
                    <$kinds>::DESCS.created_plain(<$kinds>::LIBRARY, unsafe { *out }, word, fns);
                }
                status
            }

            #[cold]
            #[inline(never)]
            fn desc_create_full(
                f: DescCreateFn,
                fns: u64,
                out: Out,
                mm: tunedblas_core::cublaslt::MatmulAttrs,
                flags: u64,
                compute: i32,
                scale: i32,
            ) -> i32 {
                // SAFETY: the caller's library's function, its own arguments.
                let status = unsafe { f(out, compute, scale) };
                if status == 0 && !out.is_null() {
                    // SAFETY: the library wrote the new descriptor there.
                    let made = unsafe { *out };
                    let _ = catch_unwind(|| <$kinds>::DESCS.created(<$kinds>::LIBRARY, made, mm, flags, fns));
                }
                status
            }

            /// A kind's set and destroy, descriptors' and layouts' alike. The set is the one
            /// of the library that made the object (kept with it), else the caller's; what it
            /// set is kept if it succeeded. The destroy forgets the object first, then
            /// destroys it in the library that made it, else the caller's.
            macro_rules! set_and_destroy {
                ($set:ident, $destroy:ident, $table:ident, $objects:ident,
                 $real_set:ident, $real_destroy:ident, $field:expr) => {
                    /// An object in its home slot whose library's set function is kept
                    /// (a PyTorch GEMM's) is set here; every other case out of line.
                    pub extern "C" fn $set(
                        obj: *mut c_void,
                        attr: i32,
                        buf: *const c_void,
                        size: usize,
                        ret: *const c_void,
                    ) -> i32 {
                        #[cold]
                        #[inline(never)]
                        fn elsewhere(
                            obj: *mut c_void,
                            attr: i32,
                            buf: *const c_void,
                            size: usize,
                            ret: *const c_void,
                        ) -> i32 {
                            let found = <$kinds>::$table.find(obj);
                            let kept = found.as_ref().and_then(crate::lt::objects::fns_of);
                            // SAFETY: a registered set function of this type.
                            let f = match kept.and_then(|f| f.set()) {
                                Some(f) => Some(unsafe { std::mem::transmute::<*mut c_void, SetFn>(f) }),
                                None => routed!($real_set, $set, SetFn, ret),
                            };
                            let Some(f) = f else { return NOT_INITIALIZED };
                            // SAFETY: the library's function, the caller's own arguments.
                            let status = unsafe { f(obj, attr, buf, size) };
                            if let (0, Some(found)) = (status, &found) {
                                // SAFETY: the library just read `size` bytes at `buf`.
                                let change = unsafe { <$kinds>::$set(attr, buf, size) };
                                let _ = catch_unwind(|| crate::lt::objects::$objects::changed_in(found, change));
                            }
                            status
                        }
                        /// Every set but a transpose in place: what it changed kept, through
                        /// all the object's words, found again (out of line, so the fast path
                        /// below keeps no stack for the change and its `catch_unwind`).
                        ///
                        /// # Safety
                        /// The library just read `size` bytes at `buf`.
                        #[cold]
                        #[inline(never)]
                        unsafe fn changed(obj: *mut c_void, attr: i32, buf: *const c_void, size: usize) {
                            // SAFETY: per the contract.
                            let change = unsafe { <$kinds>::$set(attr, buf, size) };
                            if let Some(found) = <$kinds>::$table.find(obj) {
                                let _ = catch_unwind(|| crate::lt::objects::$objects::changed_in(&found, change));
                            }
                        }
                        let Some(found) = <$kinds>::$table.find_home(obj) else {
                            return elsewhere(obj, attr, buf, size, ret);
                        };
                        let Some(f) = crate::lt::objects::fns_of(&found).and_then(|f| f.set()) else {
                            return elsewhere(obj, attr, buf, size, ret);
                        };
                        // SAFETY: a registered set function of this type.
                        let f = unsafe { std::mem::transmute::<*mut c_void, SetFn>(f) };
                        // SAFETY: the library's function, the caller's own arguments.
                        let status = unsafe { f(obj, attr, buf, size) };
                        if status != 0 {
                            return status;
                        }
                        // A transpose on a plain descriptor: its one word changed in
                        // place; every other change through all its words.
                        // SAFETY (both): the library just read `size` bytes at `buf`.
                        let in_place = unsafe { $field(attr, buf, size) }.is_some_and(|(field, v)| {
                            found.edit_first(|w| desc_word_edit(w, field, v))
                        });
                        if !in_place {
                            // SAFETY: as above.
                            unsafe { changed(obj, attr, buf, size) };
                        }
                        status
                    }

                    /// An object in its home slot (a PyTorch GEMM's are) is forgotten and
                    /// handed to its library's destroy with no register saved (a tail
                    /// call); every other case out of line.
                    pub extern "C" fn $destroy(obj: *mut c_void, ret: *const c_void) -> i32 {
                        // (Of the export's own ABI, so the call below is a jump: the
                        // export saves nothing on the stack for it.)
                        #[cold]
                        #[inline(never)]
                        extern "C" fn elsewhere(obj: *mut c_void, ret: *const c_void) -> i32 {
                            let kept = catch_unwind(|| <$kinds>::$table.taken(obj)).ok().flatten();
                            match kept.and_then(|f| f.destroy()) {
                                // SAFETY: the destroy function of the library that made `obj`.
                                Some(d) => unsafe { std::mem::transmute::<*mut c_void, DestroyFn>(d)(obj) },
                                None => match routed!($real_destroy, $destroy, DestroyFn, ret) {
                                    // SAFETY: the caller's library's function, its own object.
                                    Some(f) => unsafe { f(obj) },
                                    None => NOT_INITIALIZED,
                                },
                            }
                        }
                        match <$kinds>::$table.taken_home(obj).and_then(|f| f.destroy()) {
                            // SAFETY: the destroy function of the library that made `obj`.
                            Some(d) => unsafe { std::mem::transmute::<*mut c_void, DestroyFn>(d)(obj) },
                            None => elsewhere(obj, ret),
                        }
                    }
                };
            }

            set_and_destroy!(desc_set, desc_destroy, DESCS, Descs, $desc_set, $desc_destroy,
                <$kinds>::desc_field);
            set_and_destroy!(layout_set, layout_destroy, LAYOUTS, Layouts, $layout_set, $layout_destroy,
                crate::lt::objects::no_field);

            /// As `desc_create`: a call site in its home slot and a plain layout here.
            pub extern "C" fn layout_create(
                out: Out,
                dtype: i32,
                rows: u64,
                cols: u64,
                ld: i64,
                ret: *const c_void,
            ) -> i32 {
                let word = plain_layout(&LayoutAttrs::col(dtype, rows, cols, ld), 0, 0);
                // SAFETY: the cache was made for this function, of this type.
                match unsafe { LAYOUT_CREATES.home_fn_and_fns::<LayoutCreateFn>(ret) } {
                    Some((f, fns)) if word != 0 => {
                        // SAFETY: the caller's library's function, its own arguments.
                        let status = unsafe { f(out, dtype, rows, cols, ld) };
                        if status == 0 && !out.is_null() {
                            // SAFETY: the library wrote the new layout there.
                            <$kinds>::LAYOUTS.created_plain(<$kinds>::LIBRARY, unsafe { *out }, word, fns);
                        }
                        status
                    }
                    _ => layout_create_elsewhere(out, dtype, rows, cols, ld, ret),
                }
            }

            #[cold]
            #[inline(never)]
            fn layout_create_elsewhere(
                out: Out,
                dtype: i32,
                rows: u64,
                cols: u64,
                ld: i64,
                ret: *const c_void,
            ) -> i32 {
                // SAFETY: the cache was made for this function, of this type.
                let f = unsafe {
                    LAYOUT_CREATES.real_fn_and_fns::<LayoutCreateFn>(ret, &$hooks.layout_create, served)
                };
                let Some((f, fns)) = f else { return NOT_INITIALIZED };
                // The layout's word before the call: only it, `out` and `fns` are kept
                // across (a layout the word cannot hold is made out of line).
                let l = LayoutAttrs::col(dtype, rows, cols, ld);
                let word = plain_layout(&l, 0, 0);
                if word == 0 {
                    return layout_create_full(f, fns, out, l);
                }
                // SAFETY: the caller's library's function, its own arguments.
                let status = unsafe { f(out, dtype, rows, cols, ld) };
                if status == 0 && !out.is_null() {
                    // SAFETY: the library wrote the new layout there.
                    <$kinds>::LAYOUTS.created_plain(<$kinds>::LIBRARY, unsafe { *out }, word, fns);
                }
                status
            }

            #[cold]
            #[inline(never)]
            fn layout_create_full(f: LayoutCreateFn, fns: u64, out: Out, l: LayoutAttrs) -> i32 {
                // SAFETY: the caller's library's function, its own arguments.
                let status = unsafe { f(out, l.dtype, l.rows, l.cols, l.ld) };
                if status == 0 && !out.is_null() {
                    // SAFETY: the library wrote the new layout there.
                    let made = unsafe { *out };
                    let _ = catch_unwind(|| <$kinds>::LAYOUTS.created(<$kinds>::LIBRARY, made, l, fns));
                }
                status
            }

        }

        with_caller! {
            /// A handle made in the build the caller links.
            fn $handle_create(handle: *mut *mut c_void) -> i32 = $m::create, x86: "rsi", arm: "x1"
        }
        /// A handle destroyed in the build it came from.
        #[no_mangle]
        pub extern "C" fn $handle_destroy(handle: *mut c_void) -> i32 {
            $m::destroy(handle)
        }
        with_caller! {
            /// A matmul descriptor made by the caller's library, its types kept.
            fn $desc_create(desc: *mut *mut c_void, compute: i32, scale: i32) -> i32
                = $m::desc_create, x86: "rcx", arm: "x3"
        }
        with_caller! {
            /// A descriptor attribute set by the caller's library, and kept.
            fn $desc_set(desc: *mut c_void, attr: i32, buf: *const c_void, size: usize) -> i32
                = $m::desc_set, x86: "r8", arm: "x4"
        }
        with_caller! {
            /// A descriptor forgotten, then destroyed by the caller's library.
            fn $desc_destroy(desc: *mut c_void) -> i32 = $m::desc_destroy, x86: "rsi", arm: "x1"
        }
        with_caller! {
            /// A matrix layout made by the caller's library, its type, sizes and leading
            /// dimension kept.
            fn $layout_create(layout: *mut *mut c_void, dtype: i32, rows: u64, cols: u64, ld: i64) -> i32
                = $m::layout_create, x86: "r9", arm: "x5"
        }
        with_caller! {
            /// A layout attribute set by the caller's library, and kept.
            fn $layout_set(layout: *mut c_void, attr: i32, buf: *const c_void, size: usize) -> i32
                = $m::layout_set, x86: "r8", arm: "x4"
        }
        with_caller! {
            /// A layout forgotten, then destroyed by the caller's library.
            fn $layout_destroy(layout: *mut c_void) -> i32 = $m::layout_destroy, x86: "rsi", arm: "x1"
        }
    };
}

lt_exports! {
    mod hiplt_objects; kinds: crate::hipblaslt::objects::Kept,
    hooks: crate::hipblaslt::real::HIPLT, builds: crate::hipblaslt::real::HIPBLASLT,
    internal: crate::exports::HIPBLAS_INTERNAL_ERROR;
    hipblasLtCreate, hipblasLtDestroy,
    hipblasLtMatmulDescCreate, hipblasLtMatmulDescSetAttribute, hipblasLtMatmulDescDestroy,
    hipblasLtMatrixLayoutCreate, hipblasLtMatrixLayoutSetAttribute, hipblasLtMatrixLayoutDestroy
}

lt_exports! {
    mod lt_objects; kinds: crate::cublaslt::objects::Kept,
    hooks: crate::cublaslt::real::LT, builds: crate::cublaslt::real::CUBLASLT,
    internal: tunedblas_core::cublaslt::STATUS_INTERNAL_ERROR;
    cublasLtCreate, cublasLtDestroy,
    cublasLtMatmulDescCreate, cublasLtMatmulDescSetAttribute, cublasLtMatmulDescDestroy,
    cublasLtMatrixLayoutCreate, cublasLtMatrixLayoutSetAttribute, cublasLtMatrixLayoutDestroy
}

with_caller! {
    /// `dlclose`: the real one, with the loader generation moved on before and after it, so
    /// a function kept for a call site is looked up again once a library may have gone
    /// (`lt/callers.rs`). The interposer's own `dlclose`s (which only drop the reference an
    /// `RTLD_NOLOAD` lookup took) move nothing.
    fn dlclose(handle: *mut c_void) -> c_int = dlclose_from, x86: "rsi", arm: "x1"
}

extern "C" fn dlclose_from(handle: *mut c_void, ret: *const c_void) -> c_int {
    use std::sync::atomic::{AtomicPtr, Ordering};
    type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let mut real = REAL.load(Ordering::Acquire);
    if real.is_null() {
        // SAFETY: a NUL-terminated name; RTLD_NEXT is valid from a shared object.
        real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlclose".as_ptr()) };
        if real.is_null() {
            return -1;
        }
        REAL.store(real, Ordering::Release);
    }
    let host = {
        let _errno = crate::lifecycle::KeepErrno::new();
        !crate::copies::is_ours(ret)
    };
    if host {
        crate::lt::callers::loader_changed();
    }
    // SAFETY: the next dlclose (libc's), with the caller's own handle.
    let status = unsafe { std::mem::transmute::<*mut c_void, DlcloseFn>(real)(handle) };
    if host {
        crate::lt::callers::loader_changed();
    }
    status
}

/// A Lt library's matmul export: its 16 arguments (one C shape for cuBLASLt and
/// hipBLASLt, typed as each header types them) gathered into one `lt::LtCall` and served by
/// the shared Lt path for that library (`lt/serve.rs`).
macro_rules! lt_matmul_export {
    ($(#[$m:meta])* fn $name:ident(handle: $h:ty, desc: $desc:ty, layout: $lay:ty,
        algo: $algo:ty, stream: $stream:ty) -> $status:ty = $lib:ty) => {
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(
            handle: $h,
            desc: $desc,
            alpha: *const c_void,
            a: *const c_void,
            a_desc: $lay,
            b: *const c_void,
            b_desc: $lay,
            beta: *const c_void,
            c: *const c_void,
            c_desc: $lay,
            d: *mut c_void,
            d_desc: $lay,
            algo: *const $algo,
            workspace: *mut c_void,
            workspace_bytes: usize,
            stream: $stream,
        ) -> $status {
            let x = crate::lt::LtCall {
                handle,
                desc,
                alpha,
                a,
                a_desc,
                b,
                b_desc,
                beta,
                c,
                c_desc,
                d,
                d_desc,
                algo: algo.cast(),
                workspace,
                workspace_bytes,
                stream,
            };
            // SAFETY: the caller's own matmul arguments.
            unsafe { crate::lt::serve::matmul::<$lib>(&x) }
        }
    };
}

lt_matmul_export! {
    /// `hipblasLtMatmul` (hipBLASLt; cuBLASLt's 16 arguments): see `hipblaslt/`.
    fn hipblasLtMatmul(handle: abi::HipblasLtHandle, desc: abi::HipblasLtMatmulDesc,
        layout: abi::HipblasLtMatrixLayout, algo: abi::HipblasLtMatmulAlgo, stream: abi::Stream)
        -> abi::HipblasStatus = crate::hipblaslt::serve::Hipblaslt
}

/// `int tunedblas_hipblaslt_serving(int on)`: as `tunedblas_cublaslt_serving`, for hipBLASLt.
#[no_mangle]
pub extern "C" fn tunedblas_hipblaslt_serving(on: c_int) -> c_int {
    crate::hipblaslt::STATE.set_serving(on)
}

lt_matmul_export! {
    /// `cublasLtMatmul` (cuBLASLt; 16 arguments): see `cublaslt/`.
    fn cublasLtMatmul(handle: lt::LtHandle, desc: lt::MatmulDesc, layout: lt::MatrixLayout,
        algo: lt::MatmulAlgo, stream: lt::CudaStream) -> lt::LtStatus
        = crate::cublaslt::serve::Cublaslt
}

/// `int tunedblas_cublaslt_serving(int on)`: 1 serves cuBLASLt rows, 0 passes every call
/// through (for A/B trials in one process), a negative value only asks; returns the
/// previous setting. Found by a host with `dlsym(RTLD_DEFAULT, ...)`.
#[no_mangle]
pub extern "C" fn tunedblas_cublaslt_serving(on: c_int) -> c_int {
    crate::cublaslt::STATE.set_serving(on)
}

/// `_exit` skips atexit handlers (Python's `os._exit`, forked workers, signal handlers):
/// write counts, stats and the summary first (the lifecycle does so without blocking or
/// allocating in a way a signal handler could deadlock on), then end the process as `_exit`
/// would. A process that never called a wrapped function goes straight out.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    crate::lifecycle::leaving();
    exit_group(c"_exit", status)
}

/// `_Exit`: the same as `_exit` (ISO C's name for it).
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    crate::lifecycle::leaving();
    exit_group(c"_Exit", status)
}

/// Ends the process as `_exit` does; in a copy that stands aside, through the first copy's
/// `name` (which writes that copy's files first).
fn exit_group(name: &std::ffi::CStr, status: c_int) -> ! {
    if let Some(first) = crate::copies::first_copys(name) {
        // SAFETY: the first copy's `_exit` / `_Exit`, of this C type.
        unsafe {
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int) -> !>(first)(status)
        };
    }
    // SAFETY: exit_group ends every thread of the process, which is what _exit does.
    unsafe { libc::syscall(libc::SYS_exit_group, status as libc::c_long) };
    // exit_group does not return; this only satisfies the type.
    loop {
        std::hint::spin_loop();
    }
}

/// The exec family: the process image is about to be replaced, so counts, stats and the
/// summary are written first; if the exec fails the process goes on and its real exit
/// writes them again. (The variadic `execl*` cannot be written in Rust and glibc's call
/// `execve` inside libc, out of reach: those, like a raw `exit_group`, keep every first
/// sight and the counts of the last periodic flush.)
macro_rules! exec_export {
    ($name:ident ( $($arg:ident : $ty:ty),* )) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            type Real = unsafe extern "C" fn($($ty),*) -> c_int;
            let Some(real) = crate::real::PROCESS.$name() else {
                // SAFETY: errno is thread-local.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                return -1;
            };
            crate::lifecycle::leaving();
            // SAFETY: the caller's own arguments.
            let r = unsafe { (real as Real)($($arg),*) };
            crate::lifecycle::exec_failed();
            r
        }
    };
}

type Argv = *const *const std::ffi::c_char;
type CPath = *const std::ffi::c_char;
exec_export!(execve(path: CPath, argv: Argv, envp: Argv));
exec_export!(execv(path: CPath, argv: Argv));
exec_export!(execvp(file: CPath, argv: Argv));
exec_export!(execvpe(file: CPath, argv: Argv, envp: Argv));
exec_export!(fexecve(fd: c_int, argv: Argv, envp: Argv));
