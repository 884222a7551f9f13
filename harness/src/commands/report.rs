//! `tunedblas report`: a profile at a glance, as an HTML page and a PNG.

use std::path::PathBuf;

use tunedblas_core::key::ProblemKey;

use crate::args::Args;
use crate::error::{Error, Result};
use crate::pick::pick;
use crate::report;
use crate::shapes;
use crate::style::{self, Colour};

use super::print_json;

pub const HELP: &str = "\
tunedblas report (--lib LIBROCBLAS | --profile NAME) [--out FILE.html] [--png FILE.png] [options]

Writes a self-contained HTML page (inline SVG and CSS; it loads nothing from the network)
and the same figures as a PNG, for terminals and issues:
  - a coverage map: one row per (N, K) layer shape, one column per token count M seen in
    the profile or the recorded misses; each cell tuned (a rocBLAS solution row or a
    matching `*` row), Default (the heuristic was best), near (no row, but the layer's
    nearest row within TUNEDBLAS_NEAR tokens is tried) or missing;
  - a speedup bar per tuned shape: heuristic time over served time, from the latest
    campaign in provenance.json that measured it.

OPTIONS:
    --profiles DIR   the profile store (see `tunedblas help`)
    --out FILE.html  default tunedblas-report-<profile>.html
    --png FILE.png   default: the HTML file's name with .png; --no-png for none
    --misses DIR     miss logs (or any tune input) whose shapes count as missing cells
    --rank N         the rank file to show (default 0)
    --json           the figures as JSON on stdout

EXAMPLE:
    tunedblas report --lib /opt/rocm/lib/librocblas.so.5 --misses ~/.cache/tunedblas/misses
";

pub fn help() -> String {
    HELP.into()
}

pub fn run(args: &[String]) -> Result<()> {
    let a = Args::parse(
        "report",
        args,
        &["--json", "--no-png"],
        &[
            "--lib",
            "--profile",
            "--profiles",
            "--out",
            "--png",
            "--rank",
            "--misses",
        ],
    )?;
    a.at_most_positional(0)?;
    let p = pick(a.which_profile()?, &a.profile_store())?;
    let rank: usize = a.parsed("--rank", 0, "a rank number")?;
    let inputs: Vec<PathBuf> = a
        .values("--misses")
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let missed: Vec<ProblemKey> = if inputs.is_empty() {
        Vec::new()
    } else {
        shapes::collect(&inputs, &[])?
            .shapes
            .into_iter()
            .map(|s| s.key)
            .collect()
    };
    let data = report::build(&p, rank, &missed, report::near_window())?;
    let html_path = a
        .path("--out")
        .unwrap_or_else(|| PathBuf::from(format!("tunedblas-report-{}.html", p.name)));
    let write = |path: &PathBuf, bytes: &[u8]| -> Result<()> {
        if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::failed(format!("cannot create {}: {e}", d.display())))?;
        }
        std::fs::write(path, bytes)
            .map_err(|e| Error::failed(format!("cannot write {}: {e}", path.display())))
    };
    write(&html_path, report::html(&data).as_bytes())?;
    let png_path = (!a.has("--no-png")).then(|| {
        a.path("--png")
            .unwrap_or_else(|| html_path.with_extension("png"))
    });
    if let Some(pp) = &png_path {
        write(pp, &report::png(&data).png())?;
    }
    if a.has("--json") {
        print_json(&serde_json::json!({
            "html": html_path, "png": png_path, "png_cell": report::png_cell(data.columns.len()), "report": data,
        }));
        return Ok(());
    }
    let on = style::enabled(style::STDOUT);
    let c = &data.counts;
    println!(
        "profile '{}' (rocBLAS {}, build {}): {} tuned, {} Default, {} near, {} missing over {} (N, K) rows x {} token counts",
        data.profile,
        data.rocblas.as_deref().unwrap_or("unknown"),
        p.short(),
        style::paint(&c.tuned.to_string(), Colour::Green, on),
        style::paint(&c.default.to_string(), Colour::Grey, on),
        c.near,
        style::paint(&c.missing.to_string(), Colour::Red, on),
        data.rows.len(),
        data.columns.len()
    );
    if let Some(g) = report::geomean(&data.bars) {
        let best = data.bars.iter().map(|b| b.speedup).fold(0.0, f64::max);
        println!(
            "speedup over the heuristic: geometric mean {} (best {best:.2}x) across {} measured shapes",
            style::paint(&format!("{g:.2}x"), Colour::Bold, on),
            data.bars.len()
        );
    }
    println!(
        "wrote {}{}",
        html_path.display(),
        png_path.map_or(String::new(), |p| format!(" and {}", p.display()))
    );
    Ok(())
}
