#!/usr/bin/env python3
"""Issue 15's tables from the raw logs of `campaigns.sh` (its results.tgz unpacked):

    python3 bench/cublaslt/campaign_tables.py OUTDIR f g      # campaigns f and g
    python3 bench/cublaslt/campaign_tables.py OUTDIR --diag   # the --delay spin/gemm diagnosis
    python3 bench/cublaslt/campaign_tables.py OUTDIR --rest   # the --rest runs

It reads the logs `tunedblas lt tune --log` wrote (the figures of
docs/benchmarks/cublaslt-h200.md were made from them); the unified `tune --json` summary
names its fields differently (outcomes[].shape, .tuned.verdict, .tuned.rounds), and this
script is not ported to it yet.

Per shape: the heuristic's and the fastest configuration's harness times, the limit that
binds (bytes / copy bandwidth, flops / matmul rate, launch floor, all measured in the same
run), % of it, the grid and why, each campaign's decision and gains (selection, in-process
confirmation, fresh child, third process, PyTorch graph A/B), and PyTorch's own graph time
of the heuristic next to the harness's. Prints Markdown."""
import json
import statistics
import sys
from pathlib import Path


def load(p):
    p = Path(p)
    return json.loads(p.read_text()) if p.exists() else None


def by_sig(items, key="signature"):
    return {x[key]: x for x in items}


def pct(x):
    return "-" if x is None else f"{x * 100:+.1f}%"


def short(sol):
    return sol.replace("Gemm_Cublaslt_", "") if sol else sol


def nmk(sig):
    # tn_N_M_K_ld_...: F.linear out N, tokens M, in K.
    f = sig.split("_")
    return int(f[1]), int(f[2]), int(f[3])


def campaign(out, c):
    tune = load(out / f"tune-{c}.json")
    if tune is None:
        sys.exit(f"{out}/tune-{c}.json is missing: run the harness step for campaign {c}")
    rechecks = by_sig((load(out / f"recheck-{c}.json") or {"rechecks": []})["rechecks"])
    ab = load(out / f"ab-{c}.out")
    ab = by_sig(ab["shapes"]) if ab else {}
    return tune, rechecks, ab


def diag(out):
    runs = {}
    for f in sorted(out.glob("diag-*.json")):
        label = f.stem.split("-", 1)[1]
        runs[label] = by_sig(json.loads(f.read_text())["outcomes"])
    labels = sorted(runs)
    sigs = list(next(iter(runs.values())))
    print("| N x K | M | " + " | ".join(f"{l}: heuristic us (spread)" for l in labels) + " | gemm / spin |")
    print("|---|---|" + "---|" * len(labels) + "---|")
    ratios = []
    for s in sigs:
        n, m, k = nmk(s)
        cells = []
        med = {}
        for l in labels:
            h = runs[l][s]["heuristic"]
            cells.append(f"{h['median_ms'] * 1e3:.2f} ({h['spread'] * 100:.1f}%)")
            med.setdefault(l.rstrip("0123456789"), []).append(h["median_ms"])
        r = statistics.mean(med["gemm"]) / statistics.mean(med["spin"])
        ratios.append(r)
        print(f"| {n}x{k} | {m} | " + " | ".join(cells) + f" | {r:.3f} |")
    print(f"\ngemm / spin, median over shapes: {statistics.median(ratios):.3f}")


def spread(v):
    return (max(v) - min(v)) / statistics.median(v)


def rest(out):
    # rest-r<R>-<round>.json: per shape, the heuristic's spread and the spread of the best
    # answer's time over the heuristic's, trial by trial.
    runs = {}
    for f in sorted(out.glob("rest-r*.json")):
        r, i = f.stem[len("rest-r"):].rsplit("-", 1)
        runs[(float(r), int(i))] = by_sig(json.loads(f.read_text())["outcomes"])
    if not runs:
        sys.exit(f"{out} holds no rest-r*.json: run issue15_campaign.sh's rest step")
    labels = sorted(runs)
    sigs = list(dict.fromkeys(s for l in labels for s in runs[l]))
    print("| N x K | M | " + " | ".join(f"rest {r:g}, run {i}: heuristic us (spread) / paired spread" for r, i in labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    within = {l: [0, 0] for l in labels}
    for s in sigs:
        n, m, k = nmk(s)
        cells = []
        for l in labels:
            o = runs[l].get(s)
            if o is None:
                cells.append("-")
                continue
            h = o["heuristic"]
            paired = None
            if o["candidates"]:
                c = o["candidates"][0]["samples"]
                paired = spread([a / b for a, b in zip(c, h["samples"])])
            within[l][0] += h["spread"] <= 0.03
            within[l][1] += paired is not None and paired <= 0.03
            p = "-" if paired is None else f"{paired * 100:.1f}%"
            cells.append(f"{h['median_ms'] * 1e3:.2f} ({h['spread'] * 100:.1f}%) / {p}")
        print(f"| {n}x{k} | {m} | " + " | ".join(cells) + " |")
    print("| spread <= 3%: heuristic / paired | | " + " | ".join(f"{within[l][0]} / {within[l][1]} of {len(sigs)}" for l in labels) + " |")
    clocks(out)


def clocks(out):
    # clocks-rest.csv (nvidia-smi every 100 ms) split by the runs' windows in summary.txt
    # ("== HH:MM:SS rest-rR-I: exit RC, N s" closes a run of N seconds).
    import datetime as dt
    csv_path, summary = out / "clocks-rest.csv", out / "summary.txt"
    if not csv_path.exists() or not summary.exists():
        return
    rows = []
    for line in csv_path.read_text().splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            t = dt.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").time()
            rows.append((t, int(f[1].split()[0]), float(f[2].split()[0]), int(f[4], 16)))
        except (ValueError, IndexError):
            continue
    print("\n| run | samples | SW power cap active | SM clock < 1980 MHz | max power W |")
    print("|---|---|---|---|---|")
    for line in summary.read_text().splitlines():
        f = line.split()
        if len(f) < 6 or not f[2].startswith("rest-r"):
            continue
        end = dt.datetime.strptime(f[1], "%H:%M:%S")
        start, end = (end - dt.timedelta(seconds=int(f[5]))).time(), end.time()
        # A run across midnight: the window wraps.
        inside = (lambda t: start <= t <= end) if start <= end else (lambda t: t >= start or t <= end)
        w = [r for r in rows if inside(r[0])]
        if w:
            print(f"| {f[2].rstrip(':')} | {len(w)} | {sum(1 for r in w if r[3] & 0x4)} | "
                  f"{sum(1 for r in w if r[1] < 1980)} | {max(r[2] for r in w):.0f} |")


def main():
    out = Path(sys.argv[1])
    if sys.argv[2:] == ["--diag"]:
        return diag(out)
    if sys.argv[2:] == ["--rest"]:
        return rest(out)
    cs = sys.argv[2:]
    data = {c: campaign(out, c) for c in cs}
    first = cs[0]
    tune, rechecks, ab = data[first]
    lim = tune["campaign"]["limits"]
    rate = lim.get("matmul_flops_per_s")
    rate = f"{rate / 1e12:.0f} TFLOP/s ({lim['matmul_shape']})" if rate else "not measured"
    print(
        f"Limits ({first}): copy {lim['copy_bytes_per_s'] / 1e9:.0f} GB/s, matmul {rate}, floor "
        f"{lim['floor_ms'] * 1e3:.2f} us ({lim['floor_op']}); delay {tune['campaign']['options'].get('delay')}\n"
    )
    head = ["N x K", "M", "heuristic us (spread)", "best found us", "limit us (bound)",
            "% of limit: heuristic / best", "why (fastest found)", f"decision {first}",
            f"gains {first}: select / confirm / fresh / 3rd / PyTorch"]
    for c in cs[1:]:
        head += [f"decision {c}", f"gains {c}: fresh / 3rd / PyTorch"]
    head += ["PyTorch heuristic us", "harness / PyTorch"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    spreads = []
    false_adopts = {c: [] for c in cs}
    gaps = []
    for o in tune["outcomes"]:
        s = o["signature"]
        n, m, k = nmk(s)
        h = o["heuristic"]
        r = o.get("roofline") or {}
        best = min([h["median_ms"]] + [x["median_ms"] for x in o["candidates"]])
        spreads.append((h["spread"], f"{n}x{k} M={m}"))
        row = [f"{n}x{k}", str(m), f"{h['median_ms'] * 1e3:.2f} ({h['spread'] * 100:.1f}%)", f"{best * 1e3:.2f}"]
        if r:
            limit = max(r["memory_ms"], r.get("compute_ms") or 0, r["floor_ms"])
            row += [f"{limit * 1e3:.2f} ({r['bound']})",
                    f"{100 * limit / h['median_ms']:.0f}% / {100 * limit / best:.0f}%", r["why"]]
        else:  # limits not measured in that campaign
            row += ["-", "-", "-"]
        for i, c in enumerate(cs):
            t, rc, a = data[c]
            oc = by_sig(t["outcomes"])[s]
            third = rc.get(s, {}).get("gain") if oc["adopted"] else None
            torch_gain = a.get(s, {}).get("gain") if oc["adopted"] else None
            if oc["adopted"] and ((third is not None and third <= 0) or (torch_gain is not None and torch_gain <= 0)):
                false_adopts[c].append(f"{n}x{k} M={m}: 3rd {pct(third)}, PyTorch {pct(torch_gain)}")
            dec = f"`{short(oc['adopted'])}`" if oc["adopted"] else "Default"
            if i == 0:
                row += [dec, " / ".join([pct(oc["gain"]), pct(oc["confirm_gain"]), pct(oc["fresh_gain"]),
                                        pct(third), pct(torch_gain)])]
            else:
                same = oc["adopted"] == by_sig(data[first][0]["outcomes"])[s]["adopted"]
                row += ["same" if same and oc["adopted"] else dec,
                        " / ".join([pct(oc["fresh_gain"]), pct(third), pct(torch_gain)])]
        th = ab.get(s, {}).get("heuristic_ms")
        row += [f"{th * 1e3:.2f}" if th else "-", f"{h['median_ms'] / th:.2f}" if th else "-"]
        if th:
            gaps.append((h["median_ms"] / th, f"{n}x{k} M={m}"))
        print("| " + " | ".join(row) + " |")
    print()
    over = [x for x in spreads if x[0] > 0.03]
    print(f"Spread over 3% ({first}): {len(over)} of {len(spreads)}: "
          + ", ".join(f"{name} {sp * 100:.1f}%" for sp, name in sorted(over, reverse=True)))
    for c in cs:
        t = data[c][0]
        # Spread of the heuristic, and of the best candidate's time over the heuristic's
        # trial by trial (what the decision uses).
        heur = [o["heuristic"]["spread"] for o in t["outcomes"]]
        paired = [spread([a / b for a, b in zip(o["candidates"][0]["samples"], o["heuristic"]["samples"])])
                  for o in t["outcomes"] if o["candidates"]]
        if heur and paired:
            print(f"Campaign {c}: heuristic spread <= 3% on {sum(x <= 0.03 for x in heur)} of {len(heur)} "
                  f"(max {max(heur) * 100:.1f}%); paired <= 3% on {sum(x <= 0.03 for x in paired)} of "
                  f"{len(paired)} (median {statistics.median(paired) * 100:.1f}%, max {max(paired) * 100:.1f}%)")
        n_ad = sum(1 for o in t["outcomes"] if o["adopted"])
        print(f"Campaign {c}: {n_ad} adopted; false adopts (3rd process or PyTorch not faster): "
              f"{len(false_adopts[c])} {false_adopts[c]}")
    if gaps:
        g = sorted(gaps)
        print(f"harness / PyTorch heuristic time: median {statistics.median([x[0] for x in g]):.3f}, "
              f"min {g[0][0]:.3f} ({g[0][1]}), max {g[-1][0]:.3f} ({g[-1][1]})")
        heavy = [x for x in g if int(x[1].split('M=')[1]) >= 512]
        if heavy:
            print(f"  M >= 512: median {statistics.median([x[0] for x in heavy]):.3f} over {len(heavy)} shapes")


if __name__ == "__main__":
    main()
