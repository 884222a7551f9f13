//! What the real libraries showed the interposer getting wrong, as tests: all fixed and run.
//!
//! - A tuned call that fails for the caller's reason (invalid handle: status 1; rocBLAS's
//!   device-memory size query: 9 / 10) quarantines the row "(re-tune this build)".
//! - Calls rocBLAS rejects (invalid handle) are recorded as misses to tune.
//! - The `_64` exports exist even where the real library has none (rocBLAS 5.5.1): a host
//!   probing for the 64-bit API with `dlsym` finds ours, which returns 2 uncounted.

use std::process::Command;

use crate::common;
use crate::hosts::{self, key_of, preload_env};
use crate::suite::{out_text, Suite};

/// Real rocBLAS, no GPU: every call fails with invalid_handle, the caller's fault. The row
/// must stay: no quarantine, the second call of the same shape is served as the first.
fn invalid_handle_keeps_the_row(s: &Suite) {
    let spec = "ex:TN:h:64:32:16";
    let (host, inside) = s.scratch("pending-quarantine");
    hosts::write_profile(s, &host, &format!("conf-{}", s.name), &[key_of(spec)]);
    let out = s.sh(&format!(
        "cd {inside} && {} {} {spec} {spec}",
        preload_env(s, &inside),
        s.hosts().linked
    ));
    let (stdout, err) = out_text(&out);
    assert_eq!(stdout.matches("status=1").count(), 2, "{stdout}");
    assert!(
        !err.contains("quarantined"),
        "{}: a row quarantined for the caller's invalid handle:\n{err}",
        s.name
    );
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(host.join("stats.json")).unwrap()).unwrap();
    // Both calls are treated alike: the tuned call and the caller's own fail, so neither is
    // a fallback (which would blame the row); each counts as a call rocBLAS rejected.
    assert_eq!(stats["rows_hit"], 1, "{}: {stats}", s.name);
    assert_eq!(stats["fallbacks"], 0, "{}: {stats}", s.name);
    assert_eq!(
        stats["passed_through"], 2,
        "{}: both calls rejected alike: {stats}",
        s.name
    );
}

/// A fresh folder `name` whose `ref-v4` profile (refblas 4.x) serves `sol` for `spec`.
fn refblas_row(name: &str, spec: &str, sol: i32) -> std::path::PathBuf {
    let dir = common::scratch(name);
    let sha = common::sha_of(&common::artifacts().libdir4, "librocblas.so.4");
    let rows = [common::row(spec, &format!("Gemm_Rocblas_{sol}"))];
    common::write_profile(&dir.join("profiles"), "ref-v4", &sha, &rows, 1);
    dir
}

/// rocBLAS's device-memory size-query mode makes gemm_ex return 9 or 10 (size increased or
/// unchanged): not a solution failure. refblas returns them on request.
fn size_query_statuses_keep_the_row() {
    let a = common::artifacts();
    let spec = "ex:TN:h:64:24:40";
    let sols = common::non_heuristic_solutions(&a.host4, spec);
    for status in [1, 9, 10] {
        let dir = refblas_row(&format!("pending-size-query-{status}"), spec, sols[0]);
        let mut cmd = Command::new(&a.host4);
        cmd.args([spec, spec]);
        common::host_env(&mut cmd, &dir, true);
        cmd.env("REFBLAS_FAIL_ALL", status.to_string());
        let out = common::run(cmd);
        let err = common::text(&out.stderr);
        assert!(!err.contains("quarantined"), "status {status}: {err}");
    }
}

fn rejected_calls_are_not_misses(s: &Suite) {
    let (host, inside) = s.scratch("pending-misses");
    // A profile with no row for the calls made.
    hosts::write_profile(
        s,
        &host,
        &format!("conf-{}", s.name),
        &[key_of("ex:NN:h:8:8:8")],
    );
    let run = s.sh(&format!(
        "cd {inside} && {} {} ex:TN:h:64:32:16 sgemm:TN:x:24:8:4",
        preload_env(s, &inside),
        s.hosts().linked
    ));
    assert!(run.status.success());
    let misses: Vec<String> = std::fs::read_dir(host.join("misses"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with("-rank0.csv"))
                .flat_map(|e| {
                    std::fs::read_to_string(e.path())
                        .unwrap()
                        .lines()
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        misses
            .iter()
            .all(|l| l.starts_with("op_name,") || l.is_empty()),
        "{}: calls rocBLAS rejected (invalid handle) were recorded as shapes to tune: {misses:?}",
        s.name
    );
}

/// On rocBLAS 5.5.1 (no `_64` API), a host that probes for it must find nothing, with or
/// without the preload, before its first handle as after it.
fn no_64_api_where_the_library_has_none(s: &Suite) {
    assert!(!s.has_64());
    let (host, inside) = s.scratch("pending-64");
    let names = [
        "rocblas_gemm_ex_64",
        "rocblas_gemm_batched_ex_64",
        "rocblas_gemm_strided_batched_ex_64",
        "rocblas_hgemm_64",
        "rocblas_sgemm_64",
        "rocblas_hgemm_strided_batched_64",
        "rocblas_sgemm_strided_batched_64",
    ];
    // Probed before the first handle (the linked library is mapped before the interposer
    // runs at all) and after it.
    let mut src = String::from("#include <dlfcn.h>\n#include <stdio.h>\n#include <rocblas/rocblas.h>\nint main(void) {\n  rocblas_handle h = 0;\n");
    for when in ["before", "after"] {
        if when == "after" {
            src.push_str("  rocblas_create_handle(&h);\n");
        }
        for n in names {
            src.push_str(&format!(
                "  printf(\"{when} {n}=%s\\n\", dlsym(RTLD_DEFAULT, \"{n}\") ? \"found\" : \"absent\");\n"
            ));
        }
    }
    src.push_str("  return 0;\n}\n");
    std::fs::write(host.join("probe.c"), src).unwrap();
    s.sh_ok(&format!(
        "cd {inside} && gcc -o probe probe.c -lrocblas -ldl"
    ));
    let plain = s.sh(&format!("cd {inside} && ./probe"));
    let (plain_out, _) = out_text(&plain);
    assert_eq!(
        plain_out.matches("=absent").count(),
        2 * names.len(),
        "{plain_out}"
    );
    let pre = s.sh(&format!(
        "cd {inside} && {} ./probe",
        preload_env(s, &inside)
    ));
    let (pre_out, err) = out_text(&pre);
    assert_eq!(
        pre_out, plain_out,
        "{}: under the preload the 64-bit API appears:\n{err}",
        s.name
    );
}

per_suite! {
    invalid_handle_keeps_the_row =>
        an_invalid_handle_keeps_the_row_rocblas_5_5, an_invalid_handle_keeps_the_row_rocblas_6_4;
    rejected_calls_are_not_misses =>
        calls_rocblas_rejects_are_not_misses_rocblas_5_5,
        calls_rocblas_rejects_are_not_misses_rocblas_6_4;
}

#[test]
fn size_query_statuses_keep_the_row_on_refblas() {
    size_query_statuses_keep_the_row();
}

// The `_64` exports are hidden from the loader once a handle shows the served build lacks
// them (`preload/src/rocblas/dynsym.rs`; IFUNCs were tried first and made glibc warn in every
// BIND_NOW host, see there).
per_suite!(
    @test "rocblas-5.5",
    no_64_api_where_the_library_has_none,
    no_64_api_where_the_library_has_none_rocblas_5_5
);

/// Where the library has the 64-bit API (rocBLAS 6.4.4), a probe finds every name under the
/// preload as without it, and what it finds is ours (the calls are counted: `hosts.rs`).
#[test]
fn the_64_api_where_the_library_has_it_rocblas_6_4() {
    if let Some(s) = crate::suite::suite("rocblas-6.4") {
        assert!(s.has_64());
        let (host, inside) = s.scratch("pending-64-present");
        std::fs::write(
            host.join("probe.c"),
            "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n#include <rocblas/rocblas.h>\nint main(void) {\n  rocblas_handle h = 0;\n  rocblas_create_handle(&h); /* links rocBLAS in (--as-needed) */\n  void *p = dlsym(RTLD_DEFAULT, \"rocblas_gemm_ex_64\");\n  Dl_info i;\n  printf(\"%s\\n\", p && dladdr(p, &i) ? i.dli_fname : \"absent\");\n  return 0;\n}\n",
        )
        .unwrap();
        s.sh_ok(&format!(
            "cd {inside} && gcc -o probe probe.c -lrocblas -ldl"
        ));
        let (plain, _) = out_text(&s.sh(&format!("cd {inside} && ./probe")));
        common::assert_has(&plain, "librocblas.so.4");
        let pre = s.sh(&format!(
            "cd {inside} && {} ./probe",
            preload_env(s, &inside)
        ));
        let (pre_out, err) = out_text(&pre);
        assert!(
            pre_out.contains("libtunedblas.so"),
            "{}: the 64-bit API is not interposed:\n{pre_out}{err}",
            s.name
        );
    }
}

/// Bound at load time (`LD_BIND_NOW=1`), before this library's constructor ran, the `_64`
/// names still lead to our wrapper and the call is served like any other (refblas has the
/// 64-bit API): a guard for any scheme that changes how those names are bound.
#[test]
fn the_64_api_is_served_when_bound_at_load_on_refblas() {
    let a = common::artifacts();
    let spec = "ex64:TN:h:64:24:40";
    let sols = common::non_heuristic_solutions(&a.host4, spec);
    for bind_now in [false, true] {
        let dir = refblas_row(&format!("pending-64-bind-now-{bind_now}"), spec, sols[0]);
        let mut cmd = Command::new(&a.host4);
        cmd.arg(spec);
        common::host_env(&mut cmd, &dir, true);
        if bind_now {
            cmd.env("LD_BIND_NOW", "1");
        }
        let out = common::run(cmd);
        assert!(out.status.success(), "{}", common::text(&out.stderr));
        let ran: Vec<String> = common::trace(&dir)
            .iter()
            .filter_map(|t| t.get("solution").cloned())
            .collect();
        assert_eq!(
            ran,
            vec![sols[0].to_string()],
            "LD_BIND_NOW={bind_now}: the tuned solution did not run: {}",
            common::text(&out.stderr)
        );
    }
}
