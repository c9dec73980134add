#include "tools/golden/golden_vectors.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "exposure_filter/filter_view.h"
#include "exposure_filter/item_hash.h"
#include "src/filter/bloom_segment.h"
#include "src/filter/bloom_slices.h"
#include "src/filter/filter_encoder.h"
#include "src/filter/filter_parts.h"
#include "src/filter/filter_policy.h"
#include "src/filter/fingerprint_run.h"
#include "src/filter/user_filter.h"

namespace exposure_filter::golden {
namespace {

// 2026-11-22 00:00:00 UTC: every vector is encoded "at" this instant.
constexpr int64_t kNowMs = 1795392000000;
constexpr int64_t kDayMs = 24 * 3600 * 1000LL;

// SplitMix64 (Steele et al.): a fixed, portable sequence of ids, so the files
// do not depend on a standard library's random engines.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// One filter under construction, as the parts the encoder takes, with the
// candidates to answer (present and fresh items mixed).
struct Builder {
  explicit Builder(FilterPolicy p) : policy(std::move(p)) {}

  FilterPolicy policy;
  FilterParts parts;
  bool empty = false;  // encode as an unknown user (no parts at all)
  std::vector<Candidate> candidates;

  void AddId(uint64_t id) { candidates.push_back({false, id, "", false}); }
  void AddKey(std::string key) {
    candidates.push_back({true, 0, std::move(key), false});
  }
};

std::vector<uint64_t> HashIds(const std::vector<uint64_t>& ids) {
  std::vector<uint64_t> hashes;
  for (uint64_t id : ids) hashes.push_back(HashItemId(id));
  return hashes;
}
std::vector<uint64_t> HashKeys(const std::vector<std::string>& keys) {
  std::vector<uint64_t> hashes;
  for (const std::string& k : keys) hashes.push_back(HashItemKey(k));
  return hashes;
}

// A run of these item hashes at precision b and universe u, built by the
// server's FingerprintRun (a prefix run, u = 2^b, is "open": it can still be
// re-mapped; any other universe is a sealed run).
RunPart Run(const std::vector<uint64_t>& hashes, int b, uint64_t u) {
  RunPart r;
  r.run = *FingerprintRun::Build(hashes, b, u);
  r.capacity = r.run.count();
  r.open = u == (uint64_t{1} << b);
  return r;
}

// An empty slice `days_ago` days before kNowMs (by its events' time).
SlicePart SliceAt(const FilterPolicy& policy, int64_t event_ms) {
  SlicePart s;
  s.index = policy.SliceIndexOf(event_ms);
  s.min_event_ms = s.max_event_ms = event_ms;
  return s;
}

std::vector<uint64_t> RandomIds(uint64_t seed, int n) {
  SplitMix64 rng(seed);
  std::vector<uint64_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(rng.Next());
  return ids;
}

FilterPolicy Policy(double fp_rate, absl::Duration retention,
                    absl::Duration span) {
  FilterPolicyOptions o;
  o.fp_rate = fp_rate;
  o.retention = retention;
  o.slice_span = span;
  return *FilterPolicy::Create(o);
}

FilterPolicy DefaultPolicy() { return *FilterPolicy::Create({}); }

// Ids and keys that share no range with anything recorded.
void AddFreshIds(Builder* b, uint64_t seed, int n) {
  for (uint64_t id : RandomIds(seed, n)) b->AddId(id);
}

// Numeric edge cases every vector checks: zero, one, the sign bit, all ones.
void AddEdgeIds(Builder* b) {
  for (uint64_t id :
       {uint64_t{0}, uint64_t{1}, uint64_t{1} << 63, ~uint64_t{0}}) {
    b->AddId(id);
  }
}

// Keys whose lengths cross every length class of XXH3-64 a key can have (1-3,
// 4-8, 9-16, 17-128, 129-240, 241+), so a decoder's hash is exercised on all
// its paths. The empty key is not an item (the server rejects it, and so do
// the decoders), so no vector asks for an answer about it.
std::vector<std::string> KeysOfEveryLength(const std::string& prefix) {
  std::vector<std::string> keys;
  for (size_t len : {1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 33, 64, 100, 128, 129,
                     200, 240, 241, 256}) {
    std::string k = absl::StrCat(prefix, len, ":");
    while (k.size() < len) k.push_back(static_cast<char>('a' + k.size() % 26));
    k.resize(len);
    keys.push_back(std::move(k));
  }
  return keys;
}

Builder Empty() {
  Builder b(DefaultPolicy());
  b.empty = true;
  AddEdgeIds(&b);
  AddFreshIds(&b, 1, 20);
  b.AddKey("video:1");
  return b;
}

// The worked example: one slice, one open prefix run (b = 19, U = 2^19).
Builder Tiny() {
  Builder b(DefaultPolicy());
  SlicePart s = SliceAt(b.policy, kNowMs);
  std::vector<uint64_t> hashes = HashIds({1, 2, 3});
  hashes.push_back(HashItemKey("video:42"));
  s.runs.push_back(Run(hashes, 19, uint64_t{1} << 19));
  b.parts.slices.push_back(std::move(s));
  for (uint64_t id = 1; id <= 40; ++id) b.AddId(id);
  AddEdgeIds(&b);
  b.AddKey("video:42");
  b.AddKey("video:43");
  b.AddKey("1");  // id 1 was recorded, key "1" was not: distinct spaces
  return b;
}

Builder MultiSlice() {
  Builder b(DefaultPolicy());
  // Days ago, items and how the slice holds them: sealed runs over a
  // universe that is not a power of two (N_ref / delta), open prefix runs,
  // and one slice with a growth ladder of three runs; one slice is already
  // past the 30-day window (in the parts, but not encoded).
  const struct {
    int days_ago;
    int items;
    std::vector<std::pair<int, uint64_t>> runs;  // (b, U), items split evenly
  } slices[] = {
      {40, 50, {{19, uint64_t{1} << 19}}},
      {29, 1, {{17, 700000 / 8}}},
      {24, 2500, {{21, 1750000}}},
      {19,
       60,
       {{19, uint64_t{1} << 19},
        {21, uint64_t{1} << 21},
        {23, uint64_t{1} << 23}}},
      {14, 5, {{17, 131072}}},
      {9, 700, {{20, 700000}}},
      {4, 30, {{19, uint64_t{1} << 19}}},
      {0, 120, {{19, uint64_t{1} << 19}, {22, uint64_t{1} << 22}}},
  };
  uint64_t seed = 100;
  for (const auto& spec : slices) {
    const std::vector<uint64_t> ids = RandomIds(seed++, spec.items);
    SlicePart s = SliceAt(b.policy, kNowMs - spec.days_ago * kDayMs);
    const size_t per = (ids.size() + spec.runs.size() - 1) / spec.runs.size();
    for (size_t r = 0; r < spec.runs.size(); ++r) {
      const size_t from = std::min(ids.size(), r * per);
      const size_t to = std::min(ids.size(), from + per);
      s.runs.push_back(Run(HashIds({ids.begin() + from, ids.begin() + to}),
                           spec.runs[r].first, spec.runs[r].second));
    }
    b.parts.slices.push_back(std::move(s));
    for (size_t i = 0; i < ids.size() && i < 40; ++i) b.AddId(ids[i]);
  }
  AddEdgeIds(&b);
  AddFreshIds(&b, 2, 1000);
  return b;
}

// An upgraded user: slices recorded by the previous release's Bloom filter
// (BloomSlices::Record, the format-1 UserFilter unchanged, taken apart with
// ToParts), one grown to several segments, and newer slices holding runs.
// (UserFilter itself now records runs, so it cannot make the legacy part.)
Builder Mixed() {
  Builder b(DefaultPolicy());
  BloomSlices legacy;
  const std::vector<uint64_t> old_ids = RandomIds(200, 1500);
  for (size_t i = 0; i < old_ids.size(); ++i) {  // one at a time: grows
    const uint64_t h = HashItemId(old_ids[i]);
    legacy.Record(b.policy, {&h, 1},
                  kNowMs - 22 * kDayMs + static_cast<int64_t>(i));
  }
  const std::vector<uint64_t> mid_ids = RandomIds(201, 300);
  legacy.Record(b.policy, HashIds(mid_ids), kNowMs - 12 * kDayMs);
  b.parts = legacy.ToParts();
  const std::vector<uint64_t> new_ids = RandomIds(202, 400);
  SlicePart recent = SliceAt(b.policy, kNowMs - 6 * kDayMs);
  recent.runs.push_back(Run(HashIds(new_ids), 20, 400 * 7 * 100));
  b.parts.slices.push_back(std::move(recent));
  const std::vector<uint64_t> now_ids = RandomIds(203, 25);
  SlicePart open = SliceAt(b.policy, kNowMs);
  open.runs.push_back(Run(HashIds(now_ids), 19, uint64_t{1} << 19));
  b.parts.slices.push_back(std::move(open));
  for (const auto* ids : {&old_ids, &mid_ids, &new_ids, &now_ids}) {
    for (size_t i = 0; i < ids->size() && i < 40; ++i) b.AddId((*ids)[i]);
  }
  AddEdgeIds(&b);
  AddFreshIds(&b, 5, 1000);
  return b;
}

Builder StringKeys() {
  Builder b(DefaultPolicy());
  std::vector<std::string> now_keys = KeysOfEveryLength("k");
  for (int i = 0; i < 200; ++i) now_keys.push_back(absl::StrCat("video:", i));
  now_keys.push_back("\xe8\xa7\x86\xe9\xa2\x91:42");  // "视频:42" in UTF-8
  now_keys.push_back("\xc3\xa9mission/7");            // "émission/7"
  std::vector<std::string> old_keys;
  for (int i = 0; i < 100; ++i) old_keys.push_back(absl::StrCat("note:", i));
  SlicePart old_slice = SliceAt(b.policy, kNowMs - 10 * kDayMs);
  old_slice.runs.push_back(Run(HashKeys(old_keys), 19, 100 * 7 * 100));
  b.parts.slices.push_back(std::move(old_slice));
  std::vector<uint64_t> now_hashes = HashKeys(now_keys);
  now_hashes.push_back(HashItemId(7));
  SlicePart now_slice = SliceAt(b.policy, kNowMs);
  now_slice.runs.push_back(Run(now_hashes, 19, uint64_t{1} << 19));
  b.parts.slices.push_back(std::move(now_slice));
  for (const std::string& k : now_keys) b.AddKey(k);
  for (const std::string& k : old_keys) b.AddKey(k);
  for (const std::string& k : KeysOfEveryLength("fresh")) b.AddKey(k);
  for (int i = 200; i < 1200; ++i) b.AddKey(absl::StrCat("video:", i));
  b.AddKey("7");  // key "7" is not id 7
  b.AddId(7);
  return b;
}

// The largest filter a decoder must accept: 8 live slices; four of 8 legacy
// Bloom segments (every k 1..16, block counts that are not powers of two,
// one of 509 blocks, filled by the real BloomSegment::Add); one of 255 runs
// (precision 17..32, prefix and non-power-of-two universes); one run at the
// largest universe 2^32 with 5,000 items; one at U = 2^32 - 1; and one
// slice holding Bloom segments and runs at once (the format allows it).
Builder MaxGeometry() {
  // Retention 7 spans: ceil(7) + 1 = 8 slices live at once.
  Builder b(Policy(0.001, absl::Hours(24 * 7), absl::Hours(24)));
  const int64_t newest = b.policy.SliceIndexOf(kNowMs);
  SplitMix64 rng(3);
  auto bloom = [&](int g, uint32_t blocks) {
    const int k = 1 + g % 16;
    BloomSegment seg(blocks, k, /*capacity=*/blocks * 32);
    const int items = static_cast<int>(blocks) * 8 + g;
    for (int i = 0; i < items; ++i) {
      const uint64_t id = rng.Next();
      seg.Add(HashItemId(id));
      if (i < 3) b.AddId(id);
    }
    return seg;
  };
  auto run = [&](int items, int p, uint64_t u) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < items; ++i) ids.push_back(rng.Next());
    for (int i = 0; i < items && i < 3; ++i) b.AddId(ids[i]);
    return Run(HashIds(ids), p, u);
  };
  for (int s = 0; s < FilterPolicy::kMaxLiveSlices; ++s) {
    SlicePart slice;
    slice.index = newest - (FilterPolicy::kMaxLiveSlices - 1) + s;
    slice.min_event_ms = slice.max_event_ms =
        b.policy.SliceStartMs(slice.index);
    if (s < 4) {
      for (int j = 0; j < FilterPolicy::kMaxSegmentsPerSlice; ++j) {
        const int g = s * FilterPolicy::kMaxSegmentsPerSlice + j;
        slice.bloom_segments.push_back(
            bloom(g, g == 31 ? 509 : 1 + (g * 5) % 11));
      }
    } else if (s == 4) {
      for (int j = 0; j < 255; ++j) {
        const int p = 17 + j % 16;
        const uint64_t u =
            j % 2 == 0 ? uint64_t{1} << p : (uint64_t{1} << p) - 1 - j;
        slice.runs.push_back(run(1 + j % 4, p, u));
      }
    } else if (s == 5) {
      slice.runs.push_back(run(5000, 32, uint64_t{1} << 32));
    } else if (s == 6) {
      slice.runs.push_back(run(3, 32, (uint64_t{1} << 32) - 1));
    } else {
      slice.bloom_segments.push_back(bloom(40, 3));
      slice.bloom_segments.push_back(bloom(41, 5));
      slice.runs.push_back(run(100, 20, 1000003));
      slice.runs.push_back(run(10, 24, uint64_t{1} << 24));
    }
    b.parts.slices.push_back(std::move(slice));
  }
  AddEdgeIds(&b);
  AddFreshIds(&b, 4, 2000);
  for (int i = 0; i < 200; ++i) b.AddKey(absl::StrCat("item-", i));
  return b;
}

// The smallest shapes: precision 1 (U = 2, every item lands on 0 or 1),
// Rice k = 0 (a dense run: U = 256, 200 items), a sparse run at b = 32 with
// a large Rice k, and a one-item run.
Builder RunExtremes() {
  Builder b(DefaultPolicy());
  SplitMix64 rng(6);
  const struct {
    int days_ago;
    int items;
    int b;
    uint64_t u;
  } shapes[] = {{20, 1, 1, 2},
                {15, 200, 8, 256},
                {10, 2, 32, uint64_t{1} << 32},
                {5, 1, 19, uint64_t{1} << 19}};
  for (const auto& shape : shapes) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < shape.items; ++i) ids.push_back(rng.Next());
    SlicePart s = SliceAt(b.policy, kNowMs - shape.days_ago * kDayMs);
    s.runs.push_back(Run(HashIds(ids), shape.b, shape.u));
    b.parts.slices.push_back(std::move(s));
    for (size_t i = 0; i < ids.size() && i < 20; ++i) b.AddId(ids[i]);
  }
  AddEdgeIds(&b);
  AddFreshIds(&b, 7, 300);
  return b;
}

// The server-side answer for parts: a live slice claims an item if any of
// its Bloom segments (BloomSegment::MayContain) or runs
// (FingerprintRun::Contains) does.
bool PartsMayContain(const FilterParts& parts, const FilterPolicy& policy,
                     int64_t now_ms, uint64_t h) {
  for (const SlicePart& s : parts.slices) {
    if (!policy.SliceLive(s.index, now_ms)) continue;
    for (const BloomSegment& seg : s.bloom_segments) {
      if (seg.MayContain(h)) return true;
    }
    for (const RunPart& r : s.runs) {
      if (r.run.Contains(h)) return true;
    }
  }
  return false;
}

FilterParts CopyParts(const FilterParts& parts) {
  FilterParts copy;
  for (const SlicePart& s : parts.slices) {
    SlicePart c;
    c.index = s.index;
    c.min_event_ms = s.min_event_ms;
    c.max_event_ms = s.max_event_ms;
    for (const BloomSegment& seg : s.bloom_segments) {
      c.bloom_segments.push_back(seg);
    }
    for (const RunPart& r : s.runs) {
      c.runs.push_back(
          {*FingerprintRun::Parse(r.run.Serialize()), r.capacity, r.open});
    }
    copy.slices.push_back(std::move(c));
  }
  return copy;
}

absl::StatusOr<GoldenVector> Finish(std::string name, std::string description,
                                    Builder b) {
  GoldenVector v;
  v.name = std::move(name);
  v.description = std::move(description);
  const FilterParts* parts = b.empty ? nullptr : &b.parts;
  EncodeFilterParts(parts, b.policy, kNowMs, &v.filter);
  absl::StatusOr<FilterView> view = FilterView::Parse(v.filter);
  if (!view.ok()) {
    return absl::InternalError(
        absl::StrCat(v.name, ": ", view.status().ToString()));
  }
  // Where the in-memory filter accepts these parts, its answer (the
  // FilterRecalled path) must be the parts' answer too.
  std::optional<UserFilter> filter;
  if (parts != nullptr) {
    absl::StatusOr<UserFilter> f =
        UserFilter::FromParts(b.policy, CopyParts(*parts), "");
    if (f.ok()) filter = *std::move(f);
  }
  std::vector<uint64_t> hashes;
  for (Candidate& c : b.candidates) {
    const uint64_t h = c.is_key ? HashItemKey(c.key) : HashItemId(c.id);
    hashes.push_back(h);
    c.may_contain =
        parts != nullptr && PartsMayContain(*parts, b.policy, kNowMs, h);
    const std::string what = c.is_key ? absl::StrCat("key \"", c.key, "\"")
                                      : absl::StrCat("id ", c.id);
    if (filter.has_value() &&
        filter->MayContain(b.policy, kNowMs, h) != c.may_contain) {
      return absl::InternalError(absl::StrCat(
          v.name, ": UserFilter and its parts disagree on ", what));
    }
    if (view->MayContainHash(h) != c.may_contain) {
      return absl::InternalError(absl::StrCat(
          v.name, ": FilterView and the server disagree on ", what));
    }
  }
  std::vector<uint8_t> keep(hashes.size());
  view->KeepMaskHashes(hashes, keep.data());
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (keep[i] == b.candidates[i].may_contain) {
      return absl::InternalError(absl::StrCat(
          v.name, ": FilterView's batch mask disagrees on candidate ", i));
    }
  }
  v.candidates = std::move(b.candidates);
  return v;
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(static_cast<char>(c));  // UTF-8 passes through
    }
  }
  out.push_back('"');
  return out;
}

std::string Hex(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) absl::StrAppendFormat(&out, "%02x", c);
  return out;
}

}  // namespace

absl::StatusOr<std::vector<GoldenVector>> BuildGoldenVectors() {
  std::vector<GoldenVector> out;
  struct Spec {
    const char* name;
    const char* description;
    Builder (*build)();
  } specs[] = {
      {"empty", "unknown user: header and checksum only, nothing claimed",
       Empty},
      {"tiny",
       "ids 1, 2, 3 and key \"video:42\" recorded now: one slice, one open "
       "prefix run b = 19 (the worked example of docs/filter-format.md)",
       Tiny},
      {"multi_slice",
       "7 live 5-day slices of 1 to 2500 items in sealed and open runs, one "
       "slice with a ladder of 3 runs; a slice 40 days old is past the "
       "window and not encoded",
       MultiSlice},
      {"mixed",
       "an upgraded user: two legacy Bloom slices recorded by the previous "
       "release's filter (one grown to several segments) and two run slices",
       Mixed},
      {"string_keys",
       "string keys of every XXH3 length class (1-256 bytes) and UTF-8, in "
       "two run slices; id 7 recorded, key \"7\" not",
       StringKeys},
      {"max_geometry",
       "8 live 1-day slices: 4 x 8 Bloom segments (k = 1..16, up to 509 "
       "blocks), 255 runs in one slice, U = 2^32 and 2^32 - 1, a slice with "
       "segments and runs; fp target 0.001",
       MaxGeometry},
      {"run_extremes",
       "one run per slice: b = 1 (U = 2), Rice k = 0 (U = 256, 200 items), "
       "b = 32 with 2 items, a one-item run",
       RunExtremes},
  };
  for (const Spec& s : specs) {
    absl::StatusOr<GoldenVector> v = Finish(s.name, s.description, s.build());
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
  return out;
}

std::string ToJson(const GoldenVector& v) {
  const FilterView view = *FilterView::Parse(v.filter);
  std::string j = "{\n";
  absl::StrAppend(&j, "  \"name\": ", JsonString(v.name), ",\n");
  absl::StrAppend(&j, "  \"description\": ", JsonString(v.description), ",\n");
  absl::StrAppend(&j, "  \"format_version\": ", view.format_version(), ",\n");
  absl::StrAppend(&j, "  \"encoded_at_ms\": ", kNowMs, ",\n");
  absl::StrAppend(&j, "  \"version\": ",
                  JsonString(FilterVersionString(view.checksum())), ",\n");
  absl::StrAppendFormat(&j, "  \"fp_rate_target\": %.17g,\n",
                        view.fp_rate_target());
  absl::StrAppend(&j, "  \"slice_span_ms\": ", view.slice_span_ms(), ",\n");
  absl::StrAppend(&j, "  \"filter_size\": ", v.filter.size(), ",\n");
  // The decoded slice table, one line per slice, for checking a parser.
  absl::StrAppend(&j, "  \"slices\": [");
  for (size_t i = 0; i < view.slices().size(); ++i) {
    const FilterView::Slice& s = view.slices()[i];
    absl::StrAppendFormat(&j,
                          "%s\n    {\"start_ms\": %d, \"end_ms\": %d, "
                          "\"bloom_segments\": [",
                          i == 0 ? "" : ",", s.start_ms, s.end_ms);
    for (int g = 0; g < s.num_segments; ++g) {
      const FilterView::Segment& seg = view.segments()[s.first_segment + g];
      absl::StrAppendFormat(&j, "%s{\"num_blocks\": %u, \"k\": %d}",
                            g == 0 ? "" : ", ", seg.num_blocks, seg.k);
    }
    absl::StrAppend(&j, "], \"runs\": [");
    for (int r = 0; r < s.num_runs; ++r) {
      const FilterView::Run& run = view.runs()[s.first_run + r];
      absl::StrAppendFormat(
          &j,
          "%s{\"precision\": %d, \"universe\": %u, \"rice_k\": %d, "
          "\"count\": %u, \"payload_bytes\": %u}",
          r == 0 ? "" : ", ", run.precision, run.universe, run.rice_k,
          run.count, run.payload_bytes);
    }
    absl::StrAppend(&j, "]}");
  }
  absl::StrAppend(&j, view.slices().empty() ? "],\n" : "\n  ],\n");
  absl::StrAppend(&j, "  \"filter_hex\": \"", Hex(v.filter), "\",\n");
  absl::StrAppend(&j, "  \"candidates\": [");
  for (size_t i = 0; i < v.candidates.size(); ++i) {
    const Candidate& c = v.candidates[i];
    // Ids as decimal strings: JSON numbers above 2^53 lose precision in many
    // parsers (JavaScript, jq).
    absl::StrAppend(&j, i == 0 ? "" : ",", "\n    {",
                    c.is_key ? absl::StrCat("\"key\": ", JsonString(c.key))
                             : absl::StrCat("\"id\": \"", c.id, "\""),
                    ", \"may_contain\": ", c.may_contain ? "true" : "false",
                    "}");
  }
  absl::StrAppend(&j, "\n  ]\n}\n");
  return j;
}

}  // namespace exposure_filter::golden
