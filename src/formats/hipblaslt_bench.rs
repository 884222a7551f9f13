//! `hipblaslt-bench` command lines: what hipBLASLt logs for every matmul with
//! `HIPBLASLT_LOG_MASK=32` (one line per call, into `HIPBLASLT_LOG_FILE` or stderr), and
//! what AMD's bench runs.
//!
//! ```text
//! hipblaslt-bench --api_method c -m 4096 -n 512 -k 2560 --lda 2560 --ldb 2560 --ldc 4096 --ldd 4096
//!   --stride_a 0 --stride_b 0 --stride_c 0 --stride_d 0 --alpha 1.000000 --beta 0.000000
//!   --transA T --transB N --batch_count 1 --scaleA 0 --scaleB 0 --a_type bf16_r --b_type bf16_r
//!   --c_type bf16_r --d_type bf16_r --scale_type f32_r --bias_type f32_r --compute_type f32_r
//! ```
//!
//! The problem is `-m/-n/-k` (`--sizem`...), the four leading dimensions and strides, the
//! transposes, `--batch_count`, the four types (`-r/--precision` sets them all) and
//! `--compute_type`; `--bias_vector` adds a bias epilogue of `--bias_type`. Options that
//! only change how the bench runs (`--iters`, `--rotating`, ...) are read past. The bench's
//! own defaults fill what a line leaves out (sizes 128, `N`, `f16_r`, compute `f32_r`,
//! packed leading dimensions). `--algo_method index --solution_index <i>` names an
//! algorithm index. Lines for grouped GEMMs, scaled or 8-bit GEMMs, activation epilogues,
//! swizzled matrices or an E matrix are counted as unservable.
//!
//! [`command`] writes a line for a profile row, and the same problem with the library's
//! heuristic, so a row can be checked with AMD's own tool.

use super::lt::{self as ltf, LtEntry, LtParsed};
use crate::cublaslt::{self as lt, LtKey};
use crate::key::Trans;

/// The bench's name, as log lines begin with it.
pub const BENCH: &str = "hipblaslt-bench";

/// Options that take no value.
const SWITCHES: &[&str] = &[
    "--any_stride",
    "--swizzleA",
    "--swizzleB",
    "--HMM",
    "--verify",
    "-v",
    "--bias_vector",
    "--scaleAlpha_vector",
    "--amaxScaleA",
    "--amaxScaleB",
    "--amaxD",
    "--use_e",
    "--gradient",
    "--grouped_gemm",
    "--use_user_args",
    "--c_equal_d",
    "--log_function_name",
    "--print_kernel_info",
    "--use_gpu_timer",
    "--flush",
    "--help",
    "-h",
];

/// Whether a line is a `hipblaslt-bench` command (a log line may carry a prefix).
pub fn is_command(line: &str) -> bool {
    bench_args(line).is_some()
}

/// The words after the bench's name, where the line holds a bench command: the name alone
/// or at the end of a path or a log prefix, then options.
fn bench_args(line: &str) -> Option<std::str::SplitWhitespace<'_>> {
    let at = line.find(BENCH)?;
    let before = &line[..at];
    if !(before.is_empty() || before.ends_with(['/', ' ', '\t', ':', ']'])) {
        return None;
    }
    let rest = &line[at + BENCH.len()..];
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let words = rest.split_whitespace();
    words.clone().next().filter(|w| w.starts_with('-'))?;
    Some(words)
}

/// Reads a log (or any text holding bench lines); other lines are read past silently, as
/// a hipBLASLt log holds other kinds too. Never panics.
pub fn parse(text: &str) -> LtParsed {
    let mut out = LtParsed::default();
    for (i, line) in text.split('\n').enumerate() {
        if let Some(words) = bench_args(line) {
            if let Err(why) = command_line(&mut out, words, i + 1) {
                out.skip(i + 1, why);
            }
        }
    }
    out
}

fn command_line<'a>(
    out: &mut LtParsed,
    mut words: impl Iterator<Item = &'a str>,
    n: usize,
) -> Result<(), String> {
    let mut opts: Vec<(&str, Option<&str>)> = Vec::new();
    while let Some(w) = words.next() {
        if !w.starts_with('-') {
            return Err(format!("'{w}' is not an option"));
        }
        if SWITCHES.contains(&w) {
            opts.push((w, None));
        } else {
            let v = words.next().ok_or_else(|| format!("{w} has no value"))?;
            opts.push((w, Some(v)));
        }
    }
    let get = |names: &[&str]| -> Option<&str> {
        opts.iter()
            .rev()
            .find(|(o, _)| names.contains(o))
            .and_then(|(_, v)| *v)
    };
    let has = |name: &str| opts.iter().any(|(o, _)| *o == name);
    let num = |names: &[&str], default: Option<i64>| -> Result<Option<i64>, String> {
        match get(names) {
            Some(v) => super::int(v)
                .map(Some)
                .ok_or_else(|| format!("{} '{v}' is not an integer", names[0])),
            None => Ok(default),
        }
    };
    if let Some(f) = get(&["--function", "-f"]).filter(|f| *f != "matmul") {
        out.unservable(format!("hipblaslt-bench lines of function {f}"));
        return Ok(());
    }
    let scaled = ["--scaleA", "--scaleB", "--scaleC", "--scaleD"]
        .iter()
        .any(|o| get(&[o]).is_some_and(|v| v != "0"));
    let why = if has("--grouped_gemm") {
        Some("grouped GEMMs")
    } else if scaled || has("--amaxD") || has("--scaleAlpha_vector") {
        Some("scaled GEMMs")
    } else if get(&["--activation_type"]).is_some_and(|v| v != "none") {
        Some("activation epilogues")
    } else if has("--swizzleA") || has("--swizzleB") {
        Some("swizzled matrices")
    } else if has("--use_e") || has("--gradient") {
        Some("epilogues with an E matrix or a gradient")
    } else {
        None
    };
    if let Some(why) = why {
        out.unservable(format!("hipblaslt-bench lines for {why}"));
        return Ok(());
    }
    let trans = |name: &str| -> Result<Trans, String> {
        match get(&[name]).unwrap_or("N") {
            "N" | "n" => Ok(Trans::N),
            "T" | "t" => Ok(Trans::T),
            other => Err(format!("{name} '{other}' is not N or T")),
        }
    };
    let precision = get(&["--precision", "-r"]).unwrap_or("f16_r");
    let ty = |name: &str| -> Result<lt::CudaDataType, String> {
        let v = get(&[name]).unwrap_or(precision);
        ltf::hip_type(v).ok_or_else(|| format!("{name} '{v}' is not a hipBLASLt type name"))
    };
    let (ta, tb) = (trans("--transA")?, trans("--transB")?);
    let m = num(&["-m", "--sizem"], Some(128))?.unwrap_or(128);
    let nn = num(&["-n", "--sizen"], Some(128))?.unwrap_or(128);
    let k = num(&["-k", "--sizek"], Some(128))?.unwrap_or(128);
    let batch = num(&["--batch_count", "--batch"], Some(1))?.unwrap_or(1);
    let (a, b, c, d) = (
        ty("--a_type")?,
        ty("--b_type")?,
        ty("--c_type")?,
        ty("--d_type")?,
    );
    let compute_text = get(&["--compute_type"]).unwrap_or("f32_r");
    let compute = ltf::hip_compute(compute_text)
        .ok_or_else(|| format!("--compute_type '{compute_text}' is not a hipblaslt-bench name"))?;
    if let Some(why) = [a, b, c, d].into_iter().find_map(ltf::unservable_type) {
        out.unservable(format!("hipblaslt-bench lines for {why}"));
        return Ok(());
    }
    let mut key = ltf::packed_key([ta, tb], [a, b, c, d], compute, m, nn, k, batch)?;
    let lds = [
        num(&["--lda"], None)?,
        num(&["--ldb"], None)?,
        num(&["--ldc"], None)?,
        num(&["--ldd"], None)?,
    ];
    key.lda = lds[0].unwrap_or(key.lda);
    key.ldb = lds[1].unwrap_or(key.ldb);
    key.ldc = lds[2].unwrap_or(key.ldc);
    key.ldd = lds[3].unwrap_or(key.ldc);
    if batch > 1 {
        let packed = key.packed_strides();
        let stride = |name: &str, i: usize| -> Result<i64, String> {
            Ok(match num(&[name], None)? {
                // The bench's own rule: a stride too small for the matrix is the packed one.
                Some(v) if v >= packed[i] || has("--any_stride") => v,
                _ => packed[i],
            })
        };
        key.stride_a = stride("--stride_a", 0)?;
        key.stride_b = stride("--stride_b", 1)?;
        key.stride_c = stride("--stride_c", 2)?;
        key.stride_d = stride("--stride_d", 3)?;
    }
    if has("--bias_vector") {
        key.epilogue = lt::EPILOGUE_BIAS;
        let v = get(&["--bias_type"]).unwrap_or("default");
        key.bias_type = match v {
            "default" => d,
            other => ltf::hip_type(other)
                .ok_or_else(|| format!("--bias_type '{other}' is not a hipBLASLt type name"))?,
        };
    }
    key.check()?;
    let index = match get(&["--algo_method"]) {
        Some("index") | Some("2") => Some(
            num(&["--solution_index"], None)?
                .and_then(|v| i32::try_from(v).ok())
                .ok_or("--algo_method index without a 32-bit --solution_index")?,
        ),
        _ => None,
    };
    out.add(LtEntry {
        key,
        index,
        calls: 1,
        line: n,
        device: None,
        counted: false,
    });
    Ok(())
}

/// The bench line for `key`: with `--algo_method index --solution_index <index>`, or the
/// library's heuristic for `None`. `None` when a type or epilogue has no bench form.
pub fn command(key: &LtKey, index: Option<i32>) -> Option<String> {
    let name = |t| ltf::hip_type_name(t);
    let compute = ltf::hip_compute_name(key.compute)?;
    let scale = ltf::hip_type_name(key.scale)?;
    if key.pointer_mode != lt::POINTER_MODE_HOST || key.sm_count != 0 {
        return None;
    }
    let epilogue = match key.epilogue {
        lt::EPILOGUE_DEFAULT => String::new(),
        lt::EPILOGUE_BIAS => format!(" --bias_vector --bias_type {}", name(key.bias_type)?),
        _ => return None,
    };
    let strides = if key.batch == 1 {
        [0; 4]
    } else {
        [key.stride_a, key.stride_b, key.stride_c, key.stride_d]
    };
    let algo = match index {
        Some(i) => format!(" --algo_method index --solution_index {i}"),
        None => " --algo_method heuristic --requested_solution 1".to_string(),
    };
    Some(format!(
        "{BENCH} --api_method c -m {} -n {} -k {} --lda {} --ldb {} --ldc {} --ldd {} \
         --stride_a {} --stride_b {} --stride_c {} --stride_d {} --alpha 1 --beta 0 \
         --transA {} --transB {} --batch_count {} --a_type {} --b_type {} --c_type {} \
         --d_type {} --scale_type {scale} --compute_type {compute}{epilogue}{algo}",
        key.m,
        key.n,
        key.k,
        key.lda,
        key.ldb,
        key.ldc,
        key.ldd,
        strides[0],
        strides[1],
        strides[2],
        strides[3],
        key.trans_a.letter(),
        key.trans_b.letter(),
        key.batch,
        name(key.a_type)?,
        name(key.b_type)?,
        name(key.c_type)?,
        name(key.d_type)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testutil::never_panics;

    const LOGGED: &str = "hipblaslt-bench --api_method c -m 4096 -n 512 -k 2560 --lda 2560 --ldb 2560 --ldc 4096 --ldd 4096 --stride_a 0 --stride_b 0 --stride_c 0 --stride_d 0 --alpha 1.000000 --beta 0.000000 --transA T --transB N --batch_count 1 --scaleA 0 --scaleB 0 --a_type bf16_r --b_type bf16_r --c_type bf16_r --d_type bf16_r --scale_type f32_r --bias_type f32_r --compute_type f32_r";

    #[test]
    fn a_logged_linear_layer_is_its_key() {
        let text = format!(
            "some other log line\n{LOGGED}\n[12:00] /opt/rocm/bin/{LOGGED}\n{LOGGED} --bias_vector --bias_source d\n"
        );
        let p = parse(&text);
        assert!(p.skipped.is_empty(), "{:?}", p.skipped);
        assert_eq!(p.entries.len(), 2);
        assert_eq!(p.entries[0].key, LtKey::linear(lt::R_16BF, 4096, 512, 2560));
        assert_eq!(p.entries[0].calls, 2);
        assert_eq!(p.entries[0].index, None);
        assert_eq!(p.entries[1].key.epilogue, lt::EPILOGUE_BIAS);
        assert_eq!(p.entries[1].key.bias_type, lt::R_32F);
    }

    #[test]
    fn defaults_indices_and_what_is_not_served() {
        let p = parse(
            "hipblaslt-bench -m 64 -n 8 -k 32 --algo_method index --solution_index 42\n\
             hipblaslt-bench -m 64 -n 8 -k 32 --grouped_gemm\n\
             hipblaslt-bench -m 64 -n 8 -k 32 --activation_type gelu\n\
             hipblaslt-bench -m 64 -n 8 -k 32 --a_type f8_r --b_type f8_r\n\
             hipblaslt-bench -m 64 -n 8 -k x\n\
             hipblaslt-bench -m 64 --transA Q\n\
             hipblaslt-bench -m\n\
             not-hipblaslt-bench -m 1\n",
        );
        assert_eq!(p.entries.len(), 1);
        let e = &p.entries[0];
        assert_eq!(e.index, Some(42));
        assert_eq!((e.key.m, e.key.n, e.key.k, e.key.lda), (64, 8, 32, 64));
        assert_eq!(e.key.a_type, lt::R_16F, "the bench's default precision");
        assert_eq!(p.unservable_rows(), 3);
        assert_eq!(p.skipped.len(), 3, "{:?}", p.skipped);
    }

    #[test]
    fn written_lines_read_back() {
        let mut keys = vec![
            LtKey::linear(lt::R_16BF, 4096, 512, 2560),
            LtKey::linear(lt::R_32F, 64, 1, 64),
        ];
        keys.push(LtKey::linear(lt::R_16F, 64, 16, 32).packed_batch(4));
        let mut bias = LtKey::linear(lt::R_16BF, 64, 16, 32);
        bias.epilogue = lt::EPILOGUE_BIAS;
        bias.bias_type = lt::R_16BF;
        keys.push(bias);
        for (i, key) in keys.iter().enumerate() {
            for index in [Some(i as i32 + 7), None] {
                let line = command(key, index).unwrap();
                let p = parse(&line);
                assert!(p.skipped.is_empty(), "{line}: {:?}", p.skipped);
                assert_eq!(p.entries[0].key, *key, "{line}");
                assert_eq!(p.entries[0].index, index, "{line}");
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        never_panics(7, None, LOGGED, |t| {
            let _ = parse(t);
        });
    }
}
