//! How a candidate's device time is measured, and the limits it is measured against: the
//! card's achievable device-to-device copy bandwidth, the floor of one launch and the card's
//! matmul rate, all timed the same way as the candidates.

use serde::Serialize;

use tunedblas_core::cublaslt::{LtKey, R_16BF, R_16F};

use super::cuda::{err, lt_check, Cuda, EmptyKernel, Error, Lt, Result};
use super::grid::{bound, Bound};
use super::numeric::{median, spread};
use super::problem::{Delay, Problem};

/// The timing mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// Back-to-back calls between two events, behind a delay (the original mode).
    Events,
    /// The same calls captured once into a CUDA graph, replays between two events.
    Graph,
}

impl Timing {
    /// `--timing graph|events`; graph when not given.
    pub fn parse(v: Option<&str>) -> Result<Timing> {
        match v {
            None | Some("graph") => Ok(Timing::Graph),
            Some("events") => Ok(Timing::Events),
            Some(o) => err(format!("--timing takes graph or events, not {o:?}")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Timing::Events => "events",
            Timing::Graph => "graph",
        }
    }
}

/// The mode to use given the one asked for and whether a probe capture worked: graph only
/// where capture works, else events with the one line that says why.
pub fn choose(requested: Timing, probe: Result<()>) -> (Timing, Option<String>) {
    match (requested, probe) {
        (Timing::Events, _) => (Timing::Events, None),
        (Timing::Graph, Ok(())) => (Timing::Graph, None),
        (Timing::Graph, Err(e)) => (
            Timing::Events,
            Some(format!(
                "tunedblas lt: graph capture does not work here ({e}); timing with events"
            )),
        ),
    }
}

/// What one call can do at best on this card in this mode.
#[derive(Clone, Debug, Serialize)]
pub struct Limits {
    pub timing: Timing,
    /// Device-to-device copy: bytes read plus bytes written per second, median of trials,
    /// the better of the two modes (the bandwidth is the card's, not the timing's: a copy
    /// captured in a graph can run slower than the same copy launched on a stream).
    pub copy_bytes_per_s: f64,
    /// The copy bandwidth timed as graph replays and as back-to-back events.
    pub copy_bytes_per_s_graph: Option<f64>,
    pub copy_bytes_per_s_events: f64,
    pub copy_bytes: usize,
    pub copy_spread: f64,
    /// Milliseconds per launch of an empty kernel (or, where it cannot be loaded, a 4-byte
    /// memset), back to back in this mode: no call can take less.
    pub floor_ms: f64,
    pub floor_spread: f64,
    pub floor_op: String,
    /// Milliseconds per launch of a graph with no nodes (graph mode only).
    pub empty_graph_ms: Option<f64>,
    /// The card's matmul rate: floating-point operations per second of a large bf16 GEMM
    /// (the heuristic's answer, timed in this mode), its shape and spread. `None` where it
    /// could not be measured; the compute limit is then left out.
    pub matmul_flops_per_s: Option<f64>,
    pub matmul_shape: Option<String>,
    pub matmul_spread: Option<f64>,
}

impl Limits {
    /// The limit of one call of `key`: max(bytes moved / bandwidth, flops / matmul rate,
    /// floor), and which of the three it is.
    pub fn bound_ms(&self, key: &LtKey) -> (f64, Bound) {
        bound(
            self.memory_ms(super::problem::bytes_moved(key)),
            self.compute_ms(key),
            self.floor_ms,
        )
    }

    /// Milliseconds `bytes` of traffic take at the copy bandwidth (no floor).
    pub fn memory_ms(&self, bytes: usize) -> f64 {
        bytes as f64 / self.copy_bytes_per_s * 1e3
    }

    /// Milliseconds the flops of `key` take at the matmul rate, where it was measured. The
    /// rate is bf16's (tensor cores): it stands for f16 and bf16 inputs only; other types
    /// get no compute limit rather than a wrong one (f32 runs an order of magnitude slower).
    pub fn compute_ms(&self, key: &LtKey) -> Option<f64> {
        let tensor = |t| t == R_16BF || t == R_16F;
        if !(tensor(key.a_type) && tensor(key.b_type)) {
            return None;
        }
        self.matmul_flops_per_s
            .map(|r| super::problem::flops(key) / r * 1e3)
    }
}

/// The shape whose rate stands for the card's: large enough that every SM runs many full
/// waves of the heuristic's largest tiles, so what it reaches is the tensor cores' rate.
pub const MATMUL_RATE_SIDE: i64 = 8192;

/// Floating-point operations per second of an `side`^3 bf16 GEMM by the heuristic's first
/// answer in mode `t`: median of `trials` samples, after up to 200 ms (at most 20 samples)
/// of the same work; with the samples' spread. Back to back (`rest` 0) a sample is about
/// 20 ms. With a `rest` (`--rest`), samples are as short as the shapes' (one call of
/// 8192^3, about 1.4 ms on an H200) and each is followed by its rest, so the rate is the
/// card's under the same duty cycle as the shapes it limits.
pub fn matmul_rate(
    cuda: &Cuda,
    lt: &Lt,
    t: Timing,
    side: i64,
    trials: usize,
    delay: &Delay,
    rest: f64,
) -> Result<(f64, f64)> {
    let key = LtKey::linear(R_16BF, side, side, side);
    let p = Problem::new_timing_only(cuda, lt, key, 32 << 20)?;
    p.set_timing(t);
    let base = p.heuristic(1)?.into_iter().next().ok_or_else(|| {
        Error(format!(
            "cuBLASLt has no algorithm for a {side}^3 bf16 GEMM"
        ))
    })?;
    lt_check("cublasLtMatmul", p.launch(&base.algo, 0))?;
    cuda.sync_stream(p.stream)?;
    let once = p.time(&base.algo, 2, delay)?.max(1e-6);
    let sample_ms = if rest > 0.0 { 1.0 } else { 20.0 };
    let calls = ((sample_ms / once).ceil() as usize).clamp(1, 200);
    let timed = || -> Result<f64> {
        let ms = p.time(&base.algo, calls, delay)?;
        crate::rest::after(rest, ms * calls as f64);
        Ok(ms)
    };
    // 200 ms of the same work first, in at most 20 samples (not `pipeline::warm_up`, which
    // samples until settled: on a stand-in whose large GEMMs take no time that would be
    // thousands of samples of 200 calls). With a rest that is about 30 ms of work, enough
    // there: resting, the rate's trials spread 0.4-0.5% on the H200 (BENCHMARKS.md).
    let mut spent = 0.0;
    for _ in 0..20 {
        if spent >= 200.0 {
            break;
        }
        spent += timed()? * calls as f64;
    }
    let v = (0..trials.max(1))
        .map(|_| timed())
        .collect::<Result<Vec<f64>>>()?;
    let ms = median(&v);
    if ms.is_nan() || ms <= 0.0 {
        return err(format!("a {side}^3 GEMM timed {ms} ms"));
    }
    Ok((super::problem::flops(&key) / (ms * 1e-3), spread(&v)))
}

/// How close a measured time is to its limit: 100% at the limit, 50% at twice it.
pub fn pct_of_limit(limit_ms: f64, measured_ms: f64) -> f64 {
    100.0 * limit_ms / measured_ms
}

/// Times `ops` operations enqueued by `enqueue` on `stream`, `trials` times, in mode `t`:
/// milliseconds per operation, one per trial.
fn time_ops(
    cuda: &Cuda,
    t: Timing,
    stream: *mut std::ffi::c_void,
    ops: usize,
    trials: usize,
    delay: &Delay,
    enqueue: &dyn Fn() -> Result<()>,
) -> Result<Vec<f64>> {
    let (a, b) = (cuda.event()?, cuda.event()?);
    let graph = match t {
        Timing::Graph => {
            let g = cuda.capture(stream, ops, || (0..ops).try_for_each(|_| enqueue()))?;
            g.launch(stream)?;
            cuda.sync_stream(stream)?;
            Some(g)
        }
        Timing::Events => None,
    };
    let mut out = Vec::with_capacity(trials);
    for _ in 0..trials + 1 {
        delay.enqueue(stream, if graph.is_some() { 4 } else { ops })?;
        cuda.record(a, stream)?;
        match &graph {
            Some(g) => g.launch(stream)?,
            None => (0..ops).try_for_each(|_| enqueue())?,
        }
        cuda.record(b, stream)?;
        out.push(cuda.elapsed(a, b)? / ops as f64);
    }
    out.remove(0); // the first is a warm-up
    Ok(out)
}

/// Measures the limits in mode `t` (copies of `copy_bytes`, `trials` trials each).
pub fn measure(
    cuda: &Cuda,
    t: Timing,
    copy_bytes: usize,
    trials: usize,
    delay: &Delay,
) -> Result<Limits> {
    let stream = cuda.stream()?;
    let src = cuda.alloc(copy_bytes)?;
    let dst = cuda.alloc(copy_bytes)?;
    src.fill(1)?;
    dst.fill(0)?;
    let copy = |mode| {
        time_ops(cuda, mode, stream, 4, trials, delay, &|| {
            cuda.copy_async(&dst, &src, copy_bytes, stream)
        })
    };
    let copies_events = copy(Timing::Events)?;
    let copies_graph = match t {
        Timing::Graph => Some(copy(Timing::Graph)?),
        Timing::Events => None,
    };
    drop((src, dst));
    let rate = |v: &[f64]| 2.0 * copy_bytes as f64 / (median(v) * 1e-3);
    let copies = match &copies_graph {
        Some(g) if rate(g) > rate(&copies_events) => g.clone(),
        _ => copies_events.clone(),
    };
    let (floor, floor_op) = match EmptyKernel::load() {
        Ok(k) => (
            time_ops(cuda, t, stream, 200, trials, delay, &|| k.enqueue(stream))?,
            "empty kernel".to_string(),
        ),
        Err(e) => {
            eprintln!("tunedblas lt: no empty kernel ({e}); the floor is a 4-byte memset");
            let tiny = cuda.alloc(256)?;
            (
                time_ops(cuda, t, stream, 200, trials, delay, &|| {
                    cuda.memset_async(&tiny, 4, stream)
                })?,
                "4-byte memset".to_string(),
            )
        }
    };
    let empty_graph_ms = match t {
        Timing::Graph => {
            let g = cuda.empty_graph()?;
            let v = time_ops(cuda, Timing::Events, stream, 100, trials, delay, &|| {
                g.launch(stream)
            })?;
            Some(median(&v))
        }
        Timing::Events => None,
    };
    let copy_ms = median(&copies);
    if copy_ms.is_nan() || copy_ms <= 0.0 {
        return Err(Error(format!(
            "a {copy_bytes}-byte copy timed {copy_ms} ms"
        )));
    }
    Ok(Limits {
        timing: t,
        copy_bytes_per_s: rate(&copies),
        copy_bytes_per_s_graph: copies_graph.as_deref().map(rate),
        copy_bytes_per_s_events: rate(&copies_events),
        copy_bytes,
        copy_spread: spread(&copies),
        floor_ms: median(&floor),
        floor_spread: spread(&floor),
        floor_op,
        empty_graph_ms,
        matmul_flops_per_s: None,
        matmul_shape: None,
        matmul_spread: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_mode_argument() {
        assert_eq!(
            Timing::parse(None).unwrap(),
            Timing::Graph,
            "graph by default"
        );
        assert_eq!(Timing::parse(Some("graph")).unwrap(), Timing::Graph);
        assert_eq!(Timing::parse(Some("events")).unwrap(), Timing::Events);
        assert!(Timing::parse(Some("cupti")).is_err());
        assert_eq!(serde_json::to_string(&Timing::Graph).unwrap(), "\"graph\"");
    }

    #[test]
    fn graph_only_where_capture_works() {
        assert_eq!(choose(Timing::Graph, Ok(())), (Timing::Graph, None));
        let (t, line) = choose(Timing::Graph, err("cudaStreamBeginCapture failed"));
        assert_eq!(t, Timing::Events);
        let line = line.unwrap();
        assert!(line.contains("cudaStreamBeginCapture failed") && line.contains("events"));
        assert!(!line.contains('\n'), "one line");
        // Asked for events: events, whatever the probe said, and nothing to say.
        assert_eq!(
            choose(Timing::Events, err("no capture")),
            (Timing::Events, None)
        );
    }

    #[test]
    fn limit_is_the_largest_of_bandwidth_matmul_rate_and_floor() {
        // 4.0e12 B/s, floor 2 us.
        let bw = 4.0e12;
        assert!((pct_of_limit(0.013, 0.026) - 50.0).abs() < 1e-9);
        assert!((pct_of_limit(0.002, 0.002) - 100.0).abs() < 1e-9);
        let l = Limits {
            timing: Timing::Graph,
            copy_bytes_per_s: bw,
            copy_bytes_per_s_graph: Some(0.7 * bw),
            copy_bytes_per_s_events: bw,
            copy_bytes: 1 << 30,
            copy_spread: 0.0,
            floor_ms: 0.002,
            floor_spread: 0.0,
            floor_op: "empty kernel".into(),
            empty_graph_ms: None,
            matmul_flops_per_s: None,
            matmul_shape: None,
            matmul_spread: None,
        };
        // No matmul rate: bandwidth or floor only. 10240x16x2560 bf16 moves 52.8 MB: 13.2 us
        // at 4 TB/s; a 16x16x16 problem is under the floor.
        let decode = LtKey::linear(R_16BF, 10240, 16, 2560);
        let (ms, b) = l.bound_ms(&decode);
        assert!((ms - 52_838_400.0 / bw * 1e3).abs() < 1e-12 && b == Bound::Memory);
        assert_eq!(
            l.bound_ms(&LtKey::linear(R_16BF, 16, 16, 16)),
            (0.002, Bound::Launch)
        );
        // 800 TFLOP/s: 2 x 2048 x 10240 x 2560 flops take 134 us, 59 MB take 14.7 us.
        let l = Limits {
            matmul_flops_per_s: Some(8e14),
            ..l
        };
        let prefill = LtKey::linear(R_16BF, 10240, 2048, 2560);
        let f = 2.0 * 2048.0 * 10240.0 * 2560.0;
        let (ms, b) = l.bound_ms(&prefill);
        assert_eq!(b, Bound::Compute);
        assert!((ms - f / 8e14 * 1e3).abs() < 1e-12);
        // The bf16 rate is no limit for f32 inputs: memory binds instead.
        let f32_key = LtKey::linear(tunedblas_core::cublaslt::R_32F, 10240, 2048, 2560);
        assert_eq!(l.compute_ms(&f32_key), None);
        assert_eq!(l.bound_ms(&f32_key).1, Bound::Memory);
    }
}
