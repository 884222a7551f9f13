//! The cuBLASLt algorithm FFI that both the interposer (`preload/src/cublaslt/`, serving a
//! row) and the tuner (`tuner/src/backends/cublaslt/`) need: initialising an
//! algorithm, reading its configuration and rebuilding it from one, through the function
//! pointers each
//! caller resolved itself. The pure part (what the configuration is, its name in a
//! profile) is the core's `tunedblas_core::cublaslt`, which makes no FFI call; this crate is
//! the one place those cuBLASLt calls are made from, so the two users share one
//! implementation.

use tunedblas_core::cublaslt::{
    AlgoConfig, AlgoGetAttributeFn, AlgoInitFn, AlgoSetAttributeFn, LtHandle, LtKey, LtStatus,
    MatmulAlgo, CONFIG_FIELDS, STATUS_NOT_SUPPORTED, STATUS_SUCCESS,
};

/// Reads an algorithm's configuration through `cublasLtMatmulAlgoConfigGetAttribute`. Each
/// attribute's size is asked of the library first (1, 2, 4 or 8 bytes, little-endian), so a
/// release that widens one still reads right. The error is the failing cuBLASLt status.
///
/// # Safety
/// `get` must be `cublasLtMatmulAlgoConfigGetAttribute` (or behave like it).
pub unsafe fn read_config(
    get: AlgoGetAttributeFn,
    algo: &MatmulAlgo,
) -> Result<AlgoConfig, LtStatus> {
    let mut cfg = AlgoConfig::EMPTY;
    for (attr, _) in CONFIG_FIELDS {
        let size = unsafe { attr_size(get, algo, attr) }?;
        let mut buf = [0u8; 8];
        let mut written = 0usize;
        // SAFETY: buf has room for `size` <= 8 bytes.
        let st = unsafe { get(algo, attr, buf.as_mut_ptr().cast(), size, &mut written) };
        if st != STATUS_SUCCESS {
            return Err(st);
        }
        cfg.set(attr, u64::from_le_bytes(buf));
    }
    Ok(cfg)
}

unsafe fn attr_size(
    get: AlgoGetAttributeFn,
    algo: &MatmulAlgo,
    attr: i32,
) -> Result<usize, LtStatus> {
    let mut size = 0usize;
    // SAFETY: a size query: no buffer, sizeInBytes 0, sizeWritten receives the size.
    let st = unsafe { get(algo, attr, std::ptr::null_mut(), 0, &mut size) };
    if st != STATUS_SUCCESS {
        return Err(st);
    }
    if !matches!(size, 1 | 2 | 4 | 8) {
        return Err(STATUS_NOT_SUPPORTED);
    }
    Ok(size)
}

/// `cublasLtMatmulAlgoInit` of algorithm `id` for the key's types; the error is its status.
///
/// # Safety
/// `init` must be `cublasLtMatmulAlgoInit` (or behave like it); `handle` a live handle.
pub unsafe fn init_algo(
    init: AlgoInitFn,
    handle: LtHandle,
    key: &LtKey,
    id: i32,
) -> Result<MatmulAlgo, LtStatus> {
    let mut algo = MatmulAlgo::default();
    // SAFETY: per the contract; algo is a valid out-pointer.
    let st = unsafe {
        init(
            handle,
            key.compute,
            key.scale,
            key.a_type,
            key.b_type,
            key.c_type,
            key.d_type,
            id,
            &mut algo,
        )
    };
    match st {
        STATUS_SUCCESS => Ok(algo),
        st => Err(st),
    }
}

/// Rebuilds an algorithm from its configuration: `cublasLtMatmulAlgoInit` for the id, then
/// every other attribute set, then read back and compared (a library that silently ignores
/// a value must not serve a different kernel than the row names).
///
/// # Safety
/// The function pointers must be the cuBLASLt functions of their types; `handle` a live
/// cuBLASLt handle.
#[allow(clippy::too_many_arguments)]
pub unsafe fn build_algo(
    init: AlgoInitFn,
    set: AlgoSetAttributeFn,
    get: AlgoGetAttributeFn,
    handle: LtHandle,
    key: &LtKey,
    cfg: &AlgoConfig,
) -> Result<MatmulAlgo, String> {
    // SAFETY: per the contract.
    let mut algo = unsafe { init_algo(init, handle, key, cfg.algo) }
        .map_err(|st| format!("cublasLtMatmulAlgoInit(algo {}) returned {st}", cfg.algo))?;
    for (attr, word) in CONFIG_FIELDS.iter().skip(1) {
        let size = unsafe { attr_size(get, &algo, *attr) }
            .map_err(|st| format!("the size of config attribute {word} is unknown ({st})"))?;
        let bytes = cfg.get(*attr).unwrap_or(0).to_le_bytes();
        // SAFETY: bytes holds at least `size` bytes.
        let st = unsafe { set(&mut algo, *attr, bytes.as_ptr().cast(), size) };
        if st != STATUS_SUCCESS {
            return Err(format!("setting {word} failed with status {st}"));
        }
    }
    let back = unsafe { read_config(get, &algo) }
        .map_err(|st| format!("reading the rebuilt configuration failed with status {st}"))?;
    if back != *cfg {
        return Err(format!(
            "the library holds {} after being given {}",
            back.solution_name(),
            cfg.solution_name()
        ));
    }
    Ok(algo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::c_void;
    use tunedblas_core::cublaslt::*;

    // A stand-in for cuBLASLt's algo config accessors: values live in algo.data[attr], the
    // inner and cluster shapes are 2 bytes wide as in cublasLt.h, the rest 4.
    unsafe extern "C" fn fake_get(
        algo: *const MatmulAlgo,
        attr: i32,
        buf: *mut c_void,
        size: usize,
        written: *mut usize,
    ) -> LtStatus {
        let want = if attr >= CONFIG_INNER_SHAPE_ID { 2 } else { 4 };
        if !(0..=8).contains(&attr) {
            return STATUS_INVALID_VALUE;
        }
        if size == 0 {
            unsafe { *written = want };
            return STATUS_SUCCESS;
        }
        if size != want {
            return STATUS_INVALID_VALUE;
        }
        // The cluster shape shares word 0 with the id (high half): only 8 words exist.
        let slot = if attr == 8 { 0 } else { attr as usize };
        let v = unsafe { (*algo).data[slot] } >> if attr == 8 { 32 } else { 0 };
        let bytes = v.to_le_bytes();
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), size) };
        unsafe { *written = size };
        STATUS_SUCCESS
    }
    unsafe extern "C" fn fake_set(
        algo: *mut MatmulAlgo,
        attr: i32,
        buf: *const c_void,
        size: usize,
    ) -> LtStatus {
        let want = if attr >= CONFIG_INNER_SHAPE_ID { 2 } else { 4 };
        if attr == CONFIG_ID || !(0..=8).contains(&attr) || size != want {
            return STATUS_INVALID_VALUE;
        }
        let mut bytes = [0u8; 8];
        unsafe { std::ptr::copy_nonoverlapping(buf.cast::<u8>(), bytes.as_mut_ptr(), size) };
        let v = u64::from_le_bytes(bytes);
        // A library that cannot hold stages above 40 keeps its old value (silently).
        if attr == CONFIG_STAGES_ID && v > 40 {
            return STATUS_SUCCESS;
        }
        let d = unsafe { &mut (*algo).data };
        if attr == 8 {
            d[0] = (d[0] & 0xffff_ffff) | (v << 32);
        } else {
            d[attr as usize] = v;
        }
        STATUS_SUCCESS
    }
    unsafe extern "C" fn fake_init(
        _h: LtHandle,
        _c: ComputeType,
        _s: CudaDataType,
        _a: CudaDataType,
        _b: CudaDataType,
        _cc: CudaDataType,
        _d: CudaDataType,
        id: i32,
        algo: *mut MatmulAlgo,
    ) -> LtStatus {
        if id < 0 {
            return STATUS_NOT_SUPPORTED;
        }
        unsafe { *algo = MatmulAlgo::default() };
        unsafe { (*algo).data[0] = id as u32 as u64 };
        STATUS_SUCCESS
    }

    #[test]
    fn algorithms_are_rebuilt_from_their_configuration_and_checked() {
        let key = LtKey::linear(R_16BF, 2560, 256, 1536);
        let cfg = AlgoConfig::parse(
            "Gemm_Cublaslt_algo66_tile18_stages35_splitk2_red1_swizzle1_custom3_inner4_cluster7",
        )
        .unwrap();
        let h = std::ptr::null_mut();
        let algo = unsafe { build_algo(fake_init, fake_set, fake_get, h, &key, &cfg) }.unwrap();
        assert_eq!(unsafe { read_config(fake_get, &algo) }.unwrap(), cfg);
        // A value the library does not keep is caught, not served as something else.
        let mut big = cfg;
        big.stages = 99;
        let err = unsafe { build_algo(fake_init, fake_set, fake_get, h, &key, &big) }.unwrap_err();
        assert!(err.contains("stages99"), "{err}");
        let mut neg = cfg;
        neg.algo = -5;
        let err = unsafe { build_algo(fake_init, fake_set, fake_get, h, &key, &neg) }.unwrap_err();
        assert!(err.contains("AlgoInit"), "{err}");
    }
}
