#include "exposure_filter/filter_format.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "exposure_filter/filter_view.h"
#include "exposure_filter/item_hash.h"
#include "src/filter/filter_encoder.h"

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

// Format 1 carries Bloom slices: the sample is a legacy (format-1) user, as
// loaded from a previous release's snapshot.
UserFilter SampleFilter(const FilterPolicy& p) {
  BloomSlices f;
  std::vector<uint64_t> a, b;
  for (uint64_t id = 0; id < 300; ++id) a.push_back(HashItemId(id));
  for (uint64_t id = 1000; id < 1100; ++id) b.push_back(HashItemId(id));
  f.Record(p, a, kNow - 10 * kDay);
  f.Record(p, b, kNow);
  const uint64_t key = HashItemKey("video:abc");
  f.Record(p, {&key, 1}, kNow);
  return *UserFilter::FromParts(p, f.ToParts(), "");
}

TEST(FilterFormatTest, UnknownUserEncodesAnEmptyFilter) {
  const FilterPolicy p = DefaultPolicy();
  std::string bytes;
  EncodeFilter(nullptr, p, kNow, &bytes);
  EXPECT_EQ(bytes.size(), format::kHeaderBytes + format::kTrailerBytes);
  EXPECT_EQ(bytes.substr(0, 4), "EXPF");
  absl::StatusOr<FilterView> v = FilterView::Parse(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->segments().empty());
  EXPECT_FALSE(v->MayContainId(1));
  EXPECT_DOUBLE_EQ(v->fp_rate_target(), 0.01);
}

TEST(FilterFormatTest, ViewAgreesWithTheServerSideFilter) {
  const FilterPolicy p = DefaultPolicy();
  const UserFilter f = SampleFilter(p);
  std::string bytes;
  EncodeFilter(&f, p, kNow, &bytes);
  absl::StatusOr<FilterView> v = FilterView::Parse(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->segments().size(), 2u);
  EXPECT_TRUE(v->MayContainKey("video:abc"));
  for (uint64_t id = 0; id < 100000; ++id) {
    ASSERT_EQ(v->MayContainId(id), f.MayContain(p, kNow, HashItemId(id))) << id;
  }
  EXPECT_NEAR(v->EstimatedFpRate(), f.Stats(p, kNow).estimated_fp_rate, 1e-9);
}

TEST(FilterFormatTest, BatchMasksAgreeWithSingleChecks) {
  const FilterPolicy p = DefaultPolicy();
  const UserFilter f = SampleFilter(p);
  std::string bytes;
  EncodeFilter(&f, p, kNow, &bytes);
  absl::StatusOr<FilterView> v = FilterView::Parse(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  std::vector<uint64_t> ids, hashes;
  std::vector<std::string> keys;
  for (uint64_t id = 0; id < 2000; id += 3) {
    ids.push_back(id);
    hashes.push_back(HashItemId(id));
    keys.push_back(id % 2 ? "video:abc" : std::to_string(id));
  }
  std::vector<uint8_t> by_id(ids.size()), by_hash(ids.size()),
      by_key(keys.size());
  v->KeepMaskIds(ids, by_id.data());
  v->KeepMaskHashes(hashes, by_hash.data());
  v->KeepMaskKeys(keys, by_key.data());
  int removed = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(by_id[i], !v->MayContainId(ids[i])) << ids[i];
    EXPECT_EQ(by_hash[i], by_id[i]) << ids[i];
    EXPECT_EQ(by_key[i], !v->MayContainKey(keys[i])) << keys[i];
    removed += !by_id[i];
  }
  EXPECT_GE(removed, 100);  // ids below 300 were recorded
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
}

TEST(FilterFormatTest, EveryTruncationIsRejected) {
  const FilterPolicy p = DefaultPolicy();
  const UserFilter f = SampleFilter(p);
  std::string bytes;
  EncodeFilter(&f, p, kNow, &bytes);
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_FALSE(FilterView::Parse(bytes.substr(0, len)).ok()) << len;
  }
}

TEST(FilterFormatTest, EveryBitFlipIsRejected) {
  const FilterPolicy p = DefaultPolicy();
  const UserFilter f = SampleFilter(p);
  std::string bytes;
  EncodeFilter(&f, p, kNow, &bytes);
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ (1 << (i % 8)));
    EXPECT_FALSE(FilterView::Parse(bad).ok()) << "byte " << i;
  }
}

TEST(FilterFormatTest, StructurallyBadFiltersWithValidChecksumsAreRejected) {
  const FilterPolicy p = DefaultPolicy();
  const UserFilter f = SampleFilter(p);
  std::string good;
  EncodeFilter(&f, p, kNow, &good);
  const size_t seg0 = format::kHeaderBytes;
  struct Case {
    const char* name;
    size_t offset;
    uint32_t value;
    int width;
  } cases[] = {
      {"version", 4, 2, 2},
      {"segment count", 16, 1000, 4},
      {"segment count larger than data", 16, 3, 4},
      {"hash algorithm", 20, 9, 1},
      {"zero blocks", seg0 + 16, 0, 4},
      {"huge blocks", seg0 + 16, 0xffffffffu, 4},
      {"blocks beyond data", seg0 + 16, 1000, 4},
      {"zero probes", seg0 + 24, 0, 1},
      {"too many probes", seg0 + 24, 17, 1},
  };
  for (const Case& c : cases) {
    std::string bad = good;
    for (int i = 0; i < c.width; ++i) {
      bad[c.offset + i] = static_cast<char>(c.value >> (8 * i));
    }
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

}  // namespace
}  // namespace exposure_filter
