//! The cuBLASLt backend's pure part: ABI values, the problem key built from a matmul's
//! descriptors, the readable algorithm configuration, TunableOp names for both, and the
//! lookup table the interposer serves from. No CUDA is needed to build or test any of it,
//! and it makes no FFI call: reading and rebuilding algorithms through cuBLASLt is
//! `lt-algo/` (shared by the interposer's `preload/src/cublaslt/` and `cli/src/lt/`).
//!
//! # The key
//!
//! A `cublasLtMatmul` call describes its problem in a matmul descriptor (compute and scale
//! type, transposes, epilogue, pointer mode, SM count target) and four matrix layouts (type,
//! order, rows, cols, leading dimension, batch count and stride). [`key_from_attrs`] turns
//! what the interposer read from those into an [`LtKey`]: `m`, `n` are the rows and columns
//! of D, `k` the inner size; everything that can change which kernel runs or what it
//! computes is in the key. Calls the key cannot describe faithfully (row-major or tiled
//! orders, complex or 8-bit types, mismatched batch counts) are refused and passed through.
//!
//! # Names in a profile
//!
//! Keys PyTorch can express get PyTorch's own TunableOp names, so a profile reads like the
//! file PyTorch would write for the same GEMM: `F.linear(x[M,K], W[N,K])` in bf16 is
//! `GemmTunableOp_BFloat16_TN,tn_<N>_<M>_<K>_ld_<K>_<K>_<N>`. All other keys use an
//! extension op name that PyTorch skips harmlessly:
//!
//! ```text
//! TunedblasLt_<Single|Strided>_<a>_<b>_<c>_<d>_<compute>_<scale>_<AB>,
//!   <ab>_<m>_<n>_<k>[_B_<batch>]_ld_<lda>_<ldb>_<ldc>_<ldd>[_st_<sa>_<sb>_<sc>_<sd>]_ep_<epilogue>[_bias_<type>]_pm_<mode>_sm_<count>
//! ```
//!
//! A tuned solution is the algorithm's readable configuration, rebuilt at run time with
//! `cublasLtMatmulAlgoInit` and `cublasLtMatmulAlgoConfigSetAttribute`:
//!
//! ```text
//! Gemm_Cublaslt_algo<id>_tile<t>_stages<s>_splitk<n>_red<r>_swizzle<w>_custom<c>_inner<i>_cluster<l>
//! ```
//!
//! Values are the cuBLASLt enum numbers (`cublasLtMatmulTile_t`, `cublasLtMatmulStages_t`,
//! `cublasLtReductionScheme_t`, `cublasLtClusterShape_t`, ...). `Default` means the caller's
//! own algorithm (normally cuBLASLt's first heuristic answer) was the fastest.

use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::BuildHasherDefault;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustc_hash::FxHasher;

use crate::key::{ProblemKey, Trans};

mod call_key;
mod pattern;
mod table;
pub use call_key::*;
pub use pattern::LtPattern;
pub use table::*;

// ---------------------------------------------------------------------------------------
// ABI: values from NVIDIA's public headers (cublasLt.h, cublas_api.h, library_types.h).
// ---------------------------------------------------------------------------------------

/// `cublasStatus_t`.
pub type LtStatus = i32;
c_values!(LtStatus:
    STATUS_SUCCESS = 0, STATUS_NOT_INITIALIZED = 1, STATUS_ALLOC_FAILED = 3,
    STATUS_INVALID_VALUE = 7, STATUS_ARCH_MISMATCH = 8, STATUS_EXECUTION_FAILED = 13,
    STATUS_INTERNAL_ERROR = 14, STATUS_NOT_SUPPORTED = 15,
);

/// `cudaDataType_t`.
pub type CudaDataType = i32;
c_values!(CudaDataType:
    R_32F = 0, R_64F = 1, R_16F = 2, R_8I = 3, R_32I = 10, R_16BF = 14, R_8F_E4M3 = 28,
    R_8F_E5M2 = 29,
);

/// `cublasComputeType_t`.
pub type ComputeType = i32;
c_values!(ComputeType:
    COMPUTE_16F = 64, COMPUTE_16F_PEDANTIC = 65, COMPUTE_32F = 68, COMPUTE_32F_PEDANTIC = 69,
    COMPUTE_64F = 70, COMPUTE_64F_PEDANTIC = 71, COMPUTE_32I = 72, COMPUTE_32I_PEDANTIC = 73,
    COMPUTE_32F_FAST_16F = 74, COMPUTE_32F_FAST_16BF = 75, COMPUTE_32F_FAST_TF32 = 77,
);

// `cublasOperation_t`.
c_values!(i32: OP_N = 0, OP_T = 1, OP_C = 2);

// `cublasLtMatmulDescAttributes_t` (the ones tunedblas reads or sets).
c_values!(i32:
    DESC_COMPUTE_TYPE = 0, DESC_SCALE_TYPE = 1, DESC_POINTER_MODE = 2, DESC_TRANSA = 3,
    DESC_TRANSB = 4, DESC_EPILOGUE = 7, DESC_BIAS_POINTER = 8, DESC_SM_COUNT_TARGET = 15,
    DESC_BIAS_DATA_TYPE = 26,
);

// `cublasLtMatrixLayoutAttribute_t`.
c_values!(i32:
    LAYOUT_TYPE = 0, LAYOUT_ORDER = 1, LAYOUT_ROWS = 2, LAYOUT_COLS = 3, LAYOUT_LD = 4,
    LAYOUT_BATCH_COUNT = 5, LAYOUT_STRIDED_BATCH_OFFSET = 6,
    /// `CUBLASLT_MATRIX_LAYOUT_BATCH_MODE` (CUDA 13; absent before): 0 is strided batches, the
    /// only mode served (another mode batches through arrays of pointers).
    LAYOUT_BATCH_MODE = 8,
);

/// `cublasLtOrder_t`: only column-major is served.
pub const ORDER_COL: i32 = 0;

// `cublasLtMatmulPreferenceAttributes_t`.
c_values!(i32:
    PREF_MAX_WORKSPACE_BYTES = 1, PREF_MIN_ALIGNMENT_A_BYTES = 5, PREF_MIN_ALIGNMENT_B_BYTES = 6,
    PREF_MIN_ALIGNMENT_C_BYTES = 7, PREF_MIN_ALIGNMENT_D_BYTES = 8,
);

// `cublasLtMatmulAlgoConfigAttributes_t`.
c_values!(i32:
    CONFIG_ID = 0, CONFIG_TILE_ID = 1, CONFIG_SPLITK_NUM = 2, CONFIG_REDUCTION_SCHEME = 3,
    CONFIG_CTA_SWIZZLING = 4, CONFIG_CUSTOM_OPTION = 5, CONFIG_STAGES_ID = 6,
    CONFIG_INNER_SHAPE_ID = 7, CONFIG_CLUSTER_SHAPE_ID = 8,
);

/// `cublasLtMatmulAlgoCapAttributes_t`: minimum alignment of A, B, C, D in bytes (uint32).
pub const CAP_MIN_ALIGNMENT_A_BYTES: i32 = 16;
/// `CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX` (int32): custom options run 0..=this.
pub const CAP_CUSTOM_OPTION_MAX: i32 = 7;

/// `cublasLtEpilogue_t`.
pub const EPILOGUE_DEFAULT: u32 = 1;
pub const EPILOGUE_BIAS: u32 = 4;

/// `cublasLtPointerMode_t`: host scalars.
pub const POINTER_MODE_HOST: i32 = 0;

/// `cublasLtMatmulAlgo_t`: 8 x uint64, semi-opaque; serializable for one library version.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatmulAlgo {
    pub data: [u64; 8],
}

/// `cublasLtMatmulHeuristicResult_t` (96 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HeuristicResult {
    pub algo: MatmulAlgo,
    pub workspace_size: usize,
    pub state: LtStatus,
    pub waves_count: f32,
    pub reserved: [i32; 4],
}

/// Opaque pointers of the cuBLASLt API.
pub type LtHandle = *mut c_void;
pub type MatmulDesc = *mut c_void;
pub type MatrixLayout = *mut c_void;
pub type MatmulPreference = *mut c_void;
pub type CudaStream = *mut c_void;

/// `cublasLtMatmul`: 16 arguments; `algo` NULL means the library heuristic.
/// "C-unwind": a thread cancelled inside cuBLASLt unwinds through the interposer back to its
/// host (as for rocBLAS's entry points, `crate::abi`).
pub type MatmulFn = unsafe extern "C-unwind" fn(
    LtHandle,
    MatmulDesc,
    *const c_void, // alpha
    *const c_void, // A
    MatrixLayout,
    *const c_void, // B
    MatrixLayout,
    *const c_void, // beta
    *const c_void, // C
    MatrixLayout,
    *mut c_void, // D
    MatrixLayout,
    *const MatmulAlgo,
    *mut c_void, // workspace
    usize,       // workspace bytes
    CudaStream,
) -> LtStatus;
/// `cublasLtMatmulDescGetAttribute` / `cublasLtMatrixLayoutGetAttribute` /
/// `cublasLtMatmulPreferenceGetAttribute`: (object, attr, buf, size, size written).
pub type GetAttributeFn =
    unsafe extern "C" fn(*mut c_void, i32, *mut c_void, usize, *mut usize) -> LtStatus;
/// The matching setters: (object, attr, buf, size).
pub type SetAttributeFn = unsafe extern "C" fn(*mut c_void, i32, *const c_void, usize) -> LtStatus;
/// `cublasLtMatmulAlgoConfigGetAttribute` / `cublasLtMatmulAlgoCapGetAttribute`.
pub type AlgoGetAttributeFn =
    unsafe extern "C" fn(*const MatmulAlgo, i32, *mut c_void, usize, *mut usize) -> LtStatus;
/// `cublasLtMatmulAlgoConfigSetAttribute`.
pub type AlgoSetAttributeFn =
    unsafe extern "C" fn(*mut MatmulAlgo, i32, *const c_void, usize) -> LtStatus;
/// `cublasLtMatmulAlgoInit(handle, compute, scale, Atype, Btype, Ctype, Dtype, algoId, algo*)`.
#[rustfmt::skip]
pub type AlgoInitFn = unsafe extern "C" fn(
    LtHandle, ComputeType, CudaDataType,
    CudaDataType, CudaDataType, CudaDataType, CudaDataType,
    i32, *mut MatmulAlgo,
) -> LtStatus;
/// `cublasLtMatmulAlgoCheck(handle, desc, A, B, C, D layouts, algo*, result*)`.
#[rustfmt::skip]
pub type AlgoCheckFn = unsafe extern "C" fn(
    LtHandle, MatmulDesc,
    MatrixLayout, MatrixLayout, MatrixLayout, MatrixLayout,
    *const MatmulAlgo, *mut HeuristicResult,
) -> LtStatus;
/// `cublasLtMatmulAlgoGetHeuristic(handle, desc, A, B, C, D, pref, requested, results*, returned*)`.
#[rustfmt::skip]
pub type GetHeuristicFn = unsafe extern "C" fn(
    LtHandle, MatmulDesc,
    MatrixLayout, MatrixLayout, MatrixLayout, MatrixLayout,
    MatmulPreference, i32, *mut HeuristicResult, *mut i32,
) -> LtStatus;
pub type CreateFn = unsafe extern "C" fn(*mut LtHandle) -> LtStatus;
pub type DestroyFn = unsafe extern "C" fn(*mut c_void) -> LtStatus;
pub type DescCreateFn =
    unsafe extern "C" fn(*mut MatmulDesc, ComputeType, CudaDataType) -> LtStatus;
pub type LayoutCreateFn =
    unsafe extern "C" fn(*mut MatrixLayout, CudaDataType, u64, u64, i64) -> LtStatus;
pub type PrefCreateFn = unsafe extern "C" fn(*mut MatmulPreference) -> LtStatus;
pub type GetVersionFn = unsafe extern "C" fn() -> usize;

// ---------------------------------------------------------------------------------------
// The key.
// ---------------------------------------------------------------------------------------

/// One cuBLASLt matmul problem. See the module docs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct LtKey {
    pub a_type: CudaDataType,
    pub b_type: CudaDataType,
    pub c_type: CudaDataType,
    pub d_type: CudaDataType,
    pub compute: ComputeType,
    pub scale: CudaDataType,
    pub trans_a: Trans,
    pub trans_b: Trans,
    pub epilogue: u32,
    /// The bias vector's type when the epilogue adds a bias, else -1.
    pub bias_type: i32,
    pub pointer_mode: i32,
    /// `CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET` (0: the whole device).
    pub sm_count: i32,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub lda: i64,
    pub ldb: i64,
    pub ldc: i64,
    pub ldd: i64,
    /// 1 for a single matmul.
    pub batch: i64,
    /// 0 when `batch` is 1.
    pub stride_a: i64,
    pub stride_b: i64,
    pub stride_c: i64,
    pub stride_d: i64,
}

/// What the interposer read from the matmul descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulAttrs {
    pub compute: ComputeType,
    pub scale: CudaDataType,
    pub pointer_mode: i32,
    pub trans_a: i32,
    pub trans_b: i32,
    pub epilogue: u32,
    /// Only read when the epilogue adds a bias; -1 otherwise.
    pub bias_type: i32,
    pub sm_count: i32,
}

impl Default for MatmulAttrs {
    fn default() -> Self {
        MatmulAttrs {
            compute: COMPUTE_32F,
            scale: R_32F,
            pointer_mode: POINTER_MODE_HOST,
            trans_a: OP_N,
            trans_b: OP_N,
            epilogue: EPILOGUE_DEFAULT,
            bias_type: -1,
            sm_count: 0,
        }
    }
}

/// What the interposer read from one matrix layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutAttrs {
    pub dtype: CudaDataType,
    pub order: i32,
    pub rows: u64,
    pub cols: u64,
    pub ld: i64,
    pub batch: i32,
    pub stride: i64,
}

impl LayoutAttrs {
    /// A plain column-major matrix, as `cublasLtMatrixLayoutCreate` makes it.
    pub fn col(dtype: CudaDataType, rows: u64, cols: u64, ld: i64) -> LayoutAttrs {
        LayoutAttrs {
            dtype,
            order: ORDER_COL,
            rows,
            cols,
            ld,
            batch: 1,
            stride: 0,
        }
    }
}

/// True when the epilogue reads a bias vector (`CUBLASLT_EPILOGUE_*BIAS`, bit 4), whose type
/// then belongs to the key. The gradient epilogues (`*_BGRAD`) write one instead.
pub fn epilogue_has_bias(epilogue: u32) -> bool {
    epilogue & EPILOGUE_BIAS != 0 && epilogue & 16 == 0
}

/// The real types whose kernels tunedblas serves: f16, bf16, f32, f64. Complex, 8-bit and
/// block-scaled types carry scale pointers and modes the key does not hold.
fn servable_type(t: CudaDataType) -> bool {
    matches!(t, R_16F | R_16BF | R_32F | R_64F)
}

fn trans_of(op: i32) -> Option<Trans> {
    match op {
        OP_N => Some(Trans::N),
        OP_T => Some(Trans::T),
        _ => None, // conjugate transposes only matter for complex types, which are not served
    }
}

/// Converts a `cublasOperation_t` letter back.
pub fn op_of(t: Trans) -> i32 {
    match t {
        Trans::N => OP_N,
        Trans::T => OP_T,
        Trans::C => OP_C,
    }
}

/// Builds the key of a call from its descriptors; the error says why the call is not one
/// tunedblas serves (it is then passed through untouched and not recorded).
pub fn key_from_attrs(
    mm: &MatmulAttrs,
    a: &LayoutAttrs,
    b: &LayoutAttrs,
    c: &LayoutAttrs,
    d: &LayoutAttrs,
) -> Result<LtKey, &'static str> {
    if ![a, b, c, d].iter().all(|l| servable_type(l.dtype)) {
        return Err("a matrix type other than f16, bf16, f32, f64");
    }
    if ![a, b, c, d].iter().all(|l| l.order == ORDER_COL) {
        return Err("a matrix that is not column-major");
    }
    let (Some(trans_a), Some(trans_b)) = (trans_of(mm.trans_a), trans_of(mm.trans_b)) else {
        return Err("a transpose other than N or T");
    };
    let dim = |v: u64| i64::try_from(v).map_err(|_| "a size beyond int64");
    let (m, n) = (dim(d.rows)?, dim(d.cols)?);
    let (a_rows, a_cols) = (dim(a.rows)?, dim(a.cols)?);
    let (k, a_m) = if trans_a == Trans::N {
        (a_cols, a_rows)
    } else {
        (a_rows, a_cols)
    };
    let (b_k, b_n) = if trans_b == Trans::N {
        (dim(b.rows)?, dim(b.cols)?)
    } else {
        (dim(b.cols)?, dim(b.rows)?)
    };
    if a_m != m || b_k != k || b_n != n || dim(c.rows)? != m || dim(c.cols)? != n {
        return Err("layouts whose sizes do not agree");
    }
    let batch = i64::from(d.batch);
    if batch < 1 || [a, b, c].iter().any(|l| i64::from(l.batch) != batch) {
        return Err("batch counts that differ between the matrices");
    }
    if [a, b, c, d].iter().any(|l| l.ld < 1 || l.stride < 0) {
        return Err("a negative stride or a leading dimension below 1");
    }
    let strides = if batch == 1 {
        [0; 4]
    } else {
        [a.stride, b.stride, c.stride, d.stride]
    };
    Ok(LtKey {
        a_type: a.dtype,
        b_type: b.dtype,
        c_type: c.dtype,
        d_type: d.dtype,
        compute: mm.compute,
        scale: mm.scale,
        trans_a,
        trans_b,
        epilogue: mm.epilogue,
        bias_type: if epilogue_has_bias(mm.epilogue) {
            mm.bias_type
        } else {
            -1
        },
        pointer_mode: mm.pointer_mode,
        sm_count: mm.sm_count,
        m,
        n,
        k,
        lda: a.ld,
        ldb: b.ld,
        ldc: c.ld,
        ldd: d.ld,
        batch,
        stride_a: strides[0],
        stride_b: strides[1],
        stride_c: strides[2],
        stride_d: strides[3],
    })
}

impl LtKey {
    /// `F.linear(x[tokens, k], W[n_out, k])` as PyTorch issues it through cuBLASLt
    /// (column-major: D[n_out, tokens] = W^T-as-stored x), all matrices of type `t`.
    pub fn linear(t: CudaDataType, n_out: i64, tokens: i64, k: i64) -> LtKey {
        let (compute, scale) = if t == R_64F {
            (COMPUTE_64F, R_64F)
        } else {
            (COMPUTE_32F, R_32F)
        };
        LtKey {
            a_type: t,
            b_type: t,
            c_type: t,
            d_type: t,
            compute,
            scale,
            trans_a: Trans::T,
            trans_b: Trans::N,
            epilogue: EPILOGUE_DEFAULT,
            bias_type: -1,
            pointer_mode: POINTER_MODE_HOST,
            sm_count: 0,
            m: n_out,
            n: tokens,
            k,
            lda: k,
            ldb: k,
            ldc: n_out,
            ldd: n_out,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            stride_d: 0,
        }
    }

    /// Rows and columns of A, B, C and D as stored (before the transposes).
    pub fn stored_shapes(&self) -> [(i64, i64); 4] {
        crate::key::stored_shapes(self.trans_a, self.trans_b, self.m, self.n, self.k)
    }

    /// The layouts of this key, as a harness creates them.
    pub fn layouts(&self) -> [LayoutAttrs; 4] {
        let shapes = self.stored_shapes();
        let lds = [self.lda, self.ldb, self.ldc, self.ldd];
        let types = [self.a_type, self.b_type, self.c_type, self.d_type];
        let strides = [self.stride_a, self.stride_b, self.stride_c, self.stride_d];
        std::array::from_fn(|i| LayoutAttrs {
            dtype: types[i],
            order: ORDER_COL,
            rows: shapes[i].0 as u64,
            cols: shapes[i].1 as u64,
            ld: lds[i],
            batch: self.batch as i32,
            stride: strides[i],
        })
    }

    /// This problem `batch` times over, the matrices of each packed after the last's
    /// (strided-batched at the packed strides; plain for a batch of one).
    pub fn packed_batch(mut self, batch: i64) -> LtKey {
        self.batch = batch;
        self.set_strides(if batch == 1 {
            [0; 4]
        } else {
            self.packed_strides()
        });
        self
    }

    /// The strides of A, B, C and D.
    pub fn strides(&self) -> [i64; 4] {
        [self.stride_a, self.stride_b, self.stride_c, self.stride_d]
    }

    fn set_strides(&mut self, s: [i64; 4]) {
        [self.stride_a, self.stride_b, self.stride_c, self.stride_d] = s;
    }

    /// Strides of packed matrices with this key's leading dimensions.
    pub fn packed_strides(&self) -> [i64; 4] {
        let s = self.stored_shapes();
        [
            self.lda.saturating_mul(s[0].1),
            self.ldb.saturating_mul(s[1].1),
            self.ldc.saturating_mul(s[2].1),
            self.ldd.saturating_mul(s[3].1),
        ]
    }

    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch as f64
    }

    /// Leading dimensions at least the rows stored, positive sizes, no overflow: the
    /// problems a harness may allocate and run.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [("m", self.m), ("n", self.n), ("k", self.k)] {
            if v < 1 {
                return Err(format!("size {name}={v} is not positive"));
            }
        }
        if self.batch < 1 {
            return Err(format!("batch {} is not positive", self.batch));
        }
        let shapes = self.stored_shapes();
        for (i, ld) in [self.lda, self.ldb, self.ldc, self.ldd].iter().enumerate() {
            if *ld < shapes[i].0 {
                return Err(format!(
                    "ld{}={ld} is smaller than the {} rows it holds",
                    ["a", "b", "c", "d"][i],
                    shapes[i].0
                ));
            }
            if ld.checked_mul(shapes[i].1).is_none() {
                return Err("the problem's sizes overflow 64 bits".into());
            }
        }
        Ok(())
    }

    /// Whether a caller could have made this key: known compute, scale and bias types, a
    /// known pointer mode, an epilogue and SM count in range, and the sizes of
    /// [`LtKey::check`] with no matrix over 2^40 elements. Checked before a key is
    /// recorded as a miss: a matmul racing the destroy of its descriptor (the caller's
    /// bug) reads freed memory through the library's getters, and once wrote keys such as
    /// compute type 1564696069 into the miss log.
    pub fn plausible(&self) -> Result<(), String> {
        const COMPUTES: [ComputeType; 11] = [
            COMPUTE_16F,
            COMPUTE_16F_PEDANTIC,
            COMPUTE_32F,
            COMPUTE_32F_PEDANTIC,
            COMPUTE_64F,
            COMPUTE_64F_PEDANTIC,
            COMPUTE_32I,
            COMPUTE_32I_PEDANTIC,
            COMPUTE_32F_FAST_16F,
            COMPUTE_32F_FAST_16BF,
            COMPUTE_32F_FAST_TF32,
        ];
        let known_type = |t: CudaDataType| type_bytes(t) > 0;
        if !COMPUTES.contains(&self.compute) {
            return Err(format!(
                "compute type {} is not one of cuBLAS's",
                self.compute
            ));
        }
        if !known_type(self.scale) {
            return Err(format!(
                "scale type {} is not a known real type",
                self.scale
            ));
        }
        for t in [self.a_type, self.b_type, self.c_type, self.d_type] {
            if !known_type(t) {
                return Err(format!("matrix type {t} is not a known real type"));
            }
        }
        if self.bias_type != -1 && !known_type(self.bias_type) {
            return Err(format!(
                "bias type {} is not a known real type",
                self.bias_type
            ));
        }
        if !(0..=4).contains(&self.pointer_mode) {
            return Err(format!(
                "pointer mode {} is not a known one",
                self.pointer_mode
            ));
        }
        if self.epilogue == 0 || self.epilogue >= 1 << 20 {
            return Err(format!("epilogue {} is out of range", self.epilogue));
        }
        if !(0..=65_535).contains(&self.sm_count) {
            return Err(format!("SM count {} is out of range", self.sm_count));
        }
        self.check()?;
        let strides = [self.stride_a, self.stride_b, self.stride_c, self.stride_d];
        let lds = [self.lda, self.ldb, self.ldc, self.ldd];
        for (i, (_, cols)) in self.stored_shapes().into_iter().enumerate() {
            let one = lds[i].saturating_mul(cols);
            let all = strides[i]
                .saturating_mul(self.batch - 1)
                .saturating_add(one);
            if strides[i] < 0 || all > 1 << 40 {
                return Err(format!(
                    "matrix {} spans {all} elements, more than any device holds",
                    ["A", "B", "C", "D"][i]
                ));
            }
        }
        Ok(())
    }

    /// Bytes of one element of each of A, B, C, D.
    pub fn elem_bytes(&self) -> [usize; 4] {
        [self.a_type, self.b_type, self.c_type, self.d_type].map(type_bytes)
    }
}

/// The tests' usual cuBLASLt layer: [`LtKey::linear`] of bf16 tensors.
#[cfg(test)]
pub(crate) fn bf16_linear(n_out: i64, tokens: i64, k: i64) -> LtKey {
    LtKey::linear(R_16BF, n_out, tokens, k)
}

/// Bytes of one element of a real type (0 for types tunedblas does not serve).
pub fn type_bytes(t: CudaDataType) -> usize {
    match t {
        R_16F | R_16BF => 2,
        R_32F | R_32I => 4,
        R_64F => 8,
        R_8I | R_8F_E4M3 | R_8F_E5M2 => 1,
        _ => 0,
    }
}

// ---------------------------------------------------------------------------------------
// TunableOp names.
// ---------------------------------------------------------------------------------------

/// Op-name prefix of the cuBLASLt extension rows.
pub const EXT_OP_PREFIX: &str = "TunedblasLt_";
const GEMM_PREFIX: &str = "GemmTunableOp_";
const STRIDED_PREFIX: &str = "GemmStridedBatchedTunableOp_";

/// PyTorch's op-name types and what they mean through cuBLASLt: (name, io type, compute,
/// scale). `tf32` is float with TF32 tensor cores allowed.
const PYTORCH_TYPES: [(&str, CudaDataType, ComputeType, CudaDataType); 5] = [
    ("Half", R_16F, COMPUTE_32F, R_32F),
    ("BFloat16", R_16BF, COMPUTE_32F, R_32F),
    ("float", R_32F, COMPUTE_32F, R_32F),
    ("tf32", R_32F, COMPUTE_32F_FAST_TF32, R_32F),
    ("double", R_64F, COMPUTE_64F, R_64F),
];

const TYPE_NAMES: [(CudaDataType, &str); 4] = [
    (R_16F, "f16"),
    (R_16BF, "bf16"),
    (R_32F, "f32"),
    (R_64F, "f64"),
];

const COMPUTE_NAMES: [(ComputeType, &str); 11] = [
    (COMPUTE_16F, "c16f"),
    (COMPUTE_16F_PEDANTIC, "c16fp"),
    (COMPUTE_32F, "c32f"),
    (COMPUTE_32F_PEDANTIC, "c32fp"),
    (COMPUTE_64F, "c64f"),
    (COMPUTE_64F_PEDANTIC, "c64fp"),
    (COMPUTE_32I, "c32i"),
    (COMPUTE_32I_PEDANTIC, "c32ip"),
    (COMPUTE_32F_FAST_16F, "c32ff16"),
    (COMPUTE_32F_FAST_16BF, "c32fbf16"),
    (COMPUTE_32F_FAST_TF32, "c32ftf32"),
];

/// The name of `v` in `names`, else `<prefix><number>` (a value with no name of its own).
fn name_in(names: &[(i32, &str)], prefix: &str, v: i32) -> String {
    names
        .iter()
        .find(|(x, _)| *x == v)
        .map_or_else(|| format!("{prefix}{v}"), |(_, n)| n.to_string())
}

/// The value [`name_in`] named `s`.
fn value_in(names: &[(i32, &str)], prefix: &str, s: &str) -> Option<i32> {
    if let Some(v) = s.strip_prefix(prefix) {
        return v.parse().ok();
    }
    names.iter().find(|(_, n)| *n == s).map(|(v, _)| *v)
}

fn type_name(t: CudaDataType) -> String {
    name_in(&TYPE_NAMES, "dt", t)
}

fn type_from_name(s: &str) -> Option<CudaDataType> {
    value_in(&TYPE_NAMES, "dt", s)
}

fn compute_name(c: ComputeType) -> String {
    name_in(&COMPUTE_NAMES, "ct", c)
}

fn compute_from_name(s: &str) -> Option<ComputeType> {
    value_in(&COMPUTE_NAMES, "ct", s)
}

fn pytorch_name(key: &LtKey) -> Option<&'static str> {
    let (name, ..) = PYTORCH_TYPES.iter().find(|(_, t, c, s)| {
        [key.a_type, key.b_type, key.c_type, key.d_type]
            .iter()
            .all(|x| x == t)
            && key.compute == *c
            && key.scale == *s
    })?;
    let batching_ok = key.batch == 1 || key.strides() == key.packed_strides();
    (key.epilogue == EPILOGUE_DEFAULT
        && key.pointer_mode == POINTER_MODE_HOST
        && key.sm_count == 0
        && key.ldd == key.ldc
        && batching_ok)
        .then_some(*name)
}

/// The op name and signature of a key: PyTorch's (>= 2.7) where PyTorch can express the
/// key, the extension form otherwise.
pub fn op_and_signature(key: &LtKey) -> (String, String) {
    let ab = format!("{}{}", key.trans_a.letter(), key.trans_b.letter());
    let sab = ab.to_ascii_lowercase();
    let (m, n, k) = (key.m, key.n, key.k);
    if let Some(t) = pytorch_name(key) {
        let lds = format!("ld_{}_{}_{}", key.lda, key.ldb, key.ldc);
        return if key.batch == 1 {
            (
                format!("{GEMM_PREFIX}{t}_{ab}"),
                format!("{sab}_{m}_{n}_{k}_{lds}"),
            )
        } else {
            (
                format!("{STRIDED_PREFIX}{t}_{ab}"),
                format!("{sab}_{m}_{n}_{k}_B_{}_{lds}", key.batch),
            )
        };
    }
    let op = format!(
        "{EXT_OP_PREFIX}{}_{}_{}_{}_{}_{}_{}_{ab}",
        if key.batch == 1 { "Single" } else { "Strided" },
        type_name(key.a_type),
        type_name(key.b_type),
        type_name(key.c_type),
        type_name(key.d_type),
        compute_name(key.compute),
        type_name(key.scale),
    );
    let mut sig = format!("{sab}_{m}_{n}_{k}");
    if key.batch != 1 {
        sig.push_str(&format!("_B_{}", key.batch));
    }
    sig.push_str(&format!(
        "_ld_{}_{}_{}_{}",
        key.lda, key.ldb, key.ldc, key.ldd
    ));
    if key.batch != 1 {
        sig.push_str(&format!(
            "_st_{}_{}_{}_{}",
            key.stride_a, key.stride_b, key.stride_c, key.stride_d
        ));
    }
    sig.push_str(&format!("_ep_{}", key.epilogue));
    if key.bias_type >= 0 {
        sig.push_str(&format!("_bias_{}", type_name(key.bias_type)));
    }
    sig.push_str(&format!("_pm_{}_sm_{}", key.pointer_mode, key.sm_count));
    (op, sig)
}

fn layout_of(op: &str, ab: &str) -> Result<(Trans, Trans), String> {
    let mut it = ab.chars();
    let (Some(x), Some(y), None) = (it.next(), it.next(), it.next()) else {
        return Err(format!("op name {op} does not end in a layout such as _TN"));
    };
    match (Trans::from_letter(x), Trans::from_letter(y)) {
        (Some(a), Some(b)) if a != Trans::C && b != Trans::C && ab == ab.to_ascii_uppercase() => {
            Ok((a, b))
        }
        _ => Err(format!("op name {op} does not end in a layout such as _TN")),
    }
}

/// A signature's tokens, consumed left to right.
struct Tokens<'a> {
    toks: Vec<&'a str>,
    at: usize,
    sig: &'a str,
}

impl<'a> Tokens<'a> {
    fn new(sig: &'a str) -> Tokens<'a> {
        Tokens {
            toks: sig.split('_').collect(),
            at: 0,
            sig,
        }
    }
    fn next(&mut self) -> Result<&'a str, String> {
        let t = self
            .toks
            .get(self.at)
            .copied()
            .ok_or_else(|| format!("signature {} ends too early", self.sig))?;
        self.at += 1;
        Ok(t)
    }
    fn num(&mut self) -> Result<i64, String> {
        let t = self.next()?;
        let digits = t.strip_prefix('-').unwrap_or(t);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{t:?} in signature {} is not a number", self.sig));
        }
        t.parse()
            .map_err(|_| format!("{t} in signature {} is too large", self.sig))
    }
    fn tag(&mut self, want: &str) -> bool {
        if self.toks.get(self.at) == Some(&want) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, want: &str) -> Result<(), String> {
        if self.tag(want) {
            Ok(())
        } else {
            Err(format!("signature {} lacks _{want}_ here", self.sig))
        }
    }
    fn done(&self) -> Result<(), String> {
        if self.at == self.toks.len() {
            Ok(())
        } else {
            Err(format!(
                "signature {} has extra tokens after {:?}",
                self.sig,
                self.toks[..self.at].join("_")
            ))
        }
    }
}

/// Reads a key back from an op name and signature written by [`op_and_signature`] (or by
/// PyTorch, where the `_ld_` part may be missing: packed leading dimensions).
pub fn parse_key(op: &str, sig: &str) -> Result<LtKey, String> {
    let sig = sig.trim();
    let (family, rest) = if let Some(r) = op.strip_prefix(GEMM_PREFIX) {
        ("gemm", r)
    } else if let Some(r) = op.strip_prefix(STRIDED_PREFIX) {
        ("strided", r)
    } else if let Some(r) = op.strip_prefix(EXT_OP_PREFIX) {
        ("ext", r)
    } else {
        return Err(format!(
            "op {op} is not one tunedblas serves through cuBLASLt"
        ));
    };
    let (head, ab) = rest
        .rsplit_once('_')
        .ok_or_else(|| format!("op name {op} has no type and layout parts"))?;
    let (trans_a, trans_b) = layout_of(op, ab)?;
    let mut t = Tokens::new(sig);
    if t.next()? != ab.to_ascii_lowercase() {
        return Err(format!(
            "signature {sig} does not start with the layout of {op}"
        ));
    }
    let (m, n, k) = (t.num()?, t.num()?, t.num()?);
    let mut key = LtKey::linear(R_32F, m, n, k);
    key.trans_a = trans_a;
    key.trans_b = trans_b;
    if family == "ext" {
        let parts: Vec<&str> = head.split('_').collect();
        let [batching, a, b, c, d, compute, scale] = parts[..] else {
            return Err(format!(
                "extension op {op} must be {EXT_OP_PREFIX}<batching>_<a>_<b>_<c>_<d>_<compute>_<scale>_<AB>"
            ));
        };
        let ty = |s: &str| type_from_name(s).ok_or_else(|| format!("unknown type {s:?} in {op}"));
        key.a_type = ty(a)?;
        key.b_type = ty(b)?;
        key.c_type = ty(c)?;
        key.d_type = ty(d)?;
        key.scale = ty(scale)?;
        key.compute = compute_from_name(compute)
            .ok_or_else(|| format!("unknown compute {compute:?} in {op}"))?;
        let strided = match batching {
            "Single" => false,
            "Strided" => true,
            _ => return Err(format!("unknown batching {batching:?} in {op}")),
        };
        if strided {
            t.expect("B")?;
            key.batch = t.num()?;
        }
        t.expect("ld")?;
        [key.lda, key.ldb, key.ldc, key.ldd] = [t.num()?, t.num()?, t.num()?, t.num()?];
        if strided {
            t.expect("st")?;
            [key.stride_a, key.stride_b, key.stride_c, key.stride_d] =
                [t.num()?, t.num()?, t.num()?, t.num()?];
        }
        t.expect("ep")?;
        key.epilogue = u32::try_from(t.num()?).map_err(|_| format!("bad epilogue in {sig}"))?;
        if t.tag("bias") {
            let name = t.next()?;
            key.bias_type = ty(name)?;
        }
        t.expect("pm")?;
        key.pointer_mode = i32::try_from(t.num()?).map_err(|_| format!("bad mode in {sig}"))?;
        t.expect("sm")?;
        key.sm_count = i32::try_from(t.num()?).map_err(|_| format!("bad sm count in {sig}"))?;
        t.done()?;
    } else {
        let Some((_, io, compute, scale)) = PYTORCH_TYPES.iter().find(|(n, ..)| *n == head) else {
            return Err(format!("op {op} has a type cuBLASLt rows do not use"));
        };
        key.a_type = *io;
        key.b_type = *io;
        key.c_type = *io;
        key.d_type = *io;
        key.compute = *compute;
        key.scale = *scale;
        if family == "strided" {
            t.expect("B")?;
            key.batch = t.num()?;
        }
        let [lda, ldb, ldc] = if t.tag("ld") {
            [t.num()?, t.num()?, t.num()?]
        } else {
            ProblemKey::packed_lds(trans_a, trans_b, m, n, k)
        };
        t.done()?;
        [key.lda, key.ldb, key.ldc, key.ldd] = [lda, ldb, ldc, ldc];
        if key.batch != 1 {
            key.set_strides(key.packed_strides());
        }
    }
    if key.batch < 1 {
        return Err(format!("batch {} in {sig} is not positive", key.batch));
    }
    if key.batch == 1 {
        [key.stride_a, key.stride_b, key.stride_c, key.stride_d] = [0; 4];
    }
    key.check()?;
    Ok(key)
}

// ---------------------------------------------------------------------------------------
// The algorithm configuration.
// ---------------------------------------------------------------------------------------

/// A cuBLASLt algorithm in readable form: what `cublasLtMatmulAlgoConfigGetAttribute`
/// reports, and all that `cublasLtMatmulAlgoInit` + `ConfigSetAttribute` need to rebuild it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AlgoConfig {
    pub algo: i32,
    pub tile: u32,
    pub stages: u32,
    pub splitk: u32,
    pub reduction: u32,
    pub swizzle: u32,
    pub custom: u32,
    pub inner_shape: u32,
    pub cluster_shape: u32,
}

/// Solution-name prefix of cuBLASLt rows.
pub const SOLUTION_PREFIX: &str = "Gemm_Cublaslt_";

/// The configuration attributes in the order of the solution name: (attribute, word).
/// `CONFIG_ID` comes first and is read-only (set by `cublasLtMatmulAlgoInit`).
pub const CONFIG_FIELDS: [(i32, &str); 9] = [
    (CONFIG_ID, "algo"),
    (CONFIG_TILE_ID, "tile"),
    (CONFIG_STAGES_ID, "stages"),
    (CONFIG_SPLITK_NUM, "splitk"),
    (CONFIG_REDUCTION_SCHEME, "red"),
    (CONFIG_CTA_SWIZZLING, "swizzle"),
    (CONFIG_CUSTOM_OPTION, "custom"),
    (CONFIG_INNER_SHAPE_ID, "inner"),
    (CONFIG_CLUSTER_SHAPE_ID, "cluster"),
];

impl AlgoConfig {
    /// Where reading or parsing a configuration starts: every field 0 but split-K 1 (no
    /// split).
    pub const EMPTY: AlgoConfig = AlgoConfig {
        algo: 0,
        tile: 0,
        stages: 0,
        splitk: 1,
        reduction: 0,
        swizzle: 0,
        custom: 0,
        inner_shape: 0,
        cluster_shape: 0,
    };

    /// The value of the configuration attribute `attr` (as the bits the library stores).
    pub fn get(&self, attr: i32) -> Option<u64> {
        Some(match attr {
            CONFIG_ID => self.algo as u32 as u64,
            CONFIG_TILE_ID => self.tile as u64,
            CONFIG_STAGES_ID => self.stages as u64,
            CONFIG_SPLITK_NUM => self.splitk as u64,
            CONFIG_REDUCTION_SCHEME => self.reduction as u64,
            CONFIG_CTA_SWIZZLING => self.swizzle as u64,
            CONFIG_CUSTOM_OPTION => self.custom as u64,
            CONFIG_INNER_SHAPE_ID => self.inner_shape as u64,
            CONFIG_CLUSTER_SHAPE_ID => self.cluster_shape as u64,
            _ => return None,
        })
    }

    /// Sets attribute `attr` from the library's bits; false for an unknown attribute.
    pub fn set(&mut self, attr: i32, v: u64) -> bool {
        let v32 = v as u32;
        match attr {
            CONFIG_ID => self.algo = v32 as i32,
            CONFIG_TILE_ID => self.tile = v32,
            CONFIG_STAGES_ID => self.stages = v32,
            CONFIG_SPLITK_NUM => self.splitk = v32,
            CONFIG_REDUCTION_SCHEME => self.reduction = v32,
            CONFIG_CTA_SWIZZLING => self.swizzle = v32,
            CONFIG_CUSTOM_OPTION => self.custom = v32,
            CONFIG_INNER_SHAPE_ID => self.inner_shape = v32,
            CONFIG_CLUSTER_SHAPE_ID => self.cluster_shape = v32,
            _ => return false,
        }
        true
    }

    /// The solution field: `Gemm_Cublaslt_algo<id>_tile<t>_...`.
    pub fn solution_name(&self) -> String {
        let mut s = String::from(SOLUTION_PREFIX);
        for (i, (attr, word)) in CONFIG_FIELDS.iter().enumerate() {
            if i > 0 {
                s.push('_');
            }
            let v = self.get(*attr).unwrap_or(0);
            if *attr == CONFIG_ID {
                s.push_str(&format!("{word}{}", v as u32 as i32));
            } else {
                s.push_str(&format!("{word}{v}"));
            }
        }
        s
    }

    /// Reads a solution field written by [`AlgoConfig::solution_name`]: every field present
    /// once, in any order; nothing else.
    pub fn parse(text: &str) -> Result<AlgoConfig, String> {
        let body = text
            .trim()
            .strip_prefix(SOLUTION_PREFIX)
            .ok_or_else(|| format!("{text} is not a cuBLASLt solution"))?;
        let mut cfg = AlgoConfig::EMPTY;
        let mut seen = [false; CONFIG_FIELDS.len()];
        for tok in body.split('_') {
            let split = tok
                .find(|c: char| c.is_ascii_digit() || c == '-')
                .ok_or_else(|| format!("{tok:?} in {text} has no value"))?;
            let (word, value) = tok.split_at(split);
            let i = CONFIG_FIELDS
                .iter()
                .position(|(_, w)| *w == word)
                .ok_or_else(|| format!("unknown field {word:?} in {text}"))?;
            if seen[i] {
                return Err(format!("field {word} appears twice in {text}"));
            }
            seen[i] = true;
            let v: i64 = value
                .parse()
                .map_err(|_| format!("{value:?} in {text} is not a number"))?;
            let ok = if i == 0 {
                i32::try_from(v).is_ok()
            } else {
                u32::try_from(v).is_ok()
            };
            if !ok {
                return Err(format!("{word}{value} in {text} is out of range"));
            }
            cfg.set(CONFIG_FIELDS[i].0, v as u64);
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(format!("{text} lacks the {} field", CONFIG_FIELDS[i].1));
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys a caller could have made pass; keys read from a destroyed descriptor (freed
    /// memory: garbage compute types, sizes, pointer modes) do not.
    #[test]
    fn only_keys_a_caller_could_have_made_are_plausible() {
        let good = LtKey::linear(R_16BF, 2560, 16, 1536);
        assert_eq!(good.plausible(), Ok(()));
        let batched = LtKey::linear(R_32F, 64, 8, 64).packed_batch(4);
        assert_eq!(batched.plausible(), Ok(()));
        let bad = |f: &dyn Fn(&mut LtKey)| {
            let mut k = good;
            f(&mut k);
            k.plausible().unwrap_err()
        };
        assert!(bad(&|k| k.compute = 1_564_696_069).contains("compute type 1564696069"));
        assert!(bad(&|k| k.scale = 0x7f12).contains("scale type"));
        assert!(bad(&|k| k.bias_type = 77).contains("bias type"));
        assert!(bad(&|k| k.pointer_mode = 0x5d5d).contains("pointer mode"));
        assert!(bad(&|k| k.epilogue = 0).contains("epilogue"));
        assert!(bad(&|k| k.sm_count = -3).contains("SM count"));
        assert!(bad(&|k| k.m = -1).contains("not positive"));
        assert!(bad(&|k| k.ldc = 1).contains("smaller"));
        assert!(bad(&|k| {
            k.m = 1 << 30;
            k.ldc = 1 << 30;
            k.ldd = 1 << 30;
            k.lda = k.k;
            k.n = 1 << 12;
        })
        .contains("more than any device holds"));
    }

    fn linear_attrs(n_out: u64, tokens: u64, k: u64) -> (MatmulAttrs, [LayoutAttrs; 4]) {
        // What PyTorch's bgemm_internal_cublaslt sets up for F.linear in bf16.
        let mm = MatmulAttrs {
            trans_a: OP_T,
            trans_b: OP_N,
            ..MatmulAttrs::default()
        };
        let a = LayoutAttrs::col(R_16BF, k, n_out, k as i64);
        let b = LayoutAttrs::col(R_16BF, k, tokens, k as i64);
        let c = LayoutAttrs::col(R_16BF, n_out, tokens, n_out as i64);
        (mm, [a, b, c, c])
    }

    #[test]
    fn linear_key_from_descriptors_and_its_pytorch_name() {
        let (mm, [a, b, c, d]) = linear_attrs(2560, 16, 1536);
        let key = key_from_attrs(&mm, &a, &b, &c, &d).unwrap();
        assert_eq!(key, LtKey::linear(R_16BF, 2560, 16, 1536));
        let (op, sig) = op_and_signature(&key);
        assert_eq!(op, "GemmTunableOp_BFloat16_TN");
        assert_eq!(sig, "tn_2560_16_1536_ld_1536_1536_2560");
        assert_eq!(parse_key(&op, &sig).unwrap(), key);
        // PyTorch <= 2.6 signatures omit the leading dimensions: packed ones.
        assert_eq!(parse_key(&op, "tn_2560_16_1536").unwrap(), key);
    }

    #[test]
    fn descriptors_that_disagree_or_are_not_served_are_refused() {
        let (mm, [a, b, c, d]) = linear_attrs(512, 4, 2560);
        let mut bad_k = b;
        bad_k.rows = 2559;
        assert!(key_from_attrs(&mm, &a, &bad_k, &c, &d).is_err());
        let mut row_major = a;
        row_major.order = 1;
        assert!(key_from_attrs(&mm, &row_major, &b, &c, &d).is_err());
        let mut fp8 = a;
        fp8.dtype = R_8F_E4M3;
        assert!(key_from_attrs(&mm, &fp8, &b, &c, &d).is_err());
        let conj = MatmulAttrs {
            trans_a: OP_C,
            ..mm
        };
        assert!(key_from_attrs(&conj, &a, &b, &c, &d).is_err());
        let mut batched = d;
        batched.batch = 2;
        assert!(key_from_attrs(&mm, &a, &b, &c, &batched).is_err());
    }

    #[test]
    fn everything_that_changes_the_kernel_changes_the_key() {
        let (mm, [a, b, c, d]) = linear_attrs(336, 32, 10240);
        let base = key_from_attrs(&mm, &a, &b, &c, &d).unwrap();
        let variants = [
            MatmulAttrs {
                compute: COMPUTE_32F_FAST_16BF,
                ..mm
            },
            MatmulAttrs { scale: R_64F, ..mm },
            MatmulAttrs {
                pointer_mode: 1,
                ..mm
            },
            MatmulAttrs {
                epilogue: EPILOGUE_BIAS,
                bias_type: R_16BF,
                ..mm
            },
            MatmulAttrs { sm_count: 66, ..mm },
            MatmulAttrs {
                trans_b: OP_T,
                ..mm
            },
        ];
        let mut keys = vec![base];
        for v in variants {
            let mut bb = b;
            if v.trans_b == OP_T {
                std::mem::swap(&mut bb.rows, &mut bb.cols);
                bb.ld = bb.rows as i64;
            }
            let k = key_from_attrs(&v, &a, &bb, &c, &d).unwrap();
            assert!(!keys.contains(&k), "{v:?} did not change the key");
            // Every variant has a name that reads back to itself.
            let (op, sig) = op_and_signature(&k);
            assert_eq!(parse_key(&op, &sig).unwrap(), k, "{op},{sig}");
            keys.push(k);
        }
        let mut wide = d;
        wide.ld = 400;
        let k = key_from_attrs(&mm, &a, &b, &c, &wide).unwrap();
        assert!(!keys.contains(&k));
        let (op, sig) = op_and_signature(&k);
        assert!(
            op.starts_with(EXT_OP_PREFIX),
            "ldd != ldc has no PyTorch name"
        );
        assert_eq!(sig, "tn_336_32_10240_ld_10240_10240_336_400_ep_1_pm_0_sm_0");
        assert_eq!(parse_key(&op, &sig).unwrap(), k);
    }

    #[test]
    fn strided_batches_name_and_read_back() {
        let (mm, [mut a, mut b, mut c, _]) = linear_attrs(64, 128, 64);
        for (l, s) in [(&mut a, 64 * 64), (&mut b, 64 * 128), (&mut c, 64 * 128)] {
            l.batch = 8;
            l.stride = s;
        }
        let key = key_from_attrs(&mm, &a, &b, &c, &c).unwrap();
        let (op, sig) = op_and_signature(&key);
        assert_eq!(op, "GemmStridedBatchedTunableOp_BFloat16_TN");
        assert_eq!(sig, "tn_64_128_64_B_8_ld_64_64_64");
        assert_eq!(parse_key(&op, &sig).unwrap(), key);
        // Broadcast A (stride 0) is not packed: the extension name keeps the strides.
        a.stride = 0;
        let key = key_from_attrs(&mm, &a, &b, &c, &c).unwrap();
        let (op, sig) = op_and_signature(&key);
        assert!(op.starts_with("TunedblasLt_Strided_bf16"), "{op}");
        assert!(sig.contains("_st_0_8192_8192_8192_"), "{sig}");
        assert_eq!(parse_key(&op, &sig).unwrap(), key);
    }

    #[test]
    fn solution_names_round_trip_and_reject_junk() {
        let cfg = AlgoConfig {
            algo: 66,
            tile: 18,
            stages: 35,
            splitk: 1,
            reduction: 0,
            swizzle: 1,
            custom: 3,
            inner_shape: 0,
            cluster_shape: 2,
        };
        let name = cfg.solution_name();
        assert_eq!(
            name,
            "Gemm_Cublaslt_algo66_tile18_stages35_splitk1_red0_swizzle1_custom3_inner0_cluster2"
        );
        assert_eq!(AlgoConfig::parse(&name).unwrap(), cfg);
        // Any order reads the same.
        let shuffled =
            "Gemm_Cublaslt_cluster2_tile18_algo66_stages35_splitk1_red0_swizzle1_custom3_inner0";
        assert_eq!(AlgoConfig::parse(shuffled).unwrap(), cfg);
        for junk in [
            "Gemm_Cublaslt_algo66",
            "Gemm_Rocblas_12",
            "Gemm_Cublaslt_algo66_tile18_stages35_splitk1_red0_swizzle1_custom3_inner0_cluster2_x1",
            "Gemm_Cublaslt_algo66_algo66_tile18_stages35_splitk1_red0_swizzle1_custom3_inner0",
            "Gemm_Cublaslt_algo66_tile-1_stages35_splitk1_red0_swizzle1_custom3_inner0_cluster2",
        ] {
            assert!(AlgoConfig::parse(junk).is_err(), "{junk}");
        }
        // Attribute accessors agree with the name's fields.
        for (attr, _) in CONFIG_FIELDS {
            let mut c2 = AlgoConfig::parse(&name).unwrap();
            let v = cfg.get(attr).unwrap();
            assert!(c2.set(attr, v + 1));
            assert_ne!(c2, cfg);
        }
    }

    #[test]
    fn abi_struct_sizes() {
        assert_eq!(std::mem::size_of::<MatmulAlgo>(), 64);
        assert_eq!(std::mem::size_of::<HeuristicResult>(), 96);
    }
}
