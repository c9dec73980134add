// RunSizing: how format-2 fingerprint runs are sized (docs/format2-design.md,
// "Sizing policy"; bench/format2_model.py is the same policy as a model).
//
// The invariant. A never-recorded item is claimed by run r with probability
// n_r / U_r (its fingerprint is uniform on [0, U_r)), so by the union bound a
// user's false-positive rate is at most
//     F = sum over live runs of n_r / U_r  (+ the legacy Bloom slices' rate).
// Every write keeps F <= budget = delta - legacy: merges and new runs are
// admitted only if F after them stays within it.
//
// The online problem: a slice's final count is unknown while it fills, and a
// run's precision can be lowered later (re-mapped to a smaller universe) but
// never raised. So:
//  * Open runs are prefix runs (U = 2^b, the top b bits of the item hash)
//    holding spare precision: a new one gets a share cap = (budget - F) / 2,
//    half of what is left, so however often a user outgrows its runs F stays
//    below the budget (the shares form a geometric series); its precision is
//      b = max(b_min, ceil(log2(2 * n_expected / cap))),
//      n_expected = max(n_s, N_after / L)
//    so it has room for capacity = cap * 2^b >= 2 n_expected items: twice
//    what the slice holds after the write, or twice a slice's share of the
//    user if the user's rate continues (L = retention / span slices per
//    window). A slice that outgrows it opens the next run.
//  * The user's first run (b_first, for the light user) fills at most
//    kFirstRunShare of the budget; later runs have b >= b_first + 2.
//  * A quiet slice (not the newest, no write for kQuietWrites of the user's
//    writes, counted only while the writes stay in the newest slice: a write
//    behind the newest restarts every slice's count, so a backfill's slices,
//    written in turn in no order, stay open until it ends) is sealed: its
//    prefix runs are re-encoded as one run at
//      U_s = min(2^b_low, max(N_ref / budget, 2^kSealFloorLog2))
//    with N_ref = max(N_live, (L + 1) * n_s), L = retention / span (the
//    window holds L + 1 slice indices while the newest fills): the slice
//    gets its share in proportion to its count n_s / N_ref, assuming the
//    user's rate continues for the window (the Lagrange optimum gives every
//    item of the user the same universe N / delta: eq. 3 of the design), and
//    at most kQuietShareOfLeft of what the other runs leave; a seal that
//    cap holds within kDeferBelowGainBits per item of 2^b_low waits
//    (DefersSeal). The idle seal (the store's sweeper) takes up to
//    kIdleShareOfLeft.
//  * Once every older slice is sealed, the newest slice's one open run is
//    re-truncated to the least b' with 2^b' >= its predicted proportional
//    universe whose capacity at kNewestShareOfLeft of what is left holds
//    the slice's predicted count (LoweredNewestRun): the F the seals at
//    L + 1 slices leave goes to the slice still filling.
//  * Late items for a sealed slice join its run while U_s >= N_ref / budget
//    still holds for the grown slice (its share stays proportional);
//    otherwise they open a prefix run of that slice.
#ifndef EXPOSURE_FILTER_SRC_FILTER_RUN_SIZING_H_
#define EXPOSURE_FILTER_SRC_FILTER_RUN_SIZING_H_

#include <cstdint>

namespace exposure_filter {

struct OpenRunShape {
  int precision = 0;      // b; the run's universe is 2^b
  uint64_t universe = 0;  // 2^b
  uint32_t capacity = 0;  // distinct fingerprints it may hold
};

class RunSizing {
 public:
  // Least capacity of a user's first run: b >= log2(2 * 640 / budget), 17
  // bits at delta = 1%, so it holds up to delta/2 * 2^17 = 655 items before a
  // second run opens, and 20 items cost 20 * (log2(2^17 / 20) + 1.5) = 284
  // bits: the light user stays under 100 bytes all-in
  // (tests/filter/format2_memory_test). In items, not bits, so a surface
  // with a large delta does not pay 17 bits.
  static constexpr double kFirstRunItems = 640;
  // Most of the budget the first run may fill: 1/32, 41 items at 2^17 and
  // delta = 1% (a light user's 20 fit). At the half of what is left that
  // later runs get, the first run could take 655 items at 2^-17 each, half of
  // delta for 13% of a 5,000-item backfill: the rest exhausted the budget
  // (late runs at b = 25..32, 10.4 KB/user; 6.6 KB with this share).
  static constexpr double kFirstRunShare = 1.0 / 32;
  // Every later run gets 2 more bits (19 at 1%: 2^19 >= N / delta for N <=
  // 5,242 items): a user that writes again may grow, and a slice sealed
  // later can only be re-mapped to U <= 2^b_low, so its first items keep
  // room for a proportional share (a backfill seals slices early, when
  // their first run is all they hold).
  static constexpr int kGrowthExtraBits = 2;
  // Least universe of a sealed run (2^17): a small slice keeps enough
  // precision that late items can still join it.
  static constexpr int kSealFloorLog2 = 17;
  // A sealed universe is rounded up to a multiple of this (then capped at
  // 2^b_low, itself a multiple): the tables store U / 256 in 2 varint bytes
  // instead of U - 1 in 3 (U ~ 2^17..2^21), for at most 256 / U more bits
  // per item (0.0019 bit at U = 2^17).
  static constexpr double kSealedUniverseQuantum = 256;
  // A slice with no write for this many of the user's writes is quiet,
  // counted while the writes stay in the newest slice: an in-order stream
  // leaves the old slice behind. A write behind the newest slice (a
  // backfill, a late event) restarts every count (UserFilter::Record): a
  // backfill writes to its slices in turn and in no order, and at 20 items
  // per call over ~4.5 slices one of them went 8 writes unwritten often
  // enough to be sealed early, at a universe <= 2^b_low too small for the
  // items it still received.
  static constexpr int kQuietWrites = 8;
  static constexpr int kMaxPrecision = 32;
  // A user with no read or write for this long is idle: the sweeper seals
  // its open slices, the newest included (UserFilter::SealIdle), where the
  // codes shrink by more than kIdleSealMinGainBits (a sealed run's table
  // entry, U and weight, is 1-2 bytes longer than an open one's capacity).
  static constexpr int64_t kIdleSealMs = 3600 * 1000;
  static constexpr uint64_t kIdleSealMinGainBits = 24;
  // What a seal may take of the budget the other runs leave. While the user
  // writes, half: the newest slice is still filling and the older slices
  // have not freed their shares (the window can hold L + 1 slices), so a
  // geometric half keeps room for it. Once the user is idle the newest
  // slice's volume is known (it is sealed in the same pass) and a seal may
  // take what is left, all but a reserve for the sealed runs' exact weight
  // (a run re-mapped to U < 2^b claims up to ~4% more than n / U at
  // 2^b / U ~ 2.5, RunMeta::weight): a later write opens runs with half of
  // what is then left (the late-item rules), F stays within the budget.
  static constexpr double kQuietShareOfLeft = 0.5;
  // What a new open run of the newest slice may take of what is left when
  // its size comes from the user's rate and every older slice is sealed:
  // the older slices then need no more of the budget (late items excepted,
  // which open runs at half of the rest), and the newest slice is where
  // the user's items still go. Its run at half of what is left had to open
  // at 2^20 for the 20/call spread user's ~340 items (13.1 bits/item, 10.8
  // once sealed); in real time, where the sweeper seals the older slices
  // between sessions, this took the population's peak from 2,908 to 2,868
  // B (memory_bench, BM_ArrivalPatternsRealTime; docs/format2-design.md).
  static constexpr double kNewestShareOfLeft = 0.9;
  static constexpr double kIdleShareOfLeft = 0.9;
  // A quiet seal bound by the share-of-left cap that would take less than
  // this many bits per item off the slice's prefix runs (u above
  // 2^b_low / sqrt(2)) waits for the idle seal, or for an older slice to age
  // out and free its share: the prefix runs cost at most that much more per
  // item while they stay open. 1/call over 29 days sealed its sixth slice at
  // U = 506,880 of 2^19 (0.05 bit/item) where its proportional share was
  // ~207,000; the idle seal now gives it 281,600 (0.9 of what is left). At
  // 1 bit the 20/call spread user also held its fifth slice open (U = 271k)
  // while writing: +38 B/user right after the writes (format2_memory_test).
  static constexpr double kDeferBelowGainBits = 0.5;
  // The overflow reserve: the part of the budget no admission (join, new
  // run, seal) may use. When the shares are spent even at b = 32, a write
  // must still be recorded (no false negatives): its items go to a run at
  // b = 32 past that run's capacity, 2^-32 of F each, and only there
  // (UserFilter::Record). Every admission leaves F <= A = budget - R, and
  // every live item costs a run at least 2^-32 (U <= 2^32), so by induction
  // over writes and drops
  //     F <= A + X * 2^-32,  X = live items written since F was last <= A
  //       <= A + N * 2^-32   (N = the user's live items),
  // and F <= budget for EVERY user with N <= R * 2^32, whatever the order,
  // batch sizes or ages of its writes. No format-2 filter can do better
  // than N <= budget * 2^32 (b <= 32: each fingerprint claims >= 2^-32), so
  // R is sized in items, not only as a fraction of the budget (1/1024 held
  // ~43,000 items at delta = 1% but 420 at 1e-4: F reached 1.00001e-4 at
  // 20,720 items of the ManyRuns pattern, tests/filter/small_delta_test):
  //     R = max(budget / 1024, min(kReservedItems * 2^-32,
  //                                budget * kMostReserveShare)).
  // Guaranteed items R * 2^32: 32,768 for 1.53e-5 <= delta <= 0.78%,
  // delta * 2^22 above (41,943 at 1%, where R is the 1/1024 it was: the
  // same bytes), delta * 2^31 below (2,147 at 1e-6, the least delta the
  // policy allows). Covering the Zipf pattern's 50,000-item user at 1%
  // would take R = 1.2e-5 > budget / 1024: +0.2 to +1 B/user in
  // memory_bench.
  static constexpr double kReserveShareFloor = 1.0 / 1024;
  static constexpr double kReservedItems = 32768;
  // Below delta ~ 1.53e-5 the reserve is half the budget: the runs still
  // get the other half, at most 1 bit per item more than with all of it
  // (a Rice-coded item costs log2(U / n) + 1.5 bits, and half the budget
  // doubles U), and the guarantee is budget * 2^31 items, half of what any
  // 32-bit fingerprint filter can hold at that delta (2,147 of 4,295 at
  // delta = 1e-6).
  static constexpr double kMostReserveShare = 0.5;

  // The FP budget left for runs beside legacy Bloom slices of rate
  // `legacy_fp`. If the legacy slices took (nearly) all of delta, runs
  // still get delta / 8: new writes must be recorded (no false negatives),
  // and the legacy slices age out within the window.
  static double Budget(double delta, double legacy_fp);
  // The overflow reserve R of a run budget (see kReservedItems).
  static double OverflowReserve(double budget);
  // Budget minus the overflow reserve: what joins, new runs and seals may
  // fill (the `budget` argument of the functions below).
  static double AdmissionBudget(double delta, double legacy_fp);
  // Live items up to which F <= Budget(delta, legacy_fp) holds by
  // construction: R * 2^32.
  static double GuaranteedItems(double delta, double legacy_fp);

  // Shape of a new open run for a user whose runs sum to `fp_now` and who
  // will hold `items_after` items with the write, `slice_items_after` of
  // them in the run's slice. capacity >= the write's items unless even
  // b = 32 cannot give it (budget exhausted: the caller then lets the run
  // exceed its share, see UserFilter::Record).
  // `first_run`: the user holds no run yet (kFirstRunItems applies, else
  // kGrowthExtraBits more).
  // `rate_expected` > 0 (RateExpectedItems: a write into the newest slice
  // of a user with at least a span of history): the run gets room for that
  // many items, at least the slice's, instead of 2 n_expected, and if
  // `older_sealed` (no other slice has an open run) kNewestShareOfLeft of
  // what is left instead of half.
  static OpenRunShape NewOpenRun(double budget, double fp_now,
                                 uint64_t slice_items_after,
                                 uint64_t items_after, int window_slices,
                                 bool first_run, double rate_expected = 0,
                                 bool older_sealed = false);
  // The newest slice's expected final count if the user's rate continues:
  //   n_s + (N / elapsed) * remaining,
  // N the user's live items (with the write) over `elapsed_ms` since its
  // first live event, `remaining_ms` until the slice's span ends. 0 (not
  // known) while the history is shorter than a span: a new user's first
  // sessions say little about its rate.
  static double RateExpectedItems(uint64_t slice_items_after,
                                  uint64_t items_after, int64_t elapsed_ms,
                                  int64_t remaining_ms, int64_t span_ms);

  // The slice's proportional universe: max(N_ref / budget, 2^kSealFloorLog2)
  // with N_ref = max(N_live, L * n_s), rounded up to kSealedUniverseQuantum.
  static double ProportionalUniverse(double budget, uint64_t slice_items,
                                     uint64_t live_items, int window_slices);
  // Universe to seal a slice of `slice_items` items (precision b_low at
  // least, all its runs) into, or 0 if no universe <= 2^b_low keeps F within
  // the budget. `fp_others`: F of every other run. The slice takes at most
  // `share_of_left` of what the other runs leave (kQuietShareOfLeft while
  // the user writes, kIdleShareOfLeft for an idle user).
  static uint64_t SealedUniverse(double budget, double fp_others,
                                 uint64_t slice_items, uint64_t live_items,
                                 int window_slices, int b_low,
                                 double share_of_left);
  // Whether a quiet slice should stay open rather than be sealed at `u`
  // now: the share-of-left cap, not its proportional share, set u (older
  // slices spent more than their share, or the window holds more slices
  // than L), and sealing would take less than kDeferBelowGainBits of
  // precision per item off its prefix runs (u > 2^(b_low - that)).
  static bool DefersSeal(uint64_t u, double proportional, int b_low);

  // The newest slice's open prefix run, once every older slice is sealed,
  // re-truncated to fewer bits (prefix_b'(h) = prefix_b(h) >> (b - b'):
  // exact, no false negative): the least b' with 2^b' >= N_pred / budget
  // (its proportional universe, N_pred = max(N + n_pred - n_s, L n_pred))
  // whose capacity at kNewestShareOfLeft of what the other runs leave
  // holds the slice's predicted count n_pred (RateExpectedItems). Returns
  // precision 0 if no b' < `precision` does. `fp_others`: F of every other
  // run. While it fills, the newest slice is the one prefix run of a
  // steady user (docs/format2-design.md, "Sizing policy", the newest
  // slice's run is re-truncated; "Known limits", a steady user): at 2^19 its
  // ~340 items cost ~12.1 bits each where the sealed slices cost ~10.7;
  // at 2^18, ~11.1, for F the budget then still has.
  static OpenRunShape LoweredNewestRun(double budget, double fp_others,
                                       uint64_t slice_items,
                                       uint64_t live_items,
                                       double predicted_items,
                                       int window_slices, int precision);

  // Whether `incoming` late items may join a sealed run of universe `u`
  // holding `run_items` (F = `fp_now` before): the slice keeps its
  // proportional share and F stays within the budget.
  static bool JoinsSealed(double budget, double fp_now, uint64_t u,
                          uint64_t run_items, uint64_t incoming,
                          uint64_t live_items_after, int window_slices);
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_RUN_SIZING_H_
