// A run entry's model values (src/filter/run_entry_model.h): the memo gives
// exactly what the computation gives, through hits, evictions and keys it
// does not hold.
#include "src/filter/run_entry_model.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "src/filter/rice_model.h"

namespace exposure_filter {
namespace {

struct Key {
  uint64_t n;
  uint64_t u;
  int b;
  int64_t k_delta;
};

void ExpectComputed(const RunEntryModel& got, const Key& key) {
  const RunEntryModel want =
      ComputeRunEntryModel(key.n, key.u, key.b, key.k_delta);
  EXPECT_EQ(got.rice_k, want.rice_k)
      << "n=" << key.n << " u=" << key.u << " b=" << key.b
      << " k_delta=" << key.k_delta;
  EXPECT_EQ(got.rice_bits, want.rice_bits)
      << "n=" << key.n << " u=" << key.u << " b=" << key.b
      << " k_delta=" << key.k_delta;
  EXPECT_EQ(got.weight, want.weight)
      << "n=" << key.n << " u=" << key.u << " b=" << key.b
      << " k_delta=" << key.k_delta;
}

// The shapes the tables hold: open runs (U = 2^b) and sealed ones (U a
// multiple of 256, or any U below 2^b), k the canonical one or a neighbour
// (RiceCode::Choose tries k0 - 1 .. k0 + 1).
std::vector<Key> TableShapes() {
  std::vector<Key> keys;
  std::mt19937_64 rng(41);
  for (int i = 0; i < 3000; ++i) {
    const int b = 1 + static_cast<int>(rng() % 32);
    const uint64_t full = uint64_t{1} << b;
    uint64_t u = full;
    if (i % 3 == 1) u = 1 + rng() % full;
    if (i % 3 == 2 && full >= 512) u = 256 * (1 + rng() % (full / 256));
    const uint64_t n = 1 + rng() % std::min<uint64_t>(u, 1 << 16);
    const int64_t k_delta = static_cast<int64_t>(rng() % 3) - 1;
    if (CanonicalRiceK(n, u) + k_delta < 0) continue;
    keys.push_back({n, u, b, k_delta});
  }
  return keys;
}

TEST(RunEntryModelTest, ComputedValuesAreTheModels) {
  for (const Key& key : TableShapes()) {
    const RunEntryModel m =
        ComputeRunEntryModel(key.n, key.u, key.b, key.k_delta);
    ASSERT_EQ(m.rice_k, CanonicalRiceK(key.n, key.u) + key.k_delta);
    EXPECT_EQ(m.rice_bits, ExpectedRiceBits(key.n, key.u, m.rice_k));
    EXPECT_EQ(m.weight, ExpectedWeight(key.n, key.b, key.u));
  }
}

TEST(RunEntryModelTest, ExpectedWeightOfAPrefixRunIsItsCount) {
  EXPECT_EQ(ExpectedWeight(123, 20, uint64_t{1} << 20), 123);
  // U = 3 at b = 2: one fingerprint covers 2 of the 4 prefixes, two cover
  // 1, so E[c_f] = (2 * 1 + 1 * 4) / 4 = 1.5.
  EXPECT_EQ(ExpectedWeight(2, 2, 3), 3);
}

// Thousands of keys through 2 * kSets entries: every set evicts, and every
// answer, first or repeated, hit or recomputed, is the computed one.
TEST(RunEntryModelTest, MemoGivesTheComputedValuesThroughEvictions) {
  const std::vector<Key> keys = TableShapes();
  ASSERT_GT(keys.size(), 4 * RunEntryModelMemo::kSets);
  auto memo = std::make_unique<RunEntryModelMemo>();
  for (int pass = 0; pass < 2; ++pass) {
    for (const Key& key : keys) {
      ExpectComputed(memo->Get(key.n, key.u, key.b, key.k_delta), key);
    }
  }
  // A key asked again at once is a hit.
  for (const Key& key : keys) {
    memo->Get(key.n, key.u, key.b, key.k_delta);
    const uint64_t hits = memo->hits();
    ExpectComputed(memo->Get(key.n, key.u, key.b, key.k_delta), key);
    EXPECT_EQ(memo->hits(), hits + 1);
  }
}

// Keys that differ in one field each file apart: n, U, b and k_delta are
// all part of the key.
TEST(RunEntryModelTest, EveryFieldIsPartOfTheKey) {
  auto memo = std::make_unique<RunEntryModelMemo>();
  const Key base{1000, 1 << 20, 21, 0};
  const std::vector<Key> neighbours = {base,
                                       {1001, 1 << 20, 21, 0},
                                       {1000, (1 << 20) + 256, 21, 0},
                                       {1000, 1 << 20, 22, 0},
                                       {1000, 1 << 20, 21, 1}};
  for (const Key& key : neighbours) {
    ExpectComputed(memo->Get(key.n, key.u, key.b, key.k_delta), key);
  }
  EXPECT_EQ(memo->misses(), neighbours.size());
  for (const Key& key : neighbours) {
    ExpectComputed(memo->Get(key.n, key.u, key.b, key.k_delta), key);
  }
}

// Three keys of one set: the least recently used of the two ways is the
// one replaced, and a key evicted is recomputed exactly.
TEST(RunEntryModelTest, ASetKeepsItsTwoMostRecentKeys) {
  std::vector<Key> same_set;
  const size_t set = RunEntryModelMemo::SetOf(20, 1 << 24, 24, 0);
  for (uint64_t n = 20; same_set.size() < 3; ++n) {
    if (RunEntryModelMemo::SetOf(n, 1 << 24, 24, 0) == set) {
      same_set.push_back({n, 1 << 24, 24, 0});
    }
  }
  const Key& a = same_set[0];
  const Key& b = same_set[1];
  const Key& c = same_set[2];
  auto memo = std::make_unique<RunEntryModelMemo>();
  auto get = [&](const Key& key) {
    ExpectComputed(memo->Get(key.n, key.u, key.b, key.k_delta), key);
    return std::make_tuple(memo->hits(), memo->misses());
  };
  EXPECT_EQ(get(a), std::make_tuple(0u, 1u));
  EXPECT_EQ(get(b), std::make_tuple(0u, 2u));
  EXPECT_EQ(get(a), std::make_tuple(1u, 2u));  // a most recent, then b
  EXPECT_EQ(get(c), std::make_tuple(1u, 3u));  // replaces b
  EXPECT_EQ(get(a), std::make_tuple(2u, 3u));
  EXPECT_EQ(get(c), std::make_tuple(3u, 3u));
  EXPECT_EQ(get(b), std::make_tuple(3u, 4u));  // recomputed, replaces a
  EXPECT_EQ(get(a), std::make_tuple(3u, 5u));
}

// Keys no table holds are computed every time, neither hit nor filed.
TEST(RunEntryModelTest, KeysOutsideThePackedRangesAreComputed) {
  auto memo = std::make_unique<RunEntryModelMemo>();
  const std::vector<Key> outside = {
      {uint64_t{1} << 32, uint64_t{1} << 32, 32, 0},  // n >= 2^32
      {5, 5, 3, 32},                                  // k_delta >= 32
      {1, (uint64_t{1} << 32) + 1, 32, 0},            // U > 2^32
  };
  for (const Key& key : outside) {
    EXPECT_EQ(RunEntryModelMemo::SetOf(key.n, key.u, key.b, key.k_delta),
              RunEntryModelMemo::kSets);
    ExpectComputed(memo->Get(key.n, key.u, key.b, key.k_delta), key);
    ExpectComputed(memo->Get(key.n, key.u, key.b, key.k_delta), key);
  }
  EXPECT_EQ(memo->hits(), 0u);
  EXPECT_EQ(memo->misses(), 0u);
}

}  // namespace
}  // namespace exposure_filter
