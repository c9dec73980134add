#!/usr/bin/python3
"""Byte model of the filter-format-2 candidate (issue 15): per-slice runs of
sorted fingerprints, Golomb-Rice coded, one FP budget per user.

Not a benchmark of code: it replays the issue's arrival patterns through the
sizing POLICY and prices every run with the cost that bench/
fingerprint_run_bench measured for src/filter/fingerprint_run (payload bits
per item = log2(U/n) + 1.5, inside the measured 1.44..1.56 band), plus
`--meta` bytes per run and `--over` bytes per user (map slot 9 B, header,
12-byte user id). FP is the exact union bound sum(n_run / U_run), which is
what the runs' fingerprints give (docs/format2-design.md).

  /usr/bin/python3 bench/format2_model.py            # the table in the doc

Policy (docs/format2-design.md, "Sizing"):
  * a write of m items into slice s goes into s's open prefix run (the top b
    bits of the item hash) while that run stays within the FP share `cap` it
    was given; otherwise a new prefix run opens with cap = half of what is
    left of delta and b = max(bmin, ceil(log2(2^h * N_after / cap))), so
    however often a user outgrows its runs the union bound stays < delta
    (each new level costs about one more bit instead of exhausting delta);
  * a slice that is not the newest and has had no write for QUIET of the
    user's writes (or that the sweeper finds idle, --sweep) is sealed: its
    prefix runs are re-encoded as ONE run over universe
    U_s = min(2^b_low, max(N_ref / delta, 2^seal_floor)), with
    N_ref = max(N_live, L * n_s) (the user's rate continuing for the window);
  * late items for a sealed slice join its sealed run only while the slice
    stays within its proportional share delta * n_s / N_ref.
check() asserts the invariant after every write: sum(n/U) <= delta.
"""
import argparse
import math
import random

DAY = 86400000
SPAN = 5 * DAY
RETENTION = 30 * DAY
NOW = 1795392000000 + 3 * 3600 * 1000  # inside a 5-day slice, like the C++ benches


def run_bytes(n, universe):
    """Golomb-Rice payload of n distinct fingerprints in [0, universe)."""
    return n * (max(0.0, math.log2(universe / n)) + 1.5) / 8 if n else 0


QUIET = 8


class BudgetExhausted(Exception):
    pass


class UserModel:
    def __init__(self, delta, h, bmin, slices_per_window, seal_floor, meta, over):
        self.runs = []  # dict(slice, kind, b, U, n)
        self.writes = 0
        self.last_write = {}  # slice -> write number of its last write
        self.delta, self.h, self.bmin = delta, h, bmin
        self.L, self.seal_floor, self.meta, self.over = (
            slices_per_window, seal_floor, meta, over)

    def items(self):
        return sum(r["n"] for r in self.runs)

    def fp_bound(self):
        return sum(r["n"] / r["U"] for r in self.runs)

    def record(self, event_times, now):
        self.runs = [r for r in self.runs if (r["slice"] + 1) * SPAN > now - RETENTION]
        per_slice = {}
        for t in event_times:
            if t >= now - RETENTION:
                per_slice[t // SPAN] = per_slice.get(t // SPAN, 0) + 1
        self.writes += 1
        for s, m in sorted(per_slice.items()):
            self.last_write[s] = self.writes
            n_after = self.items() + m
            open_runs = [r for r in self.runs if r["slice"] == s and r["kind"] == "prefix"]
            if open_runs:
                r = open_runs[-1]
                # A run takes items only up to the FP share it was given.
                if ((r["n"] + m) / r["U"] <= r["cap"]
                        and self.fp_bound() + m / r["U"] <= self.delta):
                    r["n"] += m
                    continue
            # A new run may take at most half of what is left of delta, so
            # however often a user outgrows its runs the sum stays < delta
            # (each level costs one more bit instead of exhausting it).
            cap = (self.delta - self.fp_bound()) / 2
            if cap <= 0:
                raise BudgetExhausted()
            capacity = 2**self.h * n_after
            b = max(self.bmin, math.ceil(math.log2(capacity / cap)))
            if b > 40:
                raise BudgetExhausted()
            self.runs.append(dict(slice=s, kind="prefix", b=b, U=2**b, n=m, cap=cap))
        self._seal()
        self.check()

    def check(self):
        """The invariant (2): the union bound never exceeds delta."""
        if self.fp_bound() > self.delta * (1 + 1e-9):
            raise AssertionError(f"union bound {self.fp_bound()} > delta")

    def seal_idle(self):
        """What the sweeper does for a user that stopped writing."""
        self.writes += QUIET
        self._seal()
        self.check()

    def _seal(self):
        newest = max(r["slice"] for r in self.runs)
        for s in sorted({r["slice"] for r in self.runs}):
            # A slice still written to is not sealed: only one that has had
            # no write for QUIET of the user's writes (a backfill writes to
            # every slice in turn; an in-order stream leaves the old one).
            if s == newest or self.writes - self.last_write.get(s, 0) < QUIET:
                continue
            prefix = [r for r in self.runs if r["slice"] == s and r["kind"] == "prefix"]
            if not prefix:
                continue
            sealed = [r for r in self.runs if r["slice"] == s and r["kind"] == "sealed"]
            n_pre = sum(r["n"] for r in prefix)
            b_low = min(r["b"] for r in prefix)
            others = (self.fp_bound() - sum(r["n"] / r["U"] for r in prefix)
                      - sum(r["n"] / r["U"] for r in sealed))
            if sealed:
                S = sealed[0]
                # Late items join the sealed run only while the slice stays
                # within its proportional share delta * n_s / N_ref.
                n_ref = max(self.items(), self.L * (S["n"] + n_pre))
                if (S["U"] <= 2**b_low and S["U"] >= n_ref / self.delta
                        and others + (S["n"] + n_pre) / S["U"] <= self.delta):
                    S["n"] += n_pre
                    for r in prefix:
                        self.runs.remove(r)
                continue
            n_ref = max(self.items(), self.L * n_pre)
            U = max(n_ref / self.delta, 2**self.seal_floor,
                    n_pre / max(1e-300, (self.delta - others) / 2))
            U = min(U, 2**b_low)
            if others + n_pre / U > self.delta:
                continue
            for r in prefix:
                self.runs.remove(r)
            self.runs.append(dict(slice=s, kind="sealed", b=b_low, U=U, n=n_pre))

    def bytes(self):
        return self.over + sum(self.meta + math.ceil(run_bytes(r["n"], r["U"]))
                               for r in self.runs)


def replay(pattern, model, rng):
    if pattern == "2000 in one call":
        model.record([NOW] * 2000, NOW)
    elif pattern == "2000, 20/call, today":
        for _ in range(100):
            model.record([NOW] * 20, NOW)
    elif pattern in ("2000, 20/call, 29 days in order", "2000, 1/call, 29 days"):
        per = 20 if "20/call" in pattern else 1
        calls = 2000 // per
        for c in range(calls):
            model.record([NOW - 29 * DAY + 29 * DAY * c // calls] * per, NOW)
    elif pattern == "20 items":
        model.record([NOW] * 20, NOW)
    elif pattern == "5000, 20/call, random over 20 days":
        for _ in range(250):
            model.record([NOW - rng.randrange(20 * DAY) for _ in range(20)], NOW)
    elif pattern == "50000, 20/call, 29 days in order":
        for c in range(2500):
            model.record([NOW - 29 * DAY + 29 * DAY * c // 2500] * 20, NOW)
    return model


PATTERNS = {  # pattern -> target bytes/user (issue 15)
    "2000 in one call": 2888,
    "2000, 20/call, today": 2888,
    "2000, 20/call, 29 days in order": 2888,
    "2000, 1/call, 29 days": 2888,
    "20 items": 100,
    "5000, 20/call, random over 20 days": 7024,
    "50000, 20/call, 29 days in order": 70240,  # ~10x RedisBloom at 5,000
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delta", type=float, default=0.01)
    ap.add_argument("--h", type=int, default=1, help="headroom bits of open runs")
    ap.add_argument("--bmin", type=int, default=19, help="least precision of an open run")
    ap.add_argument("--slices", type=int, default=7, help="L in N_ref = max(N, L*n_s)")
    ap.add_argument("--seal_floor", type=int, default=17)
    ap.add_argument("--meta", type=int, default=4, help="bytes per run")
    ap.add_argument("--over", type=int, default=37, help="bytes per user")
    ap.add_argument("--sweep", action="store_true",
                    help="seal idle slices after the pattern (the sweeper)")
    a = ap.parse_args()
    print(f"| pattern | target B | model B/user | bits/item | FP bound | runs |")
    print(f"|---|---|---|---|---|---|")
    for pattern, target in PATTERNS.items():
        model = UserModel(a.delta, a.h, a.bmin, a.slices, a.seal_floor, a.meta, a.over)
        try:
            replay(pattern, model, random.Random(5))
            if a.sweep:
                model.seal_idle()
        except BudgetExhausted:
            print(f"| {pattern} | {target} | budget exhausted | | | |")
            continue
        n = model.items()
        b = model.bytes()
        mark = "" if b <= target else " (over)"
        print(f"| {pattern} | {target} | {b}{mark} | {8 * b / n:.1f} | "
              f"{100 * model.fp_bound():.2f}% | {len(model.runs)} |")


if __name__ == "__main__":
    main()
