//! End-to-end on the CPU: what the interposer does alike on both Lt backends, each test
//! written once and run on the cuBLASLt stand-in and on the hipBLASLt one
//! (`tests/common/lt.rs`). Each backend's own cases are in `tests/cublaslt.rs` and
//! `tests/hipblaslt.rs`.

mod common;

use common::lt::{algos, builds_in_trace, key, row, stats, Side};
use common::{assert_has, faults::run_guarded, ok, scratch, text, trace, tunedblas_cmd};

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
        let out = s.host(&dir, true, &["2560,16,1536", "2560,16,1536", "512,4,2560"]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
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
        let out = s.host(&dir, true, &calls);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
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
    /// The module that linked the served build closed (the build unloaded with it) and a
    /// module linked against another build opened: serving follows the new build, with its
    /// own profile, its objects made by it.
    fn the_served_build_closed_and_another_opened_serves_the_new_one(s) {
        let dir = scratch(&format!("{}-reopen", s.name));
        s.two_build_profiles(&dir, &key(8, 8, 8));
        let module2 = format!("@module:{}", s.module2.display());
        let out = run_guarded(s.host_cmd(&dir, true, &["8,8,8", "@close", &module2, "8,8,8"]));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{:?}: {stderr}", out.status);
        assert_eq!(algos(&dir), [s.tuned.1, s.tuned.1], "{stderr}");
        let builds = builds_in_trace(&dir);
        assert_eq!(builds.last().map(String::as_str), Some("2"), "{builds:?}: {stderr}");
        assert_has(&stderr, &format!("profile {}2 auto-selected", s.profile));
        assert_eq!(stats(&dir)["served"], 2, "both builds served their own row: {stderr}");
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
