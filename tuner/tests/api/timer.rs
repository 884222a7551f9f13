//! How a sample is timed (`tunedblas_tuner::timer`) through its public API, on the CUDA
//! runtime stand-in (no graphs: graph timing falls back to events).

use tunedblas_tuner::error::Error;
use tunedblas_tuner::timer::{Mode, Timer};

use crate::stand_ins::cuda_runtime;

#[test]
fn timing_mode_argument() {
    assert_eq!(Mode::parse("graph"), Ok(Mode::Graph));
    assert_eq!(Mode::parse("events"), Ok(Mode::Events));
    let e = Mode::parse("cupti").unwrap_err();
    assert!(e.contains("--timing") && e.contains("cupti"), "{e}");
    assert_eq!(serde_json::to_string(&Mode::Graph).unwrap(), "\"graph\"");
    assert_eq!(Mode::Events.name(), "events");
}

#[test]
fn graph_only_where_capture_works() {
    // The CUDA stand-in has no graph calls: graph timing is events, said with why.
    let rt = cuda_runtime();
    let t = Timer::new(&rt, Mode::Graph, 0.0, None, "shape".into()).unwrap();
    assert_eq!(
        t.mode_name(),
        "events (graph: the CUDA runtime has no stream capture and graph calls)"
    );
    assert!(!t.mixed(), "no graph sample was taken before the fallback");
    let ms = t.time(b"a", (3, 1), &|_| Ok(()), false).unwrap();
    assert!(ms >= 0.0);
    let e = Timer::new(&rt, Mode::Events, 0.0, None, "shape".into()).unwrap();
    assert_eq!(e.mode_name(), "events");
    // A failing call is the algorithm's error, in either mode.
    let fail = |_| Err(Error::failed("refused"));
    for probe in [false, true] {
        let e = t.time(b"b", (2, 1), &fail, probe).unwrap_err();
        assert_eq!(e.message, "refused");
    }
}

#[test]
fn a_rest_leaves_the_device_idle_for_its_multiple_of_each_sample() {
    let rt = cuda_runtime();
    let t = Timer::new(&rt, Mode::Events, 2.0, None, "shape".into()).unwrap();
    // Each call keeps the stand-in's "device" (the host) busy for a millisecond.
    let busy = |_| {
        std::thread::sleep(std::time::Duration::from_millis(1));
        Ok(())
    };
    let t0 = std::time::Instant::now();
    let mut device_ms = 0.0;
    for _ in 0..5 {
        device_ms += 4.0 * t.time(b"a", (4, 1), &busy, false).unwrap();
    }
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    // The samples themselves, then twice their time idle after each.
    assert!(device_ms >= 20.0, "{device_ms}");
    assert!(
        wall >= 3.0 * device_ms * 0.99,
        "{wall} ms for {device_ms} ms of samples"
    );
}
