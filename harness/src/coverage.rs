//! `tunedblas coverage`: which GEMM problems a serving configuration will run, and which of
//! them a profile serves. The model and the report live in `tunedblas_core::coverage`;
//! this is the command line and the files.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tunedblas_core::coverage::{self, ModelOptions, ProfileIndex, Serving, Shape};
use tunedblas_core::key::Types;
use tunedblas_core::profile::REGISTRY_FILE;
use tunedblas_core::registry::Registry;
use tunedblas_core::tunableop;

pub const HELP: &str = "\
tunedblas coverage [--config PATH] [--shapes FILE] [--profile DIR|NAME] [SERVING FLAGS]
                   [--profiles DIR] [--rank R] [--near W] [--dtype T] [--unfused] [--top N] [--json]
                   [--strict] [-- <vLLM command line>]

Predicts the GEMM problems a vLLM configuration puts on the wire, with the reason for every
token count M, and checks each (N, K, M) against a profile: tuned, Default, missing or
unservable, gaps ranked by calls x FLOPs of one step.

SHAPES:
    --config PATH   a Hugging Face config.json (or its folder): Llama, Mistral, Qwen2/3, as
                    vLLM fuses them (qkv_proj, gate_up_proj), split for the TP size
    --unfused       separate q/k/v and gate/up GEMMs instead
    --dtype T       float16, bfloat16 or float32 instead of the config's torch_dtype
    --shapes FILE   lines of N,K[,dtype[,layout[,calls[,name]]]] (name lm_head: sampled
                    tokens only)
    neither         the shapes already in the profile
PROFILE:
    --profile DIR|NAME  a folder of tunableop_results<R>.csv, or a profile name in the store
                    (--profiles DIR, else $TUNEDBLAS_PROFILE_DIR, else the installed one)
    --rank R        which rank file (default 0)
    --near W        the interposer's near-serving window (TUNEDBLAS_NEAR, default 32): missing
                    problems with a tuned row of their layer within W tokens are marked
SERVING FLAGS (also read from a vLLM command line after --):
";

/// Exit status of `--strict` when a predicted problem has no row.
pub const EXIT_MISSING: u8 = 3;
/// Exit status of `--strict` when nothing is missing but some rows cannot be served.
pub const EXIT_UNSERVABLE: u8 = 4;

/// The help text, with the serving flags the core understands.
pub fn help() -> String {
    format!(
        "{HELP}{}\nOUTPUT:\n    --top N (25) gap groups in the text, --json everything\n\nEXIT CODES with --strict: 0 every problem has a row, {EXIT_MISSING} some are missing, {EXIT_UNSERVABLE} none missing\nbut some unservable (without --strict: 0). 1 unreadable input, 2 bad command line.\n\nEXAMPLE (the seed's live configuration):\n    tunedblas coverage --profile rocm10-rocblas5.6 --dynamic-prefill --strict -- \\\n        vllm serve MODEL --block-size 1024 --max-num-batched-tokens 2048\n",
        coverage::SERVING_FLAGS
    )
}

struct Options {
    config: Option<PathBuf>,
    shapes: Option<PathBuf>,
    profile: Option<String>,
    profile_dir: Option<PathBuf>,
    rank: usize,
    dtype: Option<Types>,
    unfused: bool,
    top: usize,
    json: bool,
    strict: bool,
    near: i64,
    serving: Serving,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let (ours, vllm) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &args[args.len()..]),
    };
    let (_, rest) = Serving::from_args(ours)?;
    // A pasted vLLM command line gives its serving flags (the rest of it is ignored); our
    // own flags come later, so they win.
    let (serving, _) = Serving::from_args(&[vllm, ours].concat())?;
    let mut o = Options {
        config: None,
        shapes: None,
        profile: None,
        profile_dir: None,
        rank: 0,
        dtype: None,
        unfused: false,
        top: 25,
        json: false,
        strict: false,
        near: tunedblas_core::near::DEFAULT_WINDOW,
        serving,
    };
    let mut i = 0;
    while i < rest.len() {
        let flag = rest[i].as_str();
        let mut value = || -> Result<String, String> {
            i += 1;
            rest.get(i)
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag {
            "--config" | "--model" => o.config = Some(PathBuf::from(value()?)),
            "--shapes" => o.shapes = Some(PathBuf::from(value()?)),
            "--profile" => o.profile = Some(value()?),
            "--profiles" => o.profile_dir = Some(PathBuf::from(value()?)),
            "--rank" => {
                o.rank = value()?
                    .parse()
                    .map_err(|_| "--rank takes a number".to_string())?
            }
            "--dtype" => {
                let v = value()?;
                o.dtype = Some(
                    coverage::types_from_name(&v)
                        .ok_or_else(|| format!("--dtype {v}: use float16, bfloat16 or float32"))?,
                );
            }
            "--top" => {
                o.top = value()?
                    .parse()
                    .map_err(|_| "--top takes a number".to_string())?
            }
            "--near" => {
                o.near = value()?
                    .parse::<i64>()
                    .ok()
                    .filter(|w| *w >= 0)
                    .ok_or_else(|| "--near takes a token window (0: off)".to_string())?
            }
            "--unfused" => o.unfused = true,
            "--json" => o.json = true,
            "--strict" => o.strict = true,
            other => return Err(format!("coverage: unknown argument {other:?}")),
        }
        i += 1;
    }
    Ok(o)
}

/// The rank file and a label for the profile named by `--profile`.
fn profile_file(o: &Options) -> Result<Option<(String, PathBuf)>, String> {
    let Some(p) = &o.profile else {
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
        let store = o
            .profile_dir
            .clone()
            .or_else(|| std::env::var_os("TUNEDBLAS_PROFILE_DIR").map(PathBuf::from))
            .unwrap_or_else(crate::store::default_root);
        let reg_path = store.join(REGISTRY_FILE);
        let reg = Registry::load(&reg_path).map_err(|e| e.to_string())?;
        let entry = reg.get(p).ok_or_else(|| {
            format!(
                "--profile {p}: neither a folder nor a name in {}",
                reg_path.display()
            )
        })?;
        entry.path_in(&store)
    };
    let file = dir.join(&file_name);
    if !file.is_file() {
        return Err(format!(
            "{} has no {file_name} (use --rank for another rank)",
            dir.display()
        ));
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.clone());
    Ok(Some((format!("{name} rank {}", o.rank), file)))
}

fn run(o: &Options) -> Result<coverage::Report, String> {
    let profile = match profile_file(o)? {
        Some((label, path)) => {
            let file = tunableop::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            Some((label, file))
        }
        None => None,
    };
    let mut shapes: Vec<Shape> = Vec::new();
    let mut sources: Vec<String> = Vec::new();
    if let Some(c) = &o.config {
        let path = if c.is_dir() {
            c.join("config.json")
        } else {
            c.clone()
        };
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let opts = ModelOptions {
            tp: o.serving.tp,
            dtype: o.dtype,
            unfused: o.unfused,
        };
        let (desc, s) = coverage::shapes_from_hf_config(&json, &opts)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        sources.push(desc);
        shapes.extend(s);
    }
    if let Some(f) = &o.shapes {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let default = o
            .dtype
            .unwrap_or_else(|| coverage::types_from_name("float16").expect("known"));
        let s = coverage::shapes_from_file(&text, default)
            .map_err(|e| format!("{}: {e}", f.display()))?;
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
                return Err(
                    "coverage needs shapes: --config, --shapes, or a --profile to take them from"
                        .into(),
                )
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
pub fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{}", help());
        return ExitCode::SUCCESS;
    }
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tunedblas: {e}\n\n{}", help());
            return ExitCode::from(2);
        }
    };
    let report = match run(&o) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tunedblas: {e}");
            return ExitCode::from(1);
        }
    };
    if o.json {
        let j = coverage::to_json(&report);
        println!(
            "{}",
            serde_json::to_string_pretty(&j).expect("plain values")
        );
    } else {
        print!("{}", coverage::render_text(&report, o.top));
    }
    if o.strict {
        if report.count("missing") > 0 {
            return ExitCode::from(EXIT_MISSING);
        }
        if report.count("unservable") > 0 {
            return ExitCode::from(EXIT_UNSERVABLE);
        }
    }
    ExitCode::SUCCESS
}
