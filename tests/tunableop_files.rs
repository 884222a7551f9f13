//! PyTorch TunableOp results files by path (issue 16): `profiles import` keeps the shapes of
//! hipBLASLt-tuned and tf32 rows and says what it skipped, `profiles show` counts the rows the
//! interposer cannot serve, `profiles adopt` turns a file PyTorch wrote on this machine into
//! the loaded build's profile (ids checked with `check_solution_index`), and
//! `TUNEDBLAS_PROFILE=/path` serves such a file for the build its validator names.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// A file of the vLLM fixture (real data, see tests/fixtures/vllm-rdna/SOURCE.md).
fn vllm(rel: &str) -> String {
    let p = repo().join("tests/fixtures/vllm-rdna").join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The fixture's rows with every solution replaced by a hipBLASLt one, as PyTorch writes
/// them on a GPU where hipBLASLt wins (most rows of public ROCm files).
fn as_hipblaslt(text: &str) -> (String, usize) {
    let mut out = String::new();
    let mut rows = 0;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("Validator,") {
            out.push_str(line);
        } else {
            let f: Vec<&str> = line.splitn(4, ',').collect();
            out.push_str(&format!(
                "{},{},Gemm_Hipblaslt_{},{}",
                f[0],
                f[1],
                1000 + i,
                f[3]
            ));
            rows += 1;
        }
        out.push('\n');
    }
    (out, rows)
}

fn import(dir: &Path, files: &[&Path]) -> String {
    let lib = artifacts().lib5();
    let mut args = vec!["profiles", "import", "--lib", lib.to_str().unwrap()];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    ok(&run(tunedblas_cmd(dir, &args)))
}

fn waiting(dir: &Path) -> Vec<String> {
    let list = dir.join("profiles/rocblas-5.6.0.c83a10d4/imported_shapes.csv");
    std::fs::read_to_string(&list)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn import_keeps_the_shapes_of_hipblaslt_rows() {
    let dir = scratch("tof-import-lt");
    // The fixture as written: 70 rows, rocBLAS and Default solutions.
    let original = dir.join("c27e.csv");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        &original,
        vllm("rocblas-c27e2252cc7a/tunableop_results0.csv"),
    )
    .unwrap();
    // The same shapes tuned with hipBLASLt: before issue 16, 0 were imported.
    let (lt_text, rows) = as_hipblaslt(&vllm("rocblas-c27e2252cc7a/tunableop_results0.csv"));
    assert_eq!(rows, 70);
    let lt = dir.join("c27e-hipblaslt.csv");
    std::fs::write(&lt, lt_text).unwrap();
    let out = import(&dir, &[&lt]);
    assert_has(&out, "70 new shapes imported");
    assert_has(&out, "70 shapes taken from hipBLASLt-tuned rows");
    assert_eq!(waiting(&dir).len(), 70);
    // The original names the same 70 shapes: none new, and said so.
    let out = import(&dir, &[&original]);
    assert_has(&out, "0 new shapes imported");
    assert_has(&out, "70 shapes were already waiting");
    assert_eq!(waiting(&dir).len(), 70);
    assert!(waiting(&dir).iter().all(|l| !l.contains("Hipblaslt")));
}

#[test]
fn import_takes_tf32_shapes_and_counts_what_it_skips_by_reason() {
    let dir = scratch("tof-import-tf32");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("tf32.csv");
    std::fs::write(
        &f,
        "\
Validator,PT_VERSION,2.7.0
Validator,ROCBLAS_VERSION,4.4.0.5f2e9c71
GemmTunableOp_tf32_NN,nn_64_32_16_ld_64_16_64,Gemm_Hipblaslt_17,0.01
GemmTunableOp_tf32_TN,tn_128_8_64,Gemm_Hipblaslt_18,inf
GemmAndBiasTunableOp_BFloat16_TN,tn_16_16_16_ld_16_16_16,Gemm_Hipblaslt_3,0.2
GemmAndBiasTunableOp_BFloat16_TN,tn_32_16_16_ld_16_16_32,Default,0.2
ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_Half_TN,tn_16_16_16_ld_16_16_16_rw_0_bias_None,Gemm_Hipblaslt_7,0.1
GemmTunableOp_Half_TN,tn_*_32_16_ld_16_16_*,Default,0.1
GemmTunableOp_Half_TN,tn_8_-4_16,Default,0.1
GemmTunableOp_tf32_NN,nn_64_32_16_ld_64_16_64,Gemm_Hipblaslt_19,0.01
",
    )
    .unwrap();
    let out = import(&dir, &[&f]);
    assert_has(&out, "2 new shapes imported");
    assert_has(&out, "2 shapes taken from tf32 rows, as f32 GEMMs");
    for line in [
        "2 rows skipped: GemmAndBias",
        "1 rows skipped: ScaledGemm",
        "1 rows skipped: a `*` row names no concrete shape",
        "1 rows skipped: a later row for a shape an earlier row named",
        "1 rows skipped: unreadable line",
    ] {
        assert!(out.contains(line), "{line:?} in\n{out}");
    }
    let w = waiting(&dir);
    assert_eq!(
        w,
        vec![
            "GemmTunableOp_float_NN,nn_64_32_16_ld_64_16_64".to_string(),
            "GemmTunableOp_float_TN,tn_128_8_64_ld_64_64_128".to_string(),
        ]
    );
}

#[test]
fn show_counts_the_rows_the_interposer_cannot_serve() {
    let dir = scratch("tof-show");
    let id = non_heuristic_solutions(&artifacts().host4, "ex:TN:h:64:24:40")[0];
    Profile::v4(&dir)
        .tuned("ex:TN:h:64:24:40", id)
        .row("ex:TN:h:32:8:48", "Gemm_Hipblaslt_12")
        .row("ex:TN:h:96:16:64", "Gemm_Hipblaslt_13")
        .line("GemmTunableOp_tf32_NN,nn_64_32_16_ld_64_16_64,Gemm_Hipblaslt_19,0.01")
        .row("ex:TN:h:48:1:64", "Default")
        .ranks(2)
        .write();
    let out = ok(&run(tunedblas_cmd(&dir, &["profiles", "show", "ref-v4"])));
    for line in [
        "unservable rank 0: 2 rows: hipBLASLt solution: the rocBLAS interposer cannot serve it",
        "unservable rank 0: 1 rows: tf32 GEMM",
        "unservable rank 1: 2 rows: hipBLASLt solution",
    ] {
        assert!(out.contains(line), "{line:?} in\n{out}");
    }
    let json = ok(&run(tunedblas_cmd(
        &dir,
        &["profiles", "show", "ref-v4", "--json"],
    )));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["unservable"].as_array().unwrap().len(), 4, "{v}");
}

/// A results file as PyTorch writes it on a machine with refblas v4 loaded.
fn pytorch_file(dir: &Path, version: &str, rows: &[String]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let mut text = format!(
        "Validator,PT_VERSION,2.7.0\nValidator,ROCBLAS_VERSION,{version}\nValidator,HIPBLASLT_VERSION,1.0.0\nValidator,GCN_ARCH_NAME,gfx1030\n"
    );
    for r in rows {
        text.push_str(r);
        text.push('\n');
    }
    let f = dir.join("tunableop_results0.csv");
    std::fs::write(&f, text).unwrap();
    f
}

const GOOD: &str = "ex:TN:h:64:24:40";
const BAD: &str = "ex:TN:h:32:8:48";
const LT: &str = "ex:TN:h:96:16:64";
const DEFAULT: &str = "ex:TN:h:48:1:64";
const V4: &str = "4.4.0.5f2e9c71";

fn adopt_cmd(dir: &Path, file: &Path) -> Command {
    let lib = artifacts().lib4();
    tunedblas_cmd(
        dir,
        &[
            "profiles",
            "adopt",
            "--lib",
            lib.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
    )
}

#[test]
fn adopt_keeps_ids_this_build_accepts_and_lists_the_others() {
    let dir = scratch("tof-adopt");
    let good = non_heuristic_solutions(&artifacts().host4, GOOD)[0];
    // An id refblas does not have for any problem.
    let bad = 987_654_321;
    let file = pytorch_file(
        &dir.join("pytorch"),
        V4,
        &[
            row(GOOD, &format!("Gemm_Rocblas_{good}")),
            row(BAD, &format!("Gemm_Rocblas_{bad}")),
            row(LT, "Gemm_Hipblaslt_44"),
            row(DEFAULT, "Default").replace(",0.01", ",inf"),
        ],
    );
    let out = ok(&run(adopt_cmd(&dir, &file)));
    assert_has(
        &out,
        &format!(
            "refused {}",
            row(BAD, &format!("Gemm_Rocblas_{bad}"))
                .rsplit_once(',')
                .unwrap()
                .0
        ),
    );
    assert_has(&out, "adopted 2 rows");
    assert_has(&out, "1 refused by check_solution_index");
    let folder = dir.join("profiles/rocblas-4.4.0.5f2e9c71");
    let rows = rank_rows(&folder, 0);
    let sol = |spec: &str| {
        let key = row(spec, "x");
        let key = key.rsplitn(3, ',').nth(2).unwrap().to_string();
        rows.iter().find(|(k, _)| *k == key).map(|(_, s)| s.clone())
    };
    assert_eq!(sol(GOOD), Some(format!("Gemm_Rocblas_{good}")), "{rows:?}");
    assert_eq!(sol(DEFAULT), Some("Default".into()), "{rows:?}");
    assert_eq!(sol(BAD), None, "{rows:?}");
    assert_eq!(sol(LT), None, "{rows:?}");
    // The refused row and the hipBLASLt row wait for tuning.
    let waiting = std::fs::read_to_string(folder.join("imported_shapes.csv")).unwrap();
    assert_eq!(waiting.lines().count(), 2, "{waiting}");
    let text = std::fs::read_to_string(folder.join("tunableop_results0.csv")).unwrap();
    assert_has(&text, &format!("Validator,ROCBLAS_VERSION,{V4}"));

    // The adopted profile is served under the preload (the registry names the build).
    let run_dir = dir.clone();
    let cmd = host4_cmd(&run_dir, true, &[GOOD]);
    let out = run(cmd);
    assert!(out.status.success(), "{}", text_of(&out));
    let t = trace(&run_dir);
    assert_eq!(t[0]["solution"], good.to_string(), "{}", text_of(&out));
    assert_eq!(t[0]["heuristic"], "0");
}

#[test]
fn adopt_refuses_a_file_made_with_another_rocblas() {
    let dir = scratch("tof-adopt-other");
    let file = pytorch_file(
        &dir.join("pytorch"),
        "5.6.0.c83a10d4",
        &[row(GOOD, "Gemm_Rocblas_3")],
    );
    let out = run(adopt_cmd(&dir, &file));
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert_has(&err, "Validator ROCBLAS_VERSION is 5.6.0.c83a10d4");
    assert_has(&err, "profiles import");
    assert!(!dir.join("profiles/profiles.json").exists());
}

fn text_of(out: &std::process::Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// A host run of `spec` under the preload with `TUNEDBLAS_PROFILE=<path>`.
fn host_with_path(
    dir: &Path,
    spec: &str,
    path: &Path,
) -> (String, Vec<std::collections::HashMap<String, String>>) {
    let mut cmd = host4_cmd(dir, true, &[spec]);
    cmd.env("TUNEDBLAS_PROFILE", path);
    let out = run(cmd);
    assert!(out.status.success(), "{}", text_of(&out));
    (text(&out.stderr), trace(dir))
}

#[test]
fn a_path_serves_pytorch_files_whose_rocblas_version_is_the_loaded_one() {
    let good = non_heuristic_solutions(&artifacts().host4, GOOD)[0];
    let rows = [
        row(GOOD, &format!("Gemm_Rocblas_{good}")),
        row(DEFAULT, "Default").replace(",0.01", ",inf"),
    ];
    // A folder, and the rank file itself.
    for by_file in [false, true] {
        let dir = scratch(&format!("tof-path-{by_file}"));
        let file = pytorch_file(&dir.join("pytorch"), V4, &rows);
        let path = if by_file { file } else { dir.join("pytorch") };
        let (err, t) = host_with_path(&dir, GOOD, &path);
        assert_has(&err, "selected by TUNEDBLAS_PROFILE");
        assert!(!err.contains("time_ms"), "Default,inf is read: {err}");
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(t[0]["solution"], good.to_string(), "{err}");
        assert_eq!(t[0]["heuristic"], "0");
    }
}

/// The command a refusal names (the text between backquotes after `what`), with the
/// library filled in, run in `dir`'s environment.
fn run_the_hint(dir: &std::path::Path, err: &str, what: &str) -> std::process::Output {
    let start = err
        .find(&format!("`tunedblas profiles {what}"))
        .unwrap_or_else(|| panic!("{err}"));
    let cmd = &err[start + 1..];
    let cmd = &cmd[..cmd.find('`').unwrap()];
    let lib = artifacts().lib4();
    let words: Vec<String> = cmd
        .split_whitespace()
        .skip(1)
        .map(|w| w.replace("<librocblas.so>", lib.to_str().unwrap()))
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    run(tunedblas_cmd(dir, &words))
}

#[test]
fn a_path_made_with_another_rocblas_is_refused_and_names_a_command_that_works() {
    let good = non_heuristic_solutions(&artifacts().host4, GOOD)[0];
    let rows = [row(GOOD, &format!("Gemm_Rocblas_{good}"))];
    let dir = scratch("tof-path-other");
    let folder = pytorch_file(&dir.join("pytorch"), "5.6.0.c83a10d4", &rows)
        .parent()
        .unwrap()
        .to_path_buf();
    let (err, t) = host_with_path(&dir, GOOD, &folder);
    assert_has(&err, "refusing TUNEDBLAS_PROFILE=");
    assert_has(
        &err,
        "Validator ROCBLAS_VERSION is 5.6.0.c83a10d4, but the loaded rocBLAS is 4.4.0",
    );
    assert_eq!(t[0]["heuristic"], "1", "nothing served");
    // Another build's ids: its shapes can be imported to tune, and the command given works
    // as written, for the folder named.
    let out = run_the_hint(&dir, &err, "import");
    assert!(out.status.success(), "{}", text(&out.stderr));

    // No validator at all: refused too; its shapes can be imported (the file named).
    let dir = scratch("tof-path-none");
    std::fs::create_dir_all(dir.join("pytorch")).unwrap();
    std::fs::write(
        dir.join("pytorch/tunableop_results0.csv"),
        format!("{}\n", rows[0]),
    )
    .unwrap();
    let (err, t) = host_with_path(&dir, GOOD, &dir.join("pytorch"));
    assert_has(&err, "has no Validator ROCBLAS_VERSION");
    assert_eq!(t[0]["heuristic"], "1");
    let out = run_the_hint(&dir, &err, "import");
    assert!(
        !text(&out.stderr).contains("Is a directory"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A path that does not exist says so, and no command to run.
    let (err, _) = host_with_path(&dir, GOOD, &dir.join("nowhere"));
    assert!(err.contains("no such file or folder"), "{err}");
    assert!(!err.contains("tunedblas profiles"), "{err}");

    // The same folder as TUNEDBLAS_PROFILE_DIR: no registry there, and the line says what to set.
    let mut cmd = host4_cmd(&dir, true, &[GOOD]);
    cmd.env("TUNEDBLAS_PROFILE_DIR", dir.join("pytorch"));
    let out = run(cmd);
    let err = text(&out.stderr);
    assert_has(
        &err,
        "holds TunableOp results files but no profiles.json: set TUNEDBLAS_PROFILE=",
    );
}

#[test]
fn profiles_which_follows_a_path_as_the_interposer_does() {
    let dir = scratch("tof-path-which");
    let file = pytorch_file(&dir.join("pytorch"), V4, &[row(DEFAULT, "Default")]);
    let lib = artifacts().lib4();
    let mut cmd = tunedblas_cmd(&dir, &["profiles", "which", lib.to_str().unwrap()]);
    cmd.env("TUNEDBLAS_PROFILE", &file);
    let out = ok(&run(cmd));
    assert_has(&out, "selected by TUNEDBLAS_PROFILE");
    let lib5 = artifacts().lib5();
    let mut cmd = tunedblas_cmd(&dir, &["profiles", "which", lib5.to_str().unwrap()]);
    cmd.env("TUNEDBLAS_PROFILE", &file);
    let out = ok(&run(cmd));
    assert_has(&out, "-> no profile: refusing TUNEDBLAS_PROFILE=");
}
