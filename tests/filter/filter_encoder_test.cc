// GetFilter's fast path (filter_encoder.cc, EncodeUserFilter): a UserFilter
// is encoded straight from its allocation, each run's Rice payload copied at
// its bit offset. Its bytes and version must be exactly those of the
// reference path, EncodeFilterParts(ToParts()), for every kind of content:
// runs at every bit offset, sealed and open runs, a run with a tail (merged
// on the wire), legacy Bloom slices, both in one slice, aged-out slices.
#include "src/filter/filter_encoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/filter/bloom_slices.h"
#include "src/filter/fingerprint_run.h"
#include "src/filter/user_filter.h"
#include "tests/filter/arrival_patterns.h"

namespace exposure_filter::testing {
namespace {

// The fast path and the reference agree on bytes, checksum and version at
// `now` (with fingerprint computed both ways).
void ExpectSameEncoding(const UserFilter& f, const FilterPolicy& p, int64_t now,
                        const std::string& what) {
  std::string fast, ref;
  const uint64_t fast_sum = EncodeFilter(&f, p, now, &fast);
  const FilterParts parts = f.ToParts();
  const uint64_t ref_sum = EncodeFilterParts(&parts, p, now, &ref);
  ASSERT_EQ(fast.size(), ref.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(fast[i], ref[i])
        << what << ": first difference at byte " << i << " of " << ref.size();
  }
  EXPECT_EQ(fast_sum, ref_sum) << what;
  EXPECT_EQ(FilterFingerprint(&f, p, now), ref_sum) << what;
  EXPECT_EQ(FilterPartsFingerprint(&parts, p, now), ref_sum) << what;
}

TEST(FilterEncoderTest, PayloadBytesAtEveryBitOffsetMatchSerialize) {
  std::mt19937_64 rng(1);
  for (size_t n : {1, 2, 7, 64, 300}) {
    absl::StatusOr<FingerprintRun> run =
        FingerprintRun::Build(Hashes(rng, n, false), 20, uint64_t{1} << 20);
    ASSERT_TRUE(run.ok()) << run.status();
    const std::string wire = run->Serialize();
    const std::string payload = wire.substr(FingerprintRun::kHeaderBytes);
    ASSERT_EQ(payload.size(), run->encoded_bytes());
    for (uint64_t offset = 0; offset < 130; ++offset) {
      // The payload placed at `offset` among set bits on both sides: the
      // copy must take exactly its bits.
      const size_t words = (offset + run->payload_bits()) / 64 + 2;
      std::vector<uint64_t> buf(words, 0);
      run->view().CopyPayloadTo(buf.data(), offset);
      for (uint64_t b = 0; b < offset; ++b)
        buf[b / 64] |= uint64_t{1} << b % 64;
      for (uint64_t b = offset + run->payload_bits(); b < words * 64; ++b) {
        buf[b / 64] |= uint64_t{1} << b % 64;
      }
      const FingerprintRunView v(buf.data(), offset, run->count(),
                                 run->universe(), run->precision(),
                                 run->rice_k(), run->payload_bits());
      std::string got(payload.size() + 8, '\x5a');  // canary after the end
      v.CopyPayloadBytesTo(reinterpret_cast<unsigned char*>(got.data()));
      EXPECT_EQ(got.substr(0, payload.size()), payload)
          << "n=" << n << " offset=" << offset;
      EXPECT_EQ(got.substr(payload.size()), std::string(8, '\x5a'))
          << "wrote past the payload: n=" << n << " offset=" << offset;
    }
  }
}

TEST(FilterEncoderTest, EveryArrivalPatternEncodesAsItsParts) {
  const FilterPolicy p = DefaultPolicy();
  for (Pattern pattern : {Pattern::kOneCall2000, Pattern::kToday20PerCall,
                          Pattern::kSpread20PerCall, Pattern::kSpread1PerCall,
                          Pattern::kLight20, Pattern::kBackfill5000}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      std::mt19937_64 rng(seed);
      UserFilter f("surface/user");
      for (const Write& w : Writes(pattern, rng)) {
        f.Record(p, w.hashes, w.event_ms);
      }
      // Late items into an old slice: more runs, at odd bit offsets.
      f.Record(p, Hashes(rng, 13, false), kNow - 17 * kDay);
      const std::string what =
          std::string(PatternName(pattern)) + " seed " + std::to_string(seed);
      // Now, and later when the oldest slices have aged out.
      for (int64_t later : {0, 7, 16}) {
        ASSERT_NO_FATAL_FAILURE(
            ExpectSameEncoding(f, p, kNow + later * kDay,
                               what + " +" + std::to_string(later) + "d"));
      }
    }
  }
}

TEST(FilterEncoderTest, RunWithTailIsSentMerged) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(5);
  UserFilter f("k");
  f.Record(p, Hashes(rng, 5000, false), kNow);  // above kTailFromItems
  f.Record(p, Hashes(rng, 40, false), kNow - 12 * kDay);
  for (int c = 0; c < 5; ++c) f.Record(p, Hashes(rng, 20, false), kNow);
  ASSERT_GT(f.tail_items(), 0u);
  ASSERT_NO_FATAL_FAILURE(ExpectSameEncoding(f, p, kNow, "tail"));
}

TEST(FilterEncoderTest, LegacyAndMixedSlicesEncodeAsTheirParts) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(6);
  BloomSlices old;
  for (int d = 25; d >= 0; d -= 4) {
    old.Record(p, Hashes(rng, 40, false), kNow - d * kDay);
  }
  old.Record(p, Hashes(rng, 3000, false), kNow);  // a grown slice
  absl::StatusOr<UserFilter> f = UserFilter::FromParts(p, old.ToParts(), "k");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_NO_FATAL_FAILURE(ExpectSameEncoding(*f, p, kNow, "legacy only"));
  // Runs beside the Bloom segments of the same slices, and in a new one.
  f->Record(p, Hashes(rng, 50, false), kNow);
  f->Record(p, Hashes(rng, 50, false), kNow - 9 * kDay);
  ASSERT_NO_FATAL_FAILURE(ExpectSameEncoding(*f, p, kNow, "mixed"));
  ASSERT_NO_FATAL_FAILURE(
      ExpectSameEncoding(*f, p, kNow + 12 * kDay, "mixed, aged"));
}

TEST(FilterEncoderTest, EmptyAndUnknownUsers) {
  const FilterPolicy p = DefaultPolicy();
  UserFilter empty("k");
  ASSERT_NO_FATAL_FAILURE(ExpectSameEncoding(empty, p, kNow, "empty"));
  std::string fast, ref;
  EXPECT_EQ(EncodeFilter(nullptr, p, kNow, &fast),
            EncodeFilterParts(nullptr, p, kNow, &ref));
  EXPECT_EQ(fast, ref);
}

}  // namespace
}  // namespace exposure_filter::testing
