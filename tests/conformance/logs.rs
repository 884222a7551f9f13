//! Golden log files in the real formats of rocBLAS 2.47 (ROCm 5.5) and 4.4 (ROCm 6.4), as
//! their logging code writes them (tests/fixtures/rocblas-logs/SOURCE.md says from where):
//! every line is read as the problem it logs, or skipped with a reason. These need no root.

use tunedblas_core::abi;
use tunedblas_core::formats::{self, Format, Parsed};
use tunedblas_core::key::{Batching, ProblemKey, Trans, Types};

use crate::suite::repo;

fn read(name: &str) -> (Format, Parsed) {
    let path = repo().join("tests/fixtures/rocblas-logs").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let format = formats::detect(&text);
    let parsed = formats::parse(format, &text).expect("a log format");
    (format, parsed)
}

const T: Trans = Trans::T;
const N: Trans = Trans::N;

/// A packed `F.linear` of the logs.
fn linear(flags: u32) -> ProblemKey {
    ProblemKey::linear(Types::HALF, 4096, 512, 2560).with_flags(flags)
}

/// The bf16 linear layer of the 4.4 logs, run with fp16_alt_impl_round.
fn bf16_rnz() -> ProblemKey {
    let bf16 = Types::uniform(abi::DT_BF16_R, abi::DT_F32_R);
    ProblemKey::linear(bf16, 1024, 16, 1024).with_flags(abi::FLAG_FP16_ALT_IMPL_RNZ)
}

fn int8(flags: u32) -> ProblemKey {
    let t = Types::INT8;
    ProblemKey::single(N, N, t, 256, 128, 512, 256, 512, 256, 256, flags)
}

fn batched() -> ProblemKey {
    ProblemKey::single(N, N, Types::HALF, 64, 32, 128, 64, 128, 64, 64, 0).with_batch(
        Batching::PointerArray,
        8,
        [0; 4],
    )
}

fn strided() -> ProblemKey {
    ProblemKey::single(N, T, Types::HALF, 64, 32, 16, 64, 32, 64, 64, 0).with_batch(
        Batching::Strided,
        16,
        [1024, 512, 2048, 2048],
    )
}

fn hgemm() -> ProblemKey {
    ProblemKey::single(N, N, Types::HGEMM, 128, 7, 64, 128, 64, 128, 128, 0)
}

fn sgemm() -> ProblemKey {
    ProblemKey::single(T, N, Types::SGEMM, 96, 40, 32, 32, 32, 96, 96, 0)
}

fn typed_strided(types: Types) -> ProblemKey {
    ProblemKey::single(T, N, types, 16, 16, 16, 16, 16, 16, 16, 0).with_batch(
        Batching::Strided,
        2,
        [256, 256, 256, 256],
    )
}

fn check(name: &str, format: Format, want: &[(ProblemKey, u64)], skipped: &[&str]) -> Parsed {
    let (got_format, p) = read(name);
    assert_eq!(got_format, format, "{name}");
    let got: Vec<(ProblemKey, u64)> = p.entries.iter().map(|e| (e.key, e.calls)).collect();
    for (i, w) in want.iter().enumerate() {
        assert_eq!(
            got.get(i),
            Some(w),
            "{name}: entry {i}; all: {got:#?}; skipped {:?}",
            p.skipped
        );
    }
    assert_eq!(got.len(), want.len(), "{name}: {got:#?}");
    let reasons: Vec<&str> = p.skipped.iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(reasons.len(), skipped.len(), "{name}: skipped {reasons:?}");
    for (r, w) in reasons.iter().zip(skipped) {
        assert!(r.contains(w), "{name}: skipped for {r:?}, expected {w:?}");
    }
    p
}

/// rocBLAS 2.47: `gemm_batched_ex` lines with a valueless `--ldc` are read (ldc = ldd), and
/// flag 0x1 (pack_int8x4) stays in the key.
#[test]
fn rocblas_2_47_bench_log() {
    let bx2 = ProblemKey::linear(Types::uniform(abi::DT_BF16_R, abi::DT_F32_R), 128, 7, 64)
        .with_batch(Batching::PointerArray, 2, [0; 4]);
    check(
        "rocblas-2.47-bench.log",
        Format::Bench,
        &[
            (linear(0), 2),
            (linear(abi::FLAG_FP16_ALT_IMPL), 1),
            (int8(abi::FLAG_PACK_INT8X4), 1),
            (batched(), 1),
            (bx2, 1),
            (strided(), 1),
            (hgemm(), 1),
            (sgemm(), 1),
            (typed_strided(Types::SGEMM), 1),
        ],
        &["rocblas_hgemm", "-f axpy"],
    );
}

/// rocBLAS 2.47's profile log names flag 0x1 `pack_int`.
#[test]
fn rocblas_2_47_profile_log() {
    check(
        "rocblas-2.47-profile.yaml",
        Format::ProfileLog,
        &[
            (linear(0), 40),
            (linear(abi::FLAG_FP16_ALT_IMPL), 3),
            (int8(abi::FLAG_PACK_INT8X4), 12),
            (int8(0), 5),
            (batched(), 6),
            (strided(), 9),
            (hgemm(), 2),
            (typed_strided(Types::SGEMM), 4),
        ],
        &["invalid"],
    );
}

#[test]
fn rocblas_4_4_bench_log() {
    let p = check(
        "rocblas-4.4-bench.log",
        Format::Bench,
        &[
            (linear(0), 3),
            (bf16_rnz(), 1),
            (batched(), 1),
            (strided(), 1),
            (hgemm(), 1),
            (sgemm(), 1),
            (typed_strided(Types::HGEMM), 1),
        ],
        &["-f gemmt"],
    );
    assert_eq!(
        p.entries[0].solution,
        Some(2471),
        "the --algo 1 line's solution"
    );
}

/// rocBLAS 4.4 names 0x10 `fp16_alt_impl_round`; a combination of flags is logged as
/// `invalid` and skipped with the advice to use a bench log.
#[test]
fn rocblas_4_4_profile_log() {
    let mut sgemm_b1 = sgemm();
    sgemm_b1.flags = 0;
    check(
        "rocblas-4.4-profile.yaml",
        Format::ProfileLog,
        &[
            (linear(0), 42),
            (bf16_rnz(), 7),
            (batched(), 6),
            (strided(), 9),
            (hgemm(), 2),
            (sgemm_b1, 11),
        ],
        &["ROCBLAS_LAYER=2"],
    );
}
