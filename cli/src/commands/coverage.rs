//! `tunedblas coverage`: which GEMM problems a serving configuration will run, and which of
//! them a profile serves. The model is `tunedblas_core::coverage`; this is the command
//! line, the files, and (through `render::coverage`) how the report reads.

use std::path::{Path, PathBuf};

use tunedblas_core::coverage::{self, ModelOptions, ProfileIndex, Serving, Shape};
use tunedblas_core::key::Types;
use tunedblas_core::tunableop;

use crate::args::{self, Args};
use crate::error::{Error, Result};
use crate::render;
use crate::serving;

const ABOUT: &str = "\
Predicts the GEMM problems a vLLM configuration puts on the wire, with the reason for every
token count M, and checks each (N, K, M) against a profile: tuned, Default, missing or
unservable, gaps ranked by calls x FLOPs of one step. Shapes come from --config, or
--shapes, or else the profile's own rows.";

/// Exit status of `--strict` when a predicted problem has no row.
pub const EXIT_MISSING: u8 = 3;
/// Exit status of `--strict` when nothing is missing but some rows cannot be served.
pub const EXIT_UNSERVABLE: u8 = 4;

const OPTIONS: &str = "\
--unfused           separate q/k/v and gate/up GEMMs instead
--dtype T           float16, bfloat16 or float32 instead of the config's torch_dtype
--shapes FILE       lines of N,K[,dtype[,layout[,calls[,name]]]] (name lm_head: sampled tokens only)
--profile DIR|NAME  a folder of tunableop_results<R>.csv, or a profile name in the store
--profiles
--rank R            which rank file (default 0)
--near W            the interposer's near-serving window (TUNEDBLAS_NEAR, default 32): missing problems with a tuned row of their layer within W tokens are marked
--top N             gap groups in the text (default 25)
--json              everything as JSON
--strict            exit 3 when some problem has no row, 4 when only unservable ones remain
--out FILE          the missing problems, most expensive first, as a `tunedblas tune` input
";

/// The command line of `coverage`. The serving flags are read in vLLM's own way by
/// `serving` (before clap, `-tp` included); they are declared here too, hidden, so clap
/// suggests them for a misspelt one, and listed in the help from `serving::HELP`.
fn cli() -> clap::Command {
    use args::{option, switch};
    let after = format!(
        "SERVING FLAGS (also read from a vLLM command line after --):\n{}\n\nEXIT CODES with --strict: 0 every problem has a row, {EXIT_MISSING} some are missing, {EXIT_UNSERVABLE} none missing\nbut some unservable (without --strict: 0). 1 unreadable input, 2 bad command line.\n\nEXAMPLE (the seed's live configuration):\n    tunedblas coverage --profile rocm10-rocblas5.6 --dynamic-prefill --strict -- \\\n        vllm serve MODEL --block-size 1024 --max-num-batched-tokens 2048\n",
        serving::HELP
    );
    let mut c = args::command("coverage", ABOUT, after)
        .arg(option(
            "--config",
            "PATH",
            "a Hugging Face config.json (or its folder): Llama, Mistral, Qwen2/3, as vLLM fuses them (qkv_proj, gate_up_proj), split for the TP size",
        ))
        .arg(option("--model", "PATH", "the same as --config").hide(true))
        .args(args::table(OPTIONS));
    for flag in serving::SWITCHES {
        c = c.arg(switch(flag, "a serving flag").hide(true));
    }
    for flag in serving::VALUE_FLAGS {
        c = c.arg(option(flag, "V", "a serving flag").hide(true));
    }
    c
}

pub fn help() -> String {
    args::help_text(cli())
}

/// The arguments, with those that must be checked before any work read already.
struct Options {
    a: Args,
    serving: Serving,
    rank: usize,
    dtype: Option<Types>,
    top: usize,
    near: i64,
}

fn parse(args: &[String]) -> Result<Options> {
    let (ours, vllm) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &args[args.len()..]),
    };
    let (_, rest) = serving::from_args(ours)?;
    // A pasted vLLM command line gives its serving flags (the rest of it is ignored); our
    // own flags come later, so they win.
    let (serving, _) = serving::from_args(&[vllm, ours].concat())?;
    let a = Args::of_declared("coverage", cli(), &rest)?;
    let dtype = match a.value("--dtype") {
        None => None,
        Some(v) => Some(
            coverage::types_from_name(v)
                .ok_or_else(|| a.usage(format!("--dtype {v}: use float16, bfloat16 or float32")))?,
        ),
    };
    let near = match a.value("--near") {
        None => tunedblas_core::near::DEFAULT_WINDOW,
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|w| *w >= 0)
            .ok_or_else(|| a.usage("--near takes a token window (0: off)"))?,
    };
    Ok(Options {
        rank: a.parsed("--rank", 0, "a number")?,
        top: a.parsed("--top", 25, "a number")?,
        dtype,
        near,
        serving,
        a,
    })
}

/// The rank file and a label for the profile named by `--profile`.
fn profile_file(o: &Options) -> Result<Option<(String, PathBuf)>> {
    let Some(p) = o.a.value("--profile") else {
        return Ok(None);
    };
    let file_name = format!("tunableop_results{}.csv", o.rank);
    let as_path = Path::new(p);
    let dir = if as_path.is_dir() {
        as_path.to_path_buf()
    } else if as_path.is_file() {
        let name = as_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Ok(Some((name, as_path.to_path_buf())));
    } else {
        crate::pick::pick(crate::pick::Which::Name(p), &o.a.profile_store())?.dir
    };
    let file = dir.join(&file_name);
    if !file.is_file() {
        return Err(Error::failed(format!(
            "{} has no {file_name} (use --rank for another rank)",
            dir.display()
        )));
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.to_string());
    Ok(Some((format!("{name} rank {}", o.rank), file)))
}

fn analyse(o: &Options) -> Result<coverage::Report> {
    let profile = match profile_file(o)? {
        Some((label, path)) => {
            let file = tunableop::read(&path)
                .map_err(|e| Error::failed(format!("{}: {e}", path.display())))?;
            Some((label, file))
        }
        None => None,
    };
    let mut shapes: Vec<Shape> = Vec::new();
    let mut sources: Vec<String> = Vec::new();
    if let Some(c) = o.a.path("--config").or_else(|| o.a.path("--model")) {
        let path = if c.is_dir() {
            c.join("config.json")
        } else {
            c.clone()
        };
        let text = read_text(&path)?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::failed(format!("{}: {e}", path.display())))?;
        let opts = ModelOptions {
            tp: o.serving.tp,
            dtype: o.dtype,
            unfused: o.a.has("--unfused"),
        };
        let (desc, s) = coverage::shapes_from_hf_config(&json, &opts)
            .map_err(|e| Error::failed(format!("{}: {e}", path.display())))?;
        sources.push(desc);
        shapes.extend(s);
    }
    if let Some(f) = &o.a.path("--shapes") {
        let text = read_text(f)?;
        let default = o
            .dtype
            .unwrap_or_else(|| coverage::types_from_name("float16").expect("known"));
        let s = coverage::shapes_from_file(&text, default)
            .map_err(|e| Error::failed(format!("{}: {e}", f.display())))?;
        sources.push(format!("{} shapes from {}", s.len(), f.display()));
        shapes.extend(s);
    }
    if shapes.is_empty() {
        match &profile {
            Some((label, file)) => {
                shapes = coverage::shapes_from_profile(file);
                sources.push(format!("the shapes in {label}"));
            }
            None => {
                return Err(Error::failed(
                    "coverage needs shapes: --config, --shapes, or a --profile to take them from",
                ))
            }
        }
    }
    let shapes = coverage::merge_shapes(shapes);
    let index = profile
        .as_ref()
        .map(|(l, f)| (l.as_str(), ProfileIndex::new(f)));
    Ok(coverage::analyse(
        &sources.join("; "),
        shapes,
        &o.serving,
        index.as_ref().map(|(l, ix)| (*l, ix)),
        o.near,
    ))
}

/// Runs `tunedblas coverage` with the arguments after the command name.
pub fn run(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let report = analyse(&o)?;
    if let Some(out) = &o.a.path("--out") {
        write_tune_input(out, &report)?;
    }
    if o.a.has("--json") {
        super::print_json(&render::coverage::json(&report));
    } else {
        print!("{}", render::coverage::text(&report, o.top));
    }
    if o.a.has("--strict") {
        let missing = report.count("missing");
        if missing > 0 {
            return Err(Error::verdict(
                EXIT_MISSING,
                format!("coverage --strict: {missing} predicted problems have no row"),
            ));
        }
        let unservable = report.count("unservable");
        if unservable > 0 {
            return Err(Error::verdict(
                EXIT_UNSERVABLE,
                format!("coverage --strict: {unservable} predicted problems have rows that cannot be served"),
            ));
        }
    }
    Ok(())
}

/// `--out FILE`: every predicted problem with no row, most expensive first, as PyTorch
/// untuned-file lines (`op_name,param_signature`), which `tunedblas tune` reads.
fn write_tune_input(out: &Path, report: &coverage::Report) -> Result<()> {
    let mut text = String::new();
    let mut count = 0;
    for p in report
        .problems
        .iter()
        .filter(|p| matches!(p.status, coverage::Status::Missing))
    {
        let (op, sig) = tunableop::op_and_signature(&p.key);
        text.push_str(&format!("{op},{sig}\n"));
        count += 1;
    }
    std::fs::write(out, text)
        .map_err(|e| Error::failed(format!("cannot write {}: {e}", out.display())))?;
    crate::say::note!(
        "tunedblas: {count} predicted problems with no row written to {} (tunedblas tune --lib <librocblas.so> {} tunes them)",
        out.display(),
        out.display()
    );
    Ok(())
}

/// A model config or shape list given on the command line, read as text if it is a regular
/// file of at most 64 MB (a FIFO blocked the command, a link to `/dev/zero` exhausted it).
fn read_text(path: &std::path::Path) -> Result<String> {
    crate::export::regular_text(path, tunedblas_core::profile::MAX_JSON_FILE_BYTES)
        .map_err(|e| Error::failed(format!("{}: {e}", path.display())))
}
