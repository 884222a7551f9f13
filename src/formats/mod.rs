//! The formats of the tools around rocBLAS, read as GEMM problems and written from profiles.
//!
//! - [`bench`]: rocBLAS bench logs (`ROCBLAS_LAYER=2`): one `rocblas-bench` command line per
//!   call. Read as shapes with call counts; written as command lines that reproduce a row
//!   and the library heuristic with AMD's own tool.
//! - [`profile_log`]: rocBLAS profile logs (`ROCBLAS_LAYER=4`): one YAML flow map per
//!   distinct problem with its `call_count`. Read as shapes with call counts.
//! - [`gemm_tune`]: the CSV that `rocblas-gemm-tune` prints and
//!   `ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH` reads. Read as shapes (and solution indices),
//!   written from a profile for hosts where preloading is not allowed.
//! - [`pytorch`]: PyTorch TunableOp result files as PyTorch itself accepts them (its exact
//!   validator set, its signature form for the PyTorch version, no extension rows).
//! - [`hipblaslt_tuning`]: hipBLASLt's `HIPBLASLT_TUNING_FILE` / `HIPBLASLT_TUNING_OVERRIDE_FILE`
//!   (a `Git Version:` line, then rows with an algorithm index). Read as index rows or
//!   shapes, written from a hipBLASLt profile for hosts where preloading is not allowed.
//! - [`hipblaslt_bench`]: `hipblaslt-bench` command lines, which hipBLASLt logs for every
//!   call with `HIPBLASLT_LOG_MASK=32`. Read as shapes with call counts; written to check a
//!   row with AMD's own bench.
//! - [`aiter`]: AITER's `bf16_tuned_gemm.csv` / `bf16_untuned_gemm.csv` (vLLM's path with
//!   `VLLM_ROCM_USE_AITER=1`). Its `hipblaslt` rows are index rows; every other libtype is
//!   counted. Written as `libtype hipblaslt` rows from a hipBLASLt profile.
//! - [`lt_export`]: a hipBLASLt profile written in those three formats.
//! - [`lt`]: what those three share: rows as hipBLASLt keys, unservable rows counted by
//!   reason, hipBLASLt's type names.
//! - [`validators`]: what a file says of the build it was tuned on (PyTorch's validators,
//!   hipBLASLt's `Git Version:`), checked against the loaded build.
//!
//! Every reader takes arbitrary text and never panics: a line it cannot use is reported
//! with its 1-based number and the reason, and the rest of the input is still read.
//! The TunableOp files themselves (results, untuned files, our miss logs) are read by
//! [`crate::tunableop`].

pub mod aiter;
pub mod bench;
pub mod gemm_tune;
pub mod hipblaslt_bench;
pub mod hipblaslt_tuning;
pub mod lt;
pub mod lt_export;
pub mod profile_log;
pub mod pytorch;
pub mod validators;

use crate::abi;
use crate::key::{Batching, ProblemKey, Trans, Types};
use crate::tunableop;

/// Which format a text is in, told by its content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// PyTorch TunableOp results or untuned files, or tunedblas miss logs.
    TunableOp,
    /// rocBLAS bench log lines (`./rocblas-bench -f gemm_ex ...`).
    Bench,
    /// rocBLAS profile log (`- { rocblas_function: "rocblas_gemm_ex", ..., call_count: 3 }`).
    ProfileLog,
    /// rocblas-gemm-tune CSV (`transA,transB,M,N,batch_count,K,...,solution_index`).
    GemmTune,
    /// hipBLASLt tuning or override file (`Git Version: ...`, `transA,transB,batch_count,...`).
    HipblasltTuning,
    /// `hipblaslt-bench` command lines (`HIPBLASLT_LOG_MASK=32` logs).
    HipblasltBench,
    /// AITER GEMM table (`gfx,cu_num,M,N,K,bias,dtype,outdtype,...`).
    Aiter,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::TunableOp => "TunableOp CSV",
            Format::Bench => "rocBLAS bench log",
            Format::ProfileLog => "rocBLAS profile log",
            Format::GemmTune => "rocblas-gemm-tune CSV",
            Format::HipblasltTuning => "hipBLASLt tuning file",
            Format::HipblasltBench => "hipblaslt-bench log",
            Format::Aiter => "AITER GEMM table",
        }
    }
}

/// Tells the format from the content: a hipBLASLt tuning file's `Git Version:` line or
/// header, an AITER table's header, a rocblas-gemm-tune header line, a profile-log entry or
/// a `rocblas-bench -f` / `hipblaslt-bench` command anywhere in the text decide; anything
/// else is read as TunableOp CSV (whose reader reports what it cannot use).
pub fn detect(text: &str) -> Format {
    if hipblaslt_tuning::is_tuning_file(text) {
        return Format::HipblasltTuning;
    }
    if aiter::is_aiter(text) {
        return Format::Aiter;
    }
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("transA,transB,") {
            return Format::GemmTune;
        }
        if hipblaslt_bench::is_command(t) {
            return Format::HipblasltBench;
        }
        if profile_log::is_entry(t) {
            return Format::ProfileLog;
        }
        if bench::is_command(t) {
            return Format::Bench;
        }
    }
    Format::TunableOp
}

/// One problem read from a log or CSV.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedShape {
    pub key: ProblemKey,
    /// Calls seen (bench logs: lines; profile logs: `call_count`), 0 when the format has none.
    pub calls: u64,
    /// 1-based line where the problem was first seen.
    pub line: usize,
    /// A solution the input names for it: the `--solution_index` of a bench line run with
    /// `--algo 1`, or a rocblas-gemm-tune row's index (as written in that file).
    pub solution: Option<i32>,
}

/// A line that named no problem tunedblas can tune, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub line: usize,
    pub reason: String,
}

/// What a reader found: each distinct problem once (calls summed, first line kept), and
/// the lines it skipped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    pub entries: Vec<ParsedShape>,
    pub skipped: Vec<Skipped>,
}

impl Parsed {
    fn add(&mut self, entry: ParsedShape) {
        match self.entries.iter_mut().find(|e| e.key == entry.key) {
            Some(e) => {
                e.calls = e.calls.saturating_add(entry.calls);
                if e.solution.is_none() {
                    e.solution = entry.solution;
                }
            }
            None => self.entries.push(entry),
        }
    }

    fn skip(&mut self, line: usize, reason: impl Into<String>) {
        self.skipped.push(Skipped {
            line,
            reason: reason.into(),
        });
    }
}

/// Reads `text` in `format` as rocBLAS problems; `None` for [`Format::TunableOp`], which
/// [`crate::tunableop`] reads. The hipBLASLt-side formats give the same GEMMs as rocBLAS
/// keys (shapes only: their indices are hipBLASLt's), see [`parse_lt`].
pub fn parse(format: Format, text: &str) -> Option<Parsed> {
    match format {
        Format::TunableOp => None,
        Format::Bench => Some(bench::parse(text)),
        Format::ProfileLog => Some(profile_log::parse(text)),
        Format::GemmTune => Some(gemm_tune::parse(text)),
        Format::HipblasltTuning | Format::HipblasltBench | Format::Aiter => {
            parse_lt(format, text).map(|p| p.rocblas_entries())
        }
    }
}

/// Reads `text` in one of the hipBLASLt-side formats as hipBLASLt keys, with the indices
/// they name and the rows counted as unservable; `None` for the rocBLAS formats.
pub fn parse_lt(format: Format, text: &str) -> Option<lt::LtParsed> {
    match format {
        Format::HipblasltTuning => Some(hipblaslt_tuning::parse(text)),
        Format::HipblasltBench => Some(hipblaslt_bench::parse(text)),
        Format::Aiter => Some(aiter::parse(text)),
        _ => None,
    }
}

// ---- helpers shared by the readers ----------------------------------------------------------

/// A decimal integer (optionally negative), or `0x` hex.
pub(crate) fn int(text: &str) -> Option<i64> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return i64::from_str_radix(hex, 16).ok();
    }
    let digits = t.strip_prefix('-').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// A rocBLAS datatype by its name (`f16_r`, ...).
pub(crate) fn datatype(text: &str) -> Option<abi::Datatype> {
    abi::datatype_from_name(text.trim())
}

/// One transpose letter, as rocBLAS logs it (`N`, `T`, `C`).
pub(crate) fn trans(text: &str) -> Option<Trans> {
    let t = text.trim();
    let mut chars = t.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => Trans::from_letter(c),
        _ => None,
    }
}

/// A size field of a log line: `None` when absent, an error naming it (`label`: `-m`, `M:`)
/// when it is not an integer.
pub(crate) fn int_field(value: Option<&str>, label: &str) -> Result<Option<i64>, String> {
    value
        .map(|v| int(v).ok_or_else(|| format!("{label} '{v}' is not an integer")))
        .transpose()
}

/// A transpose field of a log line, as [`int_field`].
pub(crate) fn trans_field(value: Option<&str>, label: &str) -> Result<Option<Trans>, String> {
    value
        .map(|v| trans(v).ok_or_else(|| format!("{label} '{v}' is not N, T or C")))
        .transpose()
}

/// The sizes of a problem as a log names them, before they become a key.
#[derive(Clone, Debug, Default)]
pub(crate) struct Fields {
    pub ta: Option<Trans>,
    pub tb: Option<Trans>,
    pub m: Option<i64>,
    pub n: Option<i64>,
    pub k: Option<i64>,
    pub lda: Option<i64>,
    pub ldb: Option<i64>,
    pub ldc: Option<i64>,
    pub ldd: Option<i64>,
    pub strides: [Option<i64>; 4],
    pub batch: Option<i64>,
    pub flags: u32,
}

impl Fields {
    /// The key, checked to be a problem rocBLAS could accept. `ldd` defaults to `ldc`,
    /// missing strides of a strided batch to the packed ones.
    pub fn key(&self, types: Types, batching: Batching) -> Result<ProblemKey, String> {
        let need = |v: Option<i64>, what: &str| v.ok_or_else(|| format!("no {what}"));
        let ta = self.ta.ok_or("no transA")?;
        let tb = self.tb.ok_or("no transB")?;
        let (m, n, k) = (need(self.m, "m")?, need(self.n, "n")?, need(self.k, "k")?);
        let (lda, ldb, ldc) = (
            need(self.lda, "lda")?,
            need(self.ldb, "ldb")?,
            need(self.ldc, "ldc")?,
        );
        let ldd = self.ldd.unwrap_or(ldc);
        let key = ProblemKey::single(ta, tb, types, m, n, k, lda, ldb, ldc, ldd, self.flags);
        let key = match batching {
            Batching::Single => key,
            Batching::PointerArray => {
                key.with_batch(batching, need(self.batch, "batch_count")?, [0; 4])
            }
            Batching::Strided => {
                let batch = need(self.batch, "batch_count")?;
                // Packed strides, computed without overflow; check_key rejects the rest.
                let packed = key.checked_packed_strides();
                let mut strides = [0i64; 4];
                for i in 0..4 {
                    strides[i] = match (self.strides[i], packed[i]) {
                        (Some(s), _) => s,
                        (None, Some(p)) => p,
                        (None, None) => return Err("the problem's sizes overflow 64 bits".into()),
                    };
                }
                key.with_batch(batching, batch, strides)
            }
        };
        tunableop::check_key(&key)?;
        Ok(key)
    }
}

/// rocBLAS's name of a `rocblas_gemm_flags` value as its logs print it, or the number.
pub(crate) fn flags_from_text(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let v = match t {
        "none" => abi::FLAG_NONE,
        // rocBLAS 2.47 (ROCm 5.5) logs rocblas_gemm_flags_pack_int8x4 this way.
        "pack_int" | "pack_int8x4" => abi::FLAG_PACK_INT8X4,
        "use_cu_efficiency" => abi::FLAG_USE_CU_EFFICIENCY,
        "fp16_alt_impl" => abi::FLAG_FP16_ALT_IMPL,
        "check_solution_index" => abi::FLAG_CHECK_SOLUTION_INDEX,
        "fp16_alt_impl_round" | "fp16_alt_impl_rnz" => abi::FLAG_FP16_ALT_IMPL_RNZ,
        "stochastic_rounding" => abi::FLAG_STOCHASTIC_ROUNDING,
        "invalid" => {
            return Err("flags logged as 'invalid' (rocBLAS logs a combination of flags that way); record with ROCBLAS_LAYER=2 to get the value".into())
        }
        other => match int(other).and_then(|v| u32::try_from(v).ok()) {
            Some(v) => v,
            None => return Err(format!("flags '{other}' are not a rocblas_gemm_flags value")),
        },
    };
    Ok(v)
}

#[cfg(test)]
pub(crate) mod testutil {
    /// A small xorshift generator: deterministic, no dependency.
    pub struct Rng(pub u64);
    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        pub fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        /// Three sizes (m, n, k) from 1 to `max`.
        pub fn sizes(&mut self, max: u64) -> [i64; 3] {
            [(); 3].map(|_| 1 + self.below(max) as i64)
        }
        pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
            xs[self.below(xs.len() as u64) as usize]
        }
        /// Arbitrary bytes, biased toward the characters the formats use.
        pub fn bytes(&mut self, len: usize) -> Vec<u8> {
            const ALPHABET: &[u8] = b"-_,:{}'\" \n\r\t0123456789xNTCfmnkr.abcdeghilopstuvw*#/\\";
            (0..len)
                .map(|_| {
                    if self.below(8) == 0 {
                        self.next() as u8
                    } else {
                        ALPHABET[self.below(ALPHABET.len() as u64) as usize]
                    }
                })
                .collect()
        }
        /// A copy of `text` with a few bytes replaced, removed or duplicated.
        pub fn mutate(&mut self, text: &[u8]) -> Vec<u8> {
            let mut out = text.to_vec();
            for _ in 0..1 + self.below(6) {
                if out.is_empty() {
                    break;
                }
                let at = self.below(out.len() as u64) as usize;
                match self.below(4) {
                    0 => out[at] = self.next() as u8,
                    1 => {
                        out.remove(at);
                    }
                    2 => {
                        let b = out[at];
                        out.insert(at, b);
                    }
                    _ => {
                        let b = self.bytes(1)[0];
                        out[at] = b;
                    }
                }
            }
            out
        }
    }

    /// Feeds `parse` what a parser must survive without a panic: 3000 rounds of arbitrary
    /// bytes (also after `marker`, a format's first words, when given, to get past its
    /// detection) and of mutations of `sample`, from the generator seeded with `seed`.
    pub fn never_panics(seed: u64, marker: Option<&str>, sample: &str, parse: impl Fn(&str)) {
        let mut rng = Rng(seed);
        for _ in 0..3000 {
            let len = rng.below(300) as usize;
            let bytes = rng.bytes(len);
            let text = String::from_utf8_lossy(&bytes);
            parse(&text);
            if let Some(marker) = marker {
                parse(&format!("{marker}{text}"));
            }
            parse(&String::from_utf8_lossy(&rng.mutate(sample.as_bytes())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_by_content() {
        assert_eq!(
            detect("garbage\n./rocblas-bench -f gemm_ex --transposeA N\n"),
            Format::Bench
        );
        assert_eq!(
            detect("- { rocblas_function: \"rocblas_sgemm\", M: 1, call_count: 2 }\n"),
            Format::ProfileLog
        );
        assert_eq!(
            detect("transA,transB,M,N,batch_count,K,alpha,beta,lda,ldb,ldc,input_type,output_type,compute_type,solution_index\n"),
            Format::GemmTune
        );
        assert_eq!(
            detect("GemmTunableOp_Half_TN,tn_1_2_3\n"),
            Format::TunableOp
        );
        assert_eq!(
            detect("Git Version: cd957402\ntransA,transB,batch_count,m,n,k,a_type,b_type,c_type,compute_type,solution_index\n"),
            Format::HipblasltTuning
        );
        assert_eq!(
            detect("x\nhipblaslt-bench --api_method c -m 1 -n 1 -k 1\n"),
            Format::HipblasltBench
        );
        assert_eq!(detect(aiter::TUNED_HEADER), Format::Aiter);
        assert_eq!(detect(""), Format::TunableOp);
    }

    #[test]
    fn ints_and_flags() {
        assert_eq!(int("42"), Some(42));
        assert_eq!(int("-1086326047"), Some(-1086326047));
        assert_eq!(int("0x10"), Some(16));
        assert_eq!(int("+3"), None);
        assert_eq!(int("1e3"), None);
        assert_eq!(int("99999999999999999999"), None);
        assert_eq!(flags_from_text("fp16_alt_impl"), Ok(4));
        assert_eq!(flags_from_text("fp16_alt_impl_round"), Ok(0x10));
        assert_eq!(flags_from_text("20"), Ok(20));
        assert!(flags_from_text("invalid")
            .unwrap_err()
            .contains("ROCBLAS_LAYER=2"));
        assert!(flags_from_text("bogus").is_err());
    }
}
