//! Which hipBLASLt a descriptor or layout call belongs to.
//!
//! `hipblasLtMatmul` carries a handle, and a handle says which build made it (`libs.rs`).
//! The descriptor and layout functions carry none, yet the interposer exports them (to keep
//! what hipBLASLt will not read back, `objects.rs`), so it must hand each call to the
//! hipBLASLt its caller links: a module linked against a second build must get that build's
//! objects (an object of one build handed to another's matmul corrupts its heap), and a
//! build whose file name is not `libhipblaslt.so*` in a local scope (found by no global
//! search) must still get its calls; PyTorch makes its first descriptor before its first
//! handle, so the handle's build is not known yet either.
//!
//! So each of these exports is entered through a naked trampoline that passes the caller's
//! return address on, and the real function is looked up in the caller's own scope
//! (`dlopen(caller, RTLD_NOLOAD)` + `dlsym`), once per call site: an insert-only table of
//! (return address -> function) per export answers every later call with a load and a
//! compare or two. A caller that is the main program (whose scope is the global one), or
//! one whose scope has no hipBLASLt, gets the served build's function (`real.rs`).
//! A hipBLASLt whose function was handed out this way is pinned (`RTLD_NODELETE`): a
//! `dlclose` of the module that loaded it leaves it mapped, so no kept function ever points
//! into freed memory (its destructors then run at exit; PyTorch never unloads it anyway).

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::real::Hook;

/// Call sites kept per export (insert-only; past this many, calls are resolved each time).
const SLOTS: usize = 128;
/// A slot being filled.
const BUSY: usize = usize::MAX;

/// One export's cache of call sites: open addressing, insert-only. A slot's function is
/// written before its return address is published and neither ever changes, so a reader
/// that sees an address sees that address's function; nothing is evicted, so a process
/// with many call sites never thrashes into the slow path.
pub struct Callers {
    name: &'static CStr,
    rets: [AtomicUsize; SLOTS],
    fns: [AtomicPtr<c_void>; SLOTS],
}

impl Callers {
    pub const fn new(name: &'static CStr) -> Callers {
        Callers {
            name,
            rets: [const { AtomicUsize::new(0) }; SLOTS],
            fns: [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS],
        }
    }

    /// The real function for a caller at return address `ret`; `usual` is the hook (of
    /// `HIPLT`) the function is found by otherwise, in the served build's scope.
    #[inline]
    pub fn real_for(&self, ret: *const c_void, usual: &Hook) -> Option<*mut c_void> {
        let r = ret as usize;
        let home = (r >> 2).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (usize::BITS - 7);
        for step in 0..SLOTS {
            let i = (home + step) & (SLOTS - 1);
            match self.rets[i].load(Ordering::Acquire) {
                seen if seen == r => return Some(self.fns[i].load(Ordering::Relaxed)),
                0 => return self.resolve(i, r, ret, usual),
                _ => {} // another call site, or one being filled: look further
            }
        }
        self.resolve(SLOTS, r, ret, usual)
    }

    /// [`Callers::real_for`] as the function type `F` of this export.
    ///
    /// # Safety
    /// `F` is the C type of the function this cache was made for (its `name`).
    #[inline]
    pub unsafe fn real_fn<F: Copy>(&self, ret: *const c_void, usual: &Hook) -> Option<F> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
        // SAFETY: per the contract; a function pointer is pointer-sized (checked above).
        self.real_for(ret, usual)
            .map(|p| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    /// Resolves the function for `ret` and keeps it in slot `i` if that slot is still free
    /// (another thread may have taken it meanwhile: then this call is simply not cached).
    #[cold]
    #[inline(never)]
    fn resolve(&self, i: usize, r: usize, ret: *const c_void, usual: &Hook) -> Option<*mut c_void> {
        let _errno = crate::lifecycle::KeepErrno::new();
        // (A copy that stands aside takes the first copy's export, as its hooks do.)
        let own = (!crate::copies::aside())
            .then(|| crate::libs::caller_scope(ret))
            .flatten()
            .and_then(|lib| crate::real::resolve_in(self.name, &lib));
        let f = own.or_else(|| super::real::in_served_scope(usual))?;
        // The library holding `f` stays loaded for the process (RTLD_NODELETE), so a kept
        // function can never point into an unloaded library.
        crate::real::pin_object_of(f);
        if i < SLOTS
            && self.rets[i]
                .compare_exchange(0, BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            self.fns[i].store(f, Ordering::Relaxed);
            self.rets[i].store(r, Ordering::Release);
        }
        Some(f)
    }
}

/// Exports entered through a trampoline that appends the caller's return address as one
/// more argument (in the first free argument register) before jumping to `$inner`.
macro_rules! with_caller {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $inner:path, x86: $x86:literal, arm: $arm:literal) => {
        $(#[$m])*
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // At entry the return address is at the top of the stack.
            std::arch::naked_asm!(concat!("mov ", $x86, ", [rsp]"), "jmp {inner}", inner = sym $inner)
        }
        $(#[$m])*
        #[cfg(target_arch = "aarch64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // The link register holds the return address.
            std::arch::naked_asm!(concat!("mov ", $arm, ", x30"), "b {inner}", inner = sym $inner)
        }
    };
}
pub(crate) use with_caller;
