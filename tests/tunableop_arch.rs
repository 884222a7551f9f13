//! TunableOp files and the device's architecture (issue 26): a file whose `GCN_ARCH_NAME`
//! names another GPU architecture was adopted and shown by `profiles which` with no word,
//! although PyTorch drops it (and its solution ids name that architecture's kernels).
//! `--arch` stands for the device here: refblas has none, and this machine shows no AMD GPU
//! to the driver's topology (where one does, it is the default).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

const GOOD: &str = "ex:TN:h:64:24:40";
const V4: &str = "4.4.0.5f2e9c71";

/// A results file as PyTorch writes it on a device of `arch`, for refblas v4.
fn pytorch_file(dir: &Path, arch: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let good = non_heuristic_solutions(&artifacts().host4, GOOD)[0];
    let text = format!(
        "Validator,PT_VERSION,2.7.0\nValidator,ROCBLAS_VERSION,{V4}\nValidator,HIPBLASLT_VERSION,1.0.0\nValidator,GCN_ARCH_NAME,{arch}\n{}\n",
        row(GOOD, &format!("Gemm_Rocblas_{good}"))
    );
    let f = dir.join("tunableop_results0.csv");
    std::fs::write(&f, text).unwrap();
    f
}

fn profiles(dir: &Path, args: &[&str]) -> std::process::Output {
    let lib = artifacts().lib4();
    let mut all = vec!["profiles"];
    all.extend_from_slice(&args[..1]);
    all.extend(["--lib", lib.to_str().unwrap()]);
    all.extend_from_slice(&args[1..]);
    run(tunedblas_cmd(dir, &all))
}

#[test]
fn adopt_refuses_a_file_of_another_architecture_unless_forced() {
    let dir = scratch("arch-adopt");
    let file = pytorch_file(&dir.join("pytorch"), "gfx942:sramecc+:xnack-");
    let f = file.to_str().unwrap();
    let out = profiles(&dir, &["adopt", "--arch", "gfx90a", f]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert_has(&err, &format!("refusing {f}: its GCN_ARCH_NAME is gfx942:sramecc+:xnack-, --arch says gfx90a: PyTorch drops a file tuned on another architecture"));
    assert_has(&err, "--force adopts it anyway");
    assert!(
        !dir.join("profiles/rocblas-4.4.0.5f2e9c71").exists(),
        "nothing written"
    );
    // The device's own architecture (its feature flags are not compared): adopted.
    let out = ok(&profiles(&dir, &["adopt", "--arch", "gfx942", f]));
    assert_has(&out, "GCN_ARCH_NAME gfx942:sramecc+:xnack-: --arch gfx942");
    assert_has(&out, "adopted 1 rows");
    // Forced, with what it overrode said.
    let dir = scratch("arch-adopt-force");
    let file = pytorch_file(&dir.join("pytorch"), "gfx942");
    let out = ok(&profiles(
        &dir,
        &[
            "adopt",
            "--arch",
            "gfx1100",
            "--force",
            file.to_str().unwrap(),
        ],
    ));
    assert_has(
        &out,
        "adopted with --force although its GCN_ARCH_NAME is gfx942, --arch says gfx1100",
    );
}

#[test]
fn which_says_a_file_by_path_was_tuned_on_another_architecture() {
    let dir = scratch("arch-which");
    let file = pytorch_file(&dir.join("pytorch"), "gfx942");
    let which = |extra: &[&str]| {
        let lib = artifacts().lib4();
        let mut args = vec!["profiles", "which", lib.to_str().unwrap()];
        args.extend_from_slice(extra);
        let mut cmd = tunedblas_cmd(&dir, &args);
        cmd.env("TUNEDBLAS_PROFILE", &file);
        run(cmd)
    };
    let out = ok(&which(&["--arch", "gfx90a"]));
    assert_has(
        &out,
        &format!(
            "{}: WRONG ARCHITECTURE: its GCN_ARCH_NAME is gfx942, --arch says gfx90a",
            file.display()
        ),
    );
    assert_has(&out, "the interposer serves it all the same today");
    let v: Value = serde_json::from_str(&ok(&which(&["--arch", "gfx90a", "--json"]))).unwrap();
    assert_eq!(v["arch"][0]["check"]["verdict"], "other", "{v}");
    let v: Value = serde_json::from_str(&ok(&which(&["--arch", "gfx942", "--json"]))).unwrap();
    assert_eq!(v["arch"][0]["check"]["verdict"], "same", "{v}");
    // With no --arch: this machine's GPUs, where the driver shows any.
    let out = ok(&which(&[]));
    if !Path::new("/sys/class/kfd/kfd/topology/nodes").exists() {
        assert_has(
            &out,
            "GCN_ARCH_NAME gfx942 not checked: no AMD GPU is visible here",
        );
    }
}
