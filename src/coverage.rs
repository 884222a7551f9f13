//! Coverage: which GEMM problems a serving configuration puts on the wire, and which of them
//! a profile serves.
//!
//! Three parts, each pure and unit-tested:
//! - **Shapes** ([`Shape`]): the layers, as problem families (everything but the token
//!   count), from a Hugging Face `config.json` ([`shapes_from_hf_config`]), from a shapes
//!   file ([`shapes_from_file`]), or from the rows already in a profile
//!   ([`shapes_from_profile`]).
//! - **The token grid** ([`Serving`], [`grid`]): the token counts (rocBLAS `n`, the "M" of
//!   the seed's tables) the server runs, each with the reasons it occurs, from vLLM's flags
//!   plus the seed's dynamic-prefill ladder.
//! - **The check** ([`analyse`]): every (shape, M) looked up in a profile
//!   ([`ProfileIndex`]) as tuned, `Default`, missing or unservable, ranked by the cost of one
//!   step at that M (calls per step x FLOPs), rendered as text ([`render_text`]) or JSON
//!   ([`to_json`]).
//!
//! # What vLLM runs (the model behind the grid)
//!
//! - Linear layers are fused as vLLM builds them: `qkv_proj` (q, k and v heads of this
//!   tensor-parallel rank in one GEMM), `o_proj`, `gate_up_proj` (gate and up in one GEMM),
//!   `down_proj`; `lm_head` over the vocabulary padded to a multiple of 64. Column-parallel
//!   layers split N across ranks, row-parallel ones split K; k/v heads fewer than the ranks
//!   are replicated (one per rank).
//! - Decode steps are replayed from CUDA/HIP graphs: the GEMMs reach the library once per
//!   capture size (default 1, 2, 4, multiples of 8 up to 256, then of 16 up to
//!   `min(2 x max_num_seqs x (1 + spec tokens), 512)`). With `k` speculative (MTP) tokens a
//!   verify step of `r` requests runs `r (k + 1)` tokens (3, 6, 12, 24 for MTP2). Without
//!   graphs (`--enforce-eager`) every batch size up to `--max-num-seqs` runs as it is.
//! - Prefill is chunked to the token budget `--max-num-batched-tokens`; chunks of whole
//!   blocks (`--block-size`) up to the budget, as the seed's checker models them.
//!   `--long-prefill-token-threshold L` caps each long prompt at `L` tokens a step, so one to
//!   several such chunks share a step (`j x L`).
//! - The dynamic-prefill controller (the seed's fork) moves a single request's chunk cap
//!   along its rungs (256 / 512 / 1024), and with more than one eligible request caps each
//!   at the shared cap (512), lower at more eligible requests (256 at 8): `j x cap`.
//! - Decodes run in the same step as a prefill chunk: `M = chunk + d (k + 1)` for
//!   `d = 1..mix_decodes` when the chunk is capped below the budget (at the budget the chunk
//!   shrinks instead). With piecewise graphs (vLLM's default) any step of at most the largest
//!   capture size is padded up to the next capture size; above it, it runs eagerly.
//! - Logits are computed eagerly on the sampled tokens only: `lm_head` sees every count
//!   from 1 to `max_num_seqs` (x (k + 1) when verifying).
//! - Prompt tails (the last chunk of each prompt) can be any length; no grid enumerates
//!   them. Near-shape serving is what covers those.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::abi;
use crate::family::{self, family_of, instantiate};
use crate::key::{ProblemKey, Trans, Types};
use crate::near::NearIndex;
use crate::table::{Action, Table};
use crate::tunableop::{self, KeyParse, KeyPattern, ResultsFile, Solution};

// ---- Shapes ---------------------------------------------------------------------------------

/// Which token grid a layer sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// A layer of the transformer body: every token of the step.
    Body,
    /// The logits projection: only the sampled tokens, eagerly.
    LmHead,
}

/// One GEMM family the model runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// What runs it (`qkv_proj`, `down_proj`, `lm_head`, a profile row, ...).
    pub name: String,
    /// The problem with the token count taken out ([`family::family_of`]).
    pub family: ProblemKey,
    /// GEMM calls of this family per forward step (the number of layers using it).
    pub calls_per_step: u64,
    pub role: Role,
}

impl Shape {
    /// A linear layer `W[N, K]` in `layout` (TunableOp's op-name letters, `TN` for
    /// `F.linear`), with packed leading dimensions.
    pub fn linear(
        name: &str,
        n_out: i64,
        k: i64,
        types: Types,
        layout: [Trans; 2],
        calls_per_step: u64,
        role: Role,
    ) -> Shape {
        let [ta, tb] = layout;
        let [lda, ldb, ldc] = ProblemKey::packed_lds(ta, tb, n_out, 1, k);
        let key = ProblemKey::single(ta, tb, types, n_out, 1, k, lda, ldb, ldc, ldc, 0);
        Shape {
            name: name.to_string(),
            family: family_of(&key),
            calls_per_step,
            role,
        }
    }

    /// The problem at `tokens` tokens.
    pub fn at(&self, tokens: i64) -> Option<ProblemKey> {
        instantiate(&self.family, tokens)
    }

    /// `N x K` (and anything unusual), as the report names it.
    pub fn label(&self) -> String {
        family::describe(&self.family)
    }
}

/// Merges shapes of the same family and role: their calls add up, their names join.
pub fn merge_shapes(shapes: Vec<Shape>) -> Vec<Shape> {
    let mut out: Vec<Shape> = Vec::new();
    for s in shapes {
        match out
            .iter_mut()
            .find(|o| o.family == s.family && o.role == s.role)
        {
            Some(o) => {
                o.calls_per_step += s.calls_per_step;
                if !o.name.split('+').any(|n| n == s.name) {
                    o.name = format!("{}+{}", o.name, s.name);
                }
            }
            None => out.push(s),
        }
    }
    out
}

/// The types of a dtype name: PyTorch's (`float16`, `bfloat16`, `float32`), TunableOp's
/// (`Half`, `BFloat16`, `float`, `double`) or short (`f16`, `bf16`, `f32`, `f64`).
pub fn types_from_name(name: &str) -> Option<Types> {
    let t = |io, c| Some(Types::uniform(io, c));
    match name.trim().trim_start_matches("torch.") {
        "float16" | "half" | "Half" | "f16" | "fp16" => t(abi::DT_F16_R, abi::DT_F32_R),
        "bfloat16" | "BFloat16" | "bf16" => t(abi::DT_BF16_R, abi::DT_F32_R),
        "float32" | "float" | "f32" | "fp32" => t(abi::DT_F32_R, abi::DT_F32_R),
        "float64" | "double" | "f64" => t(abi::DT_F64_R, abi::DT_F64_R),
        _ => None,
    }
}

fn layout_from_text(text: &str) -> Option<[Trans; 2]> {
    let mut c = text.trim().chars();
    let (a, b) = (c.next()?, c.next()?);
    if c.next().is_some() {
        return None;
    }
    Some([Trans::from_letter(a)?, Trans::from_letter(b)?])
}

/// How to read a model configuration.
#[derive(Clone, Debug, Default)]
pub struct ModelOptions {
    /// `--tensor-parallel-size` (1 if 0).
    pub tp: u32,
    /// Overrides the config's `torch_dtype`.
    pub dtype: Option<Types>,
    /// Separate q/k/v and gate/up GEMMs, as Hugging Face transformers runs them, instead of
    /// vLLM's fused `qkv_proj` and `gate_up_proj`.
    pub unfused: bool,
}

/// The model families whose layers [`shapes_from_hf_config`] knows.
pub const DENSE_MODEL_TYPES: &[&str] = &["llama", "mistral", "qwen2", "qwen3"];

/// The dense layers of a Hugging Face `config.json` as vLLM runs them on one rank.
/// Returns a one-line description of the model and the shapes.
pub fn shapes_from_hf_config(
    config: &Value,
    opts: &ModelOptions,
) -> Result<(String, Vec<Shape>), String> {
    // Multimodal wrappers (Mistral3, Qwen2-VL style) keep the language model in text_config.
    let cfg = config
        .get("text_config")
        .filter(|t| t.get("hidden_size").is_some())
        .unwrap_or(config);
    let model_type = cfg
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !DENSE_MODEL_TYPES.contains(&model_type.as_str()) {
        return Err(format!(
            "model_type {model_type:?} is not one of the dense families this models ({}); list the layers in a shapes file (--shapes) instead",
            DENSE_MODEL_TYPES.join(", ")
        ));
    }
    for moe in ["num_experts", "num_local_experts", "n_routed_experts"] {
        if cfg.get(moe).and_then(Value::as_u64).unwrap_or(0) > 0 {
            return Err(format!(
                "this {model_type} config has {moe}: mixture-of-experts layers are not modelled; use a shapes file (--shapes)"
            ));
        }
    }
    let int = |k: &str| -> Result<i64, String> {
        cfg.get(k)
            .and_then(Value::as_i64)
            .filter(|&v| v > 0)
            .ok_or_else(|| format!("config.json has no positive integer {k}"))
    };
    let hidden = int("hidden_size")?;
    let heads = int("num_attention_heads")?;
    let kv_heads = int("num_key_value_heads").unwrap_or(heads);
    let head_dim =
        match cfg.get("head_dim").and_then(Value::as_i64) {
            Some(d) if d > 0 => d,
            _ if hidden % heads == 0 => hidden / heads,
            _ => return Err(
                "hidden_size is not a multiple of num_attention_heads and head_dim is not given"
                    .into(),
            ),
        };
    let inter = int("intermediate_size")?;
    let vocab = int("vocab_size")?;
    let layers = int("num_hidden_layers")? as u64;
    let tp = i64::from(opts.tp.max(1));
    let types = match opts.dtype {
        Some(t) => t,
        None => {
            let name = cfg
                .get("torch_dtype")
                .or_else(|| cfg.get("dtype"))
                .and_then(Value::as_str)
                .unwrap_or("bfloat16");
            types_from_name(name).ok_or_else(|| {
                format!("unknown torch_dtype {name:?} in config.json; pass --dtype")
            })?
        }
    };
    if heads % tp != 0 {
        return Err(format!(
            "{heads} attention heads do not split over tensor-parallel size {tp}"
        ));
    }
    let kv_per_rank = if kv_heads >= tp {
        if kv_heads % tp != 0 {
            return Err(format!(
                "{kv_heads} key/value heads do not split over tensor-parallel size {tp}"
            ));
        }
        kv_heads / tp
    } else {
        if tp % kv_heads != 0 {
            return Err(format!(
                "tensor-parallel size {tp} is not a multiple of the {kv_heads} key/value heads"
            ));
        }
        1
    };
    if inter % tp != 0 {
        return Err(format!(
            "intermediate_size {inter} does not split over tensor-parallel size {tp}"
        ));
    }
    let q = heads / tp * head_dim;
    let kv = kv_per_rank * head_dim;
    let inter_rank = inter / tp;
    let padded_vocab = (vocab + 63) / 64 * 64;
    let tn = [Trans::T, Trans::N];
    let body =
        |name: &str, n: i64, k: i64| Shape::linear(name, n, k, types, tn, layers, Role::Body);
    let mut shapes = Vec::new();
    if opts.unfused {
        shapes.push(body("q_proj", q, hidden));
        shapes.push(body("k_proj", kv, hidden));
        shapes.push(body("v_proj", kv, hidden));
    } else {
        shapes.push(body("qkv_proj", q + 2 * kv, hidden));
    }
    shapes.push(body("o_proj", hidden, q));
    if opts.unfused {
        shapes.push(body("gate_proj", inter_rank, hidden));
        shapes.push(body("up_proj", inter_rank, hidden));
    } else {
        shapes.push(body("gate_up_proj", 2 * inter_rank, hidden));
    }
    shapes.push(body("down_proj", hidden, inter_rank));
    shapes.push(Shape::linear(
        "lm_head",
        padded_vocab / tp,
        hidden,
        types,
        tn,
        1,
        Role::LmHead,
    ));
    let desc = format!(
        "{model_type}: {layers} layers, hidden {hidden}, {heads} heads ({kv_heads} kv) x {head_dim}, intermediate {inter}, vocab {vocab}, {} on TP rank 1 of {tp}",
        if opts.unfused { "unfused q/k/v and gate/up" } else { "vLLM's fused qkv_proj and gate_up_proj" },
    );
    Ok((desc, merge_shapes(shapes)))
}

/// Reads a shapes file: one layer a line, `N,K[,dtype[,layout[,calls[,name]]]]` (commas or
/// spaces), `#` starts a comment, a header line whose first field is not a number is
/// skipped. dtype defaults to `default_types`, layout to `TN`, calls to 1. A name of
/// `lm_head` gives the layer the sampled-token grid.
pub fn shapes_from_file(text: &str, default_types: Types) -> Result<Vec<Shape>, String> {
    let mut shapes = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .collect();
        let at = |what: &str| format!("line {}: {what} ({line:?})", i + 1);
        let num = |s: &str| s.parse::<i64>().ok().filter(|&v| v > 0);
        if shapes.is_empty() && num(f[0]).is_none() && f[0].parse::<i64>().is_err() {
            continue; // header
        }
        if f.len() < 2 {
            return Err(at("needs at least N and K"));
        }
        let (Some(n), Some(k)) = (num(f[0]), num(f[1])) else {
            return Err(at("N and K must be positive integers"));
        };
        let types = match f.get(2) {
            Some(d) => types_from_name(d).ok_or_else(|| at(&format!("unknown dtype {d}")))?,
            None => default_types,
        };
        let layout = match f.get(3) {
            Some(l) => {
                layout_from_text(l).ok_or_else(|| at(&format!("layout {l} is not two of N/T/C")))?
            }
            None => [Trans::T, Trans::N],
        };
        let calls = match f.get(4) {
            Some(c) => c.parse::<u64>().map_err(|_| at("calls must be a number"))?,
            None => 1,
        };
        let name = f
            .get(5)
            .map_or_else(|| format!("{n}x{k}"), |s| s.to_string());
        let role = if name == "lm_head" {
            Role::LmHead
        } else {
            Role::Body
        };
        shapes.push(Shape::linear(&name, n, k, types, layout, calls, role));
    }
    if shapes.is_empty() {
        return Err("the shapes file names no shape".into());
    }
    Ok(merge_shapes(shapes))
}

/// The families of the rows already in a profile (exact rows, and wildcard rows whose only
/// `*` is the token count), one shape each, in file order.
pub fn shapes_from_profile(file: &ResultsFile) -> Vec<Shape> {
    let mut seen = BTreeSet::new();
    let mut shapes = Vec::new();
    let mut add = |key: ProblemKey| {
        let fam = family_of(&key);
        if seen.insert(fam) {
            shapes.push(Shape {
                name: "profile".into(),
                family: fam,
                calls_per_step: 1,
                role: Role::Body,
            });
        }
    };
    for r in &file.rows {
        add(r.key);
    }
    for w in &file.wildcards {
        let mut p = w.pattern;
        if p.n.is_none() {
            p.n = Some(1);
            if let Ok(k) = p.to_key() {
                add(k);
            }
        }
    }
    shapes
}

// ---- Serving configuration and the token grid -----------------------------------------------

/// How vLLM runs steps through graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphMode {
    /// Every step up to the largest capture size is padded and replayed (vLLM's default).
    Piecewise,
    /// Only uniform decode steps are replayed; mixed steps run eagerly.
    FullDecodeOnly,
    /// No graphs (`--enforce-eager`).
    Eager,
}

/// The seed's dynamic-prefill controller.
#[derive(Clone, Debug, PartialEq)]
pub struct Ladder {
    /// Chunk caps for a single eligible request.
    pub rungs: Vec<i64>,
    /// Per-request cap once more than one request is eligible.
    pub shared_cap: i64,
    /// (eligible requests, per-request cap): lower caps at more eligible requests.
    pub thresholds: Vec<(u32, i64)>,
}

impl Default for Ladder {
    /// The seed's live values: rungs 256/512/1024, shared cap 512, 256 from 8 eligible.
    fn default() -> Ladder {
        Ladder {
            rungs: vec![256, 512, 1024],
            shared_cap: 512,
            thresholds: vec![(8, 256)],
        }
    }
}

/// What the server was started with.
#[derive(Clone, Debug, PartialEq)]
pub struct Serving {
    pub max_num_batched_tokens: i64,
    pub block_size: i64,
    pub max_num_seqs: i64,
    pub tp: u32,
    pub spec_tokens: i64,
    /// Explicit capture sizes (`--cuda-graph-sizes`, `cudagraph_capture_sizes`).
    pub capture_sizes: Option<Vec<i64>>,
    pub max_capture_size: Option<i64>,
    pub graphs: GraphMode,
    /// 0 = off.
    pub long_prefill_token_threshold: i64,
    pub ladder: Option<Ladder>,
    /// Decode requests that share a step with a capped prefill chunk (1..this).
    pub mix_decodes: i64,
}

impl Default for Serving {
    /// vLLM's defaults for `vllm serve` on one GPU.
    fn default() -> Serving {
        Serving {
            max_num_batched_tokens: 2048,
            block_size: 16,
            max_num_seqs: 256,
            tp: 1,
            spec_tokens: 0,
            capture_sizes: None,
            max_capture_size: None,
            graphs: GraphMode::Piecewise,
            long_prefill_token_threshold: 0,
            ladder: None,
            mix_decodes: 32,
        }
    }
}

fn parse_list(v: &str, what: &str) -> Result<Vec<i64>, String> {
    let list: Result<Vec<i64>, _> = v
        .trim_matches(|c| c == '[' || c == ']')
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<i64>()
                .map_err(|_| format!("{what}: {s:?} is not a number"))
        })
        .collect();
    let list = list?;
    if list.iter().any(|&x| x <= 0) {
        return Err(format!("{what}: sizes must be positive"));
    }
    Ok(list)
}

/// The vLLM and ladder flags [`Serving::from_args`] understands, for the help text.
pub const SERVING_FLAGS: &str =
    "    vLLM: --max-num-batched-tokens N, --block-size N, --max-num-seqs N,
          --tensor-parallel-size N (-tp N), --num-speculative-tokens N,
          --speculative-config JSON (num_speculative_tokens), --cuda-graph-sizes N,N,..,
          --max-cudagraph-capture-size N, --compilation-config JSON (cudagraph_mode,
          cudagraph_capture_sizes, max_cudagraph_capture_size), --enforce-eager,
          --long-prefill-token-threshold N   (--flag=value works too)
    dynamic prefill: --dynamic-prefill (the seed's ladder: rungs 256,512,1024, shared cap
          512, 256 from 8 eligible requests), --dyn-rungs N,N,.., --dyn-shared-cap N,
          --dyn-thresholds E:CAP,..   (any of these turns the ladder on)
    --mix-decodes N   decode requests sharing a step with a capped chunk (default 32)";

impl Serving {
    /// Reads the serving flags out of `args` (vLLM's own spelling, `--flag value` or
    /// `--flag=value`). Returns the configuration and the arguments it did not use.
    pub fn from_args(args: &[String]) -> Result<(Serving, Vec<String>), String> {
        let mut s = Serving::default();
        let mut rest = Vec::new();
        let mut ladder: Option<Ladder> = None;
        let mut i = 0;
        while i < args.len() {
            let (flag, inline) = match args[i].split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (args[i].clone(), None),
            };
            let takes_value = matches!(
                flag.as_str(),
                "--max-num-batched-tokens"
                    | "--block-size"
                    | "--max-num-seqs"
                    | "--tensor-parallel-size"
                    | "-tp"
                    | "--num-speculative-tokens"
                    | "--speculative-config"
                    | "--cuda-graph-sizes"
                    | "--max-cudagraph-capture-size"
                    | "--compilation-config"
                    | "--long-prefill-token-threshold"
                    | "--dyn-rungs"
                    | "--dyn-shared-cap"
                    | "--dyn-thresholds"
                    | "--mix-decodes"
            );
            let value = if takes_value {
                match inline.clone() {
                    Some(v) => v,
                    None => {
                        i += 1;
                        args.get(i)
                            .cloned()
                            .ok_or_else(|| format!("{flag} needs a value"))?
                    }
                }
            } else {
                String::new()
            };
            let num = |v: &str| -> Result<i64, String> {
                v.trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|&x| x >= 0)
                    .ok_or_else(|| format!("{flag} takes a non-negative number, not {v:?}"))
            };
            let positive = |v: &str| -> Result<i64, String> {
                Some(num(v)?)
                    .filter(|&x| x > 0)
                    .ok_or_else(|| format!("{flag} takes a positive number"))
            };
            match flag.as_str() {
                "--max-num-batched-tokens" => s.max_num_batched_tokens = positive(&value)?,
                "--block-size" => s.block_size = positive(&value)?,
                "--max-num-seqs" => s.max_num_seqs = positive(&value)?,
                "--tensor-parallel-size" | "-tp" => {
                    s.tp = u32::try_from(positive(&value)?)
                        .map_err(|_| "tensor-parallel size too large")?
                }
                "--num-speculative-tokens" => s.spec_tokens = num(&value)?,
                "--speculative-config" => {
                    let v: Value = serde_json::from_str(&value)
                        .map_err(|e| format!("--speculative-config is not JSON: {e}"))?;
                    if let Some(k) = v.get("num_speculative_tokens").and_then(Value::as_i64) {
                        s.spec_tokens = k.max(0);
                    }
                }
                "--cuda-graph-sizes" => s.capture_sizes = Some(parse_list(&value, &flag)?),
                "--max-cudagraph-capture-size" => s.max_capture_size = Some(positive(&value)?),
                "--compilation-config" => {
                    let v: Value = serde_json::from_str(&value)
                        .map_err(|e| format!("--compilation-config is not JSON: {e}"))?;
                    if let Some(mode) = v.get("cudagraph_mode").and_then(Value::as_str) {
                        s.graphs = match mode.to_ascii_uppercase().as_str() {
                            "NONE" => GraphMode::Eager,
                            "FULL_DECODE_ONLY" => GraphMode::FullDecodeOnly,
                            _ => GraphMode::Piecewise,
                        };
                    }
                    if let Some(list) = v.get("cudagraph_capture_sizes").and_then(Value::as_array) {
                        let sizes: Vec<i64> = list
                            .iter()
                            .filter_map(Value::as_i64)
                            .filter(|&x| x > 0)
                            .collect();
                        s.capture_sizes = Some(sizes);
                    }
                    if let Some(m) = v.get("max_cudagraph_capture_size").and_then(Value::as_i64) {
                        s.max_capture_size = Some(m.max(1));
                    }
                }
                "--enforce-eager" => s.graphs = GraphMode::Eager,
                "--long-prefill-token-threshold" => s.long_prefill_token_threshold = num(&value)?,
                "--dynamic-prefill" => {
                    ladder.get_or_insert_with(Ladder::default);
                }
                "--dyn-rungs" => {
                    ladder.get_or_insert_with(Ladder::default).rungs = parse_list(&value, &flag)?
                }
                "--dyn-shared-cap" => {
                    ladder.get_or_insert_with(Ladder::default).shared_cap = positive(&value)?
                }
                "--dyn-thresholds" => {
                    let mut th = Vec::new();
                    for part in value.split(',').filter(|p| !p.trim().is_empty()) {
                        let (e, c) = part
                            .split_once(':')
                            .ok_or_else(|| format!("{flag}: {part:?} is not ELIGIBLE:CAP"))?;
                        let e = e
                            .trim()
                            .parse::<u32>()
                            .map_err(|_| format!("{flag}: {e:?} is not a count"))?;
                        th.push((e, positive(c)?));
                    }
                    ladder.get_or_insert_with(Ladder::default).thresholds = th;
                }
                "--mix-decodes" => s.mix_decodes = num(&value)?,
                _ => {
                    rest.push(args[i].clone());
                }
            }
            i += 1;
        }
        s.ladder = ladder;
        Ok((s, rest))
    }

    /// The capture sizes vLLM would use (ascending, deduplicated), empty without graphs.
    pub fn capture_sizes(&self) -> Vec<i64> {
        if self.graphs == GraphMode::Eager {
            return Vec::new();
        }
        let mut sizes = match &self.capture_sizes {
            Some(list) => list.clone(),
            None => {
                let max = self
                    .max_capture_size
                    .unwrap_or_else(|| (self.max_num_seqs * (1 + self.spec_tokens) * 2).min(512));
                let mut v = vec![1, 2, 4];
                v.extend((8..256).step_by(8));
                v.extend((256..=max.max(256)).step_by(16));
                v.retain(|&x| x <= max);
                v
            }
        };
        sizes.retain(|&x| x <= self.max_num_batched_tokens);
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    /// One line for the report's header.
    pub fn describe(&self) -> String {
        let caps = self.capture_sizes();
        let graphs = match self.graphs {
            GraphMode::Eager => "no graphs (eager)".to_string(),
            g => format!(
                "{} graphs, {} capture sizes up to {}",
                if g == GraphMode::Piecewise {
                    "piecewise"
                } else {
                    "decode-only"
                },
                caps.len(),
                caps.last().copied().unwrap_or(0)
            ),
        };
        let mut s = format!(
            "budget {} tokens, block size {}, up to {} sequences, TP {}, {}",
            self.max_num_batched_tokens, self.block_size, self.max_num_seqs, self.tp, graphs
        );
        if self.spec_tokens > 0 {
            let _ = write!(s, ", {} speculative tokens", self.spec_tokens);
        }
        if self.long_prefill_token_threshold > 0 {
            let _ = write!(
                s,
                ", long-prefill threshold {}",
                self.long_prefill_token_threshold
            );
        }
        if let Some(l) = &self.ladder {
            let rungs: Vec<String> = l.rungs.iter().map(i64::to_string).collect();
            let _ = write!(
                s,
                ", dynamic prefill rungs {} shared cap {}",
                rungs.join("/"),
                l.shared_cap
            );
            for (e, c) in &l.thresholds {
                let _ = write!(s, " ({c} from {e} eligible)");
            }
        }
        let _ = write!(s, ", chunk + 1..{} decodes", self.mix_decodes);
        s
    }
}

/// Why a token count occurs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// A graph capture size: decode steps replay the graph captured at this size.
    DecodeCapture,
    /// A decode batch run eagerly (no graphs, or above the largest capture size).
    DecodeEager,
    /// A speculative (MTP) verify step: requests x (k + 1).
    MtpVerify,
    /// A prefill chunk of whole blocks, up to the budget.
    PrefillChunk,
    /// Long prompts capped at `--long-prefill-token-threshold` each.
    LongPrefill,
    /// The dynamic-prefill chunk cap of a single eligible request.
    DynamicRung,
    /// The dynamic-prefill per-request cap with several eligible requests.
    DynamicShared,
    /// A capped chunk plus the decodes of the same step.
    ChunkDecodeMix,
    /// Logits of the sampled tokens (`lm_head`).
    Sampled,
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::DecodeCapture => "decode capture size",
            Reason::DecodeEager => "eager decode",
            Reason::MtpVerify => "MTP verify",
            Reason::PrefillChunk => "prefill chunk",
            Reason::LongPrefill => "long-prefill cap",
            Reason::DynamicRung => "dynamic rung",
            Reason::DynamicShared => "dynamic shared cap",
            Reason::ChunkDecodeMix => "chunk + decode",
            Reason::Sampled => "sampled tokens",
        }
    }

    /// Decode-side reasons (small M, replayed from graphs).
    pub fn is_decode(self) -> bool {
        matches!(
            self,
            Reason::DecodeCapture | Reason::DecodeEager | Reason::MtpVerify | Reason::Sampled
        )
    }
}

/// One reason for one token count, with the words that say how it arises.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Why {
    pub reason: Reason,
    /// The group this M belongs to in the report: for mixes, the chunk it extends.
    pub base: i64,
    pub detail: String,
}

/// The token counts of one role, each with every reason it occurs.
pub type Grid = BTreeMap<i64, Vec<Why>>;

fn add(grid: &mut Grid, m: i64, reason: Reason, base: i64, detail: String) {
    if m <= 0 {
        return;
    }
    let whys = grid.entry(m).or_default();
    let why = Why {
        reason,
        base,
        detail,
    };
    if !whys.contains(&why) {
        whys.push(why);
    }
}

/// The token grid `serving` puts on the wire for layers of `role`.
pub fn grid(s: &Serving, role: Role) -> Grid {
    let mut g = Grid::new();
    let k1 = 1 + s.spec_tokens;
    let budget = s.max_num_batched_tokens;
    if role == Role::LmHead {
        for r in 1..=s.max_num_seqs {
            add(&mut g, r, Reason::Sampled, 0, format!("{r} sampled tokens"));
            if k1 > 1 {
                add(
                    &mut g,
                    r * k1,
                    Reason::Sampled,
                    0,
                    format!("{r} requests x {k1} verified tokens"),
                );
            }
        }
        return g;
    }
    let caps = s.capture_sizes();
    let max_cap = caps.last().copied().unwrap_or(0);
    let pad = |m: i64| -> i64 {
        if s.graphs == GraphMode::Piecewise && m <= max_cap {
            caps.iter().copied().find(|&c| c >= m).unwrap_or(m)
        } else {
            m
        }
    };

    // Decode.
    for &c in &caps {
        add(
            &mut g,
            c,
            Reason::DecodeCapture,
            0,
            format!("graph captured at {c} tokens"),
        );
    }
    let max_decode = (s.max_num_seqs * k1).min(budget);
    let eager_from = if s.graphs == GraphMode::Eager {
        1
    } else {
        max_cap + 1
    };
    if s.spec_tokens == 0 {
        for r in eager_from..=max_decode {
            add(
                &mut g,
                r,
                Reason::DecodeEager,
                0,
                format!("{r} decodes, no graph"),
            );
        }
    } else {
        // Verify steps: r requests x (k + 1) tokens, r over the base decode sizes.
        let base = Serving {
            spec_tokens: 0,
            ..s.clone()
        };
        let mut rs: Vec<i64> = if s.graphs == GraphMode::Eager {
            (1..=s.max_num_seqs).collect()
        } else {
            base.capture_sizes()
        };
        rs.retain(|&r| r <= s.max_num_seqs);
        for r in rs {
            let m = r * k1;
            if m <= budget {
                add(
                    &mut g,
                    m,
                    Reason::MtpVerify,
                    0,
                    format!("{r} requests x {k1} tokens"),
                );
            }
        }
    }

    // Prefill: (M before padding, reason, detail).
    let mut chunks: Vec<(i64, Reason, String)> = Vec::new();
    let mut j = 1;
    while j * s.block_size <= budget {
        let m = j * s.block_size;
        chunks.push((
            m,
            Reason::PrefillChunk,
            format!("{j} x block {}", s.block_size),
        ));
        j += 1;
    }
    chunks.push((
        budget,
        Reason::PrefillChunk,
        "the whole token budget".into(),
    ));
    let l = s.long_prefill_token_threshold;
    if l > 0 && l < budget {
        for j in 1..=budget / l {
            chunks.push((
                j * l,
                Reason::LongPrefill,
                format!("{j} long prompt(s) x {l}"),
            ));
        }
    }
    if let Some(ladder) = &s.ladder {
        for &r in ladder.rungs.iter().filter(|&&r| r <= budget) {
            chunks.push((
                r,
                Reason::DynamicRung,
                format!("one eligible request capped at {r}"),
            ));
        }
        // From `e` eligible requests on, each is capped at `c`: the step carries
        // min(e x c, budget) tokens; a single chunk at the cap reaches the GEMMs too (the
        // seed saw M = 512 at the shared cap and 256 at 8 eligible).
        let mut caps_by: Vec<(i64, i64)> = vec![(2, ladder.shared_cap)];
        caps_by.extend(
            ladder
                .thresholds
                .iter()
                .map(|&(e, c)| (i64::from(e.max(1)), c)),
        );
        caps_by.sort_unstable();
        for (idx, &(e, c)) in caps_by.iter().enumerate() {
            if c <= 0 || c > budget {
                continue;
            }
            chunks.push((
                c,
                Reason::DynamicShared,
                format!("one chunk at the {c}-token cap ({e}+ eligible)"),
            ));
            // Up to the next threshold, e eligible requests share this cap.
            let until = caps_by.get(idx + 1).map_or(i64::MAX, |n| n.0 - 1);
            let mut n = e;
            while n <= until {
                let m = (n * c).min(budget);
                chunks.push((
                    m,
                    Reason::DynamicShared,
                    format!("{n} eligible requests x {c}"),
                ));
                if m == budget {
                    break;
                }
                n += 1;
            }
        }
    }
    for (m, reason, detail) in &chunks {
        let p = pad(*m);
        let detail = if p != *m {
            format!("{detail}, padded from {m} to capture size {p}")
        } else {
            detail.clone()
        };
        add(&mut g, p, *reason, *m, detail);
    }
    // Mixes: a chunk capped below the budget plus the decodes of the step.
    let bases: BTreeSet<i64> = chunks.iter().map(|c| c.0).filter(|&m| m < budget).collect();
    for base in bases {
        for d in 1..=s.mix_decodes {
            let m = base + d * k1;
            if m > budget {
                break;
            }
            let p = pad(m);
            let detail = if p != m {
                format!("{base} + {d} decodes, padded to capture size {p}")
            } else {
                format!("{base} + {d} decodes (eager)")
            };
            add(&mut g, p, Reason::ChunkDecodeMix, base, detail);
        }
    }
    g
}

// ---- The profile side -----------------------------------------------------------------------

/// What a profile says about one problem.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    /// A `Gemm_Rocblas_<id>` row (or a `*` row matching it).
    Tuned(i32),
    /// A `Default` row: the heuristic, by measurement.
    Default,
    /// No row.
    Missing,
    /// A row rocBLAS cannot serve (another backend's solution, an op it does not run).
    Unservable(String),
}

impl Status {
    pub fn word(&self) -> &'static str {
        match self {
            Status::Tuned(_) => "tuned",
            Status::Default => "Default",
            Status::Missing => "missing",
            Status::Unservable(_) => "unservable",
        }
    }
    fn letter(&self) -> char {
        match self {
            Status::Tuned(_) => 'T',
            Status::Default => 'D',
            Status::Missing => '-',
            Status::Unservable(_) => 'U',
        }
    }
    /// Served as measured: tuned or `Default`.
    pub fn is_covered(&self) -> bool {
        matches!(self, Status::Tuned(_) | Status::Default)
    }
}

/// One rank file of a profile, indexed for lookups.
#[derive(Debug, Default)]
pub struct ProfileIndex {
    /// The rows as the interposer's near path sees them.
    near: NearIndex,
    exact: HashMap<ProblemKey, Solution>,
    wildcards: Vec<(KeyPattern, Solution)>,
    unservable: HashMap<ProblemKey, String>,
    /// Rows in file order, for "rows nothing predicted uses".
    rows: Vec<ProblemKey>,
}

impl ProfileIndex {
    pub fn new(file: &ResultsFile) -> ProfileIndex {
        let mut ix = ProfileIndex::default();
        for r in &file.rows {
            ix.exact.entry(r.key).or_insert_with(|| r.solution.clone());
            ix.rows.push(r.key);
        }
        for w in &file.wildcards {
            ix.wildcards.push((w.pattern, w.solution.clone()));
        }
        let table = Table::new(file.rows.iter().filter_map(|r| match r.solution {
            Solution::Default => Some((r.key, Action::Default)),
            Solution::Rocblas(id) => Some((r.key, Action::Solution(id))),
            Solution::Other(_) => None,
        }));
        ix.near = NearIndex::new(&table);
        for u in &file.unservable {
            // Recover the problem where the op has a concrete form: another backend's
            // solution on a known op, or a GemmAndBias op (same signature as Gemm).
            let op = u
                .op_name
                .replacen("GemmAndBiasTunableOp_", "GemmTunableOp_", 1);
            if let KeyParse::Key(k) = tunableop::parse_key(&op, &u.signature) {
                ix.unservable.entry(k).or_insert_with(|| u.reason.clone());
            }
        }
        ix
    }

    pub fn status(&self, key: &ProblemKey) -> Status {
        let from = |s: &Solution| match s {
            Solution::Default => Status::Default,
            Solution::Rocblas(id) => Status::Tuned(*id),
            Solution::Other(o) => Status::Unservable(format!("solution {o}")),
        };
        if let Some(s) = self.exact.get(key) {
            return from(s);
        }
        if let Some((_, s)) = self.wildcards.iter().find(|(p, _)| p.matches(key)) {
            return from(s);
        }
        if let Some(why) = self.unservable.get(key) {
            return Status::Unservable(why.clone());
        }
        Status::Missing
    }

    /// For a missing problem: the token count of the row near serving would try (the
    /// nearest row of its layer within `window` tokens, if that row names a solution).
    pub fn near_row(&self, key: &ProblemKey, window: i64) -> Option<i64> {
        match self.near.nearest(key, window)? {
            (tokens, Action::Solution(_)) => Some(tokens),
            _ => None,
        }
    }

    /// The servable rows, in file order.
    pub fn rows(&self) -> &[ProblemKey] {
        &self.rows
    }
}

// ---- The analysis ---------------------------------------------------------------------------

/// One (shape, token count) of the prediction.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Index into [`Report::shapes`].
    pub shape: usize,
    pub m: i64,
    pub key: ProblemKey,
    pub status: Status,
    pub whys: Vec<Why>,
    /// Calls x FLOPs of one step at this M.
    pub cost: f64,
    /// Missing, but near serving would try the row of its layer at this token count (its
    /// solution still has to validate for this M at run time).
    pub near: Option<i64>,
}

/// The whole prediction for one profile rank.
#[derive(Debug)]
pub struct Report {
    pub source: String,
    pub profile: Option<String>,
    pub serving: Serving,
    pub shapes: Vec<Shape>,
    /// Per role, the grid that was checked.
    pub grids: Vec<(Role, Grid)>,
    /// Ranked by cost, highest first.
    pub problems: Vec<Problem>,
    /// Profile rows no predicted problem uses.
    pub unused_rows: Vec<ProblemKey>,
    /// The near-serving window the `near` fields assume (0: off).
    pub near_window: i64,
}

impl Report {
    pub fn count(&self, word: &str) -> usize {
        self.problems
            .iter()
            .filter(|p| p.status.word() == word)
            .count()
    }

    /// Missing or unservable problems (what `--strict` fails on).
    pub fn gaps(&self) -> impl Iterator<Item = &Problem> {
        self.problems.iter().filter(|p| !p.status.is_covered())
    }

    /// Share of the predicted cost per step that the profile serves as measured.
    pub fn covered_cost_share(&self) -> f64 {
        let total: f64 = self.problems.iter().map(|p| p.cost).sum();
        let covered: f64 = self
            .problems
            .iter()
            .filter(|p| p.status.is_covered())
            .map(|p| p.cost)
            .sum();
        if total > 0.0 {
            covered / total
        } else {
            1.0
        }
    }
}

/// Predicts every (shape, M) of `serving` and looks it up in `profile` (all missing
/// without one). Missing problems note the row near serving would try within
/// `near_window` tokens ([`crate::near::DEFAULT_WINDOW`] is the interposer's default).
pub fn analyse(
    source: &str,
    shapes: Vec<Shape>,
    serving: &Serving,
    profile: Option<(&str, &ProfileIndex)>,
    near_window: i64,
) -> Report {
    let empty = ProfileIndex::default();
    let index = profile.map_or(&empty, |(_, ix)| ix);
    let mut grids: Vec<(Role, Grid)> = Vec::new();
    for role in [Role::Body, Role::LmHead] {
        if shapes.iter().any(|s| s.role == role) {
            grids.push((role, grid(serving, role)));
        }
    }
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (i, shape) in shapes.iter().enumerate() {
        let g = &grids
            .iter()
            .find(|(r, _)| *r == shape.role)
            .expect("grid per role")
            .1;
        for (&m, whys) in g {
            let Some(key) = shape.at(m) else { continue };
            used.insert(key);
            let status = index.status(&key);
            let near = match status {
                Status::Missing => index.near_row(&key, near_window),
                _ => None,
            };
            problems.push(Problem {
                shape: i,
                m,
                key,
                status,
                whys: whys.clone(),
                cost: shape.calls_per_step as f64 * key.flops(),
                near,
            });
        }
    }
    problems.sort_by(|a, b| {
        b.cost
            .total_cmp(&a.cost)
            .then(a.shape.cmp(&b.shape))
            .then(a.m.cmp(&b.m))
    });
    let unused_rows = index
        .rows()
        .iter()
        .filter(|k| !used.contains(*k))
        .copied()
        .collect();
    Report {
        source: source.to_string(),
        profile: profile.map(|(name, _)| name.to_string()),
        serving: serving.clone(),
        shapes,
        grids,
        problems,
        unused_rows,
        near_window,
    }
}

// ---- Rendering ------------------------------------------------------------------------------

/// `1 2 4 8` or, for long runs, `1..32 (32)`; consecutive runs are collapsed.
pub fn compress(ms: &[i64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ms.len() {
        let mut j = i;
        while j + 1 < ms.len() && ms[j + 1] == ms[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            parts.push(format!("{}..{}", ms[i], ms[j]));
        } else {
            parts.extend(ms[i..=j].iter().map(i64::to_string));
        }
        i = j + 1;
    }
    if parts.len() > 16 {
        let head = parts[..12].join(" ");
        return format!("{head} ... {} ({} values)", parts.last().unwrap(), ms.len());
    }
    parts.join(" ")
}

/// How the report groups token counts: a prefill-type count is a group of its own; decode
/// sizes are one group per reason, and the mixes one group per chunk they extend.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group {
    /// Decode-side groups sort after the prefill ones.
    pub decode: bool,
    pub base: i64,
    pub reason: Reason,
    /// The token count for single-M groups, 0 for decode and mix groups.
    pub m: i64,
}

impl Group {
    /// The group of a problem: by its first reason in report order.
    pub fn of(p: &Problem) -> Group {
        let first = p
            .whys
            .iter()
            .map(|w| (w.reason.is_decode(), w.base, w.reason))
            .min()
            .expect("every M has a reason");
        let (decode, base, reason) = first;
        let m = if decode || reason == Reason::ChunkDecodeMix {
            0
        } else {
            p.m
        };
        Group {
            decode,
            base,
            reason,
            m,
        }
    }

    /// Words for the group, from the reasons of its problems.
    fn label(&self, ps: &[&Problem]) -> String {
        if self.reason == Reason::ChunkDecodeMix {
            return format!("chunk {} + decodes", self.base);
        }
        let mut reasons: Vec<&'static str> = ps
            .iter()
            .flat_map(|p| p.whys.iter().map(|w| w.reason.label()))
            .collect();
        reasons.sort_unstable();
        reasons.dedup();
        reasons.join(", ")
    }
}

/// Problems grouped by [`Group`], in report order.
fn by_group(r: &Report) -> BTreeMap<Group, Vec<&Problem>> {
    let mut groups: BTreeMap<Group, Vec<&Problem>> = BTreeMap::new();
    for p in &r.problems {
        groups.entry(Group::of(p)).or_default().push(p);
    }
    groups
}

/// The gaps of one shape in one group: what to tune together.
#[derive(Debug)]
pub struct GapGroup<'a> {
    pub shape: usize,
    pub group: Group,
    pub label: String,
    pub problems: Vec<&'a Problem>,
    /// The cost of one step at the most expensive member.
    pub cost: f64,
}

/// Gaps grouped per (shape, group), most expensive first.
pub fn gap_groups(r: &Report) -> Vec<GapGroup<'_>> {
    let mut map: BTreeMap<(usize, Group), Vec<&Problem>> = BTreeMap::new();
    for p in r.gaps() {
        map.entry((p.shape, Group::of(p))).or_default().push(p);
    }
    let mut out: Vec<GapGroup> = map
        .into_iter()
        .map(|((shape, group), mut problems)| {
            problems.sort_by_key(|p| p.m);
            let cost = problems.iter().map(|p| p.cost).fold(0.0, f64::max);
            let label = group.label(&problems);
            GapGroup {
                shape,
                group,
                label,
                problems,
                cost,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.cost
            .total_cmp(&a.cost)
            .then(b.problems.len().cmp(&a.problems.len()))
            .then(a.shape.cmp(&b.shape))
    });
    out
}

fn short(f: f64) -> String {
    if f >= 1e12 {
        format!("{:.1}T", f / 1e12)
    } else if f >= 1e9 {
        format!("{:.1}G", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.1}M", f / 1e6)
    } else {
        format!("{:.0}k", f / 1e3)
    }
}

fn ms_text(ps: &[&Problem]) -> String {
    let mut ms: Vec<i64> = ps.iter().map(|p| p.m).collect();
    ms.sort_unstable();
    ms.dedup();
    compress(&ms)
}

/// As [`ms_text`], at most about 24 characters: `1..496 (47 values)` for long lists.
fn ms_short(ps: &[&Problem]) -> String {
    let full = ms_text(ps);
    if full.len() <= 24 {
        return full;
    }
    let lo = ps.iter().map(|p| p.m).min().unwrap_or(0);
    let hi = ps.iter().map(|p| p.m).max().unwrap_or(0);
    let n = ps.iter().map(|p| p.m).collect::<BTreeSet<_>>().len();
    format!("{lo}..{hi} ({n} values)")
}

fn count_words(ps: &[&Problem]) -> String {
    let mut parts = Vec::new();
    for w in ["tuned", "Default", "missing", "unservable"] {
        let n = ps.iter().filter(|p| p.status.word() == w).count();
        if n > 0 {
            parts.push(format!("{n} {w}"));
        }
    }
    parts.join(", ")
}

/// The report as text: header, token grid, per-group status across shapes, the per-shape
/// matrix at the prefill token counts, and the gap groups worth tuning first (`top`).
pub fn render_text(r: &Report, top: usize) -> String {
    let mut o = String::new();
    let nshapes = r.shapes.len();
    let _ = writeln!(
        o,
        "coverage of {} for {} ({nshapes} shapes)",
        r.profile.as_deref().unwrap_or("no profile"),
        r.source,
    );
    let _ = writeln!(o, "serving: {}", r.serving.describe());

    let _ = writeln!(o, "\ntoken counts (M) and why:");
    for (role, g) in &r.grids {
        let mut by_reason: BTreeMap<Reason, Vec<i64>> = BTreeMap::new();
        for (&m, whys) in g {
            for w in whys {
                let v = by_reason.entry(w.reason).or_default();
                if v.last() != Some(&m) {
                    v.push(m);
                }
            }
        }
        for (reason, ms) in by_reason {
            let who = if *role == Role::LmHead {
                " (lm_head)"
            } else {
                ""
            };
            let _ = writeln!(
                o,
                "  {:<22} {}",
                format!("{}{who}", reason.label()),
                compress(&ms)
            );
        }
    }

    let _ = writeln!(
        o,
        "\n{} problems: {} tuned, {} Default, {} missing, {} unservable; tuned + Default carry {:.1}% of the predicted cost per step",
        r.problems.len(),
        r.count("tuned"),
        r.count("Default"),
        r.count("missing"),
        r.count("unservable"),
        100.0 * r.covered_cost_share()
    );
    let near = r.problems.iter().filter(|p| p.near.is_some()).count();
    if r.near_window > 0 && r.count("missing") > 0 {
        let _ = writeln!(
            o,
            "near serving (window {}): {near} of the missing have a tuned row of their layer within reach; it serves them where that solution validates for the exact M",
            r.near_window
        );
    }

    // Per group of token counts, across shapes.
    let groups = by_group(r);
    let single: Vec<(&Group, &Vec<&Problem>)> = groups.iter().filter(|(g, _)| g.m > 0).collect();
    let all_missing: Vec<i64> = single
        .iter()
        .filter(|(_, ps)| ps.iter().all(|p| p.status == Status::Missing))
        .map(|(g, _)| g.m)
        .collect();
    let present: Vec<String> = single
        .iter()
        .filter(|(_, ps)| ps.iter().any(|p| p.status.is_covered()))
        .map(|(g, ps)| format!("{} ({})", g.m, count_words(ps)))
        .collect();
    let _ = writeln!(o, "\nprefill token counts:");
    if !all_missing.is_empty() {
        let mut ms = all_missing.clone();
        ms.sort_unstable();
        let _ = writeln!(
            o,
            "  missing for all {nshapes} shapes: M = {}",
            ms.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
        );
    }
    if !present.is_empty() {
        let _ = writeln!(o, "  present at: M = {}", present.join("; "));
    }
    let _ = writeln!(o, "\nby token count (across the {nshapes} shapes):");
    for (g, ps) in &groups {
        let label = g.label(ps);
        let head = if g.m > 0 {
            format!("M = {} ({label})", g.m)
        } else {
            format!("M = {} ({label})", ms_text(ps))
        };
        let shapes_in: BTreeSet<usize> = ps.iter().map(|p| p.shape).collect();
        let verdict = if ps.iter().all(|p| p.status == Status::Missing) {
            format!("MISSING for all {} shapes", shapes_in.len())
        } else {
            let mut v = count_words(ps);
            if g.m > 0 {
                for w in ["Default", "missing", "unservable"] {
                    let names: Vec<String> = ps
                        .iter()
                        .filter(|p| p.status.word() == w)
                        .map(|p| r.shapes[p.shape].label())
                        .collect();
                    if !names.is_empty() && names.len() < shapes_in.len() {
                        let _ = write!(v, "; {w}: {}", names.join(", "));
                    }
                }
            }
            v
        };
        let _ = writeln!(o, "  {head}: {verdict}");
    }

    // Per-shape matrix at the single-M (prefill-type) token counts.
    let cols: Vec<i64> = single
        .iter()
        .map(|(g, _)| g.m)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !cols.is_empty() && cols.len() <= 24 {
        let _ = writeln!(
            o,
            "\nby shape at those token counts (T tuned, D Default, - missing, U unservable):"
        );
        let width = r
            .shapes
            .iter()
            .map(|s| s.label().len())
            .max()
            .unwrap_or(8)
            .max(8);
        let mut head = format!("  {:<width$}", "shape");
        for c in &cols {
            let _ = write!(head, " {c:>5}");
        }
        let _ = writeln!(o, "{head}   other M covered");
        for (i, s) in r.shapes.iter().enumerate() {
            let mut line = format!("  {:<width$}", s.label());
            for c in &cols {
                let st = r
                    .problems
                    .iter()
                    .find(|p| p.shape == i && p.m == *c)
                    .map_or(' ', |p| p.status.letter());
                let _ = write!(line, " {st:>5}");
            }
            let rest: Vec<&Problem> = r
                .problems
                .iter()
                .filter(|p| p.shape == i && !cols.contains(&p.m))
                .collect();
            let covered = rest.iter().filter(|p| p.status.is_covered()).count();
            let _ = writeln!(o, "{line}   {covered}/{}", rest.len());
        }
    }

    // The gaps, grouped per shape and ranked.
    let gaps = gap_groups(r);
    if gaps.is_empty() {
        let _ = writeln!(o, "\nno gaps: every predicted problem has a row");
    } else {
        let _ = writeln!(
            o,
            "\nworth tuning first ({} of {} gap groups; cost = calls per step x FLOPs of the largest M):",
            top.min(gaps.len()),
            gaps.len()
        );
        let _ = writeln!(
            o,
            "  {:<4} {:<22} {:<24} {:>5} {:>8}  why",
            "rank", "shape", "M", "calls", "FLOP"
        );
        for (i, g) in gaps.iter().take(top).enumerate() {
            let s = &r.shapes[g.shape];
            let unservable = g
                .problems
                .iter()
                .filter(|p| matches!(p.status, Status::Unservable(_)))
                .count();
            let near_from: BTreeSet<i64> = g.problems.iter().filter_map(|p| p.near).collect();
            let mut note = if unservable > 0 {
                format!(" [{unservable} unservable]")
            } else {
                String::new()
            };
            if !near_from.is_empty() {
                let from: Vec<String> = near_from.iter().map(i64::to_string).collect();
                let _ = write!(note, " [near: row at {}]", from.join(","));
            }
            let biggest = g.problems.iter().map(|p| p.key.flops()).fold(0.0, f64::max);
            let _ = writeln!(
                o,
                "  {:<4} {:<22} {:<24} {:>5} {:>8}  {}{note}",
                i + 1,
                s.label(),
                ms_short(&g.problems),
                s.calls_per_step,
                short(biggest),
                g.label,
            );
        }
    }
    if !r.unused_rows.is_empty() {
        let mut ms: Vec<i64> = r.unused_rows.iter().map(|k| k.n).collect();
        ms.sort_unstable();
        ms.dedup();
        let _ = writeln!(
            o,
            "\n{} profile rows are at token counts this configuration does not predict (M = {})",
            r.unused_rows.len(),
            compress(&ms)
        );
    }
    let _ = writeln!(
        o,
        "prompt tails (the last chunk of a prompt) can be any length; only near-shape serving covers them"
    );
    o
}

/// The report as JSON: every problem with its status and reasons, ranked.
pub fn to_json(r: &Report) -> Value {
    let shapes: Vec<Value> = r
        .shapes
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "label": s.label(),
                "n": s.family.m,
                "k": s.family.k,
                "calls_per_step": s.calls_per_step,
                "role": if s.role == Role::LmHead { "lm_head" } else { "body" },
            })
        })
        .collect();
    let problems: Vec<Value> = r
        .problems
        .iter()
        .map(|p| {
            let (op, sig) = tunableop::op_and_signature(&p.key);
            let mut v = json!({
                "shape": r.shapes[p.shape].label(),
                "n": p.key.m,
                "k": p.key.k,
                "m": p.m,
                "status": p.status.word(),
                "op": op,
                "signature": sig,
                "calls_per_step": r.shapes[p.shape].calls_per_step,
                "flops": p.key.flops(),
                "cost": p.cost,
                "reasons": p.whys.iter().map(|w| json!({"reason": w.reason.label(), "detail": w.detail})).collect::<Vec<_>>(),
            });
            if let Some(t) = p.near {
                v["near_row"] = json!(t);
            }
            match &p.status {
                Status::Tuned(id) => v["solution"] = json!(id),
                Status::Unservable(why) => v["why"] = json!(why),
                _ => {}
            }
            v
        })
        .collect();
    json!({
        "source": r.source,
        "profile": r.profile,
        "serving": r.serving.describe(),
        "summary": {
            "problems": r.problems.len(),
            "tuned": r.count("tuned"),
            "default": r.count("Default"),
            "missing": r.count("missing"),
            "unservable": r.count("unservable"),
            "covered_cost_share": r.covered_cost_share(),
            "unused_profile_rows": r.unused_rows.len(),
            "near_window": r.near_window,
            "missing_with_near_row": r.problems.iter().filter(|p| p.near.is_some()).count(),
        },
        "shapes": shapes,
        "gap_groups": gap_groups(r).iter().map(|g| json!({
            "shape": r.shapes[g.shape].label(),
            "group": g.label,
            "m": g.problems.iter().map(|p| p.m).collect::<Vec<_>>(),
            "statuses": g.problems.iter().map(|p| p.status.word()).collect::<Vec<_>>(),
            "cost": g.cost,
        })).collect::<Vec<_>>(),
        "problems": problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn serving(s: &str) -> Serving {
        let (sv, rest) = Serving::from_args(&args(s)).unwrap();
        assert!(rest.is_empty(), "unused {rest:?}");
        sv
    }

    fn reasons_at(g: &Grid, m: i64) -> Vec<Reason> {
        g.get(&m)
            .map_or(vec![], |w| w.iter().map(|w| w.reason).collect())
    }

    fn half() -> Types {
        Types::uniform(abi::DT_F16_R, abi::DT_F32_R)
    }

    #[test]
    fn decode_capture_sizes_follow_vllm_defaults() {
        let g = grid(&serving("--max-num-seqs 256"), Role::Body);
        let caps: Vec<i64> = g
            .iter()
            .filter(|(_, w)| w.iter().any(|w| w.reason == Reason::DecodeCapture))
            .map(|(m, _)| *m)
            .collect();
        assert_eq!(&caps[..5], &[1, 2, 4, 8, 16]);
        assert!(caps.contains(&248) && caps.contains(&256) && caps.contains(&272));
        assert!(!caps.contains(&3) && !caps.contains(&260));
        assert_eq!(*caps.last().unwrap(), 512, "min(2 x 256, 512)");
        // A small server captures less: min(2 x 8, 512) = 16.
        let g = grid(&serving("--max-num-seqs 8"), Role::Body);
        assert!(reasons_at(&g, 16).contains(&Reason::DecodeCapture));
        assert!(!reasons_at(&g, 24).contains(&Reason::DecodeCapture));
        // Explicit sizes win.
        let g = grid(&serving("--cuda-graph-sizes 1,3,5"), Role::Body);
        assert!(reasons_at(&g, 3).contains(&Reason::DecodeCapture));
        assert!(!reasons_at(&g, 2).contains(&Reason::DecodeCapture));
    }

    #[test]
    fn eager_decode_runs_every_batch_size() {
        let g = grid(&serving("--enforce-eager --max-num-seqs 40"), Role::Body);
        for m in 1..=40 {
            assert!(reasons_at(&g, m).contains(&Reason::DecodeEager), "M={m}");
        }
        assert!(!g
            .values()
            .flatten()
            .any(|w| w.reason == Reason::DecodeCapture));
        // Graphs captured only up to 16: larger decode batches run eagerly.
        let g = grid(
            &serving("--max-num-seqs 24 --max-cudagraph-capture-size 16"),
            Role::Body,
        );
        assert!(reasons_at(&g, 17).contains(&Reason::DecodeEager));
        assert!(!reasons_at(&g, 16).contains(&Reason::DecodeEager));
    }

    #[test]
    fn mtp_verify_is_requests_times_k_plus_one() {
        let g = grid(
            &serving("--num-speculative-tokens 2 --max-num-seqs 8"),
            Role::Body,
        );
        for m in [3, 6, 12, 24] {
            assert!(reasons_at(&g, m).contains(&Reason::MtpVerify), "M={m}");
        }
        assert!(!reasons_at(&g, 9).contains(&Reason::MtpVerify));
        let sv = serving(r#"--speculative-config={"method":"mtp","num_speculative_tokens":1}"#);
        assert_eq!(sv.spec_tokens, 1);
        assert!(reasons_at(&grid(&sv, Role::Body), 2).contains(&Reason::MtpVerify));
    }

    #[test]
    fn prefill_chunks_are_block_multiples_up_to_the_budget() {
        let g = grid(
            &serving("--block-size 1024 --max-num-batched-tokens 2048"),
            Role::Body,
        );
        assert!(reasons_at(&g, 1024).contains(&Reason::PrefillChunk));
        assert!(reasons_at(&g, 2048).contains(&Reason::PrefillChunk));
        assert!(!g.contains_key(&3072));
        // The seed's trap: without the ladder, 256 and 512 are only decode capture sizes.
        assert!(!reasons_at(&g, 512).contains(&Reason::DynamicRung));
    }

    #[test]
    fn the_dynamic_ladder_adds_rungs_and_shared_caps() {
        let g = grid(
            &serving("--block-size 1024 --max-num-batched-tokens 2048 --dynamic-prefill"),
            Role::Body,
        );
        assert!(reasons_at(&g, 256).contains(&Reason::DynamicRung));
        assert!(reasons_at(&g, 512).contains(&Reason::DynamicRung));
        assert!(reasons_at(&g, 512).contains(&Reason::DynamicShared));
        assert!(
            reasons_at(&g, 1536).contains(&Reason::DynamicShared),
            "3 x 512"
        );
        assert!(
            reasons_at(&g, 2048).contains(&Reason::DynamicShared),
            "4 x 512, 8 x 256"
        );
        assert!(
            !g.contains_key(&768),
            "3 x 256 needs 8 eligible requests, which fill 2048"
        );
        let g = grid(
            &serving("--max-num-batched-tokens 4096 --dyn-rungs 384 --dyn-shared-cap 640 --dyn-thresholds 6:320"),
            Role::Body,
        );
        assert!(reasons_at(&g, 384).contains(&Reason::DynamicRung));
        assert!(reasons_at(&g, 640).contains(&Reason::DynamicShared));
        assert!(reasons_at(&g, 320).contains(&Reason::DynamicShared));
        assert!(!reasons_at(&g, 256).contains(&Reason::DynamicRung));
    }

    #[test]
    fn long_prefill_threshold_caps_each_prompt() {
        let g = grid(
            &serving(
                "--max-num-batched-tokens 2048 --long-prefill-token-threshold 600 --enforce-eager",
            ),
            Role::Body,
        );
        for m in [600, 1200, 1800] {
            assert!(reasons_at(&g, m).contains(&Reason::LongPrefill), "M={m}");
        }
    }

    #[test]
    fn capped_chunks_mix_with_decodes_and_pad_under_piecewise_graphs() {
        let sv = serving(
            "--block-size 1024 --max-num-batched-tokens 2048 --dynamic-prefill --mix-decodes 21",
        );
        let g = grid(&sv, Role::Body);
        // 512 + 1..21 runs eagerly (above the largest capture size, 512).
        for m in 513..=533 {
            assert!(reasons_at(&g, m).contains(&Reason::ChunkDecodeMix), "M={m}");
        }
        assert!(!reasons_at(&g, 534).contains(&Reason::ChunkDecodeMix));
        assert!(
            reasons_at(&g, 1045).contains(&Reason::ChunkDecodeMix),
            "1024 + 21"
        );
        // 256 + d fits under 512: padded to the capture sizes 272 and 288.
        assert!(reasons_at(&g, 272).contains(&Reason::ChunkDecodeMix));
        assert!(!g.contains_key(&257));
        // The budget itself never gets a mix: the chunk shrinks instead.
        assert!(!g.contains_key(&2049));
        // Mixes of speculative decodes add k + 1 tokens per request.
        let g = grid(
            &serving("--enforce-eager --dyn-rungs 512 --num-speculative-tokens 2 --mix-decodes 2"),
            Role::Body,
        );
        assert!(reasons_at(&g, 515).contains(&Reason::ChunkDecodeMix));
        assert!(reasons_at(&g, 518).contains(&Reason::ChunkDecodeMix));
        assert!(!reasons_at(&g, 513).contains(&Reason::ChunkDecodeMix));
        // Decode-only graphs leave mixed steps eager and unpadded.
        let g = grid(
            &serving(
                r#"--dyn-rungs 256 --compilation-config {"cudagraph_mode":"FULL_DECODE_ONLY"}"#,
            ),
            Role::Body,
        );
        assert!(reasons_at(&g, 257).contains(&Reason::ChunkDecodeMix));
    }

    #[test]
    fn lm_head_sees_the_sampled_tokens() {
        let g = grid(
            &serving("--max-num-seqs 4 --num-speculative-tokens 2"),
            Role::LmHead,
        );
        let ms: Vec<i64> = g.keys().copied().collect();
        assert_eq!(ms, vec![1, 2, 3, 4, 6, 9, 12]);
    }

    #[test]
    fn unknown_flags_are_handed_back_and_bad_values_refused() {
        let (sv, rest) =
            Serving::from_args(&args("serve model --block-size=32 --port 8000")).unwrap();
        assert_eq!(sv.block_size, 32);
        assert_eq!(rest, args("serve model --port 8000"));
        assert!(Serving::from_args(&args("--block-size 0")).is_err());
        assert!(Serving::from_args(&args("--max-num-seqs")).is_err());
        assert!(Serving::from_args(&args("--dyn-thresholds 8-256")).is_err());
    }

    fn llama_config() -> Value {
        serde_json::from_str(
            r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4096,
                "intermediate_size":14336,"num_attention_heads":32,"num_key_value_heads":8,
                "num_hidden_layers":32,"vocab_size":128256,"torch_dtype":"bfloat16"}"#,
        )
        .unwrap()
    }

    fn pairs(shapes: &[Shape]) -> Vec<(String, i64, i64, u64)> {
        shapes
            .iter()
            .map(|s| (s.name.clone(), s.family.m, s.family.k, s.calls_per_step))
            .collect()
    }

    #[test]
    fn llama_layers_as_vllm_fuses_them_with_tensor_parallel_splits() {
        let opts = ModelOptions {
            tp: 1,
            ..Default::default()
        };
        let (_, s) = shapes_from_hf_config(&llama_config(), &opts).unwrap();
        assert_eq!(
            pairs(&s),
            vec![
                ("qkv_proj".into(), 6144, 4096, 32),
                ("o_proj".into(), 4096, 4096, 32),
                ("gate_up_proj".into(), 28672, 4096, 32),
                ("down_proj".into(), 4096, 14336, 32),
                ("lm_head".into(), 128256, 4096, 1),
            ]
        );
        assert_eq!(s[4].role, Role::LmHead);
        assert_eq!(
            s[0].family.types,
            Types::uniform(abi::DT_BF16_R, abi::DT_F32_R)
        );
        let opts = ModelOptions {
            tp: 4,
            ..Default::default()
        };
        let (_, s) = shapes_from_hf_config(&llama_config(), &opts).unwrap();
        assert_eq!(
            pairs(&s),
            vec![
                ("qkv_proj".into(), 1536, 4096, 32),
                ("o_proj".into(), 4096, 1024, 32),
                ("gate_up_proj".into(), 7168, 4096, 32),
                ("down_proj".into(), 4096, 3584, 32),
                ("lm_head".into(), 32064, 4096, 1),
            ]
        );
        // 8 kv heads over 16 ranks: replicated, one per rank.
        let opts = ModelOptions {
            tp: 16,
            ..Default::default()
        };
        let (_, s) = shapes_from_hf_config(&llama_config(), &opts).unwrap();
        assert_eq!(s[0].family.m, (2 + 2) * 128);
    }

    #[test]
    fn unfused_layers_merge_equal_shapes() {
        let opts = ModelOptions {
            tp: 1,
            unfused: true,
            dtype: Some(half()),
        };
        let (_, s) = shapes_from_hf_config(&llama_config(), &opts).unwrap();
        let p = pairs(&s);
        assert!(
            p.contains(&("q_proj+o_proj".into(), 4096, 4096, 64)),
            "{p:?}"
        );
        assert!(
            p.contains(&("k_proj+v_proj".into(), 1024, 4096, 64)),
            "{p:?}"
        );
        assert!(
            p.contains(&("gate_proj+up_proj".into(), 14336, 4096, 64)),
            "{p:?}"
        );
    }

    #[test]
    fn qwen3_head_dim_and_mistral_text_config() {
        let qwen3: Value = serde_json::from_str(
            r#"{"model_type":"qwen3","hidden_size":2560,"intermediate_size":9728,
                "num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,
                "num_hidden_layers":36,"vocab_size":151936,"torch_dtype":"bfloat16"}"#,
        )
        .unwrap();
        let (_, s) = shapes_from_hf_config(&qwen3, &ModelOptions::default()).unwrap();
        // q is 32 x 128 = 4096 wide although hidden is 2560.
        assert_eq!((s[0].family.m, s[0].family.k), (4096 + 2048, 2560));
        assert_eq!((s[1].family.m, s[1].family.k), (2560, 4096));
        let wrapped = json!({"model_type": "mistral3", "text_config": {
            "model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "num_hidden_layers": 40, "vocab_size": 131072}});
        let (_, s) = shapes_from_hf_config(&wrapped, &ModelOptions::default()).unwrap();
        assert_eq!(s[0].family.m, 4096 + 2048);
        let moe = json!({"model_type": "qwen3", "num_experts": 128});
        assert!(shapes_from_hf_config(&moe, &ModelOptions::default()).is_err());
        let gpt2 = json!({"model_type": "gpt2"});
        assert!(shapes_from_hf_config(&gpt2, &ModelOptions::default())
            .unwrap_err()
            .contains("--shapes"));
        let opts = ModelOptions {
            tp: 3,
            ..Default::default()
        };
        assert!(
            shapes_from_hf_config(&qwen3, &opts).is_err(),
            "32 heads over 3 ranks"
        );
    }

    #[test]
    fn shapes_file_columns_and_errors() {
        let text = "N,K,dtype,layout,calls,name\n# comment\n10240 2560\n512,2560,bf16,TN,36,gate\n151936,2560,f16,TN,1,lm_head\n";
        let s = shapes_from_file(text, half()).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].family.types, half());
        assert_eq!(s[1].calls_per_step, 36);
        assert_eq!(
            s[1].family.types,
            Types::uniform(abi::DT_BF16_R, abi::DT_F32_R)
        );
        assert_eq!(s[2].role, Role::LmHead);
        let nn = shapes_from_file("64,32,f32,NN", half()).unwrap();
        let k = nn[0].at(8).unwrap();
        assert_eq!((k.trans_a, k.lda, k.ldb, k.ldc), (Trans::N, 64, 32, 64));
        assert!(shapes_from_file("64", half()).is_err());
        assert!(shapes_from_file("64,0", half()).is_err());
        assert!(shapes_from_file("64,32,f8", half()).is_err());
        assert!(shapes_from_file("# nothing\n", half()).is_err());
    }

    const PROFILE: &str = "Validator,PT_VERSION,2.7.0\n\
        GemmTunableOp_Half_TN,tn_512_1024_2560_ld_2560_2560_512,Gemm_Rocblas_-1086327686,0.14\n\
        GemmTunableOp_Half_TN,tn_512_2048_2560_ld_2560_2560_512,Default,0.25\n\
        GemmTunableOp_Half_TN,tn_512_256_2560_ld_2560_2560_512,Gemm_Hipblaslt_77,0.05\n\
        GemmTunableOp_Half_TN,tn_4096_*_2560_ld_2560_2560_4096,Gemm_Rocblas_-1086327700,0.1\n\
        GemmTunableOp_Half_TN,tn_336_800_10240_ld_10240_10240_336,Gemm_Rocblas_-5,0.4\n";

    #[test]
    fn statuses_from_a_profile_and_wildcard_rows() {
        let f = tunableop::parse(PROFILE);
        let ix = ProfileIndex::new(&f);
        let s = shapes_from_profile(&f);
        assert_eq!(s.len(), 3, "512x2560, 336x10240 and the * row's 4096x2560");
        let at = |m| ix.status(&s[0].at(m).unwrap());
        assert_eq!(at(1024), Status::Tuned(-1086327686));
        assert_eq!(at(2048), Status::Default);
        assert!(matches!(at(256), Status::Unservable(_)));
        assert_eq!(at(777), Status::Missing);
        assert_eq!(ix.status(&s[1].at(801).unwrap()), Status::Missing);
        assert_eq!(s[2].family.m, 4096);
        assert_eq!(
            ix.status(&s[2].at(777).unwrap()),
            Status::Tuned(-1086327700),
            "the * row"
        );
    }

    #[test]
    fn analysis_ranks_gaps_by_cost_and_lists_unused_rows() {
        let f = tunableop::parse(PROFILE);
        let ix = ProfileIndex::new(&f);
        let sv = serving(
            "--block-size 1024 --max-num-batched-tokens 2048 --max-num-seqs 4 --mix-decodes 0",
        );
        let r = analyse("test", shapes_from_profile(&f), &sv, Some(("p", &ix)), 32);
        let costs: Vec<f64> = r.problems.iter().map(|p| p.cost).collect();
        assert!(costs.windows(2).all(|w| w[0] >= w[1]));
        let gap = r.gaps().next().unwrap();
        assert_eq!(
            (gap.key.m, gap.m),
            (336, 2048),
            "the biggest missing problem first"
        );
        assert_eq!(r.unused_rows.len(), 1, "M=800 is not predicted");
        let text = render_text(&r, 5);
        assert!(text.contains("M = 800"), "{text}");
        let j = to_json(&r);
        assert_eq!(
            j["summary"]["problems"].as_u64().unwrap() as usize,
            r.problems.len()
        );
        assert_eq!(j["problems"][0]["m"], 2048);
    }

    fn fixture(rel: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/vllm-rdna")
            .join(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The issue's case: the published 70-row gfx1030 profile under the seed's live
    /// configuration (block size 1024, 2048 batched tokens, dynamic prefill on).
    #[test]
    fn the_seed_live_configuration_on_the_70_row_profile() {
        let f = tunableop::parse(&fixture("rocblas-c27e2252cc7a/tunableop_results0.csv"));
        assert_eq!(f.rows.len(), 70);
        let ix = ProfileIndex::new(&f);
        let shapes = shapes_from_profile(&f);
        let pairs: BTreeSet<(i64, i64)> = shapes.iter().map(|s| (s.family.m, s.family.k)).collect();
        assert_eq!(
            pairs,
            BTreeSet::from([
                (3584, 2560),
                (10240, 2560),
                (512, 2560),
                (2560, 1536),
                (4096, 2560),
                (10240, 320),
                (336, 10240)
            ])
        );
        let live = serving("--block-size 1024 --max-num-batched-tokens 2048 --dynamic-prefill");
        let r = analyse("fixture", shapes.clone(), &live, Some(("c27e", &ix)), 32);
        let at = |m: i64| -> Vec<&Problem> { r.problems.iter().filter(|p| p.m == m).collect() };
        for m in [256, 512] {
            let ps = at(m);
            assert_eq!(ps.len(), 7, "M={m}");
            assert!(ps.iter().all(|p| p.status == Status::Missing), "M={m}");
            assert!(ps
                .iter()
                .all(|p| p.whys.iter().any(|w| w.reason == Reason::DynamicRung)));
        }
        let defaults = |m: i64| -> BTreeSet<(i64, i64)> {
            at(m)
                .iter()
                .filter(|p| p.status == Status::Default)
                .map(|p| (p.key.m, p.key.k))
                .collect()
        };
        for m in [1024, 2048] {
            assert!(at(m).iter().all(|p| p.status.is_covered()), "M={m}");
        }
        assert_eq!(defaults(1024), BTreeSet::from([(4096, 2560), (10240, 320)]));
        assert_eq!(
            defaults(2048),
            BTreeSet::from([(10240, 2560), (10240, 320)])
        );
        // Near serving would try the 1024 rows for 1024 + d on the five tuned layers, and
        // nothing for 512 + d (no row at 512 to take).
        let near_at = |m: i64| at(m).iter().filter(|p| p.near == Some(1024)).count();
        assert_eq!(near_at(1030), 5);
        assert!(at(520).iter().all(|p| p.near.is_none()));
        // The chunk-plus-decode mixes of the 512 chunk run eagerly and are missing too.
        assert!(at(533)
            .iter()
            .all(|p| p.status == Status::Missing && p.whys[0].reason == Reason::ChunkDecodeMix));

        let text = render_text(&r, 10);
        assert!(
            text.contains("missing for all 7 shapes: M = 256, 512"),
            "{text}"
        );
        assert!(
            text.contains("present at: M = 1024 (5 tuned, 2 Default); 2048 (5 tuned, 2 Default)"),
            "{text}"
        );
        assert!(text.contains("M = 1024 (dynamic rung, dynamic shared cap, prefill chunk): 5 tuned, 2 Default; Default: 4096x2560, 10240x320"), "{text}");

        // The seed's checker model (block multiples only) cannot see the 256/512 family.
        let blocks_only = serving("--block-size 1024 --max-num-batched-tokens 2048");
        let r0 = analyse("fixture", shapes, &blocks_only, Some(("c27e", &ix)), 32);
        assert!(r0
            .problems
            .iter()
            .filter(|p| p.m == 256 || p.m == 512)
            .all(|p| p.whys.iter().all(|w| w.reason == Reason::DecodeCapture)));
        assert!(!render_text(&r0, 10).contains("missing for all"));
    }

    #[test]
    fn compress_collapses_runs() {
        assert_eq!(compress(&[1, 2, 4, 8]), "1 2 4 8");
        assert_eq!(compress(&[513, 514, 515, 516, 1024]), "513..516 1024");
    }
}
