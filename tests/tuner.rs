//! The tuning engine's one pipeline, shown on every library's stand-in: one matrix of tests
//! written once and run over refblas (rocBLAS), the cuBLASLt stand-in and the hipBLASLt
//! stand-in (`tests/hosts/fake_*`), each through `tunedblas tune` as a user runs it. Each
//! test shows, for each backend: fresh-process confirmation, limits per shape, the rest
//! between samples, one worker per device, and the bounded search.

mod common;

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output};

use common::{assert_has, ok, samples_device_ms, scratch, text};
use serde_json::Value;

/// One library's stand-in, as the tests drive it.
struct Backend {
    /// `--lib` and its runtime's option.
    args: Vec<OsString>,
    /// What makes the stand-in compute, and its heuristic beatable.
    env: Vec<(&'static str, String)>,
    /// Two `--shape`s whose heuristic the stand-in's other algorithms beat.
    shapes: [&'static str; 2],
    /// The variable and value that make the stand-in's runtime see two devices.
    two_devices: (&'static str, &'static str),
    /// What, beside leaving out `env`, makes the library compute nothing, so that no
    /// shape can be tuned (the heuristic's own result is wrong).
    broken: &'static [(&'static str, &'static str)],
}

fn os(v: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    v.iter().map(|s| s.as_ref().to_os_string()).collect()
}

/// refblas, speaking rocBLAS's ABI, with its own emulated HIP (its heuristic's kernel
/// computing each GEMM 4 times: a gap no busy CPU's noise hides).
fn refblas() -> Backend {
    Backend {
        args: os(&[&"--lib", &common::artifacts().lib5()]),
        env: vec![("REFBLAS_SLOW_HEURISTIC", "4".into())],
        shapes: ["f32:NN:32:16:32", "f16:TN:64:8:64"],
        two_devices: ("REFBLAS_DEVICES", "2"),
        broken: &[("REFBLAS_NO_COMPUTE", "1")],
    }
}

/// The cuBLASLt stand-in and the CUDA runtime stand-in.
fn cublaslt() -> Backend {
    Backend {
        args: os(&[
            &"--lib",
            &common::lt::cublaslt().lib(),
            &"--cudart",
            &common::lt::cudart(),
        ]),
        env: vec![
            ("FAKELT_COMPUTE", "1".into()),
            ("FAKELT_SLOW_HEURISTIC", "1".into()),
        ],
        shapes: ["64,4,64", "64,8,64"],
        two_devices: ("FAKECUDA_DEVICES", "2"),
        broken: &[],
    }
}

/// The hipBLASLt stand-in and the HIP runtime stand-in it links.
fn hipblaslt() -> Backend {
    Backend {
        args: os(&[
            &"--lib",
            &common::lt::hipblaslt().lib(),
            &"--workspace",
            &"8192",
        ]),
        env: vec![
            ("FAKEHIPLT_COMPUTE", "1".into()),
            ("FAKEHIPLT_SLOW_HEURISTIC", "1".into()),
        ],
        shapes: ["64,16,64", "64,8,64"],
        two_devices: ("FAKEHIP_DEVICE", "1"),
        broken: &[],
    }
}

/// Short campaigns: few rounds, one operand set, a bounded search; what a test shows it
/// turns on again (the rest, the limits).
const QUICK: &[&str] = &[
    "--trials",
    "7",
    "--rotate-mib",
    "0.02",
    "--budget",
    "2",
    "--rest",
    "0",
];

impl Backend {
    /// `tunedblas <args>` against this backend's stand-in, in `dir`.
    fn cmd(&self, dir: &Path, args: &[&str]) -> Command {
        let mut cmd = common::tunedblas_cmd(dir, args);
        cmd.args(&self.args);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        for v in common::LT_LIBRARY_VARS {
            cmd.env_remove(v);
        }
        cmd
    }

    /// `tunedblas tune` of the first `shapes` shapes into the store `store`, quick, then
    /// `extra` (later options win).
    fn tune(&self, dir: &Path, store: &str, shapes: usize, extra: &[&str]) -> Output {
        let mut cmd = self.cmd(dir, &["tune"]);
        for s in &self.shapes[..shapes] {
            cmd.args(["--shape", s]);
        }
        cmd.arg("--profiles")
            .arg(dir.join(store))
            .args(QUICK)
            .args(extra);
        cmd.output().expect("run tunedblas tune")
    }
}

/// The finished campaign's record of the only profile in `store`: its outcomes.
fn outcomes(store: &Path) -> Vec<Value> {
    let reg: Value =
        serde_json::from_slice(&std::fs::read(store.join("profiles.json")).unwrap()).unwrap();
    let (_, entry) = reg["profiles"].as_object().unwrap().iter().next().unwrap();
    let dir = store.join(entry["dir"].as_str().unwrap()).join("campaigns");
    let record = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_to_string(record)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn adopted(o: &Value) -> Option<&str> {
    (o["tuned"]["verdict"]["decision"] == "adopt")
        .then(|| o["tuned"]["verdict"]["row"].as_str())
        .flatten()
}

/// Every adoption is re-measured by a fresh `tunedblas confirm` process and stands only
/// where it keeps the margin there; by hand, `confirm` says the adopted row still wins.
fn fresh_process_confirms_every_adoption(b: &Backend, dir: &Path) {
    let out = b.tune(dir, "profiles", 1, &[]);
    ok(&out);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("re-measured in a fresh process") && stderr.contains("confirm)"),
        "{stderr}\n{}",
        text(&out.stdout)
    );
    assert_has(
        &stderr,
        "fresh process: 1 of 1 proposed rows confirmed by the 3% margin, 0 withdrawn",
    );
    let o = &outcomes(&dir.join("profiles"))[0];
    assert!(adopted(o).is_some(), "{o}");
    let fresh = o["tuned"]["fresh_delta"].as_f64().unwrap();
    assert!(fresh <= -0.03, "{o}");
    assert!(
        o["tuned"]["verdict"]["reason"]
            .as_str()
            .unwrap()
            .contains("in a fresh process"),
        "{o}"
    );
    let mut cmd = b.cmd(dir, &["confirm", "--trials", "5", "--rest", "0"]);
    cmd.arg("--profiles").arg(dir.join("profiles"));
    let said = ok(&cmd.output().unwrap());
    assert_has(
        &said,
        "confirm: 1 of 1 tuned rows still win (0 false adopts; 1 by the 3% margin)",
    );
    // Told not to, a campaign confirms in this process only.
    let out = b.tune(dir, "in-process", 1, &["--confirm", "off"]);
    assert!(
        !text(&out.stderr).contains("fresh process"),
        "{}",
        text(&out.stderr)
    );
}

/// Each worker measures its device's limits first (copy bandwidth, the floor of one
/// operation, the library's matmul rate), in the campaign's timing, and sets every shape
/// against the one that binds: a line per shape, and the record.
fn limits_are_measured_and_every_shape_set_against_them(b: &Backend, dir: &Path) {
    let out = b.tune(dir, "profiles", 1, &[]);
    let stdout = ok(&out);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("device 0: limits ("))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.contains("GB/s") && line.contains("floor") && line.contains("matmul"),
        "{line}"
    );
    let limit = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("limit: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        limit.contains("-bound") && limit.contains("% of it"),
        "{limit}"
    );
    let l = &outcomes(&dir.join("profiles"))[0]["tuned"]["limit"];
    assert!(
        ["memory", "compute", "launch"].contains(&l["bound"].as_str().unwrap()),
        "{l}"
    );
    assert!(
        l["limit_ms"].as_f64().unwrap() > 0.0 && l["heuristic_pct"].as_f64().unwrap() > 0.0,
        "{l}"
    );
    // Not asked for, none are measured.
    let out = b.tune(dir, "unmeasured", 1, &["--no-limits"]);
    assert!(!ok(&out).contains("limits ("));
}

/// `--rest R`: after every timed sample the device idles R times what the sample kept it
/// busy, so a shape's trials alone took (1 + R) times their device time; the campaign says so.
fn the_device_rests_after_every_sample(b: &Backend, dir: &Path) {
    let out = b.tune(
        dir,
        "profiles",
        1,
        &["--rest", "4", "--no-limits", "--confirm", "off"],
    );
    assert!(
        ok(&out).contains("idle 4x each sample's time after it"),
        "{}",
        text(&out.stdout)
    );
    let t = &outcomes(&dir.join("profiles"))[0]["tuned"];
    let device_ms = samples_device_ms(t);
    assert!(device_ms > 0.0, "{t}");
    let wall_ms = t["seconds"].as_f64().unwrap() * 1e3;
    assert!(
        wall_ms >= 5.0 * device_ms,
        "{wall_ms} ms for {device_ms} ms of samples"
    );
    let out = b.tune(dir, "back-to-back", 1, &["--no-limits", "--confirm", "off"]);
    assert!(ok(&out).contains("samples back to back"));
}

/// `--devices 0,1`: one worker per device, each tuning shapes of the one queue on its own
/// device; every adoption is qualified on every device the runtime sees.
fn one_worker_per_device_and_every_adoption_qualified_on_each(b: &Backend, dir: &Path) {
    let mut cmd = b.cmd(dir, &["tune", "--devices", "0,1", "--no-limits"]);
    // Two workers share this machine's CPUs with the stand-ins' emulated devices: on a busy
    // machine a shape's spread went past the default undecidable bound (80% once, against
    // 50%), and the shape kept no row. Not what this test is about: the bound is lifted.
    cmd.arg("--profiles")
        .arg(dir.join("profiles"))
        .args(QUICK)
        .args(["--noisy", "1000"])
        .env(b.two_devices.0, b.two_devices.1);
    for s in &b.shapes {
        cmd.args(["--shape", s]);
    }
    let out = cmd.output().unwrap();
    let stdout = ok(&out);
    assert_has(&stdout, "on devices 0,1");
    let o = outcomes(&dir.join("profiles"));
    let mut devices: Vec<i64> = o.iter().map(|o| o["device"].as_i64().unwrap()).collect();
    devices.sort();
    assert_eq!(devices, [0, 1], "one shape on each device: {o:?}");
    // Each stand-in's heuristic is far slower than its best (70-90%): both shapes adopt,
    // and every adoption is qualified on both devices.
    assert!(o.iter().all(|o| adopted(o).is_some()), "{o:?}");
    assert_has(
        &stdout,
        "qualification on 2 devices against a high-precision reference: 2 of 2 adoptions pass",
    );
    // A device the runtime does not have is exit 4.
    let mut cmd = b.cmd(dir, &["tune", "--devices", "7", "--shape", b.shapes[0]]);
    let out = cmd
        .arg("--profiles")
        .arg(dir.join("seven"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
}

/// The search stays within its budget: every candidate the library lists is probed until
/// the shape's budget is spent, and the screening says what it probed and whether time ran
/// out; a spent budget still leaves the heuristic to decide against. Only the fastest
/// `--keep` of the probed go on to the trials, every other one dropped with its reason.
fn the_search_stays_within_its_budget(b: &Backend, dir: &Path) {
    let out = b.tune(
        dir,
        "profiles",
        1,
        &["--budget", "0", "--no-limits", "--confirm", "off"],
    );
    let stdout = ok(&out);
    assert_has(&stdout, "screening every candidate of every shape");
    let s = &outcomes(&dir.join("profiles"))[0]["tuned"]["screen"];
    let (listed, probed) = (s["listed"].as_u64().unwrap(), s["probed"].as_u64().unwrap());
    assert!(probed > 1 && !s["out_of_time"].as_bool().unwrap(), "{s}");
    assert!(listed >= probed, "{s}");
    // A budget spent before the first probe: nothing more is probed, and it says so.
    let out = b.tune(
        dir,
        "spent",
        1,
        &["--budget", "0.000001", "--no-limits", "--confirm", "off"],
    );
    let stdout = ok(&out);
    assert!(
        stdout.contains("(budget spent: not all probed)")
            && stdout.contains("screening at most 0.000001 s per shape (0:00 in all)"),
        "{stdout}"
    );
    let t = &outcomes(&dir.join("spent"))[0]["tuned"];
    assert!(t["screen"]["out_of_time"].as_bool().unwrap(), "{t}");
    assert!(t["screen"]["probed"].as_u64().unwrap() < probed, "{t}");
    assert_ne!(
        t["verdict"]["decision"], "adopt",
        "nothing screened, nothing adopted: {t}"
    );
    // `--keep 1`: the fastest probe alone is tried; the others are pruned or not kept.
    let out = b.tune(
        dir,
        "keep-one",
        1,
        &["--keep", "1", "--no-limits", "--confirm", "off"],
    );
    ok(&out);
    let t = &outcomes(&dir.join("keep-one"))[0]["tuned"];
    let probed = t["screen"]["probed"].as_u64().unwrap();
    let dropped = t["dropped"].as_array().unwrap();
    assert!(probed > 1, "{t}");
    assert_eq!(t["survivors"], 1, "{t}");
    assert_eq!(dropped.len() as u64, probed - 1, "{t}");
    assert!(
        dropped.iter().all(|d| {
            let d = d.as_str().unwrap();
            d.ends_with("not among the 1 fastest") || d.ends_with("x the best")
        }),
        "{t}"
    );
}

/// A shape that cannot be tuned is named with its reason in every output mode (the table,
/// `-q`, `--json`), and the campaign's failure, which points back at those lines, is said
/// once and exits 1. (Quiet and JSON runs once said only "each is said above".)
fn a_shape_that_fails_is_named_with_its_reason_in_every_mode(b: &Backend, dir: &Path) {
    for (i, mode) in [None, Some("-q"), Some("--json")].into_iter().enumerate() {
        let mut cmd = b.cmd(dir, &["tune", "--shape", b.shapes[0]]);
        for (k, _) in &b.env {
            cmd.env_remove(k);
        }
        cmd.envs(b.broken.iter().copied())
            .arg("--profiles")
            .arg(dir.join(format!("broken-{i}")))
            .args(QUICK)
            .args(["--no-limits", "--confirm", "off"])
            .args(mode);
        let out = cmd.output().expect("run tunedblas tune");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        let all = format!("{stdout}\n{stderr}");
        assert_eq!(out.status.code(), Some(1), "{mode:?}: {all}");
        let reason = "the heuristic's own result is off by";
        let named = all
            .lines()
            .filter(|l| l.contains(reason) && l.contains("failed"))
            .count();
        assert_eq!(named, 1, "{mode:?}: the shape and its reason, once: {all}");
        let failure = "none of the 1 shapes could be tuned (each is said above)";
        assert_eq!(stderr.matches(failure).count(), 1, "{mode:?}: {stderr}");
    }
}

/// The rows (no validators) of the only profile in `store`, rank 0.
fn rows(store: &Path) -> Vec<String> {
    let reg: Value =
        serde_json::from_slice(&std::fs::read(store.join("profiles.json")).unwrap()).unwrap();
    let (_, entry) = reg["profiles"].as_object().unwrap().iter().next().unwrap();
    let file = store
        .join(entry["dir"].as_str().unwrap())
        .join("tunableop_results0.csv");
    let mut rows: Vec<String> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("Validator"))
        .map(String::from)
        .collect();
    rows.sort();
    rows
}

/// A campaign split over two machines (`--shard I/2`, a store each) is joined whole by
/// `tunedblas merge` for every library: each shape tuned once, by one shard, and the
/// merged profile holds every shard's rows as written, for the same library. (The merge
/// once took rocBLAS alone.)
fn shards_tuned_apart_merge_whole(b: &Backend, dir: &Path) {
    let mut expected = Vec::new();
    for i in 0..2 {
        let store = format!("shard{i}");
        let shard = format!("{i}/2");
        let out = b.tune(dir, &store, 2, &["--shard", &shard, "--no-limits"]);
        ok(&out);
        expected.extend(rows(&dir.join(store)));
    }
    expected.sort();
    assert_eq!(
        expected.len(),
        2,
        "each shape tuned by one shard: {expected:?}"
    );
    // The library and its runtime, as `tune` took them (`--workspace` is a measuring
    // option, not the library's).
    let lib: Vec<&OsString> = b
        .args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            *a != "--workspace"
                && b.args
                    .get(i.wrapping_sub(1))
                    .is_none_or(|p| p != "--workspace")
        })
        .map(|(_, a)| a)
        .collect();
    let merge = |into: &str| {
        common::tunedblas_cmd(dir, &["merge"])
            .args(&lib)
            .envs(b.env.iter().map(|(k, v)| (k, v)))
            .arg("--profiles")
            .arg(dir.join(into))
            .args([dir.join("shard0"), dir.join("shard1")])
            .output()
            .expect("run tunedblas merge")
    };
    assert_has(
        &ok(&merge("merged")),
        "2 rows added, 2 rows in all, 0 conflicts",
    );
    assert_eq!(rows(&dir.join("merged")), expected);
    let registry = |store: &str| -> Value {
        let text = std::fs::read_to_string(dir.join(store).join("profiles.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let entry = |r: &Value| {
        r["profiles"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .clone()
    };
    assert_eq!(
        entry(&registry("merged"))["library"],
        entry(&registry("shard0"))["library"]
    );
    // `profiles show` names the merge (whose record has no counts: no stray "null").
    let merged = registry("merged");
    let name = merged["profiles"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let shown = ok(&common::tunedblas_cmd(dir, &["profiles", "show", &name])
        .arg("--profiles")
        .arg(dir.join("merged"))
        .output()
        .unwrap());
    assert_has(&shown, "rows per rank: rank 0: 2");
    assert!(
        shown.contains("campaign   merge") && !shown.contains("null"),
        "{shown}"
    );
    // Shards of two architectures are refused, not merged under one name (the stand-ins
    // record one, none or `unknown`: each shard is given one here).
    for (shard, arch) in [("shard0", "gfx001"), ("shard1", "gfx000")] {
        let mut r = registry(shard);
        for (_, e) in r["profiles"].as_object_mut().unwrap() {
            e["arch"] = arch.into();
        }
        std::fs::write(dir.join(shard).join("profiles.json"), r.to_string()).unwrap();
    }
    let out = merge("mixed");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_has(
        &text(&out.stderr),
        "the shards were tuned on different architectures",
    );
}

/// The matrix: each test above, for each backend, in a folder of its own, one at a time:
/// the stand-ins time on the host's CPU, where campaigns running side by side would make
/// each other's samples too noisy to decide.
macro_rules! matrix {
    ($($test:ident),* $(,)?) => {
        mod refblas {
            $( #[test] fn $test() { super::one(super::$test, super::refblas, "refblas", stringify!($test)) } )*
        }
        mod cublaslt {
            $( #[test] fn $test() { super::one(super::$test, super::cublaslt, "cublaslt", stringify!($test)) } )*
        }
        mod hipblaslt {
            $( #[test] fn $test() { super::one(super::$test, super::hipblaslt, "hipblaslt", stringify!($test)) } )*
        }
    };
}

fn one(test: fn(&Backend, &Path), backend: fn() -> Backend, name: &str, what: &str) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let b = backend();
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    test(&b, &scratch(&format!("tuner-{name}-{what}")));
}

matrix!(
    fresh_process_confirms_every_adoption,
    limits_are_measured_and_every_shape_set_against_them,
    the_device_rests_after_every_sample,
    one_worker_per_device_and_every_adoption_qualified_on_each,
    the_search_stays_within_its_budget,
    a_shape_that_fails_is_named_with_its_reason_in_every_mode,
    shards_tuned_apart_merge_whole,
);
