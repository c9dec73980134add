#!/usr/bin/python3
"""Joins the JSON reports of bench/compare.sh into the side-by-side table."""
import json
import os
import sys

out = sys.argv[1]
runs = {}
for f in sorted(os.listdir(out)):
    if f.endswith(".json"):
        with open(os.path.join(out, f)) as fh:
            text = fh.read().strip()
        if text:
            runs[f[:-5]] = json.loads(text)


def get(name, key, sub=None):
    r = runs.get(name)
    if r is None:
        return None
    v = r.get(key)
    return v.get(sub) if sub and isinstance(v, dict) else v


def fmt(v, spec="{:,.0f}"):
    return "-" if v is None else spec.format(v)


def ratio(a, b):
    return None if a is None or not b else a / b


WORKLOADS = [
    ("filter_mask", "FilterRecalled 5k, KEEP_MASK"),
    ("filter_ids", "FilterRecalled 5k, KEPT_IDS"),
    ("pull", "GetFilter + local check 5k"),
    ("pull_cached", "GetFilter if_version + check"),
    ("record", "RecordExposure 50x20 items"),
]
hdr = ("workload", "server req/s", "ceiling req/s", "srv/ceil", "p99 srv us",
       "p99 ceil us", "p99 ratio", "cpu srv us", "cpu ceil us", "cpu ratio",
       "items/s srv", "FP rate", "FN")
rows = []
for key, label in WORKLOADS:
    s, c = key + ".server", key + ".ceiling"
    rows.append((
        label,
        fmt(get(s, "requests_per_s")), fmt(get(c, "requests_per_s")),
        fmt(ratio(get(s, "requests_per_s"), get(c, "requests_per_s")), "{:.2f}"),
        fmt(get(s, "latency_us", "p99")), fmt(get(c, "latency_us", "p99")),
        fmt(ratio(get(s, "latency_us", "p99"), get(c, "latency_us", "p99")), "{:.2f}"),
        fmt(get(s, "server_cpu_us_per_request"), "{:.1f}"),
        fmt(get(c, "server_cpu_us_per_request"), "{:.1f}"),
        fmt(ratio(get(s, "server_cpu_us_per_request"),
                  get(c, "server_cpu_us_per_request")), "{:.2f}"),
        fmt(get(s, "items_per_s")),
        fmt(get(s, "fp_rate"), "{:.4%}"),
        fmt(get(s, "false_negatives")),
    ))
widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
line = lambda r: "  ".join(str(v).rjust(w) if i else str(v).ljust(w)
                           for i, (v, w) in enumerate(zip(r, widths)))
print(line(hdr))
print("  ".join("-" * w for w in widths))
for r in rows:
    print(line(r))
print()
redis, pull, cached = (get("pull.redis", "requests_per_s"),
                       get("pull.server", "requests_per_s"),
                       get("pull_cached.server", "requests_per_s"))
print("Redis seed-004 block list (LRANGE + client check, 5k): "
      f"{fmt(redis)} req/s, p99 {fmt(get('pull.redis', 'latency_us', 'p99'))} us, "
      f"FP {fmt(get('pull.redis', 'fp_rate'), '{:.4%}')}, "
      f"FN {fmt(get('pull.redis', 'false_negatives'))}, "
      f"redis CPU {fmt(get('pull.redis', 'server_cpu_us_per_request'), '{:.1f}')} us/req")
print(f"pull mode / Redis: {fmt(ratio(pull, redis), '{:.2f}')}x   "
      f"pull with if_version / Redis: {fmt(ratio(cached, redis), '{:.2f}')}x   "
      f"FilterRecalled KEEP_MASK / Redis: "
      f"{fmt(ratio(get('filter_mask.server', 'requests_per_s'), redis), '{:.2f}')}x")
bpu = get("filter_mask.server", "server_bytes_per_user")
print(f"server memory: {fmt(bpu)} bytes per user (all-in, "
      f"{get('filter_mask.server', 'candidates')} candidates/request, users preloaded "
      "with exposures spread over 28 days)")
errors = {k: v["errors"] for k, v in runs.items() if v.get("errors")}
if errors:
    print("errors:", json.dumps(errors))
