//! Prints each refblas solution's best-of-5 time for some GEMM shapes, and which one the
//! heuristic picks: `cargo run --release -p refblas --example solutions [-- v4|v5] [TN:m:n:k ...]`
//! (f16 data, f32 compute).

use refblas::gemm::{self, GemmCall};
use refblas::numeric::F16;
use refblas::{handle, Combo, Flavour, Shape};
use std::ffi::c_void;
use std::time::{Duration, Instant};
use tunedblas_core::abi::*;

fn main() {
    let mut flavour = Flavour::V4;
    let mut specs = Vec::new();
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "v4" => flavour = Flavour::V4,
            "v5" => flavour = Flavour::V5,
            s => specs.push(s.to_owned()),
        }
    }
    if specs.is_empty() {
        specs = [
            "NN:256:256:256",
            "NN:1024:4:1024",
            "TN:1024:16:1024",
            "TN:64:24:40",
            "NN:8:8:8",
        ]
        .map(String::from)
        .to_vec();
    }
    let mut h: Handle = std::ptr::null_mut();
    unsafe { handle::create(&mut h) };
    for spec in specs {
        let parts: Vec<&str> = spec.split(':').collect();
        let (ta, tb) = (
            parts[0].as_bytes()[0] == b'T',
            parts[0].as_bytes()[1] == b'T',
        );
        let [m, n, k]: [usize; 3] = [1, 2, 3].map(|i| parts[i].parse().unwrap());
        let (lda, ldb) = (if ta { k } else { m }, if tb { n } else { k });
        let fill = |len: usize| -> Vec<u16> {
            (0..len)
                .map(|i| F16::from_f32(((i * 7919) % 1000) as f32 / 1000.0 - 0.5).0)
                .collect()
        };
        let a = fill(lda * if ta { m } else { k });
        let b = fill(ldb * if tb { k } else { n });
        let mut d = vec![0u16; m * n];
        let (alpha, beta) = (1.0f32, 0.0f32);
        let call = |index: i32, d: &mut Vec<u16>| GemmCall {
            algo: ALGO_SOLUTION_INDEX,
            solution_index: index,
            ..GemmCall::single(
                "rocblas_gemm_ex",
                [ta, tb].map(|t| if t { OP_TRANSPOSE } else { OP_NONE }),
                [m, n, k].map(|x| x as i64),
                [
                    &alpha as *const f32 as *const c_void,
                    &beta as *const f32 as *const c_void,
                ],
                [a.as_ptr(), b.as_ptr(), d.as_ptr()].map(|p| p as *const c_void),
                d.as_mut_ptr() as *mut c_void,
                [lda, ldb, m, m].map(|x| x as i64),
                (DT_F16_R, DT_F32_R),
            )
        };
        let shape = Shape {
            m: m as i64,
            n: n as i64,
            k: k as i64,
        };
        let mut ids = flavour.solution_ids(Combo::HalfF32, Some(shape));
        ids.insert(0, 0);
        println!("{spec}:");
        for id in ids {
            let mut best = Duration::MAX;
            let mut ran = 0;
            for _ in 0..5 {
                let c = call(id, &mut d);
                let t = Instant::now();
                let out = unsafe { gemm::run(flavour, h, &c, true) }.expect("gemm failed");
                best = best.min(t.elapsed());
                if let gemm::GemmOutcome::Ran(e) = out {
                    ran = e.solution;
                }
            }
            let kernel = flavour.kernel_for(Combo::HalfF32, ran).unwrap();
            let label = if id == 0 { "heuristic" } else { "" };
            println!("  {ran:>12} {:<8} {best:>12.3?} {label}", kernel.name());
        }
    }
    unsafe { handle::destroy(h) };
}
