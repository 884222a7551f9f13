//! End-to-end tests of the `tunedblas` harness on refblas: a whole campaign from recorded
//! misses to a verified profile served in a second process, resume after a kill, imports
//! that keep no ids, qualification, verification failures, sharding and the CLI's errors.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Fast settings: the tests check the plumbing, not the timings.
/// A campaign as short as the engine allows on refblas: few rounds, one operand set, no
/// rest, no limits (the tests of those turn them on).
const QUICK: &[&str] = &[
    "--trials",
    "3",
    "--max-trials",
    "3",
    "--rotate-mib",
    "0.02",
    "--rest",
    "0",
    "--no-limits",
];

fn json_file(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// The one profile folder in a store, and its registry entry.
fn only_profile(store: &Path) -> (PathBuf, Value) {
    let reg = json_file(&store.join("profiles.json"));
    let profiles = reg["profiles"].as_object().expect("profiles object");
    assert_eq!(profiles.len(), 1, "{reg}");
    let (_, entry) = profiles.iter().next().unwrap();
    (store.join(entry["dir"].as_str().unwrap()), entry.clone())
}

const SPECS: &[&str] = &["ex:TN:h:64:24:40", "ex:TN:h:96:16:64", "ex:TN:h:48:1:64"];

#[test]
fn a_campaign_from_recorded_misses_to_a_served_profile() {
    let dir = scratch("campaign");
    // 1. Record: the host runs with the preload and no profile.
    let mut cmd = Command::new(&artifacts().host4);
    cmd.args(SPECS);
    host_env(&mut cmd, &dir, true);
    let before = run(cmd);
    assert!(before.status.success(), "{}", text(&before.stderr));
    assert_eq!(misses(&dir).0.len(), SPECS.len());

    // 2. Tune into a fresh store.
    let store = dir.join("profiles");
    let misses_dir = dir.join("misses");
    let lib = artifacts().lib4();
    let mut args = vec![
        "tune",
        "--lib",
        lib.to_str().unwrap(),
        "--arch",
        "refblas-cpu",
    ];
    args.push(misses_dir.to_str().unwrap());
    args.extend([
        "--trials",
        "5",
        "--max-trials",
        "10",
        "--rotate-mib",
        "0.02",
        "--rest",
        "0",
        "--no-limits",
    ]);
    let out = ok(&run(tunedblas_cmd(&dir, &args)));
    assert_has(&out, "tuning 3 shapes");
    assert!(
        out.contains("adopt a new solution only if"),
        "the rules are printed:\n{out}"
    );
    assert!(out.contains("heur ms") && out.contains("decision"), "{out}");
    // Each shape's line is printed once, as it finishes (not again after qualification).
    assert_eq!(out.matches("heur ms").count(), 1, "one table:\n{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("[")).count(),
        SPECS.len(),
        "{out}"
    );
    let (profile, entry) = only_profile(&store);
    let sha = sha4();
    assert_eq!(entry["lib_sha256"], sha.as_str());
    assert_eq!(entry["arch"], "refblas-cpu");
    // One results file per device refblas reports (4), all alike.
    let rows = rank_rows(&profile, 0);
    for rank in 1..4 {
        assert_eq!(rank_rows(&profile, rank), rows);
    }
    assert!(!profile.join("tunableop_results4.csv").exists());
    assert!(
        !profile.join(".campaign.partial.jsonl").exists(),
        "checkpoint retired"
    );
    let prov = json_file(&profile.join("provenance.json"));
    assert_eq!(prov["sha256"], sha.as_str());
    let campaign = &prov["campaigns"][0];
    assert_eq!(campaign["kind"], "tune");
    assert_eq!(campaign["counts"]["shapes"], 3);
    assert_eq!(campaign["rules"]["margin"], 0.03);
    let decisions: Vec<(String, String)> = campaign["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["shape"].as_str().unwrap().to_string(),
                s["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(decisions.len(), 3);
    // Every shape has a row, except those the rules could not decide.
    for (shape, decision) in &decisions {
        let has_row = rows.iter().any(|(k, _)| k == shape);
        assert_eq!(
            has_row,
            decision != "undecidable",
            "{shape}: {decision}; rows {rows:?}"
        );
    }

    // 3. Qualify and verify.
    let q = ok(&run(tunedblas_cmd(
        &dir,
        &["qualify", "--lib", artifacts().lib4().to_str().unwrap()],
    )));
    assert_has(&q, "0 removed");
    let v = ok(&run(tunedblas_cmd(
        &dir,
        &["verify", "--lib", artifacts().lib4().to_str().unwrap()],
    )));
    if rows.is_empty() {
        assert_has(&v, "no rows, nothing to replay -> OK");
    } else {
        assert_has(
            &v,
            &format!(
                "rows hit {0}/{0}, 0 missed calls, 0 fallbacks -> OK",
                rows.len()
            ),
        );
    }

    // 4. A second process is served from the new profile: each row's solution runs.
    let served_dir = scratch("campaign-served");
    std::fs::create_dir_all(served_dir.join("profiles")).unwrap();
    let copy = |from: &Path, to: &Path| {
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.path().is_file() {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    };
    copy(&store, &served_dir.join("profiles"));
    let name = profile.file_name().unwrap();
    std::fs::create_dir_all(served_dir.join("profiles").join(name)).unwrap();
    copy(&profile, &served_dir.join("profiles").join(name));
    let mut cmd = Command::new(&artifacts().host4);
    cmd.args(SPECS);
    host_env(&mut cmd, &served_dir, true);
    let after = run(cmd);
    let stderr = text(&after.stderr);
    assert!(after.status.success(), "{stderr}");
    // Another kernel may round differently (qualification bounds by how much): compare
    // statuses, not output bits.
    let statuses = |o: &Output| {
        results(o)
            .into_iter()
            .map(|r| (r.0, r.1))
            .collect::<Vec<_>>()
    };
    assert_eq!(statuses(&after), statuses(&before));
    assert!(
        statuses(&after).iter().all(|r| r.1 == 0),
        "{:?}",
        results(&after)
    );
    let trace = trace(&served_dir);
    for (i, spec) in SPECS.iter().enumerate() {
        let line = miss_line(spec);
        match rows.iter().find(|(k, _)| *k == line) {
            Some((_, sol)) if sol.starts_with("Gemm_Rocblas_") => {
                assert_eq!(
                    trace[i]["solution"],
                    sol.trim_start_matches("Gemm_Rocblas_"),
                    "{spec}"
                );
            }
            Some(_) => assert_eq!(trace[i]["heuristic"], "1", "{spec}: a Default row"),
            None => assert!(
                misses(&served_dir).0.contains(&line),
                "{spec} recorded again"
            ),
        }
    }

    // 5. The store answers questions about it.
    let which = ok(&run(tunedblas_cmd(
        &dir,
        &["profiles", "which", artifacts().lib4().to_str().unwrap()],
    )));
    assert_has(&which, &format!("profile '{}'", name.to_string_lossy()));
    let list = ok(&run(tunedblas_cmd(&dir, &["profiles", "list", "--json"])));
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list[0]["rows_per_rank"], rows.len());
    let show = ok(&run(tunedblas_cmd(
        &dir,
        &["profiles", "show", &name.to_string_lossy()],
    )));
    assert!(
        show.contains("campaign   tune") && show.contains("campaign   qualify"),
        "{show}"
    );
}

fn shape_args(n: usize) -> Vec<String> {
    (0..n)
        .flat_map(|i| {
            [
                "--shape".to_string(),
                format!("f16:TN:{}:{}:64", 32 + 8 * i, 1 + i),
            ]
        })
        .collect()
}

/// `tune` over `n` shapes with the fewest trials, no rest and no limits: the campaign the
/// resume tests interrupt, as the argument list a user would type again to resume it.
fn quick_tune_args(lib: &Path, n: usize) -> Vec<String> {
    let mut args: Vec<String> = ["tune", "--lib", lib.to_str().unwrap()]
        .map(String::from)
        .to_vec();
    args.extend(shape_args(n));
    args.extend(
        [
            "--trials",
            "5",
            "--max-trials",
            "5",
            "--rotate-mib",
            "0.02",
            "--rest",
            "0",
            "--no-limits",
        ]
        .map(String::from),
    );
    args
}

/// Starts a campaign with inputs other than the unfinished one's, which must be refused.
fn another_campaign(dir: &Path, lib: &Path) -> Output {
    run(lib_cmd(dir, "tune", lib, &["--shape", "f16:TN:8:8:8"]))
}

/// Issue 27: a profile folder on a shared filesystem, where `flock` may be local to each
/// machine: a campaign another machine runs in it (its lock folder, `.campaign.lock.d`,
/// naming a host this one cannot see) is waited for, said once, and the wait ends when
/// that campaign's lock goes; the lock this campaign took is gone when it ends.
#[test]
fn a_campaign_another_machine_runs_in_the_folder_is_waited_for() {
    let dir = scratch("campaign-elsewhere");
    let lib = artifacts().lib4();
    ok(&another_campaign(&dir, &lib));
    let profile = profile_folder(&dir.join("profiles"));
    let theirs = profile.join(".campaign.lock.d");
    std::fs::create_dir(&theirs).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    std::fs::write(theirs.join("owner"), format!("other_node-4242-77 {now}\n")).unwrap();

    let err = dir.join("tune.err");
    let mut args = quick_tune_args(&lib, 2);
    args.push("--retune".into());
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = tunedblas_cmd(&dir, &arg_refs)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&err)
        .unwrap()
        .contains("another tune of")
    {
        assert!(
            child.try_wait().unwrap().is_none(),
            "it did not wait: {}",
            std::fs::read_to_string(&err).unwrap()
        );
        assert!(Instant::now() < deadline, "no word of the wait");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "it stopped waiting while the other ran"
    );
    assert!(
        !profile.join(".campaign.partial.jsonl").exists(),
        "nothing started"
    );
    let said = std::fs::read_to_string(&err).unwrap();
    assert_has(&said, "other_node");

    // The other machine's campaign ends: this one goes on and finishes.
    std::fs::remove_dir_all(&theirs).unwrap();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    assert!(!theirs.exists(), "the campaign's own lock is released");
    assert_eq!(
        std::fs::read_to_string(&err)
            .unwrap()
            .matches("another tune of")
            .count(),
        1
    );
}

#[test]
fn a_killed_campaign_resumes_and_loses_nothing() {
    let dir = scratch("resume");
    let mut args = quick_tune_args(&artifacts().lib4(), 16);
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = tunedblas_cmd(&dir, &arg_refs)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let profile = dir.join("profiles/rocblas-4.4.0.5f2e9c71");
    let checkpoint = profile.join(".campaign.partial.jsonl");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let lines = std::fs::read_to_string(&checkpoint).map_or(0, |t| t.lines().count());
        if lines >= 4 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the campaign ended before it could be killed"
        );
        assert!(Instant::now() < deadline, "no progress in the checkpoint");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before_kill: Vec<String> = std::fs::read_to_string(&checkpoint)
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| serde_json::from_str::<Value>(l).is_ok())
        .map(String::from)
        .collect();
    assert!(
        before_kill.len() >= 3 && before_kill.len() < 16,
        "{}",
        before_kill.len()
    );
    assert!(
        !profile.join("tunableop_results0.csv").exists(),
        "nothing written yet"
    );

    // Different inputs are refused while the campaign is unfinished.
    let other = another_campaign(&dir, &artifacts().lib4());
    assert_refused(&other, 1, "--fresh");

    // The same command resumes.
    args.push("--json".into());
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ok(&run(tunedblas_cmd(&dir, &arg_refs)));
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["resumed"], before_kill.len());
    assert_eq!(summary["counts"]["shapes"], 16);
    // The record holds every shape exactly once, the pre-kill outcomes verbatim.
    let outcomes = campaign_outcomes(&dir.join("profiles"));
    assert_eq!(outcomes.len(), 16);
    let mut seen: Vec<&str> = outcomes
        .iter()
        .map(|o| o["shape"].as_str().unwrap())
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 16, "each shape tuned once");
    // The shapes finished before the kill were not measured again: their rounds are kept
    // (their adoptions confirmed and qualified at the end, as every shape's).
    for line in &before_kill {
        let (old, now) = kept_as_finished(&outcomes, line);
        if old["tuned"]["verdict"]["decision"] != "adopt" {
            assert_eq!(*now, old, "kept as it was");
        }
    }
}

#[test]
fn an_import_from_another_build_keeps_shapes_and_never_ids() {
    let dir = scratch("import");
    // A v4 profile with real v4 ids (small positive numbers).
    let specs = ["ex:TN:h:64:24:40", "ex:TN:h:32:8:48"];
    let v4_ids: Vec<i32> = specs
        .iter()
        .map(|s| *solutions(&artifacts().host4, s).last().unwrap())
        .collect();
    let foreign = dir.join("v4-results.csv");
    let mut text_rows = String::from("Validator,ROCBLAS_VERSION,4.4.0.5f2e9c71\n");
    for (s, id) in specs.iter().zip(&v4_ids) {
        text_rows.push_str(&row(s, &format!("Gemm_Rocblas_{id}")));
        text_rows.push('\n');
    }
    std::fs::write(&foreign, text_rows).unwrap();
    let out = ok(&run(tunedblas_cmd(
        &dir,
        &[
            "profiles",
            "import",
            "--lib",
            artifacts().lib5().to_str().unwrap(),
            foreign.to_str().unwrap(),
        ],
    )));
    assert_has(&out, "2 new shapes imported (ids not reused)");
    let folder = dir.join("profiles/rocblas-5.6.0.c83a10d4");
    let waiting = std::fs::read_to_string(folder.join("imported_shapes.csv")).unwrap();
    assert_eq!(waiting.lines().count(), 2);
    assert!(!waiting.contains("Gemm_Rocblas"), "{waiting}");

    let lib = artifacts().lib5();
    let mut args = vec!["tune", "--lib", lib.to_str().unwrap(), "--retune"];
    args.extend(QUICK);
    ok(&run(tunedblas_cmd(&dir, &args)));
    let v5_offered: Vec<i32> = specs
        .iter()
        .flat_map(|s| solutions(&artifacts().host5, s))
        .collect();
    let rows = rank_rows(&folder, 0);
    for (shape, sol) in &rows {
        if let Some(id) = sol.strip_prefix("Gemm_Rocblas_") {
            let id: i32 = id.parse().unwrap();
            assert!(!v4_ids.contains(&id), "{shape}: a v4 id was reused");
            assert!(v5_offered.contains(&id), "{shape}: {id} is a v5 solution");
        }
    }
    assert!(
        !folder.join("imported_shapes.csv").exists(),
        "tuned, so no longer waiting"
    );
    let prov = json_file(&folder.join("provenance.json"));
    let sources = prov["campaigns"][0]["sources"].to_string();
    assert_has(&sources, "imported_shapes.csv");
}

#[test]
fn qualify_removes_a_row_whose_solution_computes_wrong_results() {
    let dir = scratch("qualify");
    let (bad_spec, good_spec) = ("ex:TN:h:64:24:40", "ex:TN:s:32:8:48");
    let bad = non_heuristic_solutions(&artifacts().host4, bad_spec)[0];
    let good = non_heuristic_solutions(&artifacts().host4, good_spec)[0];
    assert_ne!(bad, good, "the faulty id must not hit the other row");
    let sha = sha4();
    Profile::new(&dir.join("profiles"), "p", &sha)
        .tuned(bad_spec, bad)
        .tuned(good_spec, good)
        .ranks(2)
        .write();
    let mut cmd = tunedblas_cmd(
        &dir,
        &["qualify", "--lib", artifacts().lib4().to_str().unwrap()],
    );
    cmd.env("REFBLAS_FAULTY_SOLUTION", bad.to_string());
    let out = ok(&run(cmd));
    assert_has(&out, "2 rows checked on 4 devices, 1 removed");
    assert!(out.contains("relative L2"), "the reason is given:\n{out}");
    for rank in 0..2 {
        let rows = rank_rows(&dir.join("profiles/p"), rank);
        assert_eq!(
            rows,
            vec![(miss_line(good_spec), format!("Gemm_Rocblas_{good}"))]
        );
    }
    let prov = json_file(&dir.join("profiles/p/provenance.json"));
    assert_eq!(
        prov["campaigns"][0]["removed"][0]["shape"],
        miss_line(bad_spec).as_str()
    );
    // Without the fault, the same row qualifies.
    let out = ok(&run(tunedblas_cmd(
        &dir,
        &["qualify", "--lib", artifacts().lib4().to_str().unwrap()],
    )));
    assert_has(&out, "1 rows checked on 4 devices, 0 removed");
}

#[test]
fn verify_fails_when_a_row_is_not_served() {
    let dir = scratch("verify-fail");
    let sha = sha4();
    let spec = "ex:TN:h:64:24:40";
    // An id refblas 4.x does not have: the interposer falls back and quarantines it.
    Profile::new(&dir.join("profiles"), "p", &sha)
        .row(spec, "Gemm_Rocblas_9999")
        .write();
    let out = run(tunedblas_cmd(
        &dir,
        &["verify", "--lib", artifacts().lib4().to_str().unwrap()],
    ));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("FAILED") && stdout.contains("fell back"),
        "{stdout}"
    );
    // No profile at all (no store: none is made) is an error that says what to do.
    let empty = scratch("verify-none");
    let out = run(tunedblas_cmd(
        &empty,
        &["verify", "--lib", artifacts().lib4().to_str().unwrap()],
    ));
    assert_refused(&out, 1, "`tunedblas tune` makes one");
    assert!(!empty.join("profiles").exists());
}

#[test]
fn shards_tuned_apart_merge_into_one_profile() {
    let dir = scratch("shards");
    let shapes = shape_args(6);
    let mut rows_total = 0;
    for i in 0..2 {
        let store = dir.join(format!("shard{i}"));
        let args: Vec<String> = [
            "tune",
            "--lib",
            artifacts().lib4().to_str().unwrap(),
            "--profiles",
            store.to_str().unwrap(),
            "--shard",
            &format!("{i}/2"),
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(shapes.iter().cloned())
        .chain(QUICK.iter().map(|s| s.to_string()))
        .chain(["--json".to_string()])
        .collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let summary: Value = serde_json::from_str(&ok(&run(tunedblas_cmd(&dir, &refs)))).unwrap();
        assert_eq!(summary["counts"]["shapes"], 3, "half of six shapes each");
        rows_total += summary["rows"].as_u64().unwrap();
    }
    let merged = dir.join("merged");
    let out = ok(&run(lib_cmd(
        &dir,
        "merge",
        &artifacts().lib4(),
        &[
            "--profiles",
            merged.to_str().unwrap(),
            dir.join("shard0").to_str().unwrap(),
            dir.join("shard1").to_str().unwrap(),
        ],
    )));
    assert_has(&out, &format!("{rows_total} rows added"));
    let (profile, entry) = only_profile(&merged);
    assert_eq!(entry["rows_per_rank"], rows_total);
    assert_eq!(rank_rows(&profile, 0).len() as u64, rows_total);
    let prov = json_file(&profile.join("provenance.json"));
    assert_eq!(prov["campaigns"][0]["kind"], "merge");
    assert_eq!(
        prov["campaigns"][0]["shard_campaigns"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn tune_with_no_inputs_reads_the_miss_folder() {
    let dir = scratch("default-misses");
    let mut cmd = Command::new(&artifacts().host4);
    cmd.args(["ex:TN:h:24:8:16", "ex:TN:h:40:8:16"]);
    host_env(&mut cmd, &dir, true);
    assert!(run(cmd).status.success());
    let lib = artifacts().lib4();
    let mut args = vec!["tune", "--lib", lib.to_str().unwrap()];
    args.extend(QUICK);
    let out = ok(&run(tunedblas_cmd(&dir, &args)));
    assert_has(
        &out,
        &format!(
            "no inputs named: tuning the misses recorded in {}",
            dir.join("misses").display()
        ),
    );
    assert_has(&out, "2 shapes: ");
    // Once both shapes have rows, nothing is tuned twice (unless --retune, or by name
    // with --shape). The rows are written here: the quick campaign above may leave a
    // tiny shape undecidable, with no row.
    Profile::v4(&dir)
        .row("ex:TN:h:24:8:16", "Default")
        .row("ex:TN:h:40:8:16", "Default")
        .write();
    // Complete coverage is a success (a nightly timer must not report a failure), said once.
    let out = run(tunedblas_cmd(&dir, &args));
    let said = ok(&out);
    assert_eq!(
        said.matches("all 2 shapes of the inputs have rows in profile")
            .count(),
        1,
        "{said}"
    );
    assert_has(&said, "nothing to tune: all 2 shapes");
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    let mut as_json = args.clone();
    as_json.push("--json");
    let summary: Value = serde_json::from_str(&ok(&run(tunedblas_cmd(&dir, &as_json)))).unwrap();
    assert_eq!(summary["counts"]["shapes"], 0, "{summary}");
    assert_eq!(summary["rows"], 2, "{summary}");
    let misses_dir = dir.join("misses");
    let mut named = args.clone();
    named.extend([misses_dir.to_str().unwrap(), "--shape", "f16:TN:24:8:16"]);
    let out = ok(&run(tunedblas_cmd(&dir, &named)));
    assert_has(&out, "1 shapes of the inputs have rows");
    assert_has(&out, "1 shapes: ");
}

#[test]
fn a_quiet_campaign_prints_the_counts_only() {
    let dir = scratch("quiet");
    let lib = artifacts().lib4();
    let mut args: Vec<String> = ["tune", "--lib", lib.to_str().unwrap(), "-q"]
        .map(String::from)
        .to_vec();
    args.extend(shape_args(3));
    args.extend(QUICK.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(tunedblas_cmd(&dir, &refs));
    let stdout = ok(&out);
    assert_has(&stdout, "3 shapes: ");
    assert!(
        !stdout.contains("heur ms") && !stdout.lines().any(|l| l.starts_with("[")),
        "{stdout}"
    );
    assert!(
        !text(&out.stderr).contains("ETA"),
        "no progress: {}",
        text(&out.stderr)
    );
}

#[test]
fn several_devices_tune_in_parallel_one_worker_each() {
    let dir = scratch("devices");
    let lib = artifacts().lib4();
    let mut args: Vec<String> = ["tune", "--lib", lib.to_str().unwrap(), "--devices", "0,1"]
        .map(String::from)
        .to_vec();
    args.extend(shape_args(8));
    args.extend(QUICK.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ok(&run(tunedblas_cmd(&dir, &refs)));
    assert_has(&out, "on devices 0,1");
    let record = std::fs::read_dir(dir.join("profiles/rocblas-4.4.0.5f2e9c71/campaigns"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut devices: Vec<i64> = std::fs::read_to_string(record)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["device"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(devices.len(), 8);
    devices.sort();
    devices.dedup();
    assert_eq!(devices, vec![0, 1], "both workers tuned shapes");
}

#[test]
fn a_library_named_by_soname_is_hashed_from_the_file_the_loader_maps() {
    let dir = scratch("soname");
    let mut args = vec![
        "tune",
        "--lib",
        "librocblas.so.4",
        "--shape",
        "f16:TN:16:4:32",
    ];
    args.extend(QUICK);
    let mut cmd = tunedblas_cmd(&dir, &args);
    cmd.env("LD_LIBRARY_PATH", &artifacts().libdir4);
    ok(&run(cmd));
    let (_, entry) = only_profile(&dir.join("profiles"));
    assert_eq!(entry["lib_sha256"], sha4().as_str());
}

#[test]
fn command_line_mistakes_get_clear_errors_and_documented_exit_codes() {
    let dir = scratch("cli");
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    tunedblas_core::registry::Registry::new()
        .save_atomic(&dir.join("profiles/profiles.json"))
        .unwrap();
    let lib = artifacts().lib4();
    let lib = lib.to_str().unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        (&["tune"], 1, "no shapes to tune"),
        (
            &["tune", "--lib", lib, "--bogus"],
            2,
            "unexpected argument '--bogus' found",
        ),
        (
            &["tune", "--lib", lib, "--shard", "2/2"],
            2,
            "--shard takes I/N",
        ),
        (
            &["tune", "--lib", lib, "--trials", "many"],
            2,
            "--trials takes a number",
        ),
        (
            &["tune", "--lib", lib, "--shape", "f16:TN:0:1:1"],
            2,
            "--shape f16:TN:0:1:1",
        ),
        (&["tune", "--lib", lib], 1, "no shapes to tune"),
        (
            &[
                "tune",
                "--lib",
                lib,
                "--devices",
                "7",
                "--shape",
                "f16:TN:8:8:8",
            ],
            4,
            "device 7",
        ),
        (&["profiles", "show", "nope"], 1, "no profile 'nope'"),
        (&["frobnicate"], 2, "unknown command"),
    ];
    for (args, code, words) in cases {
        let out = run(tunedblas_cmd(&dir, args));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(words),
            "{args:?}: expected '{words}' in: {stderr}"
        );
    }
    // A library that is not rocBLAS: exit 3, and it says so.
    let preload = artifacts().preload.to_str().unwrap().to_string();
    let out = run(tunedblas_cmd(
        &dir,
        &["tune", "--lib", &preload, "--shape", "f16:TN:8:8:8"],
    ));
    assert_refused(&out, 3, "not rocBLAS");
    // Every subcommand has help with examples.
    for sub in ["demo", "tune", "qualify", "verify", "profiles", "merge"] {
        let out = ok(&run(tunedblas_cmd(&dir, &[sub, "--help"])));
        assert!(out.contains("EXAMPLE"), "{sub}: {out}");
    }
}

/// A shape checkpointed before a stop (`line`, its outcome as written then) and its
/// outcome in the record: not measured again, its rounds kept. Both, to check more.
fn kept_as_finished<'o>(outcomes: &'o [Value], line: &str) -> (Value, &'o Value) {
    let old: Value = serde_json::from_str(line).unwrap();
    let now = outcomes
        .iter()
        .find(|o| o["shape"] == old["shape"])
        .unwrap();
    assert_eq!(
        now["tuned"]["rounds"], old["tuned"]["rounds"],
        "kept: {line}"
    );
    (old, now)
}

/// The outcomes of the campaign record of the only profile in `store`.
fn campaign_outcomes(store: &Path) -> Vec<Value> {
    let (profile, _) = only_profile(store);
    let records: Vec<PathBuf> = std::fs::read_dir(profile.join("campaigns"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    std::fs::read_to_string(&records[0])
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The outcomes of a graph-timed campaign that ran (exit 0) without any shape's capture
/// failing part way (which would have had it timed again with events only).
fn graph_outcomes(out: &Output, store: &Path) -> Vec<Value> {
    ok(out);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("graph timing failed"), "{stderr}");
    campaign_outcomes(store)
}

/// `tune --rest R`: after each timed sample the device idles R times the sample's device
/// time; the campaign says so and records it. Every final round's samples were followed by
/// their rest, so the shape's timing took at least (1 + R) times those samples' device time
/// (back to back it takes about the probes' and rounds' device time, far under that).
/// Outside 0-10 the value is refused by name.
#[test]
fn tune_with_a_rest_idles_after_each_sample_and_says_so() {
    let dir = scratch("tune-rest");
    let lib = artifacts().lib5();
    let tune = |store: &str, rest: &str| {
        run(lib_cmd(
            &dir,
            "tune",
            &lib,
            &[
                "--shape",
                "f32:NN:32:16:32",
                "--prune",
                "1",
                "--rotate-mib",
                "0.02",
                "--no-limits",
                "--rest",
                rest,
                "--profiles",
                dir.join(store).to_str().unwrap(),
            ],
        ))
    };
    let out = tune("rested", "10");
    let stdout = ok(&out);
    assert_has(&stdout, "idle 10x each sample's time after it");
    let outcomes = campaign_outcomes(&dir.join("rested"));
    let t = &outcomes[0]["tuned"];
    let rounds_ms = samples_device_ms(t);
    let timing_ms = t["seconds"].as_f64().unwrap() * 1e3;
    assert!(rounds_ms > 0.0, "{t}");
    assert!(
        timing_ms >= 11.0 * rounds_ms,
        "timing {timing_ms} ms, rounds' device time {rounds_ms} ms"
    );
    // Back to back says so.
    let out = tune("plain", "0");
    assert!(ok(&out).contains("samples back to back"));
    for bad in ["-1", "11", "NaN"] {
        let out = tune("bad", bad);
        assert_refused(
            &out,
            2,
            "--rest takes a multiple of the sample's time from 0 to 10",
        );
    }
}

/// `tune --timing graph`: each sample's calls are captured into a HIP graph once and
/// replayed (refblas emulates HIP's stream capture: `refblas/src/graph.rs`): the campaign
/// adopts, every outcome says it was timed in graph mode, and the replayed GEMMs ran (the
/// trace holds every sample's calls of the adopted solution). A solution that cannot be
/// launched fails at capture and is never adopted; graph timing takes one device per
/// campaign. A capture failing part way through a shape has the shape timed again with
/// events only. Where capture is refused (`REFBLAS_NO_GRAPHS`), each shape falls back to
/// events, says so once, and is still tuned. refblas's heuristic computes each GEMM 4 times
/// (`REFBLAS_SLOW_HEURISTIC`): its own kernels are a few tens of percent apart, which a busy
/// CPU's noise hides (every shape undecidable), and the adoption this test follows must not
/// depend on the machine being idle.
#[test]
fn tune_with_graph_timing_replays_captured_calls_and_falls_back_where_capture_fails() {
    let dir = scratch("tune-graph");
    let lib = artifacts().lib5();
    let tune = |store: &str, env: &[(&str, &str)]| {
        let mut cmd = lib_cmd(
            &dir,
            "tune",
            &lib,
            &[
                "--shape",
                "f32:NN:32:16:32",
                "--shape",
                "f16:TN:64:8:64",
                "--timing",
                "graph",
                "--rotate-mib",
                "0.02",
                "--no-limits",
                "--profiles",
            ],
        );
        cmd.arg(dir.join(store))
            .env("REFBLAS_TRACE", dir.join(format!("{store}.trace")))
            .env("REFBLAS_SLOW_HEURISTIC", "4");
        cmd.envs(env.iter().copied());
        run(cmd)
    };
    let outcomes = graph_outcomes(&tune("graphs", &[]), &dir.join("graphs"));
    assert_eq!(outcomes.len(), 2);
    for o in &outcomes {
        assert_eq!(o["tuned"]["timing"], "graph", "{o}");
    }
    let trace = std::fs::read_to_string(dir.join("graphs.trace")).unwrap();
    let adopted: Vec<String> = outcomes
        .iter()
        .filter_map(|o| o["tuned"]["verdict"]["row"].as_str())
        .filter_map(|r| r.strip_prefix("Gemm_Rocblas_"))
        .map(String::from)
        .collect();
    assert!(
        !adopted.is_empty(),
        "refblas's heuristic is beaten: {outcomes:?}"
    );
    // Each adopted solution ran at least every timed sample's calls (replays; the handful
    // of qualification runs could not account for them).
    for o in &outcomes {
        let Some(id) = o["tuned"]["verdict"]["row"]
            .as_str()
            .and_then(|r| r.strip_prefix("Gemm_Rocblas_"))
        else {
            continue;
        };
        let calls = o["tuned"]["calls_per_sample"].as_u64().unwrap() as usize;
        let ran = trace
            .lines()
            .filter(|l| l.contains(&format!("solution={id} ")))
            .count();
        assert!(
            ran >= 7 * calls,
            "{id}: {ran} runs, {calls} calls per sample"
        );
    }

    // A solution that cannot be launched (REFBLAS_FAIL_SOLUTIONS) fails at capture, as a
    // launch failure shows at enqueue: it is never timed as a (free) replay, never adopted.
    let failing = adopted.join(",");
    let out = tune("failing", &[("REFBLAS_FAIL_SOLUTIONS", failing.as_str())]);
    ok(&out);
    for o in campaign_outcomes(&dir.join("failing")) {
        let row = o["tuned"]["verdict"]["row"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            !adopted.iter().any(|id| row == format!("Gemm_Rocblas_{id}")),
            "{row} cannot run: {o}"
        );
    }

    // Graph timing on two devices at once: the workers' allocations, copies and captures
    // take turns (in HIP one thread's copy breaks another's capture), so both replay.
    let mut cmd = lib_cmd(
        &dir,
        "tune",
        &lib,
        &["--shape", "f32:NN:32:16:32", "--shape", "f16:TN:64:8:64"],
    );
    cmd.args(QUICK)
        .args(["--timing", "graph", "--devices", "0,1", "--profiles"])
        .arg(dir.join("two"));
    let outcomes = graph_outcomes(&run(cmd), &dir.join("two"));
    let mut devices: Vec<i64> = outcomes
        .iter()
        .map(|o| o["device"].as_i64().unwrap())
        .collect();
    devices.sort();
    assert_eq!(devices, [0, 1], "one shape on each device: {outcomes:?}");
    assert!(
        outcomes.iter().all(|o| o["tuned"]["timing"] == "graph"),
        "{outcomes:?}"
    );

    // Capture failing part way through the first shape (after 3 captures, process-wide):
    // its graph samples and its events samples would be compared, so it is timed again,
    // all with events; the second shape fails at its first capture, before any sample.
    let out = tune("midway", &[("REFBLAS_GRAPH_FAIL_AFTER", "3")]);
    ok(&out);
    let mut timings: Vec<String> = campaign_outcomes(&dir.join("midway"))
        .iter()
        .map(|o| o["tuned"]["timing"].as_str().unwrap().to_string())
        .collect();
    timings.sort();
    let failed = "graph: hipStreamBeginCapture failed with HIP error 900";
    assert_eq!(
        timings,
        [
            format!("events ({failed})"),
            format!("events (re-timed: events ({failed}))")
        ],
        "{}",
        text(&out.stderr)
    );

    let out = tune("events", &[("REFBLAS_NO_GRAPHS", "1")]);
    ok(&out);
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr
            .matches("graph timing failed (hipStreamBeginCapture failed with HIP error 900); timing it with events")
            .count(),
        2,
        "once per shape: {stderr}"
    );
    for o in campaign_outcomes(&dir.join("events")) {
        let timing = o["tuned"]["timing"].as_str().unwrap();
        assert!(
            timing.starts_with("events (graph: hipStreamBeginCapture failed"),
            "{o}"
        );
    }
}

/// Runs `cmd` with its standard output a pipe whose reading end is already closed, as
/// `cmd | head -0` would leave it: its first line meets a closed pipe.
fn with_closed_stdout(mut cmd: Command) -> Output {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors, each then owned once.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    use std::os::fd::{FromRawFd, OwnedFd};
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    cmd.stdout(std::process::Stdio::from(write));
    run(cmd)
}

/// Ended as `cat` or `seq` end on a closed pipe: by SIGPIPE, with nothing said.
fn ended_quietly_by_the_pipe(what: &str, out: &Output) {
    use std::os::unix::process::ExitStatusExt;
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert!(!stderr.contains("failed printing"), "{what}: {stderr}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{what}: {:?} {stderr}",
        out.status
    );
}

#[test]
fn a_closed_output_pipe_ends_every_command_quietly() {
    let dir = scratch("closed-pipe");
    std::fs::create_dir_all(dir.join("misses")).unwrap();
    let lib = artifacts().lib4();
    let lib = lib.to_str().unwrap();
    for args in [
        &["status"][..],
        &["misses"][..],
        &["help"][..],
        &["tune", "--help"][..],
        &["env"][..],
        &["tune", "--lib", lib, "--shape", "f16:TN:8:8:8"][..],
    ] {
        ended_quietly_by_the_pipe(
            &args.join(" "),
            &with_closed_stdout(tunedblas_cmd(&dir, args)),
        );
    }
}

/// A miss folder is written by every process on the machine: a FIFO planted under a miss
/// file's or a status file's name blocked `misses` and `status` for ever, a link to
/// `/dev/zero` ran them out of memory, and a counts file that is not text ended `misses`
/// (an outside tester's finding). Each such file is left out with a line naming it, and the
/// real process's misses are listed.
#[test]
fn misses_and_status_leave_out_files_planted_in_the_miss_folder() {
    let dir = scratch("planted-miss-files");
    let misses = dir.join("misses");
    std::fs::create_dir_all(&misses).unwrap();
    let line = miss_line("sgemm:NN:s:8:8:8");
    std::fs::write(misses.join("host-1-2-rank0.csv"), format!("{line}\n")).unwrap();
    let fifo = |name: &str| {
        let c = std::ffi::CString::new(misses.join(name).as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a plain mkfifo of a path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    };
    fifo("planted-9-9-rank0.csv");
    fifo("planted-9-9.status.json");
    std::os::unix::fs::symlink("/dev/zero", misses.join("zero-8-8-rank0.counts.csv")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", misses.join("zero-8-8.status.json")).unwrap();
    std::fs::write(
        misses.join("binary-7-7-rank0.counts.csv"),
        [0xff, 0xfe, 0x00, 0x80],
    )
    .unwrap();
    let guarded = |args: &[&str]| {
        let mut cmd = tunedblas_cmd(&dir, args);
        cmd.arg(&misses);
        common::faults::run_guarded_for(cmd, Duration::from_secs(60))
    };
    let out = guarded(&["misses"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{:?}: {stdout}{stderr}", out.status);
    assert_has(&stdout, line.split(',').next().unwrap());
    for planted in [
        "planted-9-9-rank0.csv",
        "zero-8-8-rank0.counts.csv",
        "binary-7-7",
    ] {
        assert_has(&format!("{stdout}{stderr}"), planted);
    }
    let out = guarded(&["status"]);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_has(&stderr, "planted-9-9.status.json: skipped");
    assert_has(&stderr, "zero-8-8.status.json: skipped");
}

/// An argument that is not UTF-8 (a path in another encoding) is a usage error that names
/// it, exit 2, in every command: `std::env::args` panicked on it (exit 101, a backtrace).
#[test]
fn an_argument_that_is_not_utf8_is_a_usage_error_not_a_panic() {
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch("not-utf8-arg");
    let bad = std::ffi::OsStr::from_bytes(b"/tmp/\xff-not-utf8");
    for command in ["misses", "status", "tune"] {
        let out = tunedblas_cmd(&dir, &[command]).arg(bad).output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(!stderr.contains("panicked"), "{command}: {stderr}");
        assert_has(&stderr, "is not UTF-8");
    }
}

#[test]
fn a_tune_whose_output_pipe_closes_stops_and_the_same_command_resumes_it() {
    let dir = scratch("pipe-resume");
    let lib = artifacts().lib4();
    let args = quick_tune_args(&lib, 16);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    // `tunedblas tune ... | head`: the reader goes away after the first shape's line.
    let mut cmd = tunedblas_cmd(&dir, &refs);
    cmd.current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let reader = std::io::BufReader::new(child.stdout.take().unwrap());
    use std::io::BufRead;
    let first = reader
        .lines()
        .map(|l| l.unwrap())
        .find(|l| l.starts_with('['))
        .expect("a shape's line");
    assert!(first.starts_with("[  1/16]"), "{first}");
    // The reader is gone: the campaign's next line meets a closed pipe.
    let out = child.wait_with_output().unwrap();
    ended_quietly_by_the_pipe("tune", &out);

    // The checkpoint holds the header and whole lines of the shapes finished.
    let profile = dir.join("profiles/rocblas-4.4.0.5f2e9c71");
    let partial = std::fs::read_to_string(profile.join(".campaign.partial.jsonl")).unwrap();
    let finished = partial.lines().count() - 1;
    assert!((1..16).contains(&finished), "{partial}");
    for l in partial.lines() {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{l}: {e}"));
    }

    // Another campaign refuses, naming exactly the command that finishes this one.
    let other = another_campaign(&dir, &lib);
    let said = text(&other.stderr);
    assert_eq!(other.status.code(), Some(1), "{said}");
    let rerun = format!("cd {} && tunedblas {}", dir.display(), args.join(" "));
    assert!(
        said.contains(&format!("\n    {rerun}\n")),
        "{rerun}\n{said}"
    );
    assert_has(&said, "rerun this command with --fresh:");
    assert_has(&said, "--shape f16:TN:8:8:8 --fresh");
    assert_has(&said, &format!("({finished} of 16 done)"));

    // That command resumes it.
    let out = ok(&run(tunedblas_cmd(&dir, &refs)));
    assert_has(
        &out,
        &format!("resuming: {finished} of 16 shapes were finished before"),
    );
    assert_has(&out, "16 shapes: ");
    assert!(!profile.join(".campaign.partial.jsonl").exists());
}

/// A store path that is not a store gets one answer in every command that reads it, naming
/// the path and what it should be, and nothing is made there: `verify` and `qualify` once
/// made an empty store at a mistyped `--profiles` (then said to run `tune`), and a file
/// given as `--profiles` got "File exists", "Not a directory" or "has no profiles.json"
/// depending on the command.
#[test]
fn a_store_path_that_is_no_store_is_refused_alike_and_left_as_it_was() {
    let dir = scratch("no-store");
    let lib = artifacts().lib5();
    let lib = lib.to_str().unwrap();
    let missing = dir.join("mistyped");
    let file = dir.join("a-file");
    std::fs::write(&file, "not a store\n").unwrap();
    let refused = |cmd: &[&str], store: &Path, says: &str| {
        let out = tunedblas_cmd(&dir, cmd)
            .arg("--profiles")
            .arg(store)
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {stderr}");
        assert_has(&stderr, says);
    };
    let readers: [&[&str]; 3] = [
        &["verify", "--lib", lib],
        &["qualify", "--lib", lib],
        &["profiles", "list"],
    ];
    for cmd in readers {
        refused(cmd, &missing, "has no profiles.json: not a profile store");
        assert!(!missing.exists(), "{cmd:?} made {}", missing.display());
    }
    let not_a_folder = format!("{} is not a folder: --profiles", file.display());
    let writers: [&[&str]; 2] = [
        &["tune", "--lib", lib, "--shape", "f32:NN:8:8:8"],
        &["merge", "--lib", lib, "elsewhere"],
    ];
    for cmd in readers.into_iter().chain(writers) {
        refused(cmd, &file, &not_a_folder);
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a store\n");
}

/// Shapes `from..to` as an untuned file (one `op,signature` line each): the form a miss
/// folder's shapes take as tune inputs.
fn shapes_file(path: &Path, from: usize, to: usize) {
    let lines: String = (from..to)
        .map(|i| {
            let key = spec_key(&format!("ex:TN:h:{}:{}:64", 32 + 8 * i, 1 + i));
            let (op, sig) = tunedblas_core::tunableop::op_and_signature(&key);
            format!("{op},{sig}\n")
        })
        .collect();
    std::fs::write(path, lines).unwrap();
}

/// Waits until the checkpoint at `path` holds `lines` lines (its header and finished shapes)
/// while `child` runs.
fn wait_for_checkpoint(child: &mut std::process::Child, path: &Path, lines: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(path).map_or(0, |t| t.lines().count()) < lines {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the campaign ended before it could be stopped"
        );
        assert!(Instant::now() < deadline, "no progress in the checkpoint");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An outside tester's finding: `watch` stopped mid-round (SIGINT), then the server
/// records new shapes, then `watch` again: every round failed for ever with "an unfinished
/// campaign of other shapes", and so did the command that message said to rerun (a miss
/// folder's shape list only grows; the checkpoint resumed only the same list). Now the
/// campaign resumes with the new shapes added, the finished ones kept; a command without
/// some of its shapes still refuses, naming what finishes it and what discards it.
#[test]
fn a_stopped_watch_resumes_with_the_shapes_recorded_since() {
    let dir = scratch("resume-grown");
    let lib = artifacts().lib4();
    let misses = dir.join("misses");
    std::fs::create_dir_all(&misses).unwrap();
    shapes_file(&misses.join("first.csv"), 0, 12);
    let watch = |rounds: &[&str]| {
        let mut args = vec!["watch", "--lib", lib.to_str().unwrap()];
        args.push(misses.to_str().unwrap());
        args.extend(["--every", "1"]);
        args.extend(rounds);
        args.push("--");
        args.extend(QUICK);
        tunedblas_cmd(&dir, &args)
    };
    let mut first = watch(&[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let profile = dir.join("profiles/rocblas-4.4.0.5f2e9c71");
    let checkpoint = profile.join(".campaign.partial.jsonl");
    wait_for_checkpoint(&mut first, &checkpoint, 4);
    // SAFETY: a plain kill of our own child.
    unsafe { libc::kill(first.id() as i32, libc::SIGINT) };
    assert!(first.wait().unwrap().success());
    let before = std::fs::read_to_string(&checkpoint).unwrap();
    let finished = before.lines().skip(1).count();
    assert!((3..12).contains(&finished), "{before}");

    // The server records three more shapes meanwhile.
    shapes_file(&misses.join("second.csv"), 12, 15);
    // Without some of its shapes the campaign cannot resume: refused, with the command that
    // finishes it and the one that discards it.
    let only_new = dir.join("only-new");
    std::fs::create_dir_all(&only_new).unwrap();
    shapes_file(&only_new.join("second.csv"), 12, 15);
    let mut args = vec![only_new.to_str().unwrap()];
    args.extend(QUICK);
    let refused = run(lib_cmd(&dir, "tune", &lib, &args));
    assert_refused(&refused, 1, "12 of its shapes are not among this command's");
    let says = text(&refused.stderr);
    assert_has(
        &says,
        "rerun the command that started it, with its inputs as they were",
    );
    assert_has(&says, &format!("{} --json", misses.display()));
    assert_has(&says, &format!("{} --trials 3", only_new.display()));
    assert_has(&says, "--no-limits --fresh");
    assert_eq!(std::fs::read_to_string(&checkpoint).unwrap(), before);

    // The same watch again resumes it: the finished shapes kept, the rest and the new
    // ones tuned, all committed in one campaign.
    let out = run(watch(&["--rounds", "1"]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_has(
        &stderr,
        &format!(
            "watch: round 1: 15 shapes (resumed: {finished} of 12 done before; 3 new shapes added)"
        ),
    );
    assert!(!checkpoint.exists(), "finished: {stderr}");
    let outcomes = campaign_outcomes(&dir.join("profiles"));
    let mut shapes: Vec<String> = outcomes.iter().map(|o| o["shape"].to_string()).collect();
    shapes.sort();
    shapes.dedup();
    assert_eq!(shapes.len(), 15, "each shape once: {outcomes:?}");
    // The shapes finished before the stop were not measured again: their rounds are kept.
    for line in before.lines().skip(1) {
        kept_as_finished(&outcomes, line);
    }
}
