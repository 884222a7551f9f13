//! Which Lt library a descriptor or layout call belongs to.
//!
//! `cublasLtMatmul` and `hipblasLtMatmul` carry a handle, and a handle says which build
//! made it (`libs.rs`). The descriptor and layout functions carry none, yet the interposer
//! exports them (to keep what the key needs as it is set, `lt/objects.rs`), so it must hand
//! each call to the library its caller links: a module linked against a second build must
//! get that build's objects (an object of one build handed to another's matmul corrupts its
//! heap), and a build whose file name is not the usual one, in a local scope (found by no
//! global search), must still get its calls; PyTorch may make its first descriptor before
//! its first handle, so the handle's build is not known yet either.
//!
//! So each of these exports is entered through a naked trampoline that passes the caller's
//! return address on ([`with_caller`]), and the real function is looked up in the caller's
//! own scope (`dlopen(caller, RTLD_NOLOAD)` + `dlsym`), once per call site: a table of
//! (return address -> function) per export answers every later call with a hash and a few
//! loads. A caller that is the main program (whose scope is the global one), or one whose
//! scope has no such library, gets the served build's function.
//!
//! # Libraries unloaded
//!
//! A kept function points into a library that a `dlclose` may unload; a module loaded
//! afterwards may then sit at the old module's addresses, so one of its call sites can have
//! a kept return address and be handed a function of a library that is gone (or of another
//! build). Libraries are not pinned for this (a pinned served build could never be closed
//! and replaced, which `libs.rs` serves). Instead every entry carries the loader
//! [`generation`] it was found in, and the interposer's `dlclose` (exports.rs) moves the
//! generation on before and after the real one: an entry of an older generation is looked
//! up again, in the caller's scope as it is now. Every `dlclose` but the interposer's own
//! (`RTLD_NOLOAD` lookups, which unload nothing) moves it, so a host that closes libraries
//! now and then pays one lookup per call site after each; calls in between pay one more
//! load and compare.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::real::Hook;

/// A hook resolved in the served build's scope (each backend's `real::in_served_scope`).
pub type Served = fn(&Hook) -> Option<*mut c_void>;

/// Call sites kept per export (past this many live ones, calls are resolved each time).
const SLOTS: usize = 128;

/// The loader generation: moved on around every `dlclose` a host makes.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// The loader generation now (see the module docs).
#[inline(always)]
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// A host's `dlclose` is about to run, or has run: entries found before are looked up
/// again.
pub fn loader_changed() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// One call site: a small sequence lock (odd while a writer is inside) over its return
/// address, the generation it was looked up in and the function.
struct Slot {
    seq: AtomicU64,
    ret: AtomicUsize,
    generation: AtomicU64,
    f: AtomicPtr<c_void>,
    /// For a create: its library's set and destroy functions (`&'static Fns`; 0: not found).
    fns: AtomicU64,
}

/// One export's cache of call sites: open addressing; a slot of an older generation is
/// taken by the next call site that needs one, so unloads never fill it up. The slots
/// first (`repr(C)`), so a slot's address is the cache's plus its offset alone.
#[repr(C)]
pub struct Callers {
    slots: [Slot; SLOTS],
    name: &'static CStr,
    /// The line for a call site that found no slot was said.
    full_said: std::sync::atomic::AtomicBool,
    /// For a create: the names of the set and destroy functions of its objects, found
    /// beside it ([`Fns`]: `Objects` keeps them with each object, so a set or a destroy
    /// needs no lookup of its call site).
    fns: Option<(&'static CStr, &'static CStr)>,
}

impl Callers {
    pub const fn new(name: &'static CStr) -> Callers {
        Callers::with_fns(name, None)
    }

    /// The cache of a create export, which also finds `fns` (set, destroy) in the library
    /// of each create function it finds.
    pub const fn with_fns(
        name: &'static CStr,
        fns: Option<(&'static CStr, &'static CStr)>,
    ) -> Callers {
        Callers {
            name,
            full_said: std::sync::atomic::AtomicBool::new(false),
            fns,
            slots: [const {
                Slot {
                    seq: AtomicU64::new(0),
                    ret: AtomicUsize::new(0),
                    generation: AtomicU64::new(0),
                    f: AtomicPtr::new(std::ptr::null_mut()),
                    fns: AtomicU64::new(0),
                }
            }; SLOTS],
        }
    }

    /// A call site's first slot: one multiply of its return address, high bits kept; the
    /// golden ratio's multiplier divided by 4 stands for a shift of the address by 2 first
    /// (as `address_map`'s home).
    #[inline(always)]
    fn home(r: usize) -> usize {
        (r.wrapping_mul(0x9e37_79b9_7f4a_7c15 >> 2) >> (usize::BITS - SLOTS.trailing_zeros()))
            & (SLOTS - 1)
    }

    /// The function (and a create's [`Fns`]) kept in slot `i` for the call site `r`, if
    /// kept there and of this generation.
    #[inline(always)]
    fn kept(&self, i: usize, r: usize) -> Option<(*mut c_void, u64)> {
        // SAFETY: masked with SLOTS - 1.
        let s = unsafe { self.slots.get_unchecked(i & (SLOTS - 1)) };
        let seq = s.seq.load(Ordering::Acquire);
        if s.ret.load(Ordering::Relaxed) != r {
            return None;
        }
        let f = s.f.load(Ordering::Relaxed);
        // (0 in the cache of an export that is not a create: read without asking.)
        let d = s.fns.load(Ordering::Relaxed);
        let g = s.generation.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (seq & 1 == 0 && g == generation() && s.seq.load(Ordering::Relaxed) == seq)
            .then_some((f, d))
    }

    /// The real function for a caller at return address `ret` (and, for a create, the
    /// [`Fns`] beside it); `usual` is the hook (of the served build's table) the
    /// function is found by otherwise, with `served` (the hook resolved in the served
    /// build's scope). A call site's home slot is looked at here; the rest of its probe
    /// out of line.
    #[inline(always)]
    pub fn real_for(
        &self,
        ret: *const c_void,
        usual: &Hook,
        served: Served,
    ) -> Option<(*mut c_void, u64)> {
        let r = ret as usize;
        match self.kept(Self::home(r), r) {
            Some(f) => Some(f),
            None => self.probe(r, ret, usual, served),
        }
    }

    /// The function (and a create's [`Fns`]) kept for the call site `ret` in its home
    /// slot, as the function type `F`: `None` if not there or of an older generation (then
    /// [`Callers::real_fn_and_fns`], out of line).
    ///
    /// # Safety
    /// As [`Callers::real_fn`].
    #[inline(always)]
    pub unsafe fn home_fn_and_fns<F: Copy>(&self, ret: *const c_void) -> Option<(F, u64)> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
        let r = ret as usize;
        // SAFETY: per the contract; a function pointer is pointer-sized (checked above).
        self.kept(Self::home(r), r)
            .map(|(p, d)| (unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }, d))
    }

    /// [`Callers::real_for`] past the home slot: the rest of the probe, else the lookup.
    #[cold]
    #[inline(never)]
    fn probe(
        &self,
        r: usize,
        ret: *const c_void,
        usual: &Hook,
        served: Served,
    ) -> Option<(*mut c_void, u64)> {
        let home = Self::home(r);
        for step in 1..SLOTS {
            let i = (home + step) & (SLOTS - 1);
            if let Some(f) = self.kept(i, r) {
                return Some(f);
            }
            if self.slots[i].ret.load(Ordering::Relaxed) == 0 {
                break;
            }
        }
        self.resolve(r, ret, usual, served)
    }

    /// [`Callers::real_for`] as the function type `F` of this export.
    ///
    /// # Safety
    /// `F` is the C type of the function this cache was made for (its `name`).
    #[inline(always)]
    pub unsafe fn real_fn<F: Copy>(
        &self,
        ret: *const c_void,
        usual: &Hook,
        served: Served,
    ) -> Option<F> {
        // SAFETY: per the contract.
        unsafe { self.real_fn_and_fns(ret, usual, served) }.map(|(f, _)| f)
    }

    /// [`Callers::real_fn`], with the [`Fns`] beside it (a create's, as `&'static Fns`;
    /// 0: none).
    ///
    /// # Safety
    /// As [`Callers::real_fn`].
    #[inline(always)]
    pub unsafe fn real_fn_and_fns<F: Copy>(
        &self,
        ret: *const c_void,
        usual: &Hook,
        served: Served,
    ) -> Option<(F, u64)> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
        // SAFETY: per the contract; a function pointer is pointer-sized (checked above).
        self.real_for(ret, usual, served)
            .map(|(p, d)| (unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }, d))
    }

    /// Resolves the function for the call site `r` in the caller's scope as it is now, and
    /// keeps it with the generation read before the lookup (a `dlclose` meanwhile makes it
    /// looked up again).
    #[cold]
    #[inline(never)]
    fn resolve(
        &self,
        r: usize,
        ret: *const c_void,
        usual: &Hook,
        served: Served,
    ) -> Option<(*mut c_void, u64)> {
        let _errno = crate::lifecycle::KeepErrno::new();
        if crate::lifecycle::in_fork_child() {
            if let Some(kept) = self.in_fork_child(r, usual) {
                return Some(kept);
            }
        }
        let now = generation();
        // (A copy that stands aside takes the first copy's export, as its hooks do.)
        let own = (!crate::copies::aside())
            .then(|| crate::libs::caller_scope(ret))
            .flatten()
            .and_then(|lib| crate::real::resolve_in(self.name, &lib));
        let f = match own {
            Some(f) => f,
            None => {
                // The served build's, found again: the library the hook found it in may
                // have been unloaded since.
                usual.forget();
                served(usual)?
            }
        };
        let d = self.fns.map_or(0, |(set, destroy)| {
            Fns::register(beside(f, set), beside(f, destroy))
        });
        self.keep(r, now, f, d);
        Some((f, d))
    }

    /// A fork child's function for the call site `r` without the loader: a fork taken
    /// while another thread of the parent was inside `dlopen` or `dlclose` leaves the
    /// loader's lists mid-change and its lock held in the child, and a lookup there aborted
    /// the child (`dl_open_worker_begin: Assertion ... RT_CONSISTENT`) or hung it (an
    /// outside tester's host: 119 and 38 of 200 children). So the child takes what its
    /// parent found for this call site, of any generation (a `dlclose` since moved it on,
    /// though the caller's own library, loaded while its module is, is still there), else
    /// the served build's function if the parent found it; only with neither does it ask
    /// the loader.
    #[cold]
    fn in_fork_child(&self, r: usize, usual: &Hook) -> Option<(*mut c_void, u64)> {
        let home = Self::home(r);
        for step in 0..SLOTS {
            let s = &self.slots[(home + step) & (SLOTS - 1)];
            let seq = s.seq.load(Ordering::Acquire);
            let seen = s.ret.load(Ordering::Relaxed);
            if seen == 0 {
                break;
            }
            let (f, d) = (s.f.load(Ordering::Relaxed), s.fns.load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if seen == r && seq & 1 == 0 && s.seq.load(Ordering::Relaxed) == seq && !f.is_null() {
                return Some((f, d));
            }
        }
        // (A create's set and destroy functions need the loader to be found: none then.)
        usual.found().map(|f| (f, 0))
    }

    /// Keeps `f` for the call site `r`: in its own slot, else the first free slot or one of
    /// an older generation on its probe (a slot another writer is in is left to it).
    fn keep(&self, r: usize, now: u64, f: *mut c_void, d: u64) {
        let home = Self::home(r);
        for step in 0..SLOTS {
            let s = &self.slots[(home + step) & (SLOTS - 1)];
            let seen = s.ret.load(Ordering::Relaxed);
            let stale = s.generation.load(Ordering::Relaxed) != generation();
            if seen != r && seen != 0 && !stale {
                continue;
            }
            let seq = s.seq.load(Ordering::Relaxed);
            if seq & 1 != 0
                || s.seq
                    .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            fence(Ordering::Release);
            s.ret.store(r, Ordering::Relaxed);
            s.f.store(f, Ordering::Relaxed);
            s.fns.store(d, Ordering::Relaxed);
            s.generation.store(now, Ordering::Relaxed);
            s.seq.store(seq + 2, Ordering::Release);
            return;
        }
        // Every slot holds a live call site of this generation: this one is looked up
        // through the loader on each call (slower, never wrong). Said once.
        if !self.full_said.swap(true, Ordering::Relaxed) {
            crate::log::info!(
                "{}: more than {SLOTS} call sites call it; the calls of the others are looked up through the loader each time (slower, results unchanged)",
                self.name.to_string_lossy()
            );
        }
    }
}

/// One library's set-attribute and destroy functions for one kind of object, kept with
/// each object it made (`lt/objects.rs`): a set or a destroy then goes to the library that
/// made its object without a lookup of its call site. Registered once per library and kind
/// (at most [`FNS`] over a process's life; past that, objects go without and their calls
/// are routed by call site), never changed or freed: an object alive means its library is
/// loaded, so its functions are there.
pub struct Fns {
    set: AtomicPtr<c_void>,
    destroy: AtomicPtr<c_void>,
}

/// Libraries' function pairs a process may register.
const FNS: usize = 64;
static REGISTERED: [Fns; FNS] = [const {
    Fns {
        set: AtomicPtr::new(std::ptr::null_mut()),
        destroy: AtomicPtr::new(std::ptr::null_mut()),
    }
}; FNS];
static CLAIMED: AtomicUsize = AtomicUsize::new(0);

impl Fns {
    /// The pair (`set`, `destroy`) as a word an object keeps (0: either missing, or no
    /// room): the one registered, else a new registration.
    pub(crate) fn register(set: u64, destroy: u64) -> u64 {
        if set == 0 || destroy == 0 {
            return 0;
        }
        let (set, destroy) = (set as *mut c_void, destroy as *mut c_void);
        let seen = CLAIMED.load(Ordering::Acquire).min(FNS);
        if let Some(f) = REGISTERED[..seen].iter().find(|f| {
            f.set.load(Ordering::Acquire) == set && f.destroy.load(Ordering::Acquire) == destroy
        }) {
            return f as *const Fns as u64;
        }
        let i = CLAIMED.fetch_add(1, Ordering::AcqRel);
        let Some(f) = REGISTERED.get(i) else {
            return 0;
        };
        f.set.store(set, Ordering::Release);
        f.destroy.store(destroy, Ordering::Release);
        f as *const Fns as u64
    }

    /// The pair an object kept (its word), if any.
    ///
    /// # Safety
    /// `word` is 0 or a word [`Fns::register`] returned.
    #[inline(always)]
    pub unsafe fn of(word: u64) -> Option<&'static Fns> {
        // SAFETY: per the contract: a registered pair, never freed.
        unsafe { (word as *const Fns).as_ref() }
    }

    /// The set-attribute function (None while its registration is not seen yet).
    #[inline(always)]
    pub fn set(&self) -> Option<*mut c_void> {
        let p = self.set.load(Ordering::Acquire);
        (!p.is_null()).then_some(p)
    }

    /// The destroy function (None while its registration is not seen yet).
    #[inline(always)]
    pub fn destroy(&self) -> Option<*mut c_void> {
        let p = self.destroy.load(Ordering::Acquire);
        (!p.is_null()).then_some(p)
    }
}

/// `name` as the library holding `f` defines it itself (0 if it does not): a function of
/// the library a create function is in.
fn beside(f: *mut c_void, name: &CStr) -> u64 {
    let object = |p: *const c_void| {
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables.
        (unsafe { libc::dladdr(p, &mut info) } != 0 && !info.dli_fname.is_null())
            .then_some((info.dli_fbase as usize, info.dli_fname))
    };
    let Some((base, file)) = object(f) else {
        return 0;
    };
    // SAFETY: RTLD_NOLOAD only returns a handle to an object already loaded; the name is
    // the loader's own.
    let h = unsafe { libc::dlopen(file, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return 0;
    }
    // SAFETY: a live handle and a NUL-terminated name.
    let d = unsafe { libc::dlsym(h, name.as_ptr()) };
    // SAFETY: drops the reference NOLOAD took.
    unsafe { libc::dlclose(h) };
    match object(d) {
        Some((b, _)) if !d.is_null() && b == base => d as u64,
        _ => 0,
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

#[cfg(test)]
mod tests {
    use super::*;

    static HOOK: Hook = Hook::in_libs(c"tunedblas_no_such_function", &[]);
    const SERVED: Served = Hook::get;

    /// What a call site was given is kept for it until the loader generation moves on;
    /// then it is looked up again, and the slot is reused rather than another one taken.
    #[test]
    fn a_kept_function_is_looked_up_again_after_a_dlclose() {
        static C: Callers = Callers::new(c"tunedblas_no_such_function");
        let r = 0x7000_1234usize;
        let f1 = 0x1111 as *mut c_void;
        C.keep(r, generation(), f1, 0);
        assert_eq!(C.real_for(r as *const c_void, &HOOK, SERVED), Some((f1, 0)));
        loader_changed();
        // Looked up again: nothing by that name anywhere, so nothing (never the old one).
        assert_eq!(C.real_for(r as *const c_void, &HOOK, SERVED), None);
        let f2 = 0x2222 as *mut c_void;
        C.keep(r, generation(), f2, 0);
        assert_eq!(C.real_for(r as *const c_void, &HOOK, SERVED), Some((f2, 0)));
        let used = C
            .slots
            .iter()
            .filter(|s| s.ret.load(Ordering::Relaxed) != 0);
        assert_eq!(used.count(), 1, "the stale slot was reused");
    }

    /// Call sites past the table's size are still answered (looked up each time), and a
    /// generation later their slots are taken by new call sites.
    #[test]
    fn a_full_table_answers_every_call_site_and_stale_slots_are_taken_again() {
        static C: Callers = Callers::new(c"tunedblas_no_such_function");
        let f = |i: usize| (0x10_0000 + i * 16) as *mut c_void;
        let g = generation();
        for i in 0..SLOTS {
            C.keep(0x5000_0000 + i * 64, g, f(i), 0);
        }
        for i in 0..SLOTS {
            let r = (0x5000_0000 + i * 64) as *const c_void;
            assert_eq!(C.real_for(r, &HOOK, SERVED), Some((f(i), 0)), "site {i}");
        }
        assert!(!C.full_said.load(Ordering::Relaxed));
        C.keep(0x5800_0000, g, f(SLOTS), 0);
        assert!(
            C.full_said.load(Ordering::Relaxed),
            "a call site past the table's size is said"
        );
        loader_changed();
        C.keep(0x6000_0000, generation(), f(999), 0);
        assert_eq!(
            C.real_for(0x6000_0000 as *const c_void, &HOOK, SERVED),
            Some((f(999), 0))
        );
    }
}
