//! A campaign spread over a fleet, on refblas: `tune --shard auto` in each task of a
//! Kubernetes Indexed Job and of a Slurm job array (their variables set as the engines set
//! them, docs/fleet.md), each task into its own store, then `merge` of every store: every
//! shape tuned exactly once, no row lost. A missing or inconsistent variable is refused
//! with the variables named, before anything is tuned.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

const QUICK: &[&str] = &["--trials", "3", "--max-trials", "3", "--rotate-mib", "1"];

/// Seven small f16 linear layers (refblas computes them on the CPU).
const SHAPES: &[&str] = &[
    "f16:TN:64:8:40",
    "f16:TN:64:16:40",
    "f16:TN:96:8:32",
    "f16:TN:96:24:32",
    "f16:TN:48:4:64",
    "f16:TN:48:12:64",
    "f16:TN:80:8:48",
];

/// The variables of both engines, removed from every run: a test must not pick up the
/// job it may itself be running in.
const ENGINE_VARS: &[&str] = &[
    "JOB_COMPLETION_INDEX",
    "JOB_COMPLETIONS",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
];

fn tune(dir: &Path, store: &Path, env: &[(&str, String)]) -> Output {
    let store = store.to_str().unwrap();
    let args = ["--profiles", store, "--shard", "auto", "--json"];
    let mut cmd = lib_cmd(dir, "tune", &artifacts().lib4(), &args);
    for s in SHAPES {
        cmd.args(["--shape", *s]);
    }
    cmd.args(QUICK);
    for v in ENGINE_VARS {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(cmd)
}

/// The (op, signature) of every row of a store's one profile, rank 0.
fn rows_of(store: &Path) -> Vec<String> {
    rank_rows(&profile_dir(store), 0)
        .into_iter()
        .map(|(key, _)| key)
        .collect()
}

fn merge(dir: &Path, into: &Path, shards: &[PathBuf]) -> Output {
    let mut cmd = Command::new(tunedblas());
    cmd.args(["merge", "--lib"])
        .arg(artifacts().lib4())
        .arg("--profiles")
        .arg(into)
        .args(shards);
    host_env(&mut cmd, dir, false);
    cmd.env_remove("REFBLAS_TRACE");
    run(cmd)
}

/// The profile folder of a store's one profile.
fn profile_dir(store: &Path) -> PathBuf {
    let reg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(store.join("profiles.json")).unwrap())
            .unwrap();
    let profiles = reg["profiles"].as_object().unwrap();
    assert_eq!(profiles.len(), 1, "{reg}");
    store.join(profiles.values().next().unwrap()["dir"].as_str().unwrap())
}

/// The shapes a store's campaign measured (rows or not: an undecidable shape writes none).
fn shapes_of(store: &Path) -> Vec<String> {
    let prov: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(profile_dir(store).join("provenance.json")).unwrap(),
    )
    .unwrap();
    prov["campaigns"][0]["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["shape"].as_str().unwrap().to_string())
        .collect()
}

/// Each engine's tasks, then the merge: the shards split the shapes with no overlap and no
/// gap, and the merged profile holds every row every shard wrote.
fn campaign(engine: &str, tasks: Vec<Vec<(&str, String)>>) {
    let dir = scratch(&format!("fleet-{engine}"));
    let mut stores = Vec::new();
    let mut tuned: Vec<String> = Vec::new();
    let mut rows: BTreeSet<String> = BTreeSet::new();
    for (i, env) in tasks.iter().enumerate() {
        let store = dir.join(format!("shards/{engine}-{i}"));
        let summary: serde_json::Value =
            serde_json::from_str(&ok(&tune(&dir, &store, env))).unwrap();
        let shapes = shapes_of(&store);
        assert_eq!(summary["counts"]["shapes"], shapes.len(), "{summary}");
        for s in &shapes {
            assert!(!tuned.contains(s), "{s} tuned by two shards");
        }
        tuned.extend(shapes);
        rows.extend(rows_of(&store));
        stores.push(store);
    }
    let all: BTreeSet<String> = SHAPES.iter().map(|s| shape_row(s)).collect();
    assert_eq!(
        tuned.iter().cloned().collect::<BTreeSet<_>>(),
        all,
        "every shape in exactly one shard"
    );
    assert_eq!(tuned.len(), SHAPES.len());
    let merged = dir.join("merged");
    let said = ok(&merge(&dir, &merged, &stores));
    assert_has(&said, &format!("{} rows added", rows.len()));
    let got: BTreeSet<String> = rows_of(&merged).into_iter().collect();
    assert_eq!(got, rows, "nothing lost in the merge");
}

/// The `op,signature` a `--shape` spec is tuned as.
fn shape_row(spec: &str) -> String {
    let f: Vec<&str> = spec.split(':').collect();
    let (m, n, k): (i64, i64, i64) = (
        f[2].parse().unwrap(),
        f[3].parse().unwrap(),
        f[4].parse().unwrap(),
    );
    let key = tunedblas_core::key::ProblemKey::single(
        tunedblas_core::key::Trans::T,
        tunedblas_core::key::Trans::N,
        tunedblas_core::key::Types::HALF,
        m,
        n,
        k,
        k,
        k,
        m,
        m,
        0,
    );
    let (op, sig) = tunedblas_core::tunableop::op_and_signature(&key);
    format!("{op},{sig}")
}

#[test]
fn a_kubernetes_indexed_job_tunes_every_shape_once_and_merges_whole() {
    let n = 3;
    let tasks = (0..n)
        .map(|i| {
            vec![
                ("JOB_COMPLETION_INDEX", i.to_string()),
                ("JOB_COMPLETIONS", n.to_string()),
            ]
        })
        .collect();
    campaign("k8s", tasks);
}

#[test]
fn a_slurm_job_array_tunes_every_shape_once_and_merges_whole() {
    // sbatch --array=1-3: ids 1..3, as Slurm sets them.
    let tasks = (1..=3)
        .map(|id| {
            vec![
                ("SLURM_ARRAY_TASK_ID", id.to_string()),
                ("SLURM_ARRAY_TASK_COUNT", "3".to_string()),
                ("SLURM_ARRAY_TASK_MIN", "1".to_string()),
                ("SLURM_ARRAY_TASK_MAX", "3".to_string()),
                ("SLURM_ARRAY_TASK_STEP", "1".to_string()),
            ]
        })
        .collect();
    campaign("slurm", tasks);
}

/// No engine, or half of one: a usage error (exit 2) naming the variables, nothing tuned;
/// and a merge missing a shard's store writes nothing.
#[test]
fn shard_auto_without_a_job_engine_is_refused_and_a_merge_is_all_or_nothing() {
    let dir = scratch("fleet-refused");
    let store = dir.join("store");
    let out = tune(&dir, &store, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    for v in &ENGINE_VARS[..4] {
        assert_has(&err, v);
    }
    let out = tune(&dir, &store, &[("JOB_COMPLETION_INDEX", "1".into())]);
    assert_eq!(out.status.code(), Some(2));
    assert_has(&text(&out.stderr), "JOB_COMPLETIONS");
    assert!(!store.join("profiles.json").exists(), "nothing tuned");

    let one = dir.join("one");
    ok(&tune(
        &dir,
        &one,
        &[
            ("JOB_COMPLETION_INDEX", "0".into()),
            ("JOB_COMPLETIONS", "2".into()),
        ],
    ));
    let merged = dir.join("merged");
    let out = merge(&dir, &merged, &[one, dir.join("never-written")]);
    assert!(!out.status.success());
    assert!(
        !merged.join("profiles.json").exists()
            || !std::fs::read_to_string(merged.join("profiles.json"))
                .unwrap()
                .contains("lib_sha256"),
        "a merge that cannot read every shard writes nothing"
    );
}
