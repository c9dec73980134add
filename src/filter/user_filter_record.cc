// UserFilter's writes (user_filter.h, "Writes"): Record, which adds each new
// fingerprint to its slice's open run, its sealed run or a new run, and the
// run-plan operations it is built of (splicing into the open run, tails and
// their merge).
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <vector>

#include "src/filter/candidate_sort.h"
#include "src/filter/rice_model.h"
#include "src/filter/run_sizing.h"
#include "src/filter/user_filter.h"
#include "src/filter/user_filter_internal.h"

namespace exposure_filter {

namespace {

bool LegacySliceClaims(const BloomSlices::Slice& s, uint64_t h) {
  for (const BloomSlices::Segment& seg : s.segments) {
    if (seg.MayContain(h)) return true;
  }
  return false;
}

// Record's per-item buffers (malloc and free were ~9% of a RecordExposure's
// server CPU): on the stack up to kWriteInlineItems items, the common call
// (20 per user); larger calls allocate. Nothing is kept between calls, so a
// thread holds no memory for the largest call it once saw.
constexpr size_t kWriteInlineItems = 64;
struct WriteScratch {
  absl::InlinedVector<uint64_t, kWriteInlineItems> keys, incoming;
  absl::InlinedVector<uint8_t, kWriteInlineItems> fresh;
  absl::InlinedVector<uint32_t, kWriteInlineItems> open_fps, run_fps;
  absl::InlinedVector<SplicePoint, kWriteInlineItems> open_at, run_at;
};
// SortKeysByHashPrefix's buffer, per thread for calls of up to
// kWriteInlineItems keys (at most 512 bytes kept per thread).
std::vector<uint64_t>& ThreadSortScratch() {
  thread_local std::vector<uint64_t> s;
  return s;
}

}  // namespace

using user_filter_internal::FirstLiveEventMs;
using user_filter_internal::OlderSlicesSealed;

uint64_t UserFilter::Weight(const std::vector<uint32_t>& fps, int b,
                            uint64_t u) {
  const uint64_t full = uint64_t{1} << b;
  if (u == full) return fps.size();
  // Prefixes x in [0, 2^b) with floor(x u / 2^b) = f: x from ceil(f 2^b / u)
  // to ceil((f + 1) 2^b / u) - 1. f < u <= 2^32 and 2^b <= 2^32: no overflow.
  uint64_t w = 0;
  for (uint32_t f : fps) {
    w += ((uint64_t{f} + 1) * full + u - 1) / u -
         (uint64_t{f} * full + u - 1) / u;
  }
  return w;
}

std::vector<uint32_t> UserFilter::Fingerprints(const RunPlan& r) const {
  if (r.splice) {
    std::vector<uint32_t> fps;
    r.splice->run().AppendFingerprints(&fps);
    return Union(fps, r.splice->added());
  }
  if (r.src == nullptr) return r.fps;
  std::vector<uint32_t> fps;
  View(r.meta).AppendFingerprints(&fps);
  return fps;
}

std::vector<uint32_t> UserFilter::Union(const std::vector<uint32_t>& a,
                                        const std::vector<uint32_t>& b) {
  std::vector<uint32_t> all;
  all.reserve(a.size() + b.size());
  std::set_union(a.begin(), a.end(), b.begin(), b.end(),
                 std::back_inserter(all));
  return all;
}

void UserFilter::SetFingerprints(RunPlan& r, std::vector<uint32_t> fps) {
  // Open runs are prefix runs: weight = count (RunMeta::weight). Kept
  // current so that SealQuiet, later in the same write, sums the true F.
  r.src = nullptr;
  r.splice.reset();
  r.meta.count = static_cast<uint32_t>(fps.size());
  r.meta.weight = r.meta.count;
  r.fps = std::move(fps);
}

void UserFilter::AddToOpen(RunPlan& r, std::vector<uint32_t> add,
                           std::vector<SplicePoint> at) const {
  const uint64_t n = r.meta.count + add.size();
  // Splice while the union's canonical k is the run's: k moves about once
  // per doubling of n (2^k ~ U ln(phi) / n), then one full re-encode.
  if (r.src != nullptr && CanonicalRiceK(n, r.meta.universe) == r.meta.rice_k) {
    RunSplice splice =
        at.size() == add.size()
            ? RunSplice(View(r.meta), std::move(add), std::move(at))
            : RunSplice(View(r.meta), std::move(add));
    r.src = nullptr;
    r.meta.count = static_cast<uint32_t>(n);
    r.meta.weight = n;  // a prefix run
    r.meta.payload_bits = static_cast<uint32_t>(splice.bits());
    r.splice = std::move(splice);
    return;
  }
  SetFingerprints(r, Union(Fingerprints(r), add));
}

bool UserFilter::JoinOpen(SlicePlan& slice, size_t open,
                          std::vector<uint32_t> add, double fp, double budget,
                          uint64_t* added, std::vector<SplicePoint> at) const {
  RunPlan& main = slice.runs[open];
  RunPlan* tail = open + 1 < slice.runs.size() && slice.runs[open + 1].meta.tail
                      ? &slice.runs[open + 1]
                      : nullptr;
  const uint64_t tail_count = tail == nullptr ? 0 : tail->meta.count;
  // Record passes only items no run of the slice claims, so `add` is
  // disjoint from the main run and its tail: the run grows by add.size()
  // and F by add.size() / 2^b.
  const uint64_t n_new = add.size();
  if (main.meta.count + tail_count + n_new > main.meta.capacity) return false;
  if (fp + std::ldexp(static_cast<double>(n_new), -main.meta.precision) >
      budget) {
    return false;
  }
  *added = n_new;
  if (tail == nullptr && main.meta.count < kTailFromItems) {
    AddToOpen(main, std::move(add), std::move(at));
    return true;
  }
  if (tail_count + n_new >
      std::max<uint64_t>(kTailMinItems, main.meta.count / kTailFraction)) {
    // Merge: re-encodes main + tail, at most kTailFraction + 1 codes per
    // item the tail took since the last merge.
    std::vector<uint32_t> tail_fps = Union(
        tail == nullptr ? std::vector<uint32_t>{} : Fingerprints(*tail), add);
    SetFingerprints(main, Union(Fingerprints(main), tail_fps));
    if (tail != nullptr) SetFingerprints(*tail, {});  // Rebuild drops it
    return true;
  }
  if (tail != nullptr) {
    AddToOpen(*tail, std::move(add));
    tail->meta.capacity = 0;  // = count (Rebuild)
    return true;
  }
  RunPlan t;
  t.meta.precision = main.meta.precision;
  t.meta.universe = main.meta.universe;
  t.meta.open = true;
  t.meta.tail = true;
  SetFingerprints(t, std::move(add));
  slice.runs.insert(slice.runs.begin() + open + 1, std::move(t));
  return true;
}

void UserFilter::MergeTail(SlicePlan& slice, size_t open) const {
  if (open + 1 >= slice.runs.size() || !slice.runs[open + 1].meta.tail) return;
  RunPlan& tail = slice.runs[open + 1];
  RunPlan& main = slice.runs[open];
  SetFingerprints(main, Union(Fingerprints(main), Fingerprints(tail)));
  SetFingerprints(tail, {});  // Rebuild drops it
}

uint64_t UserFilter::Record(const FilterPolicy& policy,
                            absl::Span<const uint64_t> hashes,
                            int64_t event_ms) {
  if (hashes.empty()) return 0;
  Tables t = Decode();
  const BloomSlices* old = t.legacy == nullptr ? nullptr : &t.legacy->slices;
  int64_t index = policy.SliceIndexOf(event_ms);
  // At most max_live_slices slices exist once the aged ones are dropped
  // (the caller drops them first), unless the wall clock stepped back:
  // slices written before the step are then "in the future". The event
  // goes into the nearest newer slice, which outlives its own: remembered a
  // little longer, never shorter (docs/reliability.md).
  {
    // Inline: a live filter holds at most FilterPolicy::kMaxLiveSlices + 1.
    absl::InlinedVector<int64_t, 16> indices;
    for (const SliceMeta& s : t.slices) indices.push_back(s.index);
    if (old != nullptr) {
      for (const BloomSlices::Slice& s : old->slices()) {
        indices.push_back(s.index);
      }
    }
    std::sort(indices.begin(), indices.end());
    indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
    if (!std::binary_search(indices.begin(), indices.end(), index) &&
        static_cast<int>(indices.size()) >= policy.max_live_slices()) {
      auto newer = std::upper_bound(indices.begin(), indices.end(), index);
      if (newer != indices.end()) index = *newer;
    }
  }
  std::vector<SlicePlan> plan = Plan(t);
  size_t pos = 0;
  while (pos < plan.size() && plan[pos].meta.index < index) ++pos;
  if (pos == plan.size() || plan[pos].meta.index != index) {
    SlicePlan s;
    s.meta.index = index;
    s.meta.min_event_ms = event_ms;
    s.meta.max_event_ms = event_ms;
    plan.insert(plan.begin() + pos, std::move(s));
  }
  // A slice is quiet once the user's writes have left it behind: a write
  // into the newest slice ages the older ones, but a write into an older
  // slice (a backfill, or a late event) shows the user still writes behind
  // the newest, in no order: every slice's count restarts, since any of them
  // may be written next (a backfill's slices are written in turn, and one
  // sealed early at a low universe could not take its later items).
  const bool behind = pos + 1 < plan.size();
  for (SlicePlan& s : plan) {
    if (behind) {
      s.meta.quiet = 0;
    } else if (s.meta.quiet < 255) {
      ++s.meta.quiet;
    }
  }
  SlicePlan& slice = plan[pos];
  slice.meta.quiet = 0;
  slice.meta.min_event_ms = std::min(slice.meta.min_event_ms, event_ms);
  slice.meta.max_event_ms = std::max(slice.meta.max_event_ms, event_ms);

  // The items the slice does not claim yet: one sort, one merge per run.
  WriteScratch ws;
  // The loops below index raw pointers: an InlinedVector's operator[]
  // checks where its elements live on every access.
  auto& keys = ws.keys;
  keys.resize(hashes.size());
  uint64_t* key_at = keys.data();
  for (size_t i = 0; i < hashes.size(); ++i) {
    key_at[i] = FingerprintRun::SortKey(hashes[i], static_cast<uint32_t>(i));
  }
  std::vector<uint64_t> sort_buffer;
  SortKeysByHashPrefix(absl::MakeSpan(keys), keys.size() <= kWriteInlineItems
                                                 ? ThreadSortScratch()
                                                 : sort_buffer);
  auto& fresh = ws.fresh;
  fresh.assign(hashes.size(), 1);
  uint8_t* fresh_at = fresh.data();
  // The newest open run (a tail follows its main run) is where fresh items
  // go: its walk both checks the keys and finds where each would be
  // spliced in (LocateInRun), so a write walks that run once.
  size_t open = slice.runs.size();
  for (size_t j = 0; j < slice.runs.size(); ++j) {
    if (slice.runs[j].meta.open && !slice.runs[j].meta.tail) open = j;
  }
  auto& open_fps = ws.open_fps;  // the keys' fingerprints in the open run
  auto& open_at = ws.open_at;
  // Every run of the slice: LocateInRun's walk (a tight decode merge, or
  // whole words of codes at a time for few keys against a long run), its
  // points kept for the open run.
  for (size_t j = 0; j < slice.runs.size(); ++j) {
    const RunMeta& r = slice.runs[j].meta;
    auto& fps = j == open ? open_fps : ws.run_fps;
    auto& at = j == open ? open_at : ws.run_at;
    fps.resize(keys.size());
    at.resize(keys.size());
    uint32_t* fp = fps.data();
    SplicePoint* point = at.data();
    for (size_t i = 0; i < keys.size(); ++i) {
      fp[i] = FingerprintRun::Fingerprint(key_at[i], r.precision, r.universe);
    }
    LocateInRun(View(r), absl::MakeConstSpan(fp, keys.size()), point);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (point[i].Claims(r.count, fp[i])) {
        fresh_at[static_cast<uint32_t>(key_at[i])] = 0;
      }
    }
  }
  if (old != nullptr) {
    for (const BloomSlices::Slice& s : old->slices()) {
      if (s.index != index) continue;
      for (size_t i = 0; i < hashes.size(); ++i) {
        if (fresh[i] && LegacySliceClaims(s, hashes[i])) fresh[i] = 0;
      }
    }
  }
  auto& incoming = ws.incoming;  // ascending by top 32 bits
  // The fresh items' distinct fingerprints in the open run and where they
  // go: what JoinOpen adds to it (the same values as `fingerprints` below).
  std::vector<uint32_t> open_add;
  std::vector<SplicePoint> open_add_at;
  const bool has_open = open < slice.runs.size();
  for (size_t j = 0; j < keys.size(); ++j) {
    const uint32_t i = static_cast<uint32_t>(key_at[j]);
    if (!fresh_at[i]) continue;
    if (incoming.empty() && has_open) {  // the first fresh item: size once
      open_add.reserve(keys.size() - j);
      open_add_at.reserve(keys.size() - j);
    }
    incoming.push_back(hashes[i]);
    if (has_open && (open_add.empty() || open_add.back() != open_fps[j])) {
      open_add.push_back(open_fps[j]);
      open_add_at.push_back(open_at[j]);
    }
  }

  uint64_t added = 0;
  if (!incoming.empty()) {
    const double budget = RunSizing::AdmissionBudget(
        policy.fp_rate(), t.legacy ? t.legacy->fp : 0);
    double fp = 0;
    uint64_t items = 0;
    for (const SlicePlan& s : plan) {
      for (const RunPlan& r : s.runs) {
        fp += r.meta.fp();
        items += r.meta.count;
      }
    }
    const uint64_t m = incoming.size();
    const int window = std::max(1, policy.max_live_slices() - 1);
    // Fingerprints of `incoming` at (b, u), ascending distinct.
    auto fingerprints = [&](int b, uint64_t u) {
      std::vector<uint32_t> f(m);
      for (size_t i = 0; i < m; ++i) {
        f[i] = FingerprintRun::Fingerprint(incoming[i], b, u);
      }
      f.erase(std::unique(f.begin(), f.end()), f.end());
      return f;
    };
    // The first sealed run (`open`, an index into slice.runs, which
    // JoinOpen may grow, is above).
    RunPlan* sealed = nullptr;
    for (RunPlan& r : slice.runs) {
      if (!r.meta.open) {
        sealed = &r;
        break;
      }
    }
    // Joins the sealed run if it stays within budget (it has no capacity:
    // JoinsSealed decided the share).
    auto join_sealed = [&](RunPlan* target) {
      std::vector<uint32_t> add =
          fingerprints(target->meta.precision, target->meta.universe);
      std::vector<uint32_t> all = Union(Fingerprints(*target), add);
      const uint64_t n_new = all.size() - target->meta.count;
      const uint64_t weight =
          Weight(all, target->meta.precision, target->meta.universe);
      if (fp - target->meta.fp() +
              std::ldexp(static_cast<double>(weight), -target->meta.precision) >
          budget) {
        return false;
      }
      target->src = nullptr;
      target->meta.count = static_cast<uint32_t>(all.size());
      target->meta.weight = weight;
      target->meta.capacity = 0;  // = count (Rebuild)
      target->fps = std::move(all);
      added = n_new;
      return true;
    };
    bool done = false;
    if (open < slice.runs.size()) {
      done = JoinOpen(slice, open, std::move(open_add), fp, budget, &added,
                      std::move(open_add_at));
    }
    if (!done && sealed != nullptr &&
        RunSizing::JoinsSealed(budget, fp, sealed->meta.universe,
                               sealed->meta.count, m, items + m, window)) {
      done = join_sealed(sealed);
    }
    // At the cap (kMaxRunsPerSlice), the overflow run: the slice's most
    // precise open run if it is at b = 32, else a new one at b = 32 (the
    // slice's one run past the cap: later writes join it).
    bool overflow_run = false;
    if (!done && slice.runs.size() >= kMaxRunsPerSlice) {
      // The items join the overflow run past its capacity: no false
      // negative, F grows by m / 2^32, which the overflow reserve covers
      // (RunSizing::kReservedItems). Every overflow item costs exactly
      // 2^-32: a less precise run would spend the reserve faster than the
      // bound R * 2^32 items assumes.
      size_t best = slice.runs.size();
      for (size_t i = 0; i < slice.runs.size(); ++i) {
        const RunMeta& r = slice.runs[i].meta;
        if (r.open && !r.tail &&
            (best == slice.runs.size() ||
             r.precision > slice.runs[best].meta.precision)) {
          best = i;
        }
      }
      if (best < slice.runs.size() &&
          slice.runs[best].meta.precision == RunSizing::kMaxPrecision) {
        slice.runs[best].meta.capacity = std::numeric_limits<uint32_t>::max();
        const RunMeta& o = slice.runs[best].meta;
        done = JoinOpen(slice, best, fingerprints(o.precision, o.universe), fp,
                        std::numeric_limits<double>::infinity(), &added);
        // JoinOpen may have inserted a tail after it (no reference kept
        // across that); the run's capacity covers it and its tail exactly.
        uint32_t held = slice.runs[best].meta.count;
        if (best + 1 < slice.runs.size() && slice.runs[best + 1].meta.tail) {
          held += slice.runs[best + 1].meta.count;
        }
        slice.runs[best].meta.capacity = held;
      } else {
        overflow_run = true;
      }
    }
    if (!done) {
      // The slice outgrew its open run: the run keeps its items, its tail
      // with them (only the newest open run has one).
      if (open < slice.runs.size()) MergeTail(slice, open);
      uint64_t slice_items = 0;
      for (const RunPlan& r : slice.runs) slice_items += r.meta.count;
      // The newest slice: its final count from the user's rate over its
      // live history (RunSizing::RateExpectedItems); its run may take more
      // of what is left once no older slice is open.
      double rate_expected = 0;
      const bool older_sealed = OlderSlicesSealed(plan);
      if (items > 0 && pos + 1 == plan.size()) {
        const int64_t first_ms = FirstLiveEventMs(plan, event_ms);
        rate_expected = RunSizing::RateExpectedItems(
            slice_items + m, items + m, event_ms - first_ms,
            policy.SliceEndMs(index) - event_ms, policy.slice_span_ms());
      }
      OpenRunShape shape = RunSizing::NewOpenRun(
          budget, fp, slice_items + m, items + m, window,
          /*first_run=*/items == 0, rate_expected, older_sealed);
      if (overflow_run && shape.precision < RunSizing::kMaxPrecision) {
        // Its admitted share stays half of what is left; past that, the
        // reserve pays 2^-32 per item.
        shape.precision = RunSizing::kMaxPrecision;
        shape.universe = uint64_t{1} << RunSizing::kMaxPrecision;
        shape.capacity = static_cast<uint32_t>(
            std::min<double>(std::floor(std::max(0.0, (budget - fp) / 2) *
                                        static_cast<double>(shape.universe)),
                             static_cast<double>(UINT32_MAX)));
      }
      RunPlan r;
      r.meta.precision = static_cast<uint8_t>(shape.precision);
      r.meta.universe = shape.universe;
      r.meta.open = true;
      r.fps = fingerprints(shape.precision, shape.universe);
      r.meta.count = static_cast<uint32_t>(r.fps.size());
      r.meta.weight = r.meta.count;  // a prefix run
      // capacity >= m unless the admission budget is spent even at b = 32:
      // recording must not lose items, so the rest exceed it at 2^-32 each
      // (the overflow reserve, RunSizing::kReservedItems). Rebuild raises
      // capacity to the count.
      r.meta.capacity = shape.capacity;
      added = r.fps.size();
      slice.runs.push_back(std::move(r));
    }
    SealQuiet(policy, plan, budget, /*idle=*/false);
    if (pos + 1 == plan.size()) LowerNewestRun(policy, plan, budget, event_ms);
  }
  Rebuild(plan, t.legacy, key());
  return added;
}

}  // namespace exposure_filter
