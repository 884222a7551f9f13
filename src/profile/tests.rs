use super::lazy::{tagged, LOADING, PUBLISHING};
use super::rank::load_rank;
use super::*;
use crate::key::ProblemKey;
use crate::table::Action;
use crate::tunableop;
use std::fs::File;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[test]
fn registry_hash_prefix_rules() {
    let sha = "c27e2252cc7a4b6e174601a180a169822dcf15a29e634046daecb61498e3bd2a";
    assert!(registry_sha_matches(sha, sha));
    assert!(registry_sha_matches("c27e2252cc7a", sha));
    assert!(registry_sha_matches("C27E2252CC7A", sha));
    assert!(
        !registry_sha_matches("c27e2252cc7", sha),
        "11 digits is too short"
    );
    assert!(!registry_sha_matches("d05939967b5f", sha));
    assert!(!registry_sha_matches("", sha));
}

/// A fresh folder under the system's temporary folder, removed when dropped.
struct Scratch(PathBuf);
impl Scratch {
    fn new(name: &str) -> Scratch {
        let d =
            std::env::temp_dir().join(format!("tunedblas-profile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// Runs `f` on a thread and fails the test if it has not finished in 60 s (a read that
/// blocks on a FIFO would otherwise hang the test binary).
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("blocked for 60 s: a read that should have been refused")
}

const ROW: &str = "GemmTunableOp_Half_TN,tn_64_24_40_ld_40_40_64,Gemm_Rocblas_7,0.01\n";

#[test]
fn special_and_oversized_files_are_refused_with_one_line_each() {
    let dir = Scratch::new("special");
    let d = dir.0.clone();
    mkfifo(&d.join("tunableop_results0.csv"));
    std::os::unix::fs::symlink("/dev/zero", d.join("tunableop_results1.csv")).unwrap();
    // Sparse: 1 GiB and a byte, in no time and no disk space.
    let big = File::create(d.join("tunableop_results2.csv")).unwrap();
    big.set_len(MAX_RESULTS_FILE_BYTES + 1).unwrap();
    std::fs::create_dir(d.join("tunableop_results3.csv")).unwrap();
    std::fs::write(d.join("tunableop_results4.csv"), ROW).unwrap();
    let began = Instant::now();
    let loaded = bounded(move || load_tables(&d));
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    let p = |r: usize| {
        dir.0
            .join(format!("tunableop_results{r}.csv"))
            .display()
            .to_string()
    };
    let want = [
        format!("{}: a FIFO (named pipe), not a regular file, so it is not read; rank 0 serves nothing; put the results file itself there, or remove it", p(0)),
        format!("{}: a symlink to /dev/zero (a character device), not a regular file, so it is not read; rank 1 serves nothing; put the results file itself there, or remove it", p(1)),
        format!("{}: {} bytes, more than the 1 GiB a results file may have, so it is not read; rank 2 serves nothing; prune the profile or split it", p(2), MAX_RESULTS_FILE_BYTES + 1),
        format!("{}: unreadable (Is a directory (os error 21)); rank 3 serves nothing", p(3)),
    ];
    assert_eq!(loaded.problems, want);
    assert_eq!(loaded.rows, vec![(4, 1)]);
    // Devices without a table of their own get none here: rank 0 is unreadable.
    assert!(loaded.table_for(4).is_some() && loaded.table_for(0).is_none());

    // The lazy loader refuses the same files before reading anything.
    lazy_refuses_up_front(&dir.0, &want);

    // The same checks for every reader of the folder's files.
    for r in 0..3 {
        let path = dir.0.join(format!("tunableop_results{r}.csv"));
        assert!(tunableop::read(&path).is_err());
        let e = read_regular(&path, MAX_JSON_FILE_BYTES).unwrap_err();
        assert!(!matches!(e, ReadError::Io(_)), "{e}");
    }
    let lt = crate::cublaslt::load_tables(&dir.0, crate::cublaslt::LtLib::Cublaslt);
    assert_eq!(lt.problems[..4], want);
}

fn lazy_refuses_up_front(dir: &Path, want: &[String]) {
    let d = dir.to_path_buf();
    let (lazy, start) = bounded(move || LazyTables::open(&d, 4, None));
    assert_eq!(start.problems, want);
    assert_eq!(lazy.parsed_ranks(), vec![4]);
    for r in 0..4 {
        assert_eq!(lazy.rank_state(r), Some(RankState::Failed));
        assert!(matches!(lazy.table_for(r as i32), RankTable::None));
    }
}

#[test]
fn registry_files_that_are_not_regular_are_refused() {
    let dir = Scratch::new("registry");
    let reg = dir.0.join(REGISTRY_FILE);
    mkfifo(&reg);
    let prov = dir.0.join("provenance.json");
    std::os::unix::fs::symlink("/dev/zero", &prov).unwrap();
    let (r, p) = (reg.clone(), prov.clone());
    let (a, b) = bounded(move || {
        (
            Registry::load(&r).unwrap_err().to_string(),
            crate::registry::Provenance::load(&p)
                .unwrap_err()
                .to_string(),
        )
    });
    assert!(
        a.starts_with(&format!(
            "{}: a FIFO (named pipe), not a regular file",
            reg.display()
        )),
        "{a}"
    );
    assert!(
        b.starts_with(&format!(
            "{}: a symlink to /dev/zero (a character device), not a regular file",
            prov.display()
        )),
        "{b}"
    );
    let sel = bounded(move || {
        let sha = "c27e2252cc7a4b6e174601a180a169822dcf15a29e634046daecb61498e3bd2a";
        select(&Request {
            profile_dir: reg.parent().unwrap(),
            sha256: sha,
            explicit: None,
            allow_mismatch: false,
        })
    });
    assert!(
        matches!(&sel, Selection::None { why } if why.contains("a FIFO (named pipe), not a regular file")),
        "{sel:?}"
    );
}

#[test]
fn a_byte_order_mark_is_not_part_of_the_first_line() {
    let dir = Scratch::new("bom");
    std::fs::write(
        dir.0.join("tunableop_results0.csv"),
        format!("\u{feff}{ROW}Validator,ROCBLAS_VERSION,4.4\n"),
    )
    .unwrap();
    std::fs::write(
        dir.0.join("tunableop_results1.csv"),
        format!("\u{feff}Validator,ROCBLAS_VERSION,4.4\n{ROW}"),
    )
    .unwrap();
    let loaded = load_tables(&dir.0);
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    assert_eq!(loaded.rows, vec![(0, 1), (1, 1)]);
    let versions: Vec<&str> = loaded
        .rocblas_versions
        .iter()
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(versions, ["4.4", "4.4"]);
}

/// The line-at-a-time loader and [`tunableop::parse`] agree on every file: the same
/// rows in the same order, the same problems, on real profiles and on byte-mutated
/// ones (cut lines, CRLF, invalid UTF-8, duplicates, BOMs).
#[test]
fn the_streaming_loader_agrees_with_parse() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vllm-rdna");
    let sources: Vec<Vec<u8>> = [
        "rocblas-c27e2252cc7a/tunableop_results0.csv",
        "rocblas-f30bb442e9b5/tunableop_results0.csv",
        "rocm7.14-rocblas5.5/tunableop_results2.csv",
    ]
    .iter()
    .map(|f| std::fs::read(fixtures.join(f)).unwrap())
    .collect();
    let dir = Scratch::new("agree");
    let path = dir.0.join("tunableop_results0.csv");
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let noise = b",\n\r_*\xef\xbb\xbf\xff0x-";
    for round in 0..300 {
        let mut bytes = sources[round % sources.len()].clone();
        if round >= sources.len() {
            for _ in 0..1 + next() % 12 {
                let at = (next() % (bytes.len() as u64 + 1)) as usize;
                match next() % 5 {
                    0 => bytes.truncate(at),
                    1 if at < bytes.len() => bytes[at] ^= 1 << (next() % 8),
                    2 => bytes.insert(at, noise[(next() % noise.len() as u64) as usize]),
                    3 => {
                        // Repeat a stretch: duplicates.
                        let end = (at + (next() % 400) as usize).min(bytes.len());
                        let copy = bytes[at..end].to_vec();
                        bytes.extend_from_slice(&copy);
                    }
                    _ => bytes.splice(0..0, "\u{feff}".bytes()).for_each(drop),
                }
            }
        }
        std::fs::write(&path, &bytes).unwrap();
        let parsed = tunableop::parse(&String::from_utf8_lossy(&bytes));
        let table = match load_rank(&path, 0) {
            Ok(f) => f,
            Err(e) => panic!("round {round}: {e}"),
        };
        let want: Vec<(ProblemKey, Action)> = parsed
            .rows
            .iter()
            .map(|r| (r.key, Action::of(&r.solution).unwrap_or(Action::Default)))
            .collect();
        let got: Vec<(ProblemKey, Action)> =
            table.table.iter().map(|(k, e)| (*k, e.action)).collect();
        assert_eq!(got, want, "round {round}");
        assert_eq!(
            table.table.wildcards().len(),
            parsed.wildcards.len(),
            "round {round}"
        );
        assert_eq!(table.unservable, parsed.unservable.len(), "round {round}");
        assert_eq!(
            table.problems.len(),
            parsed.malformed.len() + parsed.duplicates.len(),
            "round {round}"
        );
        for (m, line) in parsed.malformed.iter().zip(&table.problems) {
            assert!(
                line.contains(&format!(":{}: skipped: {}", m.line, m.reason)),
                "round {round}: {line}"
            );
        }
        for (d, line) in parsed
            .duplicates
            .iter()
            .zip(&table.problems[parsed.malformed.len()..])
        {
            assert!(
                line.ends_with(&format!(
                    ":{}: duplicate of line {}; the first row wins",
                    d.line, d.first_line
                )),
                "round {round}: {line}"
            );
        }
    }
}

/// A two-rank folder whose ranks serve different solutions for one row.
fn two_ranks(name: &str) -> Scratch {
    let dir = Scratch::new(name);
    std::fs::write(dir.0.join("tunableop_results0.csv"), ROW).unwrap();
    let other = ROW.replace("Gemm_Rocblas_7,", "Gemm_Rocblas_8,");
    std::fs::write(dir.0.join("tunableop_results1.csv"), other).unwrap();
    dir
}

fn action_of(t: RankTable<'_>) -> Option<Action> {
    match t {
        RankTable::Ready(t) => t.iter().next().map(|(_, e)| e.action),
        _ => None,
    }
}

#[test]
fn a_lazy_rank_claimed_by_the_parent_of_a_fork_is_taken_over() {
    let dir = two_ranks("fork-claim");
    let (lazy, _) = LazyTables::open(&dir.0, 0, None);
    assert_eq!(lazy.parsed_ranks(), vec![0]);
    let slot = lazy.slot(1).unwrap();
    let me = u64::from(std::process::id());
    // A thread of this process is reading rank 1: never wait for it.
    slot.state.store(tagged(LOADING, me), Ordering::Release);
    assert!(matches!(lazy.table_for(1), RankTable::Loading));
    assert!(matches!(lazy.table_for(1), RankTable::Loading));
    // The same claim as a forked child sees it: the claimant is another process's
    // thread, gone here, so this thread reads the rank itself.
    slot.state.store(tagged(LOADING, me + 1), Ordering::Release);
    let mut reports = Vec::new();
    let got = lazy.table_for_with(1, |r| reports.push(r.clone()));
    assert_eq!(action_of(got), Some(Action::Solution(8)));
    assert_eq!(reports.len(), 1);
    assert_eq!(
        (reports[0].rank, reports[0].rows, reports[0].parsed),
        (1, 1, true)
    );
    assert_eq!(lazy.parsed_ranks(), vec![0, 1]);
}

#[test]
fn a_child_forked_while_a_rank_was_published_passes_through_and_never_waits() {
    let dir = two_ranks("fork-publish");
    let (lazy, _) = LazyTables::open(&dir.0, 0, None);
    let slot = lazy.slot(1).unwrap();
    // Forked in the instant the parent's thread was inside OnceLock::set: calling set
    // here could wait forever on the Once the vanished thread was running.
    slot.state.store(
        tagged(PUBLISHING, u64::from(std::process::id()) + 1),
        Ordering::Release,
    );
    let answer = bounded(move || matches!(lazy.table_for(1), RankTable::Loading));
    assert!(answer);
}

#[test]
fn identical_rank_files_share_one_table_without_a_second_parse() {
    let dir = Scratch::new("identical");
    for r in [0, 1, 3] {
        std::fs::write(dir.0.join(format!("tunableop_results{r}.csv")), ROW).unwrap();
    }
    std::os::unix::fs::symlink(
        "tunableop_results0.csv",
        dir.0.join("tunableop_results2.csv"),
    )
    .unwrap();
    let (lazy, start) = LazyTables::open(&dir.0, 1, None);
    assert_eq!(lazy.parsed_ranks(), vec![1]);
    assert_eq!(start.loaded.len(), 4, "{:?}", start.loaded);
    for r in [0, 2, 3] {
        assert_eq!(lazy.rank_state(r), Some(RankState::Ready { parsed: false }));
    }
    assert!(lazy.single().is_some_and(|t| t.len() == 1));
    assert_eq!(lazy.ready_tables().len(), 1);
    // No profile: no table for any device, and one empty table for all.
    let none = LazyTables::default();
    assert!(matches!(none.table_for(0), RankTable::None));
    assert!(none.single().is_some_and(|t| t.is_empty()));
    // Different ranks: no single table until they are known to be the same.
    let two = two_ranks("not-single");
    let (lazy, _) = LazyTables::open(&two.0, 0, None);
    assert!(lazy.single().is_none());
    let _ = lazy.table_for(1);
    assert!(lazy.single().is_none());
    assert_eq!(lazy.ready_tables().len(), 2);
}

fn loaded_from(rows: &str, validator: &str) -> (Loaded, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "tunedblas-version-problems-{}-{}",
        std::process::id(),
        validator.len() + rows.len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tunableop_results0.csv"),
        format!("Validator,ROCBLAS_VERSION,{validator}\n{rows}"),
    )
    .unwrap();
    (load_tables(&dir), dir)
}

/// rocBLAS up to 4.x runs the heuristic for `algo = solution_index` with an id <= 0, so
/// such a row is not what it looks like: said at load, with the first one and a count.
#[test]
fn nonpositive_ids_are_named_for_builds_up_to_4() {
    let rows = "GemmTunableOp_Half_TN,tn_64_32_16_ld_16_16_64,Gemm_Rocblas_0,0.1\n\
GemmTunableOp_Half_TN,tn_64_48_16_ld_16_16_64,Gemm_Rocblas_-1086326047,0.1\n\
GemmTunableOp_Half_TN,tn_64_64_16_ld_16_16_64,Gemm_Rocblas_12,0.1\n";
    let (loaded, dir) = loaded_from(rows, "2.47.0.");
    let p = version_problems(&loaded, "2.47.0.");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].contains("tunableop_results0.csv:2: GemmTunableOp_Half_TN,tn_64_32_16_ld_16_16_64 names solution 0, and 1 more rows name ids <= 0")
            && p[0].contains("rocBLAS 2.47.0 (ROCm 5.5) runs its heuristic"),
        "{}",
        p[0]
    );
    assert_eq!(contradicting_validators(&loaded, "2.47.0."), p);
    assert_eq!(
        version_problems(&loaded, "4.4.1.").len(),
        2,
        "4.x too, and 2.47 is another build"
    );
    // rocBLAS 5.x: -1086326047 is a Tensile solution, 0 the heuristic as asked.
    assert!(version_problems(&loaded, "5.5.0.cd957402")
        .iter()
        .all(|l| !l.contains("ids <= 0")));
    let _ = std::fs::remove_dir_all(dir);
}

/// Debian builds report `2.47.0.`; a file saying `2.47.0` is the same build.
#[test]
fn a_version_without_its_empty_commit_id_is_no_contradiction() {
    let rows = "GemmTunableOp_Half_TN,tn_64_32_16_ld_16_16_64,Gemm_Rocblas_3,0.1\n";
    let (loaded, dir) = loaded_from(rows, "2.47.0");
    assert_eq!(version_problems(&loaded, "2.47.0."), Vec::<String>::new());
    assert_eq!(version_problems(&loaded, "2.48.0.").len(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn rank_file_names() {
    assert_eq!(rank_of_file("tunableop_results0.csv"), Some(0));
    assert_eq!(rank_of_file("tunableop_results13.csv"), Some(13));
    assert_eq!(rank_of_file("tunableop_results.csv"), None);
    assert_eq!(rank_of_file("tunableop_results1.csv.bak"), None);
    assert_eq!(rank_of_file("tunableop_untuned0.csv"), None);
}

#[test]
fn load_ranks_takes_any_table_type_and_shares_identical_ones() {
    let dir = Scratch::new("load-ranks");
    for (rank, body) in [(0, "a"), (1, "a"), (2, "b")] {
        std::fs::write(dir.0.join(format!("tunableop_results{rank}.csv")), body).unwrap();
    }
    std::fs::write(dir.0.join("notes.csv"), "not a rank file").unwrap();
    let read = |_: usize, p: &Path, _: &mut Vec<String>| std::fs::read_to_string(p).ok();
    let mut problems = Vec::new();
    let (tables, distinct) = load_ranks(&dir.0, &mut problems, |a, b| a == b, read);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!((tables.len(), distinct), (3, 2));
    let (t0, t1) = (tables[0].as_ref().unwrap(), tables[1].as_ref().unwrap());
    assert!(Arc::ptr_eq(t0, t1), "identical ranks share one table");
    assert_eq!(table_of_device(&tables, 2).map(String::as_str), Some("b"));
    assert_eq!(table_of_device(&tables, 7).map(String::as_str), Some("a"));
    assert_eq!(table_of_device(&tables, -1).map(String::as_str), Some("a"));
    let (none, _) = load_ranks(&dir.0.join("absent"), &mut problems, |a, b| a == b, read);
    assert!(none.is_empty());
    assert_eq!(problems.len(), 1, "an unreadable folder is one problem");
    assert!(problems[0].contains("cannot read the profile folder"));
}

#[test]
fn a_path_is_served_only_to_the_version_its_files_name() {
    let s = Scratch::new("select-path");
    let dir = s.0.join("pytorch");
    std::fs::create_dir_all(&dir).unwrap();
    let head = "Validator,PT_VERSION,2.7.0\nValidator,ROCBLAS_VERSION,4.4.0.5f2e9c71\n";
    let row = "GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Default,inf\n";
    std::fs::write(dir.join("tunableop_results0.csv"), format!("{head}{row}")).unwrap();
    std::fs::write(dir.join("tunableop_results1.csv"), format!("{head}{row}")).unwrap();
    assert!(names_a_path("/data/t") && !names_a_path("ref-v4") && !names_a_path("../x"));
    let chosen = |sel: Selection| matches!(sel, Selection::Chosen { .. });
    assert!(chosen(select_path(&dir, Some("4.4.0.5f2e9c71"), false)));
    assert!(chosen(select_path(
        &dir.join("tunableop_results1.csv"),
        Some("4.4.0.5f2e9c71"),
        false
    )));
    let why = |sel: Selection| match sel {
        Selection::None { why } => why,
        other => panic!("{other:?}"),
    };
    let w = why(select_path(&dir, Some("5.6.0.c83a10d4"), false));
    assert!(w.contains("ROCBLAS_VERSION is 4.4.0.5f2e9c71"), "{w}");
    assert!(w.contains("tunedblas profiles import"), "{w}");
    assert!(chosen(select_path(&dir, Some("5.6.0.c83a10d4"), true)));
    assert!(why(select_path(&dir, None, false)).contains("no version string"));
    // GCN_ARCH_NAME: a file of another architecture than this machine's GPUs is refused; the
    // same base name with other feature flags is this one; no GPU known: not checked.
    let arch_dir = s.0.join("arch");
    std::fs::create_dir_all(&arch_dir).unwrap();
    std::fs::write(
        arch_dir.join("tunableop_results0.csv"),
        format!("Validator,ROCBLAS_VERSION,4.4.0.5f2e9c71\nValidator,GCN_ARCH_NAME,gfx90a:sramecc+:xnack-\n{row}"),
    )
    .unwrap();
    let on = |archs: &[&str]| {
        let archs: Vec<String> = archs.iter().map(|a| a.to_string()).collect();
        select_path_on(&arch_dir, Some("4.4.0.5f2e9c71"), &archs, false)
    };
    let w = why(on(&["gfx942"]));
    assert!(
        w.contains("GCN_ARCH_NAME is gfx90a:sramecc+:xnack-, but this machine's GPUs are gfx942"),
        "{w}"
    );
    assert!(chosen(on(&["gfx90a"])));
    assert!(chosen(on(&[])));
    // One rank file of another build spoils the folder.
    std::fs::write(
        dir.join("tunableop_results2.csv"),
        format!("Validator,ROCBLAS_VERSION,4.4.0.00000000\n{row}"),
    )
    .unwrap();
    assert!(why(select_path(&dir, Some("4.4.0.5f2e9c71"), false)).contains("results2.csv"));
    // Files PyTorch would not name so, and folders with none.
    std::fs::write(s.0.join("my.csv"), head).unwrap();
    assert!(why(select_path(
        &s.0.join("my.csv"),
        Some("4.4.0.5f2e9c71"),
        false
    ))
    .contains("tunableop_results<rank>.csv"));
    assert!(why(select_path(&s.0, Some("4.4.0.5f2e9c71"), false)).contains("no tunableop_results"));
    assert!(why(select_path(
        &s.0.join("nope"),
        Some("4.4.0.5f2e9c71"),
        false
    ))
    .contains("no such file or folder"));
}
