#include "exposure_filter/filter_format.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "exposure_filter/filter_view.h"
#include "exposure_filter/item_hash.h"
#include "src/filter/bloom_slices.h"
#include "src/filter/filter_encoder.h"
#include "src/filter/filter_parts.h"
#include "src/filter/fingerprint_run.h"

namespace exposure_filter {
namespace {

constexpr int64_t kDay = 24 * 3600 * 1000LL;
constexpr int64_t kNow = 1795392000000LL;

FilterPolicy DefaultPolicy() { return *FilterPolicy::Create({}); }

// Rewrites the trailing checksum so that a test reaches the structural checks.
void Reseal(std::string* bytes) {
  const uint64_t sum =
      XXH3_64bits(bytes->data(), bytes->size() - format::kTrailerBytes);
  for (int i = 0; i < 8; ++i) {
    (*bytes)[bytes->size() - 8 + i] = static_cast<char>(sum >> (8 * i));
  }
}

// Records the sample history (300 ids 10 days ago, 100 ids and a key now)
// into `f`: the server's UserFilter (runs) or the previous release's Bloom
// filter BloomSlices (legacy segments), which take the same calls.
template <typename Filter>
Filter Sample(const FilterPolicy& p) {
  Filter f;
  std::vector<uint64_t> a, b;
  for (uint64_t id = 0; id < 300; ++id) a.push_back(HashItemId(id));
  for (uint64_t id = 1000; id < 1100; ++id) b.push_back(HashItemId(id));
  f.Record(p, a, kNow - 10 * kDay);
  f.Record(p, b, kNow);
  const uint64_t key = HashItemKey("video:abc");
  f.Record(p, {&key, 1}, kNow);
  return f;
}
UserFilter SampleFilter(const FilterPolicy& p) { return Sample<UserFilter>(p); }

// An upgraded user's parts: the sample recorded by the previous release's
// Bloom filter (two legacy slices, 10 days ago and now) plus run slices
// 20 and 5 days ago: sealed runs at non-power-of-two universes, a ladder of
// two prefix runs.
FilterParts MixedParts(const FilterPolicy& p) {
  FilterParts parts = Sample<BloomSlices>(p).ToParts();
  auto run_slice = [&](int64_t event_ms, uint64_t first_id, int items,
                       std::vector<std::pair<int, uint64_t>> shapes) {
    SlicePart s;
    s.index = p.SliceIndexOf(event_ms);
    s.min_event_ms = s.max_event_ms = event_ms;
    for (const auto& [b, u] : shapes) {
      std::vector<uint64_t> hashes;
      for (int i = 0; i < items; ++i) hashes.push_back(HashItemId(first_id++));
      RunPart r;
      r.run = *FingerprintRun::Build(hashes, b, u);
      r.capacity = r.run.count();
      s.runs.push_back(std::move(r));
    }
    parts.slices.push_back(std::move(s));
  };
  run_slice(kNow - 20 * kDay, 5000, 400, {{20, 400 * 700}});
  run_slice(kNow - 5 * kDay, 6000, 150,
            {{19, uint64_t{1} << 19}, {21, uint64_t{1} << 21}});
  std::sort(
      parts.slices.begin(), parts.slices.end(),
      [](const SlicePart& a, const SlicePart& b) { return a.index < b.index; });
  return parts;
}

bool PartsMayContain(const FilterParts& parts, const FilterPolicy& p,
                     int64_t now, uint64_t h) {
  for (const SlicePart& s : parts.slices) {
    if (!p.SliceLive(s.index, now)) continue;
    for (const BloomSegment& seg : s.bloom_segments) {
      if (seg.MayContain(h)) return true;
    }
    for (const RunPart& r : s.runs) {
      if (r.run.Contains(h)) return true;
    }
  }
  return false;
}

void PutLe(std::string* bytes, size_t offset, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) {
    (*bytes)[offset + i] = static_cast<char>(value >> (8 * i));
  }
}

std::string ReadVectorBytes(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  const std::string tag = "\"filter_hex\": \"";
  const size_t at = file.find(tag) + tag.size();
  const std::string hex = file.substr(at, file.find('"', at) - at);
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(FilterFormatTest, UnknownUserEncodesAnEmptyFormat2Filter) {
  const FilterPolicy p = DefaultPolicy();
  std::string bytes;
  EncodeFilter(nullptr, p, kNow, &bytes);
  EXPECT_EQ(bytes.size(), format::kHeader2Bytes + format::kTrailerBytes);
  EXPECT_EQ(bytes.substr(0, 4), "EXPF");
  absl::StatusOr<FilterView> v = FilterView::Parse(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->format_version(), 2);
  EXPECT_TRUE(v->slices().empty());
  EXPECT_FALSE(v->MayContainId(1));
  EXPECT_DOUBLE_EQ(v->fp_rate_target(), 0.01);  // the surface's, even empty
  EXPECT_EQ(v->slice_span_ms(), p.slice_span_ms());
  EXPECT_EQ(v->EstimatedFpRate(), 0);
}

TEST(FilterFormatTest, ViewAgreesWithTheServerSideFilter) {
  const FilterPolicy p = DefaultPolicy();
  const UserFilter f = SampleFilter(p);
  std::string bytes;
  EncodeFilter(&f, p, kNow, &bytes);
  absl::StatusOr<FilterView> v = FilterView::Parse(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  // The server now writes fingerprint runs only: two slices of runs, no
  // Bloom segment (those come only from format-1 data, MixedParts below).
  EXPECT_EQ(v->slices().size(), 2u);
  EXPECT_EQ(v->segments().size(), 0u);
  EXPECT_GE(v->runs().size(), 2u);
  EXPECT_EQ(v->runs().size(), static_cast<size_t>(f.Stats(p, kNow).segments));
  EXPECT_TRUE(v->MayContainKey("video:abc").value_or(false));
  for (uint64_t id = 0; id < 100000; ++id) {
    ASSERT_EQ(v->MayContainId(id), f.MayContain(p, kNow, HashItemId(id))) << id;
  }
  // The view estimates each run as n / U; the server's bound F weighs each
  // fingerprint by the prefixes it covers (UserFilter::RunMeta::weight), so
  // n / U <= F, equal for prefix runs and within a factor U / 2^b otherwise.
  EXPECT_GT(v->EstimatedFpRate(), 0);
  EXPECT_LE(v->EstimatedFpRate(),
            f.Stats(p, kNow).estimated_fp_rate * (1 + 1e-9));
  EXPECT_GE(v->EstimatedFpRate(), 0.5 * f.Stats(p, kNow).estimated_fp_rate);
  EXPECT_LE(f.Stats(p, kNow).estimated_fp_rate, p.fp_rate() * (1 + 1e-9));
}

TEST(FilterFormatTest, RunsAndLegacySegmentsAnswerAsTheParts) {
  const FilterPolicy p = DefaultPolicy();
  const FilterParts parts = MixedParts(p);
  std::string bytes;
  EncodeFilterParts(&parts, p, kNow, &bytes);
  absl::StatusOr<FilterView> v = FilterView::Parse(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->slices().size(), 4u);
  EXPECT_EQ(v->runs().size(), 3u);
  EXPECT_EQ(v->segments().size(), 2u);
  for (size_t i = 1; i < v->slices().size(); ++i) {
    EXPECT_GT(v->slices()[i].start_ms, v->slices()[i - 1].start_ms);
    EXPECT_EQ(v->slices()[i].end_ms - v->slices()[i].start_ms,
              p.slice_span_ms());
  }
  // Legacy Bloom blocks are 8-byte aligned for the batch kernel (Parse
  // copies them when the format's variable headers leave them unaligned).
  for (const FilterView::Segment& seg : v->segments()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(seg.blocks) % alignof(uint64_t), 0u);
  }
  std::vector<uint64_t> ids;
  int claimed = 0;
  for (uint64_t id = 0; id < 100000; ++id) {
    const bool server = PartsMayContain(parts, p, kNow, HashItemId(id));
    ASSERT_EQ(v->MayContainId(id), server) << id;
    claimed += server;
    ids.push_back(id);
  }
  // 400 + 300 + 100 + key recorded, plus ~1% false positives.
  EXPECT_GT(claimed, 950);
  EXPECT_LT(claimed, 950 + 2000);
  std::vector<uint8_t> keep(ids.size());
  v->KeepMaskIds(ids, keep.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(keep[i], !v->MayContainId(ids[i])) << ids[i];
  }
  double expected_fp = 0;
  for (const FilterView::Run& r : v->runs()) {
    expected_fp += static_cast<double>(r.count) / r.universe;
  }
  EXPECT_GE(v->EstimatedFpRate(), expected_fp * 0.99);
}

TEST(FilterFormatTest, EmptyRunsAndSlicesAreLeftOut) {
  const FilterPolicy p = DefaultPolicy();
  FilterParts parts;
  SlicePart empty_slice;
  empty_slice.index = p.SliceIndexOf(kNow - kDay);
  parts.slices.push_back(std::move(empty_slice));
  SlicePart s;
  s.index = p.SliceIndexOf(kNow);
  RunPart empty_run;
  empty_run.run = *FingerprintRun::Build({}, 19, uint64_t{1} << 19);
  s.runs.push_back(std::move(empty_run));
  parts.slices.push_back(std::move(s));
  std::string bytes, none;
  EncodeFilterParts(&parts, p, kNow, &bytes);
  EncodeFilterParts(nullptr, p, kNow, &none);
  EXPECT_EQ(bytes, none);
}

TEST(FilterFormatTest, BatchMasksAgreeWithSingleChecks) {
  const FilterPolicy p = DefaultPolicy();
  const FilterParts parts = MixedParts(p);
  std::string bytes;
  EncodeFilterParts(&parts, p, kNow, &bytes);
  absl::StatusOr<FilterView> v = FilterView::Parse(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  std::vector<uint64_t> ids, hashes;
  std::vector<std::string> keys;
  for (uint64_t id = 0; id < 7000; id += 3) {
    ids.push_back(id);
    hashes.push_back(HashItemId(id));
    keys.push_back(id % 2 ? "video:abc" : std::to_string(id));
  }
  std::vector<uint8_t> by_id(ids.size()), by_hash(ids.size()),
      by_key(keys.size());
  v->KeepMaskIds(ids, by_id.data());
  v->KeepMaskHashes(hashes, by_hash.data());
  ASSERT_TRUE(v->KeepMaskKeys(keys, by_key.data()).ok());
  int removed = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(by_id[i], !v->MayContainId(ids[i])) << ids[i];
    EXPECT_EQ(by_hash[i], by_id[i]) << ids[i];
    EXPECT_EQ(by_key[i], !v->MayContainKey(keys[i]).value()) << keys[i];
    removed += !by_id[i];
  }
  EXPECT_GE(removed, 280);  // ids < 300 and 5000..5399, 6000..6299 recorded
}

TEST(FilterFormatTest, VersionIsTheChecksumAndTracksChangesAndExpiry) {
  const FilterPolicy p = DefaultPolicy();
  UserFilter f = SampleFilter(p);
  std::string bytes;
  const uint64_t sum = EncodeFilter(&f, p, kNow, &bytes);
  EXPECT_EQ(FilterFingerprint(&f, p, kNow), sum);
  EXPECT_EQ(FilterVersionString(sum).size(), 16u);
  // Unchanged filter, later time inside the same live set: same version.
  EXPECT_EQ(FilterFingerprint(&f, p, kNow + 1000), sum);
  // Re-recording a present item changes nothing.
  const uint64_t h0 = HashItemId(0);
  f.Record(p, {&h0, 1}, kNow - 10 * kDay);
  EXPECT_EQ(FilterFingerprint(&f, p, kNow), sum);
  // Nor does a never-recorded item that the slice it is recorded into
  // already claims (a false positive of that slice's runs): the spec
  // (docs/filter-format.md, "Checksum and version") promises the version
  // stays, since the filter answers the same for every item.
  std::vector<int64_t> claiming;
  uint64_t fp_id = 2000000;
  for (;; ++fp_id) {
    claiming.clear();
    f.ClaimingSlices(p, kNow, HashItemId(fp_id), &claiming);
    if (claiming.size() == 1 && claiming[0] == p.SliceIndexOf(kNow)) break;
  }
  const uint64_t fp_hash = HashItemId(fp_id);
  EXPECT_EQ(f.Record(p, {&fp_hash, 1}, kNow), 0u) << fp_id;
  EXPECT_EQ(FilterFingerprint(&f, p, kNow), sum) << fp_id;
  // A new item changes it.
  const uint64_t h = HashItemId(424242);
  f.Record(p, {&h, 1}, kNow);
  const uint64_t after_record = FilterFingerprint(&f, p, kNow);
  EXPECT_NE(after_record, sum);
  // The older slice ageing out changes it, without any write.
  const int64_t expiry =
      p.SliceEndMs(p.SliceIndexOf(kNow - 10 * kDay)) + p.retention_ms();
  EXPECT_EQ(FilterFingerprint(&f, p, expiry - 1), after_record);
  EXPECT_NE(FilterFingerprint(&f, p, expiry), after_record);
  // And for parts with runs: the streamed fingerprint is the bytes' checksum.
  const FilterParts parts = MixedParts(p);
  EXPECT_EQ(FilterPartsFingerprint(&parts, p, kNow),
            EncodeFilterParts(&parts, p, kNow, &bytes));
}

TEST(FilterFormatTest, EveryTruncationIsRejected) {
  const FilterPolicy p = DefaultPolicy();
  const FilterParts parts = MixedParts(p);
  std::string bytes;
  EncodeFilterParts(&parts, p, kNow, &bytes);
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_FALSE(FilterView::Parse(bytes.substr(0, len)).ok()) << len;
  }
}

TEST(FilterFormatTest, EveryBitFlipIsRejected) {
  const FilterPolicy p = DefaultPolicy();
  const FilterParts parts = MixedParts(p);
  std::string bytes;
  EncodeFilterParts(&parts, p, kNow, &bytes);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ (1 << (i % 8)));
    EXPECT_FALSE(FilterView::Parse(bad).ok()) << "byte " << i;
  }
}

TEST(FilterFormatTest, UnknownVersionsNameTheVersionsThisDecoderReads) {
  const FilterPolicy p = DefaultPolicy();
  std::string bytes;
  EncodeFilter(nullptr, p, kNow, &bytes);
  PutLe(&bytes, 4, 3, 2);
  Reseal(&bytes);
  absl::StatusOr<FilterView> v = FilterView::Parse(bytes);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(absl::StrContains(v.status().message(), "format version 3"))
      << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(), "versions 1 and 2"))
      << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(), "FilterRecalled"))
      << v.status();
}

// Format 2's reject list (docs/filter-format.md), each behind a valid
// checksum so the structural check itself is what rejects it.
TEST(FilterFormatTest, StructurallyBadFormat2FiltersAreRejected) {
  const FilterPolicy p = DefaultPolicy();
  FilterParts parts = MixedParts(p);
  std::string good;
  EncodeFilterParts(&parts, p, kNow, &good);
  ASSERT_TRUE(FilterView::Parse(good).ok());
  // Layout of MixedParts: slice 0 = one sealed run (20 days ago), slice 1 =
  // legacy Bloom (10 days ago), slice 2 = two runs, slice 3 = legacy Bloom.
  const size_t s0 = format::kHeader2Bytes;
  const size_t run0 = s0 + format::kSlice2Bytes;  // u32 L, then the run
  const uint32_t run0_len =
      static_cast<uint32_t>(static_cast<unsigned char>(good[run0]) |
                            static_cast<unsigned char>(good[run0 + 1]) << 8);
  const size_t s1 = run0 + 4 + run0_len;
  const size_t seg1 = s1 + format::kSlice2Bytes;
  const int64_t start0 = p.SliceStartMs(p.SliceIndexOf(kNow - 20 * kDay));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  uint64_t nan_bits, big_fp_bits, zero_fp_bits;
  const double big_fp = 0.6, zero_fp = 0;
  std::memcpy(&nan_bits, &nan, 8);
  std::memcpy(&big_fp_bits, &big_fp, 8);
  std::memcpy(&zero_fp_bits, &zero_fp, 8);
  struct Case {
    const char* name;
    size_t offset;
    uint64_t value;
    int width;
  } cases[] = {
      {"hash algorithm", 6, 2, 1},
      {"9 slices", 7, 9, 1},
      {"slice count beyond data", 7, 5, 1},
      {"fewer slices than data", 7, 3, 1},
      {"fp target NaN", 8, nan_bits, 8},
      {"fp target 0.6", 8, big_fp_bits, 8},
      {"fp target 0", 8, zero_fp_bits, 8},
      {"span 999 ms", 16, 999, 8},
      {"span not dividing starts", 16, 7 * 24 * 3600 * 1000LL, 8},
      {"start not a multiple of the span", s0, uint64_t(start0 + 1), 8},
      {"negative start", s0, uint64_t(-p.slice_span_ms()), 8},
      {"slices out of order", s0, uint64_t(start0 + 40 * p.slice_span_ms()), 8},
      {"slice with nothing", s0 + 9, 0, 1},
      {"9 Bloom segments", s1 + 8, 9, 1},
      {"run length beyond data", run0, 1u << 30, 4},
      {"run length below its header", run0, 9, 4},
      {"run length one short", run0, run0_len - 1, 4},
      {"run precision 0", run0 + 4, 0, 1},
      {"run precision 33", run0 + 4, 33, 1},
      {"run Rice k off by one", run0 + 5, 0, 1},
      {"run count 0", run0 + 6, 0, 4},
      {"run count off by one", run0 + 6, 401, 4},
      {"run universe 1", run0 + 10, 0, 4},
      {"run universe above 2^b", run0 + 10, (1u << 20), 4},
      {"zero blocks", seg1, 0, 4},
      {"huge blocks", seg1, (1u << 26) + 1, 4},
      {"blocks beyond data", seg1, 1000, 4},
      {"zero probes", seg1 + 4, 0, 1},
      {"too many probes", seg1 + 4, 17, 1},
  };
  for (const Case& c : cases) {
    std::string bad = good;
    PutLe(&bad, c.offset, c.value, c.width);
    Reseal(&bad);
    absl::StatusOr<FilterView> v = FilterView::Parse(bad);
    EXPECT_FALSE(v.ok()) << c.name;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
  }
  std::string extra = good;
  extra.insert(extra.size() - 8, "x");
  Reseal(&extra);
  EXPECT_FALSE(FilterView::Parse(extra).ok());
}

// Bytes that break two rules get the error of the one docs/filter-format.md
// ("What a decoder must reject") checks first; the Python decoder's test
// (clients/python/tests/test_golden_vectors.py) has the same cases.
TEST(FilterFormatTest, ChecksRunInTheSpecifiedOrder) {
  const std::string good =
      ReadVectorBytes(std::string(EF_TESTDATA_DIR) + "/tiny.json");
  ASSERT_TRUE(FilterView::Parse(good).ok());
  // tiny: run length L at 34, U - 1 at 44, payload 48..56 (64 bits of
  // remainders, then the unary byte 0x96 = codes 01 1 01 001), f_0 = 108897
  // of U = 2^19, checksum at 57.
  auto put = [](std::string bytes, size_t offset, uint64_t value, int width) {
    PutLe(&bytes, offset, value, width);
    return bytes;
  };
  auto resealed = [](std::string bytes) {
    Reseal(&bytes);
    return bytes;
  };
  auto with_extra_payload_byte = [&](const std::string& bytes) {
    std::string out = bytes;
    out.insert(57, 1, '\0');
    return put(out, 34, 20, 4);
  };
  const std::string small_u = put(good, 44, 100000 - 1, 4);  // f_0 reaches U
  const struct {
    const char* name;
    std::string bytes;
    const char* expected;
  } cases[] = {
      {"a code runs past the payload, before the fingerprint range",
       resealed(put(small_u, 56, 0x16, 1)), "truncated in code 3"},
      {"bytes after the codes, before the fingerprint range",
       resealed(with_extra_payload_byte(small_u)), "its 4 codes use 9"},
      {"the checksum before the slice count", put(good, 7, 9, 1),
       "checksum mismatch"},
      {"the version before the length",
       "EXPF\x03" + std::string(1, '\0') + good.substr(6, 14),
       "unsupported format version 3"},
      {"a slice's start before its counts",
       resealed(put(put(good, 24, 1795392000001, 8), 32, 9, 1)),
       "not a non-negative multiple"},
      {"a run before the trailing bytes",
       resealed(put(with_extra_payload_byte(good), 38, 33, 1)), "precision 33"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<FilterView> v = FilterView::Parse(c.bytes);
    ASSERT_FALSE(v.ok()) << c.name;
    EXPECT_TRUE(absl::StrContains(v.status().message(), c.expected))
        << c.name << ": " << v.status();
  }
}

// The empty key is not an item: the server rejects it, and so does the view
// rather than answer (docs/filter-format.md, "Hashing items").
TEST(FilterFormatTest, TheEmptyKeyIsRejectedNotAnswered) {
  // The worked example: key "video:42" recorded.
  const std::string bytes =
      ReadVectorBytes(std::string(EF_TESTDATA_DIR) + "/tiny.json");
  absl::StatusOr<FilterView> v = FilterView::Parse(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  const absl::StatusOr<bool> empty = v->MayContainKey("");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(empty.status().message(), "empty"))
      << empty.status();
  const std::vector<std::string> keys = {"video:42", ""};
  std::vector<uint8_t> keep(keys.size(), 7);
  const absl::Status batch = v->KeepMaskKeys(keys, keep.data());
  EXPECT_EQ(batch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(batch.message(), "keys[1]: ")) << batch;
  EXPECT_EQ(keep, std::vector<uint8_t>(keys.size(), 7));  // untouched
  EXPECT_TRUE(v->MayContainKey("video:42").value_or(false));
}

// Format 1's reject list, on the previous release's stored multi_slice
// vector (7 slices, one of several segments).
TEST(FilterFormatTest, StructurallyBadFormat1FiltersAreRejected) {
  const std::string good = ReadVectorBytes(std::string(EF_TESTDATA_DIR) +
                                           "/format1/multi_slice.json");
  absl::StatusOr<FilterView> view = FilterView::Parse(good);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->format_version(), 1);
  // Find the first slice with at least two segments.
  size_t grown = 0;
  while (grown + 1 < view->segments().size() &&
         view->segments()[grown + 1].level == 0) {
    ++grown;
  }
  ASSERT_LT(grown + 1, view->segments().size());
  const size_t seg0 = format::kHeaderBytes;
  const size_t segg = seg0 + grown * format::kSegmentHeaderBytes;
  const size_t segg1 = segg + format::kSegmentHeaderBytes;
  const double big_fp = 0.6;
  uint64_t big_fp_bits;
  std::memcpy(&big_fp_bits, &big_fp, 8);
  const int64_t span = view->slice_span_ms();
  struct Case {
    const char* name;
    size_t offset;
    uint64_t value;
    int width;
  } cases[] = {
      {"version 3", 4, 3, 2},
      {"segment count", 16, 1000, 4},
      {"segment count larger than data", 16, view->segments().size() + 1, 4},
      {"hash algorithm", 20, 9, 1},
      {"fp target 0.6", 24, big_fp_bits, 8},
      {"zero blocks", seg0 + 16, 0, 4},
      {"huge blocks", seg0 + 16, 0xffffffffu, 4},
      {"zero probes", seg0 + 24, 0, 1},
      {"too many probes", seg0 + 24, 17, 1},
      {"first level not 0", seg0 + 25, 1, 1},
      {"level skipped", segg1 + 25, 2, 1},
      {"slice end differs within a slice", segg1 + 8,
       uint64_t(view->segments()[grown].end_ms + 1), 8},
      {"end equals start", seg0 + 8, uint64_t(view->segments()[0].start_ms), 8},
      {"span differs between slices", seg0 + 8,
       uint64_t(view->segments()[0].end_ms + span), 8},
      {"slices out of order", seg0 + 0,
       uint64_t(view->segments()[0].start_ms + 100 * span), 8},
  };
  for (const Case& c : cases) {
    std::string bad = good;
    PutLe(&bad, c.offset, c.value, c.width);
    if (std::string(c.name) == "slices out of order") {
      PutLe(&bad, seg0 + 8, uint64_t(view->segments()[0].end_ms + 100 * span),
            8);
    }
    Reseal(&bad);
    absl::StatusOr<FilterView> v = FilterView::Parse(bad);
    EXPECT_FALSE(v.ok()) << c.name;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
  }
}

}  // namespace
}  // namespace exposure_filter
