//! The HIP runtime subset the harness needs, on the host: "device" memory is host memory,
//! devices are a thread-local number, and events are timestamps of a monotonic clock. The
//! harness resolves these names at run time from the same library it tunes, so against
//! refblas it times the CPU kernels exactly as it would time GPU kernels.

use std::alloc::{alloc, dealloc, Layout};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;
use tunedblas_core::abi::{HipError, HipEvent, Stream, HIP_SUCCESS};

// hipError_t values used here (from hip_runtime_api.h), which the core ABI does not define.
pub const HIP_ERROR_INVALID_VALUE: HipError = 1;
pub const HIP_ERROR_OUT_OF_MEMORY: HipError = 2;
pub const HIP_ERROR_INVALID_MEMCPY_DIRECTION: HipError = 21;
pub const HIP_ERROR_NO_DEVICE: HipError = 100;
pub const HIP_ERROR_INVALID_DEVICE: HipError = 101;
pub const HIP_ERROR_INVALID_HANDLE: HipError = 400;
pub const HIP_ERROR_UNKNOWN: HipError = 999;

/// Device count when `REFBLAS_DEVICES` is unset or unreadable.
pub const DEFAULT_DEVICES: i32 = 4;
/// hipMalloc's alignment (real HIP gives at least 256 bytes).
pub const MALLOC_ALIGN: usize = 256;

thread_local! {
    static CURRENT: Cell<i32> = const { Cell::new(0) };
}

/// Number of devices: `REFBLAS_DEVICES`, read once.
pub fn device_count() -> i32 {
    static COUNT: OnceLock<i32> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::env::var("REFBLAS_DEVICES")
            .ok()
            .and_then(|v| v.trim().parse::<i32>().ok())
            .filter(|&n| n >= 0)
            .unwrap_or(DEFAULT_DEVICES)
    })
}

/// The calling thread's current device (0 until set).
pub fn current_device() -> i32 {
    CURRENT.with(|c| c.get())
}

/// `hipGetDeviceCount`.
///
/// # Safety
/// `out` null or writable.
pub unsafe fn get_device_count(out: *mut i32) -> HipError {
    if out.is_null() {
        return HIP_ERROR_INVALID_VALUE;
    }
    let n = device_count();
    *out = n;
    if n == 0 {
        HIP_ERROR_NO_DEVICE
    } else {
        HIP_SUCCESS
    }
}

/// `hipSetDevice`.
pub fn set_device(dev: i32) -> HipError {
    if dev < 0 || dev >= device_count() {
        return HIP_ERROR_INVALID_DEVICE;
    }
    CURRENT.with(|c| c.set(dev));
    HIP_SUCCESS
}

/// `hipGetDevice`.
///
/// # Safety
/// `out` null or writable.
pub unsafe fn get_device(out: *mut i32) -> HipError {
    if out.is_null() {
        return HIP_ERROR_INVALID_VALUE;
    }
    *out = current_device();
    HIP_SUCCESS
}

/// `hipMalloc`: host memory, 256-byte aligned. The first 256 bytes before the returned
/// pointer hold the size, so `hipFree` needs no table and no lock.
///
/// # Safety
/// `out` null or writable.
pub unsafe fn malloc(out: *mut *mut c_void, size: usize) -> HipError {
    if out.is_null() {
        return HIP_ERROR_INVALID_VALUE;
    }
    if size == 0 {
        // As HIP: success with a null pointer.
        *out = std::ptr::null_mut();
        return HIP_SUCCESS;
    }
    let Some(total) = size.checked_add(MALLOC_ALIGN) else {
        return HIP_ERROR_OUT_OF_MEMORY;
    };
    let Ok(layout) = Layout::from_size_align(total, MALLOC_ALIGN) else {
        return HIP_ERROR_OUT_OF_MEMORY;
    };
    let base = alloc(layout);
    if base.is_null() {
        return HIP_ERROR_OUT_OF_MEMORY;
    }
    (base as *mut usize).write(size);
    *out = base.add(MALLOC_ALIGN) as *mut c_void;
    HIP_SUCCESS
}

/// `hipFree` (null is fine).
///
/// # Safety
/// `p` null or from [`malloc`], freed once.
pub unsafe fn free(p: *mut c_void) -> HipError {
    if p.is_null() {
        return HIP_SUCCESS;
    }
    let base = (p as *mut u8).sub(MALLOC_ALIGN);
    let size = (base as *const usize).read();
    dealloc(
        base,
        Layout::from_size_align_unchecked(size + MALLOC_ALIGN, MALLOC_ALIGN),
    );
    HIP_SUCCESS
}

/// `hipMemcpy`: every kind (0..=4) is a host copy; overlapping ranges are allowed.
///
/// # Safety
/// The ranges must be valid for `size` bytes.
pub unsafe fn memcpy(dst: *mut c_void, src: *const c_void, size: usize, kind: i32) -> HipError {
    if !(0..=4).contains(&kind) {
        return HIP_ERROR_INVALID_MEMCPY_DIRECTION;
    }
    if size == 0 {
        return HIP_SUCCESS;
    }
    if dst.is_null() || src.is_null() {
        return HIP_ERROR_INVALID_VALUE;
    }
    std::ptr::copy(src as *const u8, dst as *mut u8, size);
    HIP_SUCCESS
}

/// `hipDeviceSynchronize`: everything already ran synchronously.
pub fn device_synchronize() -> HipError {
    HIP_SUCCESS
}

/// An event: nanoseconds since [`epoch`] when last recorded, or `NOT_RECORDED`.
struct Event {
    at_ns: AtomicU64,
}

const NOT_RECORDED: u64 = u64::MAX;

/// The process-wide origin of event timestamps.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `hipEventCreate`.
///
/// # Safety
/// `out` null or writable.
pub unsafe fn event_create(out: *mut HipEvent) -> HipError {
    if out.is_null() {
        return HIP_ERROR_INVALID_VALUE;
    }
    epoch();
    let ev = Box::new(Event {
        at_ns: AtomicU64::new(NOT_RECORDED),
    });
    *out = Box::into_raw(ev) as HipEvent;
    HIP_SUCCESS
}

/// `hipEventRecord`: work on the "stream" is already done, so the event completes now.
///
/// # Safety
/// `ev` null or a live event.
pub unsafe fn event_record(ev: HipEvent, _stream: Stream) -> HipError {
    let Some(e) = (ev as *const Event).as_ref() else {
        return HIP_ERROR_INVALID_HANDLE;
    };
    let ns = epoch().elapsed().as_nanos().min(NOT_RECORDED as u128 - 1) as u64;
    e.at_ns.store(ns, Ordering::Release);
    HIP_SUCCESS
}

/// `hipEventSynchronize`.
///
/// # Safety
/// `ev` null or a live event.
pub unsafe fn event_synchronize(ev: HipEvent) -> HipError {
    if ev.is_null() {
        return HIP_ERROR_INVALID_HANDLE;
    }
    HIP_SUCCESS
}

/// `hipEventElapsedTime`: milliseconds from `start` to `stop`; both must have been recorded.
///
/// # Safety
/// `ms` null or writable; events null or live.
pub unsafe fn event_elapsed_time(ms: *mut f32, start: HipEvent, stop: HipEvent) -> HipError {
    if ms.is_null() {
        return HIP_ERROR_INVALID_VALUE;
    }
    let (Some(a), Some(b)) = (
        (start as *const Event).as_ref(),
        (stop as *const Event).as_ref(),
    ) else {
        return HIP_ERROR_INVALID_HANDLE;
    };
    let (ta, tb) = (
        a.at_ns.load(Ordering::Acquire),
        b.at_ns.load(Ordering::Acquire),
    );
    if ta == NOT_RECORDED || tb == NOT_RECORDED {
        return HIP_ERROR_INVALID_HANDLE;
    }
    *ms = ((tb as f64 - ta as f64) / 1e6) as f32;
    HIP_SUCCESS
}

/// `hipEventDestroy`.
///
/// # Safety
/// `ev` null or a live event, not used afterwards.
pub unsafe fn event_destroy(ev: HipEvent) -> HipError {
    if crate::handle::release::<Event>(ev) {
        HIP_SUCCESS
    } else {
        HIP_ERROR_INVALID_HANDLE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null_mut;

    #[test]
    fn devices() {
        unsafe {
            let mut n = 0;
            // The tests run without REFBLAS_DEVICES unless someone sets it.
            let expect = device_count();
            assert_eq!(get_device_count(&mut n), if expect == 0 { 100 } else { 0 });
            assert_eq!(n, expect);
            assert_eq!(set_device(-1), HIP_ERROR_INVALID_DEVICE);
            assert_eq!(set_device(expect), HIP_ERROR_INVALID_DEVICE);
            if expect > 1 {
                std::thread::spawn(|| {
                    assert_eq!(current_device(), 0);
                    assert_eq!(set_device(1), HIP_SUCCESS);
                    let mut d = -1;
                    assert_eq!(get_device(&mut d), HIP_SUCCESS);
                    assert_eq!(d, 1);
                })
                .join()
                .unwrap();
                // Thread-local: this thread is unaffected.
                let mut d = -1;
                assert_eq!(get_device(&mut d), HIP_SUCCESS);
                assert_eq!(d, current_device());
            }
            assert_eq!(get_device(null_mut()), HIP_ERROR_INVALID_VALUE);
        }
    }

    #[test]
    fn memory() {
        unsafe {
            let mut p: *mut c_void = null_mut();
            assert_eq!(malloc(&mut p, 1000), HIP_SUCCESS);
            assert_eq!(p as usize % MALLOC_ALIGN, 0);
            let src: Vec<u8> = (0..1000).map(|i| i as u8).collect();
            assert_eq!(
                memcpy(p, src.as_ptr() as *const c_void, 1000, 1),
                HIP_SUCCESS
            );
            let mut back = vec![0u8; 1000];
            assert_eq!(
                memcpy(back.as_mut_ptr() as *mut c_void, p, 1000, 2),
                HIP_SUCCESS
            );
            assert_eq!(back, src);
            assert_eq!(memcpy(p, null_mut(), 4, 4), HIP_ERROR_INVALID_VALUE);
            assert_eq!(memcpy(p, p, 4, 9), HIP_ERROR_INVALID_MEMCPY_DIRECTION);
            assert_eq!(free(p), HIP_SUCCESS);
            assert_eq!(malloc(&mut p, 0), HIP_SUCCESS);
            assert!(p.is_null());
            assert_eq!(free(null_mut()), HIP_SUCCESS);
            assert_eq!(malloc(null_mut(), 8), HIP_ERROR_INVALID_VALUE);
        }
    }

    #[test]
    fn events_measure_time() {
        unsafe {
            let (mut a, mut b): (HipEvent, HipEvent) = (null_mut(), null_mut());
            assert_eq!(event_create(&mut a), HIP_SUCCESS);
            assert_eq!(event_create(&mut b), HIP_SUCCESS);
            let mut ms = 0f32;
            assert_eq!(event_elapsed_time(&mut ms, a, b), HIP_ERROR_INVALID_HANDLE);
            assert_eq!(event_record(a, null_mut()), HIP_SUCCESS);
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(event_record(b, null_mut()), HIP_SUCCESS);
            assert_eq!(event_synchronize(b), HIP_SUCCESS);
            assert_eq!(event_elapsed_time(&mut ms, a, b), HIP_SUCCESS);
            assert!((19.0..2000.0).contains(&ms), "{ms}");
            assert_eq!(event_destroy(a), HIP_SUCCESS);
            assert_eq!(event_destroy(b), HIP_SUCCESS);
            assert_eq!(
                event_record(null_mut(), null_mut()),
                HIP_ERROR_INVALID_HANDLE
            );
        }
    }
}
