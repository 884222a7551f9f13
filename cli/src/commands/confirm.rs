//! `tunedblas confirm`: a profile's tuned rows re-measured against the heuristic in this
//! process, for any library. `tune` runs it as the fresh process that must confirm every
//! adoption by the margin; run by hand, it says how many adopted rows still win.

use serde_json::json;
use tunedblas_tuner::backends::{Library, Session};
use tunedblas_tuner::curate::RowChoice;
use tunedblas_tuner::pipeline::{self, Method};
use tunedblas_tuner::store::Store;
use tunedblas_tuner::with_library;

use crate::args::{self, Args};
use crate::error::{Error, Result};

const ABOUT: &str = "\
Re-measures every tuned row of a profile (or of a --rows file: tune's fresh-process child, a
PyTorch TunableOp file) against the library's heuristic in this process: its numerics first,
judged as tuning judges a candidate's (a row computing a wrong result FAILS and is not timed),
then interleaved trials of the two after the same warm-up. Says how many rows still win (the
false-adopt rate is the rest) and how many by the margin. Rows of another library are skipped.";

const AFTER: &str = "
EXAMPLES:
    tunedblas confirm --lib libcublasLt.so.13
    tunedblas confirm --lib libhipblaslt.so.1 --workspace 33554432 --rows tunableop_results0.csv
";

const OPTIONS: &str = "\
--lib LIB    the library the rows are for (required)
--rows FILE  a results file (else the build's profile)
--profiles
--device N   the device to measure on (default 0)
--log FILE   write every row's measurement as JSON
";

pub fn cli() -> clap::Command {
    let c = args::command("confirm", ABOUT, AFTER).args(args::table(OPTIONS));
    args::method_options(args::library_options(c))
}

pub fn run(a: &Args) -> Result<()> {
    let margin = a.rules()?.margin;
    let device = a.parsed("--device", 0, "a device number")?;
    let opened = a.opened()?;
    let m = a.method_for(opened.kind())?;
    let out = with_library!(&opened, l => {
        let text = match a.path("--rows") {
            Some(f) => std::fs::read_to_string(&f)
                .map_err(|e| Error::failed(format!("cannot read {}: {e}", f.display())))?,
            None => {
                let store = Store::existing(&a.profile_store())?;
                store.read_text(&store.existing_folder(l.build())?)?
            }
        };
        measure(l, &text, device, &m, margin)?
    });
    let wins = out
        .iter()
        .filter(|r| r["delta"].as_f64().is_some_and(|d| d < 0.0))
        .count();
    let confirmed = out
        .iter()
        .filter(|r| r["delta"].as_f64().is_some_and(|d| -d >= margin))
        .count();
    let failed = out.iter().filter(|r| !r["error"].is_null()).count();
    println!(
        "confirm: {wins} of {} tuned rows still win ({} false adopts{}; {confirmed} by the {:.0}% margin)",
        out.len(),
        out.len() - wins - failed,
        match failed {
            0 => String::new(),
            n => format!(", {n} could not run"),
        },
        margin * 100.0
    );
    if let Some(log) = a.path("--log") {
        let v = json!({ "method": m, "rows": out });
        std::fs::write(&log, serde_json::to_vec_pretty(&v).expect("plain values"))
            .map_err(|e| Error::failed(format!("{}: {e}", log.display())))?;
    }
    Ok(())
}

/// Every tuned row of `text` that is `lib`'s, measured on `device`; one JSON object each,
/// said as it is measured.
fn measure<L: Library>(
    lib: &L,
    text: &str,
    device: i32,
    m: &Method,
    margin: f64,
) -> Result<Vec<serde_json::Value>> {
    let rows = lib.read(text);
    let mine: Vec<&(L::Key, String, Option<f64>)> = rows
        .iter()
        .filter(|(_, s, _)| matches!(lib.row(s), RowChoice::Mine(_)))
        .collect();
    let other = rows
        .iter()
        .filter(|(_, s, _)| matches!(lib.row(s), RowChoice::Foreign(_)))
        .count();
    if other > 0 {
        crate::say::note!(
            "tunedblas confirm: {other} rows are not {}'s and are skipped",
            lib.kind().name()
        );
    }
    let session = lib.session(device)?;
    let mut out = Vec::new();
    for (key, solution, _) in mine {
        let shape = lib.key_text(key);
        let measured = session
            .bench(key, m)
            .map_err(|e| e.message)
            .and_then(|b| pipeline::measure_pair(&b, solution, m));
        println!(
            "{shape} {solution}: {}",
            match &measured {
                Err(e) => format!("FAILED: {e}"),
                Ok(p) => format!(
                    "heuristic {:.5} ms, tuned {:.5} ms, {:+.1}% (spread {:.1}%) {}",
                    p.heuristic_ms,
                    p.tuned_ms,
                    p.delta * 100.0,
                    p.spread * 100.0,
                    match p.delta {
                        d if -d >= margin => "still wins by the margin",
                        d if d < 0.0 => "still wins, under the margin",
                        _ => "FALSE ADOPT",
                    }
                ),
            }
        );
        out.push(match measured {
            Ok(p) => json!({ "shape": shape, "solution": solution, "delta": p.delta, "pair": p, "error": null }),
            Err(e) => json!({ "shape": shape, "solution": solution, "delta": null, "error": e }),
        });
    }
    Ok(out)
}
