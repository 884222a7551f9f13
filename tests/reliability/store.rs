//! Reliability, harness: commands that change one profile store at once lose nothing, and a
//! command that fails part way through writing a profile leaves it as it was.
//!
//! Every writer (`tune`, `qualify`, `merge`, `profiles import`) reads the rank files,
//! `provenance.json` and `profiles.json` under the store's lock and commits its change to
//! all of them together (`Store::transaction`). The concurrent cases start 8 `tunedblas`
//! processes on one store and check that every row and record of each is there; the
//! failure cases run one under `RLIMIT_FSIZE` (as a full disk: writes past the limit fail
//! with EFBIG, SIGXFSZ ignored) so that the small rank files' temporaries are written and
//! the large `provenance.json`'s is not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::faults::*;
use crate::common::*;
use serde_json::Value;

/// `op,signature` -> solution of a rank file.
fn rows_of(profile: &Path, rank: usize) -> BTreeMap<String, String> {
    rank_rows(profile, rank).into_iter().collect()
}

/// A `tunedblas` command on the store `dir/profiles`, nothing from the user's setup.
fn cli(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = tunedblas_cmd(dir, args);
    cmd.arg("--profiles").arg(dir.join("profiles"));
    cmd
}

/// Starts every command at once, then waits for all of them (each under the hang guard).
fn run_all_at_once(cmds: Vec<Command>) -> Vec<Output> {
    let children: Vec<_> = cmds
        .into_iter()
        .map(|mut c| {
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let what = format!("{c:?}");
            (c.spawn().unwrap_or_else(|e| panic!("{what}: {e}")), what)
        })
        .collect();
    children
        .into_iter()
        .map(|(child, what)| wait_guarded(child, &what))
        .collect()
}

fn succeeded(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

const PROFILE: &str = "rocblas-4.4.0.5f2e9c71";

fn json_file(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// The `kind` of every campaign in a provenance file, sorted.
fn campaign_kinds(profile: &Path) -> Vec<String> {
    let prov = json_file(&profile.join("provenance.json"));
    let mut kinds: Vec<String> = prov["campaigns"]
        .as_array()
        .expect("campaigns")
        .iter()
        .map(|c| c["kind"].as_str().unwrap().to_string())
        .collect();
    kinds.sort();
    kinds
}

/// Every file under `dir` whose name marks a temporary.
fn temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            found.extend(temporaries(&p));
        } else if p.to_string_lossy().contains(".tmp-") {
            found.push(p);
        }
    }
    found
}

/// A store with the v4 build's profile: `seed` rows on 2 ranks.
fn store_with(dir: &Path, seed: &[&str]) -> PathBuf {
    let rows: Vec<String> = seed.iter().map(|s| row(s, "Default")).collect();
    Profile::new(&dir.join("profiles"), PROFILE, &sha4())
        .lines(&rows)
        .ranks(2)
        .write();
    dir.join("profiles").join(PROFILE)
}

const SEED: &[&str] = &["ex:NN:h:16:16:16", "ex:NN:h:24:8:16"];

/// A one-row shard store for the v4 build (what `tune --shard` leaves).
fn shard(dir: &Path, i: usize) -> (PathBuf, String) {
    let spec = format!("ex:NT:h:{}:{}:32", 40 + 8 * i, 2 + i);
    let root = dir.join(format!("shard{i}"));
    Profile::new(&root, "shard", &sha4())
        .row(&spec, "Default")
        .write();
    (root, miss_line(&spec))
}

#[test]
fn eight_merges_at_once_keep_every_row() {
    let dir = scratch("store-merges");
    let profile = store_with(&dir, SEED);
    let lib = artifacts().lib4();
    let mut want: Vec<String> = SEED.iter().map(|s| miss_line(s)).collect();
    let mut cmds = Vec::new();
    for i in 0..8 {
        let (root, key) = shard(&dir, i);
        want.push(key);
        let mut c = cli(&dir, &["merge", "--lib", lib.to_str().unwrap()]);
        c.arg(&root);
        cmds.push(c);
    }
    for out in run_all_at_once(cmds) {
        let stdout = succeeded(&out);
        assert_has(&stdout, "1 rows added");
    }
    want.sort();
    for rank in 0..2 {
        let rows: Vec<String> = rows_of(&profile, rank).into_keys().collect();
        assert_eq!(
            rows, want,
            "rank {rank}: the seed rows and every shard's row"
        );
    }
    let reg = json_file(&dir.join("profiles/profiles.json"));
    assert_eq!(reg["profiles"][PROFILE]["rows_per_rank"], want.len());
    assert_eq!(
        campaign_kinds(&profile),
        ["merge"; 8],
        "every merge is recorded"
    );
    assert_eq!(temporaries(&dir.join("profiles")), Vec::<PathBuf>::new());
}

#[test]
fn eight_imports_at_once_keep_every_shape() {
    let dir = scratch("store-imports");
    let profile = store_with(&dir, SEED);
    let before: Vec<Vec<u8>> = (0..2)
        .map(|r| std::fs::read(profile.join(format!("tunableop_results{r}.csv"))).unwrap())
        .collect();
    let lib = artifacts().lib4();
    // Another build's results (its shapes are imported, its ids never): a full profile
    // that every import brings, and one shape of each import's own.
    let shared: Vec<String> = (0..2000)
        .map(|i| format!("ex:TN:h:{}:{}:16", 8 * (1 + i % 40), 1 + i / 40))
        .collect();
    let results_file = |path: &Path, specs: &[String]| {
        let mut text = String::from("Validator,ROCBLAS_VERSION,9.9.9\n");
        for s in specs {
            text.push_str(&row(s, "Gemm_Rocblas_7"));
            text.push('\n');
        }
        std::fs::write(path, text).unwrap();
    };
    let shared_file = dir.join("other-build.csv");
    results_file(&shared_file, &shared);
    let mut want: Vec<String> = shared.iter().map(|s| miss_line(s)).collect();
    let mut cmds = Vec::new();
    for i in 0..8 {
        let spec = format!("ex:TN:h:{}:{}:48", 32 + 8 * i, 1 + i);
        let own = dir.join(format!("other{i}.csv"));
        results_file(&own, std::slice::from_ref(&spec));
        want.push(miss_line(&spec));
        let mut c = cli(
            &dir,
            &["profiles", "import", "--lib", lib.to_str().unwrap()],
        );
        c.arg(&shared_file).arg(&own);
        cmds.push(c);
    }
    let mut added = 0;
    for out in run_all_at_once(cmds) {
        let stdout = succeeded(&out);
        let n = stdout.split(' ').next().unwrap();
        added += n.parse::<usize>().unwrap_or_else(|_| panic!("{stdout}"));
    }
    assert_eq!(added, want.len(), "each shape counted new once");
    let mut waiting: Vec<String> = std::fs::read_to_string(profile.join("imported_shapes.csv"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    waiting.sort();
    want.sort();
    assert!(
        waiting == want,
        "{} shapes waiting, not {}: every import's shapes, once",
        waiting.len(),
        want.len()
    );
    assert_eq!(
        campaign_kinds(&profile),
        ["import"; 8],
        "every import is recorded"
    );
    for (r, bytes) in before.iter().enumerate() {
        let now = std::fs::read(profile.join(format!("tunableop_results{r}.csv"))).unwrap();
        assert_eq!(&now, bytes, "rank {r} is not touched by an import");
    }
    assert_eq!(temporaries(&dir.join("profiles")), Vec::<PathBuf>::new());
}

/// `tune` arguments for one shape, quick settings (the tests check plumbing, not timing).
fn tune_args(lib: &Path, shape: &str) -> Vec<String> {
    let args = [
        "tune",
        "--lib",
        lib.to_str().unwrap(),
        "--shape",
        shape,
        "--json",
    ];
    args.iter()
        .chain(&QUICK_TUNE)
        .map(|a| a.to_string())
        .collect()
}

/// The rows a `tune --json` summary says it wrote: shape -> solution.
fn rows_written(summary: &Value) -> BTreeMap<String, String> {
    summary["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["rejected"].is_null() && o["error"].is_null())
        .filter_map(|o| {
            let row = o["tuned"]["verdict"]["row"].as_str()?;
            Some((o["shape"].as_str()?.to_string(), row.to_string()))
        })
        .collect()
}

#[test]
fn tunes_and_merges_at_once_keep_every_row() {
    let dir = scratch("store-tunes");
    let profile = store_with(&dir, SEED);
    let lib = artifacts().lib4();
    let mut cmds = Vec::new();
    let mut merged = Vec::new();
    for i in 0..4 {
        let args = tune_args(&lib, &format!("f16:TN:{}:{}:64", 32 + 8 * i, 1 + i));
        let refs = strs(&args);
        cmds.push(cli(&dir, &refs));
        let (root, key) = shard(&dir, i);
        merged.push(key);
        let mut c = cli(&dir, &["merge", "--lib", lib.to_str().unwrap()]);
        c.arg(&root);
        cmds.push(c);
    }
    let mut tuned = BTreeMap::new();
    for (i, out) in run_all_at_once(cmds).iter().enumerate() {
        let stdout = succeeded(out);
        if i % 2 == 0 {
            let summary: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(summary["counts"]["shapes"], 1, "{stdout}");
            tuned.extend(rows_written(&summary));
        }
    }
    let rows = rows_of(&profile, 0);
    for key in SEED.iter().map(|s| miss_line(s)).chain(merged) {
        assert_eq!(rows.get(&key).map(String::as_str), Some("Default"), "{key}");
    }
    for (shape, solution) in &tuned {
        assert_eq!(rows.get(shape), Some(solution), "{shape}: the tuned row");
    }
    assert_eq!(rows.len(), SEED.len() + 4 + tuned.len(), "{rows:?}");
    for rank in 1..4 {
        assert_eq!(rows_of(&profile, rank), rows, "rank {rank}");
    }
    let mut want = vec!["merge"; 4];
    want.extend(["tune"; 4]);
    assert_eq!(campaign_kinds(&profile), want);
    // Each campaign keeps its own record, even those started in the same second.
    assert_eq!(
        std::fs::read_dir(profile.join("campaigns"))
            .unwrap()
            .count(),
        4
    );
    assert!(!profile.join(".campaign.partial.jsonl").exists());
    assert_eq!(temporaries(&dir.join("profiles")), Vec::<PathBuf>::new());
}

const LIMIT: u64 = 16 * 1024;

/// A provenance file larger than [`LIMIT`]: its new version cannot be written; the rank
/// files (a few hundred bytes) can.
fn big_provenance(profile: &Path) {
    let prov = serde_json::json!({
        "profile": PROFILE,
        "campaigns": [{"kind": "earlier", "notes": "x".repeat(2 * LIMIT as usize)}],
    });
    std::fs::write(profile.join("provenance.json"), prov.to_string()).unwrap();
}

/// The bytes of the store's rank files, provenance and registry.
fn store_bytes(dir: &Path, profile: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files: Vec<PathBuf> = vec![dir.join("profiles/profiles.json")];
    for e in std::fs::read_dir(profile).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("tunableop_results") || name == "provenance.json" {
            files.push(p);
        }
    }
    files
        .into_iter()
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect()
}

/// A fresh store `name` with the seed rows and a provenance file that a write of any more
/// will find too big; returns the folder and the profile.
fn store_near_full(name: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let profile = store_with(&dir, SEED);
    big_provenance(&profile);
    (dir, profile)
}

/// Runs `cmd` with too little room for the provenance file: it must fail (exit 1) saying
/// which file and that nothing changed, and leave every file of the store as it was, with
/// no temporary behind.
fn fails_on_provenance(dir: &Path, profile: &Path, mut cmd: Command) {
    let before = store_bytes(dir, profile);
    with_file_size_limit(&mut cmd, LIMIT);
    let out = run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(store_bytes(dir, profile) == before, "every file as it was");
    assert_eq!(temporaries(&dir.join("profiles")), Vec::<PathBuf>::new());
    assert!(
        stderr.contains(&format!("{PROFILE}/provenance.json"))
            && stderr.contains("nothing was changed"),
        "{stderr}"
    );
}

/// `tunedblas merge` of the shard `root` into the store of `dir`.
fn merge_cmd(dir: &Path, root: &Path) -> Command {
    let mut cmd = cli(
        dir,
        &["merge", "--lib", artifacts().lib4().to_str().unwrap()],
    );
    cmd.arg(root);
    cmd
}

#[test]
fn a_merge_failing_on_provenance_leaves_the_profile_as_it_was() {
    let (dir, profile) = store_near_full("store-merge-full");
    let (root, _) = shard(&dir, 0);
    fails_on_provenance(&dir, &profile, merge_cmd(&dir, &root));

    // With room, the same merge goes through.
    assert!(succeeded(&run_guarded(merge_cmd(&dir, &root))).contains("1 rows added"));
    assert_eq!(rows_of(&profile, 0).len(), SEED.len() + 1);
    assert_eq!(campaign_kinds(&profile), ["earlier", "merge"]);
}

#[test]
fn a_tune_failing_on_provenance_leaves_the_profile_as_it_was_and_resumes() {
    let (dir, profile) = store_near_full("store-tune-full");
    let args = tune_args(&artifacts().lib4(), "f16:TN:48:3:64");
    let refs = strs(&args);
    fails_on_provenance(&dir, &profile, cli(&dir, &refs));

    // The checkpoint was kept: the same command, with room, resumes and writes.
    let summary: Value = serde_json::from_str(&succeeded(&run_guarded(cli(&dir, &refs)))).unwrap();
    assert_eq!(summary["resumed"], 1);
    assert_eq!(campaign_kinds(&profile), ["earlier", "tune"]);
    let rows = rows_of(&profile, 0);
    assert_eq!(rows.len(), SEED.len() + rows_written(&summary).len());
}

/// The shim that stops `tunedblas` right after the rename putting a named file in place
/// (`tests/hosts/rename_signal.c`): a signal at an exact point of a commit.
fn rename_shim() -> PathBuf {
    let dir = build::shared_lib(
        build::Compiler::C,
        "librename_signal.so.1",
        "librename_signal.so",
        &["{hosts}/rename_signal.c".into(), "-ldl".into()],
    );
    dir.join("librename_signal.so.1")
}

/// `tune` of one shape into the store of `dir` that adopts a row (refblas's heuristic
/// made slow), sent `signal` right after the rename of `after` when given.
fn tune_stopped(dir: &Path, shape: &str, stop: Option<(i32, &str)>) -> Output {
    let mut args = tune_args(&artifacts().lib4(), shape);
    args.extend(["--confirm", "off"].map(String::from));
    let mut cmd = cli(dir, &strs(&args));
    cmd.env("REFBLAS_SLOW_HEURISTIC", "4");
    if let Some((signal, after)) = stop {
        cmd.env("LD_PRELOAD", rename_shim())
            .env("RENAME_SIGNAL", signal.to_string())
            .env("RENAME_SIGNAL_AFTER", after);
    }
    run_guarded(cmd)
}

/// Whether the store of `dir` is whole: each rank file holds the rows `profiles.json`
/// says it does, and no temporary, lock folder or checkpoint is left.
fn assert_whole(dir: &Path, profile: &Path) {
    let reg = json_file(&dir.join("profiles/profiles.json"));
    let rows = rows_of(profile, 0);
    assert_eq!(
        reg["profiles"][PROFILE]["rows_per_rank"].as_u64(),
        Some(rows.len() as u64),
        "{reg}"
    );
    assert_eq!(rows_of(profile, 1), rows);
    assert_eq!(temporaries(&dir.join("profiles")), Vec::<PathBuf>::new());
    for folder in [dir.join("profiles"), profile.to_path_buf()] {
        for e in std::fs::read_dir(&folder).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                !name.ends_with(".lock.d") && !name.contains("partial"),
                "{name} left in {}",
                folder.display()
            );
        }
    }
}

/// An outside tester's finding: SIGINT or SIGTERM (Ctrl-C, `watch` passing its stop on to
/// its round) between the renames of a commit left the new rank files with the old
/// `profiles.json` (`rows_per_rank` wrong), temporaries and lock folders. Now the signal
/// waits for the commit (and the campaign's end: its checkpoint retired, its locks
/// released), then ends the process as asked.
#[test]
fn a_signal_inside_the_commit_ends_the_tune_after_it() {
    use std::os::unix::process::ExitStatusExt;
    let points = [
        (libc::SIGINT, "tunableop_results0.csv"),
        (libc::SIGTERM, "provenance.json"),
        (libc::SIGHUP, "tunableop_results1.csv"),
    ];
    for (i, (signal, after)) in points.into_iter().enumerate() {
        let dir = scratch(&format!("store-signal-{i}"));
        let profile = store_with(&dir, SEED);
        let out = tune_stopped(
            &dir,
            &format!("f16:TN:{}:3:64", 48 + 8 * i),
            Some((signal, after)),
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.signal(), Some(signal), "{stderr}");
        assert_whole(&dir, &profile);
        assert_eq!(campaign_kinds(&profile), ["tune"]);
        assert_eq!(
            std::fs::read_dir(profile.join("campaigns"))
                .unwrap()
                .count(),
            1
        );
    }
}

/// An outside tester's finding: a `tune` killed (SIGKILL, which cannot be held) between
/// the renames of `provenance.json` and `profiles.json`, then run again, recorded its
/// campaign twice, the second time as "replaced 1" (its row replacing itself). Now the
/// rerun replaces its own record (same campaign id) and counts the row as the first commit
/// did, and finishes the store.
#[test]
fn a_tune_killed_after_recording_its_campaign_is_recorded_once() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("store-kill-recorded");
    let profile = store_with(&dir, SEED);
    let shape = "f16:TN:48:3:64";
    let killed = tune_stopped(&dir, shape, Some((libc::SIGKILL, "provenance.json")));
    assert_eq!(killed.status.signal(), Some(libc::SIGKILL));
    let first = json_file(&profile.join("provenance.json"))["campaigns"][0].clone();
    assert_eq!(first["kind"], "tune");

    let out = tune_stopped(&dir, shape, None);
    let summary: Value = serde_json::from_str(&succeeded(&out)).unwrap();
    assert_eq!(summary["resumed"], 1);
    assert_eq!(
        summary["counts"], first["counts"],
        "counted as the first commit did"
    );
    assert_eq!(campaign_kinds(&profile), ["tune"], "recorded once");
    assert_whole(&dir, &profile);
}
