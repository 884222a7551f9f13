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
//! (`dlopen(caller, RTLD_NOLOAD)` + `dlsym`), once per call site: a direct-mapped cache of
//! 64 (return address -> function) slots per export answers every later call with one load
//! and one compare. A caller that is the main program (whose scope is the global one), or
//! one whose scope has no hipBLASLt, gets the function found the usual way (`real.rs`).

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::real::Hook;

const SLOTS: usize = 64;

/// One export's cache of call sites.
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

    /// The real function for a caller at return address `ret`; `usual` is the hook the
    /// function is found by otherwise.
    #[inline]
    pub fn real_for(&self, ret: *const c_void, usual: &Hook) -> Option<*mut c_void> {
        let r = ret as usize;
        let i = (r >> 2).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (usize::BITS - 6);
        // The function is stored before the address (Release), so an address seen
        // (Acquire) comes with its function.
        if self.rets[i].load(Ordering::Acquire) == r {
            let f = self.fns[i].load(Ordering::Relaxed);
            if !f.is_null() {
                return Some(f);
            }
        }
        self.resolve(i, r, ret, usual)
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self, i: usize, r: usize, ret: *const c_void, usual: &Hook) -> Option<*mut c_void> {
        let own =
            crate::libs::caller_scope(ret).and_then(|lib| crate::real::resolve_in(self.name, &lib));
        let f = own.or_else(|| usual.get())?;
        // A slot another call site holds is taken over (direct-mapped): invalidate, then
        // publish the function before the address.
        self.rets[i].store(0, Ordering::Release);
        self.fns[i].store(f, Ordering::Relaxed);
        self.rets[i].store(r, Ordering::Release);
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
