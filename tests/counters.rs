//! One meaning per counter (issue 26): one workload, every view of it — the exit summary,
//! the live status JSON and Prometheus file while it waits, the final status, the stats
//! file and `tunedblas status` — says the same calls, outcomes, shapes, ranks and hit rate.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::faults::*;
use common::*;
use serde_json::Value;

fn status_files(dir: &std::path::Path, end: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.to_string_lossy().ends_with(end));
    v
}

/// `name{..labels..} value` lines of a Prometheus file whose labels contain `has`.
fn prom(text: &str, name: &str, has: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(has))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn every_view_of_one_workload_says_the_same() {
    let dir = scratch("counters-agree");
    let (served, near_row, near, miss) = (
        "ex:TN:h:64:24:40",
        "ex:TN:h:64:24:48",
        "ex:TN:h:64:28:48",
        "ex:TN:h:64:60:40",
    );
    let sol = tuned(served);
    let near_sol = untuned_by_heuristic(near)
        .into_iter()
        .find(|s| untuned_by_heuristic(near_row).contains(s))
        .expect("a solution for both");
    Profile::v4(&dir)
        .tuned(served, sol)
        .tuned(near_row, near_sol)
        .row("ex:TN:h:8:8:8", "Default")
        .ranks(2)
        .write();
    let go = dir.join("go");
    let stats = dir.join("stats.json");
    let wait = format!("@wait:{}", go.display());
    let mut cmd = fault_cmd(
        &dir,
        true,
        &[
            served,
            "ex:TN:h:8:8:8",
            &format!("{near}:3"),
            &format!("{miss}:2"),
            "@device:1",
            miss,
            &wait,
        ],
    );
    cmd.env("TUNEDBLAS_NEAR", "8")
        .env("TUNEDBLAS_STATS", &stats)
        .env("TUNEDBLAS_STATUS_THREAD", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let waiting = out.lines().any(|l| l.is_ok_and(|l| l == "waiting"));
    assert!(waiting);
    // Live: the writer thread shows the idle process exactly within a second or two.
    let misses = dir.join("misses");
    let mut live = Value::Null;
    for _ in 0..500 {
        if let Some(f) = status_files(&misses, ".status.json").first() {
            if let Ok(v) = serde_json::from_str::<Value>(&std::fs::read_to_string(f).unwrap()) {
                if v["backends"][0]["calls"] == 8 {
                    live = v;
                    break;
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let prom_text = std::fs::read_to_string(&status_files(&misses, ".prom")[0]).unwrap();
    std::fs::write(&go, "").unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // The workload: 8 calls; 1 served, 1 Default, 3 near (1 shape), 3 missed (2 shapes: 2
    // calls on rank 0, 1 on rank 1); the hit rate 5 of 8.
    let want = "8 calls: 1 served, 0 default, 3 missed (2 shapes), 0 passed through, 0 fallbacks, 3 near (1 shapes); hit rate 62.5%";
    let want = want.replace("1 served, 0 default", "1 served, 1 default");
    assert!(stderr.contains(&want), "the summary: {stderr}");
    let backend = |v: &Value| v["backends"][0].clone();
    let final_status: Value = serde_json::from_str(
        &std::fs::read_to_string(&status_files(&misses, ".status.json")[0]).unwrap(),
    )
    .unwrap();
    assert_eq!(final_status["final"], true);
    for (what, b) in [("live", backend(&live)), ("final", backend(&final_status))] {
        let c = &b["counters"];
        assert_eq!(
            (
                &c["served"],
                &c["default"],
                &c["near"],
                &c["missed"],
                &c["passed_through"],
                &c["fallbacks"]
            ),
            (
                &1.into(),
                &1.into(),
                &3.into(),
                &3.into(),
                &0.into(),
                &0.into()
            ),
            "{what}: {b}"
        );
        assert_eq!(b["calls"], 8, "{what}: {b}");
        assert_eq!(
            (&b["missed_shapes"], &b["near_shapes"]),
            (&2.into(), &1.into()),
            "{what}: {b}"
        );
        assert_eq!(b["hit_rate"], 0.625, "{what}: {b}");
        let ranks: Vec<(u64, u64, u64)> = b["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["rank"].as_u64().unwrap(),
                    r["missed_calls"].as_u64().unwrap(),
                    r["missed_shapes"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(ranks, [(0, 2, 1), (1, 1, 1)], "{what}: {b}");
    }
    // Prometheus, live.
    assert_eq!(
        prom(&prom_text, "tunedblas_calls_total", "outcome=\"missed\""),
        [3.0]
    );
    assert_eq!(
        prom(&prom_text, "tunedblas_calls_total", "outcome=\"near\""),
        [3.0]
    );
    assert_eq!(
        prom(&prom_text, "tunedblas_missed_calls_total", "rank="),
        [2.0, 1.0]
    );
    assert_eq!(
        prom(&prom_text, "tunedblas_missed_shapes", "rank="),
        [1.0, 1.0]
    );
    // The stats file.
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(
        (
            &s["calls"],
            &s["served"],
            &s["default"],
            &s["near"],
            &s["missed_calls"]
        ),
        (&8.into(), &1.into(), &1.into(), &3.into(), &3.into()),
        "{s}"
    );
    assert_eq!(
        (&s["missed_shapes"], &s["near_shapes"], &s["hit_rate"]),
        (&2.into(), &1.into(), &0.625.into()),
        "{s}"
    );
    // `tunedblas status` on the folder says the same: per process and backend, with the
    // hit rate, and the total over the processes (one here).
    let shown = ok(&tunedblas_cmd(&dir, &["status", misses.to_str().unwrap()])
        .output()
        .unwrap());
    assert_has(&shown, "rocblas: 8 calls: 1 served, 1 default, 3 near (1 shapes), 3 missed (2 shapes), 0 passed through, 0 fallbacks; hit rate 62.5%");
    assert_has(&shown, "total over 1 process:\n  rocblas (1 process): 8 calls: 1 served, 1 default, 3 near, 3 missed, 0 passed through, 0 fallbacks; hit rate 62.5%");
    let j: Value = serde_json::from_str(&ok(&tunedblas_cmd(
        &dir,
        &["status", "--json", misses.to_str().unwrap()],
    )
    .output()
    .unwrap()))
    .unwrap();
    let b = &j["processes"][0]["backends"][0];
    assert_eq!(
        (&b["calls"], &b["near_shapes"], &b["hit_rate"]),
        (&8.into(), &1.into(), &0.625.into()),
        "status --json keeps the file's figures: {b}"
    );
    assert_eq!(j["totals"][0]["hit_rate"], 0.625, "{j}");
    assert_eq!(j["totals"][0]["calls"], 8, "{j}");
}

#[test]
fn pytorch_tunableop_in_the_same_process_is_said_once() {
    let dir = scratch("counters-tunableop");
    Profile::v4(&dir)
        .tuned("ex:TN:h:64:24:40", tuned("ex:TN:h:64:24:40"))
        .write();
    let mut cmd = fault_cmd(&dir, true, &["ex:TN:h:64:24:40", "ex:TN:h:8:8:8"]);
    cmd.env("PYTORCH_TUNABLEOP_ENABLED", "1");
    let out = run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("PyTorch TunableOp is on").count(),
        1,
        "{stderr}"
    );
    let mut cmd = fault_cmd(&dir, true, &["ex:TN:h:64:24:40"]);
    cmd.env("PYTORCH_TUNABLEOP_ENABLED", "0");
    assert!(!text(&run_guarded(cmd).stderr).contains("TunableOp is on"));
}

#[test]
fn a_host_whose_calls_never_reach_the_interposer_is_said_when_nothing_links_the_library() {
    // Python ctypes calls the library object it loaded: dlsym on that handle, which no
    // preload can see. Nothing else links the library, so the exit says so at the default
    // level (not at quiet).
    let dir = scratch("counters-unseen");
    let lib = artifacts().lib4();
    let script = format!(
        "import ctypes\nl = ctypes.CDLL({:?})\nh = ctypes.c_void_p()\nl.rocblas_create_handle(ctypes.byref(h))\n",
        lib.display().to_string()
    );
    for (level, said) in [("debug", true), ("info", true), ("quiet", false)] {
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-c", &script]);
        host_env(&mut cmd, &dir, true);
        cmd.env("TUNEDBLAS_LOG", level);
        let out = run_guarded(cmd);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(
            stderr.contains("is loaded but no call reached the interposer: the process opened it with its own dlopen"),
            said,
            "{level}: {stderr}"
        );
        if said {
            assert!(stderr.contains("RTLD_DEFAULT"), "what to do: {stderr}");
        } else {
            assert_eq!(stderr, "", "nothing at {level}");
        }
    }
    // `status` shows those two processes (not the quiet one): the library, and why.
    let statuses: Vec<_> = std::fs::read_dir(dir.join("misses"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".status.json"))
        .collect();
    assert_eq!(statuses.len(), 2, "{statuses:?}");
    let shown = ok(&run_guarded(tunedblas_cmd(
        &dir,
        &["status", dir.join("misses").to_str().unwrap()],
    )));
    assert_eq!(
        shown
            .matches(&format!(
                "{} was loaded but no call reached the interposer",
                lib.display()
            ))
            .count(),
        2,
        "{shown}"
    );
    // A disabled preload says nothing and writes nothing.
    let quiet = scratch("counters-unseen-disabled");
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", &script]);
    host_env(&mut cmd, &quiet, true);
    cmd.env("TUNEDBLAS_DISABLE", "1");
    let out = run_guarded(cmd);
    assert_eq!(text(&out.stderr), "");
    assert!(!quiet.join("misses").exists());
    // A process that links the library (a program linked against it, as PyTorch links it)
    // and makes no GEMM sees no change at the default level: the footprint rule.
    let mut cmd = fault_cmd(&dir, true, &[]);
    cmd.env("TUNEDBLAS_LOG", "info");
    let out = run_guarded(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "",
        "a linked host with no GEMM: nothing said"
    );
    let mut cmd = fault_cmd(&dir, true, &[]);
    cmd.env("TUNEDBLAS_LOG", "debug");
    let stderr = text(&run_guarded(cmd).stderr);
    assert_has(
        &stderr,
        "no call reached the interposer: something links it, so this process made no GEMM",
    );
}

#[test]
fn a_process_whose_calls_are_all_served_has_a_status_too() {
    // No miss ever makes its miss folder: the status is written there all the same.
    let dir = scratch("counters-all-served");
    let spec = "ex:TN:h:64:24:40";
    Profile::v4(&dir).tuned(spec, tuned(spec)).write();
    let out = run_guarded(fault_cmd(&dir, true, &[&format!("{spec}:3")]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = status_files(&dir.join("misses"), ".status.json");
    assert_eq!(status.len(), 1, "{status:?}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&status[0]).unwrap()).unwrap();
    assert_eq!(v["backends"][0]["counters"]["served"], 3, "{v}");
    assert_eq!(v["backends"][0]["hit_rate"], 1.0, "{v}");
}
