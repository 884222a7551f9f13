//! Version strings and status names.

use crate::flavour::Flavour;
use std::ffi::{c_char, CStr};
use tunedblas_core::abi::{Status, STATUS_INVALID_POINTER, STATUS_INVALID_SIZE, STATUS_SUCCESS};

/// `rocblas_get_version_string(buf, len)`: the whole string with its NUL, or `invalid_size`
/// when `len` is too small.
///
/// # Safety
/// `buf` null or writable for `len` bytes.
pub unsafe fn get_version_string(flavour: Flavour, buf: *mut c_char, len: usize) -> Status {
    slow_version();
    if buf.is_null() {
        return STATUS_INVALID_POINTER;
    }
    let v = flavour.version().to_bytes_with_nul();
    if len < v.len() {
        return STATUS_INVALID_SIZE;
    }
    std::ptr::copy_nonoverlapping(v.as_ptr() as *const c_char, buf, v.len());
    STATUS_SUCCESS
}

/// `REFBLAS_SLOW_VERSION_MS=N`: the version string takes N ms to answer, so an interposer's
/// start-up (which asks it when it opens a profile) is still running N ms after it began,
/// for the tests of calls that arrive meanwhile.
fn slow_version() {
    let ms = std::env::var("REFBLAS_SLOW_VERSION_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(ms) = ms {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// `rocblas_get_version_string_size(len*)`: the buffer size needed, NUL included.
///
/// # Safety
/// `len` null or writable.
pub unsafe fn get_version_string_size(flavour: Flavour, len: *mut usize) -> Status {
    if len.is_null() {
        return STATUS_INVALID_POINTER;
    }
    *len = flavour.version().to_bytes_with_nul().len();
    STATUS_SUCCESS
}

/// `rocblas_status_to_string`: the enum's name, as rocBLAS returns it.
pub fn status_to_string(s: Status) -> &'static CStr {
    // Values from rocblas-types.h (FACTS.md section 1).
    match s {
        0 => c"rocblas_status_success",
        1 => c"rocblas_status_invalid_handle",
        2 => c"rocblas_status_not_implemented",
        3 => c"rocblas_status_invalid_pointer",
        4 => c"rocblas_status_invalid_size",
        5 => c"rocblas_status_memory_error",
        6 => c"rocblas_status_internal_error",
        7 => c"rocblas_status_perf_degraded",
        8 => c"rocblas_status_size_query_mismatch",
        9 => c"rocblas_status_size_increased",
        10 => c"rocblas_status_size_unchanged",
        11 => c"rocblas_status_invalid_value",
        12 => c"rocblas_status_continue",
        13 => c"rocblas_status_check_numerics_fail",
        14 => c"rocblas_status_excluded_from_build",
        15 => c"rocblas_status_arch_mismatch",
        _ => c"Invalid status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunedblas_core::abi::{STATUS_INTERNAL_ERROR, STATUS_INVALID_VALUE};

    #[test]
    fn version_strings() {
        for f in [Flavour::V4, Flavour::V5] {
            unsafe {
                let mut n = 0usize;
                assert_eq!(get_version_string_size(f, &mut n), STATUS_SUCCESS);
                let mut buf = vec![0x7f as c_char; n];
                assert_eq!(
                    get_version_string(f, buf.as_mut_ptr(), n - 1),
                    STATUS_INVALID_SIZE
                );
                assert_eq!(get_version_string(f, buf.as_mut_ptr(), n), STATUS_SUCCESS);
                let s = CStr::from_ptr(buf.as_ptr()).to_str().unwrap();
                let parts: Vec<&str> = s.split('.').collect();
                assert_eq!(parts.len(), 4, "{s}");
                assert_eq!(parts[3].len(), 8);
                assert!(parts[3].chars().all(|c| c.is_ascii_hexdigit()));
                let major = if f == Flavour::V4 { "4" } else { "5" };
                assert_eq!(parts[0], major);
                assert_eq!(
                    get_version_string(f, std::ptr::null_mut(), 64),
                    STATUS_INVALID_POINTER
                );
                assert_eq!(
                    get_version_string_size(f, std::ptr::null_mut()),
                    STATUS_INVALID_POINTER
                );
            }
        }
    }

    #[test]
    fn status_names() {
        assert_eq!(
            status_to_string(STATUS_SUCCESS).to_str().unwrap(),
            "rocblas_status_success"
        );
        assert_eq!(
            status_to_string(STATUS_INVALID_VALUE).to_str().unwrap(),
            "rocblas_status_invalid_value"
        );
        assert_eq!(
            status_to_string(STATUS_INTERNAL_ERROR).to_str().unwrap(),
            "rocblas_status_internal_error"
        );
        assert_eq!(status_to_string(-3).to_str().unwrap(), "Invalid status");
    }
}
