//! Coverage: which GEMM problems a serving configuration puts on the wire, and which of them
//! a profile serves.
//!
//! Three parts, each pure and unit-tested:
//! - **Shapes** ([`Shape`]): the layers, as problem families (everything but the token
//!   count), from a Hugging Face `config.json` ([`shapes_from_hf_config`]), from a shapes
//!   file ([`shapes_from_file`]), or from the rows already in a profile
//!   ([`shapes_from_profile`]).
//! - **The token grid** ([`Serving`], [`grid`]): the token counts (rocBLAS `n`, the "M" of
//!   the seed's tables) the server runs, each with the reasons it occurs, from vLLM's
//!   settings plus the seed's dynamic-prefill ladder.
//! - **The check** ([`analyse`]): every (shape, M) looked up in a profile
//!   ([`ProfileIndex`]) as tuned, `Default`, missing or unservable, ranked by the cost of one
//!   step at that M (calls per step x FLOPs), with the gaps grouped for tuning
//!   ([`gap_groups`]). Reading vLLM's flags and laying the report out as text or JSON are
//!   the `tunedblas coverage` command's (the harness).
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

use serde_json::Value;

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
/// The problem of an unservable row, where its op has a concrete form: another backend's
/// solution on a known op, or a GemmAndBias op (same signature as Gemm).
fn unservable_key(u: &tunableop::Unservable) -> Option<ProblemKey> {
    let op = u
        .op_name
        .replacen("GemmAndBiasTunableOp_", "GemmTunableOp_", 1);
    match tunableop::parse_key(&op, &u.signature) {
        KeyParse::Key(k) => Some(k),
        _ => None,
    }
}

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
    // A layer whose rows are all unservable (tuned with hipBLASLt, say) is still a layer
    // the server runs: it is checked, and shows as unservable, not dropped.
    for u in &file.unservable {
        if let Some(k) = unservable_key(u) {
            add(k);
        }
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

impl Serving {
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
    if role == Role::LmHead {
        return lm_head_grid(s);
    }
    let mut g = Grid::new();
    let caps = s.capture_sizes();
    decode_steps(&mut g, s, &caps);
    let max_cap = caps.last().copied().unwrap_or(0);
    let pad = |m: i64| -> i64 {
        if s.graphs == GraphMode::Piecewise && m <= max_cap {
            caps.iter().copied().find(|&c| c >= m).unwrap_or(m)
        } else {
            m
        }
    };
    let k1 = 1 + s.spec_tokens;
    let budget = s.max_num_batched_tokens;
    let chunks = prefill_chunks(s);
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

/// `lm_head` runs on the sampled tokens only: every request count (x k + 1 verifying).
fn lm_head_grid(s: &Serving) -> Grid {
    let mut g = Grid::new();
    let k1 = 1 + s.spec_tokens;
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
    g
}

/// Decode steps: the capture sizes, eager batches above them, MTP verify steps.
fn decode_steps(g: &mut Grid, s: &Serving, caps: &[i64]) {
    let k1 = 1 + s.spec_tokens;
    let budget = s.max_num_batched_tokens;
    let max_cap = caps.last().copied().unwrap_or(0);
    for &c in caps {
        add(
            g,
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
                g,
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
                    g,
                    m,
                    Reason::MtpVerify,
                    0,
                    format!("{r} requests x {k1} tokens"),
                );
            }
        }
    }
}

/// Prefill chunks before padding: (M, reason, detail).
fn prefill_chunks(s: &Serving) -> Vec<(i64, Reason, String)> {
    let budget = s.max_num_batched_tokens;
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
        ladder_chunks(ladder, budget, &mut chunks);
    }
    chunks
}

/// The dynamic-prefill controller's chunks: its rungs and its shared caps.
fn ladder_chunks(ladder: &Ladder, budget: i64, chunks: &mut Vec<(i64, Reason, String)>) {
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
    pub fn letter(&self) -> char {
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
            if let Some(k) = unservable_key(u) {
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
    pub fn label(&self, ps: &[&Problem]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn half() -> Types {
        Types::uniform(abi::DT_F16_R, abi::DT_F32_R)
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

    /// The layers as `name mxk xcalls`, comma-separated.
    fn layers(shapes: &[Shape]) -> String {
        let p: Vec<String> = pairs(shapes)
            .into_iter()
            .map(|(name, m, k, calls)| format!("{name} {m}x{k} x{calls}"))
            .collect();
        p.join(", ")
    }

    #[test]
    fn llama_layers_as_vllm_fuses_them_with_tensor_parallel_splits() {
        // Llama's layers on `tp` ranks.
        let on_ranks = |tp| {
            let opts = ModelOptions {
                tp,
                ..Default::default()
            };
            shapes_from_hf_config(&llama_config(), &opts).unwrap().1
        };
        let s = on_ranks(1);
        assert_eq!(
            layers(&s),
            "qkv_proj 6144x4096 x32, o_proj 4096x4096 x32, gate_up_proj 28672x4096 x32, \
             down_proj 4096x14336 x32, lm_head 128256x4096 x1"
        );
        assert_eq!(s[4].role, Role::LmHead);
        assert_eq!(
            s[0].family.types,
            Types::uniform(abi::DT_BF16_R, abi::DT_F32_R)
        );
        assert_eq!(
            layers(&on_ranks(4)),
            "qkv_proj 1536x4096 x32, o_proj 4096x1024 x32, gate_up_proj 7168x4096 x32, \
             down_proj 4096x3584 x32, lm_head 32064x4096 x1"
        );
        // 8 kv heads over 16 ranks: replicated, one per rank.
        assert_eq!(on_ranks(16)[0].family.m, (2 + 2) * 128);
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

    /// A profile with a tuned, a Default, a hipBLASLt and a `*` row (the harness's coverage
    /// report reads the same one).
    const PROFILE: &str = include_str!("../tests/fixtures/coverage-profile.csv");

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

    /// A layer tuned only with hipBLASLt is still a layer the server runs: it is listed,
    /// and its problems are unservable, not dropped.
    #[test]
    fn a_layer_whose_rows_are_all_unservable_is_kept() {
        let text = "Validator,PT_VERSION,2.7.0\n\
            GemmTunableOp_Half_TN,tn_2560_512_1536_ld_1536_1536_2560,Gemm_Hipblaslt_77,0.05\n\
            GemmTunableOp_Half_TN,tn_2560_1024_1536_ld_1536_1536_2560,Gemm_Hipblaslt_78,0.09\n";
        let f = tunableop::parse(text);
        assert!(f.rows.is_empty() && f.unservable.len() == 2);
        let s = shapes_from_profile(&f);
        assert_eq!(s.len(), 1, "the 2560x1536 layer");
        let ix = ProfileIndex::new(&f);
        assert!(matches!(
            ix.status(&s[0].at(512).unwrap()),
            Status::Unservable(_)
        ));
    }

    #[test]
    fn compress_collapses_runs() {
        assert_eq!(compress(&[1, 2, 4, 8]), "1 2 4 8");
        assert_eq!(compress(&[513, 514, 515, 516, 1024]), "513..516 1024");
    }
}
