//! AITER's GEMM tables: `bf16_tuned_gemm.csv` and `bf16_untuned_gemm.csv` (ROCm/aiter,
//! `aiter/configs/`), where vLLM on ROCm takes its linear layers when `VLLM_ROCM_USE_AITER=1`.
//!
//! Columns, found by name in the header (pandas writes and reads these files):
//!
//! ```text
//! tuned:   gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName,err_ratio,tflops,bw
//! older:   M,N,K,bias,dtype,outdtype,scaleAB,cu_num,libtype,solidx,soltimes,kernelName
//! untuned: M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle   (some with gfx,cu_num first)
//! ```
//!
//! `M` is the token count and the weight is `N x K`: the row is `F.linear(x[M,K], W[N,K])`,
//! which hipBLASLt runs as `D[N,M] = W^T x` ([`LtKey::linear`], with C and D of `outdtype`).
//! Rows are keyed by GPU architecture (`gfx`) and compute-unit count (`cu_num`), not by
//! library build: the reader keeps both with each row ([`super::lt::Device`]) so a caller can
//! refuse rows of another device, and nothing here says which hipBLASLt build an index
//! belongs to (that is what registering the rows for one build's sha256 adds).
//!
//! `libtype` says who runs the row. `hipblaslt` rows carry a hipBLASLt algorithm index in
//! `solidx`, the index space of TunableOp's `Gemm_Hipblaslt_<index>`: they become index rows.
//! Every other libtype (`asm`, `opus`, `flydsl`, `triton`, `skinny`, `torch`; `rocblas` in old
//! files) is AITER's own kernel or another library's id, which a hipBLASLt interposer cannot
//! serve: such rows still name their GEMM shape (for tuning), and are counted by libtype.
//! `hipblaslt` rows that name what the key cannot hold are counted too, never guessed at:
//! a bias (the file does not give its type), `scaleAB` (scaled 8-bit GEMMs), `bpreshuffle`
//! (pre-shuffled weights) and a non-zero `splitK`.

use super::lt::{Device, LtEntry, LtParsed};
use crate::cublaslt::{self as lt, CudaDataType, LtKey};

/// The header of the tuned file as AITER writes it today.
pub const TUNED_HEADER: &str = "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName,err_ratio,tflops,bw";

/// Whether `text` is an AITER GEMM table: a first non-blank line naming `M,N,K` and AITER's
/// `dtype` and `outdtype` columns.
pub fn is_aiter(text: &str) -> bool {
    let Some(first) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return false;
    };
    let cols: Vec<&str> = first.split(',').map(str::trim).collect();
    ["M", "N", "K", "dtype", "outdtype"]
        .iter()
        .all(|c| cols.contains(c))
}

/// The torch dtypes AITER reads, each type's own name before its aliases.
const TORCH_TYPES: [(&str, CudaDataType); 5] = [
    ("torch.bfloat16", lt::R_16BF),
    ("torch.float16", lt::R_16F),
    ("torch.half", lt::R_16F),
    ("torch.float32", lt::R_32F),
    ("torch.float", lt::R_32F),
];

/// A torch dtype as AITER writes it (`torch.bfloat16`).
pub fn torch_type(name: &str) -> Option<CudaDataType> {
    let name = name.trim();
    TORCH_TYPES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
}

/// The torch name of a type.
pub fn torch_type_name(t: CudaDataType) -> Option<&'static str> {
    TORCH_TYPES.iter().find(|(_, x)| *x == t).map(|(n, _)| *n)
}

/// Splits one CSV line as pandas writes it: fields in double quotes may hold commas and
/// doubled quotes. `None` for an unterminated quote.
fn split(line: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (false, '"') if cur.is_empty() => quoted = true,
            (false, ',') => out.push(std::mem::take(&mut cur)),
            (_, c) => cur.push(c),
        }
    }
    if quoted {
        return None;
    }
    out.push(cur);
    Some(out.into_iter().map(|s| s.trim().to_string()).collect())
}

fn truth(v: &str) -> Option<bool> {
    match v {
        "True" | "true" | "1" => Some(true),
        "False" | "false" | "0" | "" => Some(false),
        _ => None,
    }
}

/// Reads a tuned or untuned table. Never panics.
pub fn parse(text: &str) -> LtParsed {
    let mut out = LtParsed::default();
    let mut header: Option<Vec<String>> = None;
    for (i, raw) in text.split('\n').enumerate() {
        let n = i + 1;
        let line = raw.trim().trim_start_matches('\u{feff}');
        if line.is_empty() {
            continue;
        }
        let Some(fields) = split(line) else {
            out.skip(n, "an unterminated quote");
            continue;
        };
        let Some(h) = &header else {
            if fields.iter().any(|f| f == "M") && fields.iter().any(|f| f == "dtype") {
                header = Some(fields);
            } else {
                out.skip(n, "no header naming M,N,K,...,dtype before the rows");
            }
            continue;
        };
        if fields == *h {
            continue; // a header repeated (files joined with `cat`)
        }
        if fields.len() != h.len() {
            out.skip(
                n,
                format!("{} fields where the header names {}", fields.len(), h.len()),
            );
            continue;
        }
        if let Err(why) = row(&mut out, h, &fields, n) {
            out.skip(n, why);
        }
    }
    out
}

fn row(out: &mut LtParsed, h: &[String], f: &[String], n: usize) -> Result<(), String> {
    let get = |name: &str| h.iter().position(|c| c == name).map(|i| f[i].as_str());
    let need = |name: &str| get(name).ok_or_else(|| format!("the header has no {name} column"));
    let num = |name: &str| -> Result<i64, String> {
        let v = need(name)?;
        super::int(v).ok_or_else(|| format!("{name} '{v}' is not an integer"))
    };
    let flag = |name: &str| -> Result<bool, String> {
        match get(name) {
            None => Ok(false),
            Some(v) => truth(v).ok_or_else(|| format!("{name} '{v}' is not True or False")),
        }
    };
    let (m, nn, k) = (num("M")?, num("N")?, num("K")?);
    let dtype = need("dtype")?;
    let a = torch_type(dtype)
        .ok_or_else(|| format!("dtype '{dtype}' is not a torch type AITER tunes"))?;
    let out_name = need("outdtype")?;
    let d = torch_type(out_name)
        .ok_or_else(|| format!("outdtype '{out_name}' is not a torch type AITER tunes"))?;
    let (bias, scaled, preshuffled) = (flag("bias")?, flag("scaleAB")?, flag("bpreshuffle")?);
    let device = match (get("gfx"), get("cu_num")) {
        (None, None) => None,
        (gfx, cu) => Some(Device {
            gfx: gfx.unwrap_or("").to_string(),
            cu_num: match cu {
                Some(v) => {
                    Some(super::int(v).ok_or_else(|| format!("cu_num '{v}' is not an integer"))?)
                }
                None => None,
            },
        }),
    };
    if scaled {
        out.unservable("AITER rows with scaleAB (scaled 8-bit GEMMs)");
        return Ok(());
    }
    let mut key = LtKey::linear(a, nn, m, k);
    key.c_type = d;
    key.d_type = d;
    key.check()?;
    let mut entry = LtEntry {
        key,
        index: None,
        calls: 0,
        line: n,
        device,
        counted: false,
    };
    // Untuned tables name shapes only.
    let Some(libtype) = get("libtype") else {
        out.add(entry);
        return Ok(());
    };
    let why = if libtype != "hipblaslt" {
        Some(format!(
            "AITER rows of libtype {libtype} (not a hipBLASLt algorithm: a BLAS interposer cannot serve them)"
        ))
    } else if bias {
        Some("hipblaslt rows with a bias (the file does not say the bias type)".to_string())
    } else if preshuffled {
        Some("hipblaslt rows with bpreshuffle (pre-shuffled weights)".to_string())
    } else if get("splitK").is_some_and(|v| !matches!(v, "0" | "")) {
        Some(
            "hipblaslt rows with a split-K setting (the index alone does not carry it)".to_string(),
        )
    } else {
        None
    };
    match why {
        Some(why) => {
            out.unservable(why);
            entry.counted = true;
        }
        None => {
            let v = need("solidx")?;
            let index = super::int(v)
                .and_then(|x| i32::try_from(x).ok())
                .ok_or_else(|| format!("solidx '{v}' is not a 32-bit integer"))?;
            entry.index = Some(index);
        }
    }
    out.add(entry);
    Ok(())
}

/// Why a profile row has no `libtype hipblaslt` form, or `None`: AITER's rows are linear
/// layers (`TN`, packed, one batch, no epilogue) of one torch input type.
pub fn inexpressible(key: &LtKey) -> Option<String> {
    let linear = LtKey::linear(key.a_type, key.m, key.n, key.k);
    let plain = LtKey {
        c_type: key.c_type,
        d_type: key.d_type,
        ..linear
    };
    if *key != plain {
        return Some(
            "not a linear layer as AITER keys it (TN, packed, no batch or epilogue)".into(),
        );
    }
    if key.c_type != key.d_type {
        return Some("C and D of different types".into());
    }
    if torch_type_name(key.a_type).is_none() || torch_type_name(key.d_type).is_none() {
        return Some("a type AITER does not tune".into());
    }
    None
}

/// One `libtype hipblaslt` row of a tuned table for `device`, with the time measured for
/// it (microseconds; 0 where unknown) and what follows from it. `err_ratio` is 0: tunedblas
/// adopts a row only after its numerics check.
pub fn row_text(device: &Device, key: &LtKey, index: i32, us: f64) -> Result<String, String> {
    if let Some(why) = inexpressible(key) {
        return Err(why);
    }
    let cu = device
        .cu_num
        .ok_or("the compute-unit count of the device (AITER keys rows by it)")?;
    let (m, n, k) = (key.n, key.m, key.k);
    let bytes = (key.elem_bytes()[0] as f64) * ((m * k + n * k) as f64)
        + (key.elem_bytes()[3] as f64) * ((m * n) as f64);
    let (tflops, bw) = if us > 0.0 {
        (key.flops() / us / 1e6, bytes / us / 1e3)
    } else {
        (0.0, 0.0)
    };
    Ok(format!(
        "{},{cu},{m},{n},{k},False,{},{},False,False,hipblaslt,{index},0,{},,0.0,{:.2},{:.2}",
        device.gfx,
        torch_type_name(key.a_type).unwrap_or("?"),
        torch_type_name(key.d_type).unwrap_or("?"),
        us,
        tflops,
        bw
    ))
}

/// A tuned table of `libtype hipblaslt` rows: the header, then each row.
pub fn write(device: &Device, rows: &[(LtKey, i32, f64)]) -> Result<String, String> {
    if device.gfx.is_empty() || device.gfx.contains([',', '\n']) {
        return Err(format!("'{}' is not a gfx name", device.gfx));
    }
    let mut out = format!("{TUNED_HEADER}\n");
    for (key, index, us) in rows {
        out.push_str(&row_text(device, key, *index, *us)?);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testutil::never_panics;

    const HIPB: &str = "gfx950,256,1,2048,5376,False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,440303,0,11.389,Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x256,0.0,1.93,1934.76";
    const ASM: &str = "gfx950,256,64,256,5120,False,torch.bfloat16,torch.float32,False,False,asm,5,13,7.9191,_ZN5aiter39bf16gemm_fp32bf16_tn_64x64_splitk_cleanE,0.0,21.19,417.92";

    #[test]
    fn hipblaslt_rows_become_index_rows_and_the_rest_is_counted() {
        let text = format!("{TUNED_HEADER}\n{HIPB}\n{ASM}\n{ASM}\n");
        assert!(is_aiter(&text));
        let p = parse(&text);
        assert!(p.skipped.is_empty(), "{:?}", p.skipped);
        assert_eq!(p.entries.len(), 2, "the asm row twice is one shape");
        let e = &p.entries[0];
        assert_eq!(
            e.key,
            LtKey::linear(lt::R_16BF, 2048, 1, 5376),
            "M is the tokens"
        );
        assert_eq!(e.index, Some(440303));
        assert_eq!(
            e.device,
            Some(Device {
                gfx: "gfx950".into(),
                cu_num: Some(256)
            })
        );
        let asm = &p.entries[1];
        assert_eq!(asm.index, None);
        assert_eq!((asm.key.c_type, asm.key.d_type), (lt::R_32F, lt::R_32F));
        assert_eq!(p.unservable.len(), 1);
        assert_eq!(p.unservable[0].1, 2);
        assert!(p.unservable[0].0.contains("libtype asm"));
    }

    #[test]
    fn what_the_index_cannot_carry_is_counted_not_guessed() {
        let row = |f: &dyn Fn(&mut Vec<String>)| {
            let mut v: Vec<String> = HIPB.split(',').map(str::to_string).collect();
            f(&mut v);
            v.join(",")
        };
        let text = format!(
            "{TUNED_HEADER}\n{}\n{}\n{}\n{}\n",
            row(&|v| v[5] = "True".into()),
            row(&|v| v[8] = "True".into()),
            row(&|v| v[9] = "True".into()),
            row(&|v| v[12] = "4".into()),
        );
        let p = parse(&text);
        assert_eq!(
            p.entries.len(),
            1,
            "bias, preshuffle and split-K rows still name the shape"
        );
        assert_eq!(p.entries[0].index, None);
        let reasons: Vec<&str> = p.unservable.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert!(reasons[1].contains("scaleAB"));
    }

    #[test]
    fn untuned_and_older_tables_read_by_column_name() {
        let untuned = "M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle\n64,256,5120,False,torch.bfloat16,torch.float32,False,False\n";
        let p = parse(untuned);
        assert_eq!(p.entries.len(), 1);
        assert_eq!(p.entries[0].index, None);
        assert!(p.unservable.is_empty());
        let old = "M,N,K,bias,dtype,outdtype,scaleAB,cu_num,libtype,solidx,soltimes,kernelName\n\
                   1024,5348,16384,False,torch.bfloat16,torch.bfloat16,False,256,hipblaslt,526744,231.31,Cijk_A\n\
                   1,5,7,False,torch.int8,torch.bfloat16,False,256,hipblaslt,1,1.0,x\n\
                   1,5,7\n";
        let p = parse(old);
        assert_eq!(p.entries.len(), 1);
        assert_eq!(p.entries[0].index, Some(526744));
        assert_eq!(p.entries[0].device.as_ref().unwrap().cu_num, Some(256));
        assert_eq!(p.skipped.len(), 2, "{:?}", p.skipped);
    }

    #[test]
    fn written_rows_read_back() {
        let dev = Device {
            gfx: "gfx942".into(),
            cu_num: Some(304),
        };
        let rows = vec![
            (LtKey::linear(lt::R_16BF, 4096, 512, 2560), 1234, 21.5),
            (LtKey::linear(lt::R_16F, 128, 1, 64), 7, 0.0),
        ];
        let text = write(&dev, &rows).unwrap();
        let p = parse(&text);
        assert!(p.skipped.is_empty() && p.unservable.is_empty(), "{p:?}");
        let back: Vec<(LtKey, i32)> = p
            .entries
            .iter()
            .map(|e| (e.key, e.index.unwrap()))
            .collect();
        assert_eq!(back, rows.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>());
        assert!(p.entries.iter().all(|e| e.device.as_ref() == Some(&dev)));
        let mut nt = LtKey::linear(lt::R_16BF, 64, 8, 64);
        nt.trans_b = crate::key::Trans::T;
        nt.ldb = 8;
        assert!(write(&dev, &[(nt, 1, 0.0)]).is_err());
        let no_cu = Device {
            cu_num: None,
            ..dev
        };
        assert!(write(&no_cu, &rows).is_err());
    }

    fn fixture(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/aiter")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// Public AITER tables (tests/fixtures/aiter/SOURCE.md): the Gemma 4 table's 88
    /// hipblaslt rows become index rows of gfx950 / 256 CUs; its asm and triton rows, and
    /// every row of the main table (AITER's own kernels only), are counted by libtype.
    #[test]
    fn public_aiter_tables() {
        let gemma = parse(&fixture("gemma4_bf16_tuned_gemm.csv"));
        assert!(gemma.skipped.is_empty(), "{:?}", gemma.skipped);
        let rows = gemma.index_rows(None);
        assert_eq!(rows.rows.len(), 88);
        assert_eq!(
            rows.left_out,
            vec![
                (
                    "AITER rows of libtype asm (not a hipBLASLt algorithm: a BLAS interposer cannot serve them)".to_string(),
                    15
                ),
                (
                    "AITER rows of libtype triton (not a hipBLASLt algorithm: a BLAS interposer cannot serve them)".to_string(),
                    2
                ),
            ]
        );
        let dev = Device {
            gfx: "gfx950".into(),
            cu_num: Some(256),
        };
        assert_eq!(
            gemma.devices().into_iter().collect::<Vec<_>>(),
            vec![(dev.clone(), 105)]
        );
        let other = Device {
            gfx: "gfx942".into(),
            cu_num: Some(304),
        };
        let none = gemma.index_rows(Some(&other));
        assert!(none.rows.is_empty());
        assert!(none
            .left_out
            .iter()
            .any(|(r, n)| r.contains("another device") && *n == 105));
        let main = parse(&fixture("bf16_tuned_gemm.csv"));
        assert!(main.skipped.is_empty(), "{:?}", main.skipped);
        assert!(main.index_rows(None).rows.is_empty());
        let counts: Vec<(String, usize)> = main
            .unservable
            .iter()
            .map(|(r, n)| (r.split_whitespace().nth(4).unwrap_or("").to_string(), *n))
            .collect();
        assert_eq!(
            counts,
            vec![
                ("asm".to_string(), 71),
                ("opus".into(), 36),
                ("flydsl".into(), 5),
                ("triton".into(), 120)
            ]
        );
        assert_eq!(main.devices().len(), 2);
        let untuned = parse(&fixture("bf16_untuned_gemm.csv"));
        assert!(untuned.skipped.is_empty(), "{:?}", untuned.skipped);
        assert_eq!(untuned.entries.len(), 442);
        assert!(untuned.entries.iter().all(|e| e.index.is_none()));
    }

    #[test]
    fn quoted_fields_and_arbitrary_bytes() {
        assert_eq!(
            split("a,\"b,c\",\"d\"\"e\"").unwrap(),
            vec!["a", "b,c", "d\"e"]
        );
        assert_eq!(split("a,\"b"), None);
        let seed = format!("{TUNED_HEADER}\n{HIPB}\n{ASM}\n");
        never_panics(42, None, &seed, |t| {
            let _ = parse(t);
        });
    }
}
