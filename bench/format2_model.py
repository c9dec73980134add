#!/usr/bin/python3
"""Byte model of filter format 2: the sizing policy of
src/filter/run_sizing.{h,cc} and UserFilter::Record / SealQuiet / SealIdle,
replayed over memory_bench's arrival patterns, priced like the store
accounts a user.

Not a benchmark of code: a second, independent statement of the policy, so
that a rule can be tried here in seconds and its prediction compared with
bench/memory_bench (docs/format2-design.md, "Sizing policy").

  /usr/bin/python3 bench/format2_model.py            # the table in the doc
  /usr/bin/python3 bench/format2_model.py --zipf     # + the Zipf population

Policy (run_sizing.h has the derivations):
  * F = sum over runs of weight / 2^b (n / U for a prefix run; a run re-mapped
    to U < 2^b claims its exact expected weight n * sum c^2 / 2^b, size-biased)
    stays within the admission budget delta - R after every write, R the
    overflow reserve max(delta / 1024, min(2^15 / 2^32, delta / 2)).
  * A write joins its slice's newest open (prefix) run while the run's
    capacity and the budget hold; else the slice's sealed run if the slice
    keeps its proportional share (JoinsSealed); else a slice holding 64 runs
    joins its most precise open run past its capacity; else a new prefix run
    opens: share cap = half of what is left, b = max(b_min, ceil(log2(2 *
    n_expected / cap))), n_expected = max(n_s, N / L); b_min = 17 for the
    user's first run (which takes at most budget / 32), 19 for later ones.
  * Rate-sized newest runs: a new run of the
    newest slice of a user with at least a span of live history gets room
    for max(n_s, RateExpectedItems) instead of 2 n_expected, where
    RateExpectedItems = n_s + N / elapsed * (slice end - t), elapsed since
    the user's first live event; and if no older slice has an open run, a
    share cap of kNewestShareOfLeft = 0.9 of what is left, not half.
  * Quiet counts: a write into the newest slice ages the others by one, a
    write behind it restarts every count. A slice (not the newest) quiet for
    8 writes is sealed: its open runs become one run at
    U = max(N_ref / budget, 2^17, n_s / (share * left)),
    N_ref = max(N, (L + 1) n_s) (the window's L + 1 slice indices),
    rounded up to a multiple of 256, at most 2^b_low; share = 1/2 while the
    user writes. A seal that the share cap (not the proportional share) set
    within 0.5 bit/item of 2^b_low waits (stays open).
  * Idle seal (what the store's sweeper does after an idle hour): every
    older slice with open runs, and the newest once its span has ended
    (a still-filling newest slice sealed at its first sessions' count
    fragments), sealed the same way at share = 0.9, where the codes
    shrink by more than 24 bits.
  * The newest slice's one open run, once every older slice is sealed:
    re-truncated to the least b < its own with
    2^b >= max(N + n_pred - n_s, L n_pred) / budget whose capacity at 0.9
    of what the other runs leave holds n_pred = RateExpectedItems.
  * --reserve (measured and rejected, not in the C++; docs/format2-design.md,
    "Measured and rejected"): a quiet seal while
    the user writes into the newest slice (events at more than one time,
    its open run with room for the growth) may take 0.9 of what is left
    after the newest slice's predicted growth at 2^-b, if more than half,
    and does not wait. It meets 2,888 right after the compressed writes by
    spending the budget of the slices that come next (the 10,000-item
    grower: 14,242 -> 14,846 B in format2_memory_test).
Prices (user_filter_layout.cc): a run's Rice payload is the code-length model at
the canonical k (n (k + 1) + n / (e^(2^k / mu) - 1), mu = (U - n) / n),
packed back to back; tables = head + per slice 2 B + its exact event-time
fields (+ the first slice's index) + per run count, packed, capacity (open),
U (sealed), difference byte(s); + 16 B header + 14 B key + 9 B map slot.
Not modelled: tail runs (open runs past 4,096 items), fingerprint
collisions (n is the item count), Rice k other than the canonical one.
"""
import argparse
import math
import random

DAY = 86400000
SPAN = 5 * DAY
RETENTION = 30 * DAY
L = RETENTION // SPAN  # 6: slices per window (max_live_slices - 1)
NOW = 1795392000000 + 3 * 3600 * 1000  # inside a 5-day slice, like the C++ benches

FIRST_RUN_ITEMS = 640
FIRST_RUN_SHARE = 1 / 32
GROWTH_EXTRA_BITS = 2
SEAL_FLOOR_LOG2 = 17
QUANTUM = 256
QUIET_WRITES = 8
MAX_PRECISION = 32
MAX_RUNS_PER_SLICE = 64
IDLE_MIN_GAIN_BITS = 24
QUIET_SHARE_OF_LEFT = 0.5
IDLE_SHARE_OF_LEFT = 0.9
NEWEST_SHARE_OF_LEFT = 0.9
RESERVED_SHARE_OF_LEFT = 0.9  # --reserve only
DEFER_BELOW_GAIN_BITS = 0.5
KEY_BYTES = 14  # surface id 2 B + a 12-byte user id
HEADER_BYTES = 16
SLOT_BYTES = 9


def rice_bits(n, u):
    """Expected Rice payload bits of n fingerprints in [0, u), canonical k."""
    if n == 0:
        return 0
    mu = (u - n) / n

    def model(k):
        bits = n * (k + 1)
        if mu > 0:
            bits += n / math.expm1(2**k / mu)
        return bits

    target = mu * math.log(2)
    k0 = min(31, max(0, math.floor(math.log2(target)) if target >= 1 else 0))
    return min(model(k) for k in range(max(0, k0 - 1), min(31, k0 + 1) + 1))


def expected_weight(n, b, u):
    full = 2**b
    if u >= full:
        return n
    lo = full // u
    hi = full - lo * u
    return n * ((u - hi) * lo * lo + hi * (lo + 1) ** 2) / full


def varint_len(v):
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def fixed_len(v):
    n = 0
    while v:
        v >>= 8
        n += 1
    return 8 if n >= 7 else n


class Run:
    def __init__(self, b, u, n, open_, capacity):
        self.b, self.u, self.n, self.open, self.capacity = b, u, n, open_, capacity

    def fp(self):
        return (self.n if self.open else expected_weight(self.n, self.b, self.u)) / 2**self.b


class Slice:
    def __init__(self, index, t):
        self.index, self.min_t, self.max_t = index, t, t
        self.quiet = 0
        self.runs = []


class UserModel:
    def __init__(self, delta, reserve=False):
        # RunSizing::OverflowReserve: delta / 1024 at delta >= 0.78%.
        self.budget = delta - max(delta / 1024, min(2**15 / 2**32, delta / 2))
        self.delta = delta
        self.reserve = reserve
        self.slices = []  # ascending index

    def fp(self):
        return sum(r.fp() for s in self.slices for r in s.runs)

    def items(self):
        return sum(r.n for s in self.slices for r in s.runs)

    # run_sizing.cc
    def new_open_run(self, fp_now, slice_after, items_after, first,
                     rate_expected=0, older_sealed=False):
        share_of_left = NEWEST_SHARE_OF_LEFT if rate_expected > 0 and older_sealed else 0.5
        cap = (self.budget - fp_now) * share_of_left
        expected = max(slice_after, items_after / L)
        room = max(slice_after, rate_expected) if rate_expected > 0 else 2 * expected
        b_first = max(1, math.ceil(math.log2(2 * FIRST_RUN_ITEMS / self.budget)))
        b = b_first if first else b_first + GROWTH_EXTRA_BITS
        if cap > 0:
            need = math.log2(room / cap)
            if need > b:
                b = math.ceil(need)
        else:
            b = MAX_PRECISION
        b = min(b, MAX_PRECISION)
        share = cap
        if first and b == b_first:
            share = min(share, self.budget * FIRST_RUN_SHARE)
        return b, max(0, math.floor(share * 2**b)) if cap > 0 else 0

    @staticmethod
    def rate_expected_items(slice_after, items_after, elapsed, remaining):
        if elapsed < SPAN or elapsed <= 0:
            return 0
        return slice_after + items_after / elapsed * max(0, remaining)

    def expected_in_newest(self, slice_after, items_after, t):
        first = min([t] + [s.min_t for s in self.slices if s.runs])
        index = self.slices[-1].index
        return self.rate_expected_items(slice_after, items_after, t - first,
                                        (index + 1) * SPAN - t)

    def proportional(self, n_s, live, window=L):
        n_ref = max(live, window * n_s)
        u = max(n_ref / self.budget, 2**SEAL_FLOOR_LOG2)
        return math.ceil(u / QUANTUM) * QUANTUM

    def sealed_universe(self, fp_others, n_s, live, b_low, share, window=L):
        left = self.budget - fp_others
        if left <= 0:
            return 0
        u = max(self.proportional(n_s, live, window), n_s / (left * share))
        u = min(math.ceil(u / QUANTUM) * QUANTUM, 2**b_low)
        if fp_others + n_s / u > self.budget:
            return 0
        return u

    def joins_sealed(self, fp_now, u, run_n, incoming, live_after, window=L):
        n_s = run_n + incoming
        return (u >= max(live_after, window * n_s) / self.budget
                and fp_now + incoming / u <= self.budget)

    # user_filter_record.cc
    def record(self, m, t):
        index = t // SPAN
        self.slices = [s for s in self.slices if (s.index + 1) * SPAN > NOW - RETENTION]
        pos = next((i for i, s in enumerate(self.slices) if s.index >= index), len(self.slices))
        if pos == len(self.slices) or self.slices[pos].index != index:
            self.slices.insert(pos, Slice(index, t))
        behind = pos + 1 < len(self.slices)
        for s in self.slices:
            s.quiet = 0 if behind else s.quiet + 1
        sl = self.slices[pos]
        sl.quiet = 0
        sl.min_t, sl.max_t = min(sl.min_t, t), max(sl.max_t, t)
        fp, items = self.fp(), self.items()
        opens = [r for r in sl.runs if r.open]
        sealed = next((r for r in sl.runs if not r.open), None)
        o = opens[-1] if opens else None
        if o and o.n + m <= o.capacity and fp + m / 2**o.b <= self.budget:
            o.n += m
        elif sealed and self.joins_sealed(fp, sealed.u, sealed.n, m, items + m) and (
                fp - sealed.fp() + expected_weight(sealed.n + m, sealed.b, sealed.u) / 2**sealed.b
                <= self.budget):
            sealed.n += m
        elif len(sl.runs) >= MAX_RUNS_PER_SLICE and opens:
            best = max(opens, key=lambda r: r.b)
            best.n += m
            best.capacity = max(best.capacity, best.n)
        else:
            slice_items = sum(r.n for r in sl.runs)
            rate_expected = 0
            older_sealed = all(not r.open for s in self.slices[:-1] for r in s.runs)
            if items > 0 and pos + 1 == len(self.slices):
                rate_expected = self.expected_in_newest(slice_items + m, items + m, t)
            b, capacity = self.new_open_run(fp, slice_items + m, items + m, items == 0,
                                            rate_expected, older_sealed)
            sl.runs.append(Run(b, 2**b, m, True, max(capacity, m)))
        reserve = -1
        if self.reserve and items > 0 and pos + 1 == len(self.slices) and sl.max_t > sl.min_t:
            n_s = sum(r.n for r in sl.runs)
            o = [r for r in sl.runs if r.open]
            expected = self.expected_in_newest(n_s, self.items(), t)
            if expected > 0 and o and expected - n_s <= o[-1].capacity - o[-1].n:
                reserve = (expected - n_s) / 2**o[-1].b
        self.seal(idle=False, reserve=reserve)
        if pos + 1 == len(self.slices):
            self.lower_newest_run(t)
        assert self.fp() <= self.delta * (1 + 1e-9), "F above delta"

    # RunSizing::LoweredNewestRun, UserFilter::LowerNewestRun
    def lower_newest_run(self, t):
        if any(r.open for s in self.slices[:-1] for r in s.runs):
            return
        runs = self.slices[-1].runs
        if len(runs) != 1 or not runs[0].open:
            return
        r = runs[0]
        predicted = self.expected_in_newest(r.n, self.items(), t)
        if predicted <= 0:
            return
        predicted = max(r.n, predicted)
        n_ref = max(self.items() + predicted - r.n, L * predicted)
        b = max(1, math.ceil(math.log2(n_ref / self.budget)))
        cap = (self.budget - (self.fp() - r.fp())) * NEWEST_SHARE_OF_LEFT
        if cap <= 0:
            return
        while b < r.b and math.floor(cap * 2**b) < predicted:
            b += 1
        if b >= r.b or math.floor(cap * 2**b) < r.n:
            return
        r.b, r.u, r.capacity = b, 2**b, math.floor(cap * 2**b)

    def seal(self, idle, newest_ended=False, reserve=-1):
        if not (idle and newest_ended) and len(self.slices) < 2:
            return
        window = L + 1  # the L + 1 slices the window holds
        live = self.items()
        last = len(self.slices) if idle and newest_ended else len(self.slices) - 1
        for s in self.slices[:last]:
            if not idle and s.quiet < QUIET_WRITES:
                continue
            prefix = [r for r in s.runs if r.open]
            if not prefix:
                continue
            sealed = next((r for r in s.runs if not r.open), None)
            n_pre = sum(r.n for r in prefix)
            b_low = min(r.b for r in prefix)
            fp_slice = sum(r.fp() for r in s.runs)
            fp_others = self.fp() - fp_slice
            fp_kept = sum(r.fp() for r in s.runs if not r.open)
            if sealed:
                if sealed.b <= b_low and self.joins_sealed(
                        fp_others + fp_kept, sealed.u, sealed.n, n_pre, live, window):
                    merged = Run(sealed.b, sealed.u, sealed.n + n_pre, False, 0)
                    if fp_others + fp_kept - sealed.fp() + merged.fp() <= self.budget:
                        s.runs = [merged] + [r for r in s.runs if not r.open and r is not sealed]
                continue
            share = IDLE_SHARE_OF_LEFT if idle else QUIET_SHARE_OF_LEFT
            left = self.budget - fp_others
            reserved = False
            if not idle and reserve >= 0 and left > 0:
                r_share = RESERVED_SHARE_OF_LEFT * (left - reserve) / left
                if r_share > share:
                    share, reserved = r_share, True
            u = self.sealed_universe(fp_others, n_pre, live, b_low, share, window)
            if u == 0:
                continue
            if not idle and not reserved and u > self.proportional(n_pre, live, window) and \
                    u > 2**b_low * 2**-DEFER_BELOW_GAIN_BITS:
                continue  # waits for the idle seal
            if idle and sum(r.n * (r.b - math.log2(u)) for r in prefix) < IDLE_MIN_GAIN_BITS:
                continue
            merged = Run(b_low, u, n_pre, False, n_pre)
            if fp_others + fp_kept + merged.fp() > self.budget:
                continue
            if idle and rice_bits(n_pre, u) + IDLE_MIN_GAIN_BITS > sum(
                    rice_bits(r.n, r.u) for r in prefix):
                continue
            s.runs = [merged] + [r for r in s.runs if not r.open]

    def seal_idle(self, now):
        newest_ended = bool(self.slices) and (self.slices[-1].index + 1) * SPAN <= now
        self.seal(idle=True, newest_ended=newest_ended)
        assert self.fp() <= self.delta * (1 + 1e-9), "F above delta"

    def nbytes(self):
        bits = 0
        tables = 1
        prev_index, prev_max = -1, 0
        for s in self.slices:
            tables += 2
            if s.index != prev_index + 1:
                tables += varint_len(2 * (s.index - prev_index))
            tables += fixed_len(abs(s.min_t - prev_max)) + fixed_len(s.max_t - s.min_t)
            prev_index, prev_max = s.index, s.max_t
            for r in s.runs:
                bits += math.ceil(rice_bits(r.n, r.u))
                tables += varint_len(r.n) + 1
                if r.open:
                    tables += varint_len(max(0, r.capacity - r.n)) + 1
                else:
                    tables += varint_len((r.u // QUANTUM) << 1) + 1
        payload = (bits + 7) // 8
        body = max(payload + KEY_BYTES + tables, (payload + 7) // 8 * 8 + 8)
        return HEADER_BYTES + body + SLOT_BYTES


def pattern_calls(name, rng, zipf_items=0):
    """(items, event time) per call, in the user's order."""
    if name == "2000 in one call":
        return [(2000, NOW)]
    if name == "2000, 20/call, today":
        return [(20, NOW)] * 100
    if name in ("2000, 20/call, 29 days", "2000, 1/call, 29 days"):
        per = 20 if "20/call" in name else 1
        calls = 2000 // per
        return [(per, NOW - 29 * DAY + 29 * DAY * c // calls) for c in range(calls)]
    if name == "20 items":
        return [(20, NOW)]
    if name == "5000, 20/call, random over 20 days":
        return [(20, NOW - rng.randrange(20 * DAY)) for _ in range(250)]
    if name == "Zipf":
        n = zipf_items
        slices = min(7, n)
        out = []
        for s in range(slices):
            begin, end = n * s // slices, n * (s + 1) // slices
            for i in range(begin, end, 20):
                out.append((min(20, end - i), NOW - (slices - 1 - s) * SPAN))
        return out
    raise ValueError(name)


PATTERNS = {  # pattern -> target bytes/user (RedisBloom's; 100 B at 20 items)
    "2000 in one call": 2888,
    "2000, 20/call, today": 2888,
    "2000, 20/call, 29 days": 2888,
    "2000, 1/call, 29 days": 2888,
    "20 items": 100,
    "5000, 20/call, random over 20 days": 7024,
}


def replay(calls, delta, reserve=False):
    m = UserModel(delta, reserve)
    for n, t in calls:
        m.record(n, t)
    written = m.nbytes()
    m.seal_idle(NOW + 2 * 3600 * 1000)  # memory_bench: 2 h of sweeps later
    return m, written


# bench/memory_bench BM_ArrivalPatterns (300 users; Zipf 2,000), accounted
# B/user (written, idle), as measured at e6c21a8 (docs/performance.md,
# "Memory per user").
MEMORY_BENCH = {
    "2000 in one call": (2701, 2701),
    "2000, 20/call, today": (2479, 2479),
    "2000, 20/call, 29 days": (2857, 2853),
    "2000, 1/call, 29 days": (2877, 2874),
    "20 items": (90, 90),
    "5000, 20/call, random over 20 days": (6531, 6531),
    "Zipf": (7260, 7228),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delta", type=float, default=0.01)
    ap.add_argument("--users", type=int, default=20, help="users per pattern")
    ap.add_argument("--zipf", action="store_true",
                    help="also the Zipf population (2,000 users, 1..50,000 items)")
    ap.add_argument("--reserve", action="store_true",
                    help="the rejected quiet-seal reserve (see the policy above)")
    a = ap.parse_args()
    print("| pattern | target B | model written B/user | memory_bench written | "
          "model idle B/user | memory_bench idle | F (idle) |")
    print("|---|---|---|---|---|---|---|")
    rows = list(PATTERNS.items()) + ([("Zipf", None)] if a.zipf else [])
    for name, target in rows:
        users = 2000 if name == "Zipf" else a.users
        zipf = random.Random(21)
        written = idle = fp = 0.0
        for u in range(users):
            n = int(50000 ** zipf.random())
            m, w = replay(pattern_calls(name, random.Random(1000 + u), n), a.delta,
                          a.reserve)
            written += w
            idle += m.nbytes()
            fp += m.fp()
        bench_w, bench_i = MEMORY_BENCH.get(name, ("-", "-"))
        print(f"| {name} | {target or '-'} | {written / users:.0f} | {bench_w} | "
              f"{idle / users:.0f} | {bench_i} | {100 * fp / users:.3f}% |")


if __name__ == "__main__":
    main()
