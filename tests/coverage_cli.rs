//! `tunedblas coverage` as a launch script runs it: the built binary, real files, exit codes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{assert_has, repo, target_dir, text, tunedblas};

fn coverage(args: &[&str]) -> Output {
    Command::new(tunedblas())
        .arg("coverage")
        .args(args)
        .output()
        .expect("run tunedblas")
}

fn fixture_profile() -> String {
    repo()
        .join("tests/fixtures/vllm-rdna/rocblas-c27e2252cc7a")
        .display()
        .to_string()
}

fn scratch(name: &str) -> PathBuf {
    let d = target_dir().join(format!("coverage-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

/// The seed's live server configuration, against `profile`.
fn seed_live(profile: &str) -> [&str; 7] {
    [
        "--profile",
        profile,
        "--block-size",
        "1024",
        "--max-num-batched-tokens",
        "2048",
        "--dynamic-prefill",
    ]
}

#[test]
fn the_seed_live_configuration_names_the_256_512_family() {
    let profile = fixture_profile();
    let live = seed_live(&profile);
    let out = coverage(&live);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_has(&stdout, "missing for all 7 shapes: M = 256, 512");
    assert_has(
        &stdout,
        "present at: M = 1024 (5 tuned, 2 Default); 2048 (5 tuned, 2 Default)",
    );

    // A launch script: --strict fails with 3 while shapes are missing.
    let strict = coverage(&[&live[..], &["--strict"]].concat());
    assert_eq!(strict.status.code(), Some(3));

    // The same flags pasted from a vLLM command line after `--`.
    let pasted = coverage(&[
        "--profile",
        &profile,
        "--dynamic-prefill",
        "--",
        "vllm",
        "serve",
        "some/model",
        "--block-size=1024",
        "--max-num-batched-tokens",
        "2048",
        "--port",
        "8000",
    ]);
    assert_eq!(text(&pasted.stdout), stdout);

    // JSON: every problem with its status; the 256/512 rows are missing for all 7 pairs.
    let json = coverage(&[&live[..], &["--json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("valid JSON");
    let problems = v["problems"].as_array().unwrap();
    for m in [256, 512] {
        let at: Vec<&serde_json::Value> = problems.iter().filter(|p| p["m"] == m).collect();
        assert_eq!(at.len(), 7);
        assert!(at.iter().all(|p| p["status"] == "missing"));
    }
    let at_1024: Vec<&str> = problems
        .iter()
        .filter(|p| p["m"] == 1024)
        .map(|p| p["status"].as_str().unwrap())
        .collect();
    assert_eq!(at_1024.iter().filter(|s| **s == "tuned").count(), 5);
    assert_eq!(at_1024.iter().filter(|s| **s == "Default").count(), 2);
    assert_eq!(
        v["summary"]["problems"].as_u64().unwrap() as usize,
        problems.len()
    );
}

#[test]
fn strict_exit_codes_for_launch_scripts() {
    let dir = scratch("strict");
    let shapes = write(&dir, "shapes.csv", "N,K,dtype\n64,32,f16\n");
    // A tiny server: eager decodes of 1 and 2, prefill chunks of 4 tokens.
    let tiny = [
        "--enforce-eager",
        "--max-num-seqs",
        "2",
        "--max-num-batched-tokens",
        "4",
        "--block-size",
        "4",
        "--mix-decodes",
        "0",
    ];
    let profile = |name: &str, rows: &str| -> String {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("tunableop_results0.csv"),
            format!("Validator,PT_VERSION,2.7.0\n{rows}"),
        )
        .unwrap();
        d.display().to_string()
    };
    // A profile with a row for each (token count, solution).
    let with_rows = |name: &str, rows: &[(i64, &str)]| {
        let rows: Vec<String> = rows
            .iter()
            .map(|(m, sol)| format!("GemmTunableOp_Half_TN,tn_64_{m}_32_ld_32_32_64,{sol},0.01\n"))
            .collect();
        profile(name, &rows.concat())
    };
    let run = |p: &str| {
        coverage(
            &[
                &["--shapes", shapes.as_str(), "--profile", p, "--strict"][..],
                &tiny[..],
            ]
            .concat(),
        )
    };

    let full = with_rows(
        "full",
        &[(1, "Gemm_Rocblas_3"), (2, "Default"), (4, "Gemm_Rocblas_4")],
    );
    let out = run(&full);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("3 problems: 2 tuned, 1 Default, 0 missing"));

    let hole = with_rows("hole", &[(1, "Gemm_Rocblas_3"), (4, "Gemm_Rocblas_4")]);
    assert_eq!(run(&hole).status.code(), Some(3));

    let other = with_rows(
        "other",
        &[
            (1, "Gemm_Rocblas_3"),
            (2, "Gemm_Hipblaslt_9"),
            (4, "Default"),
        ],
    );
    let out = run(&other);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stdout));

    // A `*` row covers every token count of its family.
    let wild = profile(
        "wild",
        "GemmTunableOp_Half_TN,tn_64_*_32_ld_32_32_64,Gemm_Rocblas_5,0.01\n",
    );
    assert_eq!(run(&wild).status.code(), Some(0));

    // Without --strict the report is the answer and the exit status 0.
    let out = coverage(
        &[
            &["--shapes", shapes.as_str(), "--profile", hole.as_str()][..],
            &tiny[..],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(0));
    // Bad command lines are 2, unreadable inputs 1.
    assert_eq!(coverage(&["--block-size", "zero"]).status.code(), Some(2));
    assert_eq!(coverage(&["--frobnicate"]).status.code(), Some(2));
    assert_eq!(
        coverage(&["--shapes", "/nonexistent/shapes.csv"])
            .status
            .code(),
        Some(1)
    );
}

#[test]
fn a_hugging_face_config_gives_vllm_layers_per_rank() {
    let dir = scratch("hf");
    write(
        &dir,
        "config.json",
        r#"{"model_type":"qwen2","hidden_size":3584,"intermediate_size":18944,
            "num_attention_heads":28,"num_key_value_heads":4,"num_hidden_layers":28,
            "vocab_size":152064,"torch_dtype":"bfloat16"}"#,
    );
    let out = coverage(&[
        "--config",
        dir.to_str().unwrap(),
        "--tensor-parallel-size",
        "2",
        "--max-num-seqs",
        "8",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shapes: Vec<(String, i64, i64)> = v["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["n"].as_i64().unwrap(),
                s["k"].as_i64().unwrap(),
            )
        })
        .collect();
    // 28 heads x 128 / 2 = 1792 q columns, 4 kv heads / 2 = 2 x 128 each for k and v.
    assert_eq!(
        shapes,
        vec![
            ("qkv_proj".to_string(), 1792 + 2 * 256, 3584),
            ("o_proj".to_string(), 3584, 1792),
            ("gate_up_proj".to_string(), 18944, 3584),
            ("down_proj".to_string(), 3584, 9472),
            ("lm_head".to_string(), 76032, 3584),
        ]
    );
    // Without a profile everything is missing, and lm_head only sees sampled tokens.
    let problems = v["problems"].as_array().unwrap();
    assert!(problems.iter().all(|p| p["status"] == "missing"));
    let lm_max = problems
        .iter()
        .filter(|p| p["n"] == 76032)
        .map(|p| p["m"].as_i64().unwrap())
        .max();
    assert_eq!(lm_max, Some(8));
    assert!(problems[0]["signature"]
        .as_str()
        .unwrap()
        .starts_with("tn_"));
}

/// `--out` writes the missing problems as a `tune` input, and `tune`'s reader takes every
/// line of it: the prediction closes the loop.
#[test]
fn out_writes_the_missing_problems_as_a_tune_input() {
    let profile = fixture_profile();
    let dir = scratch("out");
    let file = dir.join("missing.csv");
    let out = coverage(
        &[
            &seed_live(&profile)[..],
            &["--json", "--out", file.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let missing = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["status"] == "missing")
        .count();
    assert!(missing > 0);
    let written = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), missing, "{written}");
    // Each line is a shape tune reads (the untuned-file form).
    let log = tunedblas_core::misses::file::parse(&written);
    assert_eq!(log.keys().count(), missing, "{written}");
}
