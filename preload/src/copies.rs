//! Other copies of this library in one process: the first stands, every other stands aside.
//!
//! An installed `libtunedblas.so` and a build of it can both be named in `LD_PRELOAD` (a unit
//! file and an environment both setting it), or a copy can be `dlopen`ed beside a preloaded
//! one. Each copy exports the same names, and each would take the next definition of a real
//! function for the real one: the first copy's `rocblas_create_handle` found the second's,
//! which found the first's again, until the stack ran out (SIGSEGV, even with
//! `TUNEDBLAS_DISABLE=1`). So:
//!
//! - **The first copy** (the one the global scope finds first: it shadows the others) never
//!   takes a function inside any copy of tunedblas for a real one ([`is_tunedblas`] is asked
//!   by every resolution in `real.rs` and of every caller in `libs.rs`).
//! - **Every other copy stands aside** ([`aside`]): its runtimes never start, it records
//!   nothing, and each of its exports passes the call straight through to the first copy's
//!   export of the same name (its hooks resolve there first), whatever the environment says;
//!   it says so once, at debug level. A copy loaded alone (or only in local scopes) is the
//!   first.
//!
//! A copy of tunedblas is an object that defines [`MARKER`] itself.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU8, Ordering};

/// The export every copy defines and no other library does.
pub const MARKER: &CStr = c"tunedblas_cublaslt_serving";

const UNKNOWN: u8 = 0;
const FIRST: u8 = 1;
const ASIDE: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The loaded object holding `p`: (its base, its file name as the loader knows it).
fn object(p: *const c_void) -> Option<(usize, *const std::ffi::c_char)> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables.
    if unsafe { libc::dladdr(p, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    Some((info.dli_fbase as usize, info.dli_fname))
}

/// Whether `p` lies in this copy of the library.
pub fn is_ours(p: *const c_void) -> bool {
    let own = object(is_ours as *const c_void).map(|o| o.0);
    object(p).is_some_and(|o| Some(o.0) == own)
}

/// Whether `p` lies in a copy of tunedblas (this one or another): an object whose own
/// definition of [`MARKER`] is in it.
pub fn is_tunedblas(p: *const c_void) -> bool {
    if is_ours(p) {
        return true;
    }
    let Some((base, name)) = object(p) else {
        return false;
    };
    // SAFETY: RTLD_NOLOAD only returns a handle to an object already loaded; the name is
    // the loader's own, NUL-terminated.
    let h = unsafe { libc::dlopen(name, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return false;
    }
    // SAFETY: a live handle and a NUL-terminated name.
    let m = unsafe { libc::dlsym(h, MARKER.as_ptr()) };
    // SAFETY: drops the reference NOLOAD took.
    unsafe { libc::dlclose(h) };
    !m.is_null() && object(m).is_some_and(|o| o.0 == base)
}

/// The first copy's definition of `name`, when this copy stands aside (and the first is in
/// the global scope); `None` for the first copy itself.
pub fn first_copys(name: &CStr) -> Option<*mut c_void> {
    if !aside() {
        return None;
    }
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null() && !is_ours(p) && is_tunedblas(p)).then_some(p)
}

/// Whether this copy stands aside: another copy comes first in the global scope. Decided
/// once, on the first slow path that asks.
#[inline]
pub fn aside() -> bool {
    match STATE.load(Ordering::Relaxed) {
        FIRST => false,
        ASIDE => true,
        _ => decide(),
    }
}

#[cold]
#[inline(never)]
fn decide() -> bool {
    let _errno = crate::lifecycle::KeepErrno::new();
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope.
    let first = unsafe { libc::dlsym(libc::RTLD_DEFAULT, MARKER.as_ptr()) };
    let aside = !first.is_null() && !is_ours(first);
    if STATE
        .compare_exchange(
            UNKNOWN,
            if aside { ASIDE } else { FIRST },
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
        && aside
    {
        // This copy never starts (its settings are never read): take the log level here.
        let level = std::env::var("TUNEDBLAS_LOG").ok();
        crate::log::set_level(tunedblas_core::settings::log_level(level.as_deref()).0);
        let name = |p: *const c_void| {
            object(p).map_or("?".into(), |(_, n)| {
                // SAFETY: the loader's names are NUL-terminated.
                unsafe { CStr::from_ptr(n) }.to_string_lossy().into_owned()
            })
        };
        crate::log::debug!(
            "another copy of tunedblas ({}) was loaded first; this copy ({}) passes every call to it",
            name(first),
            name(decide as *const c_void)
        );
    }
    aside
}
