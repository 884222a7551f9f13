"""The seed's bf16 linear layers through PyTorch's cuBLASLt path, for tunedblas on NVIDIA.

Seven (N, K) weight shapes x token counts M, each `F.linear(x[M, K], W[N, K])` in bf16,
with TORCH_BLAS_PREFER_CUBLASLT=1 (set by the caller) so PyTorch calls cublasLtMatmul.

    python3 workload.py record                   every shape a few times (the misses to tune)
    python3 workload.py ab --profile-csv F       per shape, in this one process: CUDA graphs
                                                 captured with serving off (the heuristic) and
                                                 on (the served row), replays interleaved
    python3 workload.py eager-ab --profile-csv F host microseconds per eager call, serving
                                                 off / on, interleaved in this one process
    python3 workload.py total [--passes P]       the whole workload: eager passes (host wall
                                                 clock) and a CUDA graph of one pass (replays)
    python3 workload.py total-ab                 the whole workload as CUDA graphs captured with
                                                 serving off / on, replays interleaved

`ab` and `eager-ab` need libtunedblas.so preloaded (it switches serving with tunedblas_cublaslt_serving).
Results go to stdout as one JSON document; progress to stderr.
"""

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

PAIRS = [(10240, 320), (4096, 2560), (2560, 1536), (3584, 2560), (512, 2560), (10240, 2560), (336, 10240)]
TOKENS = [1, 4, 16, 32, 256, 512, 1024, 2048]
L2 = 60 << 20


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def shapes():
    return [(n, m, k) for (n, k) in PAIRS for m in TOKENS]


def rotating(n, m, k, sets=None):
    """Input sets so repeated calls do not run from L2 (3x the cache, at most 16)."""
    one = (n * k + m * k) * 2
    if sets is None:
        sets = max(1, min(16, math.ceil(3 * L2 / one)))
    g = torch.Generator(device="cuda").manual_seed(n * 1000003 + m * 1009 + k)
    ws = [torch.rand(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1 for _ in range(sets)]
    xs = [torch.rand(m, k, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1 for _ in range(sets)]
    return ws, xs


def est_ms(n, m, k):
    flops = 2.0 * n * m * k
    byts = 2.0 * (n * k + m * k + m * n)
    return max(flops / 600e12, byts / 3.0e12, 4e-6) * 1e3


def calls_for(n, m, k, target_ms=1.0):
    return max(4, min(200, math.ceil(target_ms / est_ms(n, m, k))))


def switch():
    lib = ctypes.CDLL(None)
    try:
        f = lib.tunedblas_cublaslt_serving
    except AttributeError:
        sys.exit("ab needs libtunedblas.so preloaded (tunedblas_cublaslt_serving not found)")
    f.argtypes = [ctypes.c_int]
    f.restype = ctypes.c_int
    return f


def capture(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def interleaved(trials, measure_off, measure_on):
    """`trials` samples of each measure, taking turns at going first (so drift hits both alike)."""
    off, on = [], []
    for t in range(trials):
        pair = [(measure_off, off), (measure_on, on)]
        if t % 2:
            pair.reverse()
        for measure, acc in pair:
            acc.append(measure())
    return off, on


def spread(samples):
    return (max(samples) - min(samples)) / statistics.median(samples)


def workload_pass(calls):
    """One pass of the whole workload, `calls` calls per shape (one input set each: a pass
    touches 56 different weights); the inputs are made now."""
    data = []
    for n, m, k in shapes():
        ws, xs = rotating(n, m, k, sets=1)
        data.append((ws[0], xs[0]))

    def one_pass():
        for w, x in data:
            for _ in range(calls):
                F.linear(x, w)

    return one_pass


def replay_ms(g):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def cmd_record(args):
    t = time.time()
    for n, m, k in shapes():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(args.repeat):
            F.linear(x, w)
    torch.cuda.synchronize()
    json.dump({"mode": "record", "shapes": len(shapes()), "seconds": time.time() - t}, sys.stdout)
    print()


def profile_rows(path):
    """signature -> solution of a results file (PyTorch names: tn_N_M_K_ld_...)."""
    rows = {}
    if not path:
        return rows
    for line in open(path):
        f = line.strip().split(",")
        if len(f) >= 3 and f[0] != "Validator":
            rows[f[1]] = f[2]
    return rows


def cmd_ab(args):
    serving = switch()
    rows = profile_rows(args.profile_csv)
    out = []
    for n, m, k in shapes():
        sig = f"tn_{n}_{m}_{k}_ld_{k}_{k}_{n}"
        ws, xs = rotating(n, m, k)
        calls = calls_for(n, m, k)

        def run():
            for i in range(calls):
                F.linear(xs[i % len(xs)], ws[i % len(ws)])

        serving(0)
        g_off = capture(run)
        serving(1)
        g_on = capture(run)
        for g in (g_off, g_on):
            replay_ms(g)
        off, on = interleaved(args.trials, lambda: replay_ms(g_off) / calls, lambda: replay_ms(g_on) / calls)
        del g_off, g_on
        sol = rows.get(sig, "none")
        r = {
            "n": n, "m": m, "k": k, "signature": sig, "solution": sol, "calls": calls,
            "sets": len(ws), "heuristic_ms": statistics.median(off), "served_ms": statistics.median(on),
            "heuristic_spread": spread(off), "served_spread": spread(on),
            "heuristic_samples": off, "served_samples": on,
        }
        r["gain"] = 1 - r["served_ms"] / r["heuristic_ms"]
        log(f"ab {n}x{k} M={m}: heuristic {r['heuristic_ms']*1e3:.2f} us, served {r['served_ms']*1e3:.2f} us "
            f"({r['gain']*100:+.1f}%) [{sol[:40]}]")
        out.append(r)
        torch.cuda.empty_cache()
    serving(1)
    json.dump({"mode": "ab", "trials": args.trials, "shapes": out}, sys.stdout)
    print()


def cmd_eager_ab(args):
    """Host microseconds per eager F.linear call, serving off / on, interleaved in this process."""
    serving = switch()
    rows = profile_rows(args.profile_csv)
    out = []
    for n, m, k in shapes():
        sig = f"tn_{n}_{m}_{k}_ld_{k}_{k}_{n}"
        ws, xs = rotating(n, m, k, sets=1)
        w, x = ws[0], xs[0]
        for flag in (0, 1, 0, 1):
            serving(flag)
            F.linear(x, w)
        torch.cuda.synchronize()

        def host_us(flag):
            serving(flag)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                F.linear(x, w)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            return (t1 - t0) / args.calls * 1e6

        off, on = interleaved(args.trials, lambda: host_us(0), lambda: host_us(1))
        r = {"n": n, "m": m, "k": k, "signature": sig, "solution": rows.get(sig, "none"),
             "heuristic_host_us": statistics.median(off), "served_host_us": statistics.median(on),
             "heuristic_samples": off, "served_samples": on}
        log(f"eager {n}x{k} M={m}: host {r['heuristic_host_us']:.2f} us off, {r['served_host_us']:.2f} us on "
            f"[{r['solution'][:30]}]")
        out.append(r)
    serving(1)
    json.dump({"mode": "eager-ab", "trials": args.trials, "calls": args.calls, "shapes": out}, sys.stdout)
    print()


def cmd_total(args):
    one_pass = workload_pass(args.calls)
    for _ in range(2):
        one_pass()
    torch.cuda.synchronize()
    eager = []
    for _ in range(args.passes):
        torch.cuda.synchronize()
        t = time.perf_counter()
        one_pass()
        torch.cuda.synchronize()
        eager.append((time.perf_counter() - t) * 1e3)
    g = capture(one_pass)
    graph = [replay_ms(g) for _ in range(args.passes + 2)][2:]
    res = {
        "mode": "total", "label": args.label, "calls_per_shape": args.calls, "passes": args.passes,
        "eager_ms": eager, "graph_ms": graph,
        "eager_median_ms": statistics.median(eager), "graph_median_ms": statistics.median(graph),
        "eager_spread": spread(eager), "graph_spread": spread(graph),
    }
    log(f"total [{args.label}]: eager {res['eager_median_ms']:.3f} ms/pass ({res['eager_spread']*100:.1f}%), "
        f"graph {res['graph_median_ms']:.3f} ms/pass ({res['graph_spread']*100:.1f}%)")
    json.dump(res, sys.stdout)
    print()


def cmd_total_ab(args):
    """The whole workload as two CUDA graphs in this one process, captured with serving off (the
    heuristic) and on (the profile), replays interleaved: the profile's effect on GPU time."""
    serving = switch()
    one_pass = workload_pass(args.calls)
    serving(0)
    g_off = capture(one_pass)
    serving(1)
    g_on = capture(one_pass)
    for g in (g_off, g_on, g_off, g_on):
        replay_ms(g)
    off, on = interleaved(args.trials, lambda: replay_ms(g_off), lambda: replay_ms(g_on))
    med = statistics.median
    res = {
        "mode": "total-ab", "calls_per_shape": args.calls, "trials": args.trials,
        "heuristic_ms": off, "served_ms": on, "heuristic_median_ms": med(off), "served_median_ms": med(on),
        "heuristic_spread": spread(off), "served_spread": spread(on),
        "gain": 1 - med(on) / med(off),
    }
    log(f"total-ab: heuristic {res['heuristic_median_ms']:.3f} ms/pass ({res['heuristic_spread']*100:.1f}%), "
        f"served {res['served_median_ms']:.3f} ms/pass ({res['served_spread']*100:.1f}%), gain {res['gain']*100:+.2f}%")
    serving(1)
    json.dump(res, sys.stdout)
    print()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--repeat", type=int, default=3)
    a = sub.add_parser("ab")
    a.add_argument("--trials", type=int, default=15)
    a.add_argument("--profile-csv")
    e = sub.add_parser("eager-ab")
    e.add_argument("--trials", type=int, default=7)
    e.add_argument("--calls", type=int, default=20)
    e.add_argument("--profile-csv")
    t = sub.add_parser("total")
    t.add_argument("--passes", type=int, default=9)
    t.add_argument("--calls", type=int, default=4)
    t.add_argument("--label", default="")
    ta = sub.add_parser("total-ab")
    ta.add_argument("--trials", type=int, default=21)
    ta.add_argument("--calls", type=int, default=4)
    for s in (r, a, e, t, ta):
        s.add_argument("--only", type=int, default=0, help="first N shapes only (smoke runs)")
    args = p.parse_args()
    if os.environ.get("TORCH_BLAS_PREFER_CUBLASLT") != "1":
        log("note: TORCH_BLAS_PREFER_CUBLASLT is not 1: PyTorch may not call cuBLASLt")
    if args.only:
        global shapes
        all_shapes = shapes()
        shapes = lambda: all_shapes[: args.only]  # noqa: E731
    torch.cuda.init()
    {"record": cmd_record, "ab": cmd_ab, "eager-ab": cmd_eager_ab, "total": cmd_total,
     "total-ab": cmd_total_ab}[args.cmd](args)


if __name__ == "__main__":
    main()
