#include "tools/golden/golden_vectors.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "exposure_filter/filter_view.h"
#include "exposure_filter/item_hash.h"
#include "src/filter/bloom_segment.h"
#include "src/filter/filter_encoder.h"
#include "src/filter/filter_policy.h"
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

// One filter under construction with the items recorded into it, so the
// candidate list can mix present and fresh items.
struct Builder {
  explicit Builder(FilterPolicy p) : policy(std::move(p)) {}

  void RecordIds(const std::vector<uint64_t>& ids, int64_t event_ms) {
    std::vector<uint64_t> hashes;
    for (uint64_t id : ids) hashes.push_back(HashItemId(id));
    filter.Record(policy, hashes, event_ms);
  }
  void RecordKeys(const std::vector<std::string>& keys, int64_t event_ms) {
    std::vector<uint64_t> hashes;
    for (const std::string& k : keys) hashes.push_back(HashItemKey(k));
    filter.Record(policy, hashes, event_ms);
  }

  FilterPolicy policy;
  // INTERIM (f2core): format-1 vectors are built as legacy Bloom slices and
  // served through UserFilter's legacy path, so their bytes stay those of
  // format 1 until f2wire's format-2 vectors replace this generator.
  BloomSlices filter;
  bool empty = false;  // encode as an unknown user (no UserFilter at all)
  std::vector<Candidate> candidates;

  void AddId(uint64_t id) { candidates.push_back({false, id, "", false}); }
  void AddKey(std::string key) {
    candidates.push_back({true, 0, std::move(key), false});
  }
};

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
  SplitMix64 rng(seed);
  for (int i = 0; i < n; ++i) b->AddId(rng.Next());
}

// Numeric edge cases every vector checks: zero, one, the sign bit, all ones.
void AddEdgeIds(Builder* b) {
  for (uint64_t id :
       {uint64_t{0}, uint64_t{1}, uint64_t{1} << 63, ~uint64_t{0}}) {
    b->AddId(id);
  }
}

// Keys whose lengths cross every length class of XXH3-64 (0, 1-3, 4-8, 9-16,
// 17-128, 129-240, 241+), so a decoder's hash is exercised on all its paths.
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
  b.AddKey("");
  b.AddKey("video:1");
  return b;
}

Builder Tiny() {
  Builder b(DefaultPolicy());
  b.RecordIds({1, 2, 3}, kNowMs);
  b.RecordKeys({"video:42"}, kNowMs);
  for (uint64_t id = 1; id <= 40; ++id) b.AddId(id);
  AddEdgeIds(&b);
  b.AddKey("video:42");
  b.AddKey("video:43");
  b.AddKey("1");  // id 1 was recorded, key "1" was not: distinct spaces
  return b;
}

Builder MultiSlice() {
  Builder b(DefaultPolicy());
  // Days ago and item counts per slice: a realistic spread, one slice filled
  // one item at a time until it grew several segments, and one slice that
  // is already past the 30-day window (recorded, but not encoded).
  const struct {
    int days_ago;
    int items;
    int batch;
  } slices[] = {{40, 50, 50}, {29, 1, 1},    {24, 2500, 1}, {19, 60, 20},
                {14, 5, 5},   {9, 700, 100}, {4, 30, 30},   {0, 120, 10}};
  uint64_t seed = 100;
  for (const auto& s : slices) {
    SplitMix64 rng(seed++);
    std::vector<uint64_t> ids;
    for (int i = 0; i < s.items; ++i) ids.push_back(rng.Next());
    for (size_t i = 0; i < ids.size(); i += s.batch) {
      const size_t end = std::min(ids.size(), i + s.batch);
      b.RecordIds({ids.begin() + i, ids.begin() + end},
                  kNowMs - s.days_ago * kDayMs + static_cast<int64_t>(i));
    }
    for (size_t i = 0; i < ids.size() && i < 40; ++i) b.AddId(ids[i]);
  }
  AddEdgeIds(&b);
  AddFreshIds(&b, 2, 1000);
  return b;
}

Builder StringKeys() {
  Builder b(DefaultPolicy());
  std::vector<std::string> now_keys = KeysOfEveryLength("k");
  for (int i = 0; i < 200; ++i) now_keys.push_back(absl::StrCat("video:", i));
  now_keys.push_back("\xe8\xa7\x86\xe9\xa2\x91:42");  // "视频:42" in UTF-8
  now_keys.push_back("\xc3\xa9mission/7");            // "émission/7"
  b.RecordKeys(now_keys, kNowMs);
  std::vector<std::string> old_keys;
  for (int i = 0; i < 100; ++i) old_keys.push_back(absl::StrCat("note:", i));
  b.RecordKeys(old_keys, kNowMs - 10 * kDayMs);
  b.RecordIds({7}, kNowMs);
  for (const std::string& k : now_keys) b.AddKey(k);
  for (const std::string& k : old_keys) b.AddKey(k);
  for (const std::string& k : KeysOfEveryLength("fresh")) b.AddKey(k);
  for (int i = 200; i < 1200; ++i) b.AddKey(absl::StrCat("video:", i));
  b.AddKey("");
  b.AddKey("7");  // key "7" is not id 7
  b.AddId(7);
  return b;
}

// The largest table a decoder must accept: 64 segments (8 live slices of 8
// segments), every probe count 1..16, block counts that are not powers of
// two, and one segment of 509 blocks. Segments are built directly (the
// server's sizing would need millions of items to reach level 7) and
// filled by the real BloomSegment::Add.
Builder MaxGeometry() {
  // Retention 7 spans: ceil(7) + 1 = 8 slices live at once.
  Builder b(Policy(0.001, absl::Hours(24 * 7), absl::Hours(24)));
  const int64_t newest = b.policy.SliceIndexOf(kNowMs);
  SplitMix64 rng(3);
  for (int s = 0; s < FilterPolicy::kMaxLiveSlices; ++s) {
    BloomSlices::SliceData slice;
    slice.index = newest - (FilterPolicy::kMaxLiveSlices - 1) + s;
    slice.min_event_ms = b.policy.SliceStartMs(slice.index);
    slice.max_event_ms = slice.min_event_ms;
    for (int j = 0; j < FilterPolicy::kMaxSegmentsPerSlice; ++j) {
      const int g = s * FilterPolicy::kMaxSegmentsPerSlice + j;
      const uint32_t blocks = g == 63 ? 509 : 1 + (g * 5) % 11;
      const int k = 1 + g % 16;
      BloomSegment seg(blocks, k, /*capacity=*/blocks * 32);
      const int items = static_cast<int>(blocks) * 8 + g;
      for (int i = 0; i < items; ++i) {
        const uint64_t id = rng.Next();
        seg.Add(HashItemId(id));
        if (i < 3) b.AddId(id);
      }
      slice.segments.push_back(std::move(seg));
    }
    b.filter.AppendSlice(std::move(slice));
  }
  AddEdgeIds(&b);
  AddFreshIds(&b, 4, 2000);
  for (int i = 0; i < 200; ++i) b.AddKey(absl::StrCat("item-", i));
  return b;
}

absl::StatusOr<GoldenVector> Finish(std::string name, std::string description,
                                    Builder b) {
  GoldenVector v;
  v.name = std::move(name);
  v.description = std::move(description);
  absl::StatusOr<UserFilter> built =
      UserFilter::FromParts(b.policy, b.filter.ToParts(), "");
  if (!built.ok()) return built.status();
  const UserFilter* filter = b.empty ? nullptr : &*built;
  EncodeFilter(filter, b.policy, kNowMs, &v.filter);
  absl::StatusOr<FilterView> view = FilterView::Parse(v.filter);
  if (!view.ok()) {
    return absl::InternalError(
        absl::StrCat(v.name, ": ", view.status().ToString()));
  }
  for (Candidate& c : b.candidates) {
    const uint64_t h = c.is_key ? HashItemKey(c.key) : HashItemId(c.id);
    c.may_contain =
        filter != nullptr && filter->MayContain(b.policy, kNowMs, h);
    if (view->MayContainHash(h) != c.may_contain) {
      return absl::InternalError(
          absl::StrCat(v.name, ": FilterView and UserFilter disagree on ",
                       c.is_key ? absl::StrCat("key \"", c.key, "\"")
                                : absl::StrCat("id ", c.id)));
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
       "ids 1, 2, 3 and key \"video:42\" recorded now: one slice, one block "
       "(the worked example of docs/filter-format.md)",
       Tiny},
      {"multi_slice",
       "7 live 5-day slices of 1 to 2500 items, one grown to several "
       "segments; a slice 40 days old is past the window and not encoded",
       MultiSlice},
      {"string_keys",
       "string keys of every XXH3 length class (0-256 bytes) and UTF-8, in "
       "two slices; id 7 recorded, key \"7\" not",
       StringKeys},
      {"max_geometry",
       "64 segments (8 live 1-day slices x 8), k = 1..16, odd block counts "
       "up to 509, fp target 0.001",
       MaxGeometry},
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
  absl::StrAppend(&j, "  \"format_version\": 1,\n");
  absl::StrAppend(&j, "  \"encoded_at_ms\": ", kNowMs, ",\n");
  absl::StrAppend(&j, "  \"version\": ",
                  JsonString(FilterVersionString(view.checksum())), ",\n");
  absl::StrAppendFormat(&j, "  \"fp_rate_target\": %.17g,\n",
                        view.fp_rate_target());
  absl::StrAppend(&j, "  \"filter_size\": ", v.filter.size(), ",\n");
  absl::StrAppend(&j, "  \"segments\": [");
  for (size_t i = 0; i < view.segments().size(); ++i) {
    const FilterView::Segment& s = view.segments()[i];
    absl::StrAppendFormat(
        &j,
        "%s\n    {\"start_ms\": %d, \"end_ms\": %d, \"num_blocks\": %u, "
        "\"item_count\": %u, \"k\": %d, \"level\": %d}",
        i == 0 ? "" : ",", s.start_ms, s.end_ms, s.num_blocks, s.item_count,
        s.k, s.level);
  }
  absl::StrAppend(&j, view.segments().empty() ? "],\n" : "\n  ],\n");
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
