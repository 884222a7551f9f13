//! `tunedblas report`: a profile at a glance, as an HTML page, a PNG and JSON.

use std::path::{Path, PathBuf};

use crate::shapes::Reads as _;
use serde_json::Value;
use tunedblas_core::key::ProblemKey;

use crate::args::{self, Args};
use crate::error::{Error, Result};
use crate::shapes;
use crate::style::{self, Colour};
use crate::{export, report};

use super::print_json;

const ABOUT: &str = "\
Writes a self-contained HTML page (inline SVG and CSS; it loads nothing from the network)
and the same figures as a PNG, for terminals and issues:
  - a coverage map: one row per layer (N, K), a cell only at the token counts M the layer
    was seen at: a profile row, a miss in production (--misses, with its calls) or a
    problem the serving configuration issues (--coverage). Each cell is tuned, Default,
    near (no row; the interposer's own near rule tries a nearby row of the layer within
    TUNEDBLAS_NEAR tokens, once rocBLAS validates it for the exact problem at run time),
    missed (the heuristic serves it) or predicted (no row, not seen in production);
    every other (layer, M) is never seen;
  - the headline: GEMM time saved, call-weighted (calls x measured heuristic and served
    times from provenance.json), next to the per-shape geometric mean of the tuned rows;
    the shapes whose measurement decided nothing (undecidable, noisy, rejected, failed);
    where the --misses run counted a measured shape, its calls weigh it, else the calls
    recorded before tuning (the headline says which);
  - a speedup bar per tuned shape, the largest first;
  - \"tune next\": missed and predicted shapes ranked by calls x FLOPs, each with its --shape
    (TYPE:AB:m:n:k in rocBLAS's order, as tune takes it: N, then the token count M, then K),
    and the tune command with this report's --lib and --profiles.";

const AFTER: &str = "\
EXAMPLE:
    tunedblas report --lib /opt/rocm/lib/librocblas.so.5 --misses ~/.cache/tunedblas/misses
";

const OPTIONS: &str = "\
--lib LIB        the rocBLAS build whose profile is shown (the report draws rocBLAS profiles)
--profile NAME   the profile to show, by name (instead of --lib)
--profiles
--out FILE.html  the page (default tunedblas-report-<profile>.html)
--png FILE.png   the figure (default: the HTML file's name with .png)
--no-png         write no PNG
--misses DIR     miss logs (or any tune input): what production missed, with calls (repeatable)
--coverage FILE  `tunedblas coverage --json` output: the problems a serving configuration issues (repeatable)
--rank N         the rank file to show (default 0)
--json           the figures as JSON on stdout (the page embeds the same JSON)
";

pub fn cli() -> clap::Command {
    args::command("report", ABOUT, AFTER).args(args::table(OPTIONS))
}

/// The problems of a `tunedblas coverage --json` file.
fn predicted(path: &Path) -> Result<Vec<ProblemKey>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::failed(format!("cannot read {}: {e}", path.display())))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        Error::failed(format!(
            "{}: not the JSON of `tunedblas coverage --json`: {e}",
            path.display()
        ))
    })?;
    let problems = v["problems"].as_array().ok_or_else(|| {
        Error::failed(format!(
            "{}: no \"problems\"; give the output of `tunedblas coverage --json`",
            path.display()
        ))
    })?;
    Ok(problems
        .iter()
        .filter_map(|p| ProblemKey::line(p["op"].as_str()?, p["signature"].as_str()?).ok())
        .collect())
}

pub fn run(a: &Args) -> Result<()> {
    let p = a.picked()?;
    // The map, the near rule and "tune next" speak rocBLAS's keys; an Lt profile's rows
    // would all be left out, and a page of zeros reads as a profile that serves nothing.
    p.expect_library("rocblas", "report")?;
    let rank: usize = a.parsed("--rank", 0, "a rank number")?;
    let inputs: Vec<PathBuf> = a
        .values("--misses")
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let mut seen = report::Seen {
        miss_inputs: a.values("--misses").into_iter().map(String::from).collect(),
        lib: a.value("--lib").unwrap_or_default().to_string(),
        profiles: a.value("--profiles").map(String::from),
        ..report::Seen::default()
    };
    if !inputs.is_empty() {
        seen.missed = shapes::collect(&inputs, &[], true)?.shapes;
    }
    for f in a.values("--coverage") {
        seen.predicted.extend(predicted(Path::new(f))?);
    }
    let data = report::build(&p, rank, &seen, report::near_window())?;
    let html_path = a
        .path("--out")
        .unwrap_or_else(|| PathBuf::from(format!("tunedblas-report-{}.html", p.name)));
    export::write(&html_path, report::html(&data))?;
    let png_path = (!a.has("--no-png")).then(|| {
        a.path("--png")
            .unwrap_or_else(|| html_path.with_extension("png"))
    });
    if let Some(pp) = &png_path {
        export::write(pp, report::png(&data).png())?;
    }
    if a.has("--json") {
        print_json(&serde_json::json!({
            "html": html_path, "png": png_path, "png_cell": report::png_cell(data.columns.len()), "report": data,
        }));
        return Ok(());
    }
    summary(&data, p.short());
    println!(
        "wrote {}{}",
        html_path.display(),
        png_path.map_or(String::new(), |p| format!(" and {}", p.display()))
    );
    Ok(())
}

/// The report in a few lines for the terminal.
fn summary(data: &report::Data, build: &str) {
    let on = style::enabled(style::STDOUT);
    let c = &data.counts;
    println!(
        "profile '{}' (rocBLAS {}, build {}): {} tuned, {} Default, {} near, {} missed, {} predicted over {} layers ({} (layer, M) never seen)",
        data.profile,
        data.rocblas.as_deref().unwrap_or("unknown"),
        build,
        style::paint(&c.tuned.to_string(), Colour::Green, on),
        style::paint(&c.default.to_string(), Colour::Grey, on),
        c.near,
        style::paint(&c.missed.to_string(), Colour::Red, on),
        c.predicted,
        data.rows.len(),
        c.never_seen,
    );
    println!("{}", report::headline_text(&data.headline));
    for d in &data.headline.doubts {
        println!(
            "  decided nothing: {} M={}: {} {}",
            d.label, d.m, d.decision, d.reason
        );
    }
    let t = &data.tune_next;
    if !t.items.is_empty() {
        println!("tune next ({}):", report::SPEC_ORDER);
        for (i, n) in t.items.iter().enumerate() {
            println!(
                "  {:>2}. {} M={} ({}, {} calls){}",
                i + 1,
                n.label,
                n.m,
                n.status.class(),
                n.calls,
                n.spec
                    .as_ref()
                    .map_or(String::new(), |s| format!(": --shape {s}"))
            );
        }
        for c in [&t.command, &t.all_missed].into_iter().flatten() {
            println!("  {}", style::paint(c, Colour::Bold, on));
        }
    }
}
