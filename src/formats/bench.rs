//! rocBLAS bench logs (`ROCBLAS_LAYER=2`) and `rocblas-bench` command lines.
//!
//! With bench logging on, rocBLAS writes one line per call that `rocblas-bench` replays
//! (to `ROCBLAS_LOG_BENCH_PATH`, else `ROCBLAS_LOG_PATH`, else stderr). The GEMM lines, in
//! the order rocBLAS writes them (`library/src/blas_ex/rocblas_gemm*_imp.hpp`,
//! `library/src/blas3/rocblas_gemm*_imp.hpp`):
//!
//! ```text
//! ./rocblas-bench -f gemm_ex --transposeA T --transposeB N -m 4096 -n 512 -k 4096 --alpha 1
//!     --a_type f16_r --lda 4096 --b_type f16_r --ldb 4096 --beta 0 --c_type f16_r --ldc 4096
//!     --d_type f16_r --ldd 4096 --compute_type f32_r --algo 0 --solution_index 0 --flags 0
//! ./rocblas-bench -f gemm_strided_batched_ex ... --lda L --stride_a S ... --batch_count B ...
//! ./rocblas-bench -f gemm_batched_ex ... --ldd L --batch_count B --compute_type ...
//! ./rocblas-bench -f gemm -r f16_r --transposeA N --transposeB N -m .. -n .. -k .. --alpha 1
//!     --lda .. --ldb .. --beta 0 --ldc ..                      (rocblas_hgemm; f32_r: sgemm)
//! ./rocblas-bench -f gemm_strided_batched -r f32_r ... --stride_c S --batch_count B
//! ```
//!
//! (all on one line). rocBLAS 5.5-5.7 write `--ldc` without its value in `gemm_batched_ex`
//! lines (`... --c_type f16_r --ldc --d_type f16_r --ldd 8 ...`); such a line is read with
//! ldc = ldd. The `_64` API adds `--api 1` after the program name; a handle that
//! forbids atomics appends `--atomics_not_allowed`. Neither changes the problem. Each line
//! is one call, so a problem's call count is the number of its lines. Lines that do not run
//! `rocblas-bench`, and other functions, are skipped with the reason; so are typed GEMMs the
//! interposer does not wrap (`-f gemm -r f64_r` is `rocblas_dgemm`).

use super::{datatype, flags_from_text, int, int_field, trans_field, Fields, Parsed, ParsedShape};
use crate::abi;
use crate::key::{Batching, ProblemKey, Types};

/// True when the line runs `rocblas-bench` with a function (`... rocblas-bench ... -f X`).
pub fn is_command(line: &str) -> bool {
    line.find("rocblas-bench")
        .is_some_and(|at| line[at..].split_whitespace().any(|t| t == "-f"))
}

/// The options of one command line: `(name, value)`; switches have no value. A value is the
/// next token unless that token starts with `-` and is not a number.
fn options(args: &str) -> Vec<(&str, Option<&str>)> {
    let toks: Vec<&str> = args.split_whitespace().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i];
        if t.starts_with('#') {
            break; // a shell comment ends the command
        }
        if t.starts_with('-') && t.len() > 1 && int(t).is_none() {
            let value = toks
                .get(i + 1)
                .copied()
                .filter(|v| !v.starts_with('#') && (!v.starts_with('-') || int(v).is_some()));
            out.push((t, value));
            i += if value.is_some() { 2 } else { 1 };
        } else {
            i += 1; // a stray token
        }
    }
    out
}

/// Reads a bench log (or any text with `rocblas-bench` lines). Never panics.
pub fn parse(text: &str) -> Parsed {
    let mut out = Parsed::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let Some(at) = t.find("rocblas-bench") else {
            out.skip(n, "not a rocblas-bench line");
            continue;
        };
        let args = &t[at + "rocblas-bench".len()..];
        match parse_command(args) {
            Ok((key, solution)) => out.add(ParsedShape {
                key,
                calls: 1,
                line: n,
                solution,
            }),
            Err(why) => out.skip(n, why),
        }
    }
    out
}

/// One command's problem and the solution it asks for (`--algo 1`), if any.
fn parse_command(args: &str) -> Result<(ProblemKey, Option<i32>), String> {
    let opts = options(args);
    let get = |names: &[&str]| -> Option<&str> {
        opts.iter()
            .rev()
            .find(|(n, _)| names.contains(n))
            .and_then(|(_, v)| *v)
    };
    let func = get(&["-f", "--function"]).ok_or("no -f function")?;
    let num = |names: &[&str], what: &str| int_field(get(names), what);
    let letter = |names: &[&str], what: &str| trans_field(get(names), what);
    let mut f = Fields {
        ta: letter(&["--transposeA"], "--transposeA")?,
        tb: letter(&["--transposeB"], "--transposeB")?,
        m: num(&["-m", "--sizem"], "-m")?,
        n: num(&["-n", "--sizen"], "-n")?,
        k: num(&["-k", "--sizek"], "-k")?,
        lda: num(&["--lda"], "--lda")?,
        ldb: num(&["--ldb"], "--ldb")?,
        ldc: num(&["--ldc"], "--ldc")?,
        ldd: num(&["--ldd"], "--ldd")?,
        strides: [
            num(&["--stride_a"], "--stride_a")?,
            num(&["--stride_b"], "--stride_b")?,
            num(&["--stride_c"], "--stride_c")?,
            num(&["--stride_d"], "--stride_d")?,
        ],
        batch: num(&["--batch_count"], "--batch_count")?,
        flags: 0,
    };
    if let Some(v) = get(&["--flags"]) {
        f.flags = flags_from_text(v)?;
    }
    // rocBLAS 5.5-5.7 write `--ldc` with no value in gemm_batched_ex lines (the argument
    // after it was left out of the log call). Those lines come from hipBLAS and PyTorch,
    // which pass d = c, so ldc is ldd.
    let ldc_without_value = opts
        .iter()
        .rev()
        .find(|(n, _)| *n == "--ldc")
        .is_some_and(|(_, v)| v.is_none());
    if func == "gemm_batched_ex" && ldc_without_value && f.ldc.is_none() {
        f.ldc = f.ldd;
    }
    let precision = get(&["-r", "--precision"]);
    let typed = |r: Option<&str>| -> Result<Types, String> {
        match r {
            Some("f16_r" | "h") => Ok(Types::HGEMM),
            Some("f32_r" | "s") => Ok(Types::SGEMM),
            Some(other) => Err(format!(
                "-f {func} -r {other}: tunedblas intercepts only the f16 and f32 typed GEMMs (rocblas_hgemm, rocblas_sgemm)"
            )),
            None => Err(format!("-f {func} without -r precision")),
        }
    };
    let (types, batching) = match func {
        "gemm_ex" | "gemm_batched_ex" | "gemm_strided_batched_ex" => {
            let ty = |name: &str| -> Result<abi::Datatype, String> {
                match get(&[name]).or(precision) {
                    Some(v) => datatype(v).ok_or_else(|| format!("{name} '{v}' is not a rocBLAS datatype")),
                    None => Err(format!("no {name}")),
                }
            };
            let types = Types {
                a: ty("--a_type")?,
                b: ty("--b_type")?,
                c: ty("--c_type")?,
                d: ty("--d_type")?,
                compute: ty("--compute_type")?,
            };
            let batching = match func {
                "gemm_ex" => Batching::Single,
                "gemm_batched_ex" => Batching::PointerArray,
                _ => Batching::Strided,
            };
            (types, batching)
        }
        "gemm" => (typed(precision)?, Batching::Single),
        "gemm_strided_batched" => (typed(precision)?, Batching::Strided),
        "gemm_batched" => {
            return Err(
                "-f gemm_batched: typed pointer-array GEMMs (rocblas_hgemm_batched, ...) are not intercepted".into(),
            )
        }
        other => return Err(format!("-f {other} is not a GEMM tunedblas serves")),
    };
    if batching == Batching::Single {
        f.batch = Some(1);
    }
    let key = f.key(types, batching)?;
    let algo = num(&["--algo"], "--algo")?.unwrap_or(0);
    let solution = if algo == i64::from(abi::ALGO_SOLUTION_INDEX) {
        num(&["--solution_index"], "--solution_index")?
            .map(|v| i32::try_from(v).map_err(|_| format!("--solution_index {v} is not an int32")))
            .transpose()?
    } else {
        None
    };
    Ok((key, solution))
}

/// The rocblas-bench switch that gives D its own memory, ldd and type. Without it the
/// bench runs D in C's place with ldc and c_type: `--c_noalias_d` up to rocBLAS 3.x
/// (ROCm 5.7), `--outofplace` from 4.0 (ROCm 6.0) on; each version rejects the other's as an
/// unknown option (tests/conformance runs both real parsers). `None`: the version is
/// unknown, and the current form is used.
pub fn own_d_switch(major: Option<u32>) -> &'static str {
    match major {
        Some(m) if m <= 3 => "--c_noalias_d",
        _ => "--outofplace",
    }
}

/// The `rocblas-bench` command that runs `key` with `solution` (`None`: the library
/// heuristic, `--algo 0`), in the form rocBLAS's own bench log writes, plus
/// [`own_d_switch`] for the rocBLAS major version `major` when D is not laid out as C.
/// `None` when a data type has no rocBLAS name (rocblas-bench could not express it).
pub fn command(key: &ProblemKey, solution: Option<i32>, major: Option<u32>) -> Option<String> {
    let t = &key.types;
    let name = |d| abi::datatype_name(d);
    let (a, b, c, d, compute) = (
        name(t.a)?,
        name(t.b)?,
        name(t.c)?,
        name(t.d)?,
        name(t.compute)?,
    );
    let func = match key.batching {
        Batching::Single => "gemm_ex",
        Batching::Strided => "gemm_strided_batched_ex",
        Batching::PointerArray => "gemm_batched_ex",
    };
    let strided = key.batching == Batching::Strided;
    let st = |which: &str, v: i64| {
        if strided {
            format!(" --stride_{which} {v}")
        } else {
            String::new()
        }
    };
    let batch = if key.batching == Batching::Single {
        String::new()
    } else {
        format!(" --batch_count {}", key.batch)
    };
    let (algo, index) = match solution {
        Some(id) => (abi::ALGO_SOLUTION_INDEX, id),
        None => (abi::ALGO_STANDARD, 0),
    };
    // rocblas-bench runs D in C's place, with ldd = ldc and d_type = c_type, unless told D
    // is its own matrix: without the switch a row whose D differs from C would be measured
    // as another problem.
    let own_d = key.ldd != key.ldc || t.d != t.c || (strided && key.stride_d != key.stride_c);
    let noalias = if own_d {
        format!(" {}", own_d_switch(major))
    } else {
        String::new()
    };
    // Strided: batch_count after stride_d; pointer arrays: after ldd (as rocBLAS logs).
    Some(format!(
        "./rocblas-bench -f {func} --transposeA {} --transposeB {} -m {} -n {} -k {} --alpha 1 \
--a_type {a} --lda {}{} --b_type {b} --ldb {}{} --beta 0 --c_type {c} --ldc {}{} \
--d_type {d} --ldd {}{}{batch} --compute_type {compute} --algo {algo} --solution_index {index} --flags {}{noalias}",
        key.trans_a.letter(),
        key.trans_b.letter(),
        key.m,
        key.n,
        key.k,
        key.lda,
        st("a", key.stride_a),
        key.ldb,
        st("b", key.stride_b),
        key.ldc,
        st("c", key.stride_c),
        key.ldd,
        st("d", key.stride_d),
        key.flags,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testutil::{never_panics, Rng};
    use crate::key::Trans;

    use crate::key::half_linear as linear;

    /// Golden lines written from the fields rocBLAS logs (see the module docs).
    const LOG: &str = "\
./rocblas-bench -f gemm_ex --transposeA T --transposeB N -m 4096 -n 512 -k 2560 --alpha 1 --a_type f16_r --lda 2560 --b_type f16_r --ldb 2560 --beta 0 --c_type f16_r --ldc 4096 --d_type f16_r --ldd 4096 --compute_type f32_r --algo 0 --solution_index 0 --flags 0
./rocblas-bench -f gemm_ex --transposeA T --transposeB N -m 4096 -n 512 -k 2560 --alpha 1 --a_type f16_r --lda 2560 --b_type f16_r --ldb 2560 --beta 0 --c_type f16_r --ldc 4096 --d_type f16_r --ldd 4096 --compute_type f32_r --algo 0 --solution_index 0 --flags 0
rocBLAS info: some unrelated line
./rocblas-bench --api 1 -f gemm_ex --transposeA T --transposeB N -m 4096 -n 512 -k 2560 --alpha 1 --a_type f16_r --lda 2560 --b_type f16_r --ldb 2560 --beta 0 --c_type f16_r --ldc 4096 --d_type f16_r --ldd 4096 --compute_type f32_r --algo 1 --solution_index -1086326047 --flags 0 --atomics_not_allowed
./rocblas-bench -f gemm_strided_batched_ex --transposeA N --transposeB T -m 64 -n 32 -k 16 --alpha 1 --a_type bf16_r --lda 64 --stride_a 1024 --b_type bf16_r --ldb 32 --stride_b 512 --beta 0 --c_type bf16_r --ldc 64 --stride_c 2048 --d_type bf16_r --ldd 64 --stride_d 2048 --batch_count 8 --compute_type f32_r --algo 0 --solution_index 0 --flags 4
./rocblas-bench -f gemm_batched_ex --transposeA N --transposeB N -m 8 -n 8 -k 8 --alpha 1 --a_type f16_r --lda 8 --b_type f16_r --ldb 8 --beta 0 --c_type f16_r --ldc 8 --d_type f16_r --ldd 8 --batch_count 3 --compute_type f16_r --algo 0 --solution_index 0 --flags 0
./rocblas-bench -f gemm -r f16_r --transposeA N --transposeB N -m 128 -n 7 -k 64 --alpha 1 --lda 128 --ldb 64 --beta 0 --ldc 128
./rocblas-bench -f gemm_strided_batched -r f32_r --transposeA T --transposeB N -m 16 -n 16 -k 16 --alpha 1 --lda 16 --stride_a 256 --ldb 16 --stride_b 256 --beta 0 --ldc 16 --stride_c 256 --batch_count 2
./rocblas-bench -f gemm -r f64_r --transposeA N --transposeB N -m 8 -n 8 -k 8 --alpha 1 --lda 8 --ldb 8 --beta 0 --ldc 8
./rocblas-bench -f axpy -r f32_r -n 100 --alpha 1 --incx 1 --incy 1
./rocblas-bench -f gemm_ex --transposeA T --transposeB N -m 4096 -n 512 -k 2560 --alpha 1 --a_type f16_r --lda 100 --b_type f16_r --ldb 2560 --beta 0 --c_type f16_r --ldc 4096 --d_type f16_r --ldd 4096 --compute_type f32_r
";

    #[test]
    fn golden_bench_log() {
        let p = parse(LOG);
        assert_eq!(p.entries.len(), 5, "{:#?}", p);
        let first = &p.entries[0];
        assert_eq!(first.key, linear(4096, 512, 2560));
        assert_eq!(first.calls, 3, "two plain lines and the --api 1 line");
        assert_eq!(first.line, 1);
        assert_eq!(first.solution, Some(-1086326047), "from the --algo 1 line");

        let sb = &p.entries[1].key;
        assert_eq!(sb.batching, Batching::Strided);
        assert_eq!((sb.batch, sb.stride_a, sb.stride_d), (8, 1024, 2048));
        assert_eq!(sb.types.a, abi::DT_BF16_R);
        assert_eq!(sb.flags, abi::FLAG_FP16_ALT_IMPL);
        assert_eq!((sb.trans_a, sb.trans_b), (Trans::N, Trans::T));

        let bx = &p.entries[2].key;
        assert_eq!((bx.batching, bx.batch), (Batching::PointerArray, 3));
        assert_eq!(bx.types, Types::HGEMM);

        let h = &p.entries[3].key;
        assert_eq!(
            (h.types, h.m, h.n, h.k, h.ldd),
            (Types::HGEMM, 128, 7, 64, 128)
        );
        let s = &p.entries[4].key;
        assert_eq!(
            (s.types, s.batching, s.batch),
            (Types::SGEMM, Batching::Strided, 2)
        );

        let reasons: Vec<(usize, &str)> = p
            .skipped
            .iter()
            .map(|s| (s.line, s.reason.as_str()))
            .collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert_eq!(reasons[0].0, 3);
        assert!(reasons[1].1.contains("rocblas_hgemm"), "{reasons:?}");
        assert!(reasons[2].1.contains("-f axpy"), "{reasons:?}");
        assert!(reasons[3].1.contains("lda=100"), "{reasons:?}");
    }

    #[test]
    fn written_commands_read_back_to_the_same_problem() {
        let mut rng = Rng(0x5eed_1234);
        let kinds = [
            Types::uniform(abi::DT_F16_R, abi::DT_F32_R),
            Types::HGEMM,
            Types::SGEMM,
            Types::uniform(abi::DT_BF16_R, abi::DT_F32_R),
            Types {
                c: abi::DT_F32_R,
                d: abi::DT_F32_R,
                ..Types::uniform(abi::DT_F16_R, abi::DT_F32_R)
            },
        ];
        for _ in 0..300 {
            let ta = rng.pick(&[Trans::N, Trans::T, Trans::C]);
            let tb = rng.pick(&[Trans::N, Trans::T]);
            let [m, n, k] = rng.sizes(5000);
            let [lda, ldb, ldc] = ProblemKey::packed_lds(ta, tb, m, n, k);
            let pad = rng.below(3) as i64;
            let key = ProblemKey::single(
                ta,
                tb,
                rng.pick(&kinds),
                m,
                n,
                k,
                lda + pad,
                ldb,
                ldc,
                ldc + pad,
                rng.pick(&[0, abi::FLAG_FP16_ALT_IMPL, abi::FLAG_STOCHASTIC_ROUNDING]),
            );
            let key = match rng.below(3) {
                0 => key,
                1 => key.with_batch(Batching::PointerArray, 1 + rng.below(9) as i64, [0; 4]),
                _ => {
                    let mut s = key.packed_strides();
                    s[2] += rng.below(4) as i64;
                    key.with_batch(Batching::Strided, 1 + rng.below(9) as i64, s)
                }
            };
            for sol in [None, Some(-1086326047), Some(17)] {
                let line = command(&key, sol, Some(4)).unwrap();
                let p = parse(&line);
                assert!(p.skipped.is_empty(), "{line}: {:?}", p.skipped);
                assert_eq!(p.entries.len(), 1);
                assert_eq!(p.entries[0].key, key, "{line}");
                assert_eq!(p.entries[0].solution, sol, "{line}");
            }
        }
    }

    /// rocblas-bench sets ldd = ldc and d_type = c_type unless told otherwise: with
    /// `--c_noalias_d` up to rocBLAS 3.x, `--outofplace` from 4.0 (the conformance suite runs
    /// these lines through the real 5.5 and 6.4 parsers).
    #[test]
    fn a_problem_whose_d_is_not_c_asks_the_bench_for_its_own_d() {
        let plain = linear(64, 32, 16);
        let line = command(&plain, None, Some(2)).unwrap();
        assert!(
            !line.contains("--c_noalias_d") && !line.contains("--outofplace"),
            "{line}"
        );
        let mut padded = plain;
        padded.ldd = 80;
        let mut wider = plain;
        wider.types.d = abi::DT_F32_R;
        let mut strided = plain.with_batch(Batching::Strided, 2, plain.packed_strides());
        strided.stride_d += 64;
        for key in [padded, wider, strided] {
            for (major, switch) in [
                (Some(2), "--c_noalias_d"),
                (Some(3), "--c_noalias_d"),
                (Some(4), "--outofplace"),
                (Some(5), "--outofplace"),
                (None, "--outofplace"),
            ] {
                let line = command(&key, Some(3), major).unwrap();
                assert!(line.ends_with(&format!(" {switch}")), "{major:?}: {line}");
                let p = parse(&line);
                assert_eq!(p.entries.len(), 1, "{:?}", p.skipped);
                assert_eq!(p.entries[0].key, key);
                assert_eq!(p.entries[0].solution, Some(3));
            }
        }
    }

    #[test]
    fn a_type_without_a_rocblas_name_has_no_command() {
        let mut key = linear(8, 8, 8);
        key.types.a = 170;
        assert_eq!(command(&key, None, None), None);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        never_panics(0xdead_beef, Some("./rocblas-bench -f gemm_ex "), LOG, |t| {
            let _ = parse(t);
        });
    }
}
