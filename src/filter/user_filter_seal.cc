// Sealing UserFilter's slices (run_sizing.h): a quiet slice's open runs,
// or an idle user's, re-encoded as one sealed run at the slice's share of
// the budget, and the newest slice's open run re-truncated once every older
// slice is sealed.
#include <algorithm>
#include <cmath>
#include <vector>

#include "src/filter/run_sizing.h"
#include "src/filter/user_filter.h"
#include "src/filter/user_filter_internal.h"

namespace exposure_filter {

using user_filter_internal::FirstLiveEventMs;
using user_filter_internal::OlderSlicesSealed;

std::vector<uint32_t> UserFilter::RemapRuns(const UserFilter& f,
                                            const RunPlans& runs, int b,
                                            uint64_t u) {
  std::vector<uint32_t> out, fps;
  for (const RunPlan& r : runs) {
    fps = f.Fingerprints(r);
    const bool same = r.meta.precision == b && r.meta.universe == u;
    if (!same) {
      // A prefix run (U = 2^b_r, b_r >= b): its fingerprint is prefix_b_r(h);
      // prefix_b(h) = that >> (b_r - b), and fp = (prefix_b(h) * u) >> b
      // exactly as FingerprintRun::Fingerprint(h, b, u). Monotone: stays
      // sorted.
      const int shift = r.meta.precision - b;
      for (uint32_t& x : fps) {
        x = static_cast<uint32_t>((uint64_t{x >> shift} * u) >> b);
      }
    }
    out.insert(out.end(), fps.begin(), fps.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void UserFilter::SealQuiet(const FilterPolicy& policy,
                           std::vector<SlicePlan>& plan, double budget,
                           bool idle, bool newest_ended) const {
  if (!(idle && newest_ended) && plan.size() < 2) return;
  double fp_all = 0;
  uint64_t live_items = 0;
  for (const SlicePlan& s : plan) {
    for (const RunPlan& r : s.runs) {
      fp_all += r.meta.fp();
      live_items += r.meta.count;
    }
  }
  // The proportional share counts the L + 1 slices the window holds while
  // a slice fills (L spans plus the partial newest): a steady user's 29
  // days cover 7 slice indices, and at L the older slices' seals left the
  // last ones half of a thin rest (docs/format2-design.md, "Sizing
  // policy", quiet slices; "Measured and rejected", seals at L + 1
  // slices). Its spare F goes to the newest slice (LowerNewestRun).
  const int window = std::max(1, policy.max_live_slices());
  // An idle user's newest slice is sealed too once its span has ended: its
  // open run's share (half of what was left) and spare precision are then
  // paid for nothing. Before that, a seal at the count of its first sessions
  // fragments it (SealIdle).
  const size_t last = idle && newest_ended ? plan.size() : plan.size() - 1;
  for (size_t i = 0; i < last; ++i) {
    SlicePlan& s = plan[i];
    if (!idle && s.meta.quiet < RunSizing::kQuietWrites) continue;
    RunPlans prefix;
    RunPlan* sealed = nullptr;
    double fp_slice = 0;
    for (RunPlan& r : s.runs) {
      fp_slice += r.meta.fp();
      if (!r.meta.open && sealed == nullptr) sealed = &r;
    }
    uint64_t n_pre = 0;
    int b_low = RunSizing::kMaxPrecision;
    bool any_open = false;
    for (const RunPlan& r : s.runs) {
      if (&r == sealed) continue;
      if (!r.meta.open) continue;  // a second sealed run stays as it is
      any_open = true;
      n_pre += r.meta.count;
      b_low = std::min<int>(b_low, r.meta.precision);
    }
    if (!any_open) continue;
    const double fp_others = fp_all - fp_slice;
    const RunPlans original = s.runs;  // if the seal is refused
    RunPlans keep;
    for (RunPlan& r : s.runs) {
      if (r.meta.open) {
        prefix.push_back(std::move(r));
      } else {
        keep.push_back(std::move(r));
      }
    }
    sealed = keep.empty() ? nullptr : &keep.front();
    double fp_kept = 0;
    for (const RunPlan& r : keep) fp_kept += r.meta.fp();
    // Only the sealed run's meta and codes until it is kept: a RunPlan here
    // (its optional<RunSplice> never engaged) trips GCC 12's
    // -Wmaybe-uninitialized at -O1 (the sanitizer builds).
    RunMeta merged;
    std::vector<uint32_t> merged_fps;
    if (sealed != nullptr && sealed->meta.precision <= b_low &&
        RunSizing::JoinsSealed(budget, fp_others + fp_kept,
                               sealed->meta.universe, sealed->meta.count, n_pre,
                               live_items, window)) {
      // Late items join the slice's sealed run at its universe.
      prefix.push_back(std::move(*sealed));
      merged = prefix.back().meta;
      keep.erase(keep.begin());
      fp_kept -= merged.fp();
    } else if (sealed == nullptr) {
      const uint64_t u = RunSizing::SealedUniverse(
          budget, fp_others, n_pre, live_items, window, b_low,
          idle ? RunSizing::kIdleShareOfLeft : RunSizing::kQuietShareOfLeft);
      const bool defer =
          !idle && RunSizing::DefersSeal(u,
                                         RunSizing::ProportionalUniverse(
                                             budget, n_pre, live_items, window),
                                         b_low);
      if (u == 0 || defer) {
        for (RunPlan& r : prefix) keep.push_back(std::move(r));
        s.runs = std::move(keep);
        continue;
      }
      merged.precision = static_cast<uint8_t>(b_low);
      merged.universe = u;
    } else {
      // Late items that may not join the sealed run stay in their own runs.
      for (RunPlan& r : prefix) keep.push_back(std::move(r));
      s.runs = std::move(keep);
      continue;
    }
    if (idle) {
      // The sweeper retries every pass, so first a cheap estimate: each item
      // of an open run drops b_r - log2(U) bits of precision (the Rice code
      // costs ~log2(U / n) + 1.5 bits per item). Only a promising seal is
      // re-encoded, O(items), and checked exactly below.
      double gain = 0;
      for (const RunPlan& r : prefix) {
        if (!r.meta.open) continue;
        gain += static_cast<double>(r.meta.count) *
                (r.meta.precision -
                 std::log2(static_cast<double>(merged.universe)));
      }
      if (gain < static_cast<double>(RunSizing::kIdleSealMinGainBits)) {
        s.runs = original;
        continue;
      }
    }
    merged.open = false;
    merged_fps = RemapRuns(*this, prefix, merged.precision, merged.universe);
    merged.count = static_cast<uint32_t>(merged_fps.size());
    merged.capacity = merged.count;
    merged.weight = Weight(merged_fps, merged.precision, merged.universe);
    // The exact rate of the sealed run (its weight), not n / U, decides.
    if (fp_others + fp_kept + merged.fp() > budget) {
      s.runs = original;
      continue;
    }
    if (idle) {
      // Sealing for memory only: kept only if the codes shrink by more than
      // a sealed run's extra table bytes (U - 1, weight - count).
      uint64_t old_bits = 0;
      for (const RunPlan& r : prefix) old_bits += r.meta.payload_bits;
      const uint64_t new_bits =
          RiceCode::Choose(merged_fps, merged.universe).bits;
      if (new_bits + RunSizing::kIdleSealMinGainBits > old_bits) {
        s.runs = original;
        continue;
      }
    }
    fp_all = fp_all - fp_slice + fp_kept + merged.fp();
    RunPlan sealed_plan;
    sealed_plan.meta = merged;
    sealed_plan.fps = std::move(merged_fps);
    keep.insert(keep.begin(), std::move(sealed_plan));
    s.runs = std::move(keep);
  }
}

void UserFilter::LowerNewestRun(const FilterPolicy& policy,
                                std::vector<SlicePlan>& plan, double budget,
                                int64_t event_ms) const {
  if (!OlderSlicesSealed(plan)) return;  // an older slice still fills
  SlicePlan& newest = plan.back();
  size_t open = newest.runs.size();
  uint64_t slice_items = 0;
  for (size_t j = 0; j < newest.runs.size(); ++j) {
    const RunMeta& r = newest.runs[j].meta;
    slice_items += r.count;
    if (r.tail) continue;
    // One open run (and its tail): a sealed run or a second open run means
    // late items or a ladder, which this does not size.
    if (!r.open || open < newest.runs.size()) return;
    open = j;
  }
  if (open == newest.runs.size()) return;
  double fp = 0;
  uint64_t items = 0;
  const int64_t first_ms = FirstLiveEventMs(plan, event_ms);
  for (const SlicePlan& s : plan) {
    for (const RunPlan& r : s.runs) {
      fp += r.meta.fp();
      items += r.meta.count;
    }
  }
  const int b = newest.runs[open].meta.precision;
  const double predicted = RunSizing::RateExpectedItems(
      slice_items, items, event_ms - first_ms,
      policy.SliceEndMs(newest.meta.index) - event_ms, policy.slice_span_ms());
  // The open run and its tail are prefix runs at b: F = their count / 2^b.
  const double fp_others =
      fp - std::ldexp(static_cast<double>(slice_items), -b);
  const OpenRunShape shape = RunSizing::LoweredNewestRun(
      budget, fp_others, slice_items, items, predicted,
      std::max(1, policy.max_live_slices() - 1), b);
  if (shape.precision == 0 || shape.capacity < slice_items) return;
  MergeTail(newest, open);
  RunPlan& r = newest.runs[open];
  // prefix_b'(h) = prefix_b(h) >> (b - b'): every item stays claimed, and
  // items sharing the shorter prefix become one fingerprint.
  std::vector<uint32_t> fps = Fingerprints(r);
  for (uint32_t& x : fps) x >>= (b - shape.precision);
  fps.erase(std::unique(fps.begin(), fps.end()), fps.end());
  r.meta.precision = static_cast<uint8_t>(shape.precision);
  r.meta.universe = shape.universe;
  SetFingerprints(r, std::move(fps));
  r.meta.capacity = shape.capacity;
}

bool UserFilter::SealIdle(const FilterPolicy& policy, int64_t now_ms,
                          int64_t active_now_ms) {
  if (h_ == nullptr ||
      active_now_ms - last_active_ms() < RunSizing::kIdleSealMs) {
    return false;
  }
  Tables t = Decode();
  if (t.slices.empty()) return false;
  const bool newest_ended = policy.SliceEndMs(t.slices.back().index) <= now_ms;
  // Open runs the seal may take (runs are stored slice by slice): none is
  // the sweeper's common case, checked without planning.
  bool any_open = false;
  size_t run = 0;
  for (size_t i = 0; i < t.slices.size(); ++i) {
    const bool may_seal = i + 1 < t.slices.size() || newest_ended;
    for (int32_t j = 0; j < t.slices[i].num_runs; ++j, ++run) {
      any_open |= may_seal && t.runs[run].open;
    }
  }
  if (!any_open) return false;
  std::vector<SlicePlan> plan = Plan(t);
  const double budget =
      RunSizing::AdmissionBudget(policy.fp_rate(), t.legacy ? t.legacy->fp : 0);
  SealQuiet(policy, plan, budget, /*idle=*/true, newest_ended);
  bool changed = false;
  for (const SlicePlan& s : plan) {
    for (const RunPlan& r : s.runs) changed |= r.src == nullptr;
  }
  if (!changed) return false;
  Rebuild(plan, t.legacy, key());
  return true;
}

}  // namespace exposure_filter
