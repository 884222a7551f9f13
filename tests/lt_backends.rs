//! End-to-end on the CPU: what the interposer does alike on both Lt backends, each test
//! written once and run on the cuBLASLt stand-in and on the hipBLASLt one
//! (`tests/common/lt.rs`). Each backend's own cases are in `tests/cublaslt.rs` and
//! `tests/hipblaslt.rs`.

mod common;

use std::process::Stdio;

use common::lt::{algos, builds_in_trace, key, row, stats, Side};
use common::{assert_has, faults::run_guarded, ok, scratch, text, trace, tunedblas_cmd};
use tunedblas_core::cublaslt::op_and_signature;

/// `test_name(side) { ... }`: a module `test_name` with the test `cublaslt` and the test
/// `hipblaslt`.
macro_rules! both {
    ($(#[$doc:meta])* fn $name:ident($s:ident) $body:block) => {
        $(#[$doc])*
        mod $name {
            use super::*;
            fn run($s: &Side) $body
            #[test]
            fn cublaslt() {
                run(common::lt::cublaslt())
            }
            #[test]
            fn hipblaslt() {
                run(common::lt::hipblaslt())
            }
        }
    };
}

both! {
    /// Without a row, the caller's own algorithm runs and the shapes are recorded under
    /// PyTorch's names; the start line, the stats, the exit summary and the live status
    /// (final at exit) name the backend and count the misses.
    fn misses_are_recorded_under_pytorch_names_when_no_profile_matches(s) {
        let dir = scratch(&format!("{}-miss", s.name));
        let stderr = s.host_ok(&dir, &["2560,16,1536", "2560,16,1536", "512,4,2560"]);
        let startup = stderr.lines().next().unwrap_or("");
        assert!(startup.starts_with(&format!("tunedblas: {}: ", s.label)), "{stderr}");
        assert!(startup.contains(s.soname), "{stderr}");
        assert_has(startup, &format!("misses go to {}", dir.join("misses").display()));
        assert!(trace(&dir).iter().all(|l| l["algo"] == "6" && l["ok"] == "1"));
        assert_eq!(algos(&dir).len(), 3);
        assert_eq!(
            s.miss_lines(&dir),
            [
                "GemmTunableOp_BFloat16_TN,tn_2560_16_1536_ld_1536_1536_2560",
                "GemmTunableOp_BFloat16_TN,tn_512_4_2560_ld_2560_2560_512",
            ]
        );
        let st = stats(&dir);
        assert_eq!(st["library"], s.name, "{st}");
        assert_eq!(st["calls"], 3, "{st}");
        assert_eq!(st["missed_calls"], 3, "{st}");
        assert_eq!(st["missed_shapes"], 2, "{st}");
        assert_has(&stderr, &format!("{}: 3 calls: 0 served, 0 default, 3 missed (2 shapes)", s.label));
        let status: Vec<_> = std::fs::read_dir(dir.join("misses"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".status.json"))
            .collect();
        assert_eq!(status.len(), 1, "{status:?}");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&status[0]).unwrap()).unwrap();
        assert_eq!(v["final"], true, "{v}");
        let lt = &v["backends"][0];
        assert_eq!(lt["backend"], s.name, "{v}");
        assert_eq!(lt["counters"]["missed"], 3, "{v}");
        assert_eq!(lt["missed_shapes"], 2, "{v}");
        assert_eq!(lt["top_missed"][0]["calls"], 2, "{v}");
    }
}

both! {
    /// A tuned algorithm runs only where it can: enough workspace (the row's needs 4096
    /// bytes in the stand-in) and 16-byte aligned pointers; other calls keep the caller's
    /// algorithm, and the row stays in service.
    fn calls_the_tuned_algorithm_cannot_take_pass_through_without_quarantine(s) {
        let dir = scratch(&format!("{}-unfit", s.name));
        let (big, algo, field) = s.big;
        s.profile(&dir, &[row(&key(128, 8, 64), big)]);
        let calls = ["128,8,64,0", "128,8,64,8192", "128,8,64,8192,1", "128,8,64,4096"];
        let stderr = s.host_ok(&dir, &calls);
        assert_eq!(algos(&dir), ["6", algo, "6", algo], "{stderr}");
        if let Some((k, v)) = field {
            assert_eq!(trace(&dir)[1][k], v);
        }
        let st = stats(&dir);
        assert_eq!(st["served"], 2, "{st}");
        assert_eq!(st["passed_through"], 2, "{st}");
        assert_eq!(st["fallbacks"], 0, "{st}");
        assert!(st["rows_quarantined"].as_array().unwrap().is_empty(), "{st}");
    }
}

both! {
    /// Without the preload, or with `TUNEDBLAS_DISABLE=1`, the library's heuristic answer
    /// runs (the stand-in's algorithm 6) and nothing is recorded, whatever the profile holds.
    fn without_the_preload_or_disabled_nothing_changes(s) {
        for (what, preload) in [("plain", false), ("disabled", true)] {
            let dir = scratch(&format!("{}-{what}", s.name));
            s.profile(&dir, &[row(&key(64, 8, 64), s.tuned.0)]);
            let mut cmd = s.host_cmd(&dir, preload, &["64,8,64"]);
            if preload {
                cmd.env("TUNEDBLAS_DISABLE", "1");
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{what}: {}", text(&out.stderr));
            assert_eq!(algos(&dir), ["6"], "{what}");
            assert!(s.miss_lines(&dir).is_empty(), "{what}");
        }
    }
}

both! {
    /// A file-size limit (`ulimit -f 0`) with SIGXFSZ at its default action: every file
    /// write of ours fails (hipBLASLt's guard object, the hash cache, the miss log, the
    /// status) and is said, and the host runs whole, as it does without us; the signal the
    /// first write raised once ended it (rc 153).
    fn a_file_size_limit_does_not_kill_the_host(s) {
        use std::os::unix::process::CommandExt;
        for preload in [true, false] {
            let dir = scratch(&format!("{}-fsize-{preload}", s.name));
            s.profile(&dir, &[row(&key(64, 8, 64), s.tuned.0)]);
            let mut cmd = s.host_cmd(&dir, preload, &["64,8,64", "16,8,8"]);
            // The stand-in's trace and the stats file are writes the limit ends anyway.
            cmd.env_remove(s.var("TRACE")).env_remove("TUNEDBLAS_STATS");
            // SAFETY: setrlimit only, between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    let none = libc::rlimit { rlim_cur: 0, rlim_max: libc::RLIM_INFINITY };
                    libc::setrlimit(libc::RLIMIT_FSIZE, &none);
                    Ok(())
                });
            }
            let out = run_guarded(cmd);
            let stderr = text(&out.stderr);
            assert!(out.status.success(), "{preload}: {:?}: {stderr}", out.status);
            if preload {
                assert_has(&stderr, "File too large");
            }
        }
    }
}

both! {
    /// Threads racing to the first call of a tuned shape: one rebuilds its algorithm, the
    /// others pass through meanwhile instead of waiting for it (a fork child or a signal
    /// handler must never wait on a rebuild); every call is one or the other.
    fn first_calls_racing_a_rebuild_pass_through_rather_than_wait(s) {
        let dir = scratch(&format!("{}-race", s.name));
        s.profile(&dir, &[row(&key(8, 8, 8), s.tuned.0)]);
        let out = run_guarded(s.host_cmd(&dir, true, &["@threads:32:50"]));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let st = stats(&dir);
        let (served, passed) =
            (st["served"].as_u64().unwrap(), st["passed_through"].as_u64().unwrap());
        assert_eq!(served + passed, 32 * 50, "{st}");
        assert!(served > 0, "{st}");
        let tuned = trace(&dir).iter().filter(|l| l["algo"] == s.tuned.1).count() as u64;
        assert_eq!(tuned, served, "{st}");
    }
}

both! {
    /// `tunedblas_<backend>_serving(0/1)` switches serving inside a process; without the
    /// preload the switch does not exist and the host says so.
    fn serving_can_be_switched_off_and_on_inside_the_process(s) {
        let dir = scratch(&format!("{}-switch", s.name));
        s.profile(&dir, &[row(&key(64, 8, 64), s.tuned.0)]);
        let out = s.host(&dir, true, &["64,8,64", "off", "64,8,64", "on", "64,8,64"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(algos(&dir), [s.tuned.1, "6", s.tuned.1]);
        let plain = s.host(&scratch(&format!("{}-switch-plain", s.name)), false, &["off"]);
        assert!(text(&plain.stdout).contains("call=off status=-1"));
    }
}

both! {
    /// Forks while other threads record misses: no child hangs on a lock a thread held.
    fn forking_while_threads_record_never_hangs_a_child(s) {
        let dir = scratch(&format!("{}-storm", s.name));
        s.profile(&dir, &[]);
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8", "@storm:6:20"]));
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
        assert_has(&stdout, "storm-hung=0");
    }
}

both! {
    /// `_exit` from a signal handler: the counts, the stats, the summary and the shapes are
    /// written.
    fn a_signal_handler_exit_writes_counts_and_summary(s) {
        for round in 0..3 {
            let dir = scratch(&format!("{}-sigexit-{round}", s.name));
            s.profile(&dir, &[]);
            let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8", "@sigexit:6"]));
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(7), "{stderr}");
            assert!(
                stderr.contains(&format!("{}: ", s.label)) && stderr.contains(" calls: "),
                "the summary is written: {stderr}"
            );
            assert!(s.counted_calls(&dir) > 0, "counts written at _exit");
            assert!(stats(&dir)["calls"].as_u64().unwrap() > 0);
            assert!(!s.miss_lines(&dir).is_empty(), "the shapes are on disk");
        }
    }
}

both! {
    /// Cancellation acted on between calls, and inside the library (the stand-in's
    /// `_CANCEL_POINT`): with or without the interposer the host survives.
    fn cancelling_a_thread_inside_a_matmul_does_not_abort_the_host(s) {
        for inside in [false, true] {
            for preload in [false, true] {
                let dir = scratch(&format!("{}-cancel-{inside}-{preload}", s.name));
                s.profile(&dir, &[row(&key(8, 8, 8), s.tuned.0)]);
                let mut cmd = s.host_cmd(&dir, preload, &["8,8,8", "@cancel:20"]);
                cmd.env_remove(s.var("TRACE"));
                if inside {
                    cmd.env(s.var("CANCEL_POINT"), "1");
                }
                let out = run_guarded(cmd);
                assert!(
                    out.status.success(),
                    "inside: {inside}, preload: {preload}: {:?}: {}",
                    out.status,
                    text(&out.stderr)
                );
                assert_has(&text(&out.stdout), "cancelled=20");
            }
        }
    }
}

both! {
    /// A served call and a repeated miss read their key from what the descriptor and
    /// layouts were made and set with, in the interposer: no attribute getter runs (on an
    /// H200 cuBLASLt's 25 per call were a third to a half of what the interposer added;
    /// hipBLASLt's were four per call).
    fn served_calls_and_misses_read_no_attribute_getter(s) {
        let dir = scratch(&format!("{}-no-getters", s.name));
        s.profile(&dir, &[row(&key(8, 8, 8), s.tuned.0)]);
        let out = s
            .host_cmd(&dir, true, &["8,8,8", "8,8,8", "16,8,8", "16,8,8"])
            .env(s.var("TRACE_GETTERS"), "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let t = trace(&dir);
        assert_eq!(algos(&dir), [s.tuned.1, s.tuned.1, "6", "6"], "{t:?}");
        let getters: Vec<&str> = t.iter().map(|l| l["getters"].as_str()).collect();
        assert_eq!(getters, ["0"; 4], "{t:?}");
        assert_eq!(stats(&dir)["served"], 2);
        assert_eq!(stats(&dir)["missed_calls"], 2);
    }
}

both! {
    /// One tuned shape and one missed, each called once by the main thread (the tuned
    /// row's algorithm is rebuilt then), then 32 x 50 times each at once: exact totals, one
    /// first sight, exact counts on disk.
    fn thirty_two_threads_give_exact_counts(s) {
        let dir = scratch(&format!("{}-threads", s.name));
        s.profile(&dir, &[row(&key(8, 8, 8), s.tuned.0)]);
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8", "16,8,8", "@threads:32:50"]));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let st = stats(&dir);
        assert_eq!(st["calls"], 3202, "{st}");
        assert_eq!(st["served"], 1601, "{st}");
        assert_eq!(st["missed_calls"], 1601, "{st}");
        assert_eq!(st["missed_shapes"], 1, "{st}");
        assert_eq!(s.miss_lines(&dir).len(), 1, "one first sight");
        assert_eq!(s.counted_calls(&dir), 1601, "exact counts on disk");
        let tuned = algos(&dir).iter().filter(|a| *a == s.tuned.1).count();
        assert_eq!(tuned, 1601, "{st}");
    }
}

both! {
    /// `tunedblas profiles which` answers for an Lt build as the interposer chooses: the
    /// profile made for the build's sha256, its reason in the backend's own name; without
    /// one, the reason says there is none for that build.
    fn profiles_which_names_the_profile_the_interposer_serves(s) {
        let dir = scratch(&format!("{}-which", s.name));
        let lib = s.lib();
        let which = |dir: &std::path::Path| {
            ok(&tunedblas_cmd(dir, &["profiles", "which", lib.to_str().unwrap()])
                .output()
                .unwrap())
        };
        let none = which(&dir);
        assert_has(&none, "-> no profile");
        assert_has(&none, &format!("(build {})", &s.sha[..12]));
        s.profile(&dir, &[row(&key(8, 8, 8), s.tuned.0)]);
        let out = which(&dir);
        assert_has(&out, &format!("-> profile '{}'", s.profile));
        assert!(!out.contains("rocBLAS"), "worded for {}: {out}", s.label);
        let host = run_guarded(s.host_cmd(&dir, true, &["8,8,8"]));
        let stderr = text(&host.stderr);
        assert!(
            stderr.contains(&format!("profile {} auto-selected", s.profile)),
            "the interposer chose another: {stderr}"
        );
    }
}

both! {
    /// `tunedblas verify --lib` replays an Lt profile's rows under the preload, as it does
    /// rocBLAS's: a child calls each row's problem as PyTorch does (the heuristic's first
    /// answer as the algorithm) and the interposer's own counters must show every row hit.
    /// A row needing more workspace than the callers give is never served (its calls pass
    /// through): verify fails and says so.
    fn verify_replays_every_row_of_an_lt_profile_under_the_preload(s) {
        let verify = |dir: &std::path::Path, workspace: &str| {
            let lib = s.lib();
            let mut args = vec!["verify", "--lib", lib.to_str().unwrap(), "--workspace", workspace];
            let cudart = common::lt::cudart();
            if s.name == "cublaslt" {
                args.extend(["--cudart", cudart.to_str().unwrap()]);
            }
            run_guarded(tunedblas_cmd(dir, &args))
        };
        let dir = scratch(&format!("{}-verify", s.name));
        s.profile(&dir, &[row(&key(64, 8, 64), s.tuned.0), row(&key(64, 4, 64), "Default")]);
        let out = verify(&dir, "8192");
        let said = ok(&out);
        assert_has(&said, &format!("({})", s.label));
        assert_has(&said, "2 rows replayed on 1 device: rows hit 2/2, 0 missed calls, 0 fallbacks -> OK");

        let dir = scratch(&format!("{}-verify-big", s.name));
        s.profile(&dir, &[row(&key(64, 8, 64), s.big.0)]);
        let out = verify(&dir, "0");
        let said = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{said}{}", text(&out.stderr));
        assert_has(&said, "FAILED");
        assert_has(&said, "1 of 1 replayed calls were passed through, not served");
        assert!(ok(&verify(&dir, "8192")).contains("rows hit 1/1"), "enough workspace: served");
    }
}

// ---------------------------------------------------------------------------------------
// The lifecycle's fault rows, on both Lt backends (the rocBLAS side's are in
// reliability/life.rs): the three backends share one lifecycle, and these show it holds for
// each.
// ---------------------------------------------------------------------------------------

both! {
    /// A `vfork` child that fails its exec and `_exit`s does not write the parent's summary
    /// or counts.
    fn a_vfork_child_does_not_finish_the_parents_run(s) {
        let dir = scratch(&format!("{}-vfork", s.name));
        s.profile(&dir, &[]);
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8", "@vfork-fail", "16,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(stderr.matches(" calls: ").count(), 1, "one summary: {stderr}");
        assert_has(&stderr, &format!("{}: 2 calls", s.label));
        assert_eq!(s.counted_calls(&dir), 2, "the parent's counts");
    }
}

both! {
    /// `_Exit` and an `exec` both leave the counts, the stats and the summary written.
    fn every_way_out_writes_counts_stats_and_summary(s) {
        for last in ["@Exit", "@exec:/bin/true"] {
            let dir = scratch(&format!("{}-out-{}", s.name, last.len()));
            s.profile(&dir, &[]);
            let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8", "8,8,8", "16,8,8", last]));
            let stderr = text(&out.stderr);
            assert!(out.status.success(), "{last}: {stderr}");
            assert!(stderr.contains(&format!("{}: 3 calls", s.label)), "{last}: {stderr}");
            assert_eq!(s.counted_calls(&dir), 3, "{last}");
            assert_eq!(stats(&dir)["calls"], 3, "{last}");
        }
    }
}

both! {
    /// The stats file is written in place of a symbolic link planted under its name, never
    /// through it.
    fn stats_are_never_written_through_a_planted_symlink(s) {
        let dir = scratch(&format!("{}-stats-symlink", s.name));
        s.profile(&dir, &[]);
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("stats.json")).unwrap();
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8"]));
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        let link = std::fs::symlink_metadata(dir.join("stats.json")).unwrap();
        assert!(!link.file_type().is_symlink(), "the stats replaced the link");
        assert_eq!(stats(&dir)["calls"], 1);
    }
}

both! {
    /// A fork taken while another thread of the parent is inside `dlopen` or `dlclose`
    /// leaves the loader's lists mid-change, and its lock held, in the child: a call site
    /// looked up there aborted the child (`Inconsistency detected by ld.so ...
    /// RT_CONSISTENT`) or hung it (an outside tester's host: 147 of 200 children, the
    /// parent having made its first call). A child now takes the function its parent found
    /// for the call site, whatever `dlclose`s moved the loader's generation on since.
    fn fork_children_of_a_parent_loading_libraries_are_neither_aborted_nor_hung(s) {
        let dir = scratch(&format!("{}-fork-churn", s.name));
        s.profile(&dir, &[]);
        let churn = format!("@fork-churn:{}:100", s.module2.display());
        let out = run_guarded(s.host_cmd(&dir, true, &["64,8,32", &churn]));
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
        assert_has(&stdout, "churn-hung=0 churn-bad=0");
    }
}

// ---- Library lifetime: a second build side by side, and the served build closed and another
// opened (libs.rs's Registry, as for rocBLAS in reliability/loading.rs) ---------------------

both! {
    /// The first build's call is served (the tuned algorithm in the trace); the second
    /// build's runs untouched, with the caller's own algorithm (the stand-in's heuristic
    /// answer, 6), in build 2, and a line says a second build is loaded.
    fn two_builds_side_by_side_each_call_runs_in_its_own_build(s) {
        let dir = scratch(&format!("{}-two-builds", s.name));
        s.two_build_profiles(&dir, &key(8, 8, 8));
        let module2 = format!("@module:{}", s.module2.display());
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8", &module2, "8,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(builds_in_trace(&dir), ["1", "2"], "{:?}: {stderr}", trace(&dir));
        assert_eq!(algos(&dir), [s.tuned.1, "6"], "{stderr}");
        assert_eq!(stats(&dir)["served"], 1);
        assert_eq!(stats(&dir)["passed_through"], 1);
        let second = format!("a second {} build", s.label);
        assert_eq!(stderr.matches(&second).count(), 1, "{stderr}");
    }
}

both! {
    /// The module that linked the served build closed (the build unloaded with it), the
    /// same module opened again, and a module of the other build opened where it was: every
    /// call site is looked up again after each close, so each call runs in its caller's
    /// build, with objects that build made, and serving follows the build loaded, with its
    /// own profile.
    fn the_served_build_closed_and_another_opened_serves_the_new_one(s) {
        let dir = scratch(&format!("{}-reopen", s.name));
        s.two_build_profiles(&dir, &key(8, 8, 8));
        let module1 = format!("@module:{}", s.module.display());
        let module2 = format!("@module:{}", s.module2.display());
        let calls = [
            "8,8,8", "@close", &module1, "8,8,8", "@close", &module2, "8,8,8", "@close", &module1,
            "8,8,8",
        ];
        let out = run_guarded(s.host_cmd(&dir, true, &calls));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{:?}: {stderr}", out.status);
        assert_eq!(algos(&dir), [s.tuned.1; 4], "{stderr}");
        assert_eq!(builds_in_trace(&dir), ["1", "1", "2", "1"], "{stderr}");
        assert_has(&stderr, &format!("profile {}2 auto-selected", s.profile));
        assert_eq!(stats(&dir)["served"], 4, "each build served its own row: {stderr}");
    }
}

// ---- The profile's files (the rocBLAS rows are in reliability/loading.rs) ----------------

both! {
    /// A FIFO or `/dev/zero` as the rank file is refused with one line; the shapes are
    /// recorded.
    fn a_fifo_or_dev_zero_as_the_rank_file_never_blocks_the_host(s) {
        for what in ["fifo", "zero"] {
            let dir = scratch(&format!("{}-special-{what}", s.name));
            let rank = s.profile(&dir, &[]);
            std::fs::remove_file(&rank).unwrap();
            if what == "fifo" {
                let c = std::ffi::CString::new(rank.to_str().unwrap()).unwrap();
                // SAFETY: a NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            } else {
                std::os::unix::fs::symlink("/dev/zero", &rank).unwrap();
            }
            let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8", "16,8,8"]));
            let stderr = text(&out.stderr);
            assert!(out.status.success(), "{what}: {stderr}");
            assert!(stderr.contains("not a regular file"), "{what}: one line says why: {stderr}");
            assert_eq!(s.miss_lines(&dir).len(), 2, "{what}: the shapes are still recorded");
        }
    }
}

both! {
    /// A row right after a byte order mark (no validator line before it) is served.
    fn a_byte_order_mark_does_not_hide_the_first_row(s) {
        let dir = scratch(&format!("{}-bom", s.name));
        let rank = s.profile(&dir, &[]);
        let r = row(&key(8, 8, 8), s.tuned.0);
        std::fs::write(rank, format!("\u{feff}{r}\n")).unwrap();
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(stats(&dir)["served"], 1, "{stderr}");
    }
}

both! {
    /// The last row cut inside its solution (no time, no newline) could name another
    /// algorithm: it is never served; the whole row before it is.
    fn a_truncated_results_file_serves_its_whole_rows_only(s) {
        let dir = scratch(&format!("{}-truncated", s.name));
        let whole = row(&key(8, 8, 8), s.tuned.0);
        let cut = row(&key(16, 8, 8), s.tuned.0);
        let cut = &cut[..cut.rfind(',').unwrap() - 1];
        let rank = s.profile(&dir, &[whole, cut.to_owned()]);
        let file = std::fs::read_to_string(&rank).unwrap();
        std::fs::write(&rank, file.trim_end()).unwrap();
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8", "16,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(stats(&dir)["served"], 1, "{stderr}");
        assert_eq!(s.miss_lines(&dir).len(), 1, "the cut row's shape is a miss: {stderr}");
    }
}

both! {
    /// A malformed line is skipped with its file and line and every valid row is served;
    /// a `profiles.json` that is not JSON is said, and every call passes through and is
    /// recorded.
    fn malformed_rows_and_an_invalid_registry_are_said_and_nothing_breaks(s) {
        let dir = scratch(&format!("{}-malformed", s.name));
        let bad = "GemmTunableOp_BFloat16_TN,tn_8_8,Gemm_nonsense,x";
        let good = row(&key(8, 8, 8), s.tuned.0);
        s.profile(&dir, &[bad.to_owned(), good]);
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_has(&stderr, &format!("tunableop_results0.csv:{}:", s.validators.len() + 1));
        assert_eq!(stats(&dir)["served"], 1, "{stderr}");

        let dir = scratch(&format!("{}-bad-registry", s.name));
        s.profile(&dir, &[row(&key(8, 8, 8), s.tuned.0)]);
        std::fs::write(dir.join("profiles/profiles.json"), "{\"profiles\": {,,}}\n").unwrap();
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8", "16,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_has(&stderr, "not valid JSON");
        assert_eq!(stats(&dir)["served"], 0);
        assert_eq!(s.miss_lines(&dir).len(), 2, "every shape is recorded");
    }
}

both! {
    /// A profile registered for another sha256 is never chosen; a rank file that is a
    /// folder is said with its name; either way nothing is served and the shape recorded.
    fn a_profile_for_another_build_or_an_unreadable_rank_serves_nothing_and_records(s) {
        let dir = scratch(&format!("{}-other-sha", s.name));
        s.profile(&dir, &[row(&key(8, 8, 8), s.tuned.0)]);
        let reg = dir.join("profiles/profiles.json");
        let other = std::fs::read_to_string(&reg).unwrap().replace(&s.sha, &"0".repeat(64));
        std::fs::write(&reg, other).unwrap();
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(stats(&dir)["served"], 0, "{stderr}");
        assert_eq!(s.miss_lines(&dir).len(), 1);

        let dir = scratch(&format!("{}-unreadable", s.name));
        let rank = s.profile(&dir, &[]);
        std::fs::remove_file(&rank).unwrap();
        std::fs::create_dir(&rank).unwrap();
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("tunableop_results0.csv"), "one line names the file: {stderr}");
        assert_eq!(s.miss_lines(&dir).len(), 1);
    }
}

// ---- The miss folder, bad input and file modes (the rocBLAS rows are in
// reliability/security.rs, reliability/input.rs and reliability/life.rs) ----------------

both! {
    /// A miss folder that is a symbolic link, or under a file, is warned of once; nothing is
    /// written through the link, serving goes on and the shapes are kept in memory.
    fn a_symlinked_or_unwritable_miss_folder_warns_once_and_serving_goes_on(s) {
        for what in ["symlink", "enotdir"] {
            let dir = scratch(&format!("{}-missdir-{what}", s.name));
            s.profile(&dir, &[row(&key(8, 8, 8), s.tuned.0)]);
            let elsewhere = dir.join("elsewhere");
            std::fs::create_dir_all(&elsewhere).unwrap();
            let miss_dir = if what == "symlink" {
                std::os::unix::fs::symlink(&elsewhere, dir.join("link")).unwrap();
                dir.join("link")
            } else {
                std::fs::write(dir.join("a-file"), "x").unwrap();
                dir.join("a-file/misses")
            };
            let mut cmd = s.host_cmd(&dir, true, &["8,8,8", "16,8,8", "24,8,8"]);
            cmd.env("TUNEDBLAS_MISS_DIR", &miss_dir);
            let out = run_guarded(cmd);
            let stderr = text(&out.stderr);
            assert!(out.status.success(), "{what}: {stderr}");
            let warned = stderr.matches("cannot write the miss log").count();
            assert_eq!(warned, 1, "{what}: one warning: {stderr}");
            assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "{what}");
            assert_eq!(stats(&dir)["served"], 1, "{what}: serving goes on: {stderr}");
            assert_eq!(stats(&dir)["missed_shapes"], 2, "{what}: the shapes are kept in memory");
        }
    }
}

both! {
    /// The miss folders are made 0700 and the files 0600 under a umask of 0.
    fn folders_are_0700_and_files_0600_whatever_the_umask(s) {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch(&format!("{}-modes", s.name));
        s.profile(&dir, &[]);
        let miss_dir = dir.join("m1/m2");
        let mut cmd = s.host_cmd(&dir, true, &["8,8,8"]);
        cmd.env("TUNEDBLAS_MISS_DIR", &miss_dir);
        common::faults::with_umask(&mut cmd, 0);
        let out = run_guarded(cmd);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        for d in [dir.join("m1"), miss_dir.clone()] {
            assert_eq!(mode(&d), 0o700, "{}", d.display());
        }
        let mut files: Vec<_> =
            std::fs::read_dir(&miss_dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.push(dir.join("stats.json"));
        assert!(files.len() >= 3, "{files:?}");
        for f in files {
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
    }
}

/// Plants what `@VERB:DIR:VICTIM` plants in place of this process's miss files in a sticky
/// shared folder (like /tmp; after a first miss made them), runs a call, and checks: the
/// host ends well, one warning, the victim untouched.
fn planted_case(s: &Side, verb: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch(&format!("{}-plant-{verb}", s.name));
    s.profile(&dir, &[]);
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let step = format!("@{verb}:{}:{}", shared.display(), victim.display());
    let mut cmd = s.host_cmd(&dir, true, &["4,8,8", &step, "8,8,8", "16,8,8"]);
    cmd.env("TUNEDBLAS_MISS_DIR", &shared);
    let out = run_guarded(cmd);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{verb}: {stderr}");
    let warned = stderr.matches("cannot write the miss log").count();
    assert_eq!(warned, 1, "{verb}: {stderr}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "{verb}"
    );
}

both! {
    /// Symbolic links, hard links and FIFOs planted under the miss files' names are never
    /// followed or written.
    fn planted_links_and_fifos_under_the_miss_file_names_are_refused(s) {
        for verb in ["plant", "link", "fifo"] {
            planted_case(s, verb);
        }
    }
}

both! {
    /// RLIMIT_FSIZE: writes past the limit are short, then fail (EFBIG), SIGXFSZ ignored as
    /// a server would: the paths of a disk filling up. The log is a clean prefix of whole
    /// lines, one warning, and serving goes on. (The limit leaves room for the hipBLASLt
    /// guard, 16 KB, written to a memfd at start-up: under a smaller one, see
    /// `hipblaslt::a_file_size_limit_below_the_guard_passes_index_rows_through`.)
    fn a_file_size_limit_leaves_only_whole_lines_and_serving_goes_on(s) {
        let dir = scratch(&format!("{}-fsize", s.name));
        s.profile(&dir, &[row(&key(8, 8, 8), s.tuned.0)]);
        let calls: Vec<String> = (100..1100).map(|n| format!("{n},8,8")).collect();
        let mut args: Vec<&str> = calls.iter().map(String::as_str).collect();
        args.push("8,8,8");
        let mut cmd = s.host_cmd(&dir, true, &args);
        cmd.env_remove(s.var("TRACE"));
        common::faults::with_file_size_limit(&mut cmd, 20_000);
        let out = run_guarded(cmd);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let warned = stderr.matches("cannot write the miss log").count();
        assert_eq!(warned, 1, "{stderr}");
        let lines = s.miss_lines(&dir);
        let want: Vec<String> = (100..1100)
            .map(|n| {
                let (op, sig) = op_and_signature(&key(n, 8, 8));
                format!("{op},{sig}")
            })
            .collect();
        assert!(!lines.is_empty() && lines.len() < want.len(), "{}", lines.len());
        assert_eq!(lines[..], want[..lines.len()], "a clean prefix, in order");
        assert_eq!(stats(&dir)["served"], 1, "serving goes on: {stderr}");
    }
}

// ---- Killed from outside, loaded late, four processes at once ----------------------------

both! {
    /// SIGKILL and SIGTERM from outside, after 40 shapes: every shape seen is in the log.
    fn sigkill_and_sigterm_from_outside_keep_every_shape_seen(s) {
        use std::io::{BufRead, BufReader};
        for sig in [libc::SIGKILL, libc::SIGTERM] {
            let dir = scratch(&format!("{}-kill-{sig}", s.name));
            s.profile(&dir, &[]);
            let calls: Vec<String> = (1..=40).map(|n| format!("{n},8,8")).collect();
            let mut args: Vec<&str> = calls.iter().map(String::as_str).collect();
            args.push("@pause");
            let mut cmd = s.host_cmd(&dir, true, &args);
            cmd.stdout(Stdio::piped()).stderr(Stdio::null());
            let mut child = cmd.spawn().unwrap();
            let stdout = child.stdout.take().unwrap();
            let paused = BufReader::new(stdout).lines().any(|l| l.unwrap() == "paused");
            assert!(paused, "the host got to its pause");
            // SAFETY: a plain kill of our own child.
            unsafe { libc::kill(child.id() as i32, sig) };
            let status = child.wait().unwrap();
            assert!(!status.success(), "{sig}: {status:?}");
            assert_eq!(s.miss_lines(&dir).len(), 40, "signal {sig}: every shape seen is in the log");
        }
    }
}

both! {
    /// A call reaching the interposer before any such library exists gets NOT_INITIALIZED;
    /// once a module brings the library in, the profile is chosen and its row served.
    fn calls_before_the_library_is_loaded_decide_nothing_for_good(s) {
        let dir = scratch(&format!("{}-late", s.name));
        s.profile(&dir, &[row(&key(8, 8, 8), s.tuned.0)]);
        let module = format!("@module:{}", s.module.display());
        let cmd = s.host_cmd_with(std::path::Path::new("-"), &dir, true, &[&module, "8,8,8"]);
        let out = run_guarded(cmd);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_has(&text(&out.stdout), "early=1\n");
        assert_eq!(stats(&dir)["served"], 1, "{stderr}");
    }
}

both! {
    /// Four processes of four threads at once: each writes its own log with its 20 shapes
    /// and the 2 shared ones, and every counts file names them with exact calls (the shared
    /// ones 4 x 25 each).
    fn four_processes_at_once_each_record_their_own_shapes(s) {
        let dir = scratch(&format!("{}-four", s.name));
        s.profile(&dir, &[]);
        let children: Vec<_> = (0..4)
            .map(|p| {
                let calls: Vec<String> =
                    (0..20).map(|n| format!("{},8,8", 100 + p * 100 + n)).collect();
                let mut args: Vec<&str> = calls.iter().map(String::as_str).collect();
                args.push("@threads:4:25");
                let mut cmd = s.host_cmd(&dir, true, &args);
                cmd.env_remove("TUNEDBLAS_STATS")
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                cmd.spawn().unwrap()
            })
            .collect();
        for c in children {
            let out = common::faults::wait_guarded(c, "the Lt host");
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
        let mut logs = 0;
        for e in std::fs::read_dir(dir.join("misses")).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(&format!("-{}-rank0.csv", s.name)) {
                logs += 1;
                let lines = std::fs::read_to_string(&p).unwrap();
                assert_eq!(lines.lines().count(), 22, "{name}: {lines}");
            }
            if name.ends_with(&format!("-{}-rank0.counts.csv", s.name)) {
                let log = tunedblas_core::misses::file::read(&p).unwrap();
                assert!(log.malformed.is_empty());
                let shared: Vec<u64> = log
                    .misses
                    .iter()
                    .filter(|m| [8, 16].contains(&m.key.m))
                    .filter_map(|m| m.calls)
                    .collect();
                assert_eq!(shared, vec![100, 100], "{name}");
            }
        }
        assert_eq!(logs, 4);
    }
}
