//! The real library's functions: one typed table, resolved lazily, each entry optional.
//!
//! Resolution order for a name:
//! 1. `dlsym(RTLD_NEXT)`: the next definition after this preload in the global scope. This
//!    is the ordinary case (the host or one of its libraries links `librocblas`).
//! 2. When rocBLAS was loaded into a local scope (`RTLD_LOCAL`, as Python loads extension
//!    modules), step 1 returns NULL although our exports still interpose the calls; then we
//!    find the loaded `librocblas.so*` with `dl_iterate_phdr`, take a handle to it with
//!    `dlopen(path, RTLD_NOLOAD)`, and `dlsym` on that handle.
//!
//! Whatever comes back is checked with `dladdr` not to lie inside this library or another
//! copy of it (that would recurse forever; `copies.rs`): past a copy, every loaded object is
//! asked in load order for a definition of its own. A copy that stands aside resolves every
//! name to the first copy's export first. A NULL is never cached: a library `dlopen`ed after
//! our first call is found on a later one.

use std::ffi::{c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// One resolvable function: its symbol name, the libraries (file-name prefixes) to search
/// when `RTLD_NEXT` finds nothing, and a cache of the address (NULL = not yet).
pub struct Hook {
    pub name: &'static CStr,
    libs: &'static [&'static str],
    addr: AtomicPtr<c_void>,
    /// When resolving last failed (monotonic ns; 0: never tried or found). A name that is
    /// not there (cuCtxGetDevice with no CUDA driver) is looked for again at most once a
    /// second, not on every call: each search walks the loader's list under its lock, which
    /// costs microseconds and is a lock a fork child could inherit held.
    failed_at: AtomicU64,
}

/// How long a failed lookup is trusted before the name is looked for again.
const RETRY_NS: u64 = 1_000_000_000;

impl Hook {
    /// A function of another library (cuBLASLt, the CUDA driver).
    pub const fn in_libs(name: &'static CStr, libs: &'static [&'static str]) -> Hook {
        Hook {
            name,
            libs,
            addr: AtomicPtr::new(std::ptr::null_mut()),
            failed_at: AtomicU64::new(0),
        }
    }

    /// The real function's address, resolving it on first use in the usual order.
    #[inline]
    pub fn get(&self) -> Option<*mut c_void> {
        static GLOBAL: Scope = Scope::global();
        self.get_in(&GLOBAL)
    }

    /// The real function's address in `scope`, resolving it on first use.
    #[inline]
    pub fn get_in(&self, scope: &Scope) -> Option<*mut c_void> {
        let p = self.addr.load(Ordering::Acquire);
        if !p.is_null() {
            return Some(p);
        }
        self.resolve_in(scope)
    }

    #[cold]
    #[inline(never)]
    fn resolve_in(&self, scope: &Scope) -> Option<*mut c_void> {
        let _errno = crate::lifecycle::KeepErrno::new();
        let failed = self.failed_at.load(Ordering::Relaxed);
        let now = crate::lifecycle::monotonic_ns();
        if failed != 0 && now.saturating_sub(failed) < RETRY_NS {
            return None;
        }
        let found = match scope.library() {
            Some(lib) => resolve_in(self.name, lib),
            None => resolve(self.name, self.libs),
        };
        match found {
            Some(p) => {
                self.addr.store(p, Ordering::Release);
                Some(p)
            }
            None => {
                self.failed_at.store(now.max(1), Ordering::Relaxed);
                None
            }
        }
    }

    /// The address found so far, if any (never resolves: for a fork child, where the
    /// loader may be mid-change).
    pub fn found(&self) -> Option<*mut c_void> {
        let p = self.addr.load(Ordering::Acquire);
        (!p.is_null()).then_some(p)
    }

    pub fn forget(&self) {
        self.addr.store(std::ptr::null_mut(), Ordering::Release);
        self.failed_at.store(0, Ordering::Relaxed);
    }
}

/// Where a table of hooks resolves: the usual order ([`resolve`]), or one library file
/// (the build a caller's handle belongs to, see `libs.rs`).
pub struct Scope(AtomicPtr<CString>);

impl Scope {
    /// The usual order (no library pinned).
    pub const fn global() -> Scope {
        Scope(AtomicPtr::new(std::ptr::null_mut()))
    }

    pub fn set(&self, lib: Option<CString>) {
        let p = lib.map_or(std::ptr::null_mut(), |l| Box::into_raw(Box::new(l)));
        self.0.store(p, Ordering::Release);
    }

    fn library(&self) -> Option<&CStr> {
        // SAFETY: a non-null scope is a leaked CString, never freed.
        unsafe { self.0.load(Ordering::Acquire).as_ref() }.map(CString::as_c_str)
    }
}

/// Whether the loaded library file `lib` (or what it links) defines `name`, not counting us.
pub fn defined_in(name: &CStr, lib: &CStr) -> bool {
    resolve_in(name, lib).is_some()
}

/// `name` in the loaded library file `lib` (and what it links), never our own.
pub fn resolve_in(name: &CStr, lib: &CStr) -> Option<*mut c_void> {
    // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already loaded.
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return None;
    }
    // SAFETY: h is a valid handle; the name is NUL-terminated.
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    // SAFETY: drops the reference NOLOAD took.
    unsafe { libc::dlclose(h) };
    (!p.is_null() && !crate::copies::is_tunedblas(p)).then_some(p)
}

/// A table of hooks that can be pinned to one library file (`libs.rs`).
pub trait Scoped: Sync + 'static {
    /// A table resolving in the library file `lib` only (leaked: callers keep it).
    fn in_library(lib: CString) -> &'static Self;
    /// From now on resolve in `lib` (None: the usual order), forgetting every address
    /// found so far: the library they were in may be gone.
    fn rescope(&self, lib: Option<CString>);
}

/// The first of `$libs` given, else `$default`.
macro_rules! libs_or {
    ($default:expr;) => {
        $default
    };
    ($default:expr; $libs:expr) => {
        $libs
    };
}

/// A typed table of hooks: `$Name` with one accessor per function, and the static
/// `$STATIC` resolving in the usual order. Each name is searched in `$default` libraries
/// (file-name prefixes) when `RTLD_NEXT` finds nothing, or in its own `in ...` list.
macro_rules! hook_table {
    ($vis:vis struct $Name:ident; static $STATIC:ident; libs = $default:expr;
     $($field:ident : $ty:ty = $sym:literal $(in $libs:expr)?),* $(,)?) => {
        /// Every function of a real library that tunedblas calls, resolved in one scope:
        /// the static table for the build being served, one more per other build a
        /// caller's handle belongs to (`libs.rs`).
        $vis struct $Name { scope: $crate::real::Scope, $(pub $field: $crate::real::Hook,)* }

        $vis static $STATIC: $Name = $Name::new();

        #[allow(dead_code)]
        impl $Name {
            const fn new() -> $Name {
                $Name {
                    scope: $crate::real::Scope::global(),
                    $($field: $crate::real::Hook::in_libs($sym, $crate::real::libs_or!($default; $($libs)?)),)*
                }
            }

            /// `hook` (one of this table's) resolved in this table's scope, as its own
            /// accessors resolve it (`Hook::get` would look in the usual order and keep
            /// what it found in the table).
            pub fn in_scope(&self, hook: &$crate::real::Hook) -> Option<*mut c_void> {
                hook.get_in(&self.scope)
            }

            $(
                #[inline]
                pub fn $field(&self) -> Option<$ty> {
                    // SAFETY: the symbol has this C signature (src/abi.rs, src/cublaslt/,
                    // from the libraries' headers).
                    self.$field.get_in(&self.scope).map(|p| unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
                }
            )*
        }

        impl $crate::real::Scoped for $Name {
            fn in_library(lib: CString) -> &'static $Name {
                let h: &'static $Name = Box::leak(Box::new($Name::new()));
                h.scope.set(Some(lib));
                h
            }

            fn rescope(&self, lib: Option<CString>) {
                self.scope.set(lib);
                $(self.$field.forget();)*
            }
        }
    };
}
pub(crate) use {hook_table, libs_or};

// The C library's functions the process-level exports call (the exec family): resolved in
// the usual order, never pinned to a rocBLAS or cuBLASLt build.
hook_table! {
    pub struct Process; static PROCESS; libs = &[];
    execve: ExecveFn = c"execve",
    execv: ExecvFn = c"execv",
    execvp: ExecvFn = c"execvp",
    execvpe: ExecveFn = c"execvpe",
    fexecve: FexecveFn = c"fexecve",
}

type ExecveFn = unsafe extern "C" fn(
    *const std::ffi::c_char,
    *const *const std::ffi::c_char,
    *const *const std::ffi::c_char,
) -> std::ffi::c_int;
type ExecvFn = unsafe extern "C" fn(
    *const std::ffi::c_char,
    *const *const std::ffi::c_char,
) -> std::ffi::c_int;
type FexecveFn = unsafe extern "C" fn(
    std::ffi::c_int,
    *const *const std::ffi::c_char,
    *const *const std::ffi::c_char,
) -> std::ffi::c_int;

fn resolve(name: &CStr, libs: &[&str]) -> Option<*mut c_void> {
    if let Some(p) = crate::copies::first_copys(name) {
        return Some(p);
    }
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT is valid from a shared object.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !p.is_null() && !crate::copies::is_tunedblas(p) {
        return Some(p);
    }
    let behind_a_copy = !p.is_null();
    for path in loaded_libraries(libs) {
        let Ok(c) = CString::new(path.into_os_string().into_encoded_bytes()) else {
            continue;
        };
        if let Some(p) = resolve_in(name, &c) {
            return Some(p);
        }
    }
    // The next definition was another copy's: the first definition in a loaded object that
    // is not a copy (the libraries above are named by their files; libc's functions are not).
    behind_a_copy.then(|| defined_by_itself(name)).flatten()
}

/// The first loaded object, in load order, that itself defines `name` and is not a copy of
/// tunedblas.
fn defined_by_itself(name: &CStr) -> Option<*mut c_void> {
    loaded_libraries(&[""]).into_iter().find_map(|path| {
        let c = CString::new(path.into_os_string().into_encoded_bytes()).ok()?;
        if c.is_empty() {
            return None; // the main program: its scope is the global one
        }
        let p = resolve_in(name, &c)?;
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables.
        let found = unsafe { libc::dladdr(p, &mut info) } != 0 && !info.dli_fname.is_null();
        // SAFETY: the loader's names are NUL-terminated.
        (found && unsafe { CStr::from_ptr(info.dli_fname) } == c.as_c_str()).then_some(p)
    })
}

/// Paths of loaded objects whose file name starts with one of `prefixes`, in load order.
pub fn loaded_libraries(prefixes: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    each_loaded(&mut |name, _, _| {
        if file_matches(prefixes, name) {
            use std::os::unix::ffi::OsStrExt;
            found.push(PathBuf::from(std::ffi::OsStr::from_bytes(name)));
        }
        false
    });
    found
}

/// Whether a loaded object other than the library itself names a library whose file name
/// starts with one of `prefixes` among its `DT_NEEDED` entries: the library came in linked
/// (a program, PyTorch's `libtorch_hip.so`, hipBLAS), so its callers reach the interposer
/// through the global scope. `false` where nothing needs it: the process opened it itself
/// with `dlopen` (Python ctypes, hip-python), and a caller that looks its functions up in
/// that handle bypasses every preload.
pub fn needed_by_another(prefixes: &[&str]) -> bool {
    let mut needed = false;
    each_loaded(&mut |name, base, dynamic| {
        // SAFETY: the loaded object's own dynamic section and load address.
        needed = !file_matches(prefixes, name)
            && unsafe { any_needed(base, dynamic, &|n| file_matches(prefixes, n)) };
        needed
    });
    needed
}

/// Whether `name`'s file name (after the last `/`) starts with one of `prefixes`.
fn file_matches(prefixes: &[&str], name: &[u8]) -> bool {
    let file = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    prefixes.iter().any(|p| file.starts_with(p.as_bytes()))
}

/// Whether one of the `DT_NEEDED` names of the object loaded at `base`, with its dynamic
/// section at `dynamic` (null: none), satisfies `f`.
///
/// # Safety
/// `dynamic` is a loaded object's dynamic section (or null) and `base` its load address.
unsafe fn any_needed(base: usize, dynamic: *const u64, f: &dyn Fn(&[u8]) -> bool) -> bool {
    const DT_NULL: u64 = 0;
    const DT_NEEDED: u64 = 1;
    const DT_STRTAB: u64 = 5;
    if dynamic.is_null() {
        return false;
    }
    let (mut strtab, mut needed, mut n) = (0usize, [0usize; 64], 0);
    let mut d = dynamic;
    // SAFETY: the section is an array of (tag, value) pairs ending with DT_NULL.
    unsafe {
        while *d != DT_NULL {
            match *d {
                DT_STRTAB => strtab = *d.add(1) as usize,
                DT_NEEDED if n < needed.len() => {
                    needed[n] = *d.add(1) as usize;
                    n += 1;
                }
                _ => {}
            }
            d = d.add(2);
        }
    }
    if strtab == 0 {
        return false;
    }
    // The loader adjusts DT_STRTAB to an address where the section is writable; the
    // vDSO's (and a read-only one's) is still relative to the object's base.
    if strtab < base {
        strtab += base;
    }
    needed[..n].iter().any(|&off| {
        // SAFETY: a NUL-terminated string in the object's string table.
        f(unsafe { CStr::from_ptr((strtab + off) as *const std::ffi::c_char) }.to_bytes())
    })
}

/// `<link.h>`'s `struct link_map`: the loader's public list of loaded objects.
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const std::ffi::c_char,
    l_ld: *mut c_void,
    l_next: *mut LinkMap,
    l_prev: *mut LinkMap,
}

extern "C" {
    fn dlinfo(handle: *mut c_void, request: std::ffi::c_int, info: *mut c_void) -> std::ffi::c_int;
}
const RTLD_DI_LINKMAP: std::ffi::c_int = 2;

/// Calls `f(name, load address, dynamic section)` for each loaded object, in load order,
/// until it returns true. Under `dl_iterate_phdr`'s lock; in a forked child, where that
/// lock may wait forever (glibc does not reset it in the child, so one held by another
/// thread of the parent at the fork is never released), on the loader's list without it:
/// the child has one thread.
fn each_loaded(f: &mut dyn FnMut(&[u8], usize, *const u64) -> bool) {
    if crate::lifecycle::in_fork_child() {
        // SAFETY: dlopen(NULL) is the main program's handle; dlinfo writes a link_map
        // pointer; the list's entries and names live while the objects are loaded.
        unsafe {
            let main = libc::dlopen(std::ptr::null(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if main.is_null() {
                return;
            }
            let mut map: *mut LinkMap = std::ptr::null_mut();
            let ok = dlinfo(
                main,
                RTLD_DI_LINKMAP,
                &mut map as *mut *mut LinkMap as *mut c_void,
            ) == 0;
            libc::dlclose(main);
            while ok && !map.is_null() {
                let m = &*map;
                let name = if m.l_name.is_null() {
                    &b""[..]
                } else {
                    CStr::from_ptr(m.l_name).to_bytes()
                };
                if f(name, m.l_addr, m.l_ld as *const u64) {
                    return;
                }
                map = m.l_next;
            }
        }
        return;
    }
    type Visit<'a> = &'a mut dyn FnMut(&[u8], usize, *const u64) -> bool;
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info and our `data` pointer back.
        let (info, f) = unsafe { (&*info, &mut *(data as *mut Visit)) };
        let name = match info.dlpi_name.is_null() {
            true => &b""[..],
            // SAFETY: the loader's name strings are NUL-terminated and live while loaded.
            false => unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes(),
        };
        let base = info.dlpi_addr as usize;
        let dynamic = (0..info.dlpi_phnum as usize)
            // SAFETY: dlpi_phdr holds dlpi_phnum program headers.
            .map(|i| unsafe { &*info.dlpi_phdr.add(i) })
            .find(|ph| ph.p_type == libc::PT_DYNAMIC)
            .map_or(std::ptr::null(), |ph| {
                (base + ph.p_vaddr as usize) as *const u64
            });
        f(name, base, dynamic) as libc::c_int
    }
    let mut f: Visit = f;
    // SAFETY: the callback only reads the info it is given and calls `f` through `data`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut f as *mut Visit as *mut c_void) };
}

/// A device query's answer (`hipGetDevice`, `cuCtxGetDevice`: `int f(int *device)`, 0 for
/// success), 0 when the function is missing or fails.
#[inline]
pub fn device_or_zero(query: Option<unsafe extern "C" fn(*mut i32) -> i32>) -> i32 {
    let Some(f) = query else { return 0 };
    let mut d = 0;
    // SAFETY: an out-pointer to an int.
    if unsafe { f(&mut d) } == 0 {
        d
    } else {
        0
    }
}
