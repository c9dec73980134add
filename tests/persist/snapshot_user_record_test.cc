// Snapshot User records (snapshot_user_record.h): version 2 carries
// FilterParts exactly (legacy Bloom segments with count and capacity, runs
// with capacity and the open flag); version 1, the previous release's, is
// still decoded; malformed bodies are refused, naming what is wrong.
#include "src/persist/snapshot_user_record.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "exposure_filter/item_hash.h"
#include "gtest/gtest.h"
#include "src/persist/byte_codec.h"

namespace exposure_filter {
namespace {

constexpr int64_t kDay = 86'400'000;
constexpr int64_t kNow = 1795392000000;

FilterParts SampleParts(const FilterPolicy& p) {
  FilterParts parts;
  SlicePart legacy;  // 10 days ago: two Bloom segments
  legacy.index = p.SliceIndexOf(kNow - 10 * kDay);
  legacy.min_event_ms = kNow - 10 * kDay;
  legacy.max_event_ms = kNow - 9 * kDay;
  for (uint32_t blocks : {1u, 3u}) {
    BloomSegment seg(blocks, 7, blocks * 30);
    for (uint64_t id = 0; id < blocks * 20; ++id) seg.Add(HashItemId(id));
    legacy.bloom_segments.push_back(std::move(seg));
  }
  parts.slices.push_back(std::move(legacy));
  SlicePart runs;  // now: a sealed run and an open prefix run
  runs.index = p.SliceIndexOf(kNow);
  runs.min_event_ms = runs.max_event_ms = kNow;
  std::vector<uint64_t> a, b;
  for (uint64_t id = 100; id < 400; ++id) a.push_back(HashItemId(id));
  for (uint64_t id = 500; id < 520; ++id) b.push_back(HashItemId(id));
  runs.runs.push_back({*FingerprintRun::Build(a, 20, 300 * 700), 350, false});
  runs.runs.push_back(
      {*FingerprintRun::Build(b, 19, uint64_t{1} << 19), 40, true});
  parts.slices.push_back(std::move(runs));
  return parts;
}

TEST(SnapshotUserRecordTest, Version2CarriesThePartsExactly) {
  const FilterPolicy p = *FilterPolicy::Create({});
  const FilterParts parts = SampleParts(p);
  std::string body;
  ASSERT_TRUE(EncodeUserParts(7, "alice", parts, p, kNow, &body));
  absl::StatusOr<DecodedUserRecord> d =
      DecodeUserRecord(kSnapshotUserRecordV2, body);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->surface_id, 7);
  EXPECT_EQ(d->user_id, "alice");
  ASSERT_EQ(d->parts.slices.size(), parts.slices.size());
  for (size_t i = 0; i < parts.slices.size(); ++i) {
    const SlicePart& want = parts.slices[i];
    const SlicePart& got = d->parts.slices[i];
    EXPECT_EQ(got.index, want.index);
    EXPECT_EQ(got.min_event_ms, want.min_event_ms);
    EXPECT_EQ(got.max_event_ms, want.max_event_ms);
    ASSERT_EQ(got.bloom_segments.size(), want.bloom_segments.size());
    for (size_t j = 0; j < want.bloom_segments.size(); ++j) {
      const BloomSegment& w = want.bloom_segments[j];
      const BloomSegment& g = got.bloom_segments[j];
      EXPECT_EQ(g.num_blocks(), w.num_blocks());
      EXPECT_EQ(g.k(), w.k());
      EXPECT_EQ(g.count(), w.count());
      EXPECT_EQ(g.capacity(), w.capacity());
      EXPECT_EQ(std::memcmp(g.words(), w.words(), w.bit_bytes()), 0);
    }
    ASSERT_EQ(got.runs.size(), want.runs.size());
    for (size_t j = 0; j < want.runs.size(); ++j) {
      EXPECT_TRUE(got.runs[j].run == want.runs[j].run);
      EXPECT_EQ(got.runs[j].run.rice_k(), want.runs[j].run.rice_k());
      EXPECT_EQ(got.runs[j].capacity, want.runs[j].capacity);
      EXPECT_EQ(got.runs[j].open, want.runs[j].open);
    }
  }
}

TEST(SnapshotUserRecordTest, OnlyLiveSlicesAreWritten) {
  const FilterPolicy p = *FilterPolicy::Create({});
  const FilterParts parts = SampleParts(p);
  std::string body;
  // 25 days on, the legacy slice (10 days older) has aged out.
  ASSERT_TRUE(EncodeUserParts(1, "u", parts, p, kNow + 25 * kDay, &body));
  absl::StatusOr<DecodedUserRecord> d =
      DecodeUserRecord(kSnapshotUserRecordV2, body);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->parts.slices.size(), 1u);
  EXPECT_EQ(d->parts.slices[0].runs.size(), 2u);
  std::string none;
  EXPECT_FALSE(EncodeUserParts(1, "u", parts, p, kNow + 90 * kDay, &none));
  EXPECT_TRUE(none.empty());
}

// The previous release's body: per slice index, min, max, u8 segments, then
// each segment's blocks, k, count, capacity and bits (no run count).
TEST(SnapshotUserRecordTest, Version1BodiesDecodeToBloomSlices) {
  const FilterPolicy p = *FilterPolicy::Create({});
  const FilterParts parts = SampleParts(p);
  const SlicePart& legacy = parts.slices[0];
  std::string body;
  PutU16(&body, 3);
  PutString32(&body, "bob");
  PutU8(&body, 1);
  PutI64(&body, legacy.index);
  PutI64(&body, legacy.min_event_ms);
  PutI64(&body, legacy.max_event_ms);
  PutU8(&body, static_cast<uint8_t>(legacy.bloom_segments.size()));
  for (const BloomSegment& seg : legacy.bloom_segments) {
    PutU32(&body, seg.num_blocks());
    PutU8(&body, static_cast<uint8_t>(seg.k()));
    PutU64(&body, seg.count());
    PutU64(&body, seg.capacity());
    body.append(reinterpret_cast<const char*>(seg.words()), seg.bit_bytes());
  }
  absl::StatusOr<DecodedUserRecord> d =
      DecodeUserRecord(kSnapshotUserRecordV1, body);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->parts.slices.size(), 1u);
  EXPECT_TRUE(d->parts.slices[0].runs.empty());
  ASSERT_EQ(d->parts.slices[0].bloom_segments.size(), 2u);
  EXPECT_EQ(std::memcmp(d->parts.slices[0].bloom_segments[1].words(),
                        legacy.bloom_segments[1].words(),
                        legacy.bloom_segments[1].bit_bytes()),
            0);
  // The same bytes are not a version-2 body (no run count byte)...
  EXPECT_FALSE(DecodeUserRecord(kSnapshotUserRecordV2, body).ok());
  // ... and with a 0 run count after the segments they are.
  body.push_back('\0');
  absl::StatusOr<DecodedUserRecord> d2 =
      DecodeUserRecord(kSnapshotUserRecordV2, body);
  ASSERT_TRUE(d2.ok()) << d2.status();
  EXPECT_EQ(d2->parts.slices[0].bloom_segments.size(), 2u);
}

TEST(SnapshotUserRecordTest, MalformedBodiesAreRefused) {
  const FilterPolicy p = *FilterPolicy::Create({});
  std::string good;
  ASSERT_TRUE(EncodeUserParts(7, "alice", SampleParts(p), p, kNow, &good));
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_FALSE(
        DecodeUserRecord(kSnapshotUserRecordV2, good.substr(0, len)).ok())
        << len;
  }
  EXPECT_FALSE(DecodeUserRecord(kSnapshotUserRecordV2, good + "x").ok());
  EXPECT_FALSE(DecodeUserRecord(16, good).ok());
  // The last run: ... u32 capacity | u8 open | u32 L | L bytes. Its open
  // flag set to 2, and its Rice k changed (the codes no longer parse).
  const FilterParts parts = SampleParts(p);
  const std::string last = parts.slices[1].runs[1].run.Serialize();
  const size_t run_at = good.size() - last.size();
  std::string bad_open = good;
  bad_open[run_at - 5] = 2;
  absl::StatusOr<DecodedUserRecord> d =
      DecodeUserRecord(kSnapshotUserRecordV2, bad_open);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::StrContains(d.status().message(), "open flag"))
      << d.status();
  std::string bad_k = good;
  bad_k[run_at + 1] = static_cast<char>(bad_k[run_at + 1] + 1);
  d = DecodeUserRecord(kSnapshotUserRecordV2, bad_k);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::StrContains(d.status().message(), "run 1")) << d.status();
}

}  // namespace
}  // namespace exposure_filter
