#!/usr/bin/python3
"""Turns the JSON the benchmarks write into the PNG charts in docs/img/.

  memory   build/.../memory.json (memory_bench --benchmark_format=json):
           all-in bytes per user against items per user, one line per
           arrival pattern, beside the information limit and RedisBloom.
  compare  bench/compare.sh's OUT dir (one exposure-filter-bench --json
           report per run): req/s and p99 of the real server beside the
           transport-ceiling server and the Redis block list.
  soak     bench/soak.sh's OUT dir (capacity.json, soak.jsonl, rss.tsv):
           RSS, req/s and p99 over the soak.

Each input may carry a provenance.json (bench/figures.sh writes it: the
command, when it ran, the machine's load) that is printed under the chart,
so a figure always says what produced it. Only real runs are plotted: a
missing input is skipped, never invented.

  /usr/bin/python3 bench/plot_figures.py --out docs/img \\
      [--memory FILE] [--compare DIR] [--soak DIR]
Normally run through bench/figures.sh (one command: run, then plot the
charts and write the headline table of docs/performance.md from the same
files, bench/headline_table.py).
Needs Debian's python3-matplotlib (apt-get install python3-matplotlib).
"""
import argparse
import json
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position

# The table and the charts read the same run files the same way.
from headline_table import load_runs  # pylint: disable=wrong-import-position

# The yardsticks of docs/performance.md ("Memory per user"): the
# information limit log2(1/δ) bits per item at δ = 1%, and RedisBloom
# reserved for the exact count (~11.6 bits/item at 1%, no aging).
DELTA = 0.01
INFO_LIMIT_BITS = math.log2(1 / DELTA)
REDISBLOOM_BITS = 11.6
DPI = 110


def provenance(path):
    """The provenance.json beside `path` (a file or a directory), or {}."""
    d = path if os.path.isdir(path) else os.path.dirname(path)
    name = (os.path.basename(path) + ".provenance.json"
            if not os.path.isdir(path) else "provenance.json")
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return json.load(f)


def footer(fig, prov, extra=""):
    if not prov:
        text = "source: " + extra
    else:
        text = "%s  |  %s UTC, %s, load avg %s, git %s%s" % (
            prov.get("command", "?"), prov.get("finished", "?"),
            prov.get("duration", "?"), prov.get("load_average", "?"),
            prov.get("git", "?"), ("  |  " + extra) if extra else "")
    fig.text(0.01, 0.005, text, fontsize=7, color="0.35", ha="left",
             va="bottom", wrap=True)


# --- memory ---------------------------------------------------------------

PATTERNS = [
    (1000000, 7, "one batch per slice, 7 slices", "o-"),
    (20, 7, "20 items per call, 7 slices", "s-"),
    (1, 7, "one item per call, 7 slices", "^-"),
    (20, 1, "20 items in one slice (the tiny user)", "D"),
]


def plot_memory(path, out):
    with open(path) as f:
        report = json.load(f)
    runs = {}
    zipf = None
    for b in report["benchmarks"]:
        name = b["name"]
        if name.startswith("BM_StoreBytesPerUser/"):
            items, batch, slices = (int(x) for x in name.split("/")[1:4])
            runs[(items, batch, slices)] = b
        elif name.startswith("BM_ArrivalPatterns/6"):
            zipf = b
    if not runs:
        sys.exit("plot_figures: no BM_StoreBytesPerUser runs in " + path)
    fig, (ax_b, ax_bits) = plt.subplots(1, 2, figsize=(12, 5))
    all_items = sorted({k[0] for k in runs})
    lo, hi = min(all_items), max(all_items)
    xs = [lo * (hi / lo) ** (i / 50) for i in range(51)]
    for bits, label, style in ((INFO_LIMIT_BITS, "information limit "
                                "log2(1/δ) = %.1f bits/item" % INFO_LIMIT_BITS,
                                ":"),
                               (REDISBLOOM_BITS, "RedisBloom reserved for "
                                "the count (%.1f bits/item, no aging)"
                                % REDISBLOOM_BITS, "--")):
        ax_b.plot(xs, [x * bits / 8 for x in xs], style, color="0.5",
                  label=label)
        ax_bits.axhline(bits, linestyle=style, color="0.5", label=label)
    for batch, slices, label, style in PATTERNS:
        pts = sorted((k[0], v) for k, v in runs.items()
                     if k[1] == batch and k[2] == slices)
        if not pts:
            continue
        x = [p[0] for p in pts]
        ax_b.plot(x, [p[1]["accounted_B_per_user"] for p in pts], style,
                  label=label)
        ax_bits.plot(x, [p[1]["bits_per_item"] for p in pts], style,
                     label=label)
        # The patterns nearly coincide: label one line's points and the
        # single points only, so the labels stay legible.
        if batch == 20 or slices == 1:
            for xi, p in pts:
                ax_b.annotate("%.0f B" % p["accounted_B_per_user"],
                              (xi, p["accounted_B_per_user"]),
                              textcoords="offset points", xytext=(8, -12),
                              fontsize=7)
    if zipf is not None:
        ax_b.plot([zipf["avg_items_per_user"]], [zipf["accounted_B_per_user"]],
                  "*", markersize=12, color="black",
                  label="Zipf population, avg %.0f items" %
                  zipf["avg_items_per_user"])
        ax_bits.plot([zipf["avg_items_per_user"]], [zipf["bits_per_item"]],
                     "*", markersize=12, color="black")
    ax_b.set_xscale("log")
    ax_b.set_yscale("log")
    ax_b.set_xlabel("items per user (over the 30-day window)")
    ax_b.set_ylabel("bytes per user, all-in (filter + map slot + key)")
    ax_b.set_title("Memory per user by arrival pattern (δ = 1%)")
    ax_b.grid(True, which="both", alpha=0.3)
    ax_b.legend(fontsize=7, loc="upper left")
    ax_bits.set_xscale("log")
    ax_bits.set_xlabel("items per user")
    ax_bits.set_ylabel("bits per item, all-in")
    ax_bits.set_yscale("log")
    ax_bits.set_title("Bits per item, all-in (small users pay the key, "
                      "slot and tables)")
    ax_bits.grid(True, which="both", alpha=0.3)
    ctx = report.get("context", {})
    footer(fig, provenance(path), "memory_bench context date %s" %
           ctx.get("date", "?"))
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    dest = os.path.join(out, "memory_per_user.png")
    fig.savefig(dest, dpi=DPI)
    plt.close(fig)
    return dest


# --- compare --------------------------------------------------------------

WORKLOADS = [
    ("filter_mask", "FilterRecalled 5k\nKEEP_MASK"),
    ("filter_ids", "FilterRecalled 5k\nKEPT_IDS"),
    ("pull", "GetFilter +\nlocal check 5k"),
    ("pull_cached", "GetFilter if_version\n+ check"),
    ("record", "RecordExposure\n50x20 items"),
]


def plot_compare(d, out):
    runs = load_runs(d)
    if not runs:
        sys.exit("plot_figures: no compare.sh reports in " + d)
    fig, (ax_r, ax_p) = plt.subplots(1, 2, figsize=(13, 5))
    width = 0.27
    backends = [("server", "exposure-filter"), ("ceiling",
                "transport ceiling (no-op server)"),
                ("redis", "Redis seed-004 block list (LRANGE + check)")]
    for i, (suffix, label) in enumerate(backends):
        xs, rates, p99s = [], [], []
        for j, (key, _) in enumerate(WORKLOADS):
            r = runs.get("%s.%s" % (key, suffix))
            if r is None:
                continue
            xs.append(j + (i - 1) * width)
            rates.append(r["requests_per_s"])
            p99s.append(r["latency_us"]["p99"] / 1000.0)
        if not xs:
            continue
        rate_bars = ax_r.bar(xs, rates, width, label=label)
        p99_bars = ax_p.bar(xs, p99s, width, label=label)
        for b, v in zip(p99_bars, p99s):
            ax_p.annotate("%.1f" % v, (b.get_x() + b.get_width() / 2, v),
                          ha="center", va="bottom", fontsize=7)
        for b, v in zip(rate_bars, rates):
            ax_r.annotate("%.0f" % v, (b.get_x() + b.get_width() / 2, v),
                          ha="center", va="bottom", fontsize=7)
    for j, (key, _) in enumerate(WORKLOADS):
        s, c = runs.get(key + ".server"), runs.get(key + ".ceiling")
        if s and c and c["requests_per_s"]:
            ax_r.annotate("%.2f× ceiling" % (s["requests_per_s"] /
                                             c["requests_per_s"]),
                          (j, 0), xytext=(0, -40), textcoords="offset points",
                          ha="center", fontsize=7, color="C0")
    labels = [w[1] for w in WORKLOADS]
    for ax in (ax_r, ax_p):
        ax.set_xticks(range(len(WORKLOADS)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    ax_r.set_ylabel("requests/s (closed loop, 2 threads × 4 in flight)")
    ax_r.set_title("Throughput: server vs ceiling and Redis")
    ax_r.legend(fontsize=7)
    ax_p.set_ylabel("p99 latency, ms (client side)")
    ax_p.set_title("p99 latency")
    any_run = next(iter(runs.values()))
    footer(fig, provenance(d), "%.0f s per run, %s candidates per filter "
           "request, %s threads x %s in flight" % (
               any_run.get("seconds", 0), any_run.get("candidates", "?"),
               any_run.get("threads", "?"), any_run.get("inflight", "?")))
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    dest = os.path.join(out, "throughput_p99.png")
    fig.savefig(dest, dpi=DPI)
    plt.close(fig)
    return dest


# --- soak -----------------------------------------------------------------

def plot_soak(d, out):
    with open(os.path.join(d, "capacity.json")) as f:
        capacity = json.load(f)
    lines = [json.loads(l) for l in open(os.path.join(d, "soak.jsonl"))
             if l.strip()]
    intervals = [l for l in lines if "interval" in l]
    rss = [tuple(map(float, l.split())) for l in open(os.path.join(
        d, "rss.tsv")) if l.strip()]
    if not intervals or not rss:
        sys.exit("plot_figures: no soak intervals or RSS samples in " + d)
    # soak.sh's summary names the target: "... soak at 842 req/s (70%) ...".
    target, load = None, None
    md = os.path.join(d, "soak.md")
    if os.path.exists(md):
        m = re.search(r"soak at (\d+) req/s \((\d+)%\)", open(md).read())
        if m:
            target, load = float(m.group(1)), float(m.group(2))
    start = intervals[0]["unix_s"] - intervals[0]["seconds"]
    fig, (ax_m, ax_r, ax_p) = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    ax_m.plot([(t - start) / 60 for t, _ in rss],
              [b / 1048576 for _, b in rss], ".-", markersize=3)
    ax_m.set_ylabel("server RSS, MiB")
    ax_m.set_ylim(bottom=0)
    ax_m.set_title("Soak: mix %s at %s%% of the measured capacity "
                   "(%.0f req/s)" % (capacity.get("mix", "?"),
                                     "?" if load is None else "%.0f" % load,
                                     capacity["requests_per_s"]))
    mid = [(iv["unix_s"] - iv["seconds"] / 2 - start) / 60 for iv in intervals]
    ax_r.plot(mid, [iv["requests_per_s"] for iv in intervals], "o-")
    if target:
        ax_r.axhline(target, linestyle="--", color="0.5",
                     label="target rate %.0f req/s" % target)
        ax_r.legend(fontsize=7)
    for x, iv in zip(mid, intervals):
        if iv["errors"]:
            ax_r.annotate("\n".join("%d %s" % (n, code) for code, n in
                                    sorted(iv["errors"].items())),
                          (x, iv["requests_per_s"]), xytext=(8, -24),
                          textcoords="offset points", fontsize=7, color="red")
            ax_r.plot([x], [iv["requests_per_s"]], "o", color="red")
    ax_r.set_ylabel("achieved req/s")
    ax_r.set_ylim(bottom=0)
    ax_p.plot(mid, [(iv["p99_us"] or 0) / 1000 for iv in intervals], "o-",
              label="p99")
    ax_p.plot(mid, [(iv["p50_us"] or 0) / 1000 for iv in intervals], "s-",
              label="p50")
    ax_p.set_ylabel("latency, ms")
    ax_p.set_yscale("log")
    ax_p.legend(fontsize=7)
    ax_p.set_xlabel("minutes since the soak started (one point per "
                    "report interval of %.0f s)" % intervals[0]["seconds"])
    for ax in (ax_m, ax_r, ax_p):
        ax.grid(True, alpha=0.3)
    errors = sum(sum(iv["errors"].values()) for iv in intervals)
    footer(fig, provenance(d), "%d errors" % errors)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    dest = os.path.join(out, "soak.png")
    fig.savefig(dest, dpi=DPI)
    plt.close(fig)
    return dest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--memory")
    ap.add_argument("--compare")
    ap.add_argument("--soak")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    made = []
    if args.memory:
        made.append(plot_memory(args.memory, args.out))
    if args.compare:
        made.append(plot_compare(args.compare, args.out))
    if args.soak:
        made.append(plot_soak(args.soak, args.out))
    if not made:
        sys.exit("plot_figures: nothing to plot (--memory, --compare, --soak)")
    for m in made:
        print("wrote", m)


if __name__ == "__main__":
    main()
