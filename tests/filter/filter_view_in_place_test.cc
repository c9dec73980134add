// FilterView reads format 2's runs in the caller's bytes: the answers must
// not depend on where those bytes sit (the runs' payloads start at any bit
// of a word), and no read may leave them (the buffers below end exactly at
// the filter's last byte, so ASan sees any read past it).
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "exposure_filter/filter_format.h"
#include "exposure_filter/filter_view.h"
#include "exposure_filter/item_hash.h"
#include "gtest/gtest.h"
#include "src/filter/claim_index.h"
#include "src/filter/filter_encoder.h"
#include "src/filter/filter_policy.h"
#include "src/filter/user_filter.h"

namespace exposure_filter {
namespace {

constexpr int64_t kDay = 24 * 3600 * 1000LL;
constexpr int64_t kNow = 1795392000000LL;

// A heavy user over most of the window, written 20 items per call at
// 25 event days: runs (sealed and open) in 5 or 6 slices, no Bloom.
UserFilter HeavyUser(const FilterPolicy& p, uint64_t seed) {
  UserFilter f;
  std::mt19937_64 rng(seed);
  for (int call = 0; call < 150; ++call) {
    std::vector<uint64_t> hashes;
    for (int i = 0; i < 20; ++i) hashes.push_back(HashItemId(rng() % 1000000));
    f.Record(p, hashes, kNow - (25 - call / 6) * kDay);
  }
  return f;
}

// The filter's bytes copied to offset `at` of an allocation that ends with
// them: a read past the filter's end is a heap overflow under ASan.
class ExactBuffer {
 public:
  ExactBuffer(const std::string& bytes, size_t at)
      : data_(new char[at + bytes.size()]), size_(bytes.size()), at_(at) {
    std::memset(data_.get(), 0x5a, at);
    std::memcpy(data_.get() + at, bytes.data(), bytes.size());
  }
  absl::string_view bytes() const {
    return absl::string_view(data_.get() + at_, size_);
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_;
  size_t at_;
};

TEST(FilterViewInPlaceTest, AnswersAsTheServerAtEveryByteAlignment) {
  const FilterPolicy p = *FilterPolicy::Create({});
  for (uint64_t seed : {1, 2, 3}) {
    const UserFilter f = HeavyUser(p, seed);
    std::string bytes;
    EncodeFilter(&f, p, kNow, &bytes);
    std::vector<uint64_t> ids;
    std::vector<uint8_t> server;
    for (uint64_t id = 0; id < 20000; ++id) {
      ids.push_back(id);
      server.push_back(!f.MayContain(p, kNow, HashItemId(id)));
    }
    for (size_t at = 0; at < 16; ++at) {
      const ExactBuffer buffer(bytes, at);
      absl::StatusOr<FilterView> v = FilterView::Parse(buffer.bytes());
      ASSERT_TRUE(v.ok()) << v.status();
      ASSERT_GE(v->runs().size(), 5u) << "want several runs";
      EXPECT_TRUE(v->segments().empty());
      std::vector<uint8_t> keep(ids.size());
      v->KeepMaskIds(ids, keep.data());
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_EQ(keep[i], server[i]) << "seed " << seed << " at " << at;
        ASSERT_EQ(v->MayContainId(ids[i]), !server[i]);
      }
    }
  }
}

// The view's copies keep what Parse copied (the run that could not be read
// in place) after the view they were copied from is gone.
TEST(FilterViewInPlaceTest, CopiesOutliveTheOriginalView) {
  const FilterPolicy p = *FilterPolicy::Create({});
  const UserFilter f = HeavyUser(p, 9);
  std::string bytes;
  EncodeFilter(&f, p, kNow, &bytes);
  for (size_t at = 0; at < 8; ++at) {
    const ExactBuffer buffer(bytes, at);
    std::optional<FilterView> original(*FilterView::Parse(buffer.bytes()));
    const FilterView copy = *original;
    original.reset();
    for (uint64_t id = 0; id < 20000; ++id) {
      ASSERT_EQ(copy.MayContainId(id), f.MayContain(p, kNow, HashItemId(id)))
          << id;
    }
  }
}

// Runs filed once (FileRuns) answer every later batch as the view does,
// the aged view's own filing included, at every byte alignment of the
// bytes; a view with no runs files nothing.
TEST(FilterViewInPlaceTest, FiledRunsAnswerAsTheView) {
  const FilterPolicy p = *FilterPolicy::Create({});
  std::vector<uint64_t> hashes;
  // A fifth of the ids HeavyUser draws from: ~600 of its items.
  for (uint64_t id = 0; id < 200000; ++id) hashes.push_back(HashItemId(id));
  for (uint64_t seed : {4, 5}) {
    const UserFilter f = HeavyUser(p, seed);
    std::string bytes;
    EncodeFilter(&f, p, kNow, &bytes);
    for (size_t at : {0, 3, 7}) {
      const ExactBuffer buffer(bytes, at);
      const FilterView full = *FilterView::Parse(buffer.bytes());
      // The same filter after its two oldest slices aged out.
      const FilterView aged =
          full.WithSlicesEndingAfter(full.slices()[1].end_ms);
      ASSERT_LT(aged.runs().size(), full.runs().size());
      for (const FilterView* v : {&full, &aged}) {
        ClaimIndex index;
        ASSERT_TRUE(v->FileRuns(&index, hashes.size()));
        std::vector<uint8_t> want(hashes.size());
        std::vector<uint8_t> got(hashes.size());
        v->KeepMaskHashes(hashes, want.data());
        // Twice: the index is read, never used up.
        for (int round = 0; round < 2; ++round) {
          std::fill(got.begin(), got.end(), 7);
          v->KeepMaskHashes(hashes, got.data(), index);
          ASSERT_EQ(got, want) << "seed " << seed << " at " << at;
        }
        // Some removed, some kept: the comparison saw both answers.
        EXPECT_GT(std::count(want.begin(), want.end(), 0), 200);
        EXPECT_GT(std::count(want.begin(), want.end(), 1), 100000);
      }
    }
  }
  ClaimIndex index;
  EXPECT_FALSE(FilterView().FileRuns(&index, 5000));
  // One small run: its bit set is cheaper than the probe, nothing filed.
  UserFilter light;
  std::vector<uint64_t> few(hashes.begin(), hashes.begin() + 100);
  light.Record(p, few, kNow);
  std::string bytes;
  EncodeFilter(&light, p, kNow, &bytes);
  const FilterView v = *FilterView::Parse(bytes);
  ASSERT_EQ(v.runs().size(), 1u);
  EXPECT_FALSE(v.FileRuns(&index, 5000));
}

}  // namespace
}  // namespace exposure_filter
