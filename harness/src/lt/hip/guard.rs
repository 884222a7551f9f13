//! The hipBLASLt exception guard in the command (the interposer's `hipblaslt_guard.cpp`,
//! built by `harness/build.rs` and embedded): `hipblaslt_ext`'s C++ functions take
//! `std::vector`s and may throw, which Rust can neither build nor catch, so the tuner calls
//! them through the guard's C functions. Loaded from a memfd when a hipBLASLt campaign
//! starts; the command is not a host's guest, so nothing here needs the interposer's
//! care about fork children or cancellation.

use std::ffi::{c_int, c_void, CStr, CString};

use tunedblas_core::abi::{
    GuardAlgoFromIndexFn as AlgoFromIndexFn, GuardAllAlgosFn as AllAlgosFn,
    GuardIndexOfFn as IndexOfFn, GuardIsSupportedFn as IsSupportedFn, GUARD_THREW,
};

use crate::backend::dl_error;
use crate::lt::cuda::{err, Result};

static GUARD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hipblaslt_guard.so"));

/// What a thrown exception becomes (`THREW` in the C++ file).
pub const THREW: c_int = GUARD_THREW;

/// The guard's functions the tuner uses.
pub struct Guard {
    pub all_algos: AllAlgosFn,
    pub algo_from_index: AlgoFromIndexFn,
    pub index_of: IndexOfFn,
    pub is_supported: IsSupportedFn,
}

/// Loads the embedded guard.
pub fn load() -> Result<Guard> {
    if GUARD.is_empty() {
        return err(
            "this tunedblas was built without a C++ compiler, so it has no exception guard for \
             hipblaslt_ext and cannot list hipBLASLt's algorithms (rebuild with g++ installed)",
        );
    }
    // SAFETY: a NUL-terminated name; MFD_CLOEXEC keeps it out of the children we start.
    let fd =
        unsafe { libc::memfd_create(c"tunedblas-hipblaslt-guard".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // The descriptor stays open for the process: the loader knows the guard by its name.
    let mut file = std::mem::ManuallyDrop::new(unsafe {
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd)
    });
    std::io::Write::write_all(&mut *file, GUARD)
        .map_err(|e| crate::lt::cuda::Error(format!("writing the guard: {e}")))?;
    let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
    // SAFETY: dlopen of our own object, in its own scope.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return err(format!("loading the hipblaslt_ext guard: {}", dl_error()));
    }
    let sym = |name: &CStr| -> Result<*mut c_void> {
        // SAFETY: a live handle, a NUL-terminated name.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        if p.is_null() {
            err(format!("{} not in the guard", name.to_string_lossy()))
        } else {
            Ok(p)
        }
    };
    // SAFETY: the symbols of hipblaslt_guard.cpp, with these C signatures.
    unsafe {
        Ok(Guard {
            all_algos: std::mem::transmute::<*mut c_void, AllAlgosFn>(sym(
                c"tunedblas_guard_all_algos",
            )?),
            algo_from_index: std::mem::transmute::<*mut c_void, AlgoFromIndexFn>(sym(
                c"tunedblas_guard_algo_from_index",
            )?),
            index_of: std::mem::transmute::<*mut c_void, IndexOfFn>(sym(
                c"tunedblas_guard_index_of",
            )?),
            is_supported: std::mem::transmute::<*mut c_void, IsSupportedFn>(sym(
                c"tunedblas_guard_is_supported",
            )?),
        })
    }
}
