//! `src/abi.rs` against the real headers, by compiling C++ generated from it inside the root
//! with the root's g++: every enum value, the sizes of the types, and every prototype the
//! interposer wraps or the harness queries, argument by argument (count, width, signedness,
//! pointer or not, const or not). A mismatch is a `static_assert` naming the function and the
//! argument.
//!
//! The function types come from the text of `src/abi.rs` (`pub type ...Fn = unsafe extern "C"
//! fn(...)`), the constants from its `pub const` lines, and which symbol has which type from
//! the interposer's hook table plus the harness's queries ([`QUERIED`]). What a header does not
//! declare is listed, and that list must be what the version is known to lack (the `_64`
//! twins before ROCm 6.3, enumerators added later).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use tunedblas_core::abi;

use crate::sources::{self, Signature};
use crate::suite::Suite;

/// Functions the harness and the interposer call besides the hook table's, with their type
/// in `src/abi.rs`.
pub const QUERIED: &[(&str, &str)] = &[
    ("rocblas_gemm_ex", "GemmExFn<i32>"),
    (
        "rocblas_gemm_strided_batched_ex",
        "GemmStridedBatchedExFn<i32>",
    ),
    ("rocblas_gemm_ex_get_solutions", "GemmExGetSolutionsFn"),
    (
        "rocblas_gemm_strided_batched_ex_get_solutions",
        "GemmStridedBatchedExGetSolutionsFn",
    ),
    ("rocblas_create_handle", "CreateHandleFn"),
    ("rocblas_destroy_handle", "DestroyHandleFn"),
    ("rocblas_set_stream", "SetStreamFn"),
    ("rocblas_get_stream", "GetStreamFn"),
    ("rocblas_get_pointer_mode", "GetPointerModeFn"),
    ("rocblas_set_pointer_mode", "SetPointerModeFn"),
    ("rocblas_get_version_string", "GetVersionStringFn"),
    ("rocblas_get_version_string_size", "GetVersionStringSizeFn"),
    ("rocblas_status_to_string", "StatusToStringFn"),
    ("hipGetDeviceCount", "HipGetDeviceCountFn"),
    ("hipSetDevice", "HipSetDeviceFn"),
    ("hipGetDevice", "HipGetDeviceFn"),
    ("hipMalloc", "HipMallocFn"),
    ("hipFree", "HipFreeFn"),
    ("hipMemcpy", "HipMemcpyFn"),
    ("hipDeviceSynchronize", "HipDeviceSynchronizeFn"),
    ("hipEventCreate", "HipEventCreateFn"),
    ("hipEventRecord", "HipEventRecordFn"),
    ("hipEventSynchronize", "HipEventSynchronizeFn"),
    ("hipEventElapsedTime", "HipEventElapsedTimeFn"),
    ("hipEventDestroy", "HipEventDestroyFn"),
    ("hipMemset", "HipMemsetFn"),
    ("hipStreamCreate", "HipStreamCreateFn"),
    ("hipStreamSynchronize", "HipStreamSynchronizeFn"),
    ("hipStreamDestroy", "HipStreamDestroyFn"),
    ("hipRuntimeGetVersion", "HipRuntimeGetVersionFn"),
    ("hipStreamBeginCapture", "HipStreamBeginCaptureFn"),
    ("hipStreamEndCapture", "HipStreamEndCaptureFn"),
    (
        "hipGraphInstantiateWithFlags",
        "HipGraphInstantiateWithFlagsFn",
    ),
    ("hipGraphLaunch", "HipGraphLaunchFn"),
    ("hipGraphExecDestroy", "HipGraphDestroyFn"),
    ("hipGraphDestroy", "HipGraphDestroyFn"),
];

/// The C++ checker the generated assertions use.
pub const PRELUDE: &str = r#"
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
namespace conf {
template <class F> struct fn;
template <class R, class... A> struct fn<R(A...)> { using ret = R; using args = std::tuple<A...>; static constexpr std::size_t arity = sizeof...(A); };
template <class R, class... A> struct fn<R(A...) noexcept> : fn<R(A...)> {};
template <class F, std::size_t I> using arg = std::tuple_element_t<I, typename fn<F>::args>;
// What src/abi.rs says an argument is.
struct Enum32 {}; struct Int32 {}; struct Int64 {}; struct Uint32 {}; struct Uint64 {}; struct Usize {}; struct F32 {};
struct Char {}; struct Any {}; struct Opaque {};
template <class P> struct ConstPtr {}; template <class P> struct MutPtr {};
template <class T, class D> struct like : std::false_type {};
template <class T> struct like<T, Enum32> : std::integral_constant<bool, (std::is_enum<T>::value || std::is_integral<T>::value) && sizeof(T) == 4> {};
template <class T> struct like<T, Int32> : std::integral_constant<bool, std::is_integral<T>::value && std::is_signed<T>::value && sizeof(T) == 4> {};
template <class T> struct like<T, Int64> : std::integral_constant<bool, std::is_integral<T>::value && std::is_signed<T>::value && sizeof(T) == 8> {};
template <class T> struct like<T, Uint32> : std::integral_constant<bool, std::is_integral<T>::value && std::is_unsigned<T>::value && sizeof(T) == 4> {};
template <class T> struct like<T, Uint64> : std::integral_constant<bool, std::is_integral<T>::value && std::is_unsigned<T>::value && sizeof(T) == 8> {};
template <class T> struct like<T, Usize> : std::integral_constant<bool, std::is_integral<T>::value && std::is_unsigned<T>::value && sizeof(T) == sizeof(void *)> {};
template <class T> struct like<T, F32> : std::integral_constant<bool, std::is_same<T, float>::value> {};
template <class T> struct like<T, Char> : std::integral_constant<bool, std::is_same<T, char>::value> {};
template <class T> struct like<T, Any> : std::true_type {};
template <class T> struct like<T, Opaque> : std::integral_constant<bool, std::is_pointer<T>::value> {};
template <std::size_t N> struct Sized {};
template <class T, std::size_t N> struct like<T, Sized<N>> : std::integral_constant<bool, std::is_class<T>::value && sizeof(T) == N> {};
template <class T, class P> struct like<T, ConstPtr<P>> : std::integral_constant<bool, std::is_pointer<T>::value && std::is_const<std::remove_pointer_t<T>>::value && like<std::remove_cv_t<std::remove_pointer_t<T>>, P>::value> {};
template <class T, class P> struct like<T, MutPtr<P>> : std::integral_constant<bool, std::is_pointer<T>::value && !std::is_const<std::remove_pointer_t<T>>::value && like<std::remove_pointer_t<T>, P>::value> {};
}
"#;

/// The checker's description of a Rust type of `src/abi.rs` (`I` instantiated as `size`).
pub fn describe(ty: &str, size: &str) -> String {
    let ty = ty.trim();
    if let Some(p) = ty.strip_prefix("*const ") {
        return format!("conf::ConstPtr<{}>", describe(p, size));
    }
    if let Some(p) = ty.strip_prefix("*mut ") {
        return format!("conf::MutPtr<{}>", describe(p, size));
    }
    let ty = if ty == "I" { size } else { ty };
    match ty {
        "Handle"
        | "Stream"
        | "HipEvent"
        | "HipblasLtHandle"
        | "HipblasLtMatmulDesc"
        | "HipblasLtMatrixLayout"
        | "HipblasLtMatmulPreference" => "conf::Opaque",
        "HipblasLtMatmulAlgo" => {
            return format!(
                "conf::Sized<{}>",
                std::mem::size_of::<abi::HipblasLtMatmulAlgo>()
            )
        }
        "HipblasLtMatmulHeuristicResult" => {
            return format!(
                "conf::Sized<{}>",
                std::mem::size_of::<abi::HipblasLtMatmulHeuristicResult>()
            )
        }
        "Operation"
        | "Datatype"
        | "GemmAlgo"
        | "Status"
        | "HipError"
        | "PointerMode"
        | "HipMemcpyKind"
        | "HipblasStatus"
        | "HipDataType"
        | "HipblasComputeType"
        | "HipblasLtAttribute"
        | "HipStreamCaptureMode" => "conf::Enum32",
        "i32" => "conf::Int32",
        "i64" => "conf::Int64",
        "u32" => "conf::Uint32",
        "u64" => "conf::Uint64",
        "usize" => "conf::Usize",
        "f32" => "conf::F32",
        "c_char" => "conf::Char",
        "c_void" => "conf::Any",
        other => panic!("src/abi.rs type {other} has no C description here; add it"),
    }
    .to_string()
}

/// The C enumerator a constant of `src/abi.rs` stands for.
fn enumerator(name: &str) -> Option<String> {
    let lower = |p: &str, rest: &str| format!("{p}{}", rest.to_ascii_lowercase());
    let camel = |rest: &str| {
        rest.split('_')
            .map(|w| {
                let w = w.to_ascii_lowercase();
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect::<String>()
    };
    let pairs = [
        ("STATUS_", "rocblas_status_"),
        ("OP_", "rocblas_operation_"),
        ("DT_", "rocblas_datatype_"),
        ("ALGO_", "rocblas_gemm_algo_"),
        ("FLAG_", "rocblas_gemm_flags_"),
        ("POINTER_MODE_", "rocblas_pointer_mode_"),
    ];
    for (rust, c) in pairs {
        if let Some(rest) = name.strip_prefix(rust) {
            return Some(lower(c, rest));
        }
    }
    if name.starts_with("HIP_R_") {
        // hipDataType values, named as in the header: tests/conformance/hipblaslt.rs.
        return None;
    }
    if let Some(rest) = name.strip_prefix("HIP_") {
        return Some(format!("hip{}", camel(rest)));
    }
    None
}

/// Identifiers followed by `(` or standing alone in preprocessed header text.
pub fn identifiers(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            cur.push(c);
        } else if !cur.is_empty() {
            out.insert(std::mem::take(&mut cur));
        }
    }
    out
}

/// Compiles `source` inside the root (`g++ -std=c++17 -fsyntax-only`), returning the
/// compiler's messages on failure.
pub fn compile(s: &Suite, name: &str, source: &str, flags: &str) -> Result<(), String> {
    let (host, inside) = s.scratch(name);
    std::fs::write(host.join("check.cpp"), source).unwrap();
    let out = s.sh(&format!(
        "cd {inside} && g++ -std=c++17 -fsyntax-only -fmax-errors=200 {flags} check.cpp"
    ));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The preprocessed text of `includes` inside the root.
pub fn preprocess(s: &Suite, name: &str, includes: &str, flags: &str) -> String {
    let (host, inside) = s.scratch(name);
    std::fs::write(host.join("pp.cpp"), includes).unwrap();
    let out = s.sh(&format!("cd {inside} && g++ -std=c++17 -E {flags} pp.cpp"));
    assert!(
        out.status.success(),
        "preprocessing in {}: {}",
        s.name,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const INCLUDES: &str = "#include <rocblas/rocblas.h>\n#include <hip/hip_runtime_api.h>\n";
// __HIP_DISABLE_CPP_FUNCTIONS__: without it hipMalloc & co. are also C++ templates (overloads).
const FLAGS: &str = "-D__HIP_PLATFORM_AMD__ -D__HIP_DISABLE_CPP_FUNCTIONS__ -DROCBLAS_BETA_FEATURES_API -DROCBLAS_NO_DEPRECATED_WARNINGS -w";

/// Every (symbol, type) pair to check: the hook table's rocBLAS and HIP entries, then
/// [`QUERIED`].
fn pairs() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = sources::hook_table()
        .into_iter()
        .filter(|h| h.symbol.starts_with("rocblas_") || h.symbol.starts_with("hip"))
        .map(|h| (h.symbol, h.ty))
        .collect();
    for (s, t) in QUERIED {
        out.push((s.to_string(), t.to_string()));
    }
    out.sort();
    out.dedup();
    out
}

/// The generated source and what the header does not declare.
pub fn generate(declared: &BTreeSet<String>) -> (String, Vec<String>) {
    let sigs: BTreeMap<String, Signature> = sources::abi_signatures()
        .into_iter()
        .map(|s| (s.name.clone(), s))
        .collect();
    let mut src = String::from(INCLUDES);
    src.push_str(PRELUDE);
    let mut absent = Vec::new();
    let mut used_types = BTreeSet::new();
    for (sym, ty) in pairs() {
        let (base, size) = match ty.split_once('<') {
            Some((b, rest)) => (b.to_string(), rest.trim_end_matches('>').to_string()),
            None => (ty.clone(), "I".to_string()),
        };
        let sig = sigs
            .get(&base)
            .unwrap_or_else(|| panic!("{sym}: type {base} is not a C function type of src/abi.rs"));
        used_types.insert(base.clone());
        if !declared.contains(&sym) {
            absent.push(sym);
            continue;
        }
        let f = format!("decltype({sym})");
        writeln!(
            src,
            "static_assert(conf::fn<{f}>::arity == {}, \"{sym}: src/abi.rs {ty} has {} arguments\");",
            sig.args.len(),
            sig.args.len()
        )
        .unwrap();
        writeln!(
            src,
            "static_assert(conf::like<conf::fn<{f}>::ret, {}>::value, \"{sym}: return type is not {}\");",
            describe(&sig.ret, &size),
            sig.ret
        )
        .unwrap();
        for (i, a) in sig.args.iter().enumerate() {
            writeln!(
                src,
                "static_assert(conf::like<conf::arg<{f}, {i}>, {}>::value, \"{sym} argument {}: src/abi.rs {ty} says {a}\");",
                describe(a, &size),
                i + 1
            )
            .unwrap();
        }
    }
    // Every C function type of src/abi.rs is checked against at least one real function.
    // hipBLASLt's types are checked by tests/conformance/hipblaslt.rs.
    let unused: Vec<&String> = sigs
        .keys()
        .filter(|k| {
            // hipBLASLt's and the guard's types are checked by hipblaslt.rs.
            !used_types.contains(*k) && !k.starts_with("HipblasLt") && !k.starts_with("Guard")
        })
        .collect();
    assert!(
        unused.is_empty(),
        "src/abi.rs types no real function is checked against (add them to QUERIED): {unused:?}"
    );

    for (name, ty, value) in sources::abi_constants() {
        let Some(c) = enumerator(&name) else { continue };
        if !declared.contains(&c) {
            absent.push(c);
            continue;
        }
        writeln!(
            src,
            "static_assert(static_cast<long long>({c}) == {value}LL, \"src/abi.rs {name}: {ty} = {value}, but the header's {c} differs\");"
        )
        .unwrap();
    }
    for (c, size) in [
        ("rocblas_int", 4),
        ("rocblas_stride", 8),
        ("rocblas_status", 4),
        ("rocblas_operation", 4),
        ("rocblas_datatype", 4),
        ("rocblas_gemm_algo", 4),
        ("rocblas_gemm_flags", 4),
        ("rocblas_pointer_mode", 4),
        ("rocblas_handle", std::mem::size_of::<abi::Handle>()),
        ("hipError_t", std::mem::size_of::<abi::HipError>()),
        ("hipStream_t", std::mem::size_of::<abi::Stream>()),
        ("hipEvent_t", std::mem::size_of::<abi::HipEvent>()),
    ] {
        writeln!(
            src,
            "static_assert(sizeof({c}) == {size}, \"sizeof({c}) is not {size}\");"
        )
        .unwrap();
    }
    writeln!(src, "static_assert(std::is_signed<rocblas_int>::value && std::is_signed<rocblas_stride>::value, \"rocblas_int and rocblas_stride are signed\");").unwrap();
    // Element sizes (abi::datatype_size) of the types the headers name.
    for (dt, c) in [
        (abi::DT_F16_R, "rocblas_half"),
        (abi::DT_BF16_R, "rocblas_bfloat16"),
        (abi::DT_F32_R, "float"),
        (abi::DT_F64_R, "double"),
        (abi::DT_F32_C, "rocblas_float_complex"),
        (abi::DT_F64_C, "rocblas_double_complex"),
        (abi::DT_I8_R, "int8_t"),
        (abi::DT_I32_R, "int32_t"),
    ] {
        let size = abi::datatype_size(dt).unwrap();
        writeln!(src, "static_assert(sizeof({c}) == {size}, \"datatype_size({dt}) = {size} but sizeof({c}) differs\");").unwrap();
    }
    (src, absent)
}

pub fn check(s: &Suite) {
    let pp = preprocess(s, "abi-pp", INCLUDES, FLAGS);
    let declared = identifiers(&pp);
    assert!(
        declared.contains("rocblas_gemm_ex"),
        "{}: rocblas.h declares rocblas_gemm_ex",
        s.name
    );
    let (src, absent) = generate(&declared);
    let expected_absent: BTreeSet<String> = if s.has_64() {
        // "Before ROCm 6.0 rocblas_gemm_flags_pack_int8x4 = 0x1, as has now been removed"
        // (rocblas-types.h of 6.4.4): 0x1 is reserved there.
        ["rocblas_gemm_flags_pack_int8x4".to_string()].into()
    } else {
        let mut e: BTreeSet<String> = sources::hook_table()
            .into_iter()
            .filter(|h| h.symbol.ends_with("_64"))
            .map(|h| h.symbol)
            .collect();
        // Added after rocBLAS 2.47.
        e.insert("rocblas_gemm_flags_fp16_alt_impl_rnz".into());
        e.insert("rocblas_gemm_flags_stochastic_rounding".into());
        e
    };
    let absent: BTreeSet<String> = absent.into_iter().collect();
    assert_eq!(
        absent, expected_absent,
        "{}: what the headers do not declare",
        s.name
    );
    if let Err(e) = compile(s, "abi", &src, FLAGS) {
        let (host, _) = s.scratch("abi-failed");
        std::fs::write(host.join("check.cpp"), &src).unwrap();
        panic!(
            "{}: src/abi.rs disagrees with the real headers (source kept in {}):\n{e}",
            s.name,
            host.display()
        );
    }
}
