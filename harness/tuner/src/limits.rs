//! What one call can do at best on this device, measured at the start of each worker's run
//! the way the candidates are timed: the device-to-device copy bandwidth, the floor of one
//! operation, and the matmul rate of a large 16-bit GEMM by the library's own heuristic.
//! Each shape is then reported against the limit that binds it: bytes over the bandwidth,
//! flops over the rate, or the floor.

use serde::{Deserialize, Serialize};

use crate::bench::Bench;
use crate::error::{Error, Result};
use crate::numerics::{median, spread, Elem, Layout};
use crate::runtime::Runtime;
use crate::timer::{Mode, Timer};

/// The device's limits in the campaign's timing mode.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Limits {
    pub timing: String,
    /// Device-to-device copy: bytes read plus bytes written per second (median of trials).
    pub copy_bytes_per_s: f64,
    pub copy_bytes: usize,
    pub copy_spread: f64,
    /// Milliseconds of one 4-byte operation (a memset, or a copy where the runtime has no
    /// asynchronous memset): no call can take less.
    pub floor_ms: f64,
    pub floor_spread: f64,
    /// Floating-point operations per second of the library's heuristic on a square 16-bit
    /// GEMM, its side and spread; `None` where it could not be measured (no compute limit).
    pub matmul_flops_per_s: Option<f64>,
    pub matmul_side: Option<i64>,
    pub matmul_spread: Option<f64>,
}

/// Which limit binds a shape: the one that takes longest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    Memory,
    Compute,
    Launch,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::Memory => "memory",
            Bound::Compute => "compute",
            Bound::Launch => "launch",
        }
    }
}

/// A shape against its limits.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShapeLimit {
    pub memory_ms: f64,
    pub compute_ms: Option<f64>,
    pub floor_ms: f64,
    pub limit_ms: f64,
    pub bound: Bound,
    /// The heuristic's and the fastest candidate's time as a share of the limit (100: at
    /// it).
    pub heuristic_pct: f64,
    pub best: String,
    pub best_pct: f64,
    /// Why the fastest is where it is, where the library can say (cuBLASLt's grid).
    pub why: Option<String>,
}

/// How close a time is to its limit: 100% at the limit, 50% at twice it (0 for a broken
/// time).
pub fn pct_of(limit_ms: f64, ms: f64) -> f64 {
    match 100.0 * limit_ms / ms {
        p if p.is_finite() => p,
        _ => 0.0,
    }
}

impl Limits {
    /// The limit of one call of `g`: max(bytes moved / bandwidth, flops / matmul rate,
    /// floor), and which of the three. The rate is a 16-bit GEMM's (tensor cores): it stands
    /// for f16 and bf16 inputs only; other types get no compute limit rather than a wrong one.
    pub fn bound(&self, g: &Layout) -> (f64, f64, Option<f64>, Bound) {
        let (m, n, k, b) = (g.m as f64, g.n as f64, g.k as f64, g.batch.max(1) as f64);
        let size = |w: usize| g.types[w].bytes() as f64;
        let mut bytes = b * (m * k * size(0) + k * n * size(1) + m * n * size(3));
        if g.beta != 0.0 {
            bytes += b * m * n * size(2);
        }
        let memory = bytes / self.copy_bytes_per_s * 1e3;
        let half = |t: Elem| matches!(t, Elem::F16 | Elem::Bf16);
        let compute = self
            .matmul_flops_per_s
            .filter(|_| half(g.types[0]) && half(g.types[1]))
            .map(|r| 2.0 * g.macs() / r * 1e3);
        let mut best = (memory, Bound::Memory);
        if let Some(c) = compute.filter(|&c| c > best.0) {
            best = (c, Bound::Compute);
        }
        if self.floor_ms > best.0 {
            best = (self.floor_ms, Bound::Launch);
        }
        (best.0, memory, compute, best.1)
    }

    /// A shape whose heuristic ran `heuristic_ms` and whose fastest candidate `best` ran
    /// `best_ms`, against the limits.
    pub fn of_shape(
        &self,
        g: &Layout,
        heuristic: (&str, f64),
        best: Option<(&str, f64)>,
    ) -> ShapeLimit {
        let (limit_ms, memory_ms, compute_ms, bound) = self.bound(g);
        let (best, best_ms) = match best {
            Some((s, t)) if t < heuristic.1 => (s, t),
            _ => heuristic,
        };
        ShapeLimit {
            memory_ms,
            compute_ms,
            floor_ms: self.floor_ms,
            limit_ms,
            bound,
            heuristic_pct: pct_of(limit_ms, heuristic.1),
            best: best.to_string(),
            best_pct: pct_of(limit_ms, best_ms),
            why: None,
        }
    }

    /// One line of the limits, for the campaign's opening lines.
    pub fn line(&self) -> String {
        format!(
            "limits ({} timing): copy {:.0} GB/s (read + write, {} MiB, spread {:.1}%), floor {:.2} us (spread {:.1}%), matmul {}",
            self.timing,
            self.copy_bytes_per_s / 1e9,
            self.copy_bytes >> 20,
            self.copy_spread * 100.0,
            self.floor_ms * 1e3,
            self.floor_spread * 100.0,
            match (self.matmul_flops_per_s, self.matmul_side, self.matmul_spread) {
                (Some(r), Some(side), Some(s)) => format!(
                    "{:.1} TFLOP/s ({side}^3, spread {:.1}%)",
                    r / 1e12,
                    s * 100.0
                ),
                _ => "not measured".into(),
            }
        )
    }
}

/// Copies of `copy_bytes` and 4-byte operations timed `trials` times each on `rt`, in
/// `mode` where the runtime enqueues copies (a copy made at once is never captured), else
/// with events.
pub fn measure(rt: &Runtime, mode: Mode, copy_bytes: usize, trials: usize) -> Result<Limits> {
    let mode = if rt.has_async_copy() {
        mode
    } else {
        Mode::Events
    };
    let timer = Timer::new(rt, mode, 0.0, None, "limits".into())?;
    let (src, dst) = (rt.alloc(copy_bytes)?, rt.alloc(copy_bytes)?);
    src.fill(1)?;
    dst.fill(0)?;
    let s = timer.stream;
    let sample = |id: &[u8], ops: usize, op: &dyn Fn() -> Result<()>| -> Result<Vec<f64>> {
        let run = |_| op();
        timer.time(id, (ops, 1), &run, false)?; // warm-up, graph captured
        (0..trials)
            .map(|_| timer.time(id, (ops, 1), &run, false))
            .collect()
    };
    let copies = sample(b"copy", 4, &|| rt.copy(&dst, &src, copy_bytes, s))?;
    let floor = match rt.memset_async(&dst, 4, s) {
        Ok(()) => sample(b"memset", 200, &|| rt.memset_async(&dst, 4, s))?,
        Err(_) => sample(b"copy4", 200, &|| rt.copy(&dst, &src, 4, s))?,
    };
    let copy_ms = median(&copies);
    if copy_ms.is_nan() || copy_ms <= 0.0 {
        return Err(Error::failed(format!(
            "a {copy_bytes}-byte copy timed {copy_ms} ms"
        )));
    }
    Ok(Limits {
        timing: timer.mode_name(),
        copy_bytes_per_s: 2.0 * copy_bytes as f64 / (copy_ms * 1e-3),
        copy_bytes,
        copy_spread: spread(&copies),
        floor_ms: median(&floor),
        floor_spread: spread(&floor),
        matmul_flops_per_s: None,
        matmul_side: None,
        matmul_spread: None,
    })
}

/// The side of the square GEMM whose rate stands for the device's: doubled from 128 until
/// one call takes a millisecond, at most 8192 (every SM then runs many full waves of the
/// largest tiles, so what it reaches is the tensor cores' rate; on a CPU stand-in the
/// growth stops early, so the measurement stays short there).
pub const MATMUL_SIDE_MAX: i64 = 8192;

/// The matmul rate of the heuristic on `bench(side)`, square GEMMs grown as
/// [`MATMUL_SIDE_MAX`] says: the median of `trials` samples of about 20 ms (about 1 ms with
/// a rest, each followed by its rest: the card's rate under the duty cycle of the shapes it
/// limits), after a warm-up of the same work. Flops per second, side, spread.
pub fn matmul_rate<B: Bench>(
    bench: &dyn Fn(i64) -> Result<B>,
    trials: usize,
    rest: f64,
) -> Result<(f64, i64, f64)> {
    let mut side = 128;
    loop {
        let b = bench(side)?;
        let h = b.heuristic()?;
        b.time(&h.algo, 2)?;
        let once = b.time(&h.algo, 2)?.max(1e-6);
        if once >= 1.0 || side >= MATMUL_SIDE_MAX {
            let calls =
                (((if rest > 0.0 { 1.0 } else { 20.0 }) / once).ceil() as usize).clamp(1, 200);
            let mut spent = 0.0;
            while spent < 200.0 && spent < 20.0 * once * calls as f64 {
                spent += b.time(&h.algo, calls)? * calls as f64;
            }
            let v = (0..trials.max(1))
                .map(|_| b.time(&h.algo, calls))
                .collect::<Result<Vec<f64>>>()?;
            let ms = median(&v);
            if ms.is_nan() || ms <= 0.0 {
                return Err(Error::failed(format!("a {side}^3 GEMM timed {ms} ms")));
            }
            return Ok((2.0 * b.layout().macs() / (ms * 1e-3), side, spread(&v)));
        }
        side *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `F.linear(out n, tokens m, in k)` in `t`: D (n x m) = W^T x, as the Lt key lays it out.
    fn linear(t: Elem, n: i64, m: i64, k: i64) -> Layout {
        Layout {
            trans_a: true,
            ld: [k, k, n, n],
            types: [t; 4],
            ..Layout::dense(n, m, k)
        }
    }

    fn limits(rate: Option<f64>) -> Limits {
        Limits {
            timing: "graph".into(),
            copy_bytes_per_s: 4.0e12,
            copy_bytes: 1 << 30,
            copy_spread: 0.0,
            floor_ms: 0.002,
            floor_spread: 0.0,
            matmul_flops_per_s: rate,
            matmul_side: rate.map(|_| 8192),
            matmul_spread: rate.map(|_| 0.0),
        }
    }

    #[test]
    fn bytes_moved_counts_a_b_and_d() {
        // 10240x16x2560 in bf16: W 10240x2560, x 16x2560, y 16x10240 (C is not read).
        let l = limits(None);
        let (_, memory, _, _) = l.bound(&linear(Elem::Bf16, 10240, 16, 2560));
        let bytes = 2.0 * (10240.0 * 2560.0 + 16.0 * 2560.0 + 16.0 * 10240.0);
        assert!((memory - bytes / 4.0e12 * 1e3).abs() < 1e-15);
        // beta != 0 reads C too (rocBLAS's problems).
        let mut g = linear(Elem::F32, 64, 64, 64);
        let (_, without_c, _, _) = l.bound(&g);
        g.beta = 0.5;
        let (_, with_c, _, _) = l.bound(&g);
        assert!((with_c - without_c - 64.0 * 64.0 * 4.0 / 4.0e12 * 1e3).abs() < 1e-15);
    }

    #[test]
    fn limit_is_the_largest_of_bandwidth_matmul_rate_and_floor() {
        assert!((pct_of(0.013, 0.026) - 50.0).abs() < 1e-9);
        assert_eq!(pct_of(0.002, 0.0), 0.0, "a broken time gives no share");
        // No matmul rate: bandwidth or floor only; a 16x16x16 problem is under the floor.
        let l = limits(None);
        let (ms, memory, compute, b) = l.bound(&linear(Elem::Bf16, 10240, 16, 2560));
        assert_eq!((b, ms, compute), (Bound::Memory, memory, None));
        assert_eq!(l.bound(&linear(Elem::Bf16, 16, 16, 16)).3, Bound::Launch);
        // 800 TFLOP/s: 2 x 2048 x 10240 x 2560 flops take 134 us, 59 MB take 14.7 us.
        let l = limits(Some(8e14));
        let (ms, _, _, b) = l.bound(&linear(Elem::Bf16, 10240, 2048, 2560));
        assert_eq!(b, Bound::Compute);
        assert!((ms - 2.0 * 2048.0 * 10240.0 * 2560.0 / 8e14 * 1e3).abs() < 1e-12);
        // The 16-bit rate is no limit for f32 inputs: memory binds instead.
        let (_, _, compute, b) = l.bound(&linear(Elem::F32, 10240, 2048, 2560));
        assert_eq!((compute, b), (None, Bound::Memory));
    }

    #[test]
    fn a_shape_is_set_against_the_faster_of_heuristic_and_best() {
        let l = limits(None);
        let g = linear(Elem::Bf16, 512, 1, 2560);
        let (limit, _, _, _) = l.bound(&g);
        // The best other ran faster: it is the best, and both shares are given.
        let s = l.of_shape(&g, ("heur", 0.0065), Some(("best", 0.0059)));
        assert_eq!((s.best.as_str(), s.bound), ("best", Bound::Launch));
        assert!((s.best_pct - 100.0 * limit / 0.0059).abs() < 1e-9);
        assert!((s.heuristic_pct - 100.0 * limit / 0.0065).abs() < 1e-9);
        // Nothing beat the heuristic: it is the best.
        let s = l.of_shape(&g, ("heur", 0.0065), Some(("slower", 0.007)));
        assert_eq!(s.best, "heur");
        assert!(l.line().contains("copy 4000 GB/s") && l.line().contains("matmul not measured"));
    }
}
