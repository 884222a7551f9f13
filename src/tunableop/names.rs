//! Problem keys <-> (op name, signature): PyTorch's names and the tunedblas extension
//! names (see the module docs of [`super`]).

use crate::abi::{self, Datatype};
use crate::key::{Batching, ProblemKey, Trans, Types};

use super::{EXT_OP_PREFIX, GEMM_PREFIX, STRIDED_PREFIX};

/// The result of reading one (op name, signature) pair.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyParse {
    /// A concrete, checked problem.
    Key(ProblemKey),
    /// An op rocBLAS does not serve (tf32, GemmAndBias, ScaledGemm, unknown names).
    Unservable,
    /// A known op whose signature has `*` tokens.
    Wildcard(KeyPattern),
    /// A known op with a signature or sizes that make no sense, and why.
    Invalid(String),
}

/// A dimension in a signature: `None` is a `*` token.
pub type Dim = Option<i64>;

/// A signature read as a pattern: every size may be a `*` wildcard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyPattern {
    pub batching: Batching,
    pub trans_a: Trans,
    pub trans_b: Trans,
    pub types: Types,
    pub flags: u32,
    pub m: Dim,
    pub n: Dim,
    pub k: Dim,
    /// `[lda, ldb, ldc, ldd]`; `None` when the signature gives none (packed, ldd = ldc).
    pub lds: Option<[Dim; 4]>,
    pub batch: Dim,
    /// `None` when the signature gives none (packed for `Strided`, zero otherwise).
    pub strides: Option<[Dim; 4]>,
    /// Under one of PyTorch's op names: the call must have `ldd == ldc`. PyTorch's signature
    /// has one token for both, so a call with D laid out apart from C has no PyTorch name
    /// and no PyTorch `*` row matches it, even where that token is `*`.
    pub ldd_is_ldc: bool,
}

fn dim_ok(d: Dim, v: i64) -> bool {
    d.is_none() || d == Some(v)
}

impl KeyPattern {
    /// True when no token is `*`.
    pub fn is_concrete(&self) -> bool {
        let lds = self.lds.iter().flatten().all(Option::is_some);
        let strides = self.strides.iter().flatten().all(Option::is_some);
        self.m.is_some()
            && self.n.is_some()
            && self.k.is_some()
            && self.batch.is_some()
            && lds
            && strides
    }

    /// The concrete key, with the defaults of the module docs filled in and checked with
    /// [`check_key`].
    pub fn to_key(&self) -> Result<ProblemKey, String> {
        let (Some(m), Some(n), Some(k), Some(batch)) = (self.m, self.n, self.k, self.batch) else {
            return Err("the signature has wildcard sizes".into());
        };
        let lds = match self.lds {
            Some([Some(a), Some(b), Some(c), Some(d)]) => [a, b, c, d],
            Some(_) => return Err("the signature has wildcard leading dimensions".into()),
            None => {
                let [a, b, c] = ProblemKey::packed_lds(self.trans_a, self.trans_b, m, n, k);
                [a, b, c, c]
            }
        };
        let mut key = ProblemKey {
            batching: self.batching,
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            types: self.types,
            flags: self.flags,
            m,
            n,
            k,
            lda: lds[0],
            ldb: lds[1],
            ldc: lds[2],
            ldd: lds[3],
            batch,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            stride_d: 0,
        };
        let strides = match self.strides {
            Some([Some(a), Some(b), Some(c), Some(d)]) => [a, b, c, d],
            Some(_) => return Err("the signature has wildcard strides".into()),
            None if self.batching == Batching::Strided => {
                check_key(&key)?;
                checked_packed_strides(&key).ok_or("the packed strides overflow 64 bits")?
            }
            None => [0; 4],
        };
        [key.stride_a, key.stride_b, key.stride_c, key.stride_d] = strides;
        check_key(&key)?;
        Ok(key)
    }

    /// Whether a concrete key is one this pattern describes.
    pub fn matches(&self, key: &ProblemKey) -> bool {
        if (
            self.batching,
            self.trans_a,
            self.trans_b,
            self.types,
            self.flags,
        ) != (key.batching, key.trans_a, key.trans_b, key.types, key.flags)
        {
            return false;
        }
        if !(dim_ok(self.m, key.m) && dim_ok(self.n, key.n) && dim_ok(self.k, key.k)) {
            return false;
        }
        if !dim_ok(self.batch, key.batch) {
            return false;
        }
        if self.ldd_is_ldc && key.ldd != key.ldc {
            return false;
        }
        let lds_ok = match self.lds {
            Some(l) => l
                .iter()
                .zip([key.lda, key.ldb, key.ldc, key.ldd])
                .all(|(&d, v)| dim_ok(d, v)),
            None => {
                ProblemKey::packed_lds(key.trans_a, key.trans_b, key.m, key.n, key.k)
                    == [key.lda, key.ldb, key.ldc]
                    && key.ldd == key.ldc
            }
        };
        let actual = [key.stride_a, key.stride_b, key.stride_c, key.stride_d];
        let strides_ok = match self.strides {
            Some(s) => s.iter().zip(actual).all(|(&d, v)| dim_ok(d, v)),
            None if key.batching == Batching::Strided => {
                checked_packed_strides(key) == Some(actual)
            }
            None => actual == [0; 4],
        };
        lds_ok && strides_ok
    }
}

/// Checks that a key describes a problem rocBLAS could accept: non-negative sizes, leading
/// dimensions at least the rows they hold, no 64-bit overflow in any extent, batching
/// fields consistent, only kernel flags. The error says what is wrong.
pub fn check_key(key: &ProblemKey) -> Result<(), String> {
    for (name, v) in [
        ("m", key.m),
        ("n", key.n),
        ("k", key.k),
        ("batch", key.batch),
    ] {
        if v < 0 {
            return Err(format!("negative size {name}={v}"));
        }
    }
    let strides = [key.stride_a, key.stride_b, key.stride_c, key.stride_d];
    match key.batching {
        Batching::Single if key.batch != 1 => {
            return Err(format!("a single GEMM with batch {}", key.batch))
        }
        Batching::Single | Batching::PointerArray if strides != [0; 4] => {
            return Err("strides on a GEMM that is not strided-batched".into())
        }
        _ => {}
    }
    if let Some(s) = strides.iter().find(|&&s| s < 0) {
        return Err(format!("negative stride {s}"));
    }
    let shapes = key.stored_shapes();
    for (i, ld) in key.lds().into_iter().enumerate() {
        let ((name, what), rows) = (
            [("lda", "A"), ("ldb", "B"), ("ldc", "C"), ("ldd", "D")][i],
            shapes[i].0,
        );
        if ld < rows.max(1) {
            return Err(format!(
                "{name}={ld} is smaller than the {rows} rows of {what}"
            ));
        }
    }
    let overflow = || Err("the problem's sizes overflow 64 bits".to_string());
    let extents = key.checked_packed_strides();
    let work = key
        .m
        .checked_mul(key.n)
        .and_then(|x| x.checked_mul(key.k))
        .and_then(|x| x.checked_mul(key.batch));
    if work.is_none() || extents.iter().any(Option::is_none) {
        return overflow();
    }
    if key.batching == Batching::Strided {
        let last = (key.batch - 1).max(0);
        for (stride, extent) in strides.iter().zip(extents) {
            let total = stride
                .checked_mul(last)
                .and_then(|x| x.checked_add(extent.unwrap_or(0)));
            if total.is_none() {
                return overflow();
            }
        }
    }
    if key.flags & !abi::KERNEL_FLAGS != 0 {
        return Err(format!(
            "flags {:#x} include bits that are not kernel flags",
            key.flags
        ));
    }
    Ok(())
}

/// [`ProblemKey::packed_strides`] without the chance of an overflow panic.
pub(super) fn checked_packed_strides(key: &ProblemKey) -> Option<[i64; 4]> {
    let [a, b, c, d] = key.checked_packed_strides();
    Some([a?, b?, c?, d?])
}

/// PyTorch's `T` for a type combination it has a TunableOp for.
fn pytorch_type_name(t: &Types) -> Option<&'static str> {
    [
        ("Half", Types::uniform(abi::DT_F16_R, abi::DT_F32_R)),
        ("BFloat16", Types::uniform(abi::DT_BF16_R, abi::DT_F32_R)),
        ("float", Types::uniform(abi::DT_F32_R, abi::DT_F32_R)),
        ("double", Types::uniform(abi::DT_F64_R, abi::DT_F64_R)),
    ]
    .into_iter()
    .find(|(_, types)| types == t)
    .map(|(name, _)| name)
}

fn pytorch_types(name: &str) -> Option<Types> {
    Some(match name {
        "Half" => Types::uniform(abi::DT_F16_R, abi::DT_F32_R),
        "BFloat16" => Types::uniform(abi::DT_BF16_R, abi::DT_F32_R),
        "float" => Types::uniform(abi::DT_F32_R, abi::DT_F32_R),
        "double" => Types::uniform(abi::DT_F64_R, abi::DT_F64_R),
        _ => return None,
    })
}

/// The short type name of the extension format (`f16`, `bf16`, `f32c`, `dt170`, ...).
pub fn short_type_name(t: Datatype) -> String {
    match abi::datatype_name(t) {
        Some(name) => match name.strip_suffix("_r") {
            Some(real) => real.to_string(),
            None => name.replace("_c", "c"),
        },
        None => format!("dt{t}"),
    }
}

/// Inverse of [`short_type_name`].
pub fn type_from_short_name(s: &str) -> Option<Datatype> {
    if let Some(v) = s.strip_prefix("dt") {
        return parse_int(v).ok().and_then(|v| i32::try_from(v).ok());
    }
    let long = match s.strip_suffix('c') {
        Some(base) => format!("{base}_c"),
        None => format!("{s}_r"),
    };
    abi::datatype_from_name(&long)
}

fn batching_name(b: Batching) -> &'static str {
    match b {
        Batching::Single => "Single",
        Batching::Strided => "Strided",
        Batching::PointerArray => "PtrArray",
    }
}

pub(super) fn pytorch_expressible(key: &ProblemKey) -> Option<&'static str> {
    let t = pytorch_type_name(&key.types)?;
    let letters_ok = |t: Trans| t == Trans::N || t == Trans::T;
    let strides = [key.stride_a, key.stride_b, key.stride_c, key.stride_d];
    let batching_ok = match key.batching {
        Batching::Single => key.batch == 1 && strides == [0; 4],
        Batching::Strided => checked_packed_strides(key) == Some(strides),
        Batching::PointerArray => false,
    };
    (letters_ok(key.trans_a)
        && letters_ok(key.trans_b)
        && key.ldd == key.ldc
        && key.flags == 0
        && batching_ok)
        .then_some(t)
}

/// The op name and signature for a key: PyTorch's >= 2.7 form whenever PyTorch can express
/// the key, the tunedblas extension form otherwise (see the module docs).
pub fn op_and_signature(key: &ProblemKey) -> (String, String) {
    let (m, n, k) = (key.m, key.n, key.k);
    let ab = format!("{}{}", key.trans_a.letter(), key.trans_b.letter());
    let sig_ab = ab.to_ascii_lowercase();
    if let Some(t) = pytorch_expressible(key) {
        let lds = format!("ld_{}_{}_{}", key.lda, key.ldb, key.ldc);
        return match key.batching {
            Batching::Strided => (
                format!("{STRIDED_PREFIX}{t}_{ab}"),
                format!("{sig_ab}_{m}_{n}_{k}_B_{}_{lds}", key.batch),
            ),
            _ => (
                format!("{GEMM_PREFIX}{t}_{ab}"),
                format!("{sig_ab}_{m}_{n}_{k}_{lds}"),
            ),
        };
    }
    let ty = &key.types;
    let op = format!(
        "{EXT_OP_PREFIX}{}_{}_{}_{}_{}_{}_{ab}",
        batching_name(key.batching),
        short_type_name(ty.a),
        short_type_name(ty.b),
        short_type_name(ty.c),
        short_type_name(ty.d),
        short_type_name(ty.compute),
    );
    let mut sig = format!("{sig_ab}_{m}_{n}_{k}");
    if key.batching != Batching::Single || key.batch != 1 {
        sig.push_str(&format!("_B_{}", key.batch));
    }
    sig.push_str(&format!(
        "_ld_{}_{}_{}_{}",
        key.lda, key.ldb, key.ldc, key.ldd
    ));
    let strides = [key.stride_a, key.stride_b, key.stride_c, key.stride_d];
    if key.batching == Batching::Strided || strides != [0; 4] {
        sig.push_str(&format!(
            "_st_{}_{}_{}_{}",
            strides[0], strides[1], strides[2], strides[3]
        ));
    }
    sig.push_str(&format!("_fl_{:#x}", key.flags));
    (op, sig)
}

/// Which grammar a signature follows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Gemm,
    Strided,
    Extension,
}

/// What the op name says: family, batching, types and layout.
struct OpInfo {
    family: Family,
    batching: Batching,
    types: Types,
    layout: [Trans; 2],
    /// The layout letters in lower case, as the signature must start.
    layout_text: [u8; 2],
}

enum OpParse {
    Op(OpInfo),
    Unservable,
    Invalid(String),
}

fn parse_layout(ab: &str, op: &str) -> Result<[Trans; 2], String> {
    let letter = |c: u8| match c {
        b'N' | b'T' | b'C' => Trans::from_letter(c as char),
        _ => None,
    };
    match ab.as_bytes() {
        &[a, b] => match (letter(a), letter(b)) {
            (Some(a), Some(b)) => Ok([a, b]),
            _ => Err(format!("op name {op} does not end in a layout such as _TN")),
        },
        _ => Err(format!("op name {op} does not end in a layout such as _TN")),
    }
}

fn parse_op(op: &str) -> OpParse {
    let (family, rest) = if let Some(rest) = op.strip_prefix(GEMM_PREFIX) {
        (Family::Gemm, rest)
    } else if let Some(rest) = op.strip_prefix(STRIDED_PREFIX) {
        (Family::Strided, rest)
    } else if let Some(rest) = op.strip_prefix(EXT_OP_PREFIX) {
        (Family::Extension, rest)
    } else {
        return OpParse::Unservable;
    };
    let Some((head, ab)) = rest.rsplit_once('_') else {
        return OpParse::Invalid(format!("op name {op} has no type and layout parts"));
    };
    let layout = match parse_layout(ab, op) {
        Ok(l) => l,
        Err(e) => return OpParse::Invalid(e),
    };
    // Two ASCII letters: parse_layout checked them.
    let b = ab.as_bytes();
    let layout_text = [b[0].to_ascii_lowercase(), b[1].to_ascii_lowercase()];
    if family != Family::Extension {
        let Some(types) = pytorch_types(head) else {
            // tf32 and any type PyTorch may add later: not something rocBLAS serves.
            return OpParse::Unservable;
        };
        let batching = if family == Family::Gemm {
            Batching::Single
        } else {
            Batching::Strided
        };
        return OpParse::Op(OpInfo {
            family,
            batching,
            types,
            layout,
            layout_text,
        });
    }
    let parts: Vec<&str> = head.split('_').collect();
    if parts.len() != 6 {
        return OpParse::Invalid(format!(
            "extension op name {op} must be {EXT_OP_PREFIX}<batching>_<a>_<b>_<c>_<d>_<compute>_<AB>"
        ));
    }
    let batching = match parts[0] {
        "Single" => Batching::Single,
        "Strided" => Batching::Strided,
        "PtrArray" => Batching::PointerArray,
        other => {
            return OpParse::Invalid(format!(
                "unknown batching {other:?} in {op} (Single, Strided or PtrArray)"
            ))
        }
    };
    let mut dts = [0; 5];
    for (slot, name) in dts.iter_mut().zip(&parts[1..]) {
        match type_from_short_name(name) {
            Some(t) => *slot = t,
            None => return OpParse::Invalid(format!("unknown data type {name:?} in {op}")),
        }
    }
    let types = Types {
        a: dts[0],
        b: dts[1],
        c: dts[2],
        d: dts[3],
        compute: dts[4],
    };
    OpParse::Op(OpInfo {
        family,
        batching,
        types,
        layout,
        layout_text,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NumError {
    NotANumber,
    TooLarge,
}

/// An optionally negative decimal integer: digits only (no `+`, no spaces).
pub(super) fn parse_int(s: &str) -> Result<i64, NumError> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NumError::NotANumber);
    }
    s.parse::<i64>().map_err(|_| NumError::TooLarge)
}

fn parse_dim(tok: &str, what: &str) -> Result<Dim, String> {
    if tok == "*" {
        return Ok(None);
    }
    match parse_int(tok) {
        Ok(v) if v < 0 => Err(format!("negative {what} {v}")),
        Ok(v) => Ok(Some(v)),
        Err(NumError::TooLarge) => Err(format!("{what} {tok} does not fit in 64 bits")),
        Err(NumError::NotANumber) => Err(format!("{what} {tok:?} is not a number")),
    }
}

fn parse_flags(tok: &str) -> Result<u32, String> {
    let parsed = match tok.strip_prefix("0x").or_else(|| tok.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u32::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None if !tok.is_empty() && tok.bytes().all(|b| b.is_ascii_digit()) => tok.parse().ok(),
        None => None,
    };
    let flags = parsed.ok_or_else(|| format!("flags {tok:?} are not a 32-bit number"))?;
    if flags & !abi::KERNEL_FLAGS != 0 {
        return Err(format!(
            "flags {flags:#x} include bits that are not kernel flags"
        ));
    }
    Ok(flags)
}

/// The tokens of a signature, read front to back (without collecting them: this runs once
/// per row of a profile that may hold millions).
struct Tokens<'a> {
    sig: &'a str,
    tokens: std::iter::Peekable<std::str::Split<'a, char>>,
}

impl<'a> Tokens<'a> {
    fn next(&mut self, what: &str) -> Result<&'a str, String> {
        let t = self.tokens.next();
        t.ok_or_else(|| format!("signature {:?} ends before {what}", self.sig))
    }
    fn peek(&mut self) -> Option<&'a str> {
        self.tokens.peek().copied()
    }
    fn skip(&mut self) {
        self.tokens.next();
    }
    fn dims<const N: usize>(&mut self, names: [&str; N]) -> Result<[Dim; N], String> {
        let mut out = [None; N];
        for (slot, name) in out.iter_mut().zip(names) {
            *slot = parse_dim(self.next(name)?, name)?;
        }
        Ok(out)
    }
}

fn parse_signature(op: &OpInfo, op_name: &str, sig: &str) -> Result<KeyPattern, String> {
    let mut t = Tokens {
        sig,
        tokens: sig.split('_').peekable(),
    };
    let layout = t.next("the layout")?;
    if layout.as_bytes() != op.layout_text {
        return Err(format!(
            "layout {layout:?} of the signature disagrees with the op name {op_name}"
        ));
    }
    let [m, n, k] = t.dims(["m", "n", "k"])?;

    let mut batch: Option<Dim> = None;
    let mut lds: Option<[Dim; 4]> = None;
    let mut strides: Option<[Dim; 4]> = None;
    let mut flags: Option<u32> = None;
    // Sections in the only order they may come: B, ld, st, fl.
    let sections: &[&str] = match op.family {
        Family::Gemm => &["ld"],
        Family::Strided => &["B", "ld"],
        Family::Extension => &["B", "ld", "st", "fl"],
    };
    for &section in sections {
        if t.peek() != Some(section) {
            continue;
        }
        t.skip();
        match section {
            "B" => batch = Some(t.dims(["batch count"])?[0]),
            "ld" if op.family == Family::Extension => {
                lds = Some(t.dims(["lda", "ldb", "ldc", "ldd"])?);
            }
            "ld" => {
                let [a, b, c] = t.dims(["lda", "ldb", "ldc"])?;
                lds = Some([a, b, c, c]);
            }
            "st" => strides = Some(t.dims(["stride_a", "stride_b", "stride_c", "stride_d"])?),
            _ => flags = Some(parse_flags(t.next("the flags")?)?),
        }
    }
    if let Some(extra) = t.peek() {
        return Err(format!(
            "unexpected token {extra:?} in signature {sig:?} of {op_name}"
        ));
    }
    match op.family {
        Family::Strided if batch.is_none() => {
            return Err(format!(
                "strided-batched signature {sig:?} has no _B_<batch>"
            ))
        }
        Family::Extension if lds.is_none() => {
            return Err(format!("extension signature {sig:?} has no _ld_ section"))
        }
        Family::Extension if flags.is_none() => {
            return Err(format!("extension signature {sig:?} has no _fl_ section"))
        }
        _ => {}
    }
    Ok(KeyPattern {
        batching: op.batching,
        trans_a: op.layout[0],
        trans_b: op.layout[1],
        types: op.types,
        flags: flags.unwrap_or(0),
        m,
        n,
        k,
        lds,
        batch: batch.unwrap_or(Some(1)),
        strides,
        ldd_is_ldc: op.family != Family::Extension,
    })
}

/// Reads an (op name, signature) pair: PyTorch's forms, the extension form, or `*` patterns.
pub fn parse_key(op_name: &str, signature: &str) -> KeyParse {
    let op = match parse_op(op_name.trim()) {
        OpParse::Op(op) => op,
        OpParse::Unservable => return KeyParse::Unservable,
        OpParse::Invalid(e) => return KeyParse::Invalid(e),
    };
    let pattern = match parse_signature(&op, op_name.trim(), signature.trim()) {
        Ok(p) => p,
        Err(e) => return KeyParse::Invalid(e),
    };
    if !pattern.is_concrete() {
        return KeyParse::Wildcard(pattern);
    }
    match pattern.to_key() {
        Ok(key) => KeyParse::Key(key),
        Err(e) => KeyParse::Invalid(format!("{op_name},{signature}: {e}")),
    }
}
