//! What the hipBLASLt-side formats read: hipBLASLt tuning files, `hipblaslt-bench` log lines
//! and AITER's GEMM tables all name problems as hipBLASLt runs them, so they are read as the
//! hipBLASLt backend's keys ([`LtKey`]), each with the algorithm index the input names, if
//! any (the index space of PyTorch TunableOp's `Gemm_Hipblaslt_<index>`).
//!
//! Every reader here keeps three things apart: rows it turned into keys ([`LtParsed::entries`]),
//! lines that are not rows at all, with why ([`LtParsed::skipped`]: malformed, cut short), and
//! rows that are well formed but name something a BLAS interposer cannot serve
//! ([`LtParsed::unservable`], counted by reason, so a caller says each reason once with its
//! count). A row is never guessed at: a field the key cannot hold makes the row unservable.

use std::collections::BTreeMap;

use super::Skipped;
use crate::abi;
use crate::cublaslt::{self as lt, ComputeType, CudaDataType, LtKey};
use crate::key::{ProblemKey, Types};

/// One problem an input names.
#[derive(Clone, Debug, PartialEq)]
pub struct LtEntry {
    pub key: LtKey,
    /// The hipBLASLt algorithm index the input gives for it (`None`: shapes only).
    pub index: Option<i32>,
    /// Calls seen (log lines), 0 where the format has no count.
    pub calls: u64,
    /// 1-based line where it was first read.
    pub line: usize,
    /// The device the row was tuned on, where the format says (AITER: gfx and CU count).
    pub device: Option<Device>,
    /// The row is counted in [`LtParsed::unservable`] (it still names its GEMM shape).
    pub counted: bool,
}

/// A GPU as AITER names it: architecture (`gfx950`) and compute-unit count.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Device {
    pub gfx: String,
    pub cu_num: Option<i64>,
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cu_num {
            Some(cu) => write!(f, "{} ({cu} CUs)", self.gfx),
            None => f.write_str(&self.gfx),
        }
    }
}

/// What one of these readers found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LtParsed {
    pub entries: Vec<LtEntry>,
    /// Lines that are not rows, with why.
    pub skipped: Vec<Skipped>,
    /// Well-formed rows a BLAS interposer cannot serve: (reason, rows), in the order the
    /// reasons were first met.
    pub unservable: Vec<(String, usize)>,
    /// The `Git Version:` a hipBLASLt tuning file begins with (`Some("")` for an empty one,
    /// as Debian's build reports).
    pub git_version: Option<String>,
}

impl LtParsed {
    /// Adds an entry; a second row for the same key and device is a duplicate: the first
    /// wins (as in hipBLASLt's and AITER's readers, which keep the first match), and its
    /// calls are added.
    pub(crate) fn add(&mut self, entry: LtEntry) {
        match self
            .entries
            .iter_mut()
            .find(|e| e.key == entry.key && e.device == entry.device)
        {
            Some(e) => {
                e.calls = e.calls.saturating_add(entry.calls);
                if e.index.is_none() {
                    e.index = entry.index;
                }
            }
            None => self.entries.push(entry),
        }
    }

    pub(crate) fn skip(&mut self, line: usize, reason: impl Into<String>) {
        self.skipped.push(Skipped {
            line,
            reason: reason.into(),
        });
    }

    /// Counts a row that names something no BLAS interposer serves.
    pub(crate) fn unservable(&mut self, reason: impl Into<String>) {
        let reason = reason.into();
        match self.unservable.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => self.unservable.push((reason, 1)),
        }
    }

    /// Rows counted as unservable, all reasons together.
    pub fn unservable_rows(&self) -> usize {
        self.unservable.iter().map(|(_, n)| n).sum()
    }

    /// The devices the rows were tuned on, with their row counts.
    pub fn devices(&self) -> BTreeMap<Device, usize> {
        let mut out = BTreeMap::new();
        for e in &self.entries {
            if let Some(d) = &e.device {
                *out.entry(d.clone()).or_default() += 1;
            }
        }
        out
    }

    /// The problems as rocBLAS keys, for tuning through rocBLAS: the same GEMM, whichever
    /// library runs it. Problems rocBLAS has no call for (other compute modes) are left out.
    pub fn rocblas_entries(&self) -> super::Parsed {
        let mut out = super::Parsed::default();
        for e in &self.entries {
            match rocblas_key(&e.key) {
                Some(key) => out.add(super::ParsedShape {
                    key,
                    calls: e.calls,
                    line: e.line,
                    solution: None,
                }),
                None => out.skip(
                    e.line,
                    "a hipBLASLt problem rocBLAS has no call for (its compute mode or epilogue)",
                ),
            }
        }
        for s in &self.skipped {
            out.skip(s.line, s.reason.clone());
        }
        out
    }
}

/// The index rows a profile takes from a file, and what it leaves out, by reason.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IndexRows {
    pub rows: Vec<(LtKey, i32)>,
    /// (reason, rows) in the order first met: the file's unservable rows, rows naming no
    /// index, rows tuned on another device.
    pub left_out: Vec<(String, usize)>,
}

impl IndexRows {
    fn leave_out(&mut self, reason: String, n: usize) {
        match self.left_out.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, c)) => *c += n,
            None => self.left_out.push((reason, n)),
        }
    }
}

impl LtParsed {
    /// The rows with a hipBLASLt index, of `device` only where given (its architecture
    /// compared without feature flags, its CU count where both name one); every other row
    /// is counted by why it was left out.
    pub fn index_rows(&self, device: Option<&Device>) -> IndexRows {
        let mut out = IndexRows::default();
        for (why, n) in &self.unservable {
            out.leave_out(why.clone(), *n);
        }
        for e in &self.entries {
            if let (Some(want), Some(d)) = (device, &e.device) {
                let arch_ok = super::validators::base_arch(&d.gfx)
                    == super::validators::base_arch(&want.gfx)
                    || d.gfx.is_empty();
                let cu_ok = match (want.cu_num, d.cu_num) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                if !(arch_ok && cu_ok) {
                    out.leave_out(format!("rows tuned on another device ({d})"), 1);
                    continue;
                }
            }
            match e.index {
                Some(i) => out.rows.push((e.key, i)),
                None if e.counted => {}
                None => out.leave_out(
                    "rows that name no algorithm index (the heuristic ran)".into(),
                    1,
                ),
            }
        }
        out
    }
}

/// A hipBLASLt data type by its hipBLASLt name (`bf16_r`, as `hipblaslt-bench`, its tuning
/// files and its logs write them); `None` for a name it does not have.
pub fn hip_type(name: &str) -> Option<CudaDataType> {
    Some(match name.trim() {
        "f32_r" => lt::R_32F,
        "f64_r" => lt::R_64F,
        "f16_r" => lt::R_16F,
        "bf16_r" => lt::R_16BF,
        "i8_r" => lt::R_8I,
        "i32_r" => lt::R_32I,
        "f8_r" | "f8_fnuz_r" => lt::R_8F_E4M3,
        "bf8_r" | "bf8_fnuz_r" => lt::R_8F_E5M2,
        _ => return None,
    })
}

/// The hipBLASLt name of a type the key can hold.
pub fn hip_type_name(t: CudaDataType) -> Option<&'static str> {
    Some(match t {
        lt::R_32F => "f32_r",
        lt::R_64F => "f64_r",
        lt::R_16F => "f16_r",
        lt::R_16BF => "bf16_r",
        _ => return None,
    })
}

/// A hipBLASLt compute type by the names `hipblaslt-bench` takes and writes (`f32_r`, with
/// its short form `s`; `xf32_r` is TF32), in the key's (cuBLAS) numbers. The `c_` forms some
/// writers use are read too.
pub fn hip_compute(name: &str) -> Option<ComputeType> {
    let t = name.trim();
    let t = t.strip_prefix("c_").unwrap_or(t);
    Some(match t {
        "f32_r" | "s" => lt::COMPUTE_32F,
        "xf32_r" | "x" => lt::COMPUTE_32F_FAST_TF32,
        "f64_r" | "d" => lt::COMPUTE_64F,
        "i32_r" => lt::COMPUTE_32I,
        "f32_f16_r" => lt::COMPUTE_32F_FAST_16F,
        "f32_bf16_r" => lt::COMPUTE_32F_FAST_16BF,
        "f16_r" | "h" => lt::COMPUTE_16F,
        _ => return None,
    })
}

/// The name `hipblaslt-bench` takes for a compute type the key can hold.
pub fn hip_compute_name(c: ComputeType) -> Option<&'static str> {
    Some(match c {
        lt::COMPUTE_32F => "f32_r",
        lt::COMPUTE_32F_FAST_TF32 => "xf32_r",
        lt::COMPUTE_64F => "f64_r",
        lt::COMPUTE_32F_FAST_16F => "f32_f16_r",
        lt::COMPUTE_32F_FAST_16BF => "f32_bf16_r",
        _ => return None,
    })
}

/// Why a type makes a row unservable, or `None` when the key can hold it.
pub(crate) fn unservable_type(t: CudaDataType) -> Option<&'static str> {
    match t {
        lt::R_16F | lt::R_16BF | lt::R_32F | lt::R_64F => None,
        lt::R_8F_E4M3 | lt::R_8F_E5M2 => Some("8-bit float matrices (scaled GEMMs)"),
        lt::R_8I | lt::R_32I => Some("integer matrices"),
        _ => Some("a matrix type tunedblas does not serve"),
    }
}

/// The rocBLAS key of the same GEMM, where rocBLAS has a call for it: real f16/bf16/f32/f64
/// matrices, a plain epilogue, and the compute type rocBLAS would use (f32 for 16-bit
/// types, the matrix type otherwise).
pub fn rocblas_key(k: &LtKey) -> Option<ProblemKey> {
    let dt = |t: CudaDataType| -> Option<abi::Datatype> {
        Some(match t {
            lt::R_16F => abi::DT_F16_R,
            lt::R_16BF => abi::DT_BF16_R,
            lt::R_32F => abi::DT_F32_R,
            lt::R_64F => abi::DT_F64_R,
            _ => return None,
        })
    };
    let compute = match k.compute {
        lt::COMPUTE_32F => abi::DT_F32_R,
        lt::COMPUTE_64F => abi::DT_F64_R,
        _ => return None,
    };
    if k.epilogue != lt::EPILOGUE_DEFAULT || k.sm_count != 0 {
        return None;
    }
    let types = Types {
        a: dt(k.a_type)?,
        b: dt(k.b_type)?,
        c: dt(k.c_type)?,
        d: dt(k.d_type)?,
        compute,
    };
    let key = ProblemKey::single(
        k.trans_a, k.trans_b, types, k.m, k.n, k.k, k.lda, k.ldb, k.ldc, k.ldd, 0,
    );
    let key = if k.batch == 1 {
        key
    } else {
        key.with_batch(
            crate::key::Batching::Strided,
            k.batch,
            [k.stride_a, k.stride_b, k.stride_c, k.stride_d],
        )
    };
    crate::tunableop::check_key(&key).ok()?;
    Some(key)
}

/// A problem with packed leading dimensions and strides, of the types and compute given:
/// what a row of a format without leading dimensions (tuning files, AITER) names.
#[allow(clippy::too_many_arguments)]
pub(crate) fn packed_key(
    trans: [crate::key::Trans; 2],
    [a, b, c, d]: [CudaDataType; 4],
    compute: ComputeType,
    m: i64,
    n: i64,
    k: i64,
    batch: i64,
) -> Result<LtKey, String> {
    let scale = if compute == lt::COMPUTE_64F {
        lt::R_64F
    } else {
        lt::R_32F
    };
    let [lda, ldb, ldc] = ProblemKey::packed_lds(trans[0], trans[1], m, n, k);
    let mut key = LtKey::linear(a, m, n, k);
    key.a_type = a;
    key.b_type = b;
    key.c_type = c;
    key.d_type = d;
    key.compute = compute;
    key.scale = scale;
    key.trans_a = trans[0];
    key.trans_b = trans[1];
    [key.lda, key.ldb, key.ldc, key.ldd] = [lda, ldb, ldc, ldc];
    key.batch = batch;
    if batch != 1 {
        [key.stride_a, key.stride_b, key.stride_c, key.stride_d] = key.packed_strides();
    }
    key.check()?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Trans;

    #[test]
    fn names_read_back_to_what_they_name() {
        for t in [lt::R_16F, lt::R_16BF, lt::R_32F, lt::R_64F] {
            assert_eq!(hip_type(hip_type_name(t).unwrap()), Some(t));
        }
        for c in [
            lt::COMPUTE_32F,
            lt::COMPUTE_32F_FAST_TF32,
            lt::COMPUTE_64F,
            lt::COMPUTE_32F_FAST_16F,
            lt::COMPUTE_32F_FAST_16BF,
        ] {
            assert_eq!(hip_compute(hip_compute_name(c).unwrap()), Some(c));
        }
        assert_eq!(hip_compute("c_f32_r"), Some(lt::COMPUTE_32F));
        assert_eq!(hip_compute("s"), Some(lt::COMPUTE_32F));
        assert_eq!(hip_type("bf16"), None);
        assert_eq!(hip_compute("f32"), None);
    }

    #[test]
    fn a_linear_layer_is_the_same_gemm_through_rocblas() {
        let k = LtKey::linear(lt::R_16BF, 4096, 512, 2560);
        let r = rocblas_key(&k).unwrap();
        let (op, sig) = crate::tunableop::op_and_signature(&r);
        assert_eq!(op, "GemmTunableOp_BFloat16_TN");
        assert_eq!(sig, "tn_4096_512_2560_ld_2560_2560_4096");
        let mut tf32 = LtKey::linear(lt::R_32F, 64, 8, 64);
        tf32.compute = lt::COMPUTE_32F_FAST_TF32;
        assert_eq!(rocblas_key(&tf32), None, "rocBLAS has no TF32 call");
        let p = packed_key(
            [Trans::T, Trans::N],
            [lt::R_16BF; 4],
            lt::COMPUTE_32F,
            4096,
            512,
            2560,
            1,
        )
        .unwrap();
        assert_eq!(p, k);
        assert!(packed_key([Trans::N; 2], [lt::R_16F; 4], lt::COMPUTE_32F, 0, 1, 1, 1).is_err());
    }
}
