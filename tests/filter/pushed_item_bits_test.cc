// The pushed-item bits' kernels must pass exactly the kept candidates whose
// bit is set, and RemovePushedItems must clear exactly the kept candidates
// the pushed set holds, with either kernel: at the lengths around the
// vector kernel's 16 lanes (its tail goes through the portable loop) and
// around RemovePushedItems' chunks, with keep[] partly cleared on entry,
// every bit set, and an empty set behind set bits.
#include "src/filter/pushed_item_bits.h"

#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "src/filter/probe_kernel.h"

namespace exposure_filter {
namespace {

constexpr size_t kLengths[] = {0,  1,  7,  8,  9,    15,  16,
                               17, 31, 32, 33, 4999, 5000};

// Pushed items and candidates: every third candidate pushed, the rest
// fresh; keep[] 1 with probability 3/4 (the share a filter's check leaves
// is anywhere in between; cleared entries must stay cleared).
struct PushedCase {
  PushedItemBits bits;
  absl::flat_hash_set<uint64_t> pushed;
  std::vector<uint64_t> hashes;
  std::vector<uint8_t> keep;
};

PushedCase MakeCase(size_t items, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  PushedCase c;
  std::vector<uint64_t> pushed(items);
  for (uint64_t& h : pushed) {
    h = rng();
    c.pushed.insert(h);
    c.bits.Add(h);
  }
  for (size_t i = 0; i < n; ++i) {
    c.hashes.push_back(i % 3 == 0 && items > 0 ? pushed[rng() % items] : rng());
    c.keep.push_back(rng() % 4 != 0);
  }
  return c;
}

std::vector<std::pair<const char*, PushedCandidatesFn>> Kernels() {
  std::vector<std::pair<const char*, PushedCandidatesFn>> kernels = {
      {"portable", PushedCandidatesPortable},
      {"active", ActivePushedCandidates()}};
  if (Avx512BwVlSupported()) {
    kernels.push_back({"avx512", PushedCandidatesAvx512});
  }
  return kernels;
}

// The definition: kept, and the word of the top 6 hash bits has the bit of
// the next 6.
std::vector<uint32_t> ExpectedCandidates(const PushedCase& c) {
  std::vector<uint32_t> expected;
  for (size_t i = 0; i < c.hashes.size(); ++i) {
    const uint64_t h = c.hashes[i];
    if (c.keep[i] == 1 && (c.bits.words[h >> 58] >> ((h >> 52) & 63)) & 1) {
      expected.push_back(static_cast<uint32_t>(i));
    }
  }
  return expected;
}

std::vector<uint32_t> Candidates(PushedCandidatesFn find, const PushedCase& c) {
  std::vector<uint32_t> found(c.hashes.size());
  found.resize(find(c.bits, c.hashes.data(), c.hashes.size(), c.keep.data(),
                    found.data()));
  return found;
}

// What must be left: the kept candidates the set does not hold.
std::vector<uint8_t> ExpectedKeep(const PushedCase& c) {
  std::vector<uint8_t> keep = c.keep;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (c.pushed.contains(c.hashes[i])) keep[i] = 0;
  }
  return keep;
}

std::vector<uint8_t> Removed(PushedCandidatesFn find, const PushedCase& c) {
  std::vector<uint8_t> keep = c.keep;
  RemovePushedItems(c.bits, c.pushed, c.hashes.data(), c.hashes.size(),
                    keep.data(), find);
  return keep;
}

TEST(PushedItemBitsTest, KernelsPassTheKeptCandidatesWhoseBitIsSet) {
  for (size_t items : {1, 200, 3000}) {
    for (size_t n : kLengths) {
      const PushedCase c = MakeCase(items, n, 1000 * items + n);
      const std::vector<uint32_t> expected = ExpectedCandidates(c);
      if (n == 5000) {
        // Teeth: kept candidates pass, pushed or not, and some fail.
        ASSERT_GT(expected.size(), n / 8) << items;
        ASSERT_LT(expected.size(), n * 3 / 4) << items;
      }
      for (const auto& [name, find] : Kernels()) {
        EXPECT_EQ(Candidates(find, c), expected)
            << name << " items=" << items << " n=" << n;
      }
    }
  }
}

TEST(PushedItemBitsTest, EveryBitSetPassesEveryKeptCandidate) {
  for (size_t n : kLengths) {
    PushedCase c = MakeCase(200, n, n);
    c.bits.words.fill(~uint64_t{0});
    std::vector<uint32_t> kept;
    for (size_t i = 0; i < n; ++i) {
      if (c.keep[i] == 1) kept.push_back(static_cast<uint32_t>(i));
    }
    for (const auto& [name, find] : Kernels()) {
      EXPECT_EQ(Candidates(find, c), kept) << name << " n=" << n;
      EXPECT_EQ(Removed(find, c), ExpectedKeep(c)) << name << " n=" << n;
    }
  }
}

TEST(PushedItemBitsTest, RemovesExactlyTheKeptCandidatesPushed) {
  for (size_t items : {1, 200, 3000}) {
    for (size_t n : kLengths) {
      const PushedCase c = MakeCase(items, n, 7 * items + n);
      const std::vector<uint8_t> expected = ExpectedKeep(c);
      if (n == 5000) {
        size_t removed = 0;
        for (size_t i = 0; i < n; ++i) removed += c.keep[i] != expected[i];
        ASSERT_GT(removed, n / 5) << items;  // the check has teeth
      }
      for (const auto& [name, find] : Kernels()) {
        EXPECT_EQ(Removed(find, c), expected)
            << name << " items=" << items << " n=" << n;
      }
    }
  }
}

// Bits stay set after the items behind them are dropped (aged out) until
// the set is cleared: they cost probes, never a removal.
TEST(PushedItemBitsTest, BitsOfDroppedItemsRemoveNothing) {
  for (size_t n : kLengths) {
    PushedCase c = MakeCase(200, n, 3 * n);
    c.pushed.clear();
    for (const auto& [name, find] : Kernels()) {
      EXPECT_EQ(Removed(find, c), c.keep) << name << " n=" << n;
    }
  }
}

TEST(PushedItemBitsTest, ClearUnsetsEveryBit) {
  PushedCase c = MakeCase(200, 5000, 11);
  c.bits.Clear();
  for (const auto& [name, find] : Kernels()) {
    EXPECT_TRUE(Candidates(find, c).empty()) << name;
  }
}

}  // namespace
}  // namespace exposure_filter
