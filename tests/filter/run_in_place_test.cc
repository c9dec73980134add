// FingerprintRunView::FromSerialized: a serialized run checked and read
// where it lies (FilterView's in-place runs), against FingerprintRun::Parse,
// the reference decoder that copies and decodes every code.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "exposure_filter/item_hash.h"
#include "gtest/gtest.h"
#include "src/filter/fingerprint_run.h"

namespace exposure_filter {
namespace {

// A serialized run placed in a buffer of words at byte offset `at` (so its
// payload starts at any bit offset), surrounded by random bytes: whatever
// lies outside the payload must not change the answer.
class PlacedRun {
 public:
  PlacedRun(const std::string& serialized, size_t at, std::mt19937_64& rng)
      : words_((at + serialized.size() + 7) / 8 + 2) {
    for (uint64_t& w : words_) w = rng();
    std::memcpy(reinterpret_cast<unsigned char*>(words_.data()) + at,
                serialized.data(), serialized.size());
    header_ = reinterpret_cast<const unsigned char*>(words_.data()) + at;
    bit_offset_ = 8 * (at + FingerprintRun::kHeaderBytes);
    payload_bytes_ = serialized.size() - FingerprintRun::kHeaderBytes;
  }
  absl::StatusOr<FingerprintRunView> View() const {
    return FingerprintRunView::FromSerialized(header_, words_.data(),
                                              bit_offset_, payload_bytes_);
  }

 private:
  std::vector<uint64_t> words_;
  const unsigned char* header_ = nullptr;
  uint64_t bit_offset_ = 0;
  size_t payload_bytes_ = 0;
};

std::vector<uint32_t> FingerprintsOf(const FingerprintRunView& v) {
  std::vector<uint32_t> out;
  v.AppendFingerprints(&out);
  return out;
}

// Same accept/reject decision as Parse, and when accepted the same run.
void ExpectSameAsParse(const std::string& s, std::mt19937_64& rng,
                       size_t* accepted) {
  const absl::StatusOr<FingerprintRun> ref = FingerprintRun::Parse(s);
  if (s.size() < FingerprintRun::kHeaderBytes) {
    // FromSerialized is handed a whole header (FilterView checks the run's
    // length first); Parse rejects the rest.
    EXPECT_FALSE(ref.ok());
    return;
  }
  for (size_t at = 0; at < 8; ++at) {
    const PlacedRun placed(s, at, rng);
    const absl::StatusOr<FingerprintRunView> v = placed.View();
    ASSERT_EQ(v.ok(), ref.ok())
        << "at " << at << ": in place " << v.status() << ", Parse "
        << ref.status() << ", " << s.size() << " bytes";
    if (!ref.ok()) {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
      // A payload too short for its codes is called that, whatever bytes
      // follow it (the messages differ only where Parse stops at a code
      // outside the universe and this check at the last fingerprint).
      if (absl::StrContains(ref.status().message(), "truncated")) {
        EXPECT_TRUE(absl::StrContains(v.status().message(), "truncated"))
            << "at " << at << ": " << v.status() << " vs " << ref.status();
      }
      continue;
    }
    ++*accepted;
    EXPECT_EQ(v->count(), ref->count());
    EXPECT_EQ(v->universe(), ref->universe());
    EXPECT_EQ(v->precision(), ref->precision());
    EXPECT_EQ(v->rice_k(), ref->rice_k());
    EXPECT_EQ(v->payload_bits(), ref->payload_bits());
    ASSERT_EQ(FingerprintsOf(*v), ref->Fingerprints()) << "at " << at;
  }
}

// Random payloads behind random but mostly in-range headers (as Parse's own
// garbage test): each is accepted by both or rejected by both.
TEST(RunInPlaceTest, GarbageIsAcceptedExactlyWhenParseAcceptsIt) {
  std::mt19937_64 rng(2026);
  size_t accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const size_t payload = rng() % 24;
    std::string s(FingerprintRun::kHeaderBytes + payload, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    s[0] = static_cast<char>(1 + rng() % 32);
    s[1] = static_cast<char>(rng() % 12);
    s[2] = static_cast<char>(rng() % 8);
    s[3] = s[4] = s[5] = 0;
    if (iter % 2 == 0) s[9] = s[8] = 0;  // small universes too
    ExpectSameAsParse(s, rng, &accepted);
  }
  EXPECT_GT(accepted, 100u);  // both branches are exercised
}

// Real runs, then every single-bit flip of the small ones and random flips,
// truncations and extensions of the large ones: the edits that reach the
// unary stream's count, the last fingerprint and the padding bits.
TEST(RunInPlaceTest, EditedRunsAreAcceptedExactlyWhenParseAcceptsThem) {
  std::mt19937_64 rng(15);
  size_t accepted = 0;
  for (size_t n : {1, 2, 7, 20, 333, 2000}) {
    for (uint64_t u :
         {uint64_t{n} * 3 + 1, uint64_t{n} * 100, uint64_t{1} << 32}) {
      std::vector<uint64_t> hashes(n);
      for (uint64_t& h : hashes) h = HashItemId(rng());
      const int b = u == (uint64_t{1} << 32) ? 32 : 31;
      const std::string good = FingerprintRun::Build(hashes, b, u)->Serialize();
      ExpectSameAsParse(good, rng, &accepted);
      const size_t bits = 8 * good.size();
      const size_t flips = n <= 20 ? bits : 300;
      for (size_t i = 0; i < flips; ++i) {
        std::string bad = good;
        const size_t bit = n <= 20 ? i : rng() % bits;
        bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
        ExpectSameAsParse(bad, rng, &accepted);
      }
      for (size_t cut = 1; cut <= 3 && cut < good.size(); ++cut) {
        ExpectSameAsParse(good.substr(0, good.size() - cut), rng, &accepted);
      }
      ExpectSameAsParse(good + std::string(1, '\0'), rng, &accepted);
      ExpectSameAsParse(good + "\x01", rng, &accepted);
    }
  }
  EXPECT_GT(accepted, 18u * 8);  // at least every unedited run
}

// An accepted in-place view answers batch checks like the parsed run.
TEST(RunInPlaceTest, InPlaceViewRemovesWhatTheParsedRunContains) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> hashes(2000);
  for (uint64_t& h : hashes) h = HashItemId(rng());
  const FingerprintRun run = *FingerprintRun::Build(hashes, 32, 200000);
  const std::string s = run.Serialize();
  std::vector<uint64_t> keys;
  std::vector<uint64_t> candidates;
  for (size_t i = 0; i < 5000; ++i) {
    candidates.push_back(i % 2 == 0 ? hashes[i % hashes.size()]
                                    : HashItemId(rng()));
    keys.push_back(
        FingerprintRun::SortKey(candidates.back(), static_cast<uint32_t>(i)));
  }
  CandidateSorter sorter;
  const BucketedCandidates bucketed = sorter.Bucket(keys);
  for (size_t at = 0; at < 8; ++at) {
    const PlacedRun placed(s, at, rng);
    const absl::StatusOr<FingerprintRunView> v = placed.View();
    ASSERT_TRUE(v.ok()) << v.status();
    std::vector<uint8_t> keep(candidates.size(), 1);
    v->RemoveContained(bucketed, keep.data());
    for (size_t i = 0; i < candidates.size(); ++i) {
      ASSERT_EQ(keep[i], !run.Contains(candidates[i])) << at << " " << i;
      ASSERT_EQ(v->Contains(candidates[i]), run.Contains(candidates[i]));
    }
  }
}

}  // namespace
}  // namespace exposure_filter
