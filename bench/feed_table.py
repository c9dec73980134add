#!/usr/bin/python3
"""Prints the feed-loop table of bench/compare.sh from its feed.*.json files
(exposure-filter-feed-bench, one per system, K and thread count), with
ratios against the plain Redis block list of the same run, and whether the
targets of docs/performance.md ("The feed loop") are met."""
import json
import os
import sys

SYSTEMS = [
    ("session", "session stream (FilterReplica)"),
    ("mode_a", "mode A (unary FilterRecalled)"),
    ("mode_b", "mode B (FilterCache, if_version)"),
    ("stream_a", "mode A on the Session stream"),
    ("redis", "Redis block list (LRANGE)"),
    ("redis_cached", "Redis block list + client cache"),
]


def load(out):
    runs = {}
    for f in sorted(os.listdir(out)):
        if not (f.startswith("feed.") and f.endswith(".json")):
            continue
        with open(os.path.join(out, f)) as fh:
            text = fh.read().strip()
        if not text:
            continue
        r = json.loads(text.splitlines()[-1])
        runs[(r["session_requests"], r["threads"], r["system"])] = r
    return runs


def fmt(v, spec="{:,.0f}"):
    return "-" if v is None else spec.format(v)


def ratio(a, b):
    return None if a is None or not b else a / b


def cpu(r):
    c, s = r.get("client_cpu_us_per_request"), r.get("server_cpu_us_per_request")
    return None if c is None or s is None else c + s


def main():
    out = sys.argv[1]
    runs = load(out)
    if not runs:
        print("feed loop: no runs")
        return
    hdr = ("K", "thr", "system", "req/s", "x redis", "check p50 ms",
           "write p50 ms", "cli us", "srv us",
           "cpu us", "x redis", "bytes/req", "hit", "stale p50 ms",
           "p99 ms", "FN in", "FN out", "FP rate", "users/write", "errors")
    rows = []
    for k, t in sorted({(k, t) for k, t, _ in runs}):
        base = runs.get((k, t, "redis"))
        for key, label in SYSTEMS:
            r = runs.get((k, t, key))
            if r is None:
                continue
            st = r.get("staleness_ms") or {}
            rows.append((
                str(k), str(t), label,
                fmt(r.get("requests_per_s")),
                fmt(ratio(r.get("requests_per_s"),
                          base and base.get("requests_per_s")), "{:.2f}"),
                fmt((r.get("check_ms") or {}).get("p50"), "{:.3f}"),
                fmt((r.get("write_ms") or {}).get("p50"), "{:.3f}"),
                fmt(r.get("client_cpu_us_per_request"), "{:.0f}"),
                fmt(r.get("server_cpu_us_per_request"), "{:.0f}"),
                fmt(cpu(r), "{:.0f}"),
                fmt(ratio(cpu(r), base and cpu(base)), "{:.2f}"),
                fmt(r.get("wire_bytes_per_request")),
                fmt(r.get("hit_ratio"), "{:.3f}"),
                fmt(st.get("p50"), "{:.3f}"), fmt(st.get("p99"), "{:.3f}"),
                fmt(r.get("fn_within_bound")), fmt(r.get("fn_outside_bound")),
                fmt(r.get("fp_rate"), "{:.4%}"),
                fmt(r.get("writer_users_per_call"), "{:.1f}"),
                json.dumps(r["errors"]) if r.get("errors") else "",
            ))
    widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
    line = lambda r: "  ".join(
        str(v).ljust(w) if i == 2 else str(v).rjust(w)
        for i, (v, w) in enumerate(zip(r, widths))).rstrip()
    print(line(hdr))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))
    any_run = next(iter(runs.values()))
    print()
    print("req/s: recall requests (check + show + write acknowledged) per "
          "second; check / write p50: the check, and the shown items handed to "
          "the writer -> acknowledged; cli us: the recall side's CPU per "
          "request (the checks' own thread CPU plus gRPC's, the replica's and "
          "the invalidation reader's threads; not the writer and background "
          "threads, not drawing candidates or scoring); srv us: the server's (or "
          "redis-server's) CPU per request, writes included; bytes/req: "
          "TCP_INFO bytes of every load-generator socket, both directions, "
          "writes included; hit: checks answered from a local copy; stale: "
          "write acknowledged -> first check that removed the item; FN in / "
          "out: items recorded earlier in the session and kept by a later "
          f"request, within / beyond {any_run.get('staleness_bound_ms')} ms "
          "of the write; x redis: against the plain Redis block list at the "
          "same K and threads, same run.")

    for (k, t, sysname), r in sorted(runs.items()):
        for code, text in sorted((r.get("error_messages") or {}).items()):
            print(f"error, K={k} {t} threads {sysname}: {code}: {text}")

    def get(k, t, s, f):
        r = runs.get((k, t, s))
        return None if r is None else r.get(f)

    def verdict(ok):
        return "n/a (not run)" if ok is None else ("met" if ok else "NOT met")

    print()
    print("Targets:")
    k, t = 10, 2
    sess, red, cac = (get(k, t, s, "requests_per_s")
                      for s in ("session", "redis", "redis_cached"))
    r1, r2 = ratio(sess, red), ratio(sess, cac)
    print(f"  K=10: session >= 5x Redis block list req/s: {fmt(r1, '{:.2f}')}x"
          f" -> {verdict(None if r1 is None else r1 >= 5)}")
    print(f"  K=10: session >= 3x client-cached list req/s: {fmt(r2, '{:.2f}')}x"
          f" -> {verdict(None if r2 is None else r2 >= 3)}")
    cs = runs.get((k, t, "session"))
    cr = runs.get((k, t, "redis"))
    c = ratio(cs and cpu(cs), cr and cpu(cr))
    print(f"  K=10: session CPU/request <= 0.2x the plain list's (client + "
          f"server): {fmt(c, '{:.2f}')}x -> {verdict(None if c is None else c <= 0.2)}")
    p99 = (get(k, t, "session", "staleness_ms") or {}).get("p99")
    print(f"  K=10: session staleness p99 <= 100 ms: {fmt(p99, '{:.3f}')} ms"
          f" -> {verdict(None if p99 is None else p99 <= 100)}")
    outs = [r.get("fn_outside_bound", 0) + r.get("fn_unresolved", 0)
            for (kk, tt, s), r in runs.items() if s == "session"]
    print(f"  session: zero false negatives outside the bound (all K): "
          f"{sum(outs) if outs else '-'} -> "
          f"{verdict(None if not outs else sum(outs) == 0)}")
    s1, b1 = get(1, 2, "session", "requests_per_s"), get(1, 2, "mode_b", "requests_per_s")
    q = ratio(s1, b1)
    print(f"  K=1: session no slower than mode B: {fmt(q, '{:.2f}')}x -> "
          f"{verdict(None if q is None else q >= 1)}")
    for tt in sorted({t for _, t, _ in runs}):
        q = ratio(get(10, tt, "stream_a", "requests_per_s"),
                  get(10, tt, "redis", "requests_per_s"))
        print(f"  K=10, {tt} threads: mode A on the stream >= 1.5x Redis block "
              f"list req/s: {fmt(q, '{:.2f}')}x -> "
              f"{verdict(None if q is None else q >= 1.5)}")


if __name__ == "__main__":
    main()
