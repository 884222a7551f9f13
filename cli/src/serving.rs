//! vLLM's serving flags (and the seed's dynamic-prefill ladder flags) read into the core's
//! [`Serving`] model, for `tunedblas coverage`. Command-line spelling is the CLI's business;
//! the core only models what a configuration runs.

use serde_json::Value;
use tunedblas_core::coverage::{GraphMode, Ladder, Serving};

use crate::error::{Error, Result};

/// The flags that take a value, as vLLM spells them (`--flag value` or `--flag=value`).
pub const VALUE_FLAGS: &[&str] = &[
    "--max-num-batched-tokens",
    "--block-size",
    "--max-num-seqs",
    "--tensor-parallel-size",
    "-tp",
    "--num-speculative-tokens",
    "--speculative-config",
    "--cuda-graph-sizes",
    "--max-cudagraph-capture-size",
    "--compilation-config",
    "--long-prefill-token-threshold",
    "--dyn-rungs",
    "--dyn-shared-cap",
    "--dyn-thresholds",
    "--mix-decodes",
];

/// The flags that stand alone.
pub const SWITCHES: &[&str] = &["--enforce-eager", "--dynamic-prefill"];

/// The flags [`from_args`] understands, for the help text.
pub const HELP: &str = "    vLLM: --max-num-batched-tokens N, --block-size N, --max-num-seqs N,
          --tensor-parallel-size N (-tp N), --num-speculative-tokens N,
          --speculative-config JSON (num_speculative_tokens), --cuda-graph-sizes N,N,..,
          --max-cudagraph-capture-size N, --compilation-config JSON (cudagraph_mode,
          cudagraph_capture_sizes, max_cudagraph_capture_size), --enforce-eager,
          --long-prefill-token-threshold N   (--flag=value works too)
    dynamic prefill: --dynamic-prefill (the seed's ladder: rungs 256,512,1024, shared cap
          512, 256 from 8 eligible requests), --dyn-rungs N,N,.., --dyn-shared-cap N,
          --dyn-thresholds E:CAP,..   (any of these turns the ladder on)
    --mix-decodes N   decode requests sharing a step with a capped chunk (default 32)";

/// A bad serving value: a command-line mistake of `coverage`.
fn bad(msg: impl Into<String>) -> Error {
    Error::usage("coverage", msg)
}

/// Reads the serving flags out of `args` (vLLM's own spelling). Returns the configuration
/// and the arguments it did not use, in order, for the command's own parser.
pub fn from_args(args: &[String]) -> Result<(Serving, Vec<String>)> {
    let mut s = Serving::default();
    let mut ladder: Option<Ladder> = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        if SWITCHES.contains(&flag) {
            match flag {
                "--enforce-eager" => s.graphs = GraphMode::Eager,
                _ => {
                    ladder.get_or_insert_with(Ladder::default);
                }
            }
        } else if VALUE_FLAGS.contains(&flag) {
            let value = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| bad(format!("{flag} needs a value")))?,
            };
            apply(&mut s, &mut ladder, flag, &value)?;
        } else {
            rest.push(arg.clone());
        }
    }
    s.ladder = ladder;
    Ok((s, rest))
}

/// Sets what one valued flag says.
fn apply(s: &mut Serving, ladder: &mut Option<Ladder>, flag: &str, value: &str) -> Result<()> {
    let num = || non_negative(flag, value);
    let positive = || positive(flag, value);
    match flag {
        "--max-num-batched-tokens" => s.max_num_batched_tokens = positive()?,
        "--block-size" => s.block_size = positive()?,
        "--max-num-seqs" => s.max_num_seqs = positive()?,
        "--tensor-parallel-size" | "-tp" => {
            s.tp = u32::try_from(positive()?).map_err(|_| bad("tensor-parallel size too large"))?
        }
        "--num-speculative-tokens" => s.spec_tokens = num()?,
        "--speculative-config" => {
            let v = json(flag, value)?;
            if let Some(k) = v.get("num_speculative_tokens").and_then(Value::as_i64) {
                s.spec_tokens = k.max(0);
            }
        }
        "--cuda-graph-sizes" => s.capture_sizes = Some(parse_list(value, flag)?),
        "--max-cudagraph-capture-size" => s.max_capture_size = Some(positive()?),
        "--compilation-config" => compilation_config(s, &json(flag, value)?),
        "--long-prefill-token-threshold" => s.long_prefill_token_threshold = num()?,
        "--dyn-rungs" => {
            ladder.get_or_insert_with(Ladder::default).rungs = parse_list(value, flag)?
        }
        "--dyn-shared-cap" => ladder.get_or_insert_with(Ladder::default).shared_cap = positive()?,
        "--dyn-thresholds" => {
            ladder.get_or_insert_with(Ladder::default).thresholds = thresholds(flag, value)?
        }
        "--mix-decodes" => s.mix_decodes = num()?,
        _ => unreachable!("{flag} is in VALUE_FLAGS"),
    }
    Ok(())
}

/// `--compilation-config`: the graph mode and capture sizes vLLM reads from it.
fn compilation_config(s: &mut Serving, v: &Value) {
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

fn json(flag: &str, value: &str) -> Result<Value> {
    serde_json::from_str(value).map_err(|e| bad(format!("{flag} is not JSON: {e}")))
}

fn non_negative(flag: &str, v: &str) -> Result<i64> {
    v.trim()
        .parse::<i64>()
        .ok()
        .filter(|&x| x >= 0)
        .ok_or_else(|| bad(format!("{flag} takes a non-negative number, not {v:?}")))
}

fn positive(flag: &str, v: &str) -> Result<i64> {
    Some(non_negative(flag, v)?)
        .filter(|&x| x > 0)
        .ok_or_else(|| bad(format!("{flag} takes a positive number")))
}

/// `E:CAP,..`: per-request caps at more eligible requests.
fn thresholds(flag: &str, value: &str) -> Result<Vec<(u32, i64)>> {
    let mut th = Vec::new();
    for part in value.split(',').filter(|p| !p.trim().is_empty()) {
        let (e, c) = part
            .split_once(':')
            .ok_or_else(|| bad(format!("{flag}: {part:?} is not ELIGIBLE:CAP")))?;
        let e = e
            .trim()
            .parse::<u32>()
            .map_err(|_| bad(format!("{flag}: {e:?} is not a count")))?;
        th.push((e, positive(flag, c)?));
    }
    Ok(th)
}

/// `1,2,4` or `[1, 2, 4]`: positive sizes.
fn parse_list(v: &str, what: &str) -> Result<Vec<i64>> {
    let list = v
        .trim_matches(|c| c == '[' || c == ']')
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<i64>()
                .map_err(|_| bad(format!("{what}: {s:?} is not a number")))
        })
        .collect::<Result<Vec<i64>>>()?;
    if list.iter().any(|&x| x <= 0) {
        return Err(bad(format!("{what}: sizes must be positive")));
    }
    Ok(list)
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use tunedblas_core::coverage::{grid, Grid, Reason, Role};

    pub fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    /// The configuration `s` (flags only) describes.
    pub fn serving(s: &str) -> Serving {
        let (sv, rest) = from_args(&args(s)).unwrap();
        assert!(rest.is_empty(), "unused {rest:?}");
        sv
    }

    /// The body GEMMs' grid of the configuration `s` describes.
    fn body(s: &str) -> Grid {
        grid(&serving(s), Role::Body)
    }

    /// Asserts that `reason` brings a GEMM at every M of `with` and at none of `without`.
    fn marks(g: &Grid, reason: Reason, with: impl IntoIterator<Item = i64>, without: &[i64]) {
        let at = |m: i64| {
            g.get(&m)
                .is_some_and(|w| w.iter().any(|w| w.reason == reason))
        };
        for m in with {
            assert!(at(m), "{reason:?} at M={m}");
        }
        for &m in without {
            assert!(!at(m), "no {reason:?} at M={m}");
        }
    }

    #[test]
    fn decode_capture_sizes_follow_vllm_defaults() {
        let g = body("--max-num-seqs 256");
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
        marks(
            &body("--max-num-seqs 8"),
            Reason::DecodeCapture,
            [16],
            &[24],
        );
        // Explicit sizes win.
        let g = body("--cuda-graph-sizes 1,3,5");
        marks(&g, Reason::DecodeCapture, [3], &[2]);
    }

    #[test]
    fn eager_decode_runs_every_batch_size() {
        let g = body("--enforce-eager --max-num-seqs 40");
        marks(&g, Reason::DecodeEager, 1..=40, &[]);
        assert!(!g
            .values()
            .flatten()
            .any(|w| w.reason == Reason::DecodeCapture));
        // Graphs captured only up to 16: larger decode batches run eagerly.
        let g = body("--max-num-seqs 24 --max-cudagraph-capture-size 16");
        marks(&g, Reason::DecodeEager, [17], &[16]);
    }

    #[test]
    fn mtp_verify_is_requests_times_k_plus_one() {
        let g = body("--num-speculative-tokens 2 --max-num-seqs 8");
        marks(&g, Reason::MtpVerify, [3, 6, 12, 24], &[9]);
        let sv = serving(r#"--speculative-config={"method":"mtp","num_speculative_tokens":1}"#);
        assert_eq!(sv.spec_tokens, 1);
        marks(&grid(&sv, Role::Body), Reason::MtpVerify, [2], &[]);
    }

    #[test]
    fn prefill_chunks_are_block_multiples_up_to_the_budget() {
        let g = body("--block-size 1024 --max-num-batched-tokens 2048");
        marks(&g, Reason::PrefillChunk, [1024, 2048], &[]);
        assert!(!g.contains_key(&3072));
        // The seed's trap: without the ladder, 256 and 512 are only decode capture sizes.
        marks(&g, Reason::DynamicRung, [], &[512]);
    }

    #[test]
    fn the_dynamic_ladder_adds_rungs_and_shared_caps() {
        let g = body("--block-size 1024 --max-num-batched-tokens 2048 --dynamic-prefill");
        marks(&g, Reason::DynamicRung, [256, 512], &[]);
        // 1536 is 3 x 512; 2048 is 4 x 512 and 8 x 256.
        marks(&g, Reason::DynamicShared, [512, 1536, 2048], &[]);
        assert!(
            !g.contains_key(&768),
            "3 x 256 needs 8 eligible requests, which fill 2048"
        );
        let g = body("--max-num-batched-tokens 4096 --dyn-rungs 384 --dyn-shared-cap 640 --dyn-thresholds 6:320");
        marks(&g, Reason::DynamicRung, [384], &[256]);
        marks(&g, Reason::DynamicShared, [640, 320], &[]);
    }

    #[test]
    fn long_prefill_threshold_caps_each_prompt() {
        let g = body(
            "--max-num-batched-tokens 2048 --long-prefill-token-threshold 600 --enforce-eager",
        );
        marks(&g, Reason::LongPrefill, [600, 1200, 1800], &[]);
    }

    #[test]
    fn capped_chunks_mix_with_decodes_and_pad_under_piecewise_graphs() {
        let sv = serving(
            "--block-size 1024 --max-num-batched-tokens 2048 --dynamic-prefill --mix-decodes 21",
        );
        let g = grid(&sv, Role::Body);
        // 512 + 1..21 runs eagerly (above the largest capture size, 512), and 1024 + 21.
        marks(
            &g,
            Reason::ChunkDecodeMix,
            (513..=533).chain([1045]),
            &[534],
        );
        // 256 + d fits under 512: padded to the capture sizes 272 and 288.
        marks(&g, Reason::ChunkDecodeMix, [272], &[]);
        assert!(!g.contains_key(&257));
        // The budget itself never gets a mix: the chunk shrinks instead.
        assert!(!g.contains_key(&2049));
        // Mixes of speculative decodes add k + 1 tokens per request.
        let g = body("--enforce-eager --dyn-rungs 512 --num-speculative-tokens 2 --mix-decodes 2");
        marks(&g, Reason::ChunkDecodeMix, [515, 518], &[513]);
        // Decode-only graphs leave mixed steps eager and unpadded.
        let g =
            body(r#"--dyn-rungs 256 --compilation-config {"cudagraph_mode":"FULL_DECODE_ONLY"}"#);
        marks(&g, Reason::ChunkDecodeMix, [257], &[]);
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
        let (sv, rest) = from_args(&args("serve model --block-size=32 --port 8000")).unwrap();
        assert_eq!(sv.block_size, 32);
        assert_eq!(rest, args("serve model --port 8000"));
        assert!(from_args(&args("--block-size 0")).is_err());
        assert!(from_args(&args("--max-num-seqs")).is_err());
        assert!(from_args(&args("--dyn-thresholds 8-256")).is_err());
    }
}
