//! PyTorch TunableOp results files (`tunableop_results<ordinal>.csv`): read, check, write.
//!
//! # The PyTorch format
//!
//! One record per line, fields split on commas with no quoting:
//!
//! ```text
//! Validator,<KEY>,<VALUE>
//! <op_name>,<param_signature>,<solution>,<time_ms>[,<BLAS_PARAMS ...>]
//! ```
//!
//! The fifth field (written with `PYTORCH_TUNABLEOP_BLAS_LOG=1`) itself contains commas, so
//! everything after the fourth comma is one field. Lines may end in CRLF, blank lines and
//! spaces around fields are tolerated, and when two rows name the same problem the first one
//! wins (as in PyTorch); later ones are reported in [`ResultsFile::duplicates`].
//!
//! Op names and signatures this module turns into a [`ProblemKey`]:
//!
//! | op name                                 | signature                                    |
//! |-----------------------------------------|----------------------------------------------|
//! | `GemmTunableOp_<T>_<AB>`                | `<ab>_<m>_<n>_<k>` (PyTorch <= 2.6)          |
//! |                                         | `<ab>_<m>_<n>_<k>_ld_<lda>_<ldb>_<ldc>` (>= 2.7) |
//! | `GemmStridedBatchedTunableOp_<T>_<AB>`  | `<ab>_<m>_<n>_<k>_B_<batch>`                 |
//! |                                         | `<ab>_<m>_<n>_<k>_B_<batch>_ld_<lda>_<ldb>_<ldc>` |
//!
//! `T` is `Half` (f16 in and out, f32 compute), `BFloat16` (bf16, f32 compute), `float`
//! (f32) or `double` (f64). Layout letters are upper case in the op name and lower case in
//! the signature, and must agree. Missing leading dimensions are those of packed
//! (contiguous) matrices, `ldd` is `ldc`, strided rows (PyTorch records no strides) take the
//! packed strides of their leading dimensions, and flags are 0. A number token may be `*`
//! (a dynamic dimension): such a row goes to [`ResultsFile::wildcards`] with its parsed
//! [`KeyPattern`], not to `rows`.
//!
//! Rows that cannot be served through rocBLAS are counted in [`ResultsFile::unservable`],
//! not treated as errors: `tf32` ops, `GemmAndBiasTunableOp_*`, `ScaledGemmTunableOp_*`, op
//! names we do not know, and solutions other than `Default` and `Gemm_Rocblas_<int32>`
//! (such as `Gemm_Hipblaslt_<idx>`). Rows that make no sense (negative or overflowing
//! sizes, a leading dimension smaller than the rows it must hold, a solution index beyond
//! int32, a time that is negative or not a number; `inf`, which PyTorch writes for an untimed
//! solution, is a time) are listed in [`ResultsFile::malformed`] with the
//! reason; the rest of the file still loads. [`parse`] never panics.
//!
//! # The tunedblas extension rows
//!
//! Some problems have no PyTorch name: f16 compute (hgemm, as llama.cpp uses on RDNA2),
//! pointer-array batched GEMMs, `ldd != ldc`, a c type other than the d type, strides that
//! are not the packed ones, conjugate transposes, and kernel flags such as `fp16_alt_impl`.
//! tunedblas writes those as rows of the same file with an op name of its own:
//!
//! ```text
//! TunedblasGemm_<batching>_<a>_<b>_<c>_<d>_<compute>_<AB>,<signature>,<solution>,<time_ms>
//! signature: <ab>_<m>_<n>_<k>[_B_<batch>]_ld_<lda>_<ldb>_<ldc>_<ldd>[_st_<sa>_<sb>_<sc>_<sd>]_fl_<flags>
//! ```
//!
//! - `<batching>` is `Single` (gemm_ex, hgemm, sgemm), `Strided` (strided-batched) or
//!   `PtrArray` (batched through device arrays of pointers).
//! - `<a>` ... `<compute>` are the five data types in short form: rocBLAS's name without the
//!   `_r` of real types, and with a trailing `c` for complex ones: `f16`, `bf16`, `f32`,
//!   `f64`, `i8`, `u8`, `i32`, `u32`, `f16c`, `bf16c`, `f32c`, `f64c`; any other rocBLAS
//!   datatype value `v` is written `dt<v>` (e.g. `dt170`). No type name contains `_`.
//! - `<AB>` / `<ab>`: transA and transB letters (`N`, `T`, `C`), upper case in the op name,
//!   lower case in the signature, as in PyTorch's names.
//! - `_B_<batch>` is written for `Strided` and `PtrArray` (absent means 1); `_st_` with the
//!   four strides is written for `Strided` (absent means packed strides). All four leading
//!   dimensions are always written.
//! - `<flags>`: the kernel-relevant `rocblas_gemm_flags` bits, `0x`-prefixed hex (decimal is
//!   accepted on reading). Only `use_cu_efficiency`, `fp16_alt_impl`, `fp16_alt_impl_rnz`
//!   and `stochastic_rounding` may appear.
//!
//! Example: llama.cpp's hgemm-style f16-compute `GemmEx` with `fp16_alt_impl`:
//!
//! ```text
//! TunedblasGemm_Single_f16_f16_f16_f16_f16_TN,tn_4096_512_4096_ld_4096_4096_4096_4096_fl_0x4,Gemm_Rocblas_-1086327687,0.61
//! ```
//!
//! PyTorch keeps rows by op name and only ever looks up names of its own TunableOps, so it
//! never matches these rows: a file that holds them still loads in PyTorch and behaves as
//! if they were absent. [`op_and_signature`] writes the PyTorch (>= 2.7) form for every key
//! PyTorch can express (Single, or Strided with packed strides; one of the four type
//! combinations above with c = d; `ldd == ldc`; flags 0; N/T layouts) and the extension
//! form for all others, and [`parse_key`] reads both back to the same key.

use std::fmt;

use crate::key::ProblemKey;

mod names;
mod read;
#[cfg(test)]
mod tests;
mod write;

pub use names::{
    check_key, op_and_signature, parse_key, short_type_name, type_from_short_name, Dim, KeyParse,
    KeyPattern,
};
use names::{parse_int, NumError};
pub use read::{lines, parse, read, Line, CUT_SHORT};
pub(crate) use read::{parse_reader, RowData, RowSink};

/// Op-name prefix of the tunedblas extension rows (see the module docs).
pub const EXT_OP_PREFIX: &str = "TunedblasGemm_";
const GEMM_PREFIX: &str = "GemmTunableOp_";
const STRIDED_PREFIX: &str = "GemmStridedBatchedTunableOp_";
const ROCBLAS_SOLUTION_PREFIX: &str = "Gemm_Rocblas_";

/// What a row tells the caller to run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Solution {
    /// The library's own heuristic was fastest.
    Default,
    /// A rocBLAS solution index (opaque, build-specific; rocBLAS 5.x uses large negatives).
    Rocblas(i32),
    /// Any other backend's solution (e.g. `Gemm_Hipblaslt_123`): not servable via rocBLAS.
    Other(String),
}

impl Solution {
    /// Reads a solution field. `Default`, `Gemm_Rocblas_<int32>`, or anything else (kept
    /// as [`Solution::Other`]); an empty field or a rocBLAS index that is not an int32 is
    /// an error.
    pub fn parse(text: &str) -> Result<Solution, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("the solution field is empty".to_string());
        }
        if t == "Default" {
            return Ok(Solution::Default);
        }
        if let Some(id) = t.strip_prefix(ROCBLAS_SOLUTION_PREFIX) {
            return match parse_int(id) {
                Ok(v) => i32::try_from(v).map(Solution::Rocblas).map_err(|_| {
                    format!("rocBLAS solution index {id} does not fit in a 32-bit int")
                }),
                Err(NumError::TooLarge) => Err(format!(
                    "rocBLAS solution index {id} does not fit in a 32-bit int"
                )),
                Err(NumError::NotANumber) => {
                    Err(format!("rocBLAS solution index {id:?} is not an integer"))
                }
            };
        }
        Ok(Solution::Other(t.to_string()))
    }

    /// True for `Default` and rocBLAS indices: what the interposer can act on.
    pub fn is_servable(&self) -> bool {
        !matches!(self, Solution::Other(_))
    }
}

impl fmt::Display for Solution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Solution::Default => f.write_str("Default"),
            Solution::Rocblas(id) => write!(f, "{ROCBLAS_SOLUTION_PREFIX}{id}"),
            Solution::Other(s) => f.write_str(s),
        }
    }
}

/// The text of a solution field: `Default`, `Gemm_Rocblas_-1086326047`, ...
pub fn solution_text(s: &Solution) -> String {
    s.to_string()
}

/// One servable row: a concrete problem and a `Default` or rocBLAS solution.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub key: ProblemKey,
    pub solution: Solution,
    pub time_ms: Option<f64>,
    /// The raw fifth field (`BLAS_PARAMS: ...`), commas included.
    pub blas_params: Option<String>,
    /// 1-based line in the file it was read from (0 for rows made in memory).
    pub line: usize,
}

impl Row {
    pub fn new(key: ProblemKey, solution: Solution, time_ms: Option<f64>) -> Row {
        Row {
            key,
            solution,
            time_ms,
            blas_params: None,
            line: 0,
        }
    }
}

/// A row rocBLAS cannot serve (another backend's solution, an op we do not serve).
#[derive(Clone, Debug, PartialEq)]
pub struct Unservable {
    pub op_name: String,
    pub signature: String,
    pub solution: String,
    pub line: usize,
    /// Why it cannot be served, in words.
    pub reason: String,
    pub time_ms: Option<f64>,
    pub blas_params: Option<String>,
}

impl Unservable {
    /// Why rows like this one cannot be served, in words shared by every such row (for
    /// counting them by reason): hipBLASLt solutions, GemmAndBias, ScaledGemm, tf32, ...
    pub fn kind(&self) -> &'static str {
        unservable_kind(&self.op_name, &self.solution)
    }
}

/// The reason shared by every row with this op name and solution that rocBLAS cannot serve.
pub fn unservable_kind(op_name: &str, solution: &str) -> &'static str {
    if op_name.starts_with("GemmAndBiasTunableOp_") {
        "GemmAndBias (hipBLASLt epilogue) op, not a rocBLAS call"
    } else if op_name.starts_with("ScaledGemmTunableOp_") {
        "ScaledGemm (fp8) op, not a rocBLAS call"
    } else if op_name.contains("_tf32_") {
        "tf32 GEMM: rocBLAS has no tf32 call to serve it"
    } else if solution.starts_with("Gemm_Hipblaslt_") {
        "hipBLASLt solution: the rocBLAS interposer cannot serve it"
    } else if !(op_name.starts_with(GEMM_PREFIX)
        || op_name.starts_with(STRIDED_PREFIX)
        || op_name.starts_with(EXT_OP_PREFIX))
    {
        "an op name tunedblas does not know"
    } else {
        "a solution of another backend (neither Default nor Gemm_Rocblas_<id>)"
    }
}

/// The shape a row names whatever solved it, for taking shapes from a results file
/// (`profiles import`): a `Gemm_Hipblaslt_*` row names the same problem as a rocBLAS one,
/// and a `GemmTunableOp_tf32_*` row names an f32 GEMM (tf32 is a compute mode PyTorch
/// allows for float; through rocBLAS the same call is a plain f32 GEMM). `Err` says why
/// the row names no rocBLAS shape (GemmAndBias, ScaledGemm, unknown ops, `*` rows,
/// signatures that do not parse).
pub fn shape_key(op_name: &str, signature: &str) -> Result<ProblemKey, String> {
    let op = op_name.trim();
    let parsed = match parse_key(op, signature) {
        KeyParse::Unservable if op.contains("_tf32_") => {
            parse_key(&op.replacen("_tf32_", "_float_", 1), signature)
        }
        other => other,
    };
    match parsed {
        KeyParse::Key(k) => Ok(k),
        KeyParse::Wildcard(_) => Err("a `*` row names no concrete shape".into()),
        KeyParse::Unservable => Err(unservable_kind(op, "").to_string()),
        KeyParse::Invalid(e) => Err(e),
    }
}

/// A later row for a problem an earlier row already named; the earlier one is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub line: usize,
    pub first_line: usize,
}

/// A line that could not be read, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    pub line: usize,
    pub reason: String,
}

/// A row whose signature has `*` (dynamic dimension) tokens: served by the lookup table
/// after an exact lookup misses ([`crate::table::Table::get_wildcard`]); not an error.
#[derive(Clone, Debug, PartialEq)]
pub struct WildcardRow {
    pub op_name: String,
    pub signature: String,
    /// The signature split on `_`, `*` tokens included.
    pub tokens: Vec<String>,
    pub pattern: KeyPattern,
    pub solution: Solution,
    pub time_ms: Option<f64>,
    pub blas_params: Option<String>,
    pub line: usize,
}

/// A whole results file. Every non-blank line of the input lands in exactly one of
/// `validators`, `rows`, `wildcards`, `unservable`, `duplicates`, `malformed` or the count
/// `malformed_more`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResultsFile {
    /// `(KEY, VALUE)` of the `Validator` lines, in file order.
    pub validators: Vec<(String, String)>,
    pub rows: Vec<Row>,
    pub unservable: Vec<Unservable>,
    pub duplicates: Vec<Duplicate>,
    /// The first [`MALFORMED_KEPT`] lines that are no row, each with why.
    pub malformed: Vec<Malformed>,
    /// The lines that are no row past those, counted only: a file of millions of junk lines
    /// kept each with its reason (about 220 bytes a line: 2.2 GB for 10^7 lines, in the
    /// command or in the interposer's host; an outside tester's finding).
    pub malformed_more: usize,
    pub wildcards: Vec<WildcardRow>,
}

/// Lines that are no row kept with their reason, per file (the rest are counted).
pub const MALFORMED_KEPT: usize = 1000;

impl ResultsFile {
    /// Every line that is no row: those kept and those only counted.
    pub fn malformed_lines(&self) -> usize {
        self.malformed.len() + self.malformed_more
    }
}

impl ResultsFile {
    /// The value of validator `k` (`PT_VERSION`, `ROCBLAS_VERSION`, `GCN_ARCH_NAME`, ...).
    pub fn validator(&self, k: &str) -> Option<&str> {
        self.validators
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    /// Sets (or adds) a validator, keeping the order of existing ones.
    pub fn set_validator(&mut self, k: &str, v: &str) {
        match self.validators.iter_mut().find(|(key, _)| key == k) {
            Some(entry) => entry.1 = v.to_string(),
            None => self.validators.push((k.to_string(), v.to_string())),
        }
    }

    /// The servable row for `key`, if any.
    pub fn find(&self, key: &ProblemKey) -> Option<&Row> {
        self.rows.iter().find(|r| &r.key == key)
    }
}
