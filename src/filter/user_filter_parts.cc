// UserFilter as plain parts (filter_parts.h): ToParts for snapshots, Live's
// zero-copy view for GetFilter, and FromParts, which validates parts and
// builds the filter they describe.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "exposure_filter/filter_format.h"
#include "src/filter/run_sizing.h"
#include "src/filter/user_filter.h"
#include "src/filter/user_filter_internal.h"

namespace exposure_filter {

using user_filter_internal::LegacyFpRate;

FilterParts UserFilter::ToParts() const {
  FilterParts parts;
  if (h_ == nullptr) return parts;
  const Tables t = Decode();
  auto part = [&](int64_t index) -> SlicePart& {
    for (SlicePart& p : parts.slices) {
      if (p.index == index) return p;
    }
    parts.slices.emplace_back();
    parts.slices.back().index = index;
    parts.slices.back().min_event_ms = std::numeric_limits<int64_t>::max();
    parts.slices.back().max_event_ms = std::numeric_limits<int64_t>::min();
    return parts.slices.back();
  };
  if (t.legacy != nullptr) {
    for (const BloomSlices::Slice& s : t.legacy->slices.slices()) {
      SlicePart& p = part(s.index);
      p.min_event_ms = std::min(p.min_event_ms, s.min_event_ms);
      p.max_event_ms = std::max(p.max_event_ms, s.max_event_ms);
      for (const BloomSlices::Segment& seg : s.segments) {
        BloomSegment b(seg.num_blocks(), seg.k(), seg.capacity());
        b.Assign(seg.words(), seg.count());
        p.bloom_segments.push_back(std::move(b));
      }
    }
  }
  size_t k = 0;
  for (const SliceMeta& s : t.slices) {
    SlicePart& p = part(s.index);
    p.min_event_ms = std::min(p.min_event_ms, s.min_event_ms);
    p.max_event_ms = std::max(p.max_event_ms, s.max_event_ms);
    for (int j = 0; j < s.num_runs; ++j, ++k) {
      const RunMeta& r = t.runs[k];
      RunPart rp;
      if (j + 1 < s.num_runs && t.runs[k + 1].tail) {
        // A tail is how writes are stored, not part of the filter: parts
        // (snapshots, GetFilter) hold it merged into its main run, which
        // has the pair's capacity.
        std::vector<uint32_t> a, b;
        View(r).AppendFingerprints(&a);
        View(t.runs[k + 1]).AppendFingerprints(&b);
        // Same (b, U) and fingerprints < U: FromFingerprints cannot fail.
        rp.run = *FingerprintRun::FromFingerprints(Union(a, b), r.precision,
                                                   r.universe);
        ++j;
        ++k;
      } else {
        // CopyOf only fails for shapes Rebuild never stores.
        rp.run = *FingerprintRun::CopyOf(View(r));
      }
      rp.capacity = std::max(r.capacity, rp.run.count());
      rp.open = r.open;
      p.runs.push_back(std::move(rp));
    }
  }
  std::sort(
      parts.slices.begin(), parts.slices.end(),
      [](const SlicePart& a, const SlicePart& b) { return a.index < b.index; });
  return parts;
}

UserFilter::LiveSlices UserFilter::Live(const FilterPolicy& policy,
                                        int64_t now_ms) const {
  LiveSlices live;
  if (h_ == nullptr) return live;
  const Tables t = Decode();
  // The same slice may hold legacy segments and runs (ToParts's part()).
  auto slice = [&](int64_t index) -> LiveSlice& {
    for (LiveSlice& s : live) {
      if (s.index == index) return s;
    }
    live.emplace_back();
    live.back().index = index;
    return live.back();
  };
  if (t.legacy != nullptr) {
    for (const BloomSlices::Slice& s : t.legacy->slices.slices()) {
      if (!policy.SliceLive(s.index, now_ms)) continue;
      LiveSlice& l = slice(s.index);
      for (const BloomSlices::Segment& seg : s.segments) {
        l.bloom_segments.push_back(seg);
      }
    }
  }
  size_t k = 0;
  for (const SliceMeta& s : t.slices) {
    if (!policy.SliceLive(s.index, now_ms)) {
      k += s.num_runs;
      continue;
    }
    LiveSlice& l = slice(s.index);
    for (int j = 0; j < s.num_runs; ++j, ++k) {
      LiveRun run{View(t.runs[k]), {}};
      if (j + 1 < s.num_runs && t.runs[k + 1].tail) {
        run.tail = View(t.runs[k + 1]);
        ++j;
        ++k;
      }
      l.runs.push_back(run);
    }
  }
  std::sort(
      live.begin(), live.end(),
      [](const LiveSlice& a, const LiveSlice& b) { return a.index < b.index; });
  return live;
}

absl::StatusOr<UserFilter> UserFilter::FromParts(const FilterPolicy& policy,
                                                 FilterParts parts,
                                                 absl::string_view key) {
  constexpr uint32_t kMaxBlocks = uint32_t{1} << 26;  // the format's limit
  if (parts.slices.size() > kMaxPartsSlices) {
    return absl::InvalidArgumentError(
        absl::StrFormat("filter parts hold %d slices, at most %d allowed",
                        parts.slices.size(), kMaxPartsSlices));
  }
  auto legacy = std::make_unique<Legacy>();
  std::vector<SlicePlan> plan;
  double runs_fp = 0;
  uint64_t runs_items = 0;
  for (size_t i = 0; i < parts.slices.size(); ++i) {
    SlicePart& sp = parts.slices[i];
    if (i > 0 && sp.index <= parts.slices[i - 1].index) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "slice %d: index %d does not follow %d (ascending, distinct)", i,
          sp.index, parts.slices[i - 1].index));
    }
    if (sp.min_event_ms > sp.max_event_ms) {
      return absl::InvalidArgumentError(
          absl::StrFormat("slice %d: min_event_ms %d after max_event_ms %d", i,
                          sp.min_event_ms, sp.max_event_ms));
    }
    if (sp.bloom_segments.empty() && sp.runs.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "slice %d: neither bloom_segments nor runs (an empty slice)", i));
    }
    if (sp.bloom_segments.size() > FilterPolicy::kMaxSegmentsPerSlice) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "slice %d: bloom_segments holds %d segments, at most %d", i,
          sp.bloom_segments.size(), FilterPolicy::kMaxSegmentsPerSlice));
    }
    // Record keeps a slice within kMaxRunsPerSlice; a snapshot is read up
    // to the wire format's limit, so anything GetFilter could serve loads.
    if (sp.runs.size() > format::kMaxRunsPerSlice) {
      return absl::InvalidArgumentError(
          absl::StrFormat("slice %d: %d runs, at most %d", i, sp.runs.size(),
                          format::kMaxRunsPerSlice));
    }
    for (size_t j = 0; j < sp.bloom_segments.size(); ++j) {
      const BloomSegment& seg = sp.bloom_segments[j];
      if (seg.num_blocks() == 0 || seg.num_blocks() > kMaxBlocks ||
          seg.k() < 1 || seg.k() > 16 || seg.capacity() == 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "slice %d segment %d: num_blocks %d (1..2^26), k %d (1..16), "
            "capacity %d (>= 1)",
            i, j, seg.num_blocks(), seg.k(), seg.capacity()));
      }
    }
    SlicePlan s;
    s.meta.index = sp.index;
    s.meta.min_event_ms = sp.min_event_ms;
    s.meta.max_event_ms = sp.max_event_ms;
    // A loaded slice counts as quiet: it may be sealed by the next write.
    s.meta.quiet = RunSizing::kQuietWrites;
    for (size_t j = 0; j < sp.runs.size(); ++j) {
      const RunPart& rp = sp.runs[j];
      const FingerprintRun& run = rp.run;
      if (run.count() == 0 || rp.capacity < run.count() ||
          rp.capacity > run.universe()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "slice %d run %d: count %d, capacity %d, universe %d (need 1 <= "
            "count <= capacity <= universe)",
            i, j, run.count(), rp.capacity, run.universe()));
      }
      if (rp.open && run.universe() != uint64_t{1} << run.precision()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "slice %d run %d: open but universe %d is not 2^%d (open runs "
            "are prefix runs)",
            i, j, run.universe(), run.precision()));
      }
      RunPlan r;
      r.meta.count = run.count();
      r.meta.capacity = rp.capacity;
      r.meta.universe = run.universe();
      r.meta.precision = static_cast<uint8_t>(run.precision());
      r.meta.rice_k = static_cast<uint8_t>(run.rice_k());
      r.meta.payload_bits = run.payload_bits();
      r.meta.open = rp.open;
      r.fps = run.Fingerprints();
      r.meta.weight = Weight(r.fps, r.meta.precision, r.meta.universe);
      runs_fp += r.meta.fp();
      runs_items += r.meta.count;
      s.runs.push_back(std::move(r));
    }
    if (!sp.runs.empty()) plan.push_back(std::move(s));
    if (!sp.bloom_segments.empty()) {
      BloomSlices::SliceData data;
      data.index = sp.index;
      data.min_event_ms = sp.min_event_ms;
      data.max_event_ms = sp.max_event_ms;
      data.segments = std::move(sp.bloom_segments);
      if (!legacy->slices.AppendSlice(std::move(data))) {
        return absl::InvalidArgumentError(
            absl::StrFormat("slice %d: the Bloom tables cannot hold it", i));
      }
    }
  }
  Legacy* kept = nullptr;
  if (!legacy->slices.slices().empty()) {
    legacy->fp = LegacyFpRate(legacy->slices);
    kept = legacy.get();
  }
  // A legacy-only filter was valid under format 1's own budget; runs must
  // fit what RunSizing leaves them: the budget, or for a user past
  // RunSizing::GuaranteedItems what Record keeps, A + N * 2^-32 (the
  // overflow reserve's bound). Refusing it would refuse the whole snapshot
  // (a restart must lose nothing); every item costs >= 2^-32, so a run set
  // that spends more than that per item beyond A is still refused.
  const double legacy_fp = kept ? kept->fp : 0;
  const double budget =
      std::max(RunSizing::Budget(policy.fp_rate(), legacy_fp),
               RunSizing::AdmissionBudget(policy.fp_rate(), legacy_fp) +
                   std::ldexp(static_cast<double>(runs_items),
                              -RunSizing::kMaxPrecision));
  if (runs_fp > budget * (1 + 1e-9)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "runs' union bound %.6g exceeds the FP budget %.6g (delta %g)", runs_fp,
        budget, policy.fp_rate()));
  }
  UserFilter f;
  f.Rebuild(plan, kept, key);
  if (kept != nullptr) legacy.release();  // the filter owns it now
  return f;
}

}  // namespace exposure_filter
