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
