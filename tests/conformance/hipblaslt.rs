//! hipBLASLt 7.1.1 (Debian sid, in the rocblas-6.4 root): what a hipBLASLt backend needs from
//! `src/abi.rs`, checked against the real headers and library:
//! - the C prototypes (`hipblasLtMatmul`, its 16 arguments, and the heuristic query, create,
//!   destroy), argument by argument, as for rocBLAS;
//! - the layout of `hipblasLtMatmulAlgo_t` and `hipblasLtMatmulHeuristicResult_t` (size,
//!   alignment, every field's offset) against the `#[repr(C)]` structs;
//! - the status values;
//! - the `hipblaslt_ext` C++ functions TunableOp uses: the mangled names in `src/abi.rs` are
//!   what g++ makes of the header's declarations, and the library exports them;
//! - the interposer with the real library ([`host`]): PyTorch-style calls keep their
//!   statuses, and their keys are read from the real descriptors exactly (the library
//!   reads back neither the compute type nor a layout's sizes: the interposer keeps them
//!   from the create and set calls).

use std::fmt::Write;
use std::mem::{align_of, offset_of, size_of};
use std::process::Command;

use tunedblas_core::abi::{
    self, HipblasLtMatmulAlgo as Algo, HipblasLtMatmulHeuristicResult as Heur,
};

use crate::abi::{compile, describe, identifiers, preprocess, PRELUDE};
use crate::exports::exports;
use crate::sources;
use crate::suite::{Suite, LIBDIR};

const INCLUDES: &str = "#include <hipblaslt/hipblaslt.h>\n#include <hipblaslt/hipblaslt-ext.hpp>\n";
const FLAGS: &str = "-D__HIP_PLATFORM_AMD__ -D__HIP_DISABLE_CPP_FUNCTIONS__ -w";

const FUNCTIONS: &[(&str, &str)] = &[
    ("hipblasLtCreate", "HipblasLtCreateFn"),
    ("hipblasLtDestroy", "HipblasLtDestroyFn"),
    ("hipblasLtMatmul", "HipblasLtMatmulFn"),
    (
        "hipblasLtMatmulAlgoGetHeuristic",
        "HipblasLtMatmulAlgoGetHeuristicFn",
    ),
    ("hipblasLtMatmulDescCreate", "HipblasLtMatmulDescCreateFn"),
    ("hipblasLtMatmulDescDestroy", "HipblasLtMatmulDescDestroyFn"),
    (
        "hipblasLtMatmulDescGetAttribute",
        "HipblasLtMatmulDescGetAttributeFn",
    ),
    (
        "hipblasLtMatrixLayoutGetAttribute",
        "HipblasLtMatrixLayoutGetAttributeFn",
    ),
    (
        "hipblasLtMatmulDescSetAttribute",
        "HipblasLtMatmulDescSetAttributeFn",
    ),
    (
        "hipblasLtMatrixLayoutCreate",
        "HipblasLtMatrixLayoutCreateFn",
    ),
    (
        "hipblasLtMatrixLayoutDestroy",
        "HipblasLtMatrixLayoutDestroyFn",
    ),
    (
        "hipblasLtMatrixLayoutSetAttribute",
        "HipblasLtMatrixLayoutSetAttributeFn",
    ),
    (
        "hipblasLtMatmulPreferenceCreate",
        "HipblasLtMatmulPreferenceCreateFn",
    ),
    (
        "hipblasLtMatmulPreferenceDestroy",
        "HipblasLtMatmulPreferenceDestroyFn",
    ),
    (
        "hipblasLtMatmulPreferenceSetAttribute",
        "HipblasLtMatmulPreferenceSetAttributeFn",
    ),
    ("hipblasLtGetVersion", "HipblasLtGetVersionFn"),
];

/// The exception guard's C functions (`preload/cxx/hipblaslt_guard.cpp`) and their types in
/// `src/abi.rs`: the guard is compiled into the check, after the real headers.
const GUARD_FUNCTIONS: &[(&str, &str)] = &[
    ("tunedblas_guard_algo_from_index", "GuardAlgoFromIndexFn"),
    ("tunedblas_guard_index_of", "GuardIndexOfFn"),
    ("tunedblas_guard_is_supported", "GuardIsSupportedFn"),
    ("tunedblas_guard_all_algos", "GuardAllAlgosFn"),
];

/// The `hipblaslt_ext` functions: mangled name in `src/abi.rs`, and a C++ expression taking
/// the address of the header's declaration (overloads picked by their full type).
fn ext_functions() -> [(&'static str, &'static str); 4] {
    [
        (
            abi::HIPBLASLT_EXT_GET_ALL_ALGOS,
            "static_cast<hipblasStatus_t (*)(hipblasLtHandle_t, hipblaslt_ext::GemmType, hipblasOperation_t, hipblasOperation_t, hipDataType, hipDataType, hipDataType, hipDataType, hipblasComputeType_t, std::vector<hipblasLtMatmulHeuristicResult_t>&)>(&hipblaslt_ext::getAllAlgos)",
        ),
        (abi::HIPBLASLT_EXT_GET_INDEX_FROM_ALGO, "&hipblaslt_ext::getIndexFromAlgo"),
        (
            abi::HIPBLASLT_EXT_GET_ALGOS_FROM_INDEX,
            "static_cast<hipblasStatus_t (*)(hipblasLtHandle_t, std::vector<int>&, std::vector<hipblasLtMatmulHeuristicResult_t>&)>(&hipblaslt_ext::getAlgosFromIndex)",
        ),
        (
            abi::HIPBLASLT_EXT_MATMUL_IS_ALGO_SUPPORTED,
            "static_cast<hipblasStatus_t (*)(hipblasLtHandle_t, hipblasLtMatmulDesc_t, const void*, hipblasLtMatrixLayout_t, hipblasLtMatrixLayout_t, const void*, hipblasLtMatrixLayout_t, hipblasLtMatrixLayout_t, hipblasLtMatmulAlgo_t&, size_t&)>(&hipblaslt_ext::matmulIsAlgoSupported)",
        ),
    ]
}

fn generate(declared: &std::collections::BTreeSet<String>) -> String {
    let sigs = sources::abi_signatures();
    let mut src = String::from(INCLUDES);
    src.push_str(PRELUDE);
    // Every hipBLASLt function type of src/abi.rs is checked against a real function.
    for s in sigs.iter().filter(|s| s.name.starts_with("HipblasLt")) {
        assert!(
            FUNCTIONS.iter().any(|(_, t)| *t == s.name),
            "src/abi.rs {} is checked against no hipBLASLt function: add it to FUNCTIONS",
            s.name
        );
    }
    for s in sigs.iter().filter(|s| s.name.starts_with("Guard")) {
        assert!(
            GUARD_FUNCTIONS.iter().any(|(_, t)| *t == s.name),
            "src/abi.rs {} is checked against no guard function: add it to GUARD_FUNCTIONS",
            s.name
        );
    }
    let guard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("preload/cxx/hipblaslt_guard.cpp"),
    )
    .expect("the guard's source");
    src.push_str(&guard);
    writeln!(
        src,
        "static_assert(THREW == {}, \"src/abi.rs GUARD_THREW\");",
        abi::GUARD_THREW
    )
    .unwrap();
    for (sym, ty) in FUNCTIONS.iter().chain(GUARD_FUNCTIONS) {
        assert!(
            declared.contains(*sym) || sym.starts_with("tunedblas_guard_"),
            "hipblaslt.h declares no {sym}"
        );
        let sig = sigs
            .iter()
            .find(|s| s.name == *ty)
            .unwrap_or_else(|| panic!("src/abi.rs has no {ty}"));
        let f = format!("decltype({sym})");
        writeln!(src, "static_assert(conf::fn<{f}>::arity == {n}, \"{sym}: src/abi.rs {ty} has {n} arguments\");", n = sig.args.len()).unwrap();
        writeln!(
            src,
            "static_assert(conf::like<conf::fn<{f}>::ret, {}>::value, \"{sym}: return type\");",
            describe(&sig.ret, "I")
        )
        .unwrap();
        for (i, a) in sig.args.iter().enumerate() {
            writeln!(
                src,
                "static_assert(conf::like<conf::arg<{f}, {i}>, {}>::value, \"{sym} argument {}: src/abi.rs {ty} says {a}\");",
                describe(a, "I"),
                i + 1
            )
            .unwrap();
        }
    }
    let layout = |c: &str, size: usize, align: usize, fields: &[(&str, usize)]| {
        let mut t = format!(
            "static_assert(sizeof({c}) == {size} && alignof({c}) == {align}, \"{c}: size {size}, alignment {align} in src/abi.rs\");\n"
        );
        for (f, off) in fields {
            t.push_str(&format!(
                "static_assert(offsetof({c}, {f}) == {off}, \"{c}::{f} is at {off} in src/abi.rs\");\n"
            ));
        }
        t
    };
    // The C struct `$c` as the Rust type `$t`: `rust_field as "c_field"`.
    macro_rules! layout_of {
        ($c:literal, $t:ty, $($f:ident as $cf:literal),*) => {
            layout($c, size_of::<$t>(), align_of::<$t>(), &[$(($cf, offset_of!($t, $f))),*])
        };
    }
    src.push_str(&layout_of!("hipblasLtMatmulAlgo_t", Algo,
        data as "data", max_workspace_bytes as "max_workspace_bytes"));
    writeln!(
        src,
        "static_assert(sizeof(((hipblasLtMatmulAlgo_t*)0)->data) == {}, \"data[16]\");",
        size_of::<[u8; 16]>()
    )
    .unwrap();
    src.push_str(&layout_of!("hipblasLtMatmulHeuristicResult_t", Heur,
        algo as "algo", workspace_size as "workspaceSize", state as "state",
        waves_count as "wavesCount", reserved as "reserved"));
    writeln!(src, "static_assert(std::is_same<decltype(hipblasLtMatmulHeuristicResult_t::wavesCount), float>::value, \"wavesCount is a float\");").unwrap();
    for (name, _, value) in sources::abi_constants() {
        // Every hipBLAS / hipBLASLt / hipDataType value the backend uses.
        if name.starts_with("HIPBLAS") || name.starts_with("HIP_R_") {
            writeln!(src, "static_assert(static_cast<long long>({name}) == {value}LL, \"src/abi.rs {name} = {value}\");").unwrap();
        }
    }
    // The tuner's guard (preload/cxx/hipblaslt_guard.cpp) calls getAllAlgos with GemmType,
    // the operations, the data types and the compute type as ints: each must be an int-sized
    // enum, and GemmType's plain GEMM the value src/abi.rs passes.
    writeln!(src, "static_assert(static_cast<long long>(hipblaslt_ext::GemmType::HIPBLASLT_GEMM) == {}LL, \"src/abi.rs EXT_GEMM_TYPE_GEMM\");", abi::EXT_GEMM_TYPE_GEMM).unwrap();
    for t in [
        "hipblaslt_ext::GemmType",
        "hipblasOperation_t",
        "hipDataType",
        "hipblasComputeType_t",
        "hipblasStatus_t",
    ] {
        writeln!(src, "static_assert(sizeof({t}) == sizeof(int) && std::is_enum<{t}>::value, \"{t} is passed as an int\");").unwrap();
    }
    src
}

pub fn check(s: &Suite) {
    if !s.has_hipblas() {
        return;
    }
    let pp = preprocess(s, "hipblaslt-pp", INCLUDES, FLAGS);
    let src = generate(&identifiers(&pp));
    if let Err(e) = compile(s, "hipblaslt", &src, FLAGS) {
        panic!(
            "{}: src/abi.rs disagrees with hipBLASLt's headers:\n{e}",
            s.name
        );
    }

    // The mangled names: what g++ makes of the header's declarations ...
    let (host, inside) = s.scratch("hipblaslt-ext");
    let mut refs = String::from(INCLUDES);
    refs.push_str("void* conformance_refs[] = {\n");
    for (_, expr) in ext_functions() {
        refs.push_str(&format!("    (void*)({expr}),\n"));
    }
    refs.push_str("};\n");
    std::fs::write(host.join("refs.cpp"), refs).unwrap();
    s.sh_ok(&format!(
        "cd {inside} && g++ -std=c++17 {FLAGS} -c refs.cpp -o refs.o"
    ));
    let nm = Command::new("nm")
        .arg("-u")
        .arg(host.join("refs.o"))
        .output()
        .unwrap();
    let undefined = String::from_utf8_lossy(&nm.stdout).into_owned();
    // ... and what the library exports.
    let lib = s.sh(&format!("readlink -f {LIBDIR}/libhipblaslt.so.1"));
    let lib = s.host_path(String::from_utf8_lossy(&lib.stdout).trim());
    let exported = exports(&lib);
    for (name, expr) in ext_functions() {
        assert!(
            undefined
                .lines()
                .any(|l| l.split_whitespace().last() == Some(name)),
            "{}: g++ names {expr} otherwise than src/abi.rs ({name}):\n{undefined}",
            s.name
        );
        assert!(
            exported.contains(name),
            "{}: {} does not export {name}",
            s.name,
            lib.display()
        );
    }
    for (sym, _) in FUNCTIONS {
        assert!(
            exported.contains(*sym),
            "{}: {} does not export {sym}",
            s.name,
            lib.display()
        );
    }
}

/// `tests/hosts/real_hiplt_host.cpp` against the real hipBLASLt, without and with the
/// preload: the same output; with no profile every call is a miss under PyTorch's name;
/// with a profile for the real file's sha256 holding a `Default` row per shape, every row
/// is hit and nothing is missed. (No GPU: the matmuls get no handle and fail, so only
/// `Default` rows are served here; a tuned row's rebuild needs a device.)
pub fn host(s: &Suite) {
    let Some(host) = s.hosts().hiplt.clone() else {
        return;
    };
    let calls = ["2560,16,1536", "512,4,2560", "2560,16,1536"];
    let names = [
        "GemmTunableOp_BFloat16_TN,tn_2560_16_1536_ld_1536_1536_2560",
        "GemmTunableOp_BFloat16_TN,tn_512_4_2560_ld_2560_2560_512",
    ];
    let lib = s.sh(&format!(
        "sha256sum $(readlink -f {LIBDIR}/libhipblaslt.so.1)"
    ));
    let sha = String::from_utf8_lossy(&lib.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let run = |name: &str, preload: bool, profile: bool| {
        let (dir, inside) = s.scratch(name);
        if profile {
            let rows: Vec<String> = names.iter().map(|n| format!("{n},Default,0.01")).collect();
            crate::common::write_profile(&dir.join("profiles"), "real-hiplt", &sha, &rows, 1);
        }
        let env = if preload {
            crate::hosts::preload_env(s, &inside)
        } else {
            String::new()
        };
        let out = s.sh(&format!("cd {inside} && {env} {host} {}", calls.join(" ")));
        let (stdout, stderr) = crate::suite::out_text(&out);
        assert!(out.status.success(), "{}: {name}: {stdout}{stderr}", s.name);
        (dir, stdout, stderr)
    };
    let (_, plain, _) = run("hiplt-plain", false, false);
    assert_eq!(plain.lines().count(), calls.len(), "{}: {plain}", s.name);
    let (dir, out, err) = run("hiplt-miss", true, false);
    assert_eq!(
        out, plain,
        "{}: the preload changed the host's output: {err}",
        s.name
    );
    let mut missed: Vec<String> = Vec::new();
    for e in std::fs::read_dir(dir.join("misses")).unwrap() {
        let p = e.unwrap().path();
        if p.to_string_lossy().ends_with("-hipblaslt-rank0.csv") {
            missed.extend(
                std::fs::read_to_string(&p)
                    .unwrap()
                    .lines()
                    .map(String::from),
            );
        }
    }
    assert_eq!(
        missed, names,
        "{}: the keys of the real descriptors: {err}",
        s.name
    );
    let (dir, out, err) = run("hiplt-served", true, true);
    assert_eq!(out, plain, "{}: {err}", s.name);
    assert!(
        err.contains("hipBLASLt: profile real-hiplt"),
        "{}: {err}",
        s.name
    );
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("stats.json")).unwrap()).unwrap();
    assert_eq!(stats["library"], "hipblaslt", "{stats}");
    assert_eq!(stats["calls"], 3, "{stats}");
    assert_eq!(stats["default"], 3, "{stats}");
    assert_eq!(stats["rows_hit"], 2, "{stats}");
    assert_eq!(stats["missed_shapes"], 0, "{stats}");
}
