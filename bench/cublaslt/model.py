"""A whole model through a framework nobody here wrote: Hugging Face transformers running a
Llama-3.2-3B-shaped decoder (random bf16 weights, built from a config: nothing is downloaded).

    python3 model.py record              prefill + a few greedy decode steps (the misses to tune)
    python3 model.py time --label L      prefill and decode times in this process, one JSON line

Batch 4, a 512-token prompt: prefill makes M = 2048 GEMMs, each decode step M = 4. Decode is
timed two ways: eager steps (host-bound: Python and the framework dominate) and, where the
model's static cache allows it, one decode step captured as a CUDA graph and replayed (the GPU
time of the step's kernels, which is where a served GEMM row shows). With
TORCH_BLAS_PREFER_CUBLASLT=1 (set by the caller) PyTorch sends its bf16 GEMMs to cublasLtMatmul.
"""

import argparse
import json
import statistics
import sys
import time

import torch

BATCH, PROMPT, STEPS = 4, 512, 32


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def build():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=28,
        num_attention_heads=24,
        num_key_value_heads=8,
        vocab_size=128256,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    return cfg, model


def prompt(cfg):
    g = torch.Generator(device="cuda").manual_seed(1)
    return torch.randint(0, cfg.vocab_size, (BATCH, PROMPT), device="cuda", generator=g)


def static_cache(cfg, model):
    from transformers import StaticCache

    try:
        return StaticCache(config=cfg, max_cache_len=PROMPT + 512)
    except TypeError:
        return StaticCache(config=cfg, max_batch_size=BATCH, max_cache_len=PROMPT + 512, device="cuda", dtype=torch.bfloat16)


def prefill(model, ids, cache):
    pos = torch.arange(ids.shape[1], device="cuda")
    # Only the last position's logits, as a server computes them.
    out = model(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True, logits_to_keep=1)
    return out.logits.argmax(-1)


def events_ms(fn, reps):
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


@torch.no_grad()
def record(cfg, model):
    ids = prompt(cfg)
    for _ in range(2):
        cache = static_cache(cfg, model)
        tok = prefill(model, ids, cache)
        for s in range(4):
            pos = torch.tensor([PROMPT + s], device="cuda")
            tok = model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True).logits.argmax(-1)
    torch.cuda.synchronize()
    log("recorded: prefill", BATCH * PROMPT, "tokens, 4 decode steps, twice")


@torch.no_grad()
def timed(cfg, model, label):
    ids = prompt(cfg)
    res = {"label": label, "device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    cache = static_cache(cfg, model)
    for _ in range(3):
        cache.reset()
        prefill(model, ids, cache)
    torch.cuda.synchronize()

    def one_prefill():
        cache.reset()
        prefill(model, ids, cache)

    pf = events_ms(one_prefill, 10)
    res["prefill_ms"] = statistics.median(pf)
    res["prefill_ms_all"] = pf

    # Eager decode: STEPS greedy steps after a fresh prefill, wall clock per step.
    cache.reset()
    tok = prefill(model, ids, cache)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for s in range(STEPS):
        pos = torch.tensor([PROMPT + s], device="cuda")
        tok = model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True).logits.argmax(-1)
    torch.cuda.synchronize()
    res["decode_eager_ms_per_step"] = (time.perf_counter() - t0) * 1e3 / STEPS

    # Graph decode: one step captured with a static token and position, replayed.
    try:
        cache.reset()
        tok = prefill(model, ids, cache)
        s_tok = tok.clone()
        s_pos = torch.tensor([PROMPT], device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(input_ids=s_tok, past_key_values=cache, cache_position=s_pos, use_cache=True)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            s_out = model(input_ids=s_tok, past_key_values=cache, cache_position=s_pos, use_cache=True).logits
        for _ in range(5):
            graph.replay()

        def steps():
            for s in range(STEPS):
                s_pos.fill_(PROMPT + s)
                graph.replay()
                s_tok.copy_(s_out.argmax(-1))

        rounds = events_ms(steps, 15)
        res["decode_graph_ms_per_step"] = statistics.median(rounds) / STEPS
        res["decode_graph_ms_all"] = [r / STEPS for r in rounds]
    except Exception as e:  # a framework version whose cache cannot be captured
        res["decode_graph_error"] = f"{type(e).__name__}: {e}"[:300]
    print(json.dumps(res), flush=True)
    log(label, "prefill %.3f ms" % res["prefill_ms"], "decode eager %.3f ms/step" % res["decode_eager_ms_per_step"],
        "graph %s" % (("%.4f ms/step" % res["decode_graph_ms_per_step"]) if "decode_graph_ms_per_step" in res else res.get("decode_graph_error")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["record", "time"])
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    t0 = time.perf_counter()
    cfg, model = build()
    log("model built in %.1f s: %.2f B parameters" % (time.perf_counter() - t0, sum(p.numel() for p in model.parameters()) / 1e9))
    if a.mode == "record":
        record(cfg, model)
    else:
        timed(cfg, model, a.label)


if __name__ == "__main__":
    main()
