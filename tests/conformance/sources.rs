//! What the project's own sources say it calls, read from the files themselves so the checks
//! follow every change: the interposer's hook table (`preload/src/rocblas/real.rs`), the symbols the
//! tuner resolves (`tuner/src/backends/rocblas.rs`, `runtime.rs`), and the C
//! signatures of `src/abi.rs`.

#![allow(dead_code)]

use std::collections::BTreeMap;

use crate::suite::repo;

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// One entry of `hook_table!`: `field: Type = c"symbol"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hook {
    pub field: String,
    /// The Rust type as written: `GemmExFn<i64>`.
    pub ty: String,
    pub symbol: String,
}

/// The entries of the `hook_table! { ... }` invocation in `preload/src/rocblas/real.rs`.
pub fn hook_table() -> Vec<Hook> {
    let src = read("preload/src/rocblas/real.rs");
    let start = src
        .find("\nhook_table! {")
        .expect("preload/src/rocblas/real.rs invokes hook_table!");
    let body = &src[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("\n}").unwrap()];
    body.lines()
        .map(str::trim)
        // (The first line names the table: `pub struct Hooks; static HOOKS; libs = ...;`.)
        .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.contains("struct "))
        .map(|l| {
            let l = l.trim_end_matches(',');
            // `... = c"sym" in LIBS`: searched in other libraries; the symbol is the same.
            let l = l.split(" in ").next().unwrap_or(l);
            let (field, rest) = l.split_once(':').unwrap_or_else(|| panic!("hook line {l}"));
            let (ty, sym) = rest
                .split_once('=')
                .unwrap_or_else(|| panic!("hook line {l}"));
            let sym = sym.trim();
            let sym = sym
                .strip_prefix("c\"")
                .and_then(|s| s.strip_suffix('"'))
                .unwrap_or_else(|| panic!("hook symbol {sym}"));
            Hook {
                field: field.trim().to_string(),
                ty: ty.trim().to_string(),
                symbol: sym.to_string(),
            }
        })
        .collect()
}

/// How the harness resolves a symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// `need(...)` / `hip_need(...)`: the harness refuses a library without it.
    Required,
    /// `sym(...)`: used when present.
    Optional,
}

/// The symbols the tuner resolves from rocBLAS (`tuner/src/backends/rocblas.rs`:
/// `dl::need`, the names it checks first, `dl::sym`) and from HIP (the runtime,
/// `tuner/src/runtime.rs`: `dl::need(h, &s("Malloc"), ..)` and `dl::sym(h, &s(..))`
/// with `s` prefixing `hip`): (rocBLAS, HIP) maps of name to need.
pub fn harness_symbols() -> (BTreeMap<String, Need>, BTreeMap<String, Need>) {
    let squeeze =
        |rel: &str| -> String { read(rel).chars().filter(|c| !c.is_whitespace()).collect() };
    let name_at = |s: &str| -> Option<String> {
        let s = s.strip_prefix('"')?;
        Some(s[..s.find('"')?].to_string())
    };
    // Every `<call>(<scope>,<name>` of `src`, the turbofish of `dl::sym::<T>` skipped.
    let calls = |src: &str, call: &str, scopes: &[&str]| -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = src;
        while let Some(p) = rest.find(call) {
            rest = &rest[p + call.len()..];
            let mut args = rest;
            if let Some(r) = args.strip_prefix("::<") {
                args = &r[r.find(">(").map_or(0, |e| e + 1)..];
            }
            let Some(args) = args.strip_prefix('(') else {
                continue;
            };
            let Some((scope, after)) = args.split_once(',') else {
                continue;
            };
            if scopes.contains(&scope) {
                out.extend(name_at(after));
            }
        }
        out
    };
    let mut rocblas = BTreeMap::new();
    let rb = squeeze("tuner/src/backends/rocblas.rs");
    for n in calls(&rb, "dl::need", &["h", "lookup"]) {
        rocblas.insert(n, Need::Required);
    }
    // The names checked before anything else: `for name in [..] { need(name)?; }`.
    if let Some(list) = rb.split("fornamein[").nth(1) {
        let list = &list[..list.find(']').unwrap_or(0)];
        for n in list.split(',').filter_map(name_at) {
            rocblas.insert(n, Need::Required);
        }
    }
    for n in calls(&rb, "dl::sym", &["h", "lookup"]) {
        if !n.starts_with("hip") {
            rocblas.entry(n).or_insert(Need::Optional);
        }
    }
    let mut hip = BTreeMap::new();
    let rt = squeeze("tuner/src/runtime.rs");
    for (call, need) in [
        ("dl::need(h,&s(", Need::Required),
        ("dl::sym(h,&s(", Need::Optional),
    ] {
        let mut rest = rt.as_str();
        while let Some(p) = rest.find(call) {
            rest = &rest[p + call.len()..];
            if let Some(n) = name_at(rest) {
                hip.entry(format!("hip{n}")).or_insert(need);
            }
        }
    }
    (rocblas, hip)
}

/// One `pub type Name<I>? = unsafe extern "C" fn(args) -> Ret;` of `src/abi.rs` (or
/// `"C-unwind"`).
#[derive(Clone, Debug)]
pub struct Signature {
    pub name: String,
    /// Whether it is generic over the size type `I`.
    pub generic: bool,
    /// Argument types as written (`I`, `*const c_void`, `Datatype`, ...).
    pub args: Vec<String>,
    pub ret: String,
}

/// Every C function type `src/abi.rs` defines.
pub fn abi_signatures() -> Vec<Signature> {
    let src = read("src/abi.rs");
    let mut out = Vec::new();
    let mut rest = src.as_str();
    while let Some(p) = rest.find("pub type ") {
        rest = &rest[p + "pub type ".len()..];
        let end = rest.find(';').unwrap();
        let decl: String = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        rest = &rest[end..];
        let Some((lhs, rhs)) = decl.split_once('=') else {
            continue;
        };
        let rhs = rhs.trim();
        // "C-unwind" has the C calling convention: only unwinding across it differs.
        let Some(f) = rhs
            .strip_prefix("unsafe extern \"C\" fn(")
            .or_else(|| rhs.strip_prefix("unsafe extern \"C-unwind\" fn("))
        else {
            continue;
        };
        let close = f.rfind(')').unwrap();
        let args: Vec<String> = f[..close]
            .split(',')
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
        let ret = f[close + 1..]
            .trim()
            .strip_prefix("->")
            .map_or("()".to_string(), |r| r.trim().to_string());
        let lhs = lhs.trim();
        let (name, generic) = match lhs.split_once('<') {
            Some((n, _)) => (n.to_string(), true),
            None => (lhs.to_string(), false),
        };
        out.push(Signature {
            name,
            generic,
            args,
            ret,
        });
    }
    out
}

/// Every integer constant of `src/abi.rs`, as (name, type, value): each
/// `pub const NAME: Type = literal;` and each `NAME = literal` of a
/// `c_values!(Type: NAME = literal, ...);` block (constants computed from others are
/// skipped).
pub fn abi_constants() -> Vec<(String, String, i64)> {
    let src = read("src/abi.rs");
    let code: String = src
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| format!("{l}\n"))
        .collect();
    let literal = |value: &str| {
        let value = value.trim().replace('_', "");
        match value.strip_prefix("0x") {
            Some(h) => i64::from_str_radix(h, 16).ok(),
            None => value.parse::<i64>().ok(),
        }
    };
    let mut out = Vec::new();
    for line in code.lines() {
        let Some(rest) = line.trim().strip_prefix("pub const ") else {
            continue;
        };
        let Some((name, rest)) = rest.split_once(':') else {
            continue;
        };
        let Some((ty, value)) = rest.split_once('=') else {
            continue;
        };
        if let Some(v) = literal(value.trim().trim_end_matches(';')) {
            out.push((name.trim().to_string(), ty.trim().to_string(), v));
        }
    }
    for block in code.split("c_values!(").skip(1) {
        let block = &block[..block.find(");").expect("a c_values! block ends with );")];
        let (ty, items) = block.split_once(':').expect("c_values!(Type: ...)");
        for item in items.split(',').filter(|i| !i.trim().is_empty()) {
            let (name, value) = item.split_once('=').expect("NAME = value");
            let v = literal(value).expect("a c_values! value is a literal");
            out.push((name.trim().to_string(), ty.trim().to_string(), v));
        }
    }
    out
}
