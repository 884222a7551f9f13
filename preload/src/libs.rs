//! Which library build a call belongs to, as libraries come and go: one [`BuildRegistry`] per
//! backend (rocBLAS handles from `rocblas_create_handle`, cuBLASLt handles from
//! `cublasLtCreate`); the rocBLAS case is told here.
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
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::time::Duration;

use tunedblas_core::address_map::AddressMap;
use tunedblas_core::identity;

use crate::lifecycle::ExitLock;
use crate::log::info;
use crate::real::Scoped;

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

/// Other builds' hook tables; a handle's map entry names one by index + 2.
const OTHERS: usize = 8;

/// Handles alive at once that are kept.
const SLOTS: usize = 4096;

/// One backend's handles: handle -> `build << 32 | device + 1` (`build` 0 when unknown, 1
/// for the served build, 2.. for the others, `others[build - 2]`), in a lock-free address
/// map (`tunedblas_core::address_map`). A destroyed handle's slot is freed for the next
/// one, so a process that makes and destroys handles at changing addresses never fills it.
/// Its writers are out of line (they run at a handle's create and destroy only).
///
/// All zero when made, so each backend's table (98 KB) lies in `.bss`, apart from its
/// [`BuildRegistry`] (which names its backend, so it is initialized: `.data`).
pub struct Handles {
    map: AddressMap<1, SLOTS>,
    /// Set once any handle is in the map (then device lookups are worth a probe).
    any: AtomicBool,
    /// The line for a handle that could not be kept was said.
    full_said: AtomicBool,
}

impl Handles {
    pub const fn new() -> Handles {
        Handles {
            map: AddressMap::new(),
            any: AtomicBool::new(false),
            full_said: AtomicBool::new(false),
        }
    }

    /// The handle's `build << 32 | device + 1`, if it was made through us and is alive.
    #[inline(always)]
    fn meta(&self, h: usize) -> Option<u64> {
        self.map.get(h).map(|[m]| m)
    }

    #[inline(never)]
    fn remember(&self, what: &str, h: usize, build: usize, device: i32) {
        let meta = ((build as u64) << 32) | u64::from((device as u32).wrapping_add(1));
        if self.map.insert(h, [meta]) {
            self.any.store(true, Ordering::Release);
        } else if !self.full_said.swap(true, Ordering::Relaxed) {
            // Full around its home: the handle is served as the first build's, on the
            // thread's current device (as before this map existed).
            info!(
                "{what}: {} handles are alive at once, as many as the interposer keeps around a new one's address (it keeps up to {SLOTS}); calls on one it could not keep go to the first build, on the calling thread's device, and handles made once others are destroyed are kept again",
                self.map.live()
            );
        }
    }

    #[inline(never)]
    fn forget(&self, h: usize) {
        self.map.remove(h);
    }
}

/// What a backend's registry needs to know of it.
pub struct BuildSpec<H: 'static> {
    /// "rocBLAS" or "cuBLASLt", for messages.
    pub what: &'static str,
    /// The function that makes a handle (asked of the caller's own scope).
    pub create: &'static CStr,
    /// The table of the served build.
    pub hooks: &'static H,
    /// The served build was unloaded and another took its place: start again for it.
    pub changed: fn(),
    /// A second build appeared beside the served one (before its first handle exists).
    pub several: fn(),
    /// The device a handle made now belongs to.
    pub device: fn() -> i32,
    /// A handle is made by the served build: `create` is the function that makes it.
    pub serving: fn(*mut c_void),
}

/// Where a registry's handles are: a static of the backend's own ([`handle_store!`]), all
/// zero, so in `.bss` (the registry names its backend, so it is initialized: `.data`), and
/// found at a fixed address (a reference kept in the registry would cost a load on every
/// lookup: rocBLAS's repeated miss asks one per call).
pub trait HandleStore: 'static {
    fn handles() -> &'static Handles;
}

/// Declares `$name`, a [`HandleStore`] with a table of its own.
macro_rules! handle_store {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        pub struct $name;
        impl $crate::libs::HandleStore for $name {
            #[inline(always)]
            fn handles() -> &'static $crate::libs::Handles {
                static HANDLES: $crate::libs::Handles = $crate::libs::Handles::new();
                &HANDLES
            }
        }
    };
}
pub(crate) use handle_store;

/// The builds and handles of one backend (its handles in `S`'s table).
pub struct BuildRegistry<H: 'static, S: HandleStore> {
    backend: BuildSpec<H>,
    builds: ExitLock<Builds>,
    others: [AtomicPtr<H>; OTHERS],
    /// Set once a handle of another build is about to be made: calls then look their
    /// handle up.
    multi: AtomicBool,
    handles: std::marker::PhantomData<S>,
}

impl<H: Scoped, S: HandleStore> BuildRegistry<H, S> {
    pub const fn new(backend: BuildSpec<H>) -> BuildRegistry<H, S> {
        BuildRegistry {
            backend,
            builds: ExitLock::new(Builds {
                served: None,
                others: Vec::new(),
            }),
            others: [const { AtomicPtr::new(std::ptr::null_mut()) }; OTHERS],
            multi: AtomicBool::new(false),
            handles: std::marker::PhantomData,
        }
    }

    fn remember(&self, h: usize, build: usize, device: i32) {
        S::handles().remember(self.backend.what, h, build, device);
    }

    fn forget(&self, h: usize) {
        S::handles().forget(h);
    }

    /// The hooks of the other build `h` belongs to, if it belongs to one: its calls go
    /// there untouched. One relaxed load while a single build is in use.
    #[inline(always)]
    pub fn other_build(&self, h: *mut c_void) -> Option<&'static H> {
        if !self.multi.load(Ordering::Relaxed) {
            return None;
        }
        self.other_build_slow(h)
    }

    /// Whether a handle of another build was ever made (calls then look their handle up).
    pub fn several_builds(&self) -> bool {
        self.multi.load(Ordering::Acquire)
    }

    #[cold]
    #[inline(never)]
    fn other_build_slow(&self, h: *mut c_void) -> Option<&'static H> {
        let build = (S::handles().meta(h as usize)? >> 32) as usize;
        if build < 2 {
            return None;
        }
        // SAFETY: a non-null entry is a leaked table, never freed.
        unsafe { self.others.get(build - 2)?.load(Ordering::Acquire).as_ref() }
    }

    /// The device handle `h` was made on, if it was made through us. (Inline, as the
    /// lookup it replaced was: rocBLAS's repeated miss asks it on every call, and an
    /// out-of-line call here cost that path 14 instructions, docs/benchmarks/history.md.)
    #[inline(always)]
    pub fn device_of(&self, h: *mut c_void) -> Option<i32> {
        if !S::handles().any.load(Ordering::Relaxed) {
            return None;
        }
        let device = (S::handles().meta(h as usize)? & 0xffff_ffff) as u32;
        (device != 0).then(|| device.wrapping_sub(1) as i32)
    }

    /// Makes a handle into `out` for a caller whose return address is `ret`, with the
    /// create function of the build the caller links, else `ours()` (the served table's,
    /// looked up only then).
    /// Both backends' create functions have one C shape, `int create(void **out)`, with
    /// 0 for success. `None` when there is no create function at all.
    pub fn create(
        &self,
        out: *mut *mut c_void,
        ret: *const c_void,
        ours: impl FnOnce() -> Option<*mut c_void>,
    ) -> Option<i32> {
        type CreateFn = unsafe extern "C" fn(*mut *mut c_void) -> i32;
        if crate::copies::aside() {
            // Another copy of tunedblas serves this process: its export makes the handle.
            let f = ours()?;
            // SAFETY: as below.
            return Some(unsafe { std::mem::transmute::<*mut c_void, CreateFn>(f)(out) });
        }
        let errno = crate::lifecycle::KeepErrno::new();
        let caller = build_of_caller(ret, self.backend.create);
        let index = match &caller {
            Some((build, _)) => self.note_build(build),
            None => 0,
        };
        // The caller's own build's function whenever the caller could be told (a build
        // whose file is not named as the global search expects, in a local scope, is
        // found only there); the served table's otherwise.
        let f = match (&caller, index) {
            (Some((_, f)), i) if i >= 1 => {
                if i == 1 {
                    (self.backend.serving)(*f);
                }
                *f
            }
            // Not known (no caller, or the build could not be recorded: the handle is then
            // the served build's, so it is made there, as its calls will be served there).
            _ => {
                let f = ours()?;
                (self.backend.serving)(f);
                f
            }
        };
        drop(errno);
        // SAFETY: both create functions have this C signature (rocblas.h, cublasLt.h);
        // `out` is the caller's own out-pointer.
        let status = unsafe { std::mem::transmute::<*mut c_void, CreateFn>(f)(out) };
        // What the real create left in errno is what the caller sees, not our device query.
        let _errno = crate::lifecycle::KeepErrno::new();
        if status == 0 && !out.is_null() {
            // SAFETY: the real function wrote the handle when it succeeded.
            let h = unsafe { *out };
            if !h.is_null() {
                self.remember(h as usize, index, (self.backend.device)());
            }
        }
        Some(status)
    }

    /// A handle destroyed: forgotten. Returns the table of the build it belongs to, if it
    /// is not the served one.
    pub fn destroyed(&self, h: *mut c_void) -> Option<&'static H> {
        let other = self.other_build(h);
        self.forget(h as usize);
        other
    }

    /// A handle destroyed: forgotten, and the destroy function of the build it came from
    /// (`pick` takes it from a build's table), else the served build's.
    pub fn destroy_fn<F>(
        &self,
        h: *mut c_void,
        pick: impl Fn(&'static H) -> Option<F>,
    ) -> Option<F> {
        pick(self.destroyed(h).unwrap_or(self.backend.hooks))
    }

    /// In a fork child: a parent's thread may have held the builds' lock at the fork; free
    /// it, so the child's handles are not each kept waiting two seconds. (Holders mostly
    /// compare; only a fork landing inside the push of a newly seen build could leave the
    /// list torn, and only builds loaded beside the served one are ever pushed.)
    ///
    /// # Safety
    /// Only from the fork child handler, with no other thread alive.
    pub unsafe fn after_fork(&self) {
        // SAFETY: see above.
        unsafe { self.builds.unlock_in_child() };
    }

    /// Records which build a new handle belongs to: 1 for the served build (pinning it if
    /// none was yet, switching to `b` if the served one is gone), 2.. for another build
    /// still loaded beside it, 0 when it cannot be told (the lock was not free in time).
    fn note_build(&self, b: &Build) -> usize {
        let Some(mut builds) = self.builds.lock_within(Duration::from_secs(2)) else {
            return 0;
        };
        let what = self.backend.what;
        match &builds.served {
            None => {
                self.backend.hooks.rescope(Some(b.path.clone()));
                builds.served = Some(b.clone());
                1
            }
            Some(s) if s == b => 1,
            Some(s) if !is_loaded(s) => {
                info!(
                    "{what} {} was unloaded and {} loaded: serving the new build from now on",
                    s.path.to_string_lossy(),
                    b.path.to_string_lossy()
                );
                self.backend.hooks.rescope(Some(b.path.clone()));
                builds.served = Some(b.clone());
                builds.others.retain(|o| o != b);
                (self.backend.changed)();
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
                    "a second {what} build ({}) is loaded beside the one served ({}); its calls go to it untouched",
                    b.path.to_string_lossy(),
                    s.path.to_string_lossy()
                );
                let i = builds.others.len();
                self.others[i].store(
                    H::in_library(b.path.clone()) as *const H as *mut H,
                    Ordering::Release,
                );
                builds.others.push(b.clone());
                self.multi.store(true, Ordering::Release);
                (self.backend.several)();
                i + 2
            }
        }
    }
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

/// The file of the object that called from return address `ret`, whose own scope a
/// function can be looked up in; `None` for the main program (its scope is the global
/// one), for ourselves, or when it cannot be told.
pub fn caller_scope(ret: *const c_void) -> Option<CString> {
    let (base, caller) = object_of(ret)?;
    if crate::copies::is_tunedblas(ret) || is_main_program(base) {
        return None;
    }
    Some(caller)
}

/// The build a caller at return address `ret` links: its own scope's `create` function
/// (and that function). `None` when the caller is the main program (its scope is the
/// global one), or cannot be told.
fn build_of_caller(ret: *const c_void, create: &CStr) -> Option<(Build, *mut c_void)> {
    let caller = caller_scope(ret)?;
    let f = crate::real::resolve_in(create, &caller)?;
    let (base, path) = object_of(f)?;
    Some((Build { base, path }, f))
}

/// The build a backend serves, identified from the address of one of its functions: the
/// file it was loaded from (checked to be the inode actually mapped) and its sha256
/// (through the per-user hash cache). `Err` is the start-up line saying why it cannot be
/// identified; `what` names the library in it.
pub fn identify_loaded(
    anchor: *const c_void,
    what: &str,
) -> Result<(PathBuf, identity::Identity), String> {
    let Some(path) = identity::library_of_address(anchor as usize) else {
        return Err(format!(
            "cannot tell which file {what} was loaded from; passing calls through and recording misses"
        ));
    };
    if identity::check_mapped_file(anchor as usize, &path) == identity::MapCheck::Replaced {
        return Err(format!(
            "{} was replaced on disk after this process loaded it, so the running build cannot be identified; restart the process to serve tuned rows",
            path.display()
        ));
    }
    let cache = identity::HashCache::for_user();
    if let Some(why) = cache.refused() {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            info!("the hash cache {why}: each start hashes the library (set TUNEDBLAS_CACHE_DIR to a folder of yours)");
        }
    }
    match cache.identify(&path) {
        Ok(id) => Ok((path, id)),
        Err(e) => Err(format!(
            "cannot hash {}: {e}; passing calls through",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cublaslt::real::{LtHooks, LT};

    handle_store!(TestHandles);
    static R: BuildRegistry<LtHooks, TestHandles> = BuildRegistry::new(BuildSpec {
        what: "test",
        create: c"cublasLtCreate",
        hooks: &LT,
        changed: || {},
        several: || {},
        device: || 0,
        serving: |_| {},
    });

    /// Handles made and destroyed at ever new addresses, far more than the map has
    /// slots: each is known (its device) while it lives and forgotten once destroyed,
    /// and the map never fills (it kept destroyed handles' keys and filled up).
    #[test]
    fn handles_made_and_destroyed_at_changing_addresses_never_fill_the_map() {
        let mut alive = std::collections::VecDeque::new();
        for n in 1..=(4 * SLOTS) {
            let h = n * 0x30;
            let device = (n % 7) as i32;
            R.remember(h, 1, device);
            alive.push_back((h, device));
            if alive.len() > 4 {
                let (old, _) = alive.pop_front().unwrap();
                R.destroyed(old as *mut c_void);
                assert_eq!(R.device_of(old as *mut c_void), None, "handle {n}");
            }
            for &(h, d) in &alive {
                assert_eq!(R.device_of(h as *mut c_void), Some(d), "handle {n}");
            }
        }
        assert!(
            !TestHandles::handles().full_said.load(Ordering::Relaxed),
            "never full"
        );
        assert_eq!(TestHandles::handles().map.live(), 4);
    }
}
