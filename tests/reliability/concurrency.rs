//! Reliability, concurrency: 32 threads of mixed hits and misses with exact per-key counts
//! (past the periodic count flushes), and 4 processes recording misses into one folder at
//! once with no interleaved or corrupt line.

use std::collections::HashMap;
use std::process::Stdio;

use crate::common::faults::*;
use crate::common::*;

const HIT_H: &str = "ex:TN:h:16:8:16";
const HIT_S: &str = "sgemm:NN:s:8:8:8";
const MISS_H: &str = "ex:TN:h:16:4:16";
const MISS_SB: &str = "sb:NT:h:8:8:8";

#[test]
fn thirty_two_threads_exact_per_key_counts() {
    const THREADS: u64 = 32;
    const REPS: u64 = 40; // 1,280 calls per key: past the count flush at 1,024
    let dir = scratch("rel-32-threads");
    let (sh, ss) = (tuned(HIT_H), tuned(HIT_S));
    Profile::v4(&dir).tuned(HIT_H, sh).tuned(HIT_S, ss).write();
    let specs: Vec<String> = [HIT_H, MISS_H, HIT_S, MISS_SB]
        .iter()
        .map(|s| format!("{s}:{REPS}"))
        .collect();
    let mut args = vec!["--threads".to_string(), THREADS.to_string()];
    args.extend(specs.iter().cloned());
    let argv = strs(&args);
    let mut cmd = host4_cmd(&dir, true, &argv);
    cmd.env("TUNEDBLAS_STATS", dir.join("stats.json"));
    let (out, stderr) = run_ok(cmd);
    assert_eq!(text(&out.stdout), format!("threads={THREADS} failures=0\n"));

    let per_key = THREADS * REPS;
    let total = 4 * per_key;
    assert_has(&stderr, &format!(
            "{total} calls: {} served, 0 default, {} missed (2 shapes), 0 passed through, 0 fallbacks",
            2 * per_key,
            2 * per_key
        ));
    let stats: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("stats.json")).unwrap()).unwrap();
    assert_eq!(stats["calls"], total);
    assert_eq!(stats["served"], 2 * per_key);
    assert_eq!(stats["missed_calls"], 2 * per_key);
    assert_eq!(stats["rows_hit"], 2);

    // Every call ran exactly once, with the right solution, per key.
    let mut ran: HashMap<(String, String, String), u64> = HashMap::new();
    for t in trace(&dir) {
        let key = (
            format!("{}x{}x{}", t["m"], t["n"], t["k"]),
            t["solution"].clone(),
            t["heuristic"].clone(),
        );
        *ran.entry(key).or_default() += 1;
    }
    assert_eq!(
        ran[&("16x8x16".into(), sh.to_string(), "0".into())],
        per_key
    );
    assert_eq!(ran[&("8x8x8".into(), ss.to_string(), "0".into())], per_key);
    let heuristic: u64 = ran
        .iter()
        .filter(|((_, _, h), _)| h == "1")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(heuristic, 2 * per_key, "{ran:?}");

    let (lines, counts) = whole_miss_files(&dir);
    let mut distinct = lines.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(lines.len(), 2, "each shape logged once: {lines:?}");
    assert_eq!(distinct.len(), 2, "{lines:?}");
    let mut counts = counts;
    counts.sort();
    let mut want = vec![(miss_line(MISS_H), per_key), (miss_line(MISS_SB), per_key)];
    want.sort();
    assert_eq!(counts, want, "exact per-key counts");
}

#[test]
fn four_processes_record_misses_at_once_without_corrupt_lines() {
    let dir = scratch("rel-4-procs");
    Profile::v4(&dir).tuned(HIT_H, tuned(HIT_H)).write();
    // Shared shapes every process misses, and 30 of each process's own.
    let shared = ["ex:TN:h:12:12:12", "sgemm:NN:s:12:4:12", "sb:NT:b:8:4:8"];
    let own = |p: usize| -> Vec<String> {
        (1..=30)
            .map(|n| format!("ex:NN:h:{}:{n}:8", 8 + p))
            .collect()
    };
    let mut children = Vec::new();
    for p in 0..4 {
        let mut args: Vec<String> = shared.iter().map(|s| format!("@threads:4:{s}:5")).collect();
        args.extend(own(p));
        args.push(format!("@threads:4:{HIT_H}:5"));
        args.extend(shared.iter().map(|s| s.to_string()));
        let argv = strs(&args);
        let mut cmd = fault_cmd(&dir, true, &argv);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        children.push((p, cmd.spawn().unwrap()));
    }
    let mut pids = Vec::new();
    for (p, child) in children {
        let pid = child.id();
        let out = wait_guarded(child, "fault_host");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(!text(&out.stdout).contains("failures=1"));
        pids.push((p, pid));
    }
    // Each process has its own two files, each whole, with exactly its shapes.
    whole_miss_files(&dir);
    for (p, pid) in pids {
        let files = miss_files_of(&dir, pid);
        assert_eq!(files.len(), 2, "{files:?}");
        let log = files
            .iter()
            .find(|f| !f.to_string_lossy().ends_with(".counts.csv"))
            .unwrap();
        let lines: Vec<String> = std::fs::read_to_string(log)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        let mut want: Vec<String> = shared.iter().map(|s| miss_line(s)).collect();
        want.extend(own(p).iter().map(|s| miss_line(s)));
        assert_eq!(lines, want, "process {p}");
        let counts = files
            .iter()
            .find(|f| f.to_string_lossy().ends_with(".counts.csv"))
            .unwrap();
        let counts = tunedblas_core::misses::file::read(counts).unwrap();
        assert!(counts.malformed.is_empty());
        for m in &counts.misses {
            let (op, sig) = tunedblas_core::tunableop::op_and_signature(&m.key);
            let line = format!("{op},{sig}");
            let want = if shared.iter().any(|s| miss_line(s) == line) {
                21
            } else {
                1
            };
            assert_eq!(m.calls, Some(want), "process {p}: {line}");
        }
        assert_eq!(counts.misses.len(), 33);
    }
}
