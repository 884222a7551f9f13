//! What tunedblas writes for the AMD stack, read by the real readers in the rocblas-6.4 root
//! (Debian sid: `libhipblaslt1` 7.1.1 and its `libhipblaslt1-bench`), without a GPU:
//!
//! - `profiles adopt` reads the real library's version and revision (`hipblasLtGetVersion`,
//!   `hipblasLtGetGitRevision`) and takes a TunableOp file naming this build, and refuses one
//!   naming another revision;
//! - `export --format hipblaslt-override` writes the `Git Version:` line the library compares
//!   with its own revision (`tests/hosts/hiplt_parsers.cpp revision`); each row gets through
//!   the library's own row parser (`problemFromEntries`, called in this exact build) as the
//!   problem and index tunedblas meant, and its type and compute names through the library's
//!   `string_to_hip_datatype` / `string_to_hipblas_computetype`; a control row is refused;
//! - every line `export --format hipblaslt-bench` writes gets past the real `hipblaslt-bench`
//!   option parser and stops only at the device query, each type and compute value among
//!   those its own `--help` lists; a control line is refused.
//!
//! AITER's tables are read by AITER's Python (pandas), which no Debian root has: its rows
//! are checked by the round trips of `tests/amd_formats.rs` only.

use std::collections::BTreeMap;

use tunedblas_core::cublaslt::{op_and_signature, LtKey, R_16BF, R_16F, R_32F};

use crate::common::assert_has;
use crate::suite::{out_text, Suite, LIBDIR};

/// Debian's `libhipblaslt.so.1.1` of `libhipblaslt1` 7.1.1+dfsg-4, whose row parser sits at
/// [`ROW_PARSER`] from its load address (found by its check that a row has 11 fields).
const KNOWN_BUILD: &str = "0e621a6a494d1a41d5f88562c81128618d9871963a153d7cc930d1659877aecb";
const ROW_PARSER: &str = "0xbff50";

/// The keys of a profile that exercises the override and bench forms: bf16 and f16 linear
/// layers, an NN f32 GEMM, a strided batch.
fn keys() -> Vec<(LtKey, i32)> {
    let mut nn = LtKey::linear(R_32F, 96, 40, 32);
    nn.trans_a = tunedblas_core::key::Trans::N;
    nn.lda = 96;
    let batched = LtKey::linear(R_16F, 64, 16, 32).packed_batch(8);
    vec![
        (LtKey::linear(R_16BF, 4096, 512, 2560), 12345),
        (LtKey::linear(R_16F, 2560, 16, 1536), 7),
        (nn, 31),
        (batched, 1002),
    ]
}

fn tunableop_file(validator: &str) -> String {
    let mut text = format!(
        "Validator,PT_VERSION,2.12.0\nValidator,HIP_VERSION,701\nValidator,HIPBLASLT_VERSION,{validator}\nValidator,GCN_ARCH_NAME,gfx942:sramecc+:xnack-\n"
    );
    for (k, i) in keys() {
        let (op, sig) = op_and_signature(&k);
        text.push_str(&format!("{op},{sig},Gemm_Hipblaslt_{i},0.01\n"));
    }
    text.push_str(
        "GemmTunableOp_BFloat16_TN,tn_4096_*_2560_ld_2560_2560_4096,Gemm_Hipblaslt_5,0.01\n",
    );
    text
}

/// `probe ARGS` in the root: the lines it printed.
fn probe(s: &Suite, dir: &str, args: &str) -> (Option<i32>, Vec<String>) {
    let out = s.sh(&format!("cd {dir} && ./hiplt_parsers {args}"));
    let (o, e) = out_text(&out);
    assert!(e.is_empty() || out.status.success(), "{args}: {o}{e}");
    (out.status.code(), o.lines().map(str::to_string).collect())
}

/// `name=value` of a `types`/`computes` answer.
fn values(lines: &[String]) -> BTreeMap<String, i32> {
    lines
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

pub fn check(s: &Suite) {
    let (host, inside) = s.scratch("amd");
    std::fs::copy(
        crate::suite::repo().join("tests/hosts/hiplt_parsers.cpp"),
        host.join("hiplt_parsers.cpp"),
    )
    .unwrap();
    let built = s.sh(&format!(
        "cd {inside} && g++ -std=c++17 -O1 -Wall -o hiplt_parsers hiplt_parsers.cpp -lhipblaslt -ldl"
    ));
    assert!(built.status.success(), "{:?}", out_text(&built));
    let lib = format!("{LIBDIR}/libhipblaslt.so.1");

    // The build says of itself what a file for it must say.
    let (_, rev) = probe(s, &inside, "revision");
    let line = &rev[0];
    assert_has(line, "status=0 version_status=0 version=100100");
    let revision = line
        .split_once("rev=[")
        .and_then(|(_, r)| r.strip_suffix(']'))
        .unwrap()
        .to_string();

    // profiles adopt: a TunableOp file naming this build is taken, one naming another refused.
    std::fs::write(host.join("other.csv"), tunableop_file("100100-cd957402")).unwrap();
    let (code, out, err) = s.tunedblas(
        &inside,
        &format!(
            "profiles adopt --lib {lib} --profiles {inside}/profiles --name deb {inside}/other.csv"
        ),
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("revision is ''") || err.contains(&format!("revision is '{revision}'")),
        "{err}"
    );
    std::fs::write(
        host.join("ours.csv"),
        tunableop_file(&format!("100100-{revision}")),
    )
    .unwrap();
    let (code, out, err) = s.tunedblas(
        &inside,
        &format!(
            "profiles adopt --lib {lib} --profiles {inside}/profiles --name deb {inside}/ours.csv"
        ),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert_has(&out, "checked HIPBLASLT_VERSION: matches");
    assert!(
        out.contains("adopted 4 rows") && out.contains("1 `*` rows"),
        "{out}"
    );

    // The override file.
    let (code, out, err) = s.tunedblas(
        &inside,
        &format!("export --profile deb --format hipblaslt-override --out {inside}/override.txt"),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let file = std::fs::read_to_string(host.join("override.txt")).unwrap();
    assert_eq!(
        file.lines().next(),
        Some(format!("Git Version: {revision}").as_str()),
        "the library compares the first line with its own revision"
    );
    let written = tunedblas_core::formats::hipblaslt_tuning::parse(&file);
    assert_eq!(written.entries.len(), keys().len(), "{file}");

    // Its type and compute names, through the library's own mapping (unknown: 255 / 0).
    let mut types: Vec<String> = Vec::new();
    let mut computes: Vec<String> = Vec::new();
    for l in file.lines().skip(1).filter(|l| !l.starts_with("transA")) {
        let f: Vec<&str> = l.split(',').collect();
        types.extend(f[6..9].iter().map(|t| t.to_string()));
        computes.push(f[9].to_string());
    }
    types.push("zz_r".into());
    computes.push("zz".into());
    let t = values(&probe(s, &inside, &format!("types {}", types.join(" "))).1);
    let c = values(&probe(s, &inside, &format!("computes {}", computes.join(" "))).1);
    assert_eq!(
        t["zz_r"], 255,
        "the control type is unknown to the library: {t:?}"
    );
    assert_eq!(
        c["zz"], 0,
        "the control compute is unknown to the library: {c:?}"
    );
    for ty in &types[..types.len() - 1] {
        assert_ne!(t[ty], 255, "the library does not know type {ty}");
    }
    for co in &computes[..computes.len() - 1] {
        assert_ne!(c[co], 0, "the library does not know compute type {co}");
    }

    // Each row through the library's own row parser, in the build whose parser is known.
    let sha = s.sh(&format!("sha256sum $(readlink -f {lib})"));
    let sha = out_text(&sha).0;
    if !sha.starts_with(KNOWN_BUILD) {
        eprintln!(
            "conformance: amd: {lib} is not the build whose row parser this check calls ({sha}); its rows are checked by type and compute names only"
        );
        return;
    }
    let mut rows_file = file.clone();
    rows_file.push_str("T,N,1,64,8,64,bogus_r,bf16_r,bf16_r,f32_r,9\n");
    std::fs::write(host.join("rows.txt"), rows_file).unwrap();
    let (code, rows) = probe(s, &inside, &format!("rows {ROW_PARSER} rows.txt"));
    assert_eq!(code, Some(0), "{rows:?}");
    assert_eq!(rows.len(), keys().len() + 1, "{rows:?}");
    for ((key, index), row) in keys().iter().zip(&rows) {
        let trans = |t: tunedblas_core::key::Trans| u8::from(t != tunedblas_core::key::Trans::N);
        let want = format!(
            "index={index} trans={},{} m={} n={} k={} batch={}",
            trans(key.trans_a),
            trans(key.trans_b),
            key.m,
            key.n,
            key.k,
            key.batch
        );
        assert!(
            row.contains(&want),
            "hipBLASLt read {row}, tunedblas meant {want}"
        );
    }
    assert!(
        rows.last().unwrap().contains("index=-1"),
        "the control row is refused: {rows:?}"
    );

    bench_lines(s, &inside);
}

/// hipblaslt-bench's verdict on one line: `Ok` when its option parser took the line and it
/// stopped at the device, else what it said.
fn bench_verdict(out: &str) -> Result<(), String> {
    for e in [
        "is not defined",
        "Invalid value",
        "unrecognised",
        "invalid option",
    ] {
        if out.contains(e) {
            return Err(format!("parser error ({e})"));
        }
    }
    if out.contains("no ROCm-capable device") {
        Ok(())
    } else {
        Err("did not reach the device".into())
    }
}

fn bench_lines(s: &Suite, inside: &str) {
    let bench = "/usr/libexec/rocm/libhipblaslt1-bench/hipblaslt-bench";
    let (code, out, err) = s.tunedblas(
        inside,
        &format!("export --profile deb --format hipblaslt-bench --out {inside}/lines.sh"),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let body = std::fs::read_to_string(s.host_path(&format!("{inside}/lines.sh"))).unwrap();
    let lines: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("hipblaslt-bench "))
        .collect();
    assert_eq!(
        lines.len(),
        2 * keys().len(),
        "a row and its heuristic each:\n{body}"
    );
    // The values the bench's own help lists for each typed option.
    let help = out_text(&s.sh(&format!("{bench} --help"))).0;
    let listed = |opt: &str| -> Vec<String> {
        let l = help
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{opt} ")))
            .unwrap_or_else(|| panic!("{opt} is not in hipblaslt-bench --help"));
        let opts = l.split("Options:").nth(1).unwrap_or("");
        opts.split([',', ' ', '('])
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    };
    for l in &lines {
        let words: Vec<&str> = l.split_whitespace().collect();
        for (opt, help_opt) in [
            ("--a_type", "--a_type"),
            ("--b_type", "--b_type"),
            ("--c_type", "--c_type"),
            ("--d_type", "--d_type"),
            ("--compute_type", "--compute_type"),
        ] {
            let at = words.iter().position(|w| *w == opt).unwrap();
            let v = words[at + 1];
            assert!(
                listed(help_opt).iter().any(|x| x == v),
                "{opt} {v} is not among the values hipblaslt-bench --help lists ({:?})",
                listed(help_opt)
            );
        }
    }
    let mut script = String::new();
    for (i, l) in lines.iter().enumerate() {
        script.push_str(&format!(
            "echo '@@line {i}'; {} 2>&1\n",
            l.replacen("hipblaslt-bench", bench, 1)
        ));
    }
    script.push_str(&format!(
        "echo '@@line control'; {bench} -m 64 --no_such_option 1 2>&1\n"
    ));
    std::fs::write(s.host_path(&format!("{inside}/run.sh")), script).unwrap();
    let all = out_text(&s.sh(&format!("sh {inside}/run.sh"))).0;
    let mut seen = 0;
    let mut bad = Vec::new();
    for chunk in all.split("@@line ").skip(1) {
        seen += 1;
        let (id, rest) = chunk.split_once('\n').unwrap_or((chunk, ""));
        let verdict = bench_verdict(rest);
        if id.trim() == "control" {
            assert!(verdict.is_err(), "the control line was not refused: {rest}");
        } else if let Err(why) = verdict {
            bad.push(format!(
                "{why}: {}\n  {}",
                lines[id.trim().parse::<usize>().unwrap()],
                rest.trim()
            ));
        }
    }
    assert_eq!(seen, lines.len() + 1, "{all}");
    assert!(
        bad.is_empty(),
        "hipblaslt-bench refused:\n{}",
        bad.join("\n")
    );
}
