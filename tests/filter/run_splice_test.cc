// RunSplice (src/filter/run_splice.h): splicing fingerprints into a run's
// codes gives exactly RiceCode::Write of the union at the run's k, bit for
// bit, wherever the run lies in its words and whatever bits surround it.
#include "src/filter/run_splice.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "src/filter/fingerprint_run.h"
#include "src/filter/rice_model.h"

namespace exposure_filter {
namespace {

// `n` distinct values below u, ascending.
std::vector<uint32_t> Sample(std::mt19937_64& rng, uint64_t n, uint64_t u) {
  std::set<uint32_t> s;
  if (n * 2 <= u) {
    while (s.size() < n) s.insert(static_cast<uint32_t>(rng() % u));
    return {s.begin(), s.end()};
  }
  // Dense: drop u - n values from [0, u).
  std::set<uint32_t> drop;
  while (drop.size() < u - n) drop.insert(static_cast<uint32_t>(rng() % u));
  std::vector<uint32_t> out;
  for (uint64_t x = 0; x < u; ++x) {
    if (!drop.count(static_cast<uint32_t>(x))) {
      out.push_back(static_cast<uint32_t>(x));
    }
  }
  return out;
}

// Additions to `run` (none in it): 1..64 distinct values, among them the
// edges where the splice's cases differ (before the first code, after the
// last, next to a code on either side, 0, u - 1) whenever they are free.
std::vector<uint32_t> Additions(std::mt19937_64& rng,
                                const std::vector<uint32_t>& run, uint64_t u) {
  const std::set<uint32_t> in(run.begin(), run.end());
  std::set<uint32_t> add;
  const size_t want = std::min<uint64_t>(1 + rng() % 64, u - run.size());
  auto offer = [&](uint64_t x) {
    if (x < u && !in.count(static_cast<uint32_t>(x)) && add.size() < want) {
      add.insert(static_cast<uint32_t>(x));
    }
  };
  if (rng() % 2) offer(0);
  if (rng() % 2) offer(u - 1);
  if (!run.empty()) {
    if (run.front() > 0 && rng() % 2) offer(run.front() - 1);
    if (rng() % 2) offer(uint64_t{run.back()} + 1);
    for (int i = 0; i < 4; ++i) {
      const uint32_t f = run[rng() % run.size()];
      offer(uint64_t{f} + 1);
      if (f > 0) offer(f - 1);
    }
  }
  // Runs of adjacent additions inside one gap, and scattered ones.
  for (int tries = 0; add.size() < want && tries < 100000; ++tries) {
    const uint64_t x = rng() % u;
    offer(x);
    if (rng() % 4 == 0) offer(x + 1);
  }
  return {add.begin(), add.end()};
}

// Words holding a code at bit `offset`, every bit outside it random (what
// the neighbouring runs of a UserFilter allocation leave there), plus the
// readable word after the payload (FingerprintRunView's contract).
std::vector<uint64_t> Embed(std::mt19937_64& rng,
                            const std::vector<uint32_t>& fps,
                            const RiceCode& code, uint64_t offset) {
  const size_t words = (offset + code.bits + 63) / 64 + 2;
  std::vector<uint64_t> clean(words, 0);
  code.Write(fps, clean.data(), offset);
  std::vector<uint64_t> out(words);
  const uint64_t end = offset + code.bits;
  for (size_t w = 0; w < words; ++w) {
    // Noise only at bits [64 w, 64 w + 64) outside [offset, end).
    const uint64_t lo = uint64_t{w} * 64, hi = lo + 64;
    uint64_t noise = rng();
    if (offset < hi && end > lo) {
      const uint64_t from = std::max(offset, lo) - lo;
      const uint64_t to = std::min(end, hi) - lo;  // from < to <= 64
      const uint64_t span =
          to - from == 64 ? ~uint64_t{0} : ((uint64_t{1} << (to - from)) - 1);
      noise &= ~(span << from);
    }
    out[w] = clean[w] | noise;
  }
  return out;
}

TEST(RunSpliceTest, SplicedCodeIsTheUnionsCodeBitForBit) {
  std::mt19937_64 rng(20261126);
  int trials = 0, at_canonical = 0, past_1000 = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    const int b = 1 + static_cast<int>(rng() % 32);
    const uint64_t full = uint64_t{1} << b;
    // Prefix runs (U = 2^b, open runs) and any U (sealed runs).
    const uint64_t u = rng() % 2 ? full : 2 + rng() % (full - 1);
    const uint64_t n_max = std::min<uint64_t>(5000, u - 1);
    const uint64_t n = trial % 50 == 0 ? 0 : rng() % (n_max + 1);
    const std::vector<uint32_t> run = Sample(rng, n, u);
    const std::vector<uint32_t> add = Additions(rng, run, u);
    ASSERT_FALSE(add.empty());
    std::vector<uint32_t> all;
    std::set_union(run.begin(), run.end(), add.begin(), add.end(),
                   std::back_inserter(all));
    // The run's k: the canonical one mostly, also its neighbours and any.
    const int canonical = CanonicalRiceK(n == 0 ? 1 : n, u);
    int k = canonical;
    switch (rng() % 4) {
      case 0:
        k = std::max(0, canonical - 1);
        break;
      case 1:
        k = std::min(31, canonical + 1);
        break;
      case 2:
        k = static_cast<int>(rng() % 32);
        break;
    }
    at_canonical += k == canonical;
    past_1000 += n > 1000;
    const RiceCode code = RiceCode::At(run, k);
    const uint64_t src_offset = rng() % 200;
    const std::vector<uint64_t> src = Embed(rng, run, code, src_offset);
    const FingerprintRunView view(src.data(), src_offset,
                                  static_cast<uint32_t>(n), u, b, k,
                                  static_cast<uint32_t>(code.bits));
    const RiceCode want = RiceCode::At(all, k);
    const RunSplice splice(view, add);
    ASSERT_EQ(splice.count(), all.size());
    ASSERT_EQ(splice.bits(), want.bits)
        << "b=" << b << " u=" << u << " n=" << n << " k=" << k;
    const uint64_t dst_offset = rng() % 200;
    const size_t dst_words = (dst_offset + want.bits + 63) / 64 + 2;
    std::vector<uint64_t> got(dst_words, 0), expected(dst_words, 0);
    splice.Write(got.data(), dst_offset);
    want.Write(all, expected.data(), dst_offset);
    ASSERT_EQ(got, expected) << "b=" << b << " u=" << u << " n=" << n
                             << " k=" << k << " m=" << add.size();
    std::vector<uint32_t> decoded;
    FingerprintRunView(got.data(), dst_offset,
                       static_cast<uint32_t>(all.size()), u, b, k,
                       static_cast<uint32_t>(want.bits))
        .AppendFingerprints(&decoded);
    ASSERT_EQ(decoded, all);
    // Given the points LocateInRun finds, the same splice.
    std::vector<SplicePoint> at(add.size());
    LocateInRun(view, add, at.data());
    const RunSplice again(view, add, at);
    std::vector<uint64_t> got2(dst_words, 0);
    again.Write(got2.data(), dst_offset);
    ASSERT_EQ(got2, expected);
    ++trials;
  }
  // The generator covered what it should.
  EXPECT_EQ(trials, 1500);
  EXPECT_GT(at_canonical, 300);
  EXPECT_GT(past_1000, 300);
}

// LocateInRun's points claim exactly the run's members (Record's
// claimed-check), and every field of them is the point read off the
// fingerprints themselves: index = codes below x, and the code's gap, its
// unary part's start and the fingerprint before it. Few queries against long
// runs take the word skips (whose bounds must ignore the noise around the
// payload), many take the decode; queries sit on members, next to them, past
// the last and in long gaps, at any k.
TEST(RunSpliceTest, LocateClaimsExactlyTheMembers) {
  std::mt19937_64 rng(20261129);
  int sparse = 0;
  for (int trial = 0; trial < 800; ++trial) {
    const int b = 6 + static_cast<int>(rng() % 27);
    const uint64_t u = uint64_t{1} << b;
    const uint64_t n = rng() % std::min<uint64_t>(6001, u / 2);
    const std::vector<uint32_t> run = Sample(rng, n, u);
    const int canonical = CanonicalRiceK(n == 0 ? 1 : n, u);
    const int k = rng() % 4 == 0 ? static_cast<int>(rng() % 32) : canonical;
    const RiceCode code = RiceCode::At(run, k);
    const uint64_t offset = rng() % 128;
    const std::vector<uint64_t> src = Embed(rng, run, code, offset);
    const FingerprintRunView view(src.data(), offset, static_cast<uint32_t>(n),
                                  u, b, k, static_cast<uint32_t>(code.bits));
    // Where each code's unary part starts; [n]: the payload's end.
    std::vector<uint64_t> unary(n + 1, offset + n * k);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t d = run[i] - (i == 0 ? 0 : uint64_t{run[i - 1]} + 1);
      unary[i + 1] = unary[i] + (d >> k) + 1;
    }
    ASSERT_EQ(unary[n], offset + code.bits);
    std::vector<uint32_t> q(1 + rng() % (trial % 3 == 0 ? 400 : 20));
    for (uint32_t& x : q) {
      const uint64_t near =
          run.empty() ? rng() % u : uint64_t{run[rng() % run.size()]};
      switch (rng() % 4) {
        case 0:
          x = static_cast<uint32_t>(near);
          break;
        case 1:
          x = static_cast<uint32_t>(std::min(u - 1, near + 1));
          break;
        case 2:
          x = static_cast<uint32_t>(near == 0 ? 0 : near - 1);
          break;
        default:
          x = static_cast<uint32_t>(rng() % u);
      }
    }
    std::sort(q.begin(), q.end());
    sparse += n > q.size() * 64;
    std::vector<SplicePoint> at(q.size());
    LocateInRun(view, q, at.data());
    for (size_t j = 0; j < q.size(); ++j) {
      const size_t i =
          std::lower_bound(run.begin(), run.end(), q[j]) - run.begin();
      const uint64_t prev_next = i == 0 ? 0 : uint64_t{run[i - 1]} + 1;
      const SplicePoint& p = at[j];
      ASSERT_EQ(p.Claims(static_cast<uint32_t>(n), q[j]),
                std::binary_search(run.begin(), run.end(), q[j]))
          << "n=" << n << " b=" << b << " x=" << q[j];
      ASSERT_EQ(p.index, i) << "n=" << n << " k=" << k << " x=" << q[j];
      ASSERT_EQ(p.prev_next, prev_next) << "n=" << n << " x=" << q[j];
      ASSERT_EQ(p.unary_pos, unary[i]) << "n=" << n << " x=" << q[j];
      ASSERT_EQ(p.at_fp, i < n ? run[i] : 0) << "n=" << n << " x=" << q[j];
      ASSERT_EQ(p.at_q, i < n ? (run[i] - prev_next) >> k : 0)
          << "n=" << n << " x=" << q[j];
    }
  }
  // The word-skipping walk was exercised.
  EXPECT_GT(sparse, 300);
}

}  // namespace
}  // namespace exposure_filter
