use super::names::{checked_packed_strides, pytorch_expressible};
use super::*;
use crate::abi;
use crate::key::{Batching, Trans, Types};
use crate::testing::Rng;
use std::collections::HashSet;
use std::path::Path;

fn fixture(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/vllm-rdna")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const C27E: &str = "rocblas-c27e2252cc7a/tunableop_results0.csv";
const R714_0: &str = "rocm7.14-rocblas5.5/tunableop_results0.csv";
const R714_2: &str = "rocm7.14-rocblas5.5/tunableop_results2.csv";
const F30B_0: &str = "rocblas-f30bb442e9b5/tunableop_results0.csv";

fn half() -> Types {
    Types::uniform(abi::DT_F16_R, abi::DT_F32_R)
}

fn non_blank_lines(text: &str) -> usize {
    text.split('\n').filter(|l| !l.trim().is_empty()).count()
}

fn accounted(f: &ResultsFile) -> usize {
    f.validators.len()
        + f.rows.len()
        + f.wildcards.len()
        + f.unservable.len()
        + f.duplicates.len()
        + f.malformed_lines()
}

#[test]
fn seed_reference_table_c27e() {
    let f = parse(&fixture(C27E));
    assert!(f.malformed.is_empty(), "{:?}", f.malformed);
    assert_eq!(f.rows.len(), 70);
    assert!(f.unservable.is_empty() && f.duplicates.is_empty() && f.wildcards.is_empty());
    let defaults = f
        .rows
        .iter()
        .filter(|r| r.solution == Solution::Default)
        .count();
    assert_eq!(defaults, 16);
    // The seed's (N, K) pairs: rocBLAS m and k of a TN linear layer.
    let pairs: HashSet<(i64, i64)> = f.rows.iter().map(|r| (r.key.m, r.key.k)).collect();
    assert_eq!(pairs.len(), 7);
    assert!(pairs.contains(&(336, 10240)) && pairs.contains(&(10240, 320)));
    let tokens: HashSet<i64> = f.rows.iter().map(|r| r.key.token_count()).collect();
    assert_eq!(tokens.len(), 10);
    assert_eq!(f.validator("ROCBLAS_VERSION"), Some("5.6.0.8d1ae90e"));
    assert_eq!(f.validator("GCN_ARCH_NAME"), Some("gfx1030"));
    assert_eq!(f.validator("NOPE"), None);
    let first = &f.rows[0];
    assert_eq!(first.line, 6);
    assert_eq!(first.solution, Solution::Rocblas(-1086327703));
    assert_eq!(first.time_ms, Some(2.741127332051595));
    let want = ProblemKey::single(
        Trans::T,
        Trans::N,
        half(),
        3584,
        4096,
        2560,
        2560,
        2560,
        3584,
        3584,
        0,
    );
    assert_eq!(first.key, want);
    assert!(f
        .rows
        .iter()
        .all(|r| r.key.is_sane() && check_key(&r.key).is_ok()));
}

#[test]
fn rocm714_ranks_parse_with_gemv_ids() {
    let r0 = parse(&fixture(R714_0));
    let r2 = parse(&fixture(R714_2));
    for f in [&r0, &r2] {
        assert_eq!(f.rows.len(), 1601);
        assert!(f.malformed.is_empty() && f.unservable.is_empty() && f.duplicates.is_empty());
        assert_eq!(f.validator("ROCBLAS_VERSION"), Some("5.5.0.cd957402"));
        let gemv: Vec<&Row> = f
            .rows
            .iter()
            .filter(|r| r.solution == Solution::Rocblas(-9))
            .collect();
        assert_eq!(gemv.len(), 169);
        // rocBLAS 5.x offers -9 (the gemv path) only when m or n is 1.
        assert!(gemv.iter().all(|r| r.key.m == 1 || r.key.n == 1));
    }
    let nn_gemv = ProblemKey::single(Trans::N, Trans::N, half(), 1, 1024, 2560, 1, 2560, 1, 1, 0);
    assert_eq!(
        r0.find(&nn_gemv).map(|r| &r.solution),
        Some(&Solution::Rocblas(-9))
    );
    let defaults = |f: &ResultsFile| {
        f.rows
            .iter()
            .filter(|r| r.solution == Solution::Default)
            .count()
    };
    assert_eq!((defaults(&r0), defaults(&r2)), (0, 3));
    // Same keys on both ranks, in the same order.
    let keys = |f: &ResultsFile| f.rows.iter().map(|r| r.key).collect::<Vec<_>>();
    assert_eq!(keys(&r0), keys(&r2));
    assert!(r0
        .rows
        .iter()
        .zip(&r2.rows)
        .any(|(a, b)| a.solution != b.solution));
}

#[test]
fn f30b_rank0_has_two_strided_float_rows() {
    let f = parse(&fixture(F30B_0));
    assert!(f.malformed.is_empty(), "{:?}", f.malformed);
    assert_eq!(f.rows.len(), 608);
    let strided: Vec<&Row> = f
        .rows
        .iter()
        .filter(|r| r.key.batching == Batching::Strided)
        .collect();
    assert_eq!(strided.len(), 2);
    let tn = strided
        .iter()
        .find(|r| r.key.trans_a == Trans::T)
        .expect("TN row");
    assert_eq!(tn.key.types, Types::SGEMM);
    assert_eq!(
        (tn.key.m, tn.key.n, tn.key.k, tn.key.batch),
        (6272, 6272, 72, 4)
    );
    assert_eq!(
        (tn.key.lda, tn.key.ldb, tn.key.ldc, tn.key.ldd),
        (288, 288, 6272, 6272)
    );
    assert_eq!(
        [
            tn.key.stride_a,
            tn.key.stride_b,
            tn.key.stride_c,
            tn.key.stride_d
        ],
        [288 * 6272, 288 * 6272, 6272 * 6272, 6272 * 6272]
    );
    assert_eq!(tn.solution, Solution::Rocblas(-1086325247));
    let nn = strided
        .iter()
        .find(|r| r.key.trans_a == Trans::N)
        .expect("NN row");
    assert_eq!(nn.solution, Solution::Default);
    // Both write back in the same PyTorch form.
    assert_eq!(
        op_and_signature(&tn.key),
        (
            "GemmStridedBatchedTunableOp_float_TN".to_string(),
            "tn_6272_6272_72_B_4_ld_288_288_6272".to_string()
        )
    );
}

#[test]
fn real_files_round_trip_through_text() {
    for rel in [C27E, R714_0, F30B_0] {
        let text = fixture(rel);
        let f = parse(&text);
        let again = parse(&f.to_text());
        assert_eq!(again.validators, f.validators);
        let strip = |f: &ResultsFile| {
            f.rows
                .iter()
                .map(|r| (r.key, r.solution.clone(), r.time_ms, r.blas_params.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(&again), strip(&f));
        // These files are all PyTorch >= 2.7 rows with plain times: byte-identical.
        assert_eq!(f.to_text(), text, "{rel}");
    }
}

#[test]
fn blas_params_field_keeps_its_commas() {
    let text = "GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Gemm_Rocblas_-1086326047,0.5,BLAS_PARAMS: transa: t, transb: n, m: 8, n: 4\n";
    let f = parse(text);
    assert_eq!(f.rows.len(), 1);
    assert_eq!(
        f.rows[0].blas_params.as_deref(),
        Some("BLAS_PARAMS: transa: t, transb: n, m: 8, n: 4")
    );
    assert_eq!(f.rows[0].solution, Solution::Rocblas(-1086326047));
    assert_eq!(f.to_text(), text);
}

#[test]
fn crlf_blank_lines_and_spaces() {
    let text = "Validator,PT_VERSION,2.6.0\r\n\r\n   \n  GemmTunableOp_float_NN , nn_2_3_4 ,Default, 1.25 \r\n\nGemmTunableOp_Half_NT,nt_5_6_7,Gemm_Rocblas_3\r\n";
    let f = parse(text);
    assert!(f.malformed.is_empty(), "{:?}", f.malformed);
    assert_eq!(f.validator("PT_VERSION"), Some("2.6.0"));
    assert_eq!(f.rows.len(), 2);
    assert_eq!(f.rows[0].line, 4);
    assert_eq!(f.rows[0].time_ms, Some(1.25));
    assert_eq!(f.rows[1].time_ms, None);
    assert_eq!(f.rows[1].line, 6);
    let k = f.rows[1].key;
    assert_eq!(
        (k.trans_a, k.trans_b, k.lda, k.ldb, k.ldc, k.ldd),
        (Trans::N, Trans::T, 5, 6, 5, 5)
    );
}

#[test]
fn duplicates_first_wins_even_across_signature_forms() {
    let text = "\
GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Gemm_Rocblas_-11,0.5
GemmTunableOp_Half_TN,tn_8_4_16,Gemm_Rocblas_-12,0.4
GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Default,0.3
GemmTunableOp_Half_TN,tn_8_4_16_ld_32_16_8,Default,0.3
";
    let f = parse(text);
    assert_eq!(f.rows.len(), 2);
    assert_eq!(f.rows[0].solution, Solution::Rocblas(-11));
    assert_eq!(
        f.duplicates,
        vec![
            Duplicate {
                line: 2,
                first_line: 1
            },
            Duplicate {
                line: 3,
                first_line: 1
            }
        ]
    );
    assert_eq!(f.rows[1].key.lda, 32);
}

#[test]
fn other_backends_and_ops_are_counted_unservable() {
    let text = "\
GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Gemm_Hipblaslt_123,0.5
ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_Half_TN,tn_16_16_16_ld_16_16_16_rw_0_bias_None,Gemm_Hipblaslt_7,0.1
GemmAndBiasTunableOp_BFloat16_TN,tn_16_16_16_ld_16_16_16,Default,0.2
GemmTunableOp_tf32_NN,nn_4_4_4,Default,0.1
SomeFutureOp_Half_TN,tn_1_1_1,Default,0.1
GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Default,0.5
";
    let f = parse(text);
    assert!(f.malformed.is_empty(), "{:?}", f.malformed);
    assert_eq!(f.unservable.len(), 5);
    assert_eq!(f.unservable[0].solution, "Gemm_Hipblaslt_123");
    assert!(f.unservable[1].reason.contains("ScaledGemm"));
    assert!(f.unservable[4].reason.contains("SomeFutureOp_Half_TN"));
    // The hipBLASLt row came first for this key: PyTorch would use it, so no row here.
    assert!(f.rows.is_empty());
    assert_eq!(
        f.duplicates,
        vec![Duplicate {
            line: 6,
            first_line: 1
        }]
    );
    // Written back as read.
    let again = parse(&f.to_text());
    assert_eq!(again.unservable.len(), 5);
    assert_eq!(again.unservable[1].signature, f.unservable[1].signature);
}

#[test]
fn solution_index_overflow_and_garbage_are_malformed() {
    let text = "\
GemmTunableOp_Half_TN,tn_8_4_16,Gemm_Rocblas_-2147483649,0.5
GemmTunableOp_Half_TN,tn_8_4_17,Gemm_Rocblas_99999999999999999999999,0.5
GemmTunableOp_Half_TN,tn_8_4_18,Gemm_Rocblas_12x,0.5
GemmTunableOp_Half_TN,tn_8_4_19,Gemm_Rocblas_-2147483648,0.5
GemmTunableOp_Half_TN,tn_8_4_20,Default,fast
GemmTunableOp_Half_TN,tn_8_4_21,Default,-1
";
    let f = parse(text);
    assert_eq!(f.rows.len(), 1);
    assert_eq!(f.rows[0].solution, Solution::Rocblas(i32::MIN));
    let lines: Vec<usize> = f.malformed.iter().map(|m| m.line).collect();
    assert_eq!(lines, vec![1, 2, 3, 5, 6]);
    assert!(f.malformed[0].reason.contains("32-bit"));
    assert!(f.malformed[1].reason.contains("32-bit"));
    assert!(f.malformed[3].reason.contains("not a number"));
}

#[test]
fn absurd_sizes_are_malformed() {
    let cases = [
        "GemmTunableOp_Half_TN,tn_-8_4_16,Default,1",
        "GemmTunableOp_Half_TN,tn_8_4_16_ld_15_16_8,Default,1",
        "GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_7,Default,1",
        "GemmTunableOp_Half_TN,tn_4611686018427387904_4_4611686018427387904,Default,1",
        "GemmTunableOp_Half_TN,tn_8_4_99999999999999999999,Default,1",
        "GemmTunableOp_Half_TN,nt_8_4_16,Default,1",
        "GemmTunableOp_Half_TN,TN_8_4_16,Default,1",
        "GemmTunableOp_Half_XY,xy_8_4_16,Default,1",
        "GemmTunableOp_Half_TN,tn_8_4_16_B_2,Default,1",
        "GemmStridedBatchedTunableOp_Half_TN,tn_8_4_16,Default,1",
        "GemmTunableOp_Half_TN,tn_8_4,Default,1",
        "GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16,Default,1",
        "GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8_extra,Default,1",
        "GemmTunableOp_Half_TN,tn_8_4_16,,1",
        "GemmTunableOp_Half_TN,tn_8_4_16",
        "Validator,PT_VERSION",
    ];
    for case in cases {
        let f = parse(case);
        assert_eq!(f.malformed.len(), 1, "{case}: {f:?}");
        assert!(f.rows.is_empty(), "{case}");
    }
}

#[test]
fn all_three_signature_forms() {
    let legacy = parse("GemmTunableOp_BFloat16_NT,nt_64_32_16,Default,1\nGemmStridedBatchedTunableOp_double_TT,tt_8_4_16_B_3,Gemm_Rocblas_5,2\n");
    assert!(legacy.malformed.is_empty(), "{:?}", legacy.malformed);
    let k = legacy.rows[0].key;
    assert_eq!(k.types, Types::uniform(abi::DT_BF16_R, abi::DT_F32_R));
    assert_eq!([k.lda, k.ldb, k.ldc, k.ldd], [64, 32, 64, 64]);
    let s = legacy.rows[1].key;
    assert_eq!(s.types, Types::uniform(abi::DT_F64_R, abi::DT_F64_R));
    assert_eq!((s.batching, s.batch), (Batching::Strided, 3));
    assert_eq!([s.lda, s.ldb, s.ldc], [16, 4, 8]);
    assert_eq!(
        [s.stride_a, s.stride_b, s.stride_c, s.stride_d],
        [16 * 8, 4 * 16, 8 * 4, 8 * 4]
    );

    let modern = parse("GemmTunableOp_BFloat16_NT,nt_64_32_16_ld_64_32_64,Default,1\n");
    assert_eq!(modern.rows[0].key, k);

    let wild = parse("GemmTunableOp_Half_TN,tn_2560_*_1536_ld_1536_1536_2560,Gemm_Rocblas_-1086327687,1\nGemmStridedBatchedTunableOp_float_NN,nn_*_*_64_B_*,Default,1\n");
    assert!(wild.malformed.is_empty(), "{:?}", wild.malformed);
    assert!(wild.rows.is_empty());
    assert_eq!(wild.wildcards.len(), 2);
    let w = &wild.wildcards[0];
    assert_eq!(w.tokens[2], "*");
    assert_eq!(w.solution, Solution::Rocblas(-1086327687));
    assert_eq!(
        (w.pattern.m, w.pattern.n, w.pattern.k),
        (Some(2560), None, Some(1536))
    );
    let hit = ProblemKey::single(
        Trans::T,
        Trans::N,
        half(),
        2560,
        1037,
        1536,
        1536,
        1536,
        2560,
        2560,
        0,
    );
    assert!(w.pattern.matches(&hit));
    let mut miss = hit;
    miss.k = 1537;
    assert!(!w.pattern.matches(&miss));
    let sw = &wild.wildcards[1].pattern;
    let strided = ProblemKey::single(Trans::N, Trans::N, Types::SGEMM, 8, 4, 64, 8, 64, 8, 8, 0)
        .with_batch(Batching::Strided, 5, [8 * 64, 64 * 4, 8 * 4, 8 * 4]);
    assert!(sw.matches(&strided));
    assert!(!sw.matches(&strided.with_batch(Batching::Strided, 5, [1, 2, 3, 4])));
    // Wildcard rows are written back as read.
    assert_eq!(parse(&wild.to_text()).wildcards, wild.wildcards);
}

/// PyTorch's rule for `*` rows (`LookupWildcardFallback`): under the row's op name, the
/// call's concrete signature must match token by token. A call whose D is laid out apart
/// from C (`ldd != ldc`) has no PyTorch signature at all (it is an extension row), so no
/// PyTorch-named pattern may match it, even one whose ldc is `*`; an extension pattern
/// with `*` for ldd does.
#[test]
fn pytorch_patterns_match_only_what_pytorch_can_name() {
    let p = parse("GemmTunableOp_Half_NN,nn_*_64_32_ld_*_32_*,Default,1\n");
    let w = &p.wildcards[0].pattern;
    let key = |ldc: i64, ldd: i64| {
        ProblemKey::single(
            Trans::N,
            Trans::N,
            half(),
            100,
            64,
            32,
            100,
            32,
            ldc,
            ldd,
            0,
        )
    };
    assert!(w.matches(&key(100, 100)));
    assert!(w.matches(&key(128, 128)), "ldc is `*`");
    assert!(
        !w.matches(&key(100, 128)),
        "ldd != ldc is not a GemmTunableOp call"
    );
    let ext = parse(
        "TunedblasGemm_Single_f16_f16_f16_f16_f32_NN,nn_*_64_32_ld_*_32_*_*_fl_0x0,Default,1\n",
    );
    assert!(ext.wildcards[0].pattern.matches(&key(100, 128)));
}

/// The name of `key`, checked to read back as `key`.
fn name_of(key: &ProblemKey) -> (String, String) {
    let (op, sig) = op_and_signature(key);
    assert_eq!(parse_key(&op, &sig), KeyParse::Key(*key), "{op},{sig}");
    (op, sig)
}

#[test]
fn extension_rows_for_what_pytorch_cannot_name() {
    let hgemm =
        ProblemKey::linear(Types::HGEMM, 4096, 512, 4096).with_flags(abi::FLAG_FP16_ALT_IMPL);
    let (op, sig) = name_of(&hgemm);
    assert_eq!(op, "TunedblasGemm_Single_f16_f16_f16_f16_f16_TN");
    assert_eq!(sig, "tn_4096_512_4096_ld_4096_4096_4096_4096_fl_0x4");

    let (n, c, complex) = (
        Trans::N,
        Trans::C,
        Types::uniform(abi::DT_F32_C, abi::DT_F32_C),
    );
    let ptr = ProblemKey::single(n, c, complex, 8, 9, 10, 8, 9, 8, 16, 0).with_batch(
        Batching::PointerArray,
        7,
        [0; 4],
    );
    let (op, sig) = name_of(&ptr);
    assert_eq!(op, "TunedblasGemm_PtrArray_f32c_f32c_f32c_f32c_f32c_NC");
    assert_eq!(sig, "nc_8_9_10_B_7_ld_8_9_8_16_fl_0x0");

    let mut mixed = ProblemKey::single(Trans::N, Trans::N, half(), 8, 8, 8, 8, 8, 8, 8, 0)
        .with_batch(Batching::Strided, 2, [100, 100, 64, 64]);
    mixed.types.c = abi::DT_F32_R;
    mixed.types.a = 170; // an f8 type the abi module has no name for
    let (op, sig) = name_of(&mixed);
    assert_eq!(op, "TunedblasGemm_Strided_dt170_f16_f32_f16_f32_NN");
    assert_eq!(sig, "nn_8_8_8_B_2_ld_8_8_8_8_st_100_100_64_64_fl_0x0");

    // Decimal flags are read too; non-kernel flag bits and bad names are not.
    assert_eq!(
        parse_key(
            &op_and_signature(&hgemm).0,
            "tn_4096_512_4096_ld_4096_4096_4096_4096_fl_4"
        ),
        KeyParse::Key(hgemm)
    );
    let single = "TunedblasGemm_Single_f16_f16_f16_f16_f16_TN";
    for (op, sig) in [
        (single, "tn_1_1_1_ld_1_1_1_1_fl_0x8"),
        (
            "TunedblasGemm_Single_f16_f16_f16_f16_f17_TN",
            "tn_1_1_1_ld_1_1_1_1_fl_0",
        ),
        (
            "TunedblasGemm_Batched_f16_f16_f16_f16_f16_TN",
            "tn_1_1_1_ld_1_1_1_1_fl_0",
        ),
        (single, "tn_1_1_1_ld_1_1_1_1"),
        (single, "tn_1_1_1_B_2_ld_1_1_1_1_fl_0"),
    ] {
        assert!(
            matches!(parse_key(op, sig), KeyParse::Invalid(_)),
            "{op},{sig}"
        );
    }

    // A file mixing both forms round-trips, and PyTorch-form keys stay PyTorch-form.
    let plain = ProblemKey::single(Trans::T, Trans::N, half(), 64, 32, 16, 16, 16, 64, 64, 0);
    let mut f = ResultsFile::default();
    f.set_validator("ROCBLAS_VERSION", "5.6.0.8d1ae90e");
    f.rows
        .push(Row::new(hgemm, Solution::Rocblas(-1086327687), Some(0.61)));
    f.rows
        .push(Row::new(plain, Solution::Default, Some(1.0 / 3.0)));
    f.rows.push(Row::new(ptr, Solution::Rocblas(-2), None));
    let text = f.to_text();
    assert!(text
        .contains("\nGemmTunableOp_Half_TN,tn_64_32_16_ld_16_16_64,Default,0.3333333333333333\n"));
    let again = parse(&text);
    assert_eq!(again.rows.len(), 3);
    for (a, b) in again.rows.iter().zip(&f.rows) {
        assert_eq!(
            (a.key, &a.solution, a.time_ms),
            (b.key, &b.solution, b.time_ms)
        );
    }
    assert_eq!(again.validators, f.validators);
}

fn random_key(rng: &mut Rng) -> ProblemKey {
    let types = rng.pick(&[
        half(),
        Types::uniform(abi::DT_BF16_R, abi::DT_F32_R),
        Types::SGEMM,
        Types::uniform(abi::DT_F64_R, abi::DT_F64_R),
        Types::HGEMM,
        Types {
            c: abi::DT_F32_R,
            ..half()
        },
        Types::uniform(abi::DT_F64_C, abi::DT_F64_C),
        Types::uniform(abi::DT_I8_R, abi::DT_I32_R),
        Types::uniform(171, abi::DT_F32_R),
    ]);
    let trans = [Trans::N, Trans::T, Trans::N, Trans::T, Trans::C];
    let (ta, tb) = (rng.pick(&trans), rng.pick(&trans));
    let dim = |rng: &mut Rng| {
        if rng.below(20) == 0 {
            rng.below(2) as i64
        } else {
            1 + rng.below(20000) as i64
        }
    };
    let (m, n, k) = (dim(rng), dim(rng), dim(rng));
    let [pa, pb, pc] = ProblemKey::packed_lds(ta, tb, m, n, k);
    let pad = |rng: &mut Rng, v: i64| {
        if rng.below(3) == 0 {
            v + rng.below(64) as i64
        } else {
            v
        }
    };
    let (lda, ldb, ldc) = (pad(rng, pa), pad(rng, pb), pad(rng, pc));
    let ldd = if rng.below(4) == 0 {
        pad(rng, ldc)
    } else {
        ldc
    };
    let flags = if rng.below(3) == 0 {
        rng.next() as u32
    } else {
        0
    };
    let key = ProblemKey::single(ta, tb, types, m, n, k, lda, ldb, ldc, ldd, flags);
    match rng.below(3) {
        0 => key,
        1 => {
            let batch = rng.below(40) as i64;
            let packed = checked_packed_strides(&key).unwrap();
            let strides = if rng.below(2) == 0 {
                packed
            } else {
                packed.map(|s| s + rng.below(100) as i64)
            };
            key.with_batch(Batching::Strided, batch, strides)
        }
        _ => key.with_batch(Batching::PointerArray, rng.below(40) as i64, [0; 4]),
    }
}

/// `pack_int8x4` (0x1) is a kernel flag: an int8 row for packed inputs keeps it in its
/// `_fl_` field and reads back as that problem, not the unpacked one.
#[test]
fn packed_int8_rows_keep_their_flag() {
    let packed = ProblemKey::linear(Types::INT8, 64, 32, 64).with_flags(abi::FLAG_PACK_INT8X4);
    let (op, sig) = name_of(&packed);
    assert_eq!(op, "TunedblasGemm_Single_i8_i8_i32_i32_i32_TN");
    assert!(sig.ends_with("_fl_0x1"), "{sig}");
    let plain = packed.with_flags(0);
    assert_ne!(op_and_signature(&plain), (op, sig));
}

#[test]
fn every_valid_key_round_trips_through_its_name() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut pytorch, mut ext) = (0, 0);
    for _ in 0..20000 {
        let key = random_key(&mut rng);
        assert_eq!(check_key(&key), Ok(()), "{key:?}");
        let (op, sig) = op_and_signature(&key);
        assert_eq!(parse_key(&op, &sig), KeyParse::Key(key), "{op},{sig}");
        assert!(!op.contains(',') && !sig.contains(','));
        if op.starts_with(EXT_OP_PREFIX) {
            ext += 1;
            assert!(pytorch_expressible(&key).is_none());
        } else {
            pytorch += 1;
            assert!(sig.contains("_ld_"));
        }
    }
    assert!(pytorch > 1000 && ext > 1000, "{pytorch} {ext}");
}

#[test]
fn mutated_real_files_never_panic_and_every_line_is_accounted_for() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let sources: Vec<Vec<u8>> = [C27E, F30B_0]
        .iter()
        .map(|r| fixture(r).into_bytes())
        .collect();
    let noise = b",,_*-\r\n0x9 .eE+\xff\xc3";
    for round in 0..600 {
        let mut bytes = sources[round % sources.len()].clone();
        for _ in 0..1 + rng.below(20) {
            let at = rng.below(bytes.len() as u64 + 1) as usize;
            match rng.below(4) {
                0 => bytes.truncate(at),
                1 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
                2 => bytes.insert(at.min(bytes.len()), rng.pick(noise)),
                _ if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => {}
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        let f = parse(&text);
        assert_eq!(accounted(&f), non_blank_lines(&text), "round {round}");
        for row in &f.rows {
            assert_eq!(check_key(&row.key), Ok(()));
            assert!(row.solution.is_servable());
        }
        // What parses writes back and parses to the same rows.
        let again = parse(&f.to_text());
        assert_eq!(
            again.rows.iter().map(|r| r.key).collect::<Vec<_>>(),
            f.rows.iter().map(|r| r.key).collect::<Vec<_>>()
        );
    }
}

#[test]
fn a_byte_order_mark_is_dropped() {
    let text = "GemmTunableOp_Half_TN,tn_8_4_16,Default,1\nValidator,PT_VERSION,2.7.0\n";
    let plain = parse(text);
    assert_eq!(plain.rows.len(), 1);
    let bom = parse(&format!("\u{feff}{text}"));
    assert_eq!(bom, plain, "the first row is read as a row");
    let v = parse("\u{feff}Validator,PT_VERSION,2.7.0\n");
    assert_eq!(v.validator("PT_VERSION"), Some("2.7.0"));
    // Only at the very start: elsewhere it is part of the line (an unknown op name).
    let inner = parse(&format!("{text}\u{feff}{text}"));
    assert_eq!(inner.rows.len(), 1);
    assert_eq!(inner.unservable.len(), 1);
    assert!(inner.unservable[0].op_name.starts_with('\u{feff}'));
}

#[test]
fn invalid_utf8_is_read_lossily() {
    let dir = std::env::temp_dir().join(format!("tunedblas-tunableop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tunableop_results0.csv");
    let mut bytes = b"Validator,GCN_ARCH_NAME,gfx\xff1030\n".to_vec();
    bytes.extend_from_slice(b"GemmTunableOp_Half_TN,tn_8_4_16,Default,1\n");
    std::fs::write(&path, &bytes).unwrap();
    let f = read(&path).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(f.rows.len(), 1);
    assert_eq!(f.validator("GCN_ARCH_NAME"), Some("gfx\u{fffd}1030"));
    assert!(read(&dir.join("absent.csv")).is_err());
}

#[test]
fn every_kind_of_file_is_cut_into_lines_the_same_way() {
    let got: Vec<Line> = lines("\u{feff}a,b\r\n\n  \nc,d\ne").collect();
    let line = |number, text, last| Line { number, text, last };
    assert_eq!(
        got,
        [
            line(1, "a,b", false),
            line(4, "c,d", false),
            line(5, "e", true)
        ]
    );
    // A file that ends with a newline has no unended last line.
    assert!(lines("x\ny\n").all(|l| !l.last));
    assert_eq!(lines("").count(), 0);
}

#[test]
fn default_inf_and_zero_times_are_read_as_pytorch_writes_them() {
    // PyTorch writes `inf` for a solution it did not time and reads it back; TunableOp on
    // CUDA writes `Default,0`-style rows. Neither is a malformed line.
    let text = "\
Validator,ROCBLAS_VERSION,4.4.0.5f2e9c71
GemmTunableOp_Half_TN,tn_8_4_16_ld_16_16_8,Default,inf
GemmTunableOp_Half_TN,tn_8_8_16_ld_16_16_8,Default,0
GemmTunableOp_BFloat16_TN,tn_10240_512_2560_ld_2560_2560_10240,Default,0.0
GemmTunableOp_Half_TN,tn_16_8_16_ld_16_16_16,Gemm_Rocblas_7,inf
GemmTunableOp_Half_TN,tn_32_8_16_ld_16_16_32,Default,-inf
GemmTunableOp_Half_TN,tn_64_8_16_ld_16_16_64,Default,nan
";
    let f = parse(text);
    assert_eq!(f.rows.len(), 4, "{:?}", f.malformed);
    assert_eq!(f.rows[0].solution, Solution::Default);
    assert_eq!(f.rows[0].time_ms, Some(f64::INFINITY));
    assert_eq!(f.rows[1].time_ms, Some(0.0));
    assert_eq!(f.rows[2].time_ms, Some(0.0));
    assert_eq!(f.rows[3].solution, Solution::Rocblas(7));
    // A negative or NaN time still makes no sense.
    let bad: Vec<usize> = f.malformed.iter().map(|m| m.line).collect();
    assert_eq!(bad, vec![6, 7]);
    // Written back the way PyTorch reads it.
    let out = f.to_text();
    assert!(out.contains("tn_8_4_16_ld_16_16_8,Default,inf\n"), "{out}");
    let again: Vec<_> = parse(&out)
        .rows
        .into_iter()
        .map(|r| (r.key, r.solution, r.time_ms))
        .collect();
    let first: Vec<_> = f
        .rows
        .iter()
        .map(|r| (r.key, r.solution.clone(), r.time_ms))
        .collect();
    assert_eq!(again, first);
}

/// A file of junk lines keeps the first MALFORMED_KEPT with their reasons and counts the
/// rest, every line still accounted for: memory no longer grows with the junk.
#[test]
fn junk_lines_past_the_kept_ones_are_counted_not_kept() {
    let n = MALFORMED_KEPT + 500;
    let mut text = String::from("Validator,PT_VERSION,2.7.0\n");
    for _ in 0..n {
        text.push_str("x\n");
    }
    let f = parse(&text);
    assert_eq!(f.malformed.len(), MALFORMED_KEPT);
    assert_eq!(f.malformed_more, 500);
    assert_eq!(f.malformed_lines(), n);
    assert_eq!(accounted(&f), non_blank_lines(&text));
}
