//! Libraries loaded at run time by path, never linked: one binary serves every ROCm and CUDA
//! release, and the CPU stand-ins (refblas, the cuBLASLt and hipBLASLt stand-ins) alike.

use std::ffi::{c_void, CStr, CString};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A loader handle.
pub type Handle = *mut c_void;

/// The loader's last error message.
pub fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Opens `path` with `flags`; the library that cannot be loaded is exit 3.
pub fn open(path: &Path, flags: i32) -> Result<Handle> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::failed(format!("{}: path contains a NUL byte", path.display())))?;
    // SAFETY: dlopen with a valid C string.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        return Err(Error::not_loaded(format!(
            "cannot load {}: {}",
            path.display(),
            dl_error()
        )));
    }
    Ok(h)
}

/// Opens the first that loads, globally (as a host linked against it has it), of the path
/// given, else `$env`, else the library's usual names; else exit 3, saying why each did not
/// and which option to `pass`.
pub fn open_named(
    (explicit, env, names): (Option<&Path>, &str, &[&str]),
    what: &str,
    pass: &str,
) -> Result<(Handle, PathBuf)> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_path_buf()],
        None => match std::env::var_os(env).filter(|v| !v.is_empty()) {
            Some(p) => vec![PathBuf::from(p)],
            None => names.iter().map(PathBuf::from).collect(),
        },
    };
    let mut errors = Vec::new();
    for p in candidates {
        match open(&p, libc::RTLD_NOW | libc::RTLD_GLOBAL) {
            Ok(h) => return Ok((h, p)),
            Err(e) => errors.push(e.message),
        }
    }
    let why = errors.join("; ");
    Err(Error::not_loaded(format!(
        "cannot load {what} ({why}); pass {pass}"
    )))
}

/// The symbol `name` of `h` as the C function type `T`, if it has one.
///
/// # Safety
/// `h` is a live loader handle (or a pseudo-handle) and `T` is the symbol's C type.
pub unsafe fn sym<T: Copy>(h: Handle, name: &str) -> Option<T> {
    let c = CString::new(name).ok()?;
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// [`sym`], or the error naming what `what` lacks.
///
/// # Safety
/// As [`sym`].
pub unsafe fn need<T: Copy>(h: Handle, name: &str, what: &str) -> Result<T> {
    unsafe { sym(h, name) }.ok_or_else(|| Error::failed(format!("{what} has no {name}")))
}

/// The file the loader mapped for the symbol `name` of `h` (a soname resolves anywhere on
/// the search path: the profile is for the file actually loaded), else `given`.
pub(crate) fn file_of(h: Handle, name: &str, given: &Path) -> PathBuf {
    // SAFETY: only the address is used.
    unsafe { sym::<*mut c_void>(h, name) }
        .and_then(|p| tunedblas_core::identity::library_of_address(p as usize))
        .unwrap_or_else(|| given.to_path_buf())
}

/// The command's own shared objects live beside its binary (`target/<profile>/`), or in
/// `<prefix>/lib` of an installed copy (`<prefix>/bin/tunedblas`), or in the installed
/// prefix's private folder for refblas (`lib/tunedblas/`: kept out of the loader's search
/// path, where a librocblas.so.5 must never stand in for rocBLAS).
pub fn beside_exe(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join(name),
        dir.join("../lib").join(name),
        dir.join("../lib/tunedblas").join(name),
    ]
    .into_iter()
    .find(|p| p.is_file())
}
