#include "src/filter/run_sizing.h"

#include <algorithm>
#include <cmath>

namespace exposure_filter {

double RunSizing::Budget(double delta, double legacy_fp) {
  return std::max(delta - legacy_fp, delta / 8);
}

double RunSizing::OverflowReserve(double budget) {
  return std::max(budget * kReserveShareFloor,
                  std::min(std::ldexp(kReservedItems, -kMaxPrecision),
                           budget * kMostReserveShare));
}

double RunSizing::AdmissionBudget(double delta, double legacy_fp) {
  const double budget = Budget(delta, legacy_fp);
  return budget - OverflowReserve(budget);
}

double RunSizing::GuaranteedItems(double delta, double legacy_fp) {
  return std::ldexp(OverflowReserve(Budget(delta, legacy_fp)), kMaxPrecision);
}

OpenRunShape RunSizing::NewOpenRun(double budget, double fp_now,
                                   uint64_t slice_items_after,
                                   uint64_t items_after, int window_slices,
                                   bool first_run, double rate_expected,
                                   bool older_sealed) {
  OpenRunShape shape;
  // Half of what is left (kNewestShareOfLeft for the newest slice of a
  // steady user whose older slices are sealed): after j new runs without
  // sealing, F <= budget * (1 - (1 - share)^j) < budget.
  const double share_of_left =
      rate_expected > 0 && older_sealed ? kNewestShareOfLeft : 0.5;
  const double cap = (budget - fp_now) * share_of_left;
  // Room for 2 n_expected at share cap: 2^b >= 2 n_expected / cap; or, from
  // the user's rate, for the slice's expected final count.
  const double expected =
      std::max(static_cast<double>(slice_items_after),
               static_cast<double>(items_after) / std::max(1, window_slices));
  const double room =
      rate_expected > 0
          ? std::max(static_cast<double>(slice_items_after), rate_expected)
          : 2 * expected;
  const int b_first = std::max(
      1, static_cast<int>(std::ceil(std::log2(2 * kFirstRunItems / budget))));
  int b = first_run ? b_first : b_first + kGrowthExtraBits;
  if (cap > 0) {
    const double need = std::log2(room / cap);
    if (need > b) b = static_cast<int>(std::ceil(need));
  } else {
    b = kMaxPrecision;
  }
  b = std::min(b, kMaxPrecision);
  shape.precision = b;
  shape.universe = uint64_t{1} << b;
  // The first run's low precision is for the light user; its items keep a
  // rate of 2^-b_first once sealed (a sealed run is only re-mapped down),
  // so it takes at most kFirstRunShare of the budget.
  double share = cap;
  if (first_run && b == b_first) {
    share = std::min(share, budget * kFirstRunShare);
  }
  const double capacity = cap > 0 ? std::floor(share * shape.universe) : 0;
  shape.capacity = static_cast<uint32_t>(
      std::min<double>(capacity, static_cast<double>(UINT32_MAX)));
  return shape;
}

double RunSizing::RateExpectedItems(uint64_t slice_items_after,
                                    uint64_t items_after, int64_t elapsed_ms,
                                    int64_t remaining_ms, int64_t span_ms) {
  if (elapsed_ms < span_ms || elapsed_ms <= 0) return 0;
  const double rate =
      static_cast<double>(items_after) / static_cast<double>(elapsed_ms);
  return static_cast<double>(slice_items_after) +
         rate * static_cast<double>(std::max<int64_t>(0, remaining_ms));
}

double RunSizing::ProportionalUniverse(double budget, uint64_t slice_items,
                                       uint64_t live_items, int window_slices) {
  const double n_ref =
      std::max(static_cast<double>(live_items),
               window_slices * static_cast<double>(slice_items));
  const double u = std::max(n_ref / budget, std::ldexp(1.0, kSealFloorLog2));
  return std::ceil(u / kSealedUniverseQuantum) * kSealedUniverseQuantum;
}

uint64_t RunSizing::SealedUniverse(double budget, double fp_others,
                                   uint64_t slice_items, uint64_t live_items,
                                   int window_slices, int b_low,
                                   double share_of_left) {
  const double n_s = static_cast<double>(slice_items);
  const double left = budget - fp_others;
  if (left <= 0) return 0;
  // Proportional share n_s / N_ref of the budget; never below the floor,
  // and never so small that the slice alone takes more than share_of_left
  // of what is left (then a later run still has room).
  double u = std::max(
      ProportionalUniverse(budget, slice_items, live_items, window_slices),
      n_s / (left * share_of_left));
  // Up to a multiple of kSealedUniverseQuantum: the tables store such a U
  // in one byte less (UserFilter), and the rate only falls (n_s / u).
  u = std::ceil(u / kSealedUniverseQuantum) * kSealedUniverseQuantum;
  const double u_max = std::ldexp(1.0, b_low);
  if (u > u_max) u = u_max;
  if (u < 2) u = 2;
  if (fp_others + n_s / u > budget) return 0;
  return static_cast<uint64_t>(u);
}

bool RunSizing::DefersSeal(uint64_t u, double proportional, int b_low) {
  return static_cast<double>(u) > proportional &&
         static_cast<double>(u) >
             std::ldexp(1.0, b_low) * std::exp2(-kDeferBelowGainBits);
}

OpenRunShape RunSizing::LoweredNewestRun(double budget, double fp_others,
                                         uint64_t slice_items,
                                         uint64_t live_items,
                                         double predicted_items,
                                         int window_slices, int precision) {
  OpenRunShape shape;
  const double n_s = static_cast<double>(slice_items);
  if (predicted_items <= 0 || budget <= 0) return shape;
  const double predicted = std::max(n_s, predicted_items);
  // The slice's proportional universe once it holds `predicted` items: the
  // seal would re-map the run no lower (ProportionalUniverse).
  const double n_ref =
      std::max(static_cast<double>(live_items) + predicted - n_s,
               window_slices * predicted);
  int b = std::max(1, static_cast<int>(std::ceil(std::log2(n_ref / budget))));
  // Room for the predicted count at kNewestShareOfLeft of what is left, as
  // NewOpenRun gives the newest slice: F <= fp_others + share * left.
  const double cap = (budget - fp_others) * kNewestShareOfLeft;
  if (cap <= 0) return shape;
  while (b < precision && std::floor(cap * std::ldexp(1.0, b)) < predicted) {
    ++b;
  }
  if (b >= precision) return shape;
  shape.precision = b;
  shape.universe = uint64_t{1} << b;
  shape.capacity = static_cast<uint32_t>(std::min<double>(
      std::floor(cap * std::ldexp(1.0, b)), static_cast<double>(UINT32_MAX)));
  return shape;
}

bool RunSizing::JoinsSealed(double budget, double fp_now, uint64_t u,
                            uint64_t run_items, uint64_t incoming,
                            uint64_t live_items_after, int window_slices) {
  const double n_s = static_cast<double>(run_items + incoming);
  const double n_ref =
      std::max(static_cast<double>(live_items_after), window_slices * n_s);
  return static_cast<double>(u) >= n_ref / budget &&
         fp_now + static_cast<double>(incoming) / static_cast<double>(u) <=
             budget;
}

}  // namespace exposure_filter
