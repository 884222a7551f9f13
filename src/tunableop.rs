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
//! int32, a time that is not a number) are listed in [`ResultsFile::malformed`] with the
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

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::Path;

use crate::abi::{self, Datatype};
use crate::key::{Batching, ProblemKey, Trans, Types};

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
/// `validators`, `rows`, `wildcards`, `unservable`, `duplicates` or `malformed`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResultsFile {
    /// `(KEY, VALUE)` of the `Validator` lines, in file order.
    pub validators: Vec<(String, String)>,
    pub rows: Vec<Row>,
    pub unservable: Vec<Unservable>,
    pub duplicates: Vec<Duplicate>,
    pub malformed: Vec<Malformed>,
    pub wildcards: Vec<WildcardRow>,
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

    /// The file as text: validators, then rows (each key in the PyTorch >= 2.7 form where it
    /// has one, else the extension form), then wildcard and unservable rows as read. `\n`
    /// line ends; times are written with the digits that read back to the same f64.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.validators {
            out.push_str("Validator,");
            out.push_str(k);
            out.push(',');
            out.push_str(v);
            out.push('\n');
        }
        for row in &self.rows {
            let (op, sig) = op_and_signature(&row.key);
            let sol = solution_text(&row.solution);
            write_row(
                &mut out,
                &op,
                &sig,
                &sol,
                row.time_ms,
                row.blas_params.as_deref(),
            );
        }
        for w in &self.wildcards {
            let sol = solution_text(&w.solution);
            write_row(
                &mut out,
                &w.op_name,
                &w.signature,
                &sol,
                w.time_ms,
                w.blas_params.as_deref(),
            );
        }
        for u in &self.unservable {
            write_row(
                &mut out,
                &u.op_name,
                &u.signature,
                &u.solution,
                u.time_ms,
                u.blas_params.as_deref(),
            );
        }
        out
    }

    /// The servable row for `key`, if any.
    pub fn find(&self, key: &ProblemKey) -> Option<&Row> {
        self.rows.iter().find(|r| &r.key == key)
    }
}

fn write_row(
    out: &mut String,
    op: &str,
    sig: &str,
    sol: &str,
    time_ms: Option<f64>,
    blas: Option<&str>,
) {
    out.push_str(op);
    out.push(',');
    out.push_str(sig);
    out.push(',');
    out.push_str(sol);
    if time_ms.is_some() || blas.is_some() {
        out.push(',');
        if let Some(t) = time_ms {
            // Rust's `Display` for f64 prints the shortest text that parses back exactly.
            out.push_str(&t.to_string());
        }
    }
    if let Some(b) = blas {
        out.push(',');
        out.push_str(b);
    }
    out.push('\n');
}

/// Reads a results file. Invalid UTF-8 is replaced (lossy) and the text still parsed.
/// Only a regular file of at most [`crate::profile::MAX_RESULTS_FILE_BYTES`] is read: a FIFO
/// (which would block), a device such as `/dev/zero` (which never ends) or a larger file is
/// refused with an error saying what it is.
pub fn read(path: &Path) -> io::Result<ResultsFile> {
    let bytes = crate::profile::read_regular(path, crate::profile::MAX_RESULTS_FILE_BYTES)?;
    Ok(parse(&String::from_utf8_lossy(&bytes)))
}

/// The UTF-8 byte order mark some editors (and Windows tools) put at the start of a file.
const BOM: &str = "\u{feff}";

/// Parses the text of a results file. Never panics; see the module docs for what goes where.
/// A UTF-8 byte order mark at the start is dropped.
pub fn parse(text: &str) -> ResultsFile {
    let text = text.strip_prefix(BOM).unwrap_or(text);
    let segments = text.split('\n').count();
    let mut sink = FileRows::default();
    // Sized for every line being a row: growing the row vector and the key map as rows
    // arrive was a third of the interposer's start-up (BENCHMARKS.md).
    sink.rows.reserve(segments);
    sink.keys.reserve(segments);
    let mut parser = Parser::new(sink);
    for (idx, raw) in text.split('\n').enumerate() {
        parser.segment(raw, idx + 1, idx + 1 == segments);
    }
    let (mut out, sink) = parser.finish();
    out.rows = sink.rows;
    out
}

/// Parses a results file from a reader, one line at a time, handing each concrete row to
/// `sink` instead of keeping it: what the interposer's loader uses, so a large profile is
/// never held as text plus rows plus a key map at once. Everything but `rows` is in the
/// returned [`ResultsFile`] (validators, `*` rows, unservable rows, duplicates, malformed
/// lines), exactly as [`parse`] would have it for the same bytes; invalid UTF-8 is replaced
/// line by line, which gives the same text as replacing it in the whole file.
pub(crate) fn parse_reader<S: RowSink>(
    mut reader: impl io::BufRead,
    sink: S,
) -> io::Result<(ResultsFile, S)> {
    let mut parser = Parser::new(sink);
    let mut buf = Vec::with_capacity(256);
    let mut idx = 0;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        // A segment not ended by a newline is the last one (empty at a final newline).
        let last = n == 0 || buf.last() != Some(&b'\n');
        if last && n == 0 && idx > 0 {
            // The file ended with a newline: the empty segment after it is blank.
            break;
        }
        idx += 1;
        let mut bytes = &buf[..];
        if bytes.last() == Some(&b'\n') {
            bytes = &bytes[..bytes.len() - 1];
        }
        if idx == 1 {
            bytes = bytes.strip_prefix(BOM.as_bytes()).unwrap_or(bytes);
        }
        let text = String::from_utf8_lossy(bytes);
        parser.segment(&text, idx, last);
        if last {
            break;
        }
    }
    Ok(parser.finish())
}

/// The servable part of a concrete row, for a [`RowSink`].
pub(crate) struct RowData<'a> {
    pub solution: Solution,
    pub time_ms: Option<f64>,
    pub blas_params: Option<&'a str>,
}

/// Where the parser puts concrete rows: [`ResultsFile::rows`] for [`parse`], or a lookup
/// table straight away for the interposer's loader. The sink also answers for duplicates,
/// so a second map of every key is never needed.
pub(crate) trait RowSink {
    /// Takes the row at `line` for `key`, unless an earlier row named the same problem: then
    /// it keeps nothing and returns that row's line. `row` is `None` when the row's solution
    /// is not a rocBLAS one; the key is still taken (PyTorch would use that first row).
    fn claim(&mut self, key: ProblemKey, line: usize, row: Option<RowData<'_>>) -> Option<usize>;
}

/// [`parse`]'s sink: every row, and the first line of every key.
#[derive(Default)]
struct FileRows {
    rows: Vec<Row>,
    keys: HashMap<ProblemKey, usize>,
}

impl RowSink for FileRows {
    fn claim(&mut self, key: ProblemKey, line: usize, row: Option<RowData<'_>>) -> Option<usize> {
        match self.keys.entry(key) {
            std::collections::hash_map::Entry::Occupied(first) => Some(*first.get()),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(line);
                if let Some(r) = row {
                    self.rows.push(Row {
                        key,
                        solution: r.solution,
                        time_ms: r.time_ms,
                        blas_params: r.blas_params.map(str::to_string),
                        line,
                    });
                }
                None
            }
        }
    }
}

struct Parser<S> {
    out: ResultsFile,
    sink: S,
    /// First line of each (op, signature) that has no concrete key.
    texts: HashMap<(String, String), usize>,
}

impl<S: RowSink> Parser<S> {
    fn new(sink: S) -> Parser<S> {
        Parser {
            out: ResultsFile::default(),
            sink,
            texts: HashMap::new(),
        }
    }

    fn finish(self) -> (ResultsFile, S) {
        (self.out, self.sink)
    }

    fn malformed(&mut self, line: usize, reason: String) {
        self.out.malformed.push(Malformed { line, reason });
    }

    /// One `\n`-separated segment of the file; `last` for the one after the last newline.
    fn segment(&mut self, raw: &str, line: usize, last: bool) {
        // `trim` also drops the `\r` of CRLF files.
        let text = raw.trim();
        if text.is_empty() {
            return;
        }
        // PyTorch ends every row with a newline and a time. A last line with neither was
        // cut short (a full disk, a killed writer) and may end inside the solution index,
        // which would still read as some other, wrong index: never serve it.
        let cut_short = last && !text.starts_with("Validator,") && text.split(',').count() < 4;
        if cut_short {
            return self.malformed(
                line,
                "the last line has no time_ms and no newline: the file was cut short".into(),
            );
        }
        self.line(text, line);
    }

    /// The first line of the (op, signature) text, or `None` after noting this one as first.
    fn first_text(&mut self, op: &str, sig: &str, line: usize) -> Option<usize> {
        let key = (op.to_string(), sig.to_string());
        if let Some(&first) = self.texts.get(&key) {
            return Some(first);
        }
        self.texts.insert(key, line);
        None
    }

    fn line(&mut self, text: &str, line: usize) {
        if let Some(rest) = text.strip_prefix("Validator,") {
            let (k, v) = match rest.split_once(',') {
                Some((k, v)) => (k.trim(), v.trim()),
                None => {
                    return self.malformed(line, "a Validator line needs a key and a value".into())
                }
            };
            if k.is_empty() {
                return self.malformed(line, "a Validator line with an empty key".into());
            }
            if self.out.validator(k).is_some() {
                return self.malformed(line, format!("validator {k} repeated; the first is kept"));
            }
            self.out.validators.push((k.to_string(), v.to_string()));
            return;
        }

        let mut fields = text.splitn(5, ',');
        let op = fields.next().unwrap_or("").trim();
        let (sig, sol) = match (fields.next(), fields.next()) {
            (Some(sig), Some(sol)) => (sig.trim(), sol.trim()),
            _ => {
                return self.malformed(
                    line,
                    "expected op_name,param_signature,solution[,time_ms[,BLAS_PARAMS]]".into(),
                )
            }
        };
        let time_ms = match parse_time(fields.next().unwrap_or("")) {
            Ok(t) => t,
            Err(e) => return self.malformed(line, e),
        };
        let blas_params = fields.next().map(str::trim);
        if op.is_empty() || sig.is_empty() {
            return self.malformed(line, "empty op name or signature".into());
        }
        if sol.is_empty() {
            return self.malformed(line, "the solution field is empty".into());
        }

        let unservable = |reason: String| Unservable {
            op_name: op.to_string(),
            signature: sig.to_string(),
            solution: sol.to_string(),
            line,
            reason,
            time_ms,
            blas_params: blas_params.map(str::to_string),
        };

        match parse_key(op, sig) {
            KeyParse::Invalid(reason) => self.malformed(line, reason),
            KeyParse::Unservable => {
                if let Some(first_line) = self.first_text(op, sig, line) {
                    self.out.duplicates.push(Duplicate { line, first_line });
                } else {
                    let u = unservable(unservable_op_reason(op));
                    self.out.unservable.push(u);
                }
            }
            KeyParse::Wildcard(pattern) => {
                let solution = match Solution::parse(sol) {
                    Ok(s) => s,
                    Err(e) => return self.malformed(line, e),
                };
                if let Some(first_line) = self.first_text(op, sig, line) {
                    self.out.duplicates.push(Duplicate { line, first_line });
                    return;
                }
                if let Solution::Other(s) = &solution {
                    let u = unservable(format!("solution {s} is not a rocBLAS solution"));
                    self.out.unservable.push(u);
                    return;
                }
                self.out.wildcards.push(WildcardRow {
                    op_name: op.to_string(),
                    signature: sig.to_string(),
                    tokens: sig.split('_').map(str::to_string).collect(),
                    pattern,
                    solution,
                    time_ms,
                    blas_params: blas_params.map(str::to_string),
                    line,
                });
            }
            KeyParse::Key(key) => {
                let solution = match Solution::parse(sol) {
                    Ok(s) => s,
                    Err(e) => return self.malformed(line, e),
                };
                let other = match &solution {
                    Solution::Other(s) => Some(s.clone()),
                    _ => None,
                };
                let row = other.is_none().then_some(RowData {
                    solution,
                    time_ms,
                    blas_params,
                });
                if let Some(first_line) = self.sink.claim(key, line, row) {
                    self.out.duplicates.push(Duplicate { line, first_line });
                    return;
                }
                if let Some(s) = other {
                    let u = unservable(format!("solution {s} is not a rocBLAS solution"));
                    self.out.unservable.push(u);
                }
            }
        }
    }
}

fn parse_time(field: &str) -> Result<Option<f64>, String> {
    let t = field.trim();
    if t.is_empty() {
        return Ok(None);
    }
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
        Ok(_) => Err(format!(
            "time_ms {t:?} is not a finite, non-negative number"
        )),
        Err(_) => Err(format!("time_ms {t:?} is not a number")),
    }
}

fn unservable_op_reason(op: &str) -> String {
    if op.starts_with("GemmAndBiasTunableOp_") {
        "GemmAndBias (hipBLASLt epilogue) ops are not served through rocBLAS".into()
    } else if op.starts_with("ScaledGemmTunableOp_") {
        "ScaledGemm (fp8) ops are not served through rocBLAS".into()
    } else if op.contains("_tf32_") {
        "tf32 GEMMs are not served through rocBLAS".into()
    } else {
        format!("unknown op name {op}")
    }
}

// ---- Keys <-> (op name, signature) -----------------------------------------------------------

/// The result of reading one (op name, signature) pair.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyParse {
    /// A concrete, checked problem.
    Key(ProblemKey),
    /// An op rocBLAS does not serve (tf32, GemmAndBias, ScaledGemm, unknown names).
    Unservable,
    /// A known op whose signature has `*` tokens.
    Wildcard(KeyPattern),
    /// A known op with a signature or sizes that make no sense, and why.
    Invalid(String),
}

/// A dimension in a signature: `None` is a `*` token.
pub type Dim = Option<i64>;

/// A signature read as a pattern: every size may be a `*` wildcard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyPattern {
    pub batching: Batching,
    pub trans_a: Trans,
    pub trans_b: Trans,
    pub types: Types,
    pub flags: u32,
    pub m: Dim,
    pub n: Dim,
    pub k: Dim,
    /// `[lda, ldb, ldc, ldd]`; `None` when the signature gives none (packed, ldd = ldc).
    pub lds: Option<[Dim; 4]>,
    pub batch: Dim,
    /// `None` when the signature gives none (packed for `Strided`, zero otherwise).
    pub strides: Option<[Dim; 4]>,
}

fn dim_ok(d: Dim, v: i64) -> bool {
    d.is_none() || d == Some(v)
}

impl KeyPattern {
    /// True when no token is `*`.
    pub fn is_concrete(&self) -> bool {
        let lds = self.lds.iter().flatten().all(Option::is_some);
        let strides = self.strides.iter().flatten().all(Option::is_some);
        self.m.is_some()
            && self.n.is_some()
            && self.k.is_some()
            && self.batch.is_some()
            && lds
            && strides
    }

    /// The concrete key, with the defaults of the module docs filled in and checked with
    /// [`check_key`].
    pub fn to_key(&self) -> Result<ProblemKey, String> {
        let (Some(m), Some(n), Some(k), Some(batch)) = (self.m, self.n, self.k, self.batch) else {
            return Err("the signature has wildcard sizes".into());
        };
        let lds = match self.lds {
            Some([Some(a), Some(b), Some(c), Some(d)]) => [a, b, c, d],
            Some(_) => return Err("the signature has wildcard leading dimensions".into()),
            None => {
                let [a, b, c] = ProblemKey::packed_lds(self.trans_a, self.trans_b, m, n, k);
                [a, b, c, c]
            }
        };
        let mut key = ProblemKey {
            batching: self.batching,
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            types: self.types,
            flags: self.flags,
            m,
            n,
            k,
            lda: lds[0],
            ldb: lds[1],
            ldc: lds[2],
            ldd: lds[3],
            batch,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            stride_d: 0,
        };
        let strides = match self.strides {
            Some([Some(a), Some(b), Some(c), Some(d)]) => [a, b, c, d],
            Some(_) => return Err("the signature has wildcard strides".into()),
            None if self.batching == Batching::Strided => {
                check_key(&key)?;
                checked_packed_strides(&key).ok_or("the packed strides overflow 64 bits")?
            }
            None => [0; 4],
        };
        [key.stride_a, key.stride_b, key.stride_c, key.stride_d] = strides;
        check_key(&key)?;
        Ok(key)
    }

    /// Whether a concrete key is one this pattern describes.
    pub fn matches(&self, key: &ProblemKey) -> bool {
        if (
            self.batching,
            self.trans_a,
            self.trans_b,
            self.types,
            self.flags,
        ) != (key.batching, key.trans_a, key.trans_b, key.types, key.flags)
        {
            return false;
        }
        if !(dim_ok(self.m, key.m) && dim_ok(self.n, key.n) && dim_ok(self.k, key.k)) {
            return false;
        }
        if !dim_ok(self.batch, key.batch) {
            return false;
        }
        let lds_ok = match self.lds {
            Some(l) => l
                .iter()
                .zip([key.lda, key.ldb, key.ldc, key.ldd])
                .all(|(&d, v)| dim_ok(d, v)),
            None => {
                ProblemKey::packed_lds(key.trans_a, key.trans_b, key.m, key.n, key.k)
                    == [key.lda, key.ldb, key.ldc]
                    && key.ldd == key.ldc
            }
        };
        let actual = [key.stride_a, key.stride_b, key.stride_c, key.stride_d];
        let strides_ok = match self.strides {
            Some(s) => s.iter().zip(actual).all(|(&d, v)| dim_ok(d, v)),
            None if key.batching == Batching::Strided => {
                checked_packed_strides(key) == Some(actual)
            }
            None => actual == [0; 4],
        };
        lds_ok && strides_ok
    }
}

/// Checks that a key describes a problem rocBLAS could accept: non-negative sizes, leading
/// dimensions at least the rows they hold, no 64-bit overflow in any extent, batching
/// fields consistent, only kernel flags. The error says what is wrong.
pub fn check_key(key: &ProblemKey) -> Result<(), String> {
    for (name, v) in [
        ("m", key.m),
        ("n", key.n),
        ("k", key.k),
        ("batch", key.batch),
    ] {
        if v < 0 {
            return Err(format!("negative size {name}={v}"));
        }
    }
    let strides = [key.stride_a, key.stride_b, key.stride_c, key.stride_d];
    match key.batching {
        Batching::Single if key.batch != 1 => {
            return Err(format!("a single GEMM with batch {}", key.batch))
        }
        Batching::Single | Batching::PointerArray if strides != [0; 4] => {
            return Err("strides on a GEMM that is not strided-batched".into())
        }
        _ => {}
    }
    if let Some(s) = strides.iter().find(|&&s| s < 0) {
        return Err(format!("negative stride {s}"));
    }
    let (rows_a, cols_a) = if key.trans_a == Trans::N {
        (key.m, key.k)
    } else {
        (key.k, key.m)
    };
    let (rows_b, cols_b) = if key.trans_b == Trans::N {
        (key.k, key.n)
    } else {
        (key.n, key.k)
    };
    for (name, ld, rows, what) in [
        ("lda", key.lda, rows_a, "A"),
        ("ldb", key.ldb, rows_b, "B"),
        ("ldc", key.ldc, key.m, "C"),
        ("ldd", key.ldd, key.m, "D"),
    ] {
        if ld < rows.max(1) {
            return Err(format!(
                "{name}={ld} is smaller than the {rows} rows of {what}"
            ));
        }
    }
    let overflow = || Err("the problem's sizes overflow 64 bits".to_string());
    let extents = [
        key.lda.checked_mul(cols_a),
        key.ldb.checked_mul(cols_b),
        key.ldc.checked_mul(key.n),
        key.ldd.checked_mul(key.n),
    ];
    let work = key
        .m
        .checked_mul(key.n)
        .and_then(|x| x.checked_mul(key.k))
        .and_then(|x| x.checked_mul(key.batch));
    if work.is_none() || extents.iter().any(Option::is_none) {
        return overflow();
    }
    if key.batching == Batching::Strided {
        let last = (key.batch - 1).max(0);
        for (stride, extent) in strides.iter().zip(extents) {
            let total = stride
                .checked_mul(last)
                .and_then(|x| x.checked_add(extent.unwrap_or(0)));
            if total.is_none() {
                return overflow();
            }
        }
    }
    if key.flags & !abi::KERNEL_FLAGS != 0 {
        return Err(format!(
            "flags {:#x} include bits that are not kernel flags",
            key.flags
        ));
    }
    Ok(())
}

/// [`ProblemKey::packed_strides`] without the chance of an overflow panic.
fn checked_packed_strides(key: &ProblemKey) -> Option<[i64; 4]> {
    let cols_a = if key.trans_a == Trans::N {
        key.k
    } else {
        key.m
    };
    let cols_b = if key.trans_b == Trans::N {
        key.n
    } else {
        key.k
    };
    Some([
        key.lda.checked_mul(cols_a)?,
        key.ldb.checked_mul(cols_b)?,
        key.ldc.checked_mul(key.n)?,
        key.ldd.checked_mul(key.n)?,
    ])
}

/// PyTorch's `T` for a type combination it has a TunableOp for.
fn pytorch_type_name(t: &Types) -> Option<&'static str> {
    [
        ("Half", Types::uniform(abi::DT_F16_R, abi::DT_F32_R)),
        ("BFloat16", Types::uniform(abi::DT_BF16_R, abi::DT_F32_R)),
        ("float", Types::uniform(abi::DT_F32_R, abi::DT_F32_R)),
        ("double", Types::uniform(abi::DT_F64_R, abi::DT_F64_R)),
    ]
    .into_iter()
    .find(|(_, types)| types == t)
    .map(|(name, _)| name)
}

fn pytorch_types(name: &str) -> Option<Types> {
    Some(match name {
        "Half" => Types::uniform(abi::DT_F16_R, abi::DT_F32_R),
        "BFloat16" => Types::uniform(abi::DT_BF16_R, abi::DT_F32_R),
        "float" => Types::uniform(abi::DT_F32_R, abi::DT_F32_R),
        "double" => Types::uniform(abi::DT_F64_R, abi::DT_F64_R),
        _ => return None,
    })
}

/// The short type name of the extension format (`f16`, `bf16`, `f32c`, `dt170`, ...).
pub fn short_type_name(t: Datatype) -> String {
    match abi::datatype_name(t) {
        Some(name) => match name.strip_suffix("_r") {
            Some(real) => real.to_string(),
            None => name.replace("_c", "c"),
        },
        None => format!("dt{t}"),
    }
}

/// Inverse of [`short_type_name`].
pub fn type_from_short_name(s: &str) -> Option<Datatype> {
    if let Some(v) = s.strip_prefix("dt") {
        return parse_int(v).ok().and_then(|v| i32::try_from(v).ok());
    }
    let long = match s.strip_suffix('c') {
        Some(base) => format!("{base}_c"),
        None => format!("{s}_r"),
    };
    abi::datatype_from_name(&long)
}

fn batching_name(b: Batching) -> &'static str {
    match b {
        Batching::Single => "Single",
        Batching::Strided => "Strided",
        Batching::PointerArray => "PtrArray",
    }
}

fn pytorch_expressible(key: &ProblemKey) -> Option<&'static str> {
    let t = pytorch_type_name(&key.types)?;
    let letters_ok = |t: Trans| t == Trans::N || t == Trans::T;
    let strides = [key.stride_a, key.stride_b, key.stride_c, key.stride_d];
    let batching_ok = match key.batching {
        Batching::Single => key.batch == 1 && strides == [0; 4],
        Batching::Strided => checked_packed_strides(key) == Some(strides),
        Batching::PointerArray => false,
    };
    (letters_ok(key.trans_a)
        && letters_ok(key.trans_b)
        && key.ldd == key.ldc
        && key.flags == 0
        && batching_ok)
        .then_some(t)
}

/// The op name and signature for a key: PyTorch's >= 2.7 form whenever PyTorch can express
/// the key, the tunedblas extension form otherwise (see the module docs).
pub fn op_and_signature(key: &ProblemKey) -> (String, String) {
    let (m, n, k) = (key.m, key.n, key.k);
    let ab = format!("{}{}", key.trans_a.letter(), key.trans_b.letter());
    let sig_ab = ab.to_ascii_lowercase();
    if let Some(t) = pytorch_expressible(key) {
        let lds = format!("ld_{}_{}_{}", key.lda, key.ldb, key.ldc);
        return match key.batching {
            Batching::Strided => (
                format!("{STRIDED_PREFIX}{t}_{ab}"),
                format!("{sig_ab}_{m}_{n}_{k}_B_{}_{lds}", key.batch),
            ),
            _ => (
                format!("{GEMM_PREFIX}{t}_{ab}"),
                format!("{sig_ab}_{m}_{n}_{k}_{lds}"),
            ),
        };
    }
    let ty = &key.types;
    let op = format!(
        "{EXT_OP_PREFIX}{}_{}_{}_{}_{}_{}_{ab}",
        batching_name(key.batching),
        short_type_name(ty.a),
        short_type_name(ty.b),
        short_type_name(ty.c),
        short_type_name(ty.d),
        short_type_name(ty.compute),
    );
    let mut sig = format!("{sig_ab}_{m}_{n}_{k}");
    if key.batching != Batching::Single || key.batch != 1 {
        sig.push_str(&format!("_B_{}", key.batch));
    }
    sig.push_str(&format!(
        "_ld_{}_{}_{}_{}",
        key.lda, key.ldb, key.ldc, key.ldd
    ));
    let strides = [key.stride_a, key.stride_b, key.stride_c, key.stride_d];
    if key.batching == Batching::Strided || strides != [0; 4] {
        sig.push_str(&format!(
            "_st_{}_{}_{}_{}",
            strides[0], strides[1], strides[2], strides[3]
        ));
    }
    sig.push_str(&format!("_fl_{:#x}", key.flags));
    (op, sig)
}

/// Which grammar a signature follows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Gemm,
    Strided,
    Extension,
}

/// What the op name says: family, batching, types and layout.
struct OpInfo {
    family: Family,
    batching: Batching,
    types: Types,
    layout: [Trans; 2],
    /// The layout letters in lower case, as the signature must start.
    layout_text: [u8; 2],
}

enum OpParse {
    Op(OpInfo),
    Unservable,
    Invalid(String),
}

fn parse_layout(ab: &str, op: &str) -> Result<[Trans; 2], String> {
    let letter = |c: u8| match c {
        b'N' | b'T' | b'C' => Trans::from_letter(c as char),
        _ => None,
    };
    match ab.as_bytes() {
        &[a, b] => match (letter(a), letter(b)) {
            (Some(a), Some(b)) => Ok([a, b]),
            _ => Err(format!("op name {op} does not end in a layout such as _TN")),
        },
        _ => Err(format!("op name {op} does not end in a layout such as _TN")),
    }
}

fn parse_op(op: &str) -> OpParse {
    let (family, rest) = if let Some(rest) = op.strip_prefix(GEMM_PREFIX) {
        (Family::Gemm, rest)
    } else if let Some(rest) = op.strip_prefix(STRIDED_PREFIX) {
        (Family::Strided, rest)
    } else if let Some(rest) = op.strip_prefix(EXT_OP_PREFIX) {
        (Family::Extension, rest)
    } else {
        return OpParse::Unservable;
    };
    let Some((head, ab)) = rest.rsplit_once('_') else {
        return OpParse::Invalid(format!("op name {op} has no type and layout parts"));
    };
    let layout = match parse_layout(ab, op) {
        Ok(l) => l,
        Err(e) => return OpParse::Invalid(e),
    };
    // Two ASCII letters: parse_layout checked them.
    let b = ab.as_bytes();
    let layout_text = [b[0].to_ascii_lowercase(), b[1].to_ascii_lowercase()];
    if family != Family::Extension {
        let Some(types) = pytorch_types(head) else {
            // tf32 and any type PyTorch may add later: not something rocBLAS serves.
            return OpParse::Unservable;
        };
        let batching = if family == Family::Gemm {
            Batching::Single
        } else {
            Batching::Strided
        };
        return OpParse::Op(OpInfo {
            family,
            batching,
            types,
            layout,
            layout_text,
        });
    }
    let parts: Vec<&str> = head.split('_').collect();
    if parts.len() != 6 {
        return OpParse::Invalid(format!(
            "extension op name {op} must be {EXT_OP_PREFIX}<batching>_<a>_<b>_<c>_<d>_<compute>_<AB>"
        ));
    }
    let batching = match parts[0] {
        "Single" => Batching::Single,
        "Strided" => Batching::Strided,
        "PtrArray" => Batching::PointerArray,
        other => {
            return OpParse::Invalid(format!(
                "unknown batching {other:?} in {op} (Single, Strided or PtrArray)"
            ))
        }
    };
    let mut dts = [0; 5];
    for (slot, name) in dts.iter_mut().zip(&parts[1..]) {
        match type_from_short_name(name) {
            Some(t) => *slot = t,
            None => return OpParse::Invalid(format!("unknown data type {name:?} in {op}")),
        }
    }
    let types = Types {
        a: dts[0],
        b: dts[1],
        c: dts[2],
        d: dts[3],
        compute: dts[4],
    };
    OpParse::Op(OpInfo {
        family,
        batching,
        types,
        layout,
        layout_text,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NumError {
    NotANumber,
    TooLarge,
}

/// An optionally negative decimal integer: digits only (no `+`, no spaces).
fn parse_int(s: &str) -> Result<i64, NumError> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NumError::NotANumber);
    }
    s.parse::<i64>().map_err(|_| NumError::TooLarge)
}

fn parse_dim(tok: &str, what: &str) -> Result<Dim, String> {
    if tok == "*" {
        return Ok(None);
    }
    match parse_int(tok) {
        Ok(v) if v < 0 => Err(format!("negative {what} {v}")),
        Ok(v) => Ok(Some(v)),
        Err(NumError::TooLarge) => Err(format!("{what} {tok} does not fit in 64 bits")),
        Err(NumError::NotANumber) => Err(format!("{what} {tok:?} is not a number")),
    }
}

fn parse_flags(tok: &str) -> Result<u32, String> {
    let parsed = match tok.strip_prefix("0x").or_else(|| tok.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u32::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None if !tok.is_empty() && tok.bytes().all(|b| b.is_ascii_digit()) => tok.parse().ok(),
        None => None,
    };
    let flags = parsed.ok_or_else(|| format!("flags {tok:?} are not a 32-bit number"))?;
    if flags & !abi::KERNEL_FLAGS != 0 {
        return Err(format!(
            "flags {flags:#x} include bits that are not kernel flags"
        ));
    }
    Ok(flags)
}

/// The tokens of a signature, read front to back (without collecting them: this runs once
/// per row of a profile that may hold millions).
struct Tokens<'a> {
    sig: &'a str,
    tokens: std::iter::Peekable<std::str::Split<'a, char>>,
}

impl<'a> Tokens<'a> {
    fn next(&mut self, what: &str) -> Result<&'a str, String> {
        let t = self.tokens.next();
        t.ok_or_else(|| format!("signature {:?} ends before {what}", self.sig))
    }
    fn peek(&mut self) -> Option<&'a str> {
        self.tokens.peek().copied()
    }
    fn skip(&mut self) {
        self.tokens.next();
    }
    fn dims<const N: usize>(&mut self, names: [&str; N]) -> Result<[Dim; N], String> {
        let mut out = [None; N];
        for (slot, name) in out.iter_mut().zip(names) {
            *slot = parse_dim(self.next(name)?, name)?;
        }
        Ok(out)
    }
}

fn parse_signature(op: &OpInfo, op_name: &str, sig: &str) -> Result<KeyPattern, String> {
    let mut t = Tokens {
        sig,
        tokens: sig.split('_').peekable(),
    };
    let layout = t.next("the layout")?;
    if layout.as_bytes() != op.layout_text {
        return Err(format!(
            "layout {layout:?} of the signature disagrees with the op name {op_name}"
        ));
    }
    let [m, n, k] = t.dims(["m", "n", "k"])?;

    let mut batch: Option<Dim> = None;
    let mut lds: Option<[Dim; 4]> = None;
    let mut strides: Option<[Dim; 4]> = None;
    let mut flags: Option<u32> = None;
    // Sections in the only order they may come: B, ld, st, fl.
    let sections: &[&str] = match op.family {
        Family::Gemm => &["ld"],
        Family::Strided => &["B", "ld"],
        Family::Extension => &["B", "ld", "st", "fl"],
    };
    for &section in sections {
        if t.peek() != Some(section) {
            continue;
        }
        t.skip();
        match section {
            "B" => batch = Some(t.dims(["batch count"])?[0]),
            "ld" if op.family == Family::Extension => {
                lds = Some(t.dims(["lda", "ldb", "ldc", "ldd"])?);
            }
            "ld" => {
                let [a, b, c] = t.dims(["lda", "ldb", "ldc"])?;
                lds = Some([a, b, c, c]);
            }
            "st" => strides = Some(t.dims(["stride_a", "stride_b", "stride_c", "stride_d"])?),
            _ => flags = Some(parse_flags(t.next("the flags")?)?),
        }
    }
    if let Some(extra) = t.peek() {
        return Err(format!(
            "unexpected token {extra:?} in signature {sig:?} of {op_name}"
        ));
    }
    match op.family {
        Family::Strided if batch.is_none() => {
            return Err(format!(
                "strided-batched signature {sig:?} has no _B_<batch>"
            ))
        }
        Family::Extension if lds.is_none() => {
            return Err(format!("extension signature {sig:?} has no _ld_ section"))
        }
        Family::Extension if flags.is_none() => {
            return Err(format!("extension signature {sig:?} has no _fl_ section"))
        }
        _ => {}
    }
    Ok(KeyPattern {
        batching: op.batching,
        trans_a: op.layout[0],
        trans_b: op.layout[1],
        types: op.types,
        flags: flags.unwrap_or(0),
        m,
        n,
        k,
        lds,
        batch: batch.unwrap_or(Some(1)),
        strides,
    })
}

/// Reads an (op name, signature) pair: PyTorch's forms, the extension form, or `*` patterns.
pub fn parse_key(op_name: &str, signature: &str) -> KeyParse {
    let op = match parse_op(op_name.trim()) {
        OpParse::Op(op) => op,
        OpParse::Unservable => return KeyParse::Unservable,
        OpParse::Invalid(e) => return KeyParse::Invalid(e),
    };
    let pattern = match parse_signature(&op, op_name.trim(), signature.trim()) {
        Ok(p) => p,
        Err(e) => return KeyParse::Invalid(e),
    };
    if !pattern.is_concrete() {
        return KeyParse::Wildcard(pattern);
    }
    match pattern.to_key() {
        Ok(key) => KeyParse::Key(key),
        Err(e) => KeyParse::Invalid(format!("{op_name},{signature}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn fixture(rel: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/vllm-rdna")
            .join(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    const C27E: &str = "rocblas-c27e2252cc7a/tunableop_results0.csv";
    const R714_0: &str = "rocm7.14-rocblas5.5/tunableop_results0.csv";
    const R714_2: &str = "rocm7.14-rocblas5.5/tunableop_results2.csv";
    const F30B_0: &str = "rocblas-f30bb442e9b5/tunableop_results0.csv";

    fn half() -> Types {
        Types::uniform(abi::DT_F16_R, abi::DT_F32_R)
    }

    fn non_blank_lines(text: &str) -> usize {
        text.split('\n').filter(|l| !l.trim().is_empty()).count()
    }

    fn accounted(f: &ResultsFile) -> usize {
        f.validators.len()
            + f.rows.len()
            + f.wildcards.len()
            + f.unservable.len()
            + f.duplicates.len()
            + f.malformed.len()
    }

    #[test]
    fn seed_reference_table_c27e() {
        let f = parse(&fixture(C27E));
        assert!(f.malformed.is_empty(), "{:?}", f.malformed);
        assert_eq!(f.rows.len(), 70);
        assert!(f.unservable.is_empty() && f.duplicates.is_empty() && f.wildcards.is_empty());
        let defaults = f
            .rows
            .iter()
            .filter(|r| r.solution == Solution::Default)
            .count();
        assert_eq!(defaults, 16);
        // The seed's (N, K) pairs: rocBLAS m and k of a TN linear layer.
        let pairs: HashSet<(i64, i64)> = f.rows.iter().map(|r| (r.key.m, r.key.k)).collect();
        assert_eq!(pairs.len(), 7);
        assert!(pairs.contains(&(336, 10240)) && pairs.contains(&(10240, 320)));
        let tokens: HashSet<i64> = f.rows.iter().map(|r| r.key.token_count()).collect();
        assert_eq!(tokens.len(), 10);
        assert_eq!(f.validator("ROCBLAS_VERSION"), Some("5.6.0.8d1ae90e"));
        assert_eq!(f.validator("GCN_ARCH_NAME"), Some("gfx1030"));
        assert_eq!(f.validator("NOPE"), None);
        let first = &f.rows[0];
        assert_eq!(first.line, 6);
        assert_eq!(first.solution, Solution::Rocblas(-1086327703));
        assert_eq!(first.time_ms, Some(2.741127332051595));
        let want = ProblemKey::single(
            Trans::T,
            Trans::N,
            half(),
            3584,
            4096,
            2560,
            2560,
            2560,
            3584,
            3584,
            0,
        );
        assert_eq!(first.key, want);
        assert!(f
            .rows
            .iter()
            .all(|r| r.key.is_sane() && check_key(&r.key).is_ok()));
    }

    #[test]
    fn rocm714_ranks_parse_with_gemv_ids() {
        let r0 = parse(&fixture(R714_0));
        let r2 = parse(&fixture(R714_2));
        for f in [&r0, &r2] {
            assert_eq!(f.rows.len(), 1601);
            assert!(f.malformed.is_empty() && f.unservable.is_empty() && f.duplicates.is_empty());
            assert_eq!(f.validator("ROCBLAS_VERSION"), Some("5.5.0.cd957402"));
            let gemv: Vec<&Row> = f
                .rows
                .iter()
                .filter(|r| r.solution == Solution::Rocblas(-9))
                .collect();
            assert_eq!(gemv.len(), 169);
            // rocBLAS 5.x offers -9 (the gemv path) only when m or n is 1.
            assert!(gemv.iter().all(|r| r.key.m == 1 || r.key.n == 1));
        }
        let nn_gemv =
            ProblemKey::single(Trans::N, Trans::N, half(), 1, 1024, 2560, 1, 2560, 1, 1, 0);
        assert_eq!(
            r0.find(&nn_gemv).map(|r| &r.solution),
            Some(&Solution::Rocblas(-9))
        );
        let defaults = |f: &ResultsFile| {
            f.rows
                .iter()
                .filter(|r| r.solution == Solution::Default)
                .count()
        };
        assert_eq!((defaults(&r0), defaults(&r2)), (0, 3));
        // Same keys on both ranks, in the same order.
        let keys = |f: &ResultsFile| f.rows.iter().map(|r| r.key).collect::<Vec<_>>();
        assert_eq!(keys(&r0), keys(&r2));
        assert!(r0
            .rows
            .iter()
            .zip(&r2.rows)
            .any(|(a, b)| a.solution != b.solution));
    }

    #[test]
    fn f30b_rank0_has_two_strided_float_rows() {
        let f = parse(&fixture(F30B_0));
        assert!(f.malformed.is_empty(), "{:?}", f.malformed);
        assert_eq!(f.rows.len(), 608);
        let strided: Vec<&Row> = f
            .rows
            .iter()
            .filter(|r| r.key.batching == Batching::Strided)
            .collect();
        assert_eq!(strided.len(), 2);
        let tn = strided
            .iter()
            .find(|r| r.key.trans_a == Trans::T)
            .expect("TN row");
        assert_eq!(tn.key.types, Types::SGEMM);
        assert_eq!(
            (tn.key.m, tn.key.n, tn.key.k, tn.key.batch),
            (6272, 6272, 72, 4)
        );
        assert_eq!(
            (tn.key.lda, tn.key.ldb, tn.key.ldc, tn.key.ldd),
            (288, 288, 6272, 6272)
        );
        assert_eq!(
            [
                tn.key.stride_a,
                tn.key.stride_b,
                tn.key.stride_c,
                tn.key.stride_d
            ],
            [288 * 6272, 288 * 6272, 6272 * 6272, 6272 * 6272]
        );
        assert_eq!(tn.solution, Solution::Rocblas(-1086325247));
        let nn = strided
            .iter()
            .find(|r| r.key.trans_a == Trans::N)
            .expect("NN row");
        assert_eq!(nn.solution, Solution::Default);
        // Both write back in the same PyTorch form.
        assert_eq!(
            op_and_signature(&tn.key),
            (
                "GemmStridedBatchedTunableOp_float_TN".to_string(),
                "tn_6272_6272_72_B_4_ld_288_288_6272".to_string()
            )
        );
    }

    #[test]
    fn real_files_round_trip_through_text() {
        for rel in [C27E, R714_0, F30B_0] {
            let text = fixture(rel);
            let f = parse(&text);
            let again = parse(&f.to_text());
            assert_eq!(again.validators, f.validators);
            let strip = |f: &ResultsFile| {
                f.rows
                    .iter()
                    .map(|r| (r.key, r.solution.clone(), r.time_ms, r.blas_params.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(strip(&again), strip(&f));
            // These files are all PyTorch >= 2.7 rows with plain times: byte-identical.
            assert_eq!(f.to_text(), text, "{rel}");
        }
    }

    #[test]
    fn blas_params_field_keeps_its_commas() {
        let text = "GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Gemm_Rocblas_-1086326047,0.5,BLAS_PARAMS: transa: t, transb: n, m: 8, n: 4\n";
        let f = parse(text);
        assert_eq!(f.rows.len(), 1);
        assert_eq!(
            f.rows[0].blas_params.as_deref(),
            Some("BLAS_PARAMS: transa: t, transb: n, m: 8, n: 4")
        );
        assert_eq!(f.rows[0].solution, Solution::Rocblas(-1086326047));
        assert_eq!(f.to_text(), text);
    }

    #[test]
    fn crlf_blank_lines_and_spaces() {
        let text = "Validator,PT_VERSION,2.6.0\r\n\r\n   \n  GemmTunableOp_float_NN , nn_2_3_4 ,Default, 1.25 \r\n\nGemmTunableOp_Half_NT,nt_5_6_7,Gemm_Rocblas_3\r\n";
        let f = parse(text);
        assert!(f.malformed.is_empty(), "{:?}", f.malformed);
        assert_eq!(f.validator("PT_VERSION"), Some("2.6.0"));
        assert_eq!(f.rows.len(), 2);
        assert_eq!(f.rows[0].line, 4);
        assert_eq!(f.rows[0].time_ms, Some(1.25));
        assert_eq!(f.rows[1].time_ms, None);
        assert_eq!(f.rows[1].line, 6);
        let k = f.rows[1].key;
        assert_eq!(
            (k.trans_a, k.trans_b, k.lda, k.ldb, k.ldc, k.ldd),
            (Trans::N, Trans::T, 5, 6, 5, 5)
        );
    }

    #[test]
    fn duplicates_first_wins_even_across_signature_forms() {
        let text = "\
GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Gemm_Rocblas_-11,0.5
GemmTunableOp_Half_TN,tn_8_4_16,Gemm_Rocblas_-12,0.4
GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Default,0.3
GemmTunableOp_Half_TN,tn_8_4_16_ld_32_16_8,Default,0.3
";
        let f = parse(text);
        assert_eq!(f.rows.len(), 2);
        assert_eq!(f.rows[0].solution, Solution::Rocblas(-11));
        assert_eq!(
            f.duplicates,
            vec![
                Duplicate {
                    line: 2,
                    first_line: 1
                },
                Duplicate {
                    line: 3,
                    first_line: 1
                }
            ]
        );
        assert_eq!(f.rows[1].key.lda, 32);
    }

    #[test]
    fn other_backends_and_ops_are_counted_unservable() {
        let text = "\
GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Gemm_Hipblaslt_123,0.5
ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_Half_TN,tn_16_16_16_ld_16_16_16_rw_0_bias_None,Gemm_Hipblaslt_7,0.1
GemmAndBiasTunableOp_BFloat16_TN,tn_16_16_16_ld_16_16_16,Default,0.2
GemmTunableOp_tf32_NN,nn_4_4_4,Default,0.1
SomeFutureOp_Half_TN,tn_1_1_1,Default,0.1
GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Default,0.5
";
        let f = parse(text);
        assert!(f.malformed.is_empty(), "{:?}", f.malformed);
        assert_eq!(f.unservable.len(), 5);
        assert_eq!(f.unservable[0].solution, "Gemm_Hipblaslt_123");
        assert!(f.unservable[1].reason.contains("ScaledGemm"));
        assert!(f.unservable[4].reason.contains("SomeFutureOp_Half_TN"));
        // The hipBLASLt row came first for this key: PyTorch would use it, so no row here.
        assert!(f.rows.is_empty());
        assert_eq!(
            f.duplicates,
            vec![Duplicate {
                line: 6,
                first_line: 1
            }]
        );
        // Written back as read.
        let again = parse(&f.to_text());
        assert_eq!(again.unservable.len(), 5);
        assert_eq!(again.unservable[1].signature, f.unservable[1].signature);
    }

    #[test]
    fn solution_index_overflow_and_garbage_are_malformed() {
        let text = "\
GemmTunableOp_Half_TN,tn_8_4_16,Gemm_Rocblas_-2147483649,0.5
GemmTunableOp_Half_TN,tn_8_4_17,Gemm_Rocblas_99999999999999999999999,0.5
GemmTunableOp_Half_TN,tn_8_4_18,Gemm_Rocblas_12x,0.5
GemmTunableOp_Half_TN,tn_8_4_19,Gemm_Rocblas_-2147483648,0.5
GemmTunableOp_Half_TN,tn_8_4_20,Default,fast
GemmTunableOp_Half_TN,tn_8_4_21,Default,-1
";
        let f = parse(text);
        assert_eq!(f.rows.len(), 1);
        assert_eq!(f.rows[0].solution, Solution::Rocblas(i32::MIN));
        let lines: Vec<usize> = f.malformed.iter().map(|m| m.line).collect();
        assert_eq!(lines, vec![1, 2, 3, 5, 6]);
        assert!(f.malformed[0].reason.contains("32-bit"));
        assert!(f.malformed[1].reason.contains("32-bit"));
        assert!(f.malformed[3].reason.contains("not a number"));
    }

    #[test]
    fn absurd_sizes_are_malformed() {
        let cases = [
            "GemmTunableOp_Half_TN,tn_-8_4_16,Default,1",
            "GemmTunableOp_Half_TN,tn_8_4_16_ld_15_16_8,Default,1",
            "GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_7,Default,1",
            "GemmTunableOp_Half_TN,tn_4611686018427387904_4_4611686018427387904,Default,1",
            "GemmTunableOp_Half_TN,tn_8_4_99999999999999999999,Default,1",
            "GemmTunableOp_Half_TN,nt_8_4_16,Default,1",
            "GemmTunableOp_Half_TN,TN_8_4_16,Default,1",
            "GemmTunableOp_Half_XY,xy_8_4_16,Default,1",
            "GemmTunableOp_Half_TN,tn_8_4_16_B_2,Default,1",
            "GemmStridedBatchedTunableOp_Half_TN,tn_8_4_16,Default,1",
            "GemmTunableOp_Half_TN,tn_8_4,Default,1",
            "GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16,Default,1",
            "GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8_extra,Default,1",
            "GemmTunableOp_Half_TN,tn_8_4_16,,1",
            "GemmTunableOp_Half_TN,tn_8_4_16",
            "Validator,PT_VERSION",
        ];
        for case in cases {
            let f = parse(case);
            assert_eq!(f.malformed.len(), 1, "{case}: {f:?}");
            assert!(f.rows.is_empty(), "{case}");
        }
    }

    #[test]
    fn all_three_signature_forms() {
        let legacy = parse("GemmTunableOp_BFloat16_NT,nt_64_32_16,Default,1\nGemmStridedBatchedTunableOp_double_TT,tt_8_4_16_B_3,Gemm_Rocblas_5,2\n");
        assert!(legacy.malformed.is_empty(), "{:?}", legacy.malformed);
        let k = legacy.rows[0].key;
        assert_eq!(k.types, Types::uniform(abi::DT_BF16_R, abi::DT_F32_R));
        assert_eq!([k.lda, k.ldb, k.ldc, k.ldd], [64, 32, 64, 64]);
        let s = legacy.rows[1].key;
        assert_eq!(s.types, Types::uniform(abi::DT_F64_R, abi::DT_F64_R));
        assert_eq!((s.batching, s.batch), (Batching::Strided, 3));
        assert_eq!([s.lda, s.ldb, s.ldc], [16, 4, 8]);
        assert_eq!(
            [s.stride_a, s.stride_b, s.stride_c, s.stride_d],
            [16 * 8, 4 * 16, 8 * 4, 8 * 4]
        );

        let modern = parse("GemmTunableOp_BFloat16_NT,nt_64_32_16_ld_64_32_64,Default,1\n");
        assert_eq!(modern.rows[0].key, k);

        let wild = parse("GemmTunableOp_Half_TN,tn_2560_*_1536_ld_1536_1536_2560,Gemm_Rocblas_-1086327687,1\nGemmStridedBatchedTunableOp_float_NN,nn_*_*_64_B_*,Default,1\n");
        assert!(wild.malformed.is_empty(), "{:?}", wild.malformed);
        assert!(wild.rows.is_empty());
        assert_eq!(wild.wildcards.len(), 2);
        let w = &wild.wildcards[0];
        assert_eq!(w.tokens[2], "*");
        assert_eq!(w.solution, Solution::Rocblas(-1086327687));
        assert_eq!(
            (w.pattern.m, w.pattern.n, w.pattern.k),
            (Some(2560), None, Some(1536))
        );
        let hit = ProblemKey::single(
            Trans::T,
            Trans::N,
            half(),
            2560,
            1037,
            1536,
            1536,
            1536,
            2560,
            2560,
            0,
        );
        assert!(w.pattern.matches(&hit));
        let mut miss = hit;
        miss.k = 1537;
        assert!(!w.pattern.matches(&miss));
        let sw = &wild.wildcards[1].pattern;
        let strided =
            ProblemKey::single(Trans::N, Trans::N, Types::SGEMM, 8, 4, 64, 8, 64, 8, 8, 0)
                .with_batch(Batching::Strided, 5, [8 * 64, 64 * 4, 8 * 4, 8 * 4]);
        assert!(sw.matches(&strided));
        assert!(!sw.matches(&strided.with_batch(Batching::Strided, 5, [1, 2, 3, 4])));
        // Wildcard rows are written back as read.
        assert_eq!(parse(&wild.to_text()).wildcards, wild.wildcards);
    }

    #[test]
    fn extension_rows_for_what_pytorch_cannot_name() {
        let hgemm = ProblemKey::single(
            Trans::T,
            Trans::N,
            Types::HGEMM,
            4096,
            512,
            4096,
            4096,
            4096,
            4096,
            4096,
            abi::FLAG_FP16_ALT_IMPL,
        );
        let (op, sig) = op_and_signature(&hgemm);
        assert_eq!(op, "TunedblasGemm_Single_f16_f16_f16_f16_f16_TN");
        assert_eq!(sig, "tn_4096_512_4096_ld_4096_4096_4096_4096_fl_0x4");
        assert_eq!(parse_key(&op, &sig), KeyParse::Key(hgemm));

        let ptr = ProblemKey::single(
            Trans::N,
            Trans::C,
            Types::uniform(abi::DT_F32_C, abi::DT_F32_C),
            8,
            9,
            10,
            8,
            9,
            8,
            16,
            0,
        )
        .with_batch(Batching::PointerArray, 7, [0; 4]);
        let (op, sig) = op_and_signature(&ptr);
        assert_eq!(op, "TunedblasGemm_PtrArray_f32c_f32c_f32c_f32c_f32c_NC");
        assert_eq!(sig, "nc_8_9_10_B_7_ld_8_9_8_16_fl_0x0");
        assert_eq!(parse_key(&op, &sig), KeyParse::Key(ptr));

        let mut mixed = ProblemKey::single(Trans::N, Trans::N, half(), 8, 8, 8, 8, 8, 8, 8, 0)
            .with_batch(Batching::Strided, 2, [100, 100, 64, 64]);
        mixed.types.c = abi::DT_F32_R;
        mixed.types.a = 170; // an f8 type the abi module has no name for
        let (op, sig) = op_and_signature(&mixed);
        assert_eq!(op, "TunedblasGemm_Strided_dt170_f16_f32_f16_f32_NN");
        assert_eq!(sig, "nn_8_8_8_B_2_ld_8_8_8_8_st_100_100_64_64_fl_0x0");
        assert_eq!(parse_key(&op, &sig), KeyParse::Key(mixed));

        // Decimal flags are read too; non-kernel flag bits and bad names are not.
        assert_eq!(
            parse_key(
                &op_and_signature(&hgemm).0,
                "tn_4096_512_4096_ld_4096_4096_4096_4096_fl_4"
            ),
            KeyParse::Key(hgemm)
        );
        assert!(matches!(
            parse_key(
                "TunedblasGemm_Single_f16_f16_f16_f16_f16_TN",
                "tn_1_1_1_ld_1_1_1_1_fl_0x8"
            ),
            KeyParse::Invalid(_)
        ));
        assert!(matches!(
            parse_key(
                "TunedblasGemm_Single_f16_f16_f16_f16_f17_TN",
                "tn_1_1_1_ld_1_1_1_1_fl_0"
            ),
            KeyParse::Invalid(_)
        ));
        assert!(matches!(
            parse_key(
                "TunedblasGemm_Batched_f16_f16_f16_f16_f16_TN",
                "tn_1_1_1_ld_1_1_1_1_fl_0"
            ),
            KeyParse::Invalid(_)
        ));
        assert!(matches!(
            parse_key(
                "TunedblasGemm_Single_f16_f16_f16_f16_f16_TN",
                "tn_1_1_1_ld_1_1_1_1"
            ),
            KeyParse::Invalid(_)
        ));
        assert!(matches!(
            parse_key(
                "TunedblasGemm_Single_f16_f16_f16_f16_f16_TN",
                "tn_1_1_1_B_2_ld_1_1_1_1_fl_0"
            ),
            KeyParse::Invalid(_)
        ));

        // A file mixing both forms round-trips, and PyTorch-form keys stay PyTorch-form.
        let plain = ProblemKey::single(Trans::T, Trans::N, half(), 64, 32, 16, 16, 16, 64, 64, 0);
        let mut f = ResultsFile::default();
        f.set_validator("ROCBLAS_VERSION", "5.6.0.8d1ae90e");
        f.rows
            .push(Row::new(hgemm, Solution::Rocblas(-1086327687), Some(0.61)));
        f.rows
            .push(Row::new(plain, Solution::Default, Some(1.0 / 3.0)));
        f.rows.push(Row::new(ptr, Solution::Rocblas(-2), None));
        let text = f.to_text();
        assert!(text.contains(
            "\nGemmTunableOp_Half_TN,tn_64_32_16_ld_16_16_64,Default,0.3333333333333333\n"
        ));
        let again = parse(&text);
        assert_eq!(again.rows.len(), 3);
        for (a, b) in again.rows.iter().zip(&f.rows) {
            assert_eq!(
                (a.key, &a.solution, a.time_ms),
                (b.key, &b.solution, b.time_ms)
            );
        }
        assert_eq!(again.validators, f.validators);
    }

    /// A small xorshift generator: deterministic, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
            xs[self.below(xs.len() as u64) as usize]
        }
    }

    fn random_key(rng: &mut Rng) -> ProblemKey {
        let types = rng.pick(&[
            half(),
            Types::uniform(abi::DT_BF16_R, abi::DT_F32_R),
            Types::SGEMM,
            Types::uniform(abi::DT_F64_R, abi::DT_F64_R),
            Types::HGEMM,
            Types {
                c: abi::DT_F32_R,
                ..half()
            },
            Types::uniform(abi::DT_F64_C, abi::DT_F64_C),
            Types::uniform(abi::DT_I8_R, abi::DT_I32_R),
            Types::uniform(171, abi::DT_F32_R),
        ]);
        let trans = [Trans::N, Trans::T, Trans::N, Trans::T, Trans::C];
        let (ta, tb) = (rng.pick(&trans), rng.pick(&trans));
        let dim = |rng: &mut Rng| {
            if rng.below(20) == 0 {
                rng.below(2) as i64
            } else {
                1 + rng.below(20000) as i64
            }
        };
        let (m, n, k) = (dim(rng), dim(rng), dim(rng));
        let [pa, pb, pc] = ProblemKey::packed_lds(ta, tb, m, n, k);
        let pad = |rng: &mut Rng, v: i64| {
            if rng.below(3) == 0 {
                v + rng.below(64) as i64
            } else {
                v
            }
        };
        let (lda, ldb, ldc) = (pad(rng, pa), pad(rng, pb), pad(rng, pc));
        let ldd = if rng.below(4) == 0 {
            pad(rng, ldc)
        } else {
            ldc
        };
        let flags = if rng.below(3) == 0 {
            rng.next() as u32
        } else {
            0
        };
        let key = ProblemKey::single(ta, tb, types, m, n, k, lda, ldb, ldc, ldd, flags);
        match rng.below(3) {
            0 => key,
            1 => {
                let batch = rng.below(40) as i64;
                let packed = checked_packed_strides(&key).unwrap();
                let strides = if rng.below(2) == 0 {
                    packed
                } else {
                    packed.map(|s| s + rng.below(100) as i64)
                };
                key.with_batch(Batching::Strided, batch, strides)
            }
            _ => key.with_batch(Batching::PointerArray, rng.below(40) as i64, [0; 4]),
        }
    }

    /// `pack_int8x4` (0x1) is a kernel flag: an int8 row for packed inputs keeps it in its
    /// `_fl_` field and reads back as that problem, not the unpacked one.
    #[test]
    fn packed_int8_rows_keep_their_flag() {
        let t = Types {
            a: abi::DT_I8_R,
            b: abi::DT_I8_R,
            c: abi::DT_I32_R,
            d: abi::DT_I32_R,
            compute: abi::DT_I32_R,
        };
        let packed = ProblemKey::single(
            Trans::T,
            Trans::N,
            t,
            64,
            32,
            64,
            64,
            64,
            64,
            64,
            abi::FLAG_PACK_INT8X4,
        );
        let (op, sig) = op_and_signature(&packed);
        assert_eq!(op, "TunedblasGemm_Single_i8_i8_i32_i32_i32_TN");
        assert!(sig.ends_with("_fl_0x1"), "{sig}");
        assert_eq!(parse_key(&op, &sig), KeyParse::Key(packed));
        let plain = ProblemKey { flags: 0, ..packed };
        assert_ne!(op_and_signature(&plain), (op, sig));
    }

    #[test]
    fn every_valid_key_round_trips_through_its_name() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut pytorch, mut ext) = (0, 0);
        for _ in 0..20000 {
            let key = random_key(&mut rng);
            assert_eq!(check_key(&key), Ok(()), "{key:?}");
            let (op, sig) = op_and_signature(&key);
            assert_eq!(parse_key(&op, &sig), KeyParse::Key(key), "{op},{sig}");
            assert!(!op.contains(',') && !sig.contains(','));
            if op.starts_with(EXT_OP_PREFIX) {
                ext += 1;
                assert!(pytorch_expressible(&key).is_none());
            } else {
                pytorch += 1;
                assert!(sig.contains("_ld_"));
            }
        }
        assert!(pytorch > 1000 && ext > 1000, "{pytorch} {ext}");
    }

    #[test]
    fn mutated_real_files_never_panic_and_every_line_is_accounted_for() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let sources: Vec<Vec<u8>> = [C27E, F30B_0]
            .iter()
            .map(|r| fixture(r).into_bytes())
            .collect();
        let noise = b",,_*-\r\n0x9 .eE+\xff\xc3";
        for round in 0..600 {
            let mut bytes = sources[round % sources.len()].clone();
            for _ in 0..1 + rng.below(20) {
                let at = rng.below(bytes.len() as u64 + 1) as usize;
                match rng.below(4) {
                    0 => bytes.truncate(at),
                    1 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
                    2 => bytes.insert(at.min(bytes.len()), rng.pick(noise)),
                    _ if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => {}
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            let f = parse(&text);
            assert_eq!(accounted(&f), non_blank_lines(&text), "round {round}");
            for row in &f.rows {
                assert_eq!(check_key(&row.key), Ok(()));
                assert!(row.solution.is_servable());
            }
            // What parses writes back and parses to the same rows.
            let again = parse(&f.to_text());
            assert_eq!(
                again.rows.iter().map(|r| r.key).collect::<Vec<_>>(),
                f.rows.iter().map(|r| r.key).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn a_byte_order_mark_is_dropped() {
        let text = "GemmTunableOp_Half_TN,tn_8_4_16,Default,1\nValidator,PT_VERSION,2.7.0\n";
        let plain = parse(text);
        assert_eq!(plain.rows.len(), 1);
        let bom = parse(&format!("\u{feff}{text}"));
        assert_eq!(bom, plain, "the first row is read as a row");
        let v = parse("\u{feff}Validator,PT_VERSION,2.7.0\n");
        assert_eq!(v.validator("PT_VERSION"), Some("2.7.0"));
        // Only at the very start: elsewhere it is part of the line (an unknown op name).
        let inner = parse(&format!("{text}\u{feff}{text}"));
        assert_eq!(inner.rows.len(), 1);
        assert_eq!(inner.unservable.len(), 1);
        assert!(inner.unservable[0].op_name.starts_with('\u{feff}'));
    }

    #[test]
    fn invalid_utf8_is_read_lossily() {
        let dir = std::env::temp_dir().join(format!("tunedblas-tunableop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tunableop_results0.csv");
        let mut bytes = b"Validator,GCN_ARCH_NAME,gfx\xff1030\n".to_vec();
        bytes.extend_from_slice(b"GemmTunableOp_Half_TN,tn_8_4_16,Default,1\n");
        std::fs::write(&path, &bytes).unwrap();
        let f = read(&path).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(f.rows.len(), 1);
        assert_eq!(f.validator("GCN_ARCH_NAME"), Some("gfx\u{fffd}1030"));
        assert!(read(&dir.join("absent.csv")).is_err());
    }
}
