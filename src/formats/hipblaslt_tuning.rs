//! hipBLASLt's own tuning files: what `hipblaslt-bench` appends to `HIPBLASLT_TUNING_FILE`
//! while it tunes, and what `HIPBLASLT_TUNING_OVERRIDE_FILE` makes the library use.
//!
//! The file, as hipBLASLt 7.1 (ROCm 7.1, Debian's `libhipblaslt1` 7.1.1) reads it:
//!
//! ```text
//! Git Version: <revision>
//! transA,transB,batch_count,m,n,k,a_type,b_type,c_type,compute_type,solution_index
//! T,N,1,4096,512,2560,bf16_r,bf16_r,bf16_r,f32_r,12345
//! ```
//!
//! - The **first line** must hold `Git Version: ` followed by exactly the library's own
//!   revision (`hipblasLtGetGitRevision`; empty in Debian's build) to the end of the line:
//!   `hipblasLtMatmulAlgoGetHeuristic` compares them on every call and, when they differ,
//!   switches the override off for the process (it logs "The hipBLASLt git version and the
//!   override file git version are not the same"). A CRLF file never matches (the `\r` is
//!   part of the compared text). So a whole file belongs to one build.
//! - Rows come as a header line naming the columns, then value lines. The reader finds the
//!   eleven columns it needs by name, so `hipblaslt-bench`'s own wide lines
//!   (`transA,transB,grouped_gemm,batch_count,m,n,k,alpha,lda,...`, indented by four spaces)
//!   read too; a row with no header before it is read by position, as hipBLASLt's own
//!   positional reader takes it: the bench's 35 wide fields, or 37 with the `gcnArchName,CUs`
//!   the tuning tool appends (files from the field look so), else those eleven in order. `transA`/`transB`
//!   other than `N` mean transposed; types are hipBLASLt's names (`bf16_r`); the compute
//!   type is `hipblaslt-bench`'s (`f32_r`). Only `solution_index > 0` is kept (7.1).
//! - The override is keyed by transposes, the four types, m, n, k and the batch count: it
//!   ignores leading dimensions, strides and the epilogue. A row read here becomes the key of
//!   the problem it was tuned for: the columns' leading dimensions where the wide form gives
//!   them, else packed ones, and a bias epilogue where `bias_vector` says so.
//!
//! Rows naming what a BLAS interposer cannot serve (grouped GEMMs, scaled 8-bit GEMMs,
//! activation epilogues, swizzled layouts, integer types) are counted by reason, never
//! guessed at. [`write`] writes the eleven-column form, one header per row (the pairs older
//! readers need), after the `Git Version:` line of the build the rows were tuned on.

use super::lt::{self as ltf, LtEntry, LtParsed};
use crate::cublaslt::{self as lt, LtKey};
use crate::key::Trans;

/// The first line's marker, as hipBLASLt looks for it.
pub const GIT_VERSION: &str = "Git Version: ";

/// The eleven columns of an override row, in the order hipBLASLt 7.1's parser indexes them.
pub const COLUMNS: [&str; 11] = [
    "transA",
    "transB",
    "batch_count",
    "m",
    "n",
    "k",
    "a_type",
    "b_type",
    "c_type",
    "compute_type",
    "solution_index",
];

/// `hipblaslt-bench`'s wide columns, as its tuning output names them (with the bench's
/// `soulution_index` spelling).
#[rustfmt::skip]
const WIDE: [&str; 35] = [
    "transA", "transB", "grouped_gemm", "batch_count", "m", "n", "k", "alpha", "lda",
    "stride_a", "beta", "ldb", "stride_b", "ldc", "stride_c", "ldd", "stride_d", "a_type",
    "b_type", "c_type", "d_type", "compute_type", "scaleA", "scaleB", "scaleC", "scaleD",
    "amaxD", "activation_type", "bias_vector", "bias_type", "rotating_buffer",
    "hipblaslt-Gflops", "hipblaslt-GB/s", "us", "soulution_index",
];

/// Whether `text` looks like a hipBLASLt tuning file: a `Git Version:` first line, or a
/// header naming hipBLASLt's columns (`transA,transB,batch_count,` or the bench's wide
/// `transA,transB,grouped_gemm,`), which rocblas-gemm-tune's header (`transA,transB,M,N,`)
/// does not.
pub fn is_tuning_file(text: &str) -> bool {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let Some(first) = lines.next() else {
        return false;
    };
    if first.starts_with(GIT_VERSION.trim_end()) {
        return true;
    }
    std::iter::once(first).chain(lines).take(64).any(is_header)
}

fn is_header(line: &str) -> bool {
    let l = line.trim();
    l.starts_with("transA,transB,batch_count,") || l.starts_with("transA,transB,grouped_gemm,")
}

/// Where each needed column is in the current header.
#[derive(Clone, Debug)]
struct Header {
    names: Vec<String>,
}

impl Header {
    fn canonical() -> Header {
        Header {
            names: COLUMNS.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn of(line: &str) -> Header {
        Header {
            names: line.split(',').map(|s| s.trim().to_string()).collect(),
        }
    }

    fn at(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The columns of a row read without a header line: the wide form where the row has
    /// its 35 fields, or 37 with the `gcnArchName,CUs` the tuning tool appends (hipBLASLt's
    /// own positional reader takes exactly those 37), else the eleven in order.
    fn positional(fields: usize) -> Header {
        let mut names: Vec<String> = match fields {
            35 | 37 => WIDE.iter().map(|s| s.to_string()).collect(),
            _ => return Header::canonical(),
        };
        if fields == 37 {
            names.extend(["gcnArchName".to_string(), "CUs".to_string()]);
        }
        Header { names }
    }
}

/// Reads a tuning or override file. Never panics; see the module docs.
pub fn parse(text: &str) -> LtParsed {
    let mut out = LtParsed::default();
    // The last header line seen; none yet: each row's columns are by position.
    let mut header: Option<Header> = None;
    for (i, raw) in text.split('\n').enumerate() {
        let n = i + 1;
        if i == 0 {
            if let Some(rev) = raw.strip_prefix(GIT_VERSION) {
                out.git_version = Some(rev.to_string());
                continue;
            }
            if raw.trim_end() == GIT_VERSION.trim_end() {
                out.git_version = Some(String::new());
                continue;
            }
        }
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with(GIT_VERSION.trim_end()) {
            out.skip(
                n,
                "a Git Version line that is not the first line: hipBLASLt reads only the first",
            );
            continue;
        }
        if !line.contains(',') {
            // hipBLASLt skips lines without a comma; so do we, saying so.
            out.skip(n, "no comma: not a row");
            continue;
        }
        if line.starts_with("transA") {
            header = Some(Header::of(line));
            continue;
        }
        let positional;
        let h = match &header {
            Some(h) => h,
            None => {
                positional = Header::positional(line.split(',').count());
                &positional
            }
        };
        if let Err(why) = row(&mut out, h, line, n) {
            out.skip(n, why);
        }
    }
    out
}

fn row(out: &mut LtParsed, h: &Header, line: &str, n: usize) -> Result<(), String> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() < h.names.len() {
        return Err(format!(
            "{} fields where the header names {}",
            f.len(),
            h.names.len()
        ));
    }
    let col = |name: &str| -> Result<&str, String> {
        h.at(name)
            .map(|i| f[i])
            .ok_or_else(|| format!("the header has no {name} column"))
    };
    let opt = |name: &str| h.at(name).map(|i| f[i]);
    let num = |name: &str| -> Result<i64, String> {
        let v = col(name)?;
        super::int(v).ok_or_else(|| format!("{name} '{v}' is not an integer"))
    };
    let trans = |name: &str| -> Result<Trans, String> {
        match col(name)? {
            "N" => Ok(Trans::N),
            "T" => Ok(Trans::T),
            other => Err(format!("{name} '{other}' is not N or T")),
        }
    };
    let ty = |name: &str| -> Result<lt::CudaDataType, String> {
        let v = col(name)?;
        ltf::hip_type(v).ok_or_else(|| format!("{name} '{v}' is not a hipBLASLt type name"))
    };
    let (ta, tb) = (trans("transA")?, trans("transB")?);
    let (batch, m, nn, k) = (num("batch_count")?, num("m")?, num("n")?, num("k")?);
    let (a, b, c) = (ty("a_type")?, ty("b_type")?, ty("c_type")?);
    let d = match opt("d_type") {
        Some(v) => {
            ltf::hip_type(v).ok_or_else(|| format!("d_type '{v}' is not a hipBLASLt type name"))?
        }
        None => c,
    };
    let compute_text = col("compute_type")?;
    let compute = ltf::hip_compute(compute_text)
        .ok_or_else(|| format!("compute_type '{compute_text}' is not a hipblaslt-bench name"))?;
    let index_text = opt("solution_index")
        .or_else(|| opt("soulution_index"))
        .ok_or("the header has no solution_index column")?;
    let index = super::int(index_text)
        .and_then(|v| i32::try_from(v).ok())
        .ok_or_else(|| format!("solution_index '{index_text}' is not a 32-bit integer"))?;
    if index <= 0 {
        return Err(format!(
            "solution_index {index}: hipBLASLt 7.1 ignores an index that is not positive"
        ));
    }
    // What the wide form adds, where it makes the row unservable.
    let flag = |name: &str| opt(name).is_some_and(|v| v != "0" && !v.is_empty());
    let why = if flag("grouped_gemm") {
        Some("grouped GEMMs")
    } else if ["scaleA", "scaleB", "scaleC", "scaleD", "amaxD"]
        .iter()
        .any(|s| flag(s))
    {
        Some("scaled GEMMs (scale or amax pointers)")
    } else if opt("activation_type").is_some_and(|v| v != "none") {
        Some("activation epilogues")
    } else if flag("swizzle_a") || flag("swizzle_b") {
        Some("swizzled (pre-shuffled) matrices")
    } else {
        [a, b, c, d].into_iter().find_map(ltf::unservable_type)
    };
    if let Some(why) = why {
        out.unservable(format!("hipBLASLt tuning rows for {why}"));
        return Ok(());
    }
    let mut key = ltf::packed_key([ta, tb], [a, b, c, d], compute, m, nn, k, batch)?;
    // The wide form's leading dimensions and strides: the problem as it was tuned.
    let read = |names: [&str; 4], fields: [&mut i64; 4]| {
        for (name, field) in names.into_iter().zip(fields) {
            if let Some(v) = opt(name).and_then(super::int) {
                *field = v;
            }
        }
    };
    let lds = [&mut key.lda, &mut key.ldb, &mut key.ldc, &mut key.ldd];
    read(["lda", "ldb", "ldc", "ldd"], lds);
    if opt("ldd").is_none() {
        key.ldd = key.ldc;
    }
    if batch > 1 {
        let strides = [
            &mut key.stride_a,
            &mut key.stride_b,
            &mut key.stride_c,
            &mut key.stride_d,
        ];
        read(["stride_a", "stride_b", "stride_c", "stride_d"], strides);
    }
    if flag("bias_vector") {
        key.epilogue = lt::EPILOGUE_BIAS;
        key.bias_type = match opt("bias_type") {
            Some(v) => ltf::hip_type(v)
                .ok_or_else(|| format!("bias_type '{v}' is not a hipBLASLt type name"))?,
            None => d,
        };
    }
    key.check()?;
    out.add(LtEntry {
        key,
        index: Some(index),
        calls: 0,
        line: n,
        device: None,
        counted: false,
    });
    Ok(())
}

/// Why a profile row has no override form, or `None` when it has one. The override is
/// keyed without leading dimensions, strides or epilogue: a row for anything but the plain
/// epilogue would be applied to calls it was not tuned for.
pub fn inexpressible(key: &LtKey) -> Option<String> {
    if key.epilogue != lt::EPILOGUE_DEFAULT {
        return Some("an epilogue: the override file has no epilogue column, so hipBLASLt would use the row for the plain GEMM too".into());
    }
    if key.c_type != key.d_type {
        return Some("C and D of different types: the override has one c_type".into());
    }
    if key.pointer_mode != lt::POINTER_MODE_HOST || key.sm_count != 0 {
        return Some("a device pointer mode or SM count target".into());
    }
    for t in [key.a_type, key.b_type, key.c_type] {
        if ltf::hip_type_name(t).is_none() {
            return Some(format!("type {t} has no hipBLASLt name"));
        }
    }
    if ltf::hip_compute_name(key.compute).is_none() {
        return Some(format!(
            "compute type {} has no hipblaslt-bench name",
            key.compute
        ));
    }
    None
}

/// One override row (its header line and value line), or why the key has none.
pub fn row_lines(key: &LtKey, index: i32) -> Result<String, String> {
    if let Some(why) = inexpressible(key) {
        return Err(why);
    }
    if index <= 0 {
        return Err(format!(
            "index {index}: hipBLASLt 7.1 ignores an index that is not positive"
        ));
    }
    let name = |t| ltf::hip_type_name(t).unwrap_or("?");
    Ok(format!(
        "{}\n{},{},{},{},{},{},{},{},{},{},{index}\n",
        COLUMNS.join(","),
        key.trans_a.letter(),
        key.trans_b.letter(),
        key.batch,
        key.m,
        key.n,
        key.k,
        name(key.a_type),
        name(key.b_type),
        name(key.c_type),
        ltf::hip_compute_name(key.compute).unwrap_or("?"),
    ))
}

/// An override file: the `Git Version:` line of the build the rows were tuned on, then
/// each row. `\n` line ends (hipBLASLt compares the revision to the end of the line).
pub fn write(git_version: &str, rows: &[(LtKey, i32)]) -> Result<String, String> {
    if git_version.contains(['\n', '\r']) {
        return Err("a Git Version with a line break".into());
    }
    let mut out = format!("{GIT_VERSION}{git_version}\n");
    for (key, index) in rows {
        out.push_str(&row_lines(key, *index)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testutil::never_panics;

    use crate::cublaslt::bf16_linear as linear;

    #[test]
    fn the_eleven_column_form_and_its_header() {
        let text = "Git Version: cd957402\n\
            transA,transB,batch_count,m,n,k,a_type,b_type,c_type,compute_type,solution_index\n\
            T,N,1,4096,512,2560,bf16_r,bf16_r,bf16_r,f32_r,12345\n\
            transA,transB,batch_count,m,n,k,a_type,b_type,c_type,compute_type,solution_index\n\
            N,N,1,64,64,64,f16_r,f16_r,f16_r,c_f32_r,7\n";
        let p = parse(text);
        assert_eq!(p.git_version.as_deref(), Some("cd957402"));
        assert!(p.skipped.is_empty(), "{:?}", p.skipped);
        assert_eq!(p.entries.len(), 2);
        assert_eq!(p.entries[0].key, linear(4096, 512, 2560));
        assert_eq!(p.entries[0].index, Some(12345));
        assert_eq!(p.entries[0].line, 3);
        let mut nn = LtKey::linear(lt::R_16F, 64, 64, 64);
        nn.trans_a = Trans::N;
        nn.lda = 64;
        assert_eq!(p.entries[1].key, nn);
    }

    /// hipblaslt-bench's wide lines, as its documentation shows them (leading spaces, the
    /// old `soulution_index` spelling), read by name; a row without a header takes the
    /// eleven columns in order.
    #[test]
    fn the_benchs_wide_lines_read_by_column_name() {
        let text = "    transA,transB,grouped_gemm,batch_count,m,n,k,alpha,lda,stride_a,beta,ldb,stride_b,ldc,stride_c,ldd,stride_d,a_type,b_type,c_type,d_type,compute_type,scaleA,scaleB,scaleC,scaleD,amaxD,activation_type,bias_vector,bias_type,rotating_buffer,hipblaslt-Gflops,hipblaslt-GB/s,us,soulution_index\n    \
            N,N,0,1,1024,512,1024,1,1024,1048576,1,1024,524288,1024,524288,1024,524288,f16_r,f16_r,f16_r,f16_r,f32_r,0,0,0,0,0,none,0,f32_r,512,66613.8,363.509,16.1189,56537\n    \
            N,N,0,1,64,64,1024,1.1,64,65536,0.9,1024,65536,64,4096,64,4096,f32_r,f32_r,f32_r,f32_r,f32_r,0,0,0,0,0,gelu,0,f32_r,512,903.229,55.8608,9.28735,49257\n";
        assert!(is_tuning_file(text));
        let p = parse(text);
        assert_eq!(p.git_version, None);
        assert_eq!(p.entries.len(), 1, "{:?}", p);
        let e = &p.entries[0];
        assert_eq!(
            (e.key.m, e.key.n, e.key.k, e.index),
            (1024, 512, 1024, Some(56537))
        );
        assert_eq!(e.key.trans_a, Trans::N);
        assert_eq!(
            p.unservable,
            vec![(
                "hipBLASLt tuning rows for activation epilogues".to_string(),
                1
            )]
        );
        let bare = parse("T,N,1,4096,512,2560,bf16_r,bf16_r,bf16_r,f32_r,99\n");
        assert_eq!(bare.entries[0].key, linear(4096, 512, 2560));
    }

    #[test]
    fn what_hipblaslt_would_not_take_is_said() {
        let h = COLUMNS.join(",");
        let text = format!(
            "{h}\nT,N,1,64,64,64,bf16_r,bf16_r,bf16_r,f32_r,0\n\
             T,X,1,64,64,64,bf16_r,bf16_r,bf16_r,f32_r,5\n\
             T,N,1,64,64,64,bf16,bf16_r,bf16_r,f32_r,5\n\
             T,N,1,64,64,64,i8_r,i8_r,i32_r,i32_r,5\n\
             T,N,1,64,64\n\
             Git Version: late\n\
             no comma here\n"
        );
        let p = parse(&text);
        assert!(p.entries.is_empty());
        let reasons: Vec<&str> = p.skipped.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(reasons.len(), 6, "{reasons:?}");
        assert!(reasons[0].contains("not positive"));
        assert!(reasons[1].contains("transB 'X'"));
        assert!(reasons[2].contains("a_type 'bf16'"));
        assert!(reasons[3].contains("5 fields"));
        assert!(reasons[4].contains("only the first"));
        assert!(reasons[5].contains("no comma"));
        assert_eq!(p.unservable_rows(), 1);
    }

    #[test]
    fn written_files_read_back_with_their_header() {
        let rows = vec![(linear(4096, 512, 2560), 12345), (linear(128, 1, 4096), 3)];
        let text = write("", &rows).unwrap();
        assert!(text.starts_with("Git Version: \n"), "{text}");
        let p = parse(&text);
        assert_eq!(p.git_version.as_deref(), Some(""));
        let back: Vec<(LtKey, i32)> = p
            .entries
            .iter()
            .map(|e| (e.key, e.index.unwrap()))
            .collect();
        assert_eq!(back, rows);
        // A bias epilogue, a zero index and a line break have no form.
        let mut bias = linear(64, 8, 64);
        bias.epilogue = lt::EPILOGUE_BIAS;
        bias.bias_type = lt::R_16BF;
        assert!(write("x", &[(bias, 3)]).unwrap_err().contains("epilogue"));
        assert!(write("x", &[(linear(64, 8, 64), 0)]).is_err());
        assert!(write("a\rb", &rows).is_err());
    }

    /// A whole tuning file from the field (tests/fixtures/hipblaslt/SOURCE.md: 13 bf16 rows
    /// from an MI325X, each the bench's 35 wide fields plus `gcnArchName,CUs`, indented, no
    /// header line): every row read by position, as hipBLASLt's own reader takes them.
    #[test]
    fn a_tuning_file_from_the_field_reads_by_position() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hipblaslt/axlearn-mi325x-70b.txt");
        let text = std::fs::read_to_string(p).unwrap();
        assert!(is_tuning_file(&text));
        let parsed = parse(&text);
        assert_eq!(parsed.git_version.as_deref(), Some("47700734"));
        assert!(parsed.skipped.is_empty(), "{:?}", parsed.skipped);
        assert!(parsed.unservable.is_empty(), "{:?}", parsed.unservable);
        // 13 rows, 12 problems: two rows differ only in beta (0 and 1), with one solution.
        assert_eq!(parsed.entries.len(), 12);
        // Its first row: N,N, batch 1, m 10240, n 16384, k 8192, bf16 in and out, f32
        // compute, lda 10240, ldb 8192, ldc 10240, solution 125883.
        let first = &parsed.entries[0];
        assert_eq!(first.index, Some(125883));
        let k = first.key;
        assert_eq!((k.m, k.n, k.k, k.batch), (10240, 16384, 8192, 1));
        assert_eq!((k.lda, k.ldb, k.ldc), (10240, 8192, 10240));
        assert_eq!([k.a_type, k.b_type, k.c_type, k.d_type], [lt::R_16BF; 4]);
        // A header-less row of another width keeps the eleven columns in order.
        let eleven = parse("T,N,1,4096,512,2560,bf16_r,bf16_r,bf16_r,f32_r,7\n");
        assert_eq!(eleven.entries[0].index, Some(7));
    }

    /// The lines hipBLASLt's documentation shows the bench storing into its tuning file
    /// (tests/fixtures/hipblaslt/SOURCE.md): read by column name, the bench's spelling of
    /// the index column included.
    #[test]
    fn the_documented_tuning_lines() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hipblaslt/offline-tuning-doc.txt");
        let text = std::fs::read_to_string(p).unwrap();
        assert_eq!(
            crate::formats::detect(&text),
            crate::formats::Format::HipblasltTuning
        );
        let parsed = parse(&text);
        assert!(parsed.skipped.is_empty(), "{:?}", parsed.skipped);
        let got: Vec<(i64, i64, i64, lt::CudaDataType, Option<i32>)> = parsed
            .entries
            .iter()
            .map(|e| (e.key.m, e.key.n, e.key.k, e.key.a_type, e.index))
            .collect();
        assert_eq!(
            got,
            vec![
                (64, 64, 1024, lt::R_32F, Some(49257)),
                (1024, 512, 1024, lt::R_16F, Some(56537))
            ]
        );
        assert_eq!(parsed.git_version, None);
    }

    #[test]
    fn gemm_tune_headers_are_not_tuning_files() {
        assert!(!is_tuning_file(crate::formats::gemm_tune::HEADER));
        assert!(is_tuning_file("Git Version: abc\n"));
        assert!(is_tuning_file("Git Version:\n"));
        assert!(!is_tuning_file(""));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let seed = write("cd957402", &[(linear(4096, 512, 2560), 12345)]).unwrap();
        never_panics(0x5eed_cafe, None, &seed, |t| {
            let _ = parse(t);
        });
    }
}
