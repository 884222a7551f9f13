//! Reliability, parsers: property tests over every reader of outside data. Arbitrary
//! bytes and structured nonsense never panic and always give rows or errors, and what is
//! read writes back and reads to the same thing. A small seeded generator keeps every run
//! the same (a failure prints its seed and case).
//!
//! Readers: TunableOp results files and their (op name, signature) pairs, solutions, the
//! registry (`profiles.json`) and `provenance.json`, miss logs and counts files, and
//! `/proc/self/maps` lines; plus the key built from absurd rocBLAS call arguments.

use std::path::PathBuf;

use serde_json::{Map, Value};
use tunedblas_core::abi::{self, KERNEL_FLAGS};
use tunedblas_core::identity;
use tunedblas_core::key::{Batching, ProblemKey, Trans, Types};
use tunedblas_core::misses::file as miss_file;
use tunedblas_core::registry::{Provenance, Registry};
use tunedblas_core::rocblas::{batched_key, single_key, Dims};
use tunedblas_core::table::Action;
use tunedblas_core::tunableop::{self, KeyParse, Solution};

/// xorshift64*: small, seeded, good enough to explore inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// A size: mostly small, sometimes at the edges of i64.
    fn size(&mut self) -> i64 {
        match self.below(10) {
            0 => *self.pick(&[i64::MAX, i64::MIN, i64::MAX / 2, 1 << 40, 1 << 62, -1, 0]),
            1 => self.next() as i64,
            _ => self.below(5000) as i64,
        }
    }
}

const TOKENS: &[&str] = &[
    "GemmTunableOp_Half_TN",
    "GemmTunableOp_BFloat16_NT",
    "GemmTunableOp_float_NN",
    "GemmTunableOp_double_TT",
    "GemmTunableOp_tf32_NN",
    "GemmStridedBatchedTunableOp_Half_TN",
    "GemmAndBiasTunableOp_Half_TN",
    "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_Half_TN",
    "TunedblasGemm_Strided_f16_f16_f16_f16_f32_TN",
    "TunedblasGemm_PtrArray_bf16_bf16_bf16_bf16_f32_CN",
    "TunedblasGemm_Single_dt170_f16_f16_f16_f16_NN",
    "Validator",
    "PT_VERSION",
    "ROCBLAS_VERSION",
    "tn",
    "nt",
    "nn",
    "cc",
    "_",
    "_",
    "_",
    ",",
    ",",
    ",",
    "ld",
    "B",
    "st",
    "fl",
    "0x4",
    "0x10",
    "*",
    "-",
    "Default",
    "Gemm_Rocblas_",
    "Gemm_Hipblaslt_",
    "\n",
    "\n",
    "\r\n",
    " ",
    "BLAS_PARAMS: m=1, n=2",
    "op_name,param_signature,calls",
    "99999999999999999999",
    "9223372036854775807",
    "-1086326047",
    "0.0374",
    "NaN",
    "inf",
    "\u{fffd}",
    "é",
];

/// Text that is mostly plausible tokens and digits, with raw bytes mixed in.
fn soup(rng: &mut Rng, max_len: u64) -> String {
    let mut bytes = Vec::new();
    let len = rng.below(max_len);
    while (bytes.len() as u64) < len {
        match rng.below(10) {
            0 => bytes.push(rng.next() as u8),
            1..=3 => bytes.extend(rng.below(100000).to_string().into_bytes()),
            _ => bytes.extend(rng.pick(TOKENS).as_bytes()),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn non_blank_lines(text: &str) -> usize {
    text.split('\n').filter(|l| !l.trim().is_empty()).count()
}

fn each_case(seed: u64, cases: u64, mut f: impl FnMut(u64, &mut Rng)) {
    let mut rng = Rng(seed);
    for case in 0..cases {
        let state = rng.0;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(case, &mut rng)));
        if let Err(e) = result {
            let what = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("seed {seed:#x}, case {case} (generator state {state:#x}): {what}");
        }
    }
}

#[test]
fn tunableop_results_files_never_panic_and_account_for_every_line() {
    let (mut rows, mut malformed) = (0, 0);
    each_case(0x5eed_0001, 3000, |_, rng| {
        let mut text = soup(rng, 600);
        if rng.chance(50) {
            // Some real rows among the noise, so the round trip has something to carry.
            for _ in 0..rng.below(6) {
                let (op, sig) = tunableop::op_and_signature(&random_key(rng));
                text.push_str(&format!(
                    "\n{op},{sig},Gemm_Rocblas_{},0.5\n",
                    rng.next() as i32
                ));
            }
        }
        let f = tunableop::parse(&text);
        rows += f.rows.len();
        malformed += f.malformed.len();
        let accounted = f.validators.len()
            + f.rows.len()
            + f.unservable.len()
            + f.duplicates.len()
            + f.malformed.len()
            + f.wildcards.len();
        assert_eq!(accounted, non_blank_lines(&text), "{text:?}");
        for r in &f.rows {
            assert_eq!(tunableop::check_key(&r.key), Ok(()), "{text:?}");
        }
        // What was read writes back and reads to the same rows.
        let again = tunableop::parse(&f.to_text());
        let keys = |f: &tunableop::ResultsFile| {
            f.rows
                .iter()
                .map(|r| (r.key, r.solution.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&again), keys(&f), "{text:?}");
    });
    assert!(
        rows > 1000 && malformed > 1000,
        "the generator explores both: {rows} rows, {malformed} malformed"
    );
}

#[test]
fn the_interposers_loader_reads_what_parse_reads() {
    // profile::load_tables reads a rank file a line at a time straight into the lookup
    // table; tunableop::parse reads the whole text. Same bytes, same rows in the same
    // order, one problem line per malformed or duplicate line, with or without a BOM.
    let dir = std::env::temp_dir().join(format!("tunedblas-parsers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tunableop_results0.csv");
    let mut served = 0;
    each_case(0x5eed_0011, 1500, |_, rng| {
        let mut text = if rng.chance(30) {
            String::from("\u{feff}")
        } else {
            String::new()
        };
        text.push_str(&soup(rng, 400));
        for _ in 0..rng.below(8) {
            let (op, sig) = tunableop::op_and_signature(&random_key(rng));
            let sol = if rng.chance(20) {
                "Default".to_string()
            } else {
                format!("Gemm_Rocblas_{}", rng.next() as i32)
            };
            let line = format!("{op},{sig},{sol},0.5\n");
            text.push_str(&line);
            if rng.chance(20) {
                text.push_str(&line);
            }
        }
        std::fs::write(&path, &text).unwrap();
        let f = tunableop::parse(&text);
        let loaded = tunedblas_core::profile::load_tables(&dir);
        let want: Vec<_> = f
            .rows
            .iter()
            .map(|r| (r.key, Action::of(&r.solution).unwrap_or(Action::Default)))
            .collect();
        let got: Vec<_> = match loaded.tables.first().and_then(|t| t.as_deref()) {
            Some(t) => t.iter().map(|(k, e)| (*k, e.action)).collect(),
            None => Vec::new(),
        };
        assert_eq!(got, want, "{text:?}");
        assert_eq!(
            loaded.problems.len(),
            f.malformed.len() + f.duplicates.len(),
            "{text:?}"
        );
        served += got.len();
    });
    std::fs::remove_dir_all(&dir).ok();
    assert!(served > 1000, "the generator makes rows: {served}");
}

#[test]
fn op_names_signatures_and_solutions_never_panic() {
    each_case(0x5eed_0002, 5000, |_, rng| {
        let (op, sig) = if rng.chance(30) {
            // A real name with a few bytes changed.
            let (op, sig) = tunableop::op_and_signature(&random_key(rng));
            let mut sig = sig.into_bytes();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(sig.len() as u64) as usize;
                sig[at] = *rng.pick(b"0123456789_*-xB");
            }
            (op, String::from_utf8_lossy(&sig).into_owned())
        } else {
            (
                soup(rng, 60).replace([',', '\n'], ""),
                soup(rng, 60).replace([',', '\n'], ""),
            )
        };
        match tunableop::parse_key(op.trim(), sig.trim()) {
            KeyParse::Key(key) => {
                assert_eq!(tunableop::check_key(&key), Ok(()));
                let (op2, sig2) = tunableop::op_and_signature(&key);
                assert_eq!(tunableop::parse_key(&op2, &sig2), KeyParse::Key(key));
            }
            KeyParse::Invalid(reason) => assert!(!reason.is_empty()),
            KeyParse::Unservable | KeyParse::Wildcard(_) => {}
        }
        let _ = Solution::parse(&sig);
        let _ = identity::parse_maps_line(&soup(rng, 120));
    });
}

fn random_key(rng: &mut Rng) -> ProblemKey {
    let trans = [Trans::N, Trans::T, Trans::C];
    let dts = [
        abi::DT_F16_R,
        abi::DT_F32_R,
        abi::DT_F64_R,
        abi::DT_BF16_R,
        abi::DT_F32_C,
        abi::DT_I8_R,
        170,
    ];
    let types = if rng.chance(50) {
        Types::uniform(*rng.pick(&dts), *rng.pick(&dts))
    } else {
        Types {
            a: *rng.pick(&dts),
            b: *rng.pick(&dts),
            c: *rng.pick(&dts),
            d: *rng.pick(&dts),
            compute: *rng.pick(&dts),
        }
    };
    let (ta, tb) = (*rng.pick(&trans), *rng.pick(&trans));
    let dim = |rng: &mut Rng| {
        if rng.chance(5) {
            1 << rng.below(40)
        } else {
            1 + rng.below(5000) as i64
        }
    };
    let (m, n, k) = (dim(rng), dim(rng), dim(rng));
    let [lda, ldb, ldc] = ProblemKey::packed_lds(ta, tb, m, n, k);
    let pad = |rng: &mut Rng| {
        if rng.chance(30) {
            rng.below(64) as i64
        } else {
            0
        }
    };
    let ldc = ldc + pad(rng);
    let ldd = if rng.chance(20) { ldc + pad(rng) } else { ldc };
    let flags = rng.next() as u32 & KERNEL_FLAGS;
    let key = ProblemKey::single(
        ta,
        tb,
        types,
        m,
        n,
        k,
        lda + pad(rng),
        ldb + pad(rng),
        ldc,
        ldd,
        flags,
    );
    match rng.below(3) {
        0 => key,
        1 => {
            // ProblemKey::packed_strides without its overflow panic (sizes here reach 2^40).
            let cols_a = if ta == Trans::N { k } else { m };
            let cols_b = if tb == Trans::N { n } else { k };
            let packed = [
                key.lda.saturating_mul(cols_a),
                key.ldb.saturating_mul(cols_b),
                key.ldc.saturating_mul(n),
                key.ldd.saturating_mul(n),
            ];
            let strides = if rng.chance(50) {
                packed
            } else {
                packed.map(|s| s.saturating_add(rng.below(100) as i64))
            };
            key.with_batch(Batching::Strided, 1 + rng.below(64) as i64, strides)
        }
        _ => key.with_batch(Batching::PointerArray, 1 + rng.below(64) as i64, [0; 4]),
    }
}

#[test]
fn every_valid_key_round_trips_through_its_row_and_its_miss_line() {
    each_case(0x5eed_0003, 4000, |_, rng| {
        let key = random_key(rng);
        if tunableop::check_key(&key).is_err() {
            return;
        }
        let (op, sig) = tunableop::op_and_signature(&key);
        assert_eq!(
            tunableop::parse_key(&op, &sig),
            KeyParse::Key(key),
            "{op},{sig}"
        );
        let log = miss_file::parse(&format!("{op},{sig}\n{op},{sig},41\n"));
        assert_eq!(log.malformed, vec![]);
        assert_eq!(log.misses.len(), 1);
        assert_eq!((log.misses[0].key, log.misses[0].calls), (key, Some(41)));
    });
}

#[test]
fn keys_from_absurd_call_arguments_never_panic() {
    let ops = [
        abi::OP_NONE,
        abi::OP_TRANSPOSE,
        abi::OP_CONJUGATE_TRANSPOSE,
        0,
        -1,
        999,
    ];
    each_case(0x5eed_0004, 20000, |_, rng| {
        let dims = Dims {
            m: rng.size(),
            n: rng.size(),
            k: rng.size(),
            lda: rng.size(),
            ldb: rng.size(),
            ldc: rng.size(),
            ldd: rng.size(),
        };
        let types = Types::uniform(abi::DT_F16_R, abi::DT_F32_R);
        let (ta, tb) = (*rng.pick(&ops), *rng.pick(&ops));
        let flags = rng.next() as u32;
        let strides = [rng.size(), rng.size(), rng.size(), rng.size()];
        let batching = *rng.pick(&[Batching::Strided, Batching::PointerArray]);
        for key in [
            single_key(ta, tb, types, dims, flags),
            batched_key(ta, tb, types, dims, batching, rng.size(), strides, flags),
        ]
        .into_iter()
        .flatten()
        {
            // What the interposer would log: formatting never panics, and a key it would
            // record (one `check_key` accepts) reads back as itself.
            let (op, sig) = tunableop::op_and_signature(&key);
            if tunableop::check_key(&key).is_ok() {
                assert_eq!(tunableop::parse_key(&op, &sig), KeyParse::Key(key));
            }
        }
    });
}

#[test]
fn miss_logs_never_panic() {
    each_case(0x5eed_0005, 3000, |_, rng| {
        let text = soup(rng, 500);
        let log = miss_file::parse(&text);
        let lines = text.split('\n').count();
        for m in &log.misses {
            assert_eq!(tunableop::check_key(&m.key), Ok(()));
            assert!(m.line >= 1 && m.line <= lines);
        }
        for p in &log.malformed {
            assert!(p.line >= 1 && p.line <= lines && !p.reason.is_empty());
        }
    });
}

/// A random JSON value shaped somewhat like a registry or provenance file.
fn json(rng: &mut Rng, depth: u32) -> Value {
    let keys = [
        "profiles",
        "dir",
        "lib_sha256",
        "$comment",
        "rocblas",
        "rows_per_rank",
        "covers",
        "arch",
        "status",
        "campaigns",
        "sha256",
        "profile",
        "x",
        "../up",
        "",
    ];
    let strings = [
        "rocm7.14-rocblas5.5",
        "../elsewhere",
        "/etc",
        "a/b",
        ".",
        "",
        "c27e2252cc7a",
        "c27e2252cc7a4b6e174601a180a169822dcf15a29e634046daecb61498e3bd2a",
        "C27E2252CC7Ag",
        "gfx1030",
        "\u{0}",
        "é\n",
    ];
    match if depth == 0 {
        rng.below(5)
    } else {
        rng.below(8)
    } {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => match rng.below(3) {
            0 => Value::from(rng.next() as i64),
            1 => Value::from(rng.below(200)),
            _ => Value::from(rng.next() as f64 / 3.0),
        },
        3 | 4 => Value::from(*rng.pick(&strings)),
        5 => Value::Array((0..rng.below(4)).map(|_| json(rng, depth - 1)).collect()),
        _ => {
            let mut m = Map::new();
            for _ in 0..rng.below(5) {
                let k = if rng.chance(20) {
                    soup(rng, 12)
                } else {
                    rng.pick(&keys).to_string()
                };
                m.insert(k, json(rng, depth - 1));
            }
            Value::Object(m)
        }
    }
}

/// A [`temp_scratch`](crate::temp_scratch) folder, removed when dropped.
struct Scratch(PathBuf);
impl Scratch {
    fn new(tag: &str) -> Scratch {
        Scratch(crate::temp_scratch(tag))
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Bytes for a JSON reader: a structured value, its text, sometimes damaged.
fn json_bytes(rng: &mut Rng) -> Vec<u8> {
    let mut v = json(rng, 4);
    if rng.chance(60) {
        // Put an entry-like map under "profiles" most of the time.
        let mut entries = Map::new();
        for _ in 0..rng.below(4) {
            let name = rng.pick(&["ok", "x.y", "../bad", "", "a b"]).to_string();
            entries.insert(name, json(rng, 2));
        }
        v = Value::Object(Map::from_iter([(
            "profiles".to_string(),
            Value::Object(entries),
        )]));
    }
    let mut bytes = serde_json::to_vec(&v).unwrap();
    match rng.below(4) {
        0 => bytes.truncate(rng.below(bytes.len() as u64 + 1) as usize),
        1 if !bytes.is_empty() => {
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] = rng.next() as u8;
        }
        2 => bytes = soup(rng, 200).into_bytes(),
        _ => {}
    }
    bytes
}

#[test]
fn registry_files_never_panic_and_round_trip() {
    let dir = Scratch::new("registry");
    each_case(0x5eed_0006, 1500, |case, rng| {
        let path = dir.0.join(format!("profiles{}.json", case % 4));
        std::fs::write(&path, json_bytes(rng)).unwrap();
        match Registry::load(&path) {
            Ok(reg) => {
                for e in reg.errors() {
                    assert!(e.to_string().contains(&*path.to_string_lossy()));
                }
                reg.save_atomic(&path).unwrap();
                assert_eq!(Registry::load(&path).unwrap(), reg, "saving loses nothing");
            }
            Err(e) => assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}"),
        }
    });
}

#[test]
fn provenance_files_never_panic_and_round_trip() {
    let dir = Scratch::new("provenance");
    each_case(0x5eed_0007, 1500, |_, rng| {
        let path = dir.0.join("provenance.json");
        std::fs::write(&path, json_bytes(rng)).unwrap();
        match Provenance::load(&path) {
            Ok(p) => {
                let _ = (p.sha256(), p.rocblas(), p.profile(), p.campaigns().len());
                let out = dir.0.join("saved.json");
                p.save_atomic(&out).unwrap();
                assert_eq!(Provenance::load(&out).unwrap(), p);
            }
            Err(e) => assert!(e.to_string().contains("provenance.json"), "{e}"),
        }
    });
}
