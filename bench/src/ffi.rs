//! The few loader calls the benchmark needs: open a shared object, look a symbol up in it or
//! in the whole process, and say which file an address belongs to.

use std::ffi::{c_void, CStr, CString};
use std::path::Path;

/// A `dlopen`ed object, never closed (the process ends soon after).
pub struct Lib(*mut c_void);

impl Lib {
    pub fn open(path: &Path, flags: i32) -> Result<Lib, String> {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: a NUL-terminated path; the object's constructors are refblas's own.
        let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
        if h.is_null() {
            return Err(format!("dlopen {}: {}", path.display(), dlerror()));
        }
        Ok(Lib(h))
    }

    /// The address of `name` in this object.
    pub fn addr(&self, name: &CStr) -> Option<*mut c_void> {
        // SAFETY: a valid handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    }

    /// `name` as a function of type `F`.
    ///
    /// # Safety
    /// `F` must be the symbol's real C signature.
    pub unsafe fn func<F: Copy>(&self, name: &CStr) -> Result<F, String> {
        let p = self
            .addr(name)
            .ok_or_else(|| format!("{name:?} is not exported"))?;
        Ok(std::mem::transmute_copy::<*mut c_void, F>(&p))
    }
}

/// `name` as the process resolves it (`RTLD_DEFAULT`): the preload's export when one exists.
///
/// # Safety
/// `F` must be the symbol's real C signature.
pub unsafe fn global_func<F: Copy>(name: &CStr) -> Result<(F, *mut c_void), String> {
    let p = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
    if p.is_null() {
        return Err(format!("{name:?} is not defined in this process"));
    }
    Ok((std::mem::transmute_copy::<*mut c_void, F>(&p), p))
}

/// The file that holds an address, as the loader names it.
pub fn file_of(addr: *mut c_void) -> String {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return String::from("?");
    }
    // SAFETY: the loader keeps the name alive while the object is loaded.
    unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned()
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return String::from("unknown error");
    }
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}
