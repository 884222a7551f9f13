//! How a sample is timed, for every library: many calls between two events on a stream of
//! the problem's own, either enqueued back to back (`events`) or captured once into a graph
//! and replayed (`graph`, the default: one launch for all of a sample's calls, so no launch
//! gaps between them, which back-to-back events measure as part of small GEMMs). Where a
//! capture fails, the problem times with events from then on, said once; a shape some of
//! whose samples were graph replays and some not is timed again (see [`Timer::mixed`]).
//!
//! After each sample of a decision the device rests (`--rest`, [`crate::rest`]) for a
//! multiple of the time the sample kept it busy.

use std::cell::{Cell, RefCell};

use serde::{Deserialize, Serialize};
use tunedblas_core::abi::Stream;

use crate::error::Result;
use crate::runtime::{Events, Failure, Graph, Runtime};

/// The timing mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Back-to-back calls between two events.
    Events,
    /// The same calls captured once into a graph, replays between two events.
    Graph,
}

impl Mode {
    pub fn parse(v: &str) -> std::result::Result<Mode, String> {
        match v {
            "graph" => Ok(Mode::Graph),
            "events" => Ok(Mode::Events),
            o => Err(format!("--timing takes graph or events, not '{o}'")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Events => "events",
            Mode::Graph => "graph",
        }
    }
}

/// Work enqueued ahead of a timed span, so the host has queued every call of the span
/// before the device reaches its first event: the span is device time, not launch rate.
/// Where a library has none, a graph sample is replayed once untimed ahead instead.
pub trait Delay {
    /// Enqueues enough delay on `s` to cover the host time of queueing `calls` calls.
    fn enqueue(&self, s: Stream, calls: usize) -> Result<()>;
}

/// The device time a graph sample whose timed replay spanned `span_ms` kept the device
/// busy: the timed replay, and the untimed one ahead of it where no delay holds the stream.
fn busy_ms(span_ms: f64, delay: bool) -> f64 {
    if delay {
        span_ms
    } else {
        2.0 * span_ms
    }
}

/// Graphs by (algorithm, calls captured).
type Graphs = Vec<(Vec<u8>, usize, Graph)>;

/// One problem's timing: its stream, events and graphs.
pub struct Timer<'r> {
    rt: &'r Runtime,
    /// The stream the library's calls go to (its own where the runtime makes streams).
    pub stream: Stream,
    events: Events<'r>,
    graph: Cell<bool>,
    graphs: RefCell<Graphs>,
    /// Why graph timing stopped for this problem (it then times with events).
    failure: RefCell<Option<String>>,
    /// Samples taken as graph replays (with a later fallback: the samples are mixed).
    graph_samples: Cell<usize>,
    /// Algorithms run once uncaptured (graph timing): a library's lazy set-up and workspace
    /// growth happen there, never inside a capture, and an algorithm's own failure shows
    /// as its own.
    pre_run: RefCell<Vec<Vec<u8>>>,
    rest: f64,
    delay: Option<&'r dyn Delay>,
    /// What the messages name (the shape).
    label: String,
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        self.graphs.borrow_mut().clear();
        self.rt.destroy_stream(self.stream);
    }
}

impl<'r> Timer<'r> {
    pub fn new(
        rt: &'r Runtime,
        mode: Mode,
        rest: f64,
        delay: Option<&'r dyn Delay>,
        label: String,
    ) -> Result<Timer<'r>> {
        let t = Timer {
            rt,
            stream: rt.stream()?,
            events: rt.events()?,
            graph: Cell::new(false),
            graphs: RefCell::new(Vec::new()),
            failure: RefCell::new(None),
            graph_samples: Cell::new(0),
            pre_run: RefCell::new(Vec::new()),
            rest,
            delay,
            label,
        };
        if mode == Mode::Graph {
            if !rt.has_graphs() || t.stream.is_null() {
                t.failed(format!(
                    "the {} runtime has no stream capture and graph calls",
                    rt.api.name()
                ));
            } else {
                t.graph.set(true);
            }
        }
        Ok(t)
    }

    pub fn runtime(&self) -> &'r Runtime {
        self.rt
    }

    /// Waits until everything enqueued on this timer's stream has run.
    pub fn sync(&self) -> Result<()> {
        self.rt.sync(self.stream)
    }

    /// Milliseconds per call over `calls` calls (at least one per input set in graph
    /// mode), `run(i)` enqueueing call `i`, in this problem's mode; then the rest. `id`
    /// names the algorithm (its graphs are cached by it). A graph mode that fails falls
    /// back to events for good, said once. A screening `probe` has no rest and no
    /// fallback: one whose capture fails is timed with events (the shape's mode stays: an
    /// algorithm that cannot be captured is found out by the trials, which never adopt it
    /// unreplayed).
    pub fn time(
        &self,
        id: &[u8],
        (calls, sets): (usize, usize),
        run: &dyn Fn(usize) -> Result<()>,
        probe: bool,
    ) -> Result<f64> {
        if self.graph.get() {
            match self.time_graph(id, calls, sets, run) {
                Ok((ms, busy)) => {
                    if !probe {
                        self.graph_samples.set(self.graph_samples.get() + 1);
                        crate::rest::after(self.rest, busy);
                    }
                    return Ok(ms);
                }
                Err(Failure::Work(e)) => return Err(e),
                Err(Failure::Mode(why)) if !probe => self.failed(why),
                Err(Failure::Mode(_)) => {}
            }
        }
        let ms = self.time_events(calls, run)?;
        if !probe {
            crate::rest::after(self.rest, ms * calls.max(1) as f64);
        }
        Ok(ms)
    }

    /// `calls` calls (one per input set at least) captured once, replayed between the
    /// events behind the delay, or behind one untimed replay where there is none; the ms
    /// per call and the device ms the sample kept the device busy.
    fn time_graph(
        &self,
        id: &[u8],
        calls: usize,
        sets: usize,
        run: &dyn Fn(usize) -> Result<()>,
    ) -> std::result::Result<(f64, f64), Failure> {
        let ops = calls.max(sets).max(1);
        if !self.pre_run.borrow().iter().any(|p| p == id) {
            run(0)?;
            self.rt.sync(self.stream)?;
            self.pre_run.borrow_mut().push(id.to_vec());
        }
        let cached = self
            .graphs
            .borrow()
            .iter()
            .position(|g| g.0 == id && g.1 == ops);
        let at = match cached {
            Some(i) => i,
            None => {
                let g = self
                    .rt
                    .capture(self.stream, || (0..ops).try_for_each(run))?;
                // The first launch uploads the graph: not timed.
                g.launch(self.stream)?;
                self.rt.sync(self.stream)?;
                let mut graphs = self.graphs.borrow_mut();
                graphs.push((id.to_vec(), ops, g));
                graphs.len() - 1
            }
        };
        let graphs = self.graphs.borrow();
        let g = &graphs[at].2;
        match self.delay {
            Some(d) => d.enqueue(self.stream, 4)?,
            None => g.launch(self.stream)?,
        }
        let (launched, ms) = self.events.span(self.stream, || g.launch(self.stream))?;
        launched?;
        Ok((ms / ops as f64, busy_ms(ms, self.delay.is_some())))
    }

    /// Milliseconds per call of `calls` back-to-back calls between the events, behind the
    /// delay where there is one.
    fn time_events(&self, calls: usize, run: &dyn Fn(usize) -> Result<()>) -> Result<f64> {
        if let Some(d) = self.delay {
            d.enqueue(self.stream, calls)?;
        }
        let (ran, ms) = self
            .events
            .span(self.stream, || (0..calls).try_for_each(run))?;
        ran?;
        Ok(ms / calls.max(1) as f64)
    }

    /// Graph timing stops for this problem, said once.
    fn failed(&self, why: String) {
        crate::note!(
            "tunedblas: {}: graph timing failed ({why}); timing it with events",
            self.label
        );
        self.graphs.borrow_mut().clear();
        self.graph.set(false);
        *self.failure.borrow_mut() = Some(why);
    }

    /// Destroys the graphs (the screening captures one per candidate).
    pub fn clear_graphs(&self) {
        self.graphs.borrow_mut().clear();
    }

    /// True when graph timing failed after samples were taken with it: they are of two
    /// modes and must not be compared (the shape is timed again with events).
    pub fn mixed(&self) -> bool {
        self.failure.borrow().is_some() && self.graph_samples.get() > 0
    }

    /// The mode samples are taken in: `graph`, `events`, or `events (graph: why not)`.
    pub fn mode_name(&self) -> String {
        match (&*self.failure.borrow(), self.graph.get()) {
            (Some(e), _) => format!("events (graph: {e})"),
            (None, true) => "graph".into(),
            (None, false) => "events".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_follows_what_the_sample_kept_busy() {
        // A graph sample behind a delay keeps the device busy for its timed replay; without
        // one, the untimed replay ahead of it too.
        assert_eq!(busy_ms(0.5, true), 0.5);
        assert_eq!(busy_ms(0.5, false), 1.0);
    }
}
