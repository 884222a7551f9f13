//! The rocblas-gemm-tune CSV, which `ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH` reads.
//!
//! `rocblas-gemm-tune` (rocBLAS `clients/benchmarks/gemm_tune`) reads a profile log, times
//! every solution of each GEMM and prints the winners in two sections, each after a header:
//!
//! ```text
//! transA,transB,M,N,batch_count,K,alpha,beta,lda,ldb,ldc,input_type,output_type,compute_type,solution_index
//! transA,transB,M,N,batch_count,K,alpha,beta,lda,ldb,ldc,stride_a,stride_b,stride_c,input_type,output_type,compute_type,solution_index
//! ```
//!
//! The first section holds `gemm`/`gemm_ex` and the pointer-array `gemm_batched_ex`
//! problems, the second the strided-batched ones. Setting
//! `ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH` to such a file makes Tensile (`setOverridesFromFile`,
//! `UserDrivenTuningParser.cpp`) use the named solution for every problem that matches a row
//! exactly: transposes, input and output type, whether compute is wider than input (HPA),
//! m, n, k, batch, **beta's value**, lda, ldb, ldc and the strides. How it reads the file:
//! lines without a comma are ignored (so comment lines must have none), lines containing
//! `transA` are headers, a row must have 15 or 18 fields, and only `solution_index > 0`
//! rows are kept; the index is the 1-based Tensile solution index. Nothing checks that the
//! file was made for the loaded library build.
//!
//! What the file cannot say: `ldd != ldc`, `c_type != d_type`, `a_type != b_type`, kernel
//! flags, `stride_d != stride_c`, solutions that are not Tensile's (rocBLAS 5.x's hipBLASLt,
//! source-kernel and gemv solutions), and the heuristic (`Default`).
//!
//! Solution ids: on rocBLAS 4.x an id from `rocblas_gemm_ex_get_solutions` is that 1-based
//! index itself. On rocBLAS 5.x Tensile solutions are reported as `-(index) - 10`
//! (`<= -11`), so the file's index is `-id - 10`.

use super::{datatype, int, trans, Fields, Parsed, ParsedShape};
use crate::abi;
use crate::key::{Batching, ProblemKey, Trans, Types};

/// The header of the first section.
pub const HEADER: &str = "transA,transB,M,N,batch_count,K,alpha,beta,lda,ldb,ldc,input_type,output_type,compute_type,solution_index";
/// The header of the strided-batched section.
pub const HEADER_STRIDED: &str = "transA,transB,M,N,batch_count,K,alpha,beta,lda,ldb,ldc,stride_a,stride_b,stride_c,input_type,output_type,compute_type,solution_index";

/// Reads a rocblas-gemm-tune CSV. Each entry's `solution` is the index as written (see
/// [`solution_id`] for the rocBLAS id). Never panics.
pub fn parse(text: &str) -> Parsed {
    let mut out = Parsed::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim();
        // Tensile's own rules: no comma, no row; a line naming transA is a header.
        if !t.contains(',') || t.contains("transA") {
            continue;
        }
        match row(t) {
            Ok((key, index)) => out.add(ParsedShape {
                key,
                calls: 0,
                line: n,
                solution: Some(index),
            }),
            Err(why) => out.skip(n, why),
        }
    }
    out
}

fn row(line: &str) -> Result<(ProblemKey, i32), String> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    let strided = match f.len() {
        15 => false,
        18 => true,
        other => {
            return Err(format!(
                "{other} fields; rocblas-gemm-tune rows have 15 or 18"
            ))
        }
    };
    let num = |i: usize, what: &str| -> Result<i64, String> {
        int(f[i]).ok_or_else(|| format!("{what} '{}' is not an integer", f[i]))
    };
    let letter = |i: usize, what: &str| -> Result<Trans, String> {
        trans(f[i]).ok_or_else(|| format!("{what} '{}' is not N, T or C", f[i]))
    };
    for (i, what) in [(6, "alpha"), (7, "beta")] {
        if f[i].parse::<f64>().is_err() {
            return Err(format!("{what} '{}' is not a number", f[i]));
        }
    }
    let types_at = if strided { 14 } else { 11 };
    let ty = |i: usize, what: &str| -> Result<abi::Datatype, String> {
        datatype(f[i]).ok_or_else(|| format!("{what} '{}' is not a rocBLAS datatype", f[i]))
    };
    let (input, output, compute) = (
        ty(types_at, "input_type")?,
        ty(types_at + 1, "output_type")?,
        ty(types_at + 2, "compute_type")?,
    );
    let index = num(types_at + 3, "solution_index")?;
    let index =
        i32::try_from(index).map_err(|_| format!("solution_index {index} is not an int32"))?;
    let batch = num(4, "batch_count")?;
    let fields = Fields {
        ta: Some(letter(0, "transA")?),
        tb: Some(letter(1, "transB")?),
        m: Some(num(2, "M")?),
        n: Some(num(3, "N")?),
        k: Some(num(5, "K")?),
        lda: Some(num(8, "lda")?),
        ldb: Some(num(9, "ldb")?),
        ldc: Some(num(10, "ldc")?),
        ldd: None,
        strides: if strided {
            let c = num(13, "stride_c")?;
            [
                Some(num(11, "stride_a")?),
                Some(num(12, "stride_b")?),
                Some(c),
                Some(c),
            ]
        } else {
            [None; 4]
        },
        batch: Some(batch),
        flags: 0,
    };
    let types = Types {
        a: input,
        b: input,
        c: output,
        d: output,
        compute,
    };
    let batching = match (strided, batch) {
        (true, _) => Batching::Strided,
        (false, 1) => Batching::Single,
        (false, _) => Batching::PointerArray,
    };
    Ok((fields.key(types, batching)?, index))
}

/// The Tensile index the override file needs for rocBLAS solution `id` of a build whose
/// major version is `major`, or why there is none.
pub fn override_index(id: i32, major: Option<u32>) -> Result<i32, String> {
    let v5 = match major {
        Some(m) => m >= 5,
        // Unknown version: positive ids are 4.x-style indices, <= -11 are 5.x Tensile ids.
        None => id <= -11,
    };
    if v5 {
        if id <= -11 {
            // -(index) - 10 = id, so index = -id - 10; i64 avoids overflow at i32::MIN.
            let index = -i64::from(id) - 10;
            return i32::try_from(index).map_err(|_| format!("solution {id} is out of range"));
        }
        return Err(match id {
            1.. => format!("solution {id} is a hipBLASLt solution; the override file names only Tensile solutions"),
            -2 => "solution -2 is rocBLAS's source kernel, not a Tensile solution".into(),
            -9 => "solution -9 is the gemv path, not a Tensile solution".into(),
            _ => format!("solution {id} is not a Tensile solution"),
        });
    }
    if id > 0 {
        Ok(id)
    } else {
        Err(format!(
            "solution {id} is not a Tensile index (rocBLAS 4.x indices are positive)"
        ))
    }
}

/// Inverse of [`override_index`]: the rocBLAS solution id a file index stands for.
pub fn solution_id(index: i32, major: Option<u32>) -> Option<i32> {
    if index <= 0 {
        return None;
    }
    if major.is_some_and(|m| m >= 5) {
        i32::try_from(-i64::from(index) - 10).ok()
    } else {
        Some(index)
    }
}

/// Tensile's type names: the ones `convertToDataType` accepts.
fn tensile_type(t: abi::Datatype) -> Option<&'static str> {
    Some(match t {
        abi::DT_F16_R => "f16_r",
        abi::DT_F32_R => "f32_r",
        abi::DT_F64_R => "f64_r",
        abi::DT_BF16_R => "bf16_r",
        abi::DT_F32_C => "f32_c",
        abi::DT_F64_C => "f64_c",
        abi::DT_I8_R => "i8_r",
        abi::DT_I32_R => "i32_r",
        _ => return None,
    })
}

/// Why a key has no row in an override file, if it has none.
pub fn inexpressible(key: &ProblemKey) -> Option<String> {
    let t = &key.types;
    if t.a != t.b {
        return Some("a_type differs from b_type".into());
    }
    if t.c != t.d {
        return Some("c_type differs from d_type".into());
    }
    if key.ldd != key.ldc {
        return Some("ldd differs from ldc".into());
    }
    if key.flags != 0 {
        return Some(format!("kernel flags {:#x}", key.flags));
    }
    if key.batching == Batching::Strided && key.stride_d != key.stride_c {
        return Some("stride_d differs from stride_c".into());
    }
    if [key.trans_a, key.trans_b].contains(&Trans::C) {
        return Some("a conjugate transpose".into());
    }
    for d in [t.a, t.c, t.compute] {
        if tensile_type(d).is_none() {
            return Some(format!("type {d} has no Tensile name"));
        }
    }
    None
}

/// One row of an override file for `key` with Tensile index `index` and `beta` (Tensile
/// matches beta exactly). `None` when the key has no such row ([`inexpressible`]).
pub fn row_text(key: &ProblemKey, index: i32, beta: f64) -> Option<String> {
    if inexpressible(key).is_some() {
        return None;
    }
    let t = &key.types;
    let common = format!(
        "{},{},{},{},{},{},1,{},{},{},{}",
        key.trans_a.letter(),
        key.trans_b.letter(),
        key.m,
        key.n,
        key.batch,
        key.k,
        beta,
        key.lda,
        key.ldb,
        key.ldc
    );
    let types = format!(
        "{},{},{}",
        tensile_type(t.a)?,
        tensile_type(t.c)?,
        tensile_type(t.compute)?
    );
    Some(match key.batching {
        Batching::Strided => format!(
            "{common},{},{},{},{types},{index}",
            key.stride_a, key.stride_b, key.stride_c
        ),
        _ => format!("{common},{types},{index}"),
    })
}

/// A whole override file: `comments` first (their commas become `;`, since Tensile would
/// read a line with a comma as a row), then the two sections with their headers.
pub fn file_text(comments: &[String], rows: &[(ProblemKey, i32)], betas: &[f64]) -> String {
    let mut out = String::new();
    for c in comments {
        out.push_str("# ");
        out.push_str(&c.replace(',', ";").replace(['\n', '\r'], " "));
        out.push('\n');
    }
    for (strided, header) in [(false, HEADER), (true, HEADER_STRIDED)] {
        let lines: Vec<String> = rows
            .iter()
            .filter(|(k, _)| (k.batching == Batching::Strided) == strided)
            .flat_map(|(k, i)| betas.iter().filter_map(move |&b| row_text(k, *i, b)))
            .collect();
        if lines.is_empty() {
            continue;
        }
        out.push_str(header);
        out.push('\n');
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testutil::{never_panics, Rng};

    /// Golden rows written from the documented columns (two sections, as the tool prints).
    const CSV: &str = "\
transA,transB,M,N,batch_count,K,alpha,beta,lda,ldb,ldc,input_type,output_type,compute_type,solution_index
T,N,4096,512,1,2560,1,0,2560,2560,4096,f16_r,f16_r,f32_r,2471
N,N,8,8,3,8,1,0,8,8,8,f16_r,f16_r,f16_r,12
T,N,16,16,1,16,1,0,16,16,16,f16_r,f16_r,f32_r
T,N,16,16,1,16,1,0,8,16,16,f16_r,f16_r,f32_r,3

transA,transB,M,N,batch_count,K,alpha,beta,lda,ldb,ldc,stride_a,stride_b,stride_c,input_type,output_type,compute_type,solution_index
N,T,64,32,8,16,1,0,64,32,64,1024,512,2048,bf16_r,bf16_r,f32_r,77
";

    #[test]
    fn golden_gemm_tune_csv() {
        let p = parse(CSV);
        assert_eq!(p.entries.len(), 3, "{:#?}", p);
        let e = &p.entries[0];
        assert_eq!(e.key, ProblemKey::linear(Types::HALF, 4096, 512, 2560));
        assert_eq!(e.solution, Some(2471));
        let b = &p.entries[1].key;
        assert_eq!(
            (b.batching, b.batch, b.types),
            (Batching::PointerArray, 3, Types::HGEMM)
        );
        let s = &p.entries[2].key;
        assert_eq!(
            (s.batching, s.batch, s.stride_b),
            (Batching::Strided, 8, 512)
        );
        assert_eq!(s.stride_d, 2048, "stride_d is stride_c");
        assert_eq!(p.skipped.len(), 2, "{:?}", p.skipped);
        assert_eq!(p.skipped[0].line, 4);
        assert!(p.skipped[0].reason.contains("14 fields"));
        assert!(p.skipped[1].reason.contains("lda=8"), "{:?}", p.skipped);
    }

    #[test]
    fn index_mapping_by_rocblas_version() {
        assert_eq!(override_index(2471, Some(4)), Ok(2471));
        assert!(override_index(-1, Some(4)).is_err());
        assert_eq!(override_index(-11, Some(5)), Ok(1));
        assert_eq!(override_index(-1086326047, Some(5)), Ok(1086326037));
        assert!(override_index(5, Some(5))
            .unwrap_err()
            .contains("hipBLASLt"));
        assert!(override_index(-9, Some(5)).unwrap_err().contains("gemv"));
        assert!(override_index(-2, None).is_err());
        assert_eq!(override_index(i32::MIN, Some(5)).ok(), Some(2147483638));
        for (id, major) in [
            (7, Some(4)),
            (-11, Some(5)),
            (-1086326047, Some(5)),
            (3, None),
        ] {
            let idx = override_index(id, major).unwrap();
            assert_eq!(solution_id(idx, major.or(Some(4))), Some(id));
        }
    }

    #[test]
    fn written_files_read_back_and_comments_are_not_rows() {
        let mut rng = Rng(77);
        let mut rows = Vec::new();
        for i in 0..100 {
            let ta = rng.pick(&[Trans::N, Trans::T]);
            let tb = rng.pick(&[Trans::N, Trans::T]);
            let [m, n, k] = rng.sizes(4000);
            let [lda, ldb, ldc] = ProblemKey::packed_lds(ta, tb, m, n, k);
            let types = rng.pick(&[
                Types::uniform(abi::DT_F16_R, abi::DT_F32_R),
                Types::HGEMM,
                Types::SGEMM,
                Types::uniform(abi::DT_BF16_R, abi::DT_F32_R),
            ]);
            let key = ProblemKey::single(ta, tb, types, m, n, k, lda, ldb + 1, ldc, ldc, 0);
            let key = match i % 3 {
                0 => key,
                1 => key.with_batch(Batching::PointerArray, 2 + rng.below(5) as i64, [0; 4]),
                _ => {
                    let s = key.packed_strides();
                    key.with_batch(
                        Batching::Strided,
                        2 + rng.below(5) as i64,
                        [s[0], s[1], s[2], s[2]],
                    )
                }
            };
            rows.push((key, 1 + i));
        }
        let text = file_text(
            &["valid for build abc, nothing else".to_string()],
            &rows,
            &[0.0],
        );
        assert!(text
            .lines()
            .next()
            .unwrap()
            .starts_with("# valid for build abc;"));
        let p = parse(&text);
        assert!(p.skipped.is_empty(), "{:?}", p.skipped);
        let mut got: Vec<(ProblemKey, i32)> = p
            .entries
            .iter()
            .map(|e| (e.key, e.solution.unwrap()))
            .collect();
        let mut want = rows.clone();
        got.sort_by_key(|(k, _)| *k);
        want.sort_by_key(|(k, _)| *k);
        assert_eq!(got, want);
        // Two betas: two rows per key, one problem each after reading.
        let two = file_text(&[], &rows[..1], &[0.0, 1.0]);
        assert_eq!(two.lines().count(), 3);
    }

    #[test]
    fn what_the_file_cannot_say() {
        let base = ProblemKey::linear(Types::HALF, 8, 8, 8);
        let mut k = base;
        k.ldd = 16;
        assert!(inexpressible(&k).unwrap().contains("ldd"));
        let mut k = base;
        k.flags = abi::FLAG_FP16_ALT_IMPL;
        assert!(inexpressible(&k).unwrap().contains("flags"));
        let mut k = base;
        k.types.d = abi::DT_F32_R;
        assert!(inexpressible(&k).is_some());
        assert!(row_text(&k, 1, 0.0).is_none());
        assert!(inexpressible(&base).is_none());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        never_panics(0xabcdef, None, CSV, |t| {
            let _ = parse(t);
        });
    }
}
