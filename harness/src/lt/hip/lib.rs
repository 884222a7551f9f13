//! hipBLASLt, loaded at run time: the C API the tuner builds problems with, and the four
//! `hipblaslt_ext` functions it reaches through the guard (every algorithm for a problem,
//! an index's algorithm and an algorithm's index, whether an algorithm runs a problem).

use std::ffi::c_void;
use std::path::{Path, PathBuf};

use tunedblas_core::abi::*;

use super::guard::{self, Guard, THREW};
use crate::lt::cuda::{candidates, err, open_first, sym, Error, Result};

/// Names tried for hipBLASLt, newest first.
pub const HIPBLASLT_NAMES: &[&str] = &["libhipblaslt.so.1", "libhipblaslt.so.0", "libhipblaslt.so"];

pub struct HipLt {
    /// The file the loader mapped (its sha256 names the profile's build).
    pub path: PathBuf,
    /// Its loader handle (the HIP runtime it links is found through it).
    pub dl: *mut c_void,
    create: HipblasLtCreateFn,
    pub matmul: HipblasLtMatmulFn,
    pub desc_create: HipblasLtMatmulDescCreateFn,
    pub desc_destroy: HipblasLtMatmulDescDestroyFn,
    pub desc_set: HipblasLtMatmulDescSetAttributeFn,
    pub layout_create: HipblasLtMatrixLayoutCreateFn,
    pub layout_destroy: HipblasLtMatrixLayoutDestroyFn,
    pub layout_set: HipblasLtMatrixLayoutSetAttributeFn,
    pub pref_create: HipblasLtMatmulPreferenceCreateFn,
    pub pref_destroy: HipblasLtMatmulPreferenceDestroyFn,
    pub pref_set: HipblasLtMatmulPreferenceSetAttributeFn,
    pub heuristic: HipblasLtMatmulAlgoGetHeuristicFn,
    version: HipblasLtGetVersionFn,
    all_algos: *mut c_void,
    from_index: *mut c_void,
    index_of: *mut c_void,
    is_supported: *mut c_void,
    pub guard: Guard,
    pub handle: HipblasLtHandle,
}

/// A hipBLASLt status as a result.
pub fn check(what: &str, st: HipblasStatus) -> Result<()> {
    if st == HIPBLAS_STATUS_SUCCESS {
        Ok(())
    } else if st == THREW {
        err(format!("{what} threw a C++ exception"))
    } else {
        err(format!("{what} returned hipBLAS status {st}"))
    }
}

impl HipLt {
    /// Loads hipBLASLt (`path`, else `$TUNEDBLAS_HIPBLASLT`, else `libhipblaslt.so.1`), its
    /// `hipblaslt_ext` functions and the guard; no handle yet ([`HipLt::create_handle`]).
    pub fn load(path: Option<&Path>) -> Result<HipLt> {
        let (h, path) = open_first(
            &candidates(path, "TUNEDBLAS_HIPBLASLT", HIPBLASLT_NAMES),
            libc::RTLD_NOW | libc::RTLD_GLOBAL,
        )
        .map_err(|e| {
            Error(format!(
                "cannot load hipBLASLt ({}); pass --lib <libhipblaslt.so>",
                e.0
            ))
        })?;
        // The file actually loaded (a soname may resolve anywhere on the search path).
        let path = unsafe { sym::<*mut c_void>(h, "hipblasLtMatmul") }
            .map_err(|_| {
                Error(format!(
                    "{} is not hipBLASLt (no hipblasLtMatmul)",
                    path.display()
                ))
            })
            .map(|p| tunedblas_core::identity::library_of_address(p as usize).unwrap_or(path))?;
        let guard = guard::load()?;
        // SAFETY: each symbol has the C type src/abi.rs gives it (hipblaslt.h; the C++ ones
        // are only ever called through the guard, with the real header's signatures).
        let lt = unsafe {
            HipLt {
                dl: h,
                create: sym(h, "hipblasLtCreate")?,
                matmul: sym(h, "hipblasLtMatmul")?,
                desc_create: sym(h, "hipblasLtMatmulDescCreate")?,
                desc_destroy: sym(h, "hipblasLtMatmulDescDestroy")?,
                desc_set: sym(h, "hipblasLtMatmulDescSetAttribute")?,
                layout_create: sym(h, "hipblasLtMatrixLayoutCreate")?,
                layout_destroy: sym(h, "hipblasLtMatrixLayoutDestroy")?,
                layout_set: sym(h, "hipblasLtMatrixLayoutSetAttribute")?,
                pref_create: sym(h, "hipblasLtMatmulPreferenceCreate")?,
                pref_destroy: sym(h, "hipblasLtMatmulPreferenceDestroy")?,
                pref_set: sym(h, "hipblasLtMatmulPreferenceSetAttribute")?,
                heuristic: sym(h, "hipblasLtMatmulAlgoGetHeuristic")?,
                version: sym(h, "hipblasLtGetVersion")?,
                all_algos: sym(h, HIPBLASLT_EXT_GET_ALL_ALGOS)?,
                from_index: sym(h, HIPBLASLT_EXT_GET_ALGOS_FROM_INDEX)?,
                index_of: sym(h, HIPBLASLT_EXT_GET_INDEX_FROM_ALGO)?,
                is_supported: sym(h, HIPBLASLT_EXT_MATMUL_IS_ALGO_SUPPORTED)?,
                guard,
                handle: std::ptr::null_mut(),
                path,
            }
        };
        Ok(lt)
    }

    /// Makes the handle every call uses (on the current device: this needs a GPU).
    pub fn create_handle(&mut self) -> Result<()> {
        let mut handle = std::ptr::null_mut();
        // SAFETY: out-pointer.
        check("hipblasLtCreate", unsafe { (self.create)(&mut handle) })?;
        self.handle = handle;
        Ok(())
    }

    /// `hipblasLtGetVersion` (e.g. 100100 for hipBLASLt 1.1.0; 0 where it fails).
    pub fn version(&self) -> i32 {
        let mut v = 0;
        // SAFETY: a live handle, an out-pointer.
        unsafe { (self.version)(self.handle, &mut v) };
        v
    }

    /// `getAllAlgos` for a plain GEMM of these operations and types (hipBLASLt numbers).
    #[allow(clippy::too_many_arguments)]
    pub fn all_algos(
        &self,
        op_a: i32,
        op_b: i32,
        types: [HipDataType; 4],
        compute: HipblasComputeType,
    ) -> Result<Vec<HipblasLtMatmulHeuristicResult>> {
        let mut out = vec![HipblasLtMatmulHeuristicResult::default(); 256];
        loop {
            let mut total = 0usize;
            // SAFETY: the guard calls getAllAlgos with its own vector and copies at most
            // out.len() results into `out`.
            check("hipblaslt_ext::getAllAlgos", unsafe {
                (self.guard.all_algos)(
                    self.all_algos,
                    self.handle,
                    EXT_GEMM_TYPE_GEMM,
                    op_a,
                    op_b,
                    types[0],
                    types[1],
                    types[2],
                    types[3],
                    compute,
                    out.as_mut_ptr(),
                    out.len(),
                    &mut total,
                )
            })?;
            if total <= out.len() {
                out.truncate(total);
                return Ok(out);
            }
            out = vec![HipblasLtMatmulHeuristicResult::default(); total];
        }
    }

    /// `getAlgosFromIndex` for one index: the algorithm a `Gemm_Hipblaslt_<index>` row
    /// names, as the interposer rebuilds it.
    pub fn algo_from_index(&self, index: i32) -> Result<HipblasLtMatmulAlgo> {
        let mut algo = HipblasLtMatmulAlgo::default();
        // SAFETY: the guard calls getAlgosFromIndex with its own vectors and writes `algo`.
        match unsafe {
            (self.guard.algo_from_index)(self.from_index, self.handle, index, &mut algo)
        } {
            -1 => err(format!(
                "this hipBLASLt build has no algorithm of index {index}"
            )),
            st => check(&format!("hipblaslt_ext::getAlgosFromIndex({index})"), st).map(|()| algo),
        }
    }

    /// `getIndexFromAlgo`: the index a `Gemm_Hipblaslt_<index>` row names.
    pub fn index_of(&self, algo: &HipblasLtMatmulAlgo) -> Result<i32> {
        let mut a = *algo;
        let mut index = -1;
        // SAFETY: the guard calls getIndexFromAlgo on our copy.
        check("hipblaslt_ext::getIndexFromAlgo", unsafe {
            (self.guard.index_of)(self.index_of, &mut a, &mut index)
        })?;
        Ok(index)
    }

    /// `matmulIsAlgoSupported` for the problem of these descriptors: the workspace it needs.
    /// hipBLASLt writes into `algo` how the problem must run with it (e.g. its fallback
    /// flag, which `hipblasLtMatmul` reads): the caller runs the algorithm as updated here,
    /// as the interposer and PyTorch TunableOp do.
    #[allow(clippy::too_many_arguments)]
    pub fn is_supported(
        &self,
        desc: HipblasLtMatmulDesc,
        alpha: *const c_void,
        layouts: [HipblasLtMatrixLayout; 4],
        beta: *const c_void,
        algo: &mut HipblasLtMatmulAlgo,
    ) -> std::result::Result<usize, HipblasStatus> {
        let a = algo;
        let mut ws = 0usize;
        // SAFETY: live descriptors of one problem; the guard passes `a` and `ws` by reference.
        let st = unsafe {
            (self.guard.is_supported)(
                self.is_supported,
                self.handle,
                desc,
                alpha,
                layouts[0],
                layouts[1],
                beta,
                layouts[2],
                layouts[3],
                a,
                &mut ws,
            )
        };
        if st == HIPBLAS_STATUS_SUCCESS {
            Ok(ws)
        } else {
            Err(st)
        }
    }
}
