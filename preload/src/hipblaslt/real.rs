//! The real hipBLASLt: the typed table of its functions (the C API, the `hipblaslt_ext` C++
//! functions by their mangled names, HIP's `hipGetDevice`), the call itself, the build each
//! handle belongs to (`crate::libs`), and the device a call runs on.

use std::ffi::{c_void, CString};

use tunedblas_core::abi::*;

use crate::libs::{handle_store, BuildRegistry, BuildSpec};

const HIPBLASLT_LIBS: &[&str] = &["libhipblaslt.so"];
const HIP_LIBS: &[&str] = &["libamdhip64.so"];

/// A `hipblaslt_ext` C++ function: only ever called by the exception guard
/// (`super::guard`), which knows its C++ type; here an address.
pub type CxxFn = unsafe extern "C" fn();

crate::real::hook_table! {
    pub struct HipLtHooks; static HIPLT; libs = HIPBLASLT_LIBS;
    matmul: HipblasLtMatmulFn = c"hipblasLtMatmul",
    desc_get: HipblasLtMatmulDescGetAttributeFn = c"hipblasLtMatmulDescGetAttribute",
    desc_create: HipblasLtMatmulDescCreateFn = c"hipblasLtMatmulDescCreate",
    desc_destroy: HipblasLtMatmulDescDestroyFn = c"hipblasLtMatmulDescDestroy",
    desc_set: HipblasLtMatmulDescSetAttributeFn = c"hipblasLtMatmulDescSetAttribute",
    layout_create: HipblasLtMatrixLayoutCreateFn = c"hipblasLtMatrixLayoutCreate",
    layout_destroy: HipblasLtMatrixLayoutDestroyFn = c"hipblasLtMatrixLayoutDestroy",
    layout_set: HipblasLtMatrixLayoutSetAttributeFn = c"hipblasLtMatrixLayoutSetAttribute",
    create: HipblasLtCreateFn = c"hipblasLtCreate",
    destroy: HipblasLtDestroyFn = c"hipblasLtDestroy",
    // The mangled names of src/abi.rs's HIPBLASLT_EXT_* (a test below keeps them equal).
    index_from_algo: CxxFn =
        c"_ZN13hipblaslt_ext16getIndexFromAlgoER22_hipblasLtMatmulAlgo_t",
    algos_from_index: CxxFn =
        c"_ZN13hipblaslt_ext17getAlgosFromIndexEPvRSt6vectorIiSaIiEERS1_I33_hipblasLtMatmulHeuristicResult_tSaIS5_EE",
    is_supported: CxxFn =
        c"_ZN13hipblaslt_ext21matmulIsAlgoSupportedEPvP27hipblasLtMatmulDescOpaque_tPKvP29hipblasLtMatrixLayoutOpaque_tS6_S4_S6_S6_R22_hipblasLtMatmulAlgo_tRm",
    hip_get_device: HipGetDeviceFn = c"hipGetDevice" in HIP_LIBS,
}

handle_store!(
    /// The handles of the registry below.
    HipLtHandles
);
/// hipBLASLt's builds and handles.
pub static HIPBLASLT: BuildRegistry<HipLtHooks, HipLtHandles> = BuildRegistry::new(BuildSpec {
    what: "hipBLASLt",
    create: c"hipblasLtCreate",
    hooks: &HIPLT,
    changed: || super::STATE.library_changed(),
    several: || {},
    device: current_device,
    serving: |_| {},
});

/// HIP's current device of the calling thread, 0 if unknown.
pub fn current_device() -> i32 {
    crate::real::device_or_zero(HIPLT.hip_get_device())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hook table's C++ names are src/abi.rs's, which the conformance suite checks
    /// against the real hipBLASLt 7.1.1 headers and library.
    #[test]
    fn the_cxx_names_are_the_checked_ones() {
        let name = |h: &crate::real::Hook| h.name.to_str().unwrap().to_owned();
        assert_eq!(
            name(&HIPLT.index_from_algo),
            HIPBLASLT_EXT_GET_INDEX_FROM_ALGO
        );
        assert_eq!(
            name(&HIPLT.algos_from_index),
            HIPBLASLT_EXT_GET_ALGOS_FROM_INDEX
        );
        assert_eq!(
            name(&HIPLT.is_supported),
            HIPBLASLT_EXT_MATMUL_IS_ALGO_SUPPORTED
        );
    }
}
