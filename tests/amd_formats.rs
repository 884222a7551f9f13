//! End-to-end on the CPU: the AMD stack's own files (issue 27). Each format: a file in the
//! real format is read, its servable rows are served (on the hipBLASLt stand-in,
//! `tests/hosts/fake_hipblaslt.cpp`, or on refblas), its unservable rows are counted and
//! said, and a file of another build is refused. What the real parsers make of the files
//! tunedblas writes is checked in the conformance suite (`tests/conformance/amd.rs`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::build::hiplt;
use common::{assert_has, assert_refused, host_env, scratch, text, trace, Profile};
use tunedblas_core::cublaslt::{op_and_signature, LtKey, R_16BF};
use tunedblas_core::formats::{aiter, hipblaslt_bench, hipblaslt_tuning, lt::Device};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

/// A run of the hipBLASLt test host under the preload, with its calls (`N,M,K`).
fn host(dir: &Path, calls: &[&str]) -> Output {
    let mut cmd = Command::new(&hiplt().host);
    cmd.arg(&hiplt().module).args(calls);
    host_env(&mut cmd, dir, true);
    cmd.env_remove("REFBLAS_TRACE")
        .env_remove("FAKEHIPLT_CANCEL_POINT")
        .env("TUNEDBLAS_STATS", dir.join("stats.json"))
        .env("FAKEHIPLT_TRACE", dir.join("trace.log"));
    let out = cmd.output().expect("run hiplt_host");
    assert!(out.status.success(), "{}", text(&out.stderr));
    out
}

/// The algorithm each matmul ran with, as the stand-in traced it.
fn algos(dir: &Path) -> Vec<String> {
    trace(dir).iter().map(|l| l["algo"].clone()).collect()
}

/// `tunedblas profiles adopt` of `file` for the stand-in's build into `dir/profiles`.
fn adopt(dir: &Path, file: &Path, extra: &[&str]) -> Output {
    Command::new(common::built("tunedblas"))
        .args(["profiles", "adopt", "--lib"])
        .arg(hiplt().lib())
        .arg("--profiles")
        .arg(dir.join("profiles"))
        .args(["--name", "amd"])
        .args(extra)
        .arg(file)
        .output()
        .unwrap()
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// PyTorch's `*` rows on the hipBLASLt path: every token count of the layer takes the
/// row's algorithm, each problem checked for itself, its shape recorded for a row of its own
/// but its calls not missed; an exact row wins; another layer is a miss. (Before `*` rows were read for the Lt backends, every such call missed.)
#[test]
fn wildcard_rows_serve_every_token_count_of_their_layer_through_hipblaslt() {
    let dir = scratch("amd-wildcard");
    let exact = LtKey::linear(R_16BF, 2560, 32, 1536);
    let (op, sig) = op_and_signature(&exact);
    Profile::new(&dir.join("profiles"), "fake-hiplt", &hiplt().sha)
        .validators(&[
            ("PT_VERSION", "2.12.0"),
            ("HIPBLASLT_VERSION", "100100-5ca1ab1e"),
        ])
        .lines(&[
            format!("{op},{sig},Gemm_Hipblaslt_43,0.01"),
            "GemmTunableOp_BFloat16_TN,tn_2560_*_1536_ld_1536_1536_2560,Gemm_Hipblaslt_42,0.01"
                .to_string(),
        ])
        .write();
    let out = host(
        &dir,
        &[
            "2560,16,1536",
            "2560,513,1536",
            "2560,32,1536",
            "2560,16,1537",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(algos(&dir), ["42", "42", "43", "6"], "{stderr}");
    assert_has(
        &stderr,
        "hipBLASLt: 4 calls: 3 served, 0 default, 1 missed (1 shapes)",
    );
    // Every shape without a row of its own is recorded, to be tuned (as PyTorch records a
    // shape a `*` row served as untuned); only the other layer's calls are missed calls.
    assert_eq!(
        common::lt_miss_lines(&dir, "-hipblaslt"),
        [
            "GemmTunableOp_BFloat16_TN,tn_2560_16_1536_ld_1536_1536_2560",
            "GemmTunableOp_BFloat16_TN,tn_2560_513_1536_ld_1536_1536_2560",
            "GemmTunableOp_BFloat16_TN,tn_2560_16_1537_ld_1537_1537_2560",
        ]
    );
}

/// A public AITER table (Gemma 4 on MI355X): its 88 hipblaslt rows are adopted as the
/// profile of this build, its asm and triton rows counted and said once; its indices are
/// not this build's (the stand-in knows 0..=999), so the interposer's check on the first
/// call refuses them and the caller's algorithm runs: nothing wrong is ever served.
#[test]
fn a_public_aiter_table_is_adopted_and_its_foreign_indices_are_refused_at_first_call() {
    let dir = scratch("amd-aiter-public");
    let out = adopt(&dir, &fixture("aiter/gemma4_bf16_tuned_gemm.csv"), &[]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert_has(&said, "adopted 88 rows");
    assert_has(&said, "checked device gfx950 (256 CUs)");
    assert!(
        said.contains("15 lines left out: AITER rows of libtype asm")
            && said.contains("2 lines left out: AITER rows of libtype triton"),
        "{said}"
    );
    let rows = std::fs::read_to_string(dir.join("profiles/amd/tunableop_results0.csv")).unwrap();
    assert_has(&rows, "Validator,GCN_ARCH_NAME,gfx950");
    // AITER's M=1, N=2048, K=5376 row: index 440303.
    assert_has(
        &rows,
        "GemmTunableOp_BFloat16_TN,tn_2048_1_5376_ld_5376_5376_2048,Gemm_Hipblaslt_440303",
    );
    let out = host(&dir, &["2048,1,5376", "2048,1,5376"]);
    assert_eq!(algos(&dir), ["6", "6"], "{}", text(&out.stderr));
    // Another device's rows only: nothing to adopt, said with the counts.
    let other = adopt(
        &scratch("amd-aiter-other"),
        &fixture("aiter/gemma4_bf16_tuned_gemm.csv"),
        &["--arch", "gfx942:304"],
    );
    assert_refused(
        &other,
        1,
        "105 rows tuned on another device (gfx950 (256 CUs))",
    );
}

/// An AITER table tunedblas writes (what `export --format aiter` writes) read back and
/// served: its hipblaslt rows become the rows of the profile and every call takes them.
#[test]
fn aiter_hipblaslt_rows_of_this_build_are_served() {
    let dir = scratch("amd-aiter-served");
    let dev = Device {
        gfx: "gfx942".into(),
        cu_num: Some(304),
    };
    let table = aiter::write(
        &dev,
        &[
            (LtKey::linear(R_16BF, 2560, 16, 1536), 42, 10.5),
            (LtKey::linear(R_16BF, 512, 4, 2560), 7, 3.0),
        ],
    )
    .unwrap();
    let asm_row = "gfx942,304,8,64,64,False,torch.bfloat16,torch.bfloat16,False,False,asm,5,13,7.9,_ZN5aiter4bf16E,0.0,1.0,1.0\n";
    let file = write(&dir, "bf16_tuned_gemm.csv", &format!("{table}{asm_row}"));
    let out = adopt(&dir, &file, &[]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(
        said.contains("adopted 2 rows")
            && said.contains("1 lines left out: AITER rows of libtype asm"),
        "{said}"
    );
    host(&dir, &["2560,16,1536", "512,4,2560", "64,8,64"]);
    assert_eq!(algos(&dir), ["42", "7", "6"]);
}

/// hipBLASLt's own tuning file: adopted when its `Git Version:` is the library's own
/// revision (the stand-in says 5ca1ab1e), and its rows served; another revision's file is
/// refused, as hipBLASLt itself would ignore it, unless --force.
#[test]
fn a_hipblaslt_tuning_file_of_this_build_is_adopted_and_served() {
    let dir = scratch("amd-tuning");
    let rows = [(LtKey::linear(R_16BF, 2560, 16, 1536), 42)];
    let ours = write(
        &dir,
        "tuning.txt",
        &hipblaslt_tuning::write("5ca1ab1e", &rows).unwrap(),
    );
    let out = adopt(&dir, &ours, &[]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert_has(&said, "checked Git Version: matches");
    host(&dir, &["2560,16,1536"]);
    assert_eq!(algos(&dir), ["42"]);

    let other_dir = scratch("amd-tuning-other");
    let theirs = write(
        &other_dir,
        "tuning.txt",
        &hipblaslt_tuning::write("cd957402", &rows).unwrap(),
    );
    let out = adopt(&other_dir, &theirs, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("revision 'cd957402'") && err.contains("'5ca1ab1e'"),
        "{err}"
    );
    assert!(!other_dir.join("profiles/profiles.json").exists());
    let forced = adopt(&other_dir, &theirs, &["--force"]);
    assert_has(&text(&forced.stdout), "MISMATCH, adopted with --force");
    // The documented lines carry no Git Version line: nothing says whose indices they are.
    let doc = adopt(
        &scratch("amd-tuning-doc"),
        &fixture("hipblaslt/offline-tuning-doc.txt"),
        &[],
    );
    assert_refused(&doc, 1, "no `Git Version:` first line");
}

/// HIPBLASLT_LOG_MASK=32 lines run with `--algo_method index` are index rows; lines run
/// with the heuristic name shapes only (counted); an activation epilogue is unservable.
#[test]
fn hipblaslt_bench_lines_with_an_index_are_adopted_and_served() {
    let dir = scratch("amd-bench");
    let key = LtKey::linear(R_16BF, 2560, 16, 1536);
    let log = format!(
        "{}\n{}\n{} --activation_type relu\n",
        hipblaslt_bench::command(&key, Some(42)).unwrap(),
        hipblaslt_bench::command(&LtKey::linear(R_16BF, 512, 4, 2560), None).unwrap(),
        hipblaslt_bench::command(&key, None).unwrap(),
    );
    let file = write(&dir, "hipblaslt.log", &log);
    let out = adopt(&dir, &file, &[]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert_has(&said, "adopted 1 rows");
    assert_has(&said, "1 lines left out: rows that name no algorithm index");
    assert_has(
        &said,
        "1 lines left out: hipblaslt-bench lines for activation epilogues",
    );
    host(&dir, &["2560,16,1536"]);
    assert_eq!(algos(&dir), ["42"]);
}

/// As tune inputs: an AITER untuned table, hipBLASLt log lines and a tuning file name the
/// shapes `tunedblas tune` tunes through rocBLAS (refblas here), and through hipBLASLt
/// (the stand-in) with `--lib` naming it.
#[test]
fn the_amd_formats_are_tune_inputs() {
    let dir = scratch("amd-tune-inputs");
    let untuned = write(
        &dir,
        "bf16_untuned_gemm.csv",
        "M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle\n16,64,40,False,torch.float16,torch.float16,False,False\n8,64,40,False,torch.float16,torch.float16,False,False\n",
    );
    let half = |n, m, k| {
        let mut key = LtKey::linear(tunedblas_core::cublaslt::R_16F, n, m, k);
        key.compute = tunedblas_core::cublaslt::COMPUTE_32F;
        key
    };
    let log = write(
        &dir,
        "hipblaslt.log",
        &format!(
            "{}\n",
            hipblaslt_bench::command(&half(96, 24, 64), None).unwrap()
        ),
    );
    let tuning = write(
        &dir,
        "tuning.txt",
        &hipblaslt_tuning::write("x", &[(half(48, 16, 32), 3)]).unwrap(),
    );
    let lib = common::artifacts().lib4();
    let mut args = vec![
        "tune",
        "--lib",
        lib.to_str().unwrap(),
        untuned.to_str().unwrap(),
        log.to_str().unwrap(),
        tuning.to_str().unwrap(),
        "--json",
    ];
    args.extend(common::QUICK_TUNE);
    let summary: serde_json::Value = serde_json::from_str(&common::ok(&common::run(
        common::tunedblas_cmd(&dir, &args),
    )))
    .unwrap();
    assert_eq!(summary["counts"]["shapes"], 4, "{summary}");

    let lt_dir = scratch("amd-lt-tune-inputs");
    let small = write(
        &lt_dir,
        "bf16_untuned_gemm.csv",
        "M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle\n16,64,64,False,torch.bfloat16,torch.bfloat16,False,False\n",
    );
    let mut cmd = common::tunedblas_cmd(&lt_dir, &["tune", "--lib"]);
    cmd.arg(hiplt().lib())
        .arg(&small)
        .arg("--profiles")
        .arg(lt_dir.join("profiles"))
        .args(["--name", "aiter-shapes", "--workspace", "8192"])
        .args(["--trials", "3", "--rest", "0", "--no-limits"])
        .args(["--confirm", "off", "--rotate-mib", "0.02"])
        .env("FAKEHIPLT_COMPUTE", "1")
        // The heuristic 4 times as slow: the shape gets a row (3 rounds of the stand-in's
        // near-equal algorithms on a busy CPU could leave it undecidable, with none).
        .env("FAKEHIPLT_SLOW_HEURISTIC", "1")
        .env_remove("FAKEHIPLT_TRACE");
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = std::fs::read_to_string(lt_dir.join("profiles/aiter-shapes/tunableop_results0.csv"))
        .unwrap();
    assert_has(&rows, "GemmTunableOp_BFloat16_TN,tn_64_16_64_ld_64_64_64,");
}

/// A hipBLASLt profile written back in the AMD formats (`export`): the override file is
/// headed by the revision of the build the rows were tuned on and holds the index rows;
/// the AITER table is for the profile's device; the bench lines name each row's index.
/// Each written file is adopted again as the same rows (their real parsers are checked in
/// the conformance suite).
#[test]
fn a_hipblaslt_profile_is_written_in_the_amd_formats_and_read_back() {
    let dir = scratch("amd-export");
    let rows = [
        (LtKey::linear(R_16BF, 2560, 16, 1536), 42),
        (LtKey::linear(R_16BF, 512, 4, 2560), 7),
    ];
    let tuning = write(
        &dir,
        "tuning.txt",
        &hipblaslt_tuning::write("5ca1ab1e", &rows).unwrap(),
    );
    assert!(adopt(&dir, &tuning, &[]).status.success());
    let export = |format: &str, extra: &[&str]| {
        let mut args = vec!["export", "--profile", "amd", "--format", format];
        args.extend(extra);
        common::ok(&common::run(common::tunedblas_cmd(&dir, &args)))
    };
    let over = export("hipblaslt-override", &[]);
    assert!(over.starts_with("Git Version: 5ca1ab1e\n"), "{over}");
    let parsed = hipblaslt_tuning::parse(&over);
    let back: Vec<(LtKey, i32)> = parsed
        .entries
        .iter()
        .map(|e| (e.key, e.index.unwrap()))
        .collect();
    assert_eq!(back, rows);
    let table = export("aiter", &["--arch", "gfx942:304"]);
    let again_dir = scratch("amd-export-again");
    let again = write(&again_dir, "t.csv", &table);
    let out = adopt(&again_dir, &again, &[]);
    assert!(
        text(&out.stdout).contains("adopted 2 rows"),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let lines = export("hipblaslt-bench", &[]);
    assert_eq!(
        lines
            .matches("--algo_method index --solution_index 42")
            .count(),
        1,
        "{lines}"
    );
    assert_eq!(
        lines.matches("--algo_method heuristic").count(),
        2,
        "{lines}"
    );
    // Without the device the AITER table cannot be keyed.
    let out = common::run(common::tunedblas_cmd(
        &dir,
        &["export", "--profile", "amd", "--format", "aiter"],
    ));
    assert_refused(&out, 1, "which device");
    // rocBLAS's formats and the report (drawn from rocBLAS keys) refuse it, rather than
    // write a file or a page with none of its rows.
    for args in [
        &["export", "--profile", "amd", "--format", "gemm-tune"][..],
        &["export", "--profile", "amd", "--format", "bench"],
        &["export", "--profile", "amd", "--format", "tunableop"],
        &["report", "--profile", "amd"],
    ] {
        let out = common::run(common::tunedblas_cmd(&dir, args));
        assert_refused(
            &out,
            3,
            "takes rocBLAS profiles; 'amd' is a hipBLASLt profile",
        );
    }
}

/// A TunableOp file tuned on another architecture than the one given is refused before
/// anything is written; its HIPBLASLT_VERSION naming this build is not enough.
#[test]
fn a_tunableop_file_of_another_architecture_is_refused() {
    let dir = scratch("amd-arch");
    let (op, sig) = op_and_signature(&LtKey::linear(R_16BF, 2560, 16, 1536));
    let file = write(
        &dir,
        "tunableop_results0.csv",
        &format!(
            "Validator,PT_VERSION,2.12.0\nValidator,HIPBLASLT_VERSION,100100-5ca1ab1e\nValidator,GCN_ARCH_NAME,gfx942:sramecc+:xnack-\n{op},{sig},Gemm_Hipblaslt_42,0.01\n"
        ),
    );
    let out = adopt(&dir, &file, &["--arch", "gfx950"]);
    assert_refused(&out, 1, "tuned on gfx942:sramecc+:xnack-");
    assert!(!dir.join("profiles/profiles.json").exists());
    let out = adopt(&dir, &file, &["--arch", "gfx942"]);
    let said = text(&out.stdout);
    assert!(
        said.contains("checked HIPBLASLT_VERSION: matches")
            && said.contains("checked GCN_ARCH_NAME: matches"),
        "{said}"
    );
    host(&dir, &["2560,16,1536"]);
    assert_eq!(algos(&dir), ["42"]);
}
