//! `tunedblas env`: what the interposer would do here, and deployment snippets.

use std::path::{Path, PathBuf};

use crate::args::{self, Args};
use crate::env;
use crate::error::Result;
use crate::style::{self, Colour};

use super::print_json;

const ABOUT: &str = "\
Prints what the interposer would do here: where libtunedblas.so is, every TUNEDBLAS_*
setting with its effective value and whether it comes from the environment or the
default, and, for each rocBLAS found ($ROCM_PATH/lib, /opt/rocm/lib, LD_LIBRARY_PATH, or
--lib), the profile a process loading it would get and why. Then copy-paste snippets with
this installation's paths: a vLLM launcher script, a systemd unit and a Dockerfile.";

const AFTER: &str = "\
EXAMPLES:
    tunedblas env
    tunedblas env --lib ~/venv/lib/python3.12/site-packages/torch/lib/librocblas.so
    tunedblas env --snippet vllm > vllm-tuned && chmod +x vllm-tuned
";

const OPTIONS: &str = "\
--lib LIB       a rocBLAS (or hipBLASLt) to answer for, besides those found (repeatable)
--profiles
--snippet KIND  print one snippet only
--json          everything as JSON
";

pub fn cli() -> clap::Command {
    let c = args::command("env", ABOUT, AFTER).args(args::table(OPTIONS));
    args::choices(c, "--snippet", ["vllm", "systemd", "docker"])
}

pub fn run(a: &Args) -> Result<()> {
    let profile_dir = a.profile_store();
    let preload = tunedblas_tuner::dl::beside_exe("libtunedblas.so")
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p));
    let prefix = preload
        .as_deref()
        .and_then(Path::parent)
        .filter(|d| d.file_name().is_some_and(|n| n == "lib"))
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    let given: Vec<PathBuf> = a.values("--lib").into_iter().map(PathBuf::from).collect();
    let libraries: Vec<env::Found> = env::candidates(&given)
        .iter()
        .map(|l| env::which(&profile_dir, l))
        .collect();
    let shown_preload = preload
        .clone()
        .unwrap_or_else(|| PathBuf::from("/path/to/libtunedblas.so"));
    let profile_dir_abs = std::fs::canonicalize(&profile_dir).unwrap_or(profile_dir.clone());
    let snips = env::snippets(&shown_preload, &profile_dir_abs, prefix.as_deref());
    if let Some(which) = a.value("--snippet") {
        // clap took only these three.
        let text = match which {
            "vllm" => &snips.vllm,
            "systemd" => &snips.systemd,
            _ => &snips.docker,
        };
        print!("{text}");
        return Ok(());
    }
    let mut settings = env::settings(&profile_dir_abs);
    if a.has("--profiles") {
        settings[0].source = "--profiles";
    }
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect();
    let (_, problems) = tunedblas_core::settings::Switches::read(
        |n| std::env::var(n).ok(),
        names.iter().map(String::as_str),
        tunedblas_core::near::DEFAULT_WINDOW,
    );
    let report = env::Report {
        version: crate::VERSION,
        problems,
        preloaded_now: env::var("LD_PRELOAD").is_some_and(|v| v.contains("libtunedblas")),
        preload,
        settings,
        libraries,
        snippets: snips,
    };
    if a.has("--json") {
        print_json(&report);
        return Ok(());
    }
    let on = style::enabled(style::STDOUT);
    let bold = |s: &str| style::paint(s, Colour::Bold, on);
    println!("tunedblas {}\n", report.version);
    println!("{}", bold("interposer"));
    match &report.preload {
        Some(p) => println!("  {}", p.display()),
        None => println!(
            "  libtunedblas.so is not beside this binary (nor in ../lib): build or install it"
        ),
    }
    println!(
        "  {}",
        if report.preloaded_now {
            "LD_PRELOAD includes it in this shell"
        } else {
            "not in LD_PRELOAD in this shell"
        }
    );
    println!("\n{}", bold("settings (as the interposer reads them)"));
    for s in &report.settings {
        let src = if s.source == "environment" {
            style::paint("set", Colour::Green, on)
        } else {
            style::paint("default", Colour::Grey, on)
        };
        println!("  {:<26} {:<8} {}", s.name, src, s.value);
        println!(
            "  {:<26} {:<8} {}",
            "",
            "",
            style::paint(s.meaning, Colour::Grey, on)
        );
    }
    for p in &report.problems {
        println!("  {} {p}", style::paint("warning:", Colour::Red, on));
    }
    println!(
        "\n{}",
        bold("rocBLAS and hipBLASLt on this machine, and the profile each would get")
    );
    if report.libraries.is_empty() {
        println!("  none found in $ROCM_PATH/lib, /opt/rocm/lib or LD_LIBRARY_PATH; name one with --lib (PyTorch wheels: site-packages/torch/lib/librocblas.so, libhipblaslt.so)");
    }
    for f in &report.libraries {
        let build = f
            .sha256
            .as_deref()
            .map_or("?".to_string(), |s| s[..12].to_string());
        let verdict = match &f.profile {
            Some(p) => style::paint(&format!("profile '{p}'"), Colour::Green, on),
            None => style::paint("no profile", Colour::Red, on),
        };
        println!(
            "  {} ({}, build {build})\n    -> {verdict}: {}",
            f.library.display(),
            f.kind,
            f.reason
        );
    }
    let s = &report.snippets;
    for (title, text) in [
        ("vLLM launcher", &s.vllm),
        ("systemd unit", &s.systemd),
        ("Dockerfile", &s.docker),
    ] {
        print!("\n{}\n{text}", bold(title));
    }
    println!("\n(one snippet alone: tunedblas env --snippet vllm|systemd|docker)");
    Ok(())
}
