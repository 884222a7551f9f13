//! The exception guard around `hipblaslt_ext` (`preload/cxx/hipblaslt_guard.cpp`): a small
//! C++ shared object compiled at build time and embedded here, loaded only in a process
//! whose hipBLASLt profile has index rows (at the runtime's start, never in a fork child,
//! never on a GEMM's path): written to a memfd and `dlopen`ed `RTLD_LOCAL` from
//! `/proc/self/fd`. Its three functions call the hipBLASLt function they are given inside
//! `try { } catch (...)`, with vectors the C++ compiler builds, so a C++ exception (which
//! Rust cannot catch: the host would abort) becomes a status, and nothing about libstdc++'s
//! vector layout or allocator is assumed.

use std::ffi::{c_int, c_void, CString};
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

use tunedblas_core::abi::{
    GuardAlgoFromIndexFn as AlgoFromIndexFn, GuardIndexOfFn as IndexOfFn,
    GuardIsSupportedFn as IsSupportedFn, GUARD_THREW,
};

use crate::log::info;

static GUARD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hipblaslt_guard.so"));

/// What a thrown exception becomes (`THREW` in the C++ file).
pub const THREW: c_int = GUARD_THREW;

/// The guard's functions.
#[derive(Clone, Copy)]
pub struct Guard {
    pub algo_from_index: AlgoFromIndexFn,
    pub index_of: IndexOfFn,
    pub is_supported: IsSupportedFn,
}

const UNTRIED: u8 = 0;
const LOADING: u8 = 1;
const LOADED: u8 = 2;
const FAILED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNTRIED);
static FNS: [AtomicPtr<c_void>; 3] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 3];

/// The guard, once loaded.
pub fn get() -> Option<Guard> {
    if STATE.load(Ordering::Acquire) != LOADED {
        return None;
    }
    let f = |i: usize| FNS[i].load(Ordering::Relaxed);
    // SAFETY: the three symbols of hipblaslt_guard.cpp, with these C signatures.
    unsafe {
        Some(Guard {
            algo_from_index: std::mem::transmute::<*mut c_void, AlgoFromIndexFn>(f(0)),
            index_of: std::mem::transmute::<*mut c_void, IndexOfFn>(f(1)),
            is_supported: std::mem::transmute::<*mut c_void, IsSupportedFn>(f(2)),
        })
    }
}

/// Why the guard is not loaded, for the line of a row that cannot be served.
pub fn why_not() -> &'static str {
    if GUARD.is_empty() {
        "this libtunedblas.so was built without a C++ compiler, so it has no exception guard for hipblaslt_ext"
    } else {
        "the exception guard for hipblaslt_ext could not be loaded"
    }
}

/// Loads the guard (once per process; not in a fork child, where the loader's lock may be
/// held by a thread the child does not have).
pub fn load() {
    if crate::lifecycle::in_fork_child()
        || STATE
            .compare_exchange(UNTRIED, LOADING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    match open() {
        Ok(fns) => {
            for (slot, f) in FNS.iter().zip(fns) {
                slot.store(f, Ordering::Relaxed);
            }
            STATE.store(LOADED, Ordering::Release);
        }
        Err(why) => {
            STATE.store(FAILED, Ordering::Release);
            info!(
                "hipBLASLt: {}: {why}; Gemm_Hipblaslt rows pass through",
                why_not()
            );
        }
    }
}

/// The size of this process's descriptor table now (`FDSize` in `/proc/self/status`; the
/// kernel's smallest, 64, where it cannot be read).
fn fd_table_size() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("FDSize:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(64)
        .max(64)
}

fn open() -> Result<[*mut c_void; 3], String> {
    if GUARD.is_empty() {
        return Err("built without it".into());
    }
    let _no_cancel = crate::lifecycle::NoCancel::new();
    // SAFETY: a NUL-terminated name; MFD_CLOEXEC keeps it out of exec'd children.
    let made =
        unsafe { libc::memfd_create(c"tunedblas-hipblaslt-guard".as_ptr(), libc::MFD_CLOEXEC) };
    if made < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // The loader knows the guard by the name it was opened by after the descriptor is
    // closed (no descriptor of ours stays open: a daemon that closes them all, or counts
    // them, sees none). The number is the top of the descriptor table the process has now
    // (its `FDSize`, 64 at least), where `open`, which hands out the lowest free number,
    // does not give it to a host that closes its descriptors and opens others while the
    // guard is written. Never above the table: a number past it grew the kernel's table
    // for good (to the RLIMIT_NOFILE of a million Docker gives: 8 MB, and an `FDSize` the
    // host sees). The name, `/proc/self/./fd/<fd>`, is one no host spells, so a host that
    // later loads a memfd plugin of its own as `/proc/self/fd/<fd>` at the same number is
    // not handed this object by name.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: an out-pointer to an rlimit.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    let top = (lim.rlim_cur.min(fd_table_size()) as libc::c_int).max(4);
    let mut fd = made;
    for floor in [top - 1, top / 2, 3] {
        // SAFETY: duplicating our own descriptor.
        let high = unsafe { libc::fcntl(made, libc::F_DUPFD_CLOEXEC, floor) };
        if high >= 0 {
            fd = high;
            break;
        }
    }
    if fd != made {
        // SAFETY: our own descriptor; the copy stays.
        unsafe { libc::close(made) };
    }
    let result = (|| {
        let mut rest = GUARD;
        while !rest.is_empty() {
            // SAFETY: writing from a live slice. A memory file is a file: a file-size
            // limit fails the write rather than end the host.
            let n = crate::log::without_our_signals(|| unsafe {
                libc::write(fd, rest.as_ptr().cast(), rest.len())
            });
            if n <= 0 {
                return Err(format!(
                    "writing the guard: {}",
                    std::io::Error::last_os_error()
                ));
            }
            rest = &rest[n as usize..];
        }
        let path = CString::new(format!("/proc/self/./fd/{fd}")).expect("no NUL");
        // SAFETY: dlopen of our own object; RTLD_LOCAL keeps its symbols out of the host's.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            // SAFETY: dlerror's string is valid until the next dl call.
            let e = unsafe { libc::dlerror() };
            let e = if e.is_null() {
                "dlopen failed".to_string()
            } else {
                unsafe { std::ffi::CStr::from_ptr(e) }
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(e);
        }
        let sym = |name: &std::ffi::CStr| {
            // SAFETY: a live handle, a NUL-terminated name.
            let p = unsafe { libc::dlsym(h, name.as_ptr()) };
            (!p.is_null())
                .then_some(p)
                .ok_or_else(|| format!("{} not in the guard", name.to_string_lossy()))
        };
        Ok([
            sym(c"tunedblas_guard_algo_from_index")?,
            sym(c"tunedblas_guard_index_of")?,
            sym(c"tunedblas_guard_is_supported")?,
        ])
    })();
    // Mapped or not, the descriptor goes: the mapping keeps the guard's pages.
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    result
}
