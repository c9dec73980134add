#!/usr/bin/python3
"""Joins bench/compare_releases.sh's JSON reports: one line per run, then
per workload the median over rounds of each server's figures and ratios
(new / ceiling and old / ceiling req/s, new / old p99 and CPU)."""
import json
import os
import statistics
import sys

out = sys.argv[1]
runs = {}
for f in sorted(os.listdir(out)):
    if f.endswith(".json"):
        with open(os.path.join(out, f)) as fh:
            text = fh.read().strip()
        if text:
            runs[f[:-5]] = json.loads(text)
load = {}
with open(os.path.join(out, "loadavg.txt")) as fh:
    for line in fh:
        name, value = line.split()
        load[name] = float(value)

LABELS = {"filter_mask": "FilterRecalled 5k, KEEP_MASK",
          "filter_ids": "FilterRecalled 5k, KEPT_IDS",
          "pull": "GetFilter + local check 5k",
          "record": "RecordExposure 50 users x 20 items",
          "filter_unfiltered": "FilterRecalled 5k, no filter work"}
SERVERS = ("new", "old", "ceiling")


def fig(r):
    return (r.get("requests_per_s"), r.get("latency_us", {}).get("p99"),
            r.get("server_cpu_us_per_request"))


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def f(v, spec="{:,.0f}"):
    return "-" if v is None else spec.format(v)


def ratio(a, b):
    return None if a is None or not b else a / b


print(f"{'run':28}  {'load':>5}  {'req/s':>7}  {'p99 us':>7}  {'cpu us':>7}  "
      f"{'FN':>3}  errors")
workloads, rounds = [], set()
for name in sorted(runs, key=lambda n: (n.split(".")[2], n)):
    w, who, r = name.split(".")
    if w not in workloads:
        workloads.append(w)
    rounds.add(r)
    rps, p99, cpu = fig(runs[name])
    print(f"{name:28}  {load.get(name, 0):5.1f}  {f(rps):>7}  {f(p99):>7}  "
          f"{f(cpu, '{:.1f}'):>7}  "
          # The ceiling answers "keep all": its FN count means nothing.
          f"{f(None if who == 'ceiling' else runs[name].get('false_negatives')):>3}  "
          f"{runs[name].get('errors') or ''}")
print()
print(f"median of {len(rounds)} rounds")
hdr = ("workload", "new req/s", "old req/s", "ceil req/s", "new/ceil",
       "old/ceil", "new/old", "p99 new", "p99 old", "p99 ceil", "p99 new/old",
       "cpu new", "cpu old", "cpu new/old")
rows = []
for w in workloads:
    per = {s: [fig(runs[n]) for n in runs if n.startswith(f"{w}.{s}.")]
           for s in SERVERS}
    # Ratios per round first (same moment of the machine), then the median.
    def paired(a, b, i):
        ra = {n.split(".")[2]: fig(runs[n])[i]
              for n in runs if n.startswith(f"{w}.{a}.")}
        rb = {n.split(".")[2]: fig(runs[n])[i]
              for n in runs if n.startswith(f"{w}.{b}.")}
        return med([ratio(ra[k], rb.get(k)) for k in ra])
    m = {s: [med([x[i] for x in per[s]]) for i in range(3)] for s in SERVERS}
    rows.append((LABELS.get(w, w), f(m["new"][0]), f(m["old"][0]),
                 f(m["ceiling"][0]),
                 f(paired("new", "ceiling", 0), "{:.2f}"),
                 f(paired("old", "ceiling", 0), "{:.2f}"),
                 f(paired("new", "old", 0), "{:.2f}"),
                 f(m["new"][1]), f(m["old"][1]), f(m["ceiling"][1]),
                 f(paired("new", "old", 1), "{:.2f}"),
                 f(m["new"][2], "{:.1f}"), f(m["old"][2], "{:.1f}"),
                 f(paired("new", "old", 2), "{:.2f}")))
widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
for r in [hdr, tuple("-" * w for w in widths)] + rows:
    print("  ".join(str(v).rjust(wd) if i else str(v).ljust(wd)
                    for i, (v, wd) in enumerate(zip(r, widths))))
