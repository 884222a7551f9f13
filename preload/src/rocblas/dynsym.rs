//! The `_64` exports are shown to the loader only while the served rocBLAS has the 64-bit API.
//!
//! rocBLAS 4.2 (ROCm 6.1) added `rocblas_gemm_ex_64` and six other `_64` entry points; older
//! builds (rocBLAS 2.47 in ROCm 5.5, the one Debian trixie ships) have none. We must export
//! them for the builds that do, but a host that asks `dlsym(RTLD_DEFAULT, ...)` whether the
//! loaded library offers the 64-bit API would then find ours and call a wrapper that can only
//! fail. So once a handle tells us which build is served (`libs.rs`), the seven symbols are
//! made global or local *in our own dynamic symbol table*, as that build has them or not: the
//! loader skips local symbols in every lookup, so a probe finds what it would find without
//! the preload. References already bound (a linked host's PLT, hipBLAS bound at load) keep
//! their address; a reference bound later to a hidden name fails as it would without us.
//!
//! Why not IFUNCs (tried, issue 14): their resolver can say NULL per lookup, but glibc prints
//! "Relink `<lib>' with `libtunedblas.so' for IFUNC symbol" for every library linked with
//! `BIND_NOW` that refers to one (Debian's hipBLAS does): every such host's stderr changes.
//!
//! The table lies in a read-only segment mapped privately: its page is made writable for one
//! byte store per symbol and given back its protection at once. Lookups read the byte without
//! a lock; a one-byte store is never seen torn. A rocBLAS the program links is mapped before
//! any constructor runs, so [`at_load`] looks once when this library is loaded, and a probe
//! made before the first handle already finds what it would without us. (A probe made before
//! a rocBLAS `dlopen`ed later, and before its first handle, still finds ours.)
//! `rocblas_create_handle` is always the served build's own when the caller links it (a main
//! program, hipBLAS) or the build is the first seen.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// The 64-bit API's names, as our exports spell them.
pub const NAMES_64: [&CStr; 7] = [
    c"rocblas_gemm_ex_64",
    c"rocblas_gemm_batched_ex_64",
    c"rocblas_gemm_strided_batched_ex_64",
    c"rocblas_hgemm_64",
    c"rocblas_sgemm_64",
    c"rocblas_hgemm_strided_batched_64",
    c"rocblas_sgemm_strided_batched_64",
];

const STB_LOCAL: u8 = 0;
const STB_GLOBAL: u8 = 1;
const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;

/// What the seven symbols are now: 0 as built (global), 1 shown, 2 hidden.
static STATE: AtomicU8 = AtomicU8::new(0);
/// Where the served build was mapped when last looked at (0: never).
static LAST_BASE: AtomicUsize = AtomicUsize::new(0);

/// Shows the `_64` exports if the served rocBLAS build, the object holding `create` (its
/// `rocblas_create_handle`), defines `rocblas_gemm_ex_64`, hides them if not. Called for
/// every handle made; looks again only when the build is mapped elsewhere (another build).
pub fn follow(create: *mut c_void) {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables.
    if unsafe { libc::dladdr(create, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    if LAST_BASE.swap(info.dli_fbase as usize, Ordering::AcqRel) == info.dli_fbase as usize {
        return;
    }
    // SAFETY: the loader's file names are NUL-terminated.
    let lib = unsafe { CStr::from_ptr(info.dli_fname) };
    let has = crate::real::defined_in(NAMES_64[0], lib);
    let want = if has { 1 } else { 2 };
    if STATE.swap(want, Ordering::AcqRel) == want {
        return;
    }
    let binding = if has { STB_GLOBAL } else { STB_LOCAL };
    let changed = set_binding(&NAMES_64, binding);
    crate::log::debug!(
        "the 64-bit API is {} ({changed} symbols changed): {} {} it",
        if has { "exported" } else { "hidden" },
        lib.to_string_lossy(),
        if has { "has" } else { "lacks" }
    );
}

/// Runs when this library is loaded, after every library the program links was mapped:
/// shows or hides the `_64` exports as the first rocBLAS mapped has them (nothing happens in
/// a process without one, the shells and compilers `LD_PRELOAD` reaches).
extern "C" fn at_load() {
    let _ = std::panic::catch_unwind(|| {
        let _errno = crate::lifecycle::KeepErrno::new();
        let Some(first) = crate::real::loaded_libraries(&["librocblas.so"])
            .into_iter()
            .next()
        else {
            return;
        };
        let Ok(lib) = std::ffi::CString::new(first.into_os_string().into_encoded_bytes()) else {
            return;
        };
        if let Some(create) = crate::real::resolve_in(c"rocblas_create_handle", &lib) {
            follow(create);
        }
    });
}

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

/// Our own dynamic section, symbol table, string table and GNU hash table.
struct Tables {
    symtab: *mut u8,
    strtab: *const u8,
    gnu_hash: *const u32,
}

/// Sets the binding of each of `names` in our dynamic symbol table; returns how many were
/// found and changed.
fn set_binding(names: &[&CStr], binding: u8) -> usize {
    let Some(t) = own_tables() else {
        return 0;
    };
    let mut changed = 0;
    for name in names {
        // SAFETY: the tables are our own loaded object's, valid while we are loaded.
        let Some(sym) = (unsafe { find(&t, name) }) else {
            continue;
        };
        // st_info is the fifth byte of an Elf64_Sym; its high nibble is the binding.
        // SAFETY: `sym` points into our symbol table.
        let info = unsafe { sym.add(4) };
        let old = unsafe { *info };
        let new = (binding << 4) | (old & 0xf);
        if old != new && store_byte(info, new) {
            changed += 1;
        }
    }
    changed
}

/// Writes one byte into a read-only page of ours: the page is made writable (keeping its
/// execute bit, if any) and given back its protection.
fn store_byte(at: *mut u8, value: u8) -> bool {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let start = (at as usize) & !(page - 1);
    let Some(prot) = protection_of(at as usize) else {
        return false;
    };
    // SAFETY: `start` is the page of a mapping of ours; only its protection changes.
    if unsafe { libc::mprotect(start as *mut c_void, page, prot | libc::PROT_WRITE) } != 0 {
        return false;
    }
    // SAFETY: the page is writable now; a one-byte store, as AtomicU8 so lookups on other
    // threads see the old value or the new, never anything else.
    unsafe { AtomicU8::from_ptr(at) }.store(value, Ordering::Release);
    // SAFETY: as above.
    unsafe { libc::mprotect(start as *mut c_void, page, prot) };
    true
}

/// The protection of the loadable segment of ours holding `addr`, from our program headers.
fn protection_of(addr: usize) -> Option<i32> {
    let mut found: (usize, Option<i32>) = (addr, None);
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr hands a valid info; `data` is our `found`.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<(usize, Option<i32>)>()) };
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr has dlpi_phnum entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != libc::PT_LOAD {
                continue;
            }
            let lo = info.dlpi_addr as usize + ph.p_vaddr as usize;
            if (lo..lo + ph.p_memsz as usize).contains(&found.0) {
                let mut prot = 0;
                if ph.p_flags & libc::PF_R != 0 {
                    prot |= libc::PROT_READ;
                }
                if ph.p_flags & libc::PF_W != 0 {
                    prot |= libc::PROT_WRITE;
                }
                if ph.p_flags & libc::PF_X != 0 {
                    prot |= libc::PROT_EXEC;
                }
                found.1 = Some(prot);
                return 1;
            }
        }
        0
    }
    // SAFETY: the callback only reads what it is handed.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut found as *mut (usize, Option<i32>)).cast()) };
    found.1
}

/// Our own tables, from our dynamic section as the loader left it.
fn own_tables() -> Option<Tables> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads the loader's tables; `own_tables` is a function of ours.
    if unsafe { libc::dladdr(own_tables as *const c_void, &mut info) } == 0 {
        return None;
    }
    let base = info.dli_fbase as usize;
    let dynamic = dynamic_of(base)?;
    let (mut symtab, mut strtab, mut gnu_hash) = (0usize, 0usize, 0usize);
    let mut d = dynamic;
    loop {
        // SAFETY: the dynamic section is an array of (tag, value) ended by DT_NULL.
        let (tag, val) = unsafe { (*d, *d.add(1) as usize) };
        match tag {
            DT_NULL => break,
            DT_SYMTAB => symtab = val,
            DT_STRTAB => strtab = val,
            DT_GNU_HASH => gnu_hash = val,
            _ => {}
        }
        // SAFETY: not past DT_NULL yet.
        d = unsafe { d.add(2) };
    }
    if symtab == 0 || strtab == 0 || gnu_hash == 0 {
        return None;
    }
    // glibc relocates these entries in place on most architectures; where it does not, they
    // are still offsets from the base.
    let at = |v: usize| if v < base { base + v } else { v };
    Some(Tables {
        symtab: at(symtab) as *mut u8,
        strtab: at(strtab) as *const u8,
        gnu_hash: at(gnu_hash) as *const u32,
    })
}

/// Our PT_DYNAMIC, as (tag, value) pairs of i64.
fn dynamic_of(base: usize) -> Option<*const i64> {
    let mut found: (usize, Option<usize>) = (base, None);
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: as in `protection_of`.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<(usize, Option<usize>)>()) };
        let mut first_load = None;
        let mut dynamic = None;
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr has dlpi_phnum entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD && first_load.is_none() {
                first_load = Some(info.dlpi_addr as usize + ph.p_vaddr as usize);
            }
            if ph.p_type == libc::PT_DYNAMIC {
                dynamic = Some(info.dlpi_addr as usize + ph.p_vaddr as usize);
            }
        }
        if first_load.map(|a| a & !0xfff) == Some(found.0) {
            found.1 = dynamic;
            return 1;
        }
        0
    }
    // SAFETY: the callback only reads what it is handed.
    unsafe {
        libc::dl_iterate_phdr(
            Some(each),
            (&mut found as *mut (usize, Option<usize>)).cast(),
        )
    };
    found.1.map(|a| a as *const i64)
}

/// The ELF GNU hash of a symbol name.
fn gnu_hash(name: &[u8]) -> u32 {
    name.iter()
        .fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32))
}

/// The symbol named `name` in our table, through the GNU hash table.
///
/// # Safety
/// `t` must describe a loaded object's tables.
unsafe fn find(t: &Tables, name: &CStr) -> Option<*mut u8> {
    let bytes = name.to_bytes();
    let h = gnu_hash(bytes);
    let g = t.gnu_hash;
    // Header: nbuckets, symoffset, bloom words, bloom shift; then the bloom filter
    // (64-bit words here), the buckets and the chains.
    let (nbuckets, symoffset, bloom_words) = unsafe { (*g, *g.add(1), *g.add(2)) };
    if nbuckets == 0 {
        return None;
    }
    let buckets = unsafe { g.add(4 + 2 * bloom_words as usize) };
    let chains = unsafe { buckets.add(nbuckets as usize) };
    let mut idx = unsafe { *buckets.add((h % nbuckets) as usize) };
    if idx < symoffset {
        return None;
    }
    loop {
        let ch = unsafe { *chains.add((idx - symoffset) as usize) };
        if (ch | 1) == (h | 1) {
            let sym = unsafe { t.symtab.add(idx as usize * 24) };
            let st_name = unsafe { (sym as *const u32).read_unaligned() } as usize;
            let candidate = unsafe { CStr::from_ptr(t.strtab.add(st_name).cast()) };
            if candidate.to_bytes() == bytes {
                return Some(sym);
            }
        }
        if ch & 1 == 1 {
            return None;
        }
        idx += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gnu_hash_matches_the_elf_definition() {
        // Values from the GNU hash definition (h = h * 33 + c, from 5381).
        assert_eq!(gnu_hash(b""), 5381);
        assert_eq!(gnu_hash(b"a"), 177_670);
        assert_eq!(gnu_hash(b"printf"), 0x156b_2bb8);
    }
}
