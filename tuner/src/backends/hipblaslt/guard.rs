//! The hipBLASLt exception guard in the command (the interposer's `hipblaslt_guard.cpp`,
//! built by `tuner/build.rs` and embedded): `hipblaslt_ext`'s C++ functions take
//! `std::vector`s and may throw, which Rust can neither build nor catch, so the tuner calls
//! them through the guard's C functions. Loaded from a memfd when a hipBLASLt campaign
//! starts; the command is not a host's guest, so nothing here needs the interposer's
//! care about fork children or cancellation.

use std::ffi::c_int;

use tunedblas_core::abi::{
    GuardAlgoFromIndexFn as AlgoFromIndexFn, GuardAllAlgosFn as AllAlgosFn,
    GuardIndexOfFn as IndexOfFn, GuardIsSupportedFn as IsSupportedFn, GUARD_THREW,
};

use crate::dl;
use crate::error::{Error, Result};

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
        return Err(Error::failed(
            "this tunedblas was built without a C++ compiler, so it has no exception guard for \
             hipblaslt_ext and cannot list hipBLASLt's algorithms (rebuild with g++ installed)",
        ));
    }
    // SAFETY: a NUL-terminated name; MFD_CLOEXEC keeps it out of the children we start.
    let fd =
        unsafe { libc::memfd_create(c"tunedblas-hipblaslt-guard".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::failed(format!(
            "memfd_create: {}",
            std::io::Error::last_os_error()
        )));
    }
    // The descriptor stays open for the process: the loader knows the guard by its name.
    let mut file = std::mem::ManuallyDrop::new(unsafe {
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd)
    });
    std::io::Write::write_all(&mut *file, GUARD)
        .map_err(|e| Error::failed(format!("writing the guard: {e}")))?;
    let path = format!("/proc/self/fd/{fd}");
    let h = dl::open(
        std::path::Path::new(&path),
        libc::RTLD_NOW | libc::RTLD_LOCAL,
    )
    .map_err(|e| Error::failed(format!("loading the hipblaslt_ext guard: {e}")))?;
    // SAFETY: the symbols of hipblaslt_guard.cpp, with these C signatures.
    unsafe {
        Ok(Guard {
            all_algos: dl::need(h, "tunedblas_guard_all_algos", "the guard")?,
            algo_from_index: dl::need(h, "tunedblas_guard_algo_from_index", "the guard")?,
            index_of: dl::need(h, "tunedblas_guard_index_of", "the guard")?,
            is_supported: dl::need(h, "tunedblas_guard_is_supported", "the guard")?,
        })
    }
}
