//! How a candidate's device time is measured, and the limits it is measured against: the
//! card's achievable device-to-device copy bandwidth and the floor of one launch, both timed
//! the same way as the candidates.

use serde::Serialize;

use super::cuda::{err, Cuda, EmptyKernel, Error, Result};
use super::numeric::{median, spread};
use super::problem::Delay;

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
}

impl Limits {
    /// The time `bytes` of traffic needs at the copy bandwidth, but never under the floor.
    pub fn limit_ms(&self, bytes: usize) -> f64 {
        limit_ms(bytes, self.copy_bytes_per_s, self.floor_ms)
    }
}

/// max(bytes / bandwidth, floor), in milliseconds.
pub fn limit_ms(bytes: usize, bytes_per_s: f64, floor_ms: f64) -> f64 {
    (bytes as f64 / bytes_per_s * 1e3).max(floor_ms)
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
    fn limit_is_bandwidth_time_but_never_under_the_floor() {
        // 4.0e12 B/s, floor 2 us.
        let bw = 4.0e12;
        // 52 MB at 4 TB/s: 13 us.
        assert!((limit_ms(52_000_000, bw, 0.002) - 0.013).abs() < 1e-12);
        // 1 KB: 0.25 ns of traffic, so the floor.
        assert_eq!(limit_ms(1000, bw, 0.002), 0.002);
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
        };
        assert_eq!(l.limit_ms(1000), 0.002);
    }
}
