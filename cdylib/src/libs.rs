//! Which rocBLAS build a call belongs to, as libraries come and go.
//!
//! A process may close the module that linked rocBLAS and open another (the library is
//! unloaded and loaded again, maybe another build), or load two builds side by side in local
//! scopes. Every GEMM carries a handle, and every handle was made by `rocblas_create_handle`
//! of one build: the interposer exports that function too, sees which object called it (the
//! return address), asks that object's own scope for `rocblas_create_handle` — the build
//! the caller links — and makes the handle there. Then:
//!
//! - the first build seen is the one served ([`HOOKS`] is pinned to its file);
//! - a handle from the same build changes nothing;
//! - a handle from another build while the served one is gone (closed and unloaded) switches
//!   serving to the new build: addresses are resolved again, the library is identified and
//!   its own profile chosen (the rocBLAS runtime starts again; misses carry over);
//! - a handle from another build while the served one is still loaded is recorded, and every
//!   call carrying it goes to that build's own functions, untouched (said once).
//!
//! The handle map also keeps the device each handle was made on (HIP's current device at
//! creation, as rocBLAS binds it), so a call's rank file is the handle's, not the calling
//! thread's current device. While only one build is in use the hot path pays one relaxed
//! load (the exports' pass-through gate, `serve::pass_gate`, which a second build closes
//! for good; [`other_build`]'s own load when the gate is not open).

use std::ffi::{c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tunedblas_core::abi::*;

use crate::lifecycle::ExitLock;
use crate::log::info;
use crate::real::{Hooks, HOOKS};

/// A build's library file and where it is mapped.
#[derive(Clone, PartialEq, Eq)]
struct Build {
    base: usize,
    path: CString,
}

/// The builds seen: the served one, and up to [`OTHERS`] others.
struct Builds {
    served: Option<Build>,
    others: Vec<Build>,
}

static BUILDS: ExitLock<Builds> = ExitLock::new(Builds {
    served: None,
    others: Vec::new(),
});

/// Other builds' hook tables; a handle's map entry names one by index + 1 (0: served).
const OTHERS: usize = 8;
static OTHER_HOOKS: [AtomicPtr<Hooks>; OTHERS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; OTHERS];

/// Set once a handle of another build is about to be made: calls then look their handle
/// up (and the pass-through gate is closed, `serve::close_pass_gate`).
static MULTI: AtomicBool = AtomicBool::new(false);

/// Handles: (handle, build << 32 | device + 1), open addressing; 0 = empty. `build` is 0
/// when unknown, 1 for the served build, 2.. for the others (`OTHER_HOOKS[build - 2]`).
/// A destroyed handle's slot keeps its key with meta 0, so probes go on past it.
const SLOTS: usize = 4096;
static HANDLE_KEYS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static HANDLE_META: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
/// Set once any handle is in the map (then device lookups are worth a probe).
static ANY_HANDLE: AtomicBool = AtomicBool::new(false);

fn home(h: usize) -> usize {
    ((h >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) & (SLOTS - 1)
}

/// The slot of `h`, if the map holds it.
fn find(h: usize) -> Option<usize> {
    let mut i = home(h);
    for _ in 0..64 {
        match HANDLE_KEYS[i].load(Ordering::Acquire) {
            0 => return None,
            k if k == h => return Some(i),
            _ => i = (i + 1) & (SLOTS - 1),
        }
    }
    None
}

fn remember(h: usize, build: usize, device: i32) {
    let meta = ((build as u64) << 32) | u64::from((device as u32).wrapping_add(1));
    let mut i = home(h);
    for _ in 0..64 {
        let k = HANDLE_KEYS[i].load(Ordering::Acquire);
        let mine = k == h
            || (k == 0
                && HANDLE_KEYS[i]
                    .compare_exchange(0, h, Ordering::AcqRel, Ordering::Acquire)
                    .map_or_else(|now| now == h, |_| true));
        if mine {
            HANDLE_META[i].store(meta, Ordering::Release);
            ANY_HANDLE.store(true, Ordering::Release);
            return;
        }
        i = (i + 1) & (SLOTS - 1);
    }
    // Full around its home: the handle is served as the first build's, on the thread's
    // current device (as before this map existed).
}

fn forget(h: usize) {
    if let Some(i) = find(h) {
        HANDLE_META[i].store(0, Ordering::Release);
    }
}

/// The hooks of the other build `h` belongs to, if it belongs to one: its calls go there
/// untouched. One relaxed load while a single build is in use.
#[inline(always)]
pub fn other_build(h: Handle) -> Option<&'static Hooks> {
    if !MULTI.load(Ordering::Relaxed) {
        return None;
    }
    other_build_slow(h)
}

/// Whether a handle of another rocBLAS build was ever made (calls then look their handle
/// up).
pub fn several_builds() -> bool {
    MULTI.load(Ordering::Acquire)
}

#[cold]
#[inline(never)]
fn other_build_slow(h: Handle) -> Option<&'static Hooks> {
    let meta = HANDLE_META[find(h as usize)?].load(Ordering::Acquire);
    let build = (meta >> 32) as usize;
    if build < 2 {
        return None;
    }
    // SAFETY: a non-null entry is a leaked Hooks, never freed.
    unsafe { OTHER_HOOKS.get(build - 2)?.load(Ordering::Acquire).as_ref() }
}

/// The device handle `h` was made on, if it was made through us.
pub fn device_of(h: Handle) -> Option<i32> {
    if !ANY_HANDLE.load(Ordering::Relaxed) {
        return None;
    }
    let meta = HANDLE_META[find(h as usize)?].load(Ordering::Acquire);
    let device = (meta & 0xffff_ffff) as u32;
    (meta != 0 && device != 0).then(|| device.wrapping_sub(1) as i32)
}

/// The loaded object holding `addr`: (base, file name), if any.
fn object_of(addr: *const c_void) -> Option<(usize, CString)> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: the loader's name strings are NUL-terminated.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }.to_owned();
    Some((info.dli_fbase as usize, name))
}

/// Whether the main program holds `base` (its scope is the global one).
fn is_main_program(base: usize) -> bool {
    // SAFETY: getauxval has no preconditions; AT_PHDR is the main program's headers.
    let phdr = unsafe { libc::getauxval(libc::AT_PHDR) } as *const c_void;
    object_of(phdr).is_some_and(|(b, _)| b == base)
}

/// Whether the build is still loaded: the same file mapped at the same place.
fn is_loaded(b: &Build) -> bool {
    object_of(b.base as *const c_void).is_some_and(|(base, path)| base == b.base && path == b.path)
}

/// The build a caller at return address `ret` links: its own scope's
/// `rocblas_create_handle`. `None` when the caller is the main program (its scope is the
/// global one), or cannot be told.
fn build_of_caller(ret: *const c_void) -> Option<(Build, CreateHandleFn)> {
    let (caller_base, caller) = object_of(ret)?;
    if crate::real::is_ours(ret as *mut c_void) || is_main_program(caller_base) {
        return None;
    }
    // SAFETY: RTLD_NOLOAD only returns a handle to an object already loaded.
    let h = unsafe { libc::dlopen(caller.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return None;
    }
    // SAFETY: a valid handle and a NUL-terminated name.
    let f = unsafe { libc::dlsym(h, c"rocblas_create_handle".as_ptr()) };
    // SAFETY: drops the reference NOLOAD took.
    unsafe { libc::dlclose(h) };
    if f.is_null() || crate::real::is_ours(f) {
        return None;
    }
    let (base, path) = object_of(f)?;
    // SAFETY: the symbol has this signature (src/abi.rs).
    let create = unsafe { std::mem::transmute::<*mut c_void, CreateHandleFn>(f) };
    Some((Build { base, path }, create))
}

/// `rocblas_create_handle` from a caller whose return address is `ret` (exports.rs).
pub fn create_handle(out: *mut Handle, ret: *const c_void) -> Status {
    let caller = build_of_caller(ret);
    let index = match &caller {
        Some((build, _)) => note_build(build),
        None => 0,
    };
    let create = match (&caller, index) {
        (Some((_, f)), i) if i >= 2 => Some(*f),
        _ => HOOKS.create_handle(),
    };
    let Some(create) = create else {
        return STATUS_NOT_IMPLEMENTED;
    };
    // SAFETY: the caller's own out-pointer.
    let status = unsafe { create(out) };
    if status == STATUS_SUCCESS && !out.is_null() {
        // SAFETY: the real function wrote the handle.
        let h = unsafe { *out };
        if !h.is_null() {
            remember(h as usize, index, crate::runtime::current_device());
        }
    }
    status
}

/// In a fork child: a parent's thread may have held the builds' lock at the fork; free it,
/// so the child's handles are not each kept waiting two seconds. (Holders mostly compare;
/// only a fork landing inside the push of a newly seen build could leave the list torn,
/// and only builds loaded beside the served one are ever pushed.)
///
/// # Safety
/// Only from the fork child handler, with no other thread alive.
pub unsafe fn after_fork() {
    // SAFETY: see above.
    unsafe { BUILDS.unlock_in_child() };
}

/// `rocblas_destroy_handle`: in the build the handle came from.
pub fn destroy_handle(h: Handle) -> Status {
    let destroy = match other_build(h) {
        Some(other) => other.destroy_handle(),
        None => HOOKS.destroy_handle(),
    };
    forget(h as usize);
    match destroy {
        // SAFETY: the caller's own handle.
        Some(f) => unsafe { f(h) },
        None => STATUS_NOT_IMPLEMENTED,
    }
}

/// Records which build a new handle belongs to: 1 for the served build (pinning it if none
/// was yet, switching to `b` if the served one is gone), 2.. for another build still
/// loaded beside it, 0 when it cannot be told (the lock was not free in time).
fn note_build(b: &Build) -> usize {
    let Some(mut builds) = BUILDS.lock_within(Duration::from_secs(2)) else {
        return 0;
    };
    match &builds.served {
        None => {
            HOOKS.rescope(Some(b.path.clone()));
            builds.served = Some(b.clone());
            1
        }
        Some(s) if s == b => 1,
        Some(s) if !is_loaded(s) => {
            info!(
                "rocBLAS {} was unloaded and {} loaded: serving the new build from now on",
                s.path.to_string_lossy(),
                b.path.to_string_lossy()
            );
            HOOKS.rescope(Some(b.path.clone()));
            builds.served = Some(b.clone());
            builds.others.retain(|o| o != b);
            crate::runtime::library_changed();
            1
        }
        Some(s) => {
            if let Some(i) = builds.others.iter().position(|o| o == b) {
                return i + 2;
            }
            if builds.others.len() >= OTHERS {
                return 0;
            }
            info!(
                "a second rocBLAS build ({}) is loaded beside the one served ({}); its calls go to it untouched",
                b.path.to_string_lossy(),
                s.path.to_string_lossy()
            );
            let i = builds.others.len();
            OTHER_HOOKS[i].store(
                Hooks::in_library(b.path.clone()) as *const Hooks as *mut Hooks,
                Ordering::Release,
            );
            builds.others.push(b.clone());
            MULTI.store(true, Ordering::Release);
            crate::serve::close_pass_gate();
            i + 2
        }
    }
}
