#!/usr/bin/python3
"""Writes the headline table at the top of docs/performance.md from the JSON
the benchmarks wrote, so the table and the charts (bench/plot_figures.py,
same inputs, same run of bench/figures.sh) cannot disagree.

  compare  bench/compare.sh's OUT dir (one exposure-filter-bench --json
           report per run): FilterRecalled, GetFilter + local check and
           RecordExposure against the transport-ceiling server, and the
           Redis block list.
  memory   memory_bench --benchmark_format=json: bytes per user through
           the store against RedisBloom.
  check    filter_bench --benchmark_format=json, BM_RemoveExposedUser: the
           in-process check of 5,000 candidates, format 2 beside format 1.
  feed     bench/compare.sh's OUT dir of its feed part (one
           exposure-filter-feed-bench report per system, K and thread
           count): the session stream's recall loop at K = 10 against the
           Redis block list (plain and client-cached), and at K = 1 against
           mode B.

Each input may carry a provenance.json (bench/figures.sh writes it: the
command, when it ran, the load average, the git commit); every row names the
commit and time of the run it comes from. The table lives between the
markers below in --doc. A row whose input was not given keeps the text it
has in the document (a partial run, `bash bench/figures.sh memory`, redraws
only the memory rows and chart), so no row is ever invented or blanked.

  /usr/bin/python3 bench/headline_table.py --doc docs/performance.md \\
      [--compare DIR] [--memory FILE] [--check FILE] [--feed DIR]
Standard library only. Normally run through bench/figures.sh.
"""
import argparse
import json
import os
import re
import sys

import feed_table  # bench/feed_table.py: the feed runs, as compare.sh reads them

BEGIN = ("<!-- headline:begin: bench/figures.sh writes this block "
         "(bench/headline_table.py); edit the script, not the block -->")
END = "<!-- headline:end -->"
HEADER = ("| workload | figure | same-run baseline | commit | measured (UTC) "
          "| reproduce |")
SEPARATOR = "|---|---|---|---|---|---|"

# Yardsticks the memory rows compare against (docs/performance.md, "Memory
# per user"): RedisBloom reserved for the exact count at 1%
# (BF.RESERVE key 0.01 N, then MEMORY USAGE; no aging), and the information
# limit log2(1/delta) bits per item.
REDISBLOOM_BYTES = {2000: 2888, 20: 160, 5000: 7024}
INFO_LIMIT_BITS = 6.64

# Row labels: the first cell of each row, also the key a partial run uses
# to keep the rows it does not redraw. Order is the table's.
ROWS = [
    "Feed loop, K = 10 requests per session, 5,000 candidates, 2 client threads",
    "Feed loop, K = 1 request per session, 5,000 candidates, 2 client threads",
    "FilterRecalled, 5,000 candidates, KEEP_MASK",
    "FilterRecalled, 5,000 candidates, KEPT_IDS",
    "GetFilter + local check (pull mode), 5,000 candidates",
    "Redis block list (seed-004 design), 5,000 candidates",
    "RecordExposure, 50 users × 20 items per call",
    "Memory per user, 2,000 items over 29 days, 20 per call",
    "Memory per user, 20 items",
    "In-process check, 5,000 candidates, 2,000 items in 7 slices",
]
CHARTS = {
    "memory": ("img/memory_per_user.png", "bytes per user by arrival pattern"),
    "compare": ("img/throughput_p99.png", "req/s and p99 per workload"),
}

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def provenance(path):
    """The provenance.json beside `path` (a file or a directory), or {}."""
    if os.path.isdir(path):
        p = os.path.join(path, "provenance.json")
    else:
        p = path + ".provenance.json"
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return json.load(f)


def when(prov):
    if not prov:
        return "?"
    day, start = (prov.get("started", "? ?").split(" ") + ["?"])[:2]
    end = prov.get("finished", "? ?").split(" ")[-1]
    steal = ", host steal %s" % prov["steal"] if "steal" in prov else ""
    return "%s %s–%s, load %s%s" % (day, start, end,
                                    prov.get("load_average", "?"), steal)


def commit(prov):
    return "`%s`" % prov.get("git", "?") if prov else "?"


def num(v, spec="{:,.0f}"):
    return "–" if v is None else spec.format(v)


def ratio(a, b):
    return None if a is None or not b else a / b


def times(v):
    return "–" if v is None else "%.2f×" % v


def ms(us):
    return None if us is None else us / 1000.0


# --- compare.sh -----------------------------------------------------------

def load_runs(d):
    runs = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".json") and f != "provenance.json":
            with open(os.path.join(d, f)) as fh:
                text = fh.read().strip()
            if text:
                runs[f[:-5]] = json.loads(text)
    return runs


def fig(runs, name):
    r = runs.get(name)
    if r is None:
        return None
    return {"rps": r.get("requests_per_s"),
            "p99": (r.get("latency_us") or {}).get("p99"),
            "cpu": r.get("server_cpu_us_per_request"),
            "items": r.get("items_per_s"),
            "fp": r.get("fp_rate"),
            "fn": r.get("false_negatives")}


def compare_rows(d):
    runs = load_runs(d)
    prov = provenance(d)
    cmd = "`bash bench/figures.sh compare`"
    rows = {}
    redis = fig(runs, "pull.redis")

    def vs_ceiling(s, c):
        if c is None:
            return "transport ceiling not run"
        return ("transport ceiling %s req/s, p99 %s ms: **%s** req/s, %s p99"
                % (num(c["rps"]), num(ms(c["p99"]), "{:.2f}"),
                   times(ratio(s["rps"], c["rps"])),
                   times(ratio(s["p99"], c["p99"]))))

    def vs_redis(s):
        if redis is None:
            return ""
        return "; Redis block list %s req/s: %s" % (
            num(redis["rps"]), times(ratio(s["rps"], redis["rps"])))

    for key, label in (("filter_mask", ROWS[2]), ("filter_ids", ROWS[3])):
        s = fig(runs, key + ".server")
        if s is None:
            continue
        rows[label] = (
            "%s req/s, p99 %s ms, %s µs server CPU per request, %s false "
            "negatives" % (num(s["rps"]), num(ms(s["p99"]), "{:.2f}"),
                           num(s["cpu"], "{:.1f}"), num(s["fn"])),
            vs_ceiling(s, fig(runs, key + ".ceiling")) + vs_redis(s),
            prov, cmd)
    s = fig(runs, "pull.server")
    if s is not None:
        cached = fig(runs, "pull_cached.server")
        extra = ""
        if cached is not None:
            extra = "; with `if_version` revalidation %s req/s" % num(
                cached["rps"])
        rows[ROWS[4]] = (
            "%s req/s, p99 %s ms, %s µs server CPU per request%s"
            % (num(s["rps"]), num(ms(s["p99"]), "{:.2f}"),
               num(s["cpu"], "{:.1f}"), extra),
            vs_ceiling(s, fig(runs, "pull.ceiling")) + vs_redis(s),
            prov, cmd)
    if redis is not None:
        mask, pull, cached = (fig(runs, "filter_mask.server"),
                              fig(runs, "pull.server"),
                              fig(runs, "pull_cached.server"))
        parts = []
        for what, s in (("pull mode", pull), ("pull with `if_version`", cached),
                        ("FilterRecalled KEEP_MASK", mask)):
            if s is not None:
                parts.append("%s %s" % (what, times(ratio(s["rps"],
                                                          redis["rps"]))))
        rows[ROWS[5]] = (
            "%s req/s, p99 %s ms, %s µs Redis CPU per request, FP %s"
            % (num(redis["rps"]), num(ms(redis["p99"]), "{:.2f}"),
               num(redis["cpu"], "{:.1f}"), num(redis["fp"], "{:.3%}")),
            "same run: " + ", ".join(parts) + " of Redis's req/s",
            prov, cmd)
    s = fig(runs, "record.server")
    if s is not None:
        c = fig(runs, "record.ceiling")
        rows[ROWS[6]] = (
            "%s M items/s (%s req/s), p99 %s ms, %s µs server CPU per request"
            % (num(None if s["items"] is None else s["items"] / 1e6,
                   "{:.2f}"), num(s["rps"]), num(ms(s["p99"]), "{:.2f}"),
               num(s["cpu"], "{:.1f}")),
            "transport ceiling %s req/s: %s" % (
                num(c["rps"]), times(ratio(s["rps"], c["rps"])))
            if c else "transport ceiling not run",
            prov, cmd)
    return rows


# --- compare.sh's feed part ---------------------------------------------

def feed_rows(d):
    runs = feed_table.load(d)
    prov = provenance(d)
    cmd = "`bash bench/figures.sh feed`"
    rows = {}
    s = runs.get((10, 2, "session"))
    if s is not None:
        misses = s.get("fn_outside_bound", 0) + s.get("fn_unresolved", 0)
        figure = ("session stream %s req/s, %s µs CPU per request (client + "
                  "server), hit ratio %s, staleness p99 %s ms, %s false "
                  "negatives beyond the %s ms bound"
                  % (num(s.get("requests_per_s")), num(feed_table.cpu(s)),
                     num(s.get("hit_ratio"), "{:.2f}"),
                     num((s.get("staleness_ms") or {}).get("p99"), "{:.1f}"),
                     num(misses), num(s.get("staleness_bound_ms"))))
        parts = []
        for key, what in (("redis", "Redis block list"),
                          ("redis_cached", "with Redis client-side caching")):
            b = runs.get((10, 2, key))
            if b is None:
                continue
            text = "%s %s req/s: **%s** req/s" % (
                what, num(b.get("requests_per_s")),
                times(ratio(s.get("requests_per_s"), b.get("requests_per_s"))))
            if key == "redis":
                text += ", %s CPU per request" % times(
                    ratio(feed_table.cpu(s), feed_table.cpu(b)))
            parts.append(text)
        rows[ROWS[0]] = (figure, "; ".join(parts) or "Redis not run", prov,
                         cmd)
    s = runs.get((1, 2, "session"))
    if s is not None:
        figure = ("session stream %s req/s, %s µs CPU per request (client + "
                  "server)" % (num(s.get("requests_per_s")), num(feed_table.cpu(s))))
        parts = []
        for key, what in (("mode_b", "mode B (GetFilter + local check)"),
                          ("stream_a", "mode A on the stream"),
                          ("redis", "Redis block list")):
            b = runs.get((1, 2, key))
            if b is not None:
                # Mode B is the K = 1 target's baseline: its ratio in bold.
                mark = "**" if key == "mode_b" else ""
                parts.append("%s %s req/s: %s%s%s" % (
                    what, num(b.get("requests_per_s")), mark,
                    times(ratio(s.get("requests_per_s"),
                                b.get("requests_per_s"))), mark))
        rows[ROWS[1]] = (figure, "; ".join(parts) or "mode B not run", prov,
                         cmd)
    return rows


# --- Google Benchmark JSON ------------------------------------------------

def benchmarks(path):
    """name -> entry; with repetitions, the median aggregate."""
    with open(path) as f:
        report = json.load(f)
    out, medians = {}, {}
    for b in report.get("benchmarks", []):
        # "BM_X/1/2/iterations:1" -> "BM_X/1/2"
        name = "/".join(p for p in b.get("run_name", b["name"]).split("/")
                        if not p.startswith(("iterations:", "repeats:",
                                             "min_time:")))
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[name] = b
        else:
            out.setdefault(name, b)
    out.update(medians)
    return out


def memory_rows(path):
    bm = benchmarks(path)
    prov = provenance(path)
    cmd = "`bash bench/figures.sh memory`"
    rows = {}
    p2 = bm.get("BM_ArrivalPatterns/2")
    if p2 is not None:
        idle = p2.get("accounted_B_per_user")
        sessions = bm.get("BM_ArrivalPatternsRealTime/0")
        extra = ""
        if sessions is not None:
            extra = ("; the same in real time (3–4 sessions a day, sweeper "
                     "every minute): peak %s B" % num(
                         sessions.get("peak_B_per_user")))
        rows[ROWS[7]] = (
            "%s B/user right after the writes, %s idle (%s bits/item); FP "
            "%s measured (bound %s), %s false negatives%s"
            % (num(p2.get("written_B_per_user")), num(idle),
               num(p2.get("bits_per_item"), "{:.1f}"),
               num(p2.get("fp_measured"), "{:.3%}"),
               num(p2.get("fp_bound_mean"), "{:.3%}"),
               num(p2.get("false_negatives")), extra),
            "RedisBloom reserved for 2,000 at 1%% (no aging) %s B: %s; "
            "information limit %.2f bits/item"
            % (num(REDISBLOOM_BYTES[2000]),
               times(ratio(idle, REDISBLOOM_BYTES[2000])), INFO_LIMIT_BITS),
            prov, cmd)
    p4 = bm.get("BM_ArrivalPatterns/4")
    if p4 is not None:
        b = p4.get("accounted_B_per_user")
        rows[ROWS[8]] = (
            "%s B/user all-in (filter, key, map slot), %s false negatives"
            % (num(b), num(p4.get("false_negatives"))),
            "RedisBloom reserved for 20 at 1%% %s B: %s"
            % (num(REDISBLOOM_BYTES[20]), times(ratio(b, REDISBLOOM_BYTES[20]))),
            prov, cmd)
    return rows


def check_rows(path):
    bm = benchmarks(path)
    prov = provenance(path)
    candidates = 5000  # filter_bench's kCandidates

    def cpu_us(name):
        b = bm.get(name)
        if b is None:
            return None
        return b["cpu_time"] * UNIT_NS.get(b.get("time_unit", "ns"), 1) / 1e3

    f2 = cpu_us("BM_RemoveExposedUser/7/2000/2")
    if f2 is None:
        return {}
    per_cand = f2 * 1e3 / candidates
    f1 = cpu_us("BM_RemoveExposedUser/7/2000/1")
    one = cpu_us("BM_RemoveExposedUser/1/2000/2")
    base = ["target ≤ 2 ns per candidate per live slice"]
    if f1 is not None:
        base.append("format 1 (Bloom, AVX2) %s µs: %s" % (
            num(f1, "{:.1f}"), times(ratio(f2, f1))))
    if one is not None:
        base.append("the same 2,000 items in 1 slice %s µs" % num(
            one, "{:.1f}"))
    return {ROWS[9]: (
        "%s µs CPU per call: %s ns per candidate, **%s ns per candidate per "
        "live slice**" % (num(f2, "{:.1f}"), num(per_cand, "{:.2f}"),
                          num(per_cand / 7, "{:.2f}")),
        "; ".join(base), prov, "`bash bench/figures.sh check`")}


# --- the block --------------------------------------------------------------

def cells(row):
    figure, baseline, prov, cmd = row
    return [figure, baseline, commit(prov), when(prov), cmd]


def existing_block(text):
    """(rows by label, chart lines by file) of the block in `text`."""
    rows, charts = {}, {}
    if BEGIN not in text or END not in text:
        return rows, charts
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    for line in block.splitlines():
        if line.startswith("| ") and not line.startswith(HEADER):
            label = line[2:].split(" | ", 1)[0].strip()
            rows[label] = line
        m = re.match(r"- \[[^\]]*\]\((img/[^)]+)\)", line)
        if m:
            charts[m.group(1)] = line
    return rows, charts


def render(new_rows, old_rows, new_charts, old_charts):
    lines = [BEGIN, HEADER, SEPARATOR]
    for label in ROWS:
        if label in new_rows:
            lines.append("| " + " | ".join([label] + cells(new_rows[label]))
                         + " |")
        elif label in old_rows:
            lines.append(old_rows[label])
        else:
            lines.append("| %s | not measured yet | | | | |" % label)
    dropped = sorted(set(old_rows) - set(ROWS))
    for label in dropped:
        print("headline_table: dropped a row the script does not make: "
              + label, file=sys.stderr)
    chart_lines = []
    for key in ("memory", "compare"):
        path, what = CHARTS[key]
        if key in new_charts:
            prov = new_charts[key]
            chart_lines.append("- [%s](%s), drawn from the same run: %s, %s"
                               % (what, path, commit(prov), when(prov)))
        elif path in old_charts:
            chart_lines.append(old_charts[path])
    if chart_lines:
        lines += ["", "Charts:", ""] + chart_lines
    lines.append(END)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--doc", required=True,
                    help="the Markdown file holding the block")
    ap.add_argument("--compare")
    ap.add_argument("--memory")
    ap.add_argument("--check")
    ap.add_argument("--feed")
    args = ap.parse_args()
    with open(args.doc) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.exit("headline_table: %s has no headline block (%s ... %s)"
                 % (args.doc, BEGIN, END))
    new_rows, new_charts = {}, {}
    if args.compare:
        new_rows.update(compare_rows(args.compare))
        new_charts["compare"] = provenance(args.compare)
    if args.memory:
        new_rows.update(memory_rows(args.memory))
        new_charts["memory"] = provenance(args.memory)
    if args.check:
        new_rows.update(check_rows(args.check))
    if args.feed:
        new_rows.update(feed_rows(args.feed))
    if not new_rows:
        sys.exit("headline_table: no rows from the inputs given "
                 "(--compare, --memory, --check, --feed)")
    old_rows, old_charts = existing_block(text)
    block = render(new_rows, old_rows, new_charts, old_charts)
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(args.doc, "w") as f:
        f.write(head + block + tail)
    print("headline_table: %d rows redrawn in %s" % (len(new_rows), args.doc))


if __name__ == "__main__":
    main()
