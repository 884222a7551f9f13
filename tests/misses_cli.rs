//! `tunedblas misses` on the miss logs real host processes wrote under the interposer.

mod common;

use std::process::Command;

use common::*;

fn host(dir: &std::path::Path, args: &[&str]) {
    let out = run(host4_cmd(dir, true, args));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn misses(args: &[&str]) -> std::process::Output {
    Command::new(tunedblas())
        .arg("misses")
        .args(args)
        .output()
        .expect("run tunedblas")
}

#[test]
fn processes_and_ranks_add_up_into_chunk_decode_families() {
    let dir = scratch("misses-cli");
    // No profile at all: everything is a miss. Two processes on two devices; the big
    // layer misses at 512 + 1..3 (the chunk + decode family), the small one at 1 and 2.
    host(
        &dir,
        &[
            "--device",
            "0",
            "ex:TN:h:96:513:64:4",
            "ex:TN:h:96:514:64:2",
            "ex:TN:h:8:1:16:50",
        ],
    );
    host(
        &dir,
        &[
            "--device",
            "1",
            "ex:TN:h:96:513:64:3",
            "ex:TN:h:96:515:64",
            "ex:TN:h:8:2:16:5",
        ],
    );
    let miss_dir = dir.join("misses");
    let out_file = dir.join("untuned.csv");
    let out = misses(&[
        miss_dir.to_str().unwrap(),
        "--json",
        "--out",
        out_file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["processes"], 2);
    assert_eq!(v["ranks"], serde_json::json!([0, 1]));
    assert_eq!(v["shapes"], 5);
    assert_eq!(v["calls"], 4 + 2 + 50 + 3 + 1 + 5);
    let groups = v["groups"].as_array().unwrap();
    let first = &groups[0];
    assert_eq!(first["family"], "96x64");
    assert_eq!(first["kind"], serde_json::json!({"chunk_decode": 512}));
    assert_eq!(first["tokens"], "512 + 1..3");
    assert_eq!(first["calls"], 4 + 2 + 3 + 1);
    let m513 = first["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["m"] == 513)
        .unwrap();
    assert_eq!(m513["calls"], 7, "both processes' calls");
    assert_eq!(m513["processes"], 2);
    assert_eq!(m513["calls_are_lower_bound"], false);
    let decode = &groups[1];
    assert_eq!(decode["kind"], "decode");
    assert_eq!(decode["tokens"], "1 2");

    // --out: every missed shape in ranked order, ready for tuning.
    let lines: Vec<String> = std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(
        lines[0],
        miss_line("ex:TN:h:96:513:64"),
        "largest calls x FLOPs first"
    );
    assert_eq!(lines[4], miss_line("ex:TN:h:8:2:16"));

    // The text form says the same in words.
    let out = misses(&[miss_dir.to_str().unwrap()]);
    let t = text(&out.stdout);
    assert_has(&t, "5 shapes, 65 calls, from 2 processes, rank 0,1");
    assert_has(&t, "512 + 1..3");

    // A process killed before it wrote counts: its shapes count once, marked as a bound.
    let only_log = scratch("misses-cli-killed");
    std::fs::write(
        only_log.join("node-77-rank0.csv"),
        format!("{}\n", miss_line("ex:TN:h:96:520:64")),
    )
    .unwrap();
    let out = misses(&[only_log.to_str().unwrap()]);
    let t = text(&out.stdout);
    assert_has(&t, "lower bounds");
    assert_has(&t, "1+");
    // No such folder: exit 1 with a hint.
    let out = misses(&["/nonexistent/misses"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("TUNEDBLAS_MISS_DIR"));
}

#[test]
fn shapes_a_profile_has_rows_for_now_are_not_listed() {
    let dir = scratch("misses-served");
    // Recorded with no profile: both shapes are misses.
    host(&dir, &["ex:TN:h:96:512:64", "ex:TN:h:8:1:16"]);
    // Then one of them is tuned.
    Profile::v4(&dir)
        .row("ex:TN:h:96:512:64", "Default")
        .write();
    let lib = artifacts().lib4();
    let out = misses(&[
        dir.join("misses").to_str().unwrap(),
        "--lib",
        lib.to_str().unwrap(),
        "--profiles",
        dir.join("profiles").to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["served_by"]["shapes"], 1, "{v}");
    assert_eq!(v["served_by"]["profile"], "ref-v4", "{v}");
    let listed = serde_json::to_string(&v["groups"]).unwrap();
    assert!(
        !listed.contains("96"),
        "the tuned shape is still listed: {listed}"
    );
    // Without --lib, both are listed.
    let out = misses(&[dir.join("misses").to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("served_by").is_none());
    assert!(serde_json::to_string(&v["groups"]).unwrap().contains("96"));
}

/// `--prune served` removes the files of ended processes whose shapes all have rows now;
/// `--prune DAYS` those older than that; files of a running process or another host never.
#[test]
fn prune_removes_only_ended_processes_files() {
    let dir = scratch("misses-prune");
    // Two ended processes: one whose only shape gets a row, one that keeps a miss.
    host(&dir, &["ex:TN:h:96:512:64"]);
    host(&dir, &["ex:TN:h:8:1:16"]);
    Profile::v4(&dir)
        .row("ex:TN:h:96:512:64", "Default")
        .write();
    let misses_dir = dir.join("misses");
    // A running process's files (this test's own pid and start) and another host's.
    let here = tunedblas_core::process::host_name();
    let me = format!(
        "{here}-{}-{}",
        std::process::id(),
        tunedblas_core::process::start_ticks(None).unwrap()
    );
    let line = miss_line("ex:TN:h:96:512:64");
    for name in [
        format!("{me}-rank0.csv"),
        "otherhost-1-1-rank0.csv".to_string(),
    ] {
        std::fs::write(
            misses_dir.join(name),
            format!("op_name,param_signature\n{line}\n"),
        )
        .unwrap();
    }
    let count = |d: &std::path::Path| std::fs::read_dir(d).unwrap().count();
    let before = count(&misses_dir);
    let lib = artifacts().lib4();
    let out = misses(&[
        misses_dir.to_str().unwrap(),
        "--lib",
        lib.to_str().unwrap(),
        "--profiles",
        dir.join("profiles").to_str().unwrap(),
        "--prune",
        "served",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_has(&text(&out.stderr), "pruned the files of 1 ended processes");
    // The served process's log, counts and status went; the rest stayed.
    assert_eq!(count(&misses_dir), before - 3);
    assert!(misses_dir.join(format!("{me}-rank0.csv")).is_file());
    assert!(misses_dir.join("otherhost-1-1-rank0.csv").is_file());
    // Everything here is younger than a day: nothing goes; at 0 days the other ended
    // process does (never the running one or the other host's).
    let out = misses(&[misses_dir.to_str().unwrap(), "--prune", "1"]);
    assert!(text(&out.stderr).contains("pruned the files of 0 ended"));
    let out = misses(&[misses_dir.to_str().unwrap(), "--prune", "0"]);
    assert_has(&text(&out.stderr), "pruned the files of 1 ended");
    assert_eq!(count(&misses_dir), 2);
    // A bad value is a usage error.
    let out = misses(&[misses_dir.to_str().unwrap(), "--prune", "soon"]);
    assert_eq!(out.status.code(), Some(2));
}

/// Counts from files anyone may write that add up past 2^64 (two processes' counts of one
/// shape, two status files' counters) saturate: `misses` and `status` once panicked
/// (exit 101, an outside tester's forged files) where a release build wrapped to a small
/// wrong total.
#[test]
fn counts_past_two_to_the_64_saturate_and_never_panic() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("misses-overflow");
    let (logs, status) = (dir.join("ms"), dir.join("st"));
    for d in [&logs, &status] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let shape = "GemmTunableOp_float_NN,nn_16_16_16_ld_16_16_16";
    let huge = u64::MAX - 5;
    for i in 1..=2 {
        std::fs::write(
            logs.join(format!("h-{i}-1.abc-rank0.csv")),
            format!("{shape}\n"),
        )
        .unwrap();
        std::fs::write(
            logs.join(format!("h-{i}-1.abc-rank0.counts.csv")),
            format!("op_name,param_signature,calls\n{shape},{huge}\n"),
        )
        .unwrap();
        let counters = format!(
            r#"{{"served":0,"default":0,"near":0,"missed":{huge},"passed_through":0,"fallbacks":0}}"#
        );
        std::fs::write(
            status.join(format!("h-{}-{}.r.status.json", 99990 + i, 5 + i)),
            format!(
                r#"{{"format":1,"host":"h","pid":{},"start_ticks":{},"updated_unix_ms":1,"final":true,"backends":[{{"backend":"rocblas","counters":{counters},"calls":{huge},"missed_shapes":1,"near_shapes":0,"hit_rate":0.0,"ranks":[],"top_missed":[]}}]}}"#,
                99990 + i,
                5 + i
            ),
        )
        .unwrap();
    }
    let out = misses(&[logs.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_has(&text(&out.stdout), &format!("{} calls", u64::MAX));
    let out = Command::new(tunedblas())
        .args(["status", status.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_has(&text(&out.stdout), &format!("{} calls", u64::MAX));
}
