//! The harness (`tunedblas`) on the real libraries, inside the root, without a device:
//! - `tune`, `verify` and `qualify` exit 4 (no usable device) with HIP's reason;
//! - `env` and `profiles which` find the distribution's library (`/usr/lib/<arch>-linux-gnu`)
//!   and name the profile made for its sha256;
//! - `export --format gemm-tune` writes a file only for a build that reads
//!   `ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH` (the variable is in the library's strings), and
//!   refuses rocBLAS 2.47, which lacks it;
//! - every line `export --format bench` writes gets past the real rocblas-bench's parser
//!   and fails only at the device query.

use std::path::Path;

use serde_json::Value;
use tunedblas_core::abi;
use tunedblas_core::key::{Batching, ProblemKey, Trans, Types};

use crate::common::assert_has;
use crate::hosts;
use crate::suite::{out_text, Suite, LIBDIR};

/// Whether the real library file contains `text` (its string table, as `strings` would show).
pub fn library_mentions(s: &Suite, text: &str) -> bool {
    let status = std::process::Command::new("grep")
        .args(["-q", "-a", "-F", "--", text])
        .arg(s.host_path(&s.rocblas_file))
        .status()
        .expect("grep");
    status.success()
}

pub fn no_device(s: &Suite) {
    let (_, inside) = s.scratch("no-device");
    let lib = format!("{LIBDIR}/{}", s.soname);
    let mut cmds = vec![
        format!("tune --lib {lib} --shape f16:TN:64:32:16"),
        format!("verify --lib {lib}"),
        format!("qualify --lib {lib}"),
    ];
    // The hipBLASLt tuner gets as far as a machine without a GPU allows: the real library's
    // C functions and its hipblaslt_ext C++ functions resolve by the names src/abi.rs gives,
    // the exception guard loads beside the real libstdc++, the HIP runtime is the one the
    // real hipBLASLt links (found through it), and the missing device is exit 4.
    if s.has_hipblas() {
        cmds.push(format!(
            "tune --lib {LIBDIR}/libhipblaslt.so.1 --workspace 1048576 --shape 64,16,64 --profiles {inside}/p --name c"
        ));
    }
    for cmd in cmds {
        let (code, out, err) = s.tunedblas(&inside, &cmd);
        assert_eq!(
            code,
            Some(4),
            "{}: tunedblas {cmd}: exit {code:?}\n{out}{err}",
            s.name
        );
        assert!(
            err.contains("hipGetDeviceCount failed with HIP error 100: no usable device"),
            "{}: tunedblas {cmd}: {err}",
            s.name
        );
    }
    // A file that is not rocBLAS is told apart from a rocBLAS without a device (exit 3).
    let (code, _, err) = s.tunedblas(
        &inside,
        &format!("tune --lib {LIBDIR}/libamdhip64.so --shape f16:TN:64:32:16"),
    );
    assert_eq!(code, Some(3), "{}: {err}", s.name);
}

pub fn finds_the_distribution_library(s: &Suite) {
    let (host, inside) = s.scratch("env");
    hosts::write_profile(
        s,
        &host,
        &format!("conf-{}", s.name),
        &[hosts::key_of("ex:TN:h:64:32:16")],
    );
    let (code, out, err) = s.tunedblas(&inside, "env --json");
    assert_eq!(code, Some(0), "{}: env: {err}", s.name);
    let env: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("env --json: {e}: {out}"));
    let text = env.to_string();
    let libs = env["libraries"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: env --json has no libraries: {text}", s.name));
    let ours = libs
        .iter()
        .find(|l| {
            l["library"]
                .as_str()
                .is_some_and(|p| p.starts_with(LIBDIR) && p.contains("librocblas.so"))
        })
        .unwrap_or_else(|| {
            panic!(
                "{}: env does not list the rocBLAS in {LIBDIR}: {text}",
                s.name
            )
        });
    assert_eq!(ours["sha256"], s.sha256.as_str(), "{}: {ours}", s.name);
    assert_eq!(
        ours["profile"],
        format!("conf-{}", s.name),
        "{}: {ours}",
        s.name
    );

    // `profiles which` with the soname alone, as a user would type it.
    let (code, out, err) = s.tunedblas(&inside, &format!("profiles which {} --json", s.soname));
    assert_eq!(code, Some(0), "{}: profiles which: {out}{err}", s.name);
    let which: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        which["profile"],
        format!("conf-{}", s.name),
        "{}: {which}",
        s.name
    );
    assert_eq!(which["sha256"], s.sha256.as_str());
    assert!(
        which["library"].as_str().unwrap().starts_with(LIBDIR),
        "{which}"
    );
}

/// The keys of a profile that exercises every bench line form: each batching, the typed
/// GEMMs' types, bf16, int8 packed, fp16_alt_impl, ldd != ldc and d_type != c_type.
fn bench_keys() -> Vec<(ProblemKey, &'static str)> {
    let (t, n) = (Trans::T, Trans::N);
    let half = Types::HALF;
    let plain = ProblemKey::linear(half, 4096, 32, 2560);
    let int8 = Types::INT8;
    let mixed = Types {
        c: abi::DT_F32_R,
        d: abi::DT_F16_R,
        ..half
    };
    let nt = ProblemKey::single(
        n,
        t,
        Types::uniform(abi::DT_BF16_R, abi::DT_F32_R),
        64,
        32,
        16,
        64,
        32,
        64,
        64,
        0,
    );
    vec![
        (plain, "Gemm_Rocblas_7"),
        (plain.with_flags(abi::FLAG_FP16_ALT_IMPL), "Default"),
        (
            ProblemKey::single(t, n, half, 512, 16, 512, 512, 512, 512, 640, 0),
            "Gemm_Rocblas_3",
        ),
        (
            ProblemKey::single(t, n, mixed, 512, 16, 512, 512, 512, 512, 512, 0),
            "Gemm_Rocblas_3",
        ),
        (
            ProblemKey::single(
                n,
                n,
                int8,
                256,
                128,
                512,
                256,
                512,
                256,
                256,
                abi::FLAG_PACK_INT8X4,
            ),
            "Gemm_Rocblas_2",
        ),
        (
            ProblemKey::single(n, n, Types::HGEMM, 128, 7, 64, 128, 64, 128, 128, 0),
            "Gemm_Rocblas_5",
        ),
        (
            ProblemKey::single(t, n, Types::SGEMM, 96, 40, 32, 32, 32, 96, 96, 0),
            "Gemm_Rocblas_5",
        ),
        (
            nt.with_batch(Batching::Strided, 8, nt.packed_strides()),
            "Gemm_Rocblas_11",
        ),
        (
            nt.with_batch(Batching::PointerArray, 3, [0; 4]),
            "Gemm_Rocblas_4",
        ),
    ]
}

fn write_rows(s: &Suite, dir: &Path, name: &str, rows: &[(ProblemKey, &str)]) {
    let lines: Vec<String> = rows
        .iter()
        .map(|(k, sol)| {
            let (op, sig) = tunedblas_core::tunableop::op_and_signature(k);
            format!("{op},{sig},{sol},0.01")
        })
        .collect();
    crate::common::write_profile(&dir.join("profiles"), name, &s.sha256, &lines, 1);
    // The version the library itself reports, as `tune` records it.
    let reg = dir.join("profiles/profiles.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&reg).unwrap()).unwrap();
    v["profiles"][name]["rocblas"] = Value::from(s.version.clone());
    std::fs::write(&reg, v.to_string()).unwrap();
}

/// rocblas-bench's verdict on one line: `Ok` when the parser took it and it stopped at the
/// device query, else what it said.
fn bench_verdict(out: &str) -> Result<(), String> {
    let parse_errors = [
        "is not defined",
        "Invalid value",
        "unrecognised",
        "unrecognized",
        "invalid option",
    ];
    if let Some(e) = parse_errors.iter().find(|e| out.contains(*e)) {
        return Err(format!("parser error ({e})"));
    }
    if out.contains("Query device error") {
        Ok(())
    } else {
        Err("did not reach the device query".into())
    }
}

pub fn bench_lines_pass_the_real_parser(s: &Suite) {
    let (host, inside) = s.scratch("bench");
    let rows = bench_keys();
    write_rows(s, &host, "bench-rows", &rows);
    let (code, out, err) = s.tunedblas(
        &inside,
        &format!(
            "export --lib {LIBDIR}/{} --format bench --out {inside}/lines.sh",
            s.soname
        ),
    );
    assert_eq!(code, Some(0), "{}: export bench: {out}{err}", s.name);
    let body = std::fs::read_to_string(host.join("lines.sh")).unwrap();
    let lines: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("./rocblas-bench"))
        .collect();
    let tuned = rows.iter().filter(|r| r.1 != "Default").count();
    assert_eq!(
        lines.len(),
        rows.len() + tuned,
        "{}: a line per row and per heuristic:\n{body}",
        s.name
    );
    let switch = tunedblas_core::formats::bench::own_d_switch(Some(s.major()));
    assert!(
        lines.iter().any(|l| l.ends_with(switch)),
        "{}: {switch}: {body}",
        s.name
    );

    // The lines run one after another in one shell; each prints a marker and its output.
    let mut script = String::new();
    for (i, l) in lines.iter().enumerate() {
        let cmd = l
            .split("   #")
            .next()
            .unwrap()
            .replacen("./rocblas-bench", &s.bench, 1);
        script.push_str(&format!("echo '@@line {i}'; {cmd} 2>&1\n"));
    }
    // A control: a line the parser must reject, so "accepted" means something.
    script.push_str(&format!(
        "echo '@@line control'; {} -f gemm_ex --no_such_option 1 2>&1\n",
        s.bench
    ));
    std::fs::write(host.join("run.sh"), script).unwrap();
    let run = s.sh(&format!("sh {inside}/run.sh"));
    let (all, _) = out_text(&run);
    let mut outputs: Vec<(String, String)> = Vec::new();
    for chunk in all.split("@@line ").skip(1) {
        let (id, rest) = chunk.split_once('\n').unwrap_or((chunk, ""));
        outputs.push((id.trim().to_string(), rest.to_string()));
    }
    assert_eq!(outputs.len(), lines.len() + 1, "{}: {all}", s.name);
    let mut bad = Vec::new();
    for (id, text) in &outputs {
        let verdict = bench_verdict(text);
        if id == "control" {
            assert!(
                verdict.is_err(),
                "{}: the control line was not rejected: {text}",
                s.name
            );
        } else if let Err(why) = verdict {
            let i: usize = id.parse().unwrap();
            bad.push(format!("{why}: {}\n  {}", lines[i], text.trim()));
        }
    }
    assert!(
        bad.is_empty(),
        "{}: rocblas-bench ({}) rejected:\n{}",
        s.name,
        s.bench,
        bad.join("\n")
    );
}

pub fn gemm_tune_export_matches_what_the_library_reads(s: &Suite) {
    let (host, inside) = s.scratch("gemm-tune");
    write_rows(s, &host, "override-rows", &bench_keys()[..1]);
    let reads = library_mentions(s, "ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH");
    let (code, out, err) = s.tunedblas(
        &inside,
        &format!(
            "export --lib {LIBDIR}/{} --format gemm-tune --out {inside}/override.csv",
            s.soname
        ),
    );
    let version = tunedblas_core::version::Version::parse(&s.version).unwrap();
    assert_eq!(
        reads,
        version.reads_gemm_override_file(),
        "{}: rocBLAS {} and its strings disagree about ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH",
        s.name,
        s.version
    );
    if reads {
        assert_eq!(code, Some(0), "{}: {out}{err}", s.name);
        let body = std::fs::read_to_string(host.join("override.csv")).unwrap();
        assert_has(&body, "ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH=");
    } else {
        assert_eq!(
            code,
            Some(1),
            "{}: a file rocBLAS {} would ignore: {out}{err}",
            s.name,
            s.version
        );
        assert_has(&err, "does not read ROCBLAS_TENSILE_GEMM_OVERRIDE_PATH");
        assert!(!host.join("override.csv").exists());
    }
    // Both builds read ROCBLAS_INTERNAL_FP16_ALT_IMPL, which keys therefore carry.
    assert!(
        library_mentions(s, tunedblas_core::rocblas::FP16_ALT_IMPL_VAR),
        "{}",
        s.name
    );
}
