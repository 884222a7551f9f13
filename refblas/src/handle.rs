//! `rocblas_handle`: per-handle state (device, stream, pointer mode), and the small calls
//! that read or set it.

use crate::hip;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};
use tunedblas_core::abi::{
    Handle, Status, Stream, POINTER_MODE_DEVICE, POINTER_MODE_HOST, STATUS_INVALID_HANDLE,
    STATUS_INVALID_POINTER, STATUS_INVALID_VALUE, STATUS_SUCCESS,
};

/// What a handle points to. Fields are atomic so a handle shared between threads (which
/// rocBLAS allows for reading) is never a data race.
#[derive(Debug)]
pub struct HandleState {
    /// The HIP device current on the creating thread: rocBLAS binds a handle to it.
    pub device: i32,
    stream: AtomicPtr<c_void>,
    pointer_mode: AtomicI32,
}

impl HandleState {
    pub fn stream(&self) -> Stream {
        self.stream.load(Ordering::Relaxed)
    }

    pub fn pointer_mode(&self) -> i32 {
        self.pointer_mode.load(Ordering::Relaxed)
    }
}

/// The state behind a non-null handle.
///
/// # Safety
/// `h` must be null or a live handle from [`create`].
pub unsafe fn state<'a>(h: Handle) -> Option<&'a HandleState> {
    (h as *const HandleState).as_ref()
}

/// `rocblas_create_handle`.
///
/// # Safety
/// `out` must be null or writable.
pub unsafe fn create(out: *mut Handle) -> Status {
    if out.is_null() {
        return STATUS_INVALID_HANDLE;
    }
    let st = Box::new(HandleState {
        device: hip::current_device(),
        stream: AtomicPtr::new(std::ptr::null_mut()),
        pointer_mode: AtomicI32::new(POINTER_MODE_HOST),
    });
    *out = Box::into_raw(st) as Handle;
    STATUS_SUCCESS
}

/// `rocblas_destroy_handle`.
///
/// # Safety
/// `h` must be null or a live handle from [`create`], not used afterwards.
pub unsafe fn destroy(h: Handle) -> Status {
    if release::<HandleState>(h) {
        STATUS_SUCCESS
    } else {
        STATUS_INVALID_HANDLE
    }
}

/// Drops the boxed `T` behind an opaque pointer this library handed out (a handle, an event,
/// a graph); null is left alone. Returns whether there was one.
///
/// # Safety
/// `p` must be null or a live `Box<T>` turned into a pointer, not used afterwards.
pub unsafe fn release<T>(p: *mut std::ffi::c_void) -> bool {
    if p.is_null() {
        return false;
    }
    drop(Box::from_raw(p as *mut T));
    true
}

/// `rocblas_set_stream`.
///
/// # Safety
/// As [`state`].
pub unsafe fn set_stream(h: Handle, s: Stream) -> Status {
    match state(h) {
        None => STATUS_INVALID_HANDLE,
        Some(st) => {
            st.stream.store(s, Ordering::Relaxed);
            STATUS_SUCCESS
        }
    }
}

/// `rocblas_get_stream`.
///
/// # Safety
/// As [`state`]; `out` null or writable.
pub unsafe fn get_stream(h: Handle, out: *mut Stream) -> Status {
    get(h, out, HandleState::stream)
}

/// Writes one setting of a live handle to `out`.
///
/// # Safety
/// As [`state`]; `out` null or writable.
unsafe fn get<T>(h: Handle, out: *mut T, read: fn(&HandleState) -> T) -> Status {
    let Some(st) = state(h) else {
        return STATUS_INVALID_HANDLE;
    };
    if out.is_null() {
        return STATUS_INVALID_POINTER;
    }
    *out = read(st);
    STATUS_SUCCESS
}

/// `rocblas_set_pointer_mode` (host 0, device 1).
///
/// # Safety
/// As [`state`].
pub unsafe fn set_pointer_mode(h: Handle, mode: i32) -> Status {
    let Some(st) = state(h) else {
        return STATUS_INVALID_HANDLE;
    };
    if mode != POINTER_MODE_HOST && mode != POINTER_MODE_DEVICE {
        return STATUS_INVALID_VALUE;
    }
    st.pointer_mode.store(mode, Ordering::Relaxed);
    STATUS_SUCCESS
}

/// `rocblas_get_pointer_mode`.
///
/// # Safety
/// As [`state`]; `out` null or writable.
pub unsafe fn get_pointer_mode(h: Handle, out: *mut i32) -> Status {
    get(h, out, HandleState::pointer_mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null_mut;

    #[test]
    fn handle_lifecycle() {
        unsafe {
            assert_eq!(create(null_mut()), STATUS_INVALID_HANDLE);
            let dev = hip::device_count() - 1;
            assert_eq!(hip::set_device(dev), 0);
            let mut h: Handle = null_mut();
            assert_eq!(create(&mut h), STATUS_SUCCESS);
            assert!(!h.is_null());
            // The handle keeps the device current at creation.
            assert_eq!(hip::set_device(0), 0);
            assert_eq!(state(h).unwrap().device, dev);

            let mut mode = -1;
            assert_eq!(get_pointer_mode(h, &mut mode), STATUS_SUCCESS);
            assert_eq!(mode, POINTER_MODE_HOST);
            assert_eq!(set_pointer_mode(h, POINTER_MODE_DEVICE), STATUS_SUCCESS);
            assert_eq!(get_pointer_mode(h, &mut mode), STATUS_SUCCESS);
            assert_eq!(mode, POINTER_MODE_DEVICE);
            assert_eq!(set_pointer_mode(h, 7), STATUS_INVALID_VALUE);
            assert_eq!(get_pointer_mode(h, null_mut()), STATUS_INVALID_POINTER);

            let mut s: Stream = 1 as Stream;
            assert_eq!(get_stream(h, &mut s), STATUS_SUCCESS);
            assert!(s.is_null());
            assert_eq!(set_stream(h, 0x1234 as Stream), STATUS_SUCCESS);
            assert_eq!(get_stream(h, &mut s), STATUS_SUCCESS);
            assert_eq!(s as usize, 0x1234);

            assert_eq!(set_stream(null_mut(), null_mut()), STATUS_INVALID_HANDLE);
            assert_eq!(
                get_pointer_mode(null_mut(), &mut mode),
                STATUS_INVALID_HANDLE
            );
            assert_eq!(destroy(h), STATUS_SUCCESS);
            assert_eq!(destroy(null_mut()), STATUS_INVALID_HANDLE);
        }
    }
}
