//! The real libraries' dynamic symbols against what the project resolves from them: the
//! interposer's hook table (`preload/src/rocblas/real.rs`) and the tuner's `need`/`sym` calls
//! (`tuner/src/backends/rocblas.rs`, `runtime.rs`). Required entries must be
//! exported by every build; the `_64` twins (ROCm 6.3+) are optional in the hook table,
//! absent from rocBLAS 5.5.1 and present in 6.4.4.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::sources::{self, Need};
use crate::suite::{Suite, LIBDIR};

/// The defined dynamic symbols of a file (`nm -D --defined-only`).
pub fn exports(file: &Path) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only", "--format=posix"])
        .arg(file)
        .output()
        .expect("nm (binutils) is needed");
    crate::common::ok(&out)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(|s| s.split('@').next().unwrap_or(s).to_string())
        .collect()
}

fn real_file(s: &Suite, inside: &str) -> std::path::PathBuf {
    let out = s.sh(&format!("readlink -f {inside}"));
    assert!(out.status.success(), "{inside} in {}", s.name);
    s.host_path(String::from_utf8_lossy(&out.stdout).trim())
}

pub fn check(s: &Suite) {
    let rocblas = exports(&s.host_path(&s.rocblas_file));
    let hip = exports(&real_file(s, &format!("{LIBDIR}/libamdhip64.so")));
    let mut problems = Vec::new();

    // The interposer's hook table: rocBLAS GEMMs and the version queries (HIP's
    // hipGetDevice, and libc's exec family, which are not rocBLAS's).
    let hooks = sources::hook_table();
    assert!(hooks.len() >= 16, "hook table parsed: {hooks:?}");
    let mut present_64 = Vec::new();
    let mut absent_64 = Vec::new();
    for h in &hooks {
        let lib = if h.symbol.starts_with("rocblas_") {
            &rocblas
        } else if h.symbol.starts_with("hip") {
            &hip
        } else {
            continue;
        };
        let found = lib.contains(&h.symbol);
        if h.symbol.ends_with("_64") {
            if found {
                present_64.push(h.symbol.clone());
            } else {
                absent_64.push(h.symbol.clone());
            }
        } else if !found {
            problems.push(format!(
                "hook {} = {}: not exported by {}",
                h.field, h.symbol, s.rocblas_file
            ));
        }
    }
    let twins = hooks.iter().filter(|h| h.symbol.ends_with("_64")).count();
    assert_eq!(twins, 7, "the hook table has the 7 `_64` twins");
    if s.has_64() {
        if !absent_64.is_empty() {
            problems.push(format!(
                "{} lacks the _64 entry points {absent_64:?}",
                s.name
            ));
        }
    } else if !present_64.is_empty() {
        problems.push(format!(
            "{} was expected to lack the _64 API, but exports {present_64:?}",
            s.name
        ));
    }

    // The harness: `need` must be there, `sym` may be.
    let (rb, hp) = sources::harness_symbols();
    assert!(
        rb.contains_key("rocblas_gemm_ex_get_solutions"),
        "harness symbols parsed: {rb:?}"
    );
    assert!(
        hp.contains_key("hipMalloc"),
        "harness HIP symbols parsed: {hp:?}"
    );
    for (map, lib, what) in [(&rb, &rocblas, "rocBLAS"), (&hp, &hip, "HIP")] {
        for (name, need) in map {
            if *need == Need::Required && !lib.contains(name) {
                problems.push(format!(
                    "the harness needs {name} from {what}; {} does not export it",
                    s.name
                ));
            }
        }
    }
    // What the harness uses when present: both builds have it (so tune probes strided
    // problems with their own query on each).
    for name in [
        "rocblas_gemm_strided_batched_ex_get_solutions",
        "rocblas_gemm_strided_batched_ex",
        "rocblas_get_version_string",
        "rocblas_get_version_string_size",
    ] {
        assert!(rb.contains_key(name), "the harness resolves {name}");
        if !rocblas.contains(name) {
            problems.push(format!("{} does not export {name}", s.name));
        }
    }
    // rocBLAS 2.47 has no _by_type query (FACTS section 1); 4.x has it.
    let by_type = rocblas.contains("rocblas_gemm_ex_get_solutions_by_type");
    if by_type != s.has_64() {
        problems.push(format!(
            "{}: rocblas_gemm_ex_get_solutions_by_type exported = {by_type}",
            s.name
        ));
    }
    assert!(problems.is_empty(), "{}:\n{}", s.name, problems.join("\n"));
}
