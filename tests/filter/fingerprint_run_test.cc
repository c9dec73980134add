#include "src/filter/fingerprint_run.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "exposure_filter/filter_format.h"
#include "exposure_filter/item_hash.h"
#include "gtest/gtest.h"
#include "src/filter/run_splice.h"

namespace exposure_filter {
namespace {

using Options = FingerprintRun::Options;

constexpr size_t kSizes[] = {0, 1, 20, 333, 2000, 50000};

std::vector<uint64_t> RandomHashes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) x = HashItemId(rng());
  return h;
}

// U for an FP target: the run holds ~n fingerprints of U.
uint64_t UniverseFor(size_t n, double eps) {
  return std::max<uint64_t>(2, std::llround(std::max<size_t>(n, 1) / eps));
}

FingerprintRun MustBuild(const std::vector<uint64_t>& hashes, int b, uint64_t u,
                         Options options = {}) {
  absl::StatusOr<FingerprintRun> run =
      FingerprintRun::Build(hashes, b, u, options);
  EXPECT_TRUE(run.ok()) << run.status();
  return *std::move(run);
}

// Candidates: every other one recorded, the rest fresh, plus duplicates, so
// both outcomes and repeated fingerprints meet the merge.
std::vector<uint64_t> MixedCandidates(const std::vector<uint64_t>& recorded,
                                      size_t m, uint64_t seed) {
  std::vector<uint64_t> c = RandomHashes(m, seed);
  for (size_t i = 0; i < m && !recorded.empty(); i += 2) {
    c[i] = recorded[(i * 7919) % recorded.size()];
  }
  for (size_t i = 3; i < m; i += 11) c[i] = c[i - 3];
  return c;
}

TEST(FingerprintRunTest, NoFalseNegatives) {
  for (size_t n : kSizes) {
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      const std::vector<uint64_t> items = RandomHashes(n, seed * 1000 + n);
      // Tight (1%), loose (0.143%) and the plain 20-bit prefix.
      for (const auto& [b, u] :
           {std::pair<int, uint64_t>{32, UniverseFor(n, 0.01)},
            {32, UniverseFor(n, 0.00143)},
            {20, uint64_t{1} << 20}}) {
        // Single lookups through the skip index (without it a lookup is
        // O(n): 50,000^2 decodes per run), and the batch merge without it.
        const FingerprintRun indexed = MustBuild(items, b, u, {64});
        for (uint64_t h : items) {
          ASSERT_TRUE(indexed.Contains(h))
              << "n=" << n << " seed=" << seed << " U=" << u;
        }
        EXPECT_LE(indexed.count(), n);
        const FingerprintRun plain = MustBuild(items, b, u);
        std::vector<uint32_t> fps(n);
        for (size_t i = 0; i < n; ++i) fps[i] = plain.FingerprintOf(items[i]);
        std::sort(fps.begin(), fps.end());
        std::vector<uint8_t> member(n);
        plain.ContainsSorted(fps, member.data());
        ASSERT_EQ(std::count(member.begin(), member.end(), 1),
                  static_cast<ptrdiff_t>(n))
            << "n=" << n << " seed=" << seed << " U=" << u;
      }
    }
  }
}

// Exact FP of a fresh uniform hash: fingerprint f is hit by the prefixes x
// with floor(x U / 2^b) = f, i.e. x in [ceil(f 2^b / U), ceil((f+1) 2^b / U)).
double ExactFpRate(const FingerprintRun& run) {
  const int b = run.precision();
  const uint64_t u = run.universe();
  auto first_prefix = [&](uint64_t f) {
    return ((f << b) + u - 1) / u;  // f < 2^32, b <= 32: no overflow
  };
  double hits = 0;
  for (uint32_t f : run.Fingerprints()) {
    hits += static_cast<double>(first_prefix(f + 1) - first_prefix(f));
  }
  return hits / std::ldexp(1.0, b);
}

// N fresh candidates hit Binomial(N, p) times, p the exact rate above (64-bit
// hashes of fresh ids collide with a recorded one with probability ~n/2^64).
// Its sd is sqrt(N p (1 - p)) < sqrt(N p); we take N so that N p >= 2,000 and
// accept |hits - N p| <= 4 sqrt(N p): +-9% of the mean, a 4-sigma event
// (two-sided ~6e-5) for a correct run, while an encoder that loses or
// invents fingerprints, or a universe off by 10%, lands outside.
TEST(FingerprintRunTest, FpRateIsDistinctOverUniverseWithinFourSigma) {
  for (size_t n : {20, 333, 2000, 50000}) {
    for (double eps : {0.01, 0.00143}) {
      for (uint64_t seed : {11, 12, 13}) {
        const FingerprintRun run =
            MustBuild(RandomHashes(n, seed * 7 + n), 32, UniverseFor(n, eps));
        const double p = ExactFpRate(run);
        // Collisions only remove fingerprints: p <= n / U, and ~n^2/2U lost.
        EXPECT_NEAR(p, run.FpRate(), run.FpRate() * 1e-3 + 1e-12);
        const size_t trials = static_cast<size_t>(std::ceil(2000 / p));
        std::vector<uint32_t> fps(trials);
        std::mt19937_64 rng(seed * 31 + n);
        for (uint32_t& f : fps) f = run.FingerprintOf(HashItemId(rng()));
        std::sort(fps.begin(), fps.end());
        std::vector<uint8_t> member(trials);
        run.ContainsSorted(fps, member.data());
        const double hits = std::count(member.begin(), member.end(), 1);
        const double mean = trials * p;
        EXPECT_LE(std::abs(hits - mean), 4 * std::sqrt(mean))
            << "n=" << n << " eps=" << eps << " hits=" << hits
            << " expected=" << mean;
      }
    }
  }
}

TEST(FingerprintRunTest, ContainsSortedMatchesContainsForEveryCandidate) {
  for (size_t n : kSizes) {
    const std::vector<uint64_t> items = RandomHashes(n, 50 + n);
    // A small universe (many hits among fresh candidates) and a 1% one.
    for (uint64_t u : {UniverseFor(n, 0.3), UniverseFor(n, 0.01)}) {
      for (uint32_t stride : {0u, 2u, 64u, 128u}) {
        const FingerprintRun run = MustBuild(items, 32, u, {stride});
        const std::vector<uint64_t> cands = MixedCandidates(items, 5000, n + u);
        std::vector<uint32_t> fps(cands.size());
        for (size_t i = 0; i < cands.size(); ++i) {
          fps[i] = run.FingerprintOf(cands[i]);
        }
        std::sort(fps.begin(), fps.end());
        std::vector<uint8_t> member(fps.size(), 7);
        run.ContainsSorted(fps, member.data());
        for (size_t i = 0; i < fps.size(); ++i) {
          ASSERT_EQ(member[i], run.ContainsFingerprint(fps[i]) ? 1 : 0)
              << "n=" << n << " stride=" << stride << " i=" << i;
        }
        // The service's shape: tagged keys, keep[] cleared for members,
        // entries already cleared stay cleared.
        std::vector<uint64_t> keys(cands.size());
        for (size_t i = 0; i < cands.size(); ++i) {
          keys[i] = FingerprintRun::SortKey(cands[i], static_cast<uint32_t>(i));
        }
        std::sort(keys.begin(), keys.end());
        std::vector<uint8_t> keep(cands.size(), 1);
        for (size_t i = 0; i < keep.size(); i += 13) keep[i] = 0;
        std::vector<uint8_t> expected = keep;
        for (size_t i = 0; i < cands.size(); ++i) {
          if (run.Contains(cands[i])) expected[i] = 0;
        }
        run.RemoveContainedSorted(keys, keep.data());
        ASSERT_EQ(keep, expected) << "n=" << n << " stride=" << stride;
      }
    }
  }
}

TEST(FingerprintRunTest, SkipIndexDoesNotChangeSingleLookups) {
  const std::vector<uint64_t> items = RandomHashes(50000, 3);
  const uint64_t u = UniverseFor(50000, 0.05);
  const FingerprintRun plain = MustBuild(items, 32, u);
  const FingerprintRun indexed = MustBuild(items, 32, u, {64});
  EXPECT_EQ(plain, indexed);
  EXPECT_EQ(indexed.heap_bytes() - plain.heap_bytes(),
            (indexed.count() + 63) / 64 * 8);
  // Every value of the universe's first 20,000 (members, the values between,
  // before the first) and 20,000 random ones.
  std::mt19937_64 rng(5);
  for (uint32_t i = 0; i < 40000; ++i) {
    const uint32_t fp = i < 20000 ? i : static_cast<uint32_t>(rng() % u);
    ASSERT_EQ(plain.ContainsFingerprint(fp), indexed.ContainsFingerprint(fp))
        << fp;
  }
  const std::vector<uint32_t> all = plain.Fingerprints();
  for (uint32_t f : {all.front(), all.back(), all.back() + 1,
                     static_cast<uint32_t>(u - 1)}) {
    EXPECT_EQ(plain.ContainsFingerprint(f), indexed.ContainsFingerprint(f));
  }
}

TEST(FingerprintRunTest, RetruncateEqualsBuildingAtTheSmallerUniverse) {
  for (size_t n : kSizes) {
    const std::vector<uint64_t> items = RandomHashes(n, 70 + n);
    // U = 2^20 * 3 * 5 = 15,728,640: divisors of several shapes.
    const uint64_t u = uint64_t{15} << 20;
    const FingerprintRun run = MustBuild(items, 32, u);
    for (uint64_t factor : {1, 2, 3, 5, 16, 1024, 15 << 10, 15 << 19}) {
      absl::StatusOr<FingerprintRun> small = run.Retruncate(u / factor);
      ASSERT_TRUE(small.ok()) << small.status();
      EXPECT_EQ(*small, MustBuild(items, 32, u / factor))
          << "n=" << n << " factor=" << factor;
    }
    // U = 2^b: retruncating to 2^(b-j) is taking a shorter prefix, with
    // heavy deduplication at b = 12.
    const FingerprintRun prefixes = MustBuild(items, 12, 1 << 12);
    absl::StatusOr<FingerprintRun> shorter = prefixes.Retruncate(1 << 5);
    ASSERT_TRUE(shorter.ok());
    EXPECT_EQ(*shorter, MustBuild(items, 12, 1 << 5));
  }
}

TEST(FingerprintRunTest, RetruncateRejectsANonDivisor) {
  const FingerprintRun run = MustBuild(RandomHashes(100, 1), 32, 10000);
  EXPECT_EQ(run.Retruncate(3000).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(run.Retruncate(1).ok());
  EXPECT_FALSE(run.Retruncate(20000).ok());
}

TEST(FingerprintRunTest, MergeEqualsBuildingTheUnion) {
  for (size_t n : kSizes) {
    std::vector<uint64_t> a = RandomHashes(n, 90 + n);
    std::vector<uint64_t> b = RandomHashes(n / 2 + 1, 91 + n);
    // Overlap: a third of a is in b too.
    for (size_t i = 0; i < a.size() && i < b.size(); i += 3) b[i] = a[i];
    std::vector<uint64_t> both = a;
    both.insert(both.end(), b.begin(), b.end());
    const uint64_t u = UniverseFor(n + 1, 0.01);
    absl::StatusOr<FingerprintRun> merged =
        FingerprintRun::Merge(MustBuild(a, 32, u), MustBuild(b, 32, u));
    ASSERT_TRUE(merged.ok()) << merged.status();
    EXPECT_EQ(*merged, MustBuild(both, 32, u)) << "n=" << n;
  }
}

TEST(FingerprintRunTest, MergeRejectsDifferentShapes) {
  const std::vector<uint64_t> h = RandomHashes(10, 1);
  EXPECT_FALSE(
      FingerprintRun::Merge(MustBuild(h, 32, 1000), MustBuild(h, 32, 1001))
          .ok());
  EXPECT_FALSE(
      FingerprintRun::Merge(MustBuild(h, 31, 1000), MustBuild(h, 32, 1000))
          .ok());
}

TEST(FingerprintRunTest, BuildValidatesPrecisionUniverseAndStride) {
  const std::vector<uint64_t> h = RandomHashes(10, 1);
  EXPECT_FALSE(FingerprintRun::Build(h, 0, 2).ok());
  EXPECT_FALSE(FingerprintRun::Build(h, 33, 2).ok());
  EXPECT_FALSE(FingerprintRun::Build(h, 8, 1).ok());
  EXPECT_FALSE(FingerprintRun::Build(h, 8, 257).ok());
  EXPECT_TRUE(FingerprintRun::Build(h, 8, 256).ok());
  EXPECT_TRUE(FingerprintRun::Build(h, 1, 2).ok());
  EXPECT_TRUE(FingerprintRun::Build(h, 32, uint64_t{1} << 32).ok());
  EXPECT_FALSE(FingerprintRun::Build(h, 32, 1000, {3}).ok());
  EXPECT_FALSE(FingerprintRun::Build(h, 32, 1000, {1}).ok());
  EXPECT_FALSE(FingerprintRun::FromFingerprints({5, 1000}, 32, 1000).ok());
}

// Pins the encoding, derived by hand from the header comment's definition:
// gaps 3, 0, 5, 889 (mean (1000 - 4) / 4 = 249, 2^k ~= 172.6: k in 6..8,
// bits 41 / 38 / 39, so k = 7). Remainders 3, 0, 5, 121 at bits 0, 7, 14,
// 21 (LSB first: bits 0, 1, 14, 16, 21, 24..27 set), then the quotients
// 0, 0, 0, 6 in unary: ones at bits 28, 29, 30 and 37. Bytes 03 40 21 7f 20.
TEST(FingerprintRunTest, GoldenBytes) {
  absl::StatusOr<FingerprintRun> run =
      FingerprintRun::FromFingerprints({900, 3, 10, 4, 10}, 16, 1000);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->rice_k(), 7);
  EXPECT_EQ(run->payload_bits(), 38u);
  EXPECT_EQ(run->encoded_bytes(), 5u);
  const std::string golden(
      "\x10\x07\x04\x00\x00\x00\xe7\x03\x00\x00"
      "\x03\x40\x21\x7f\x20",
      15);
  EXPECT_EQ(run->Serialize(), golden);
}

// The chosen k is the best of all 32, not just of k0 - 1 .. k0 + 1.
TEST(FingerprintRunTest, RiceParameterIsTheShortest) {
  for (size_t n : {1, 2, 20, 64, 65, 333, 2000, 50000}) {
    for (double eps : {0.3, 0.01, 0.00143, 1e-4}) {
      const FingerprintRun run =
          MustBuild(RandomHashes(n, n + 5), 32, UniverseFor(n, eps));
      const std::vector<uint32_t> f = run.Fingerprints();
      uint64_t best = UINT64_MAX;
      for (int k = 0; k < 32; ++k) {
        uint64_t bits = f.size() * (k + 1), next = 0;
        for (uint32_t x : f) {
          bits += (x - next) >> k;
          next = uint64_t{x} + 1;
        }
        best = std::min(best, bits);
      }
      EXPECT_EQ(run.payload_bits(), best) << "n=" << n << " eps=" << eps;
    }
  }
}

// The Rice cost band of the header comment: log2(U/n) + 1.44 .. + 1.56 for
// the best k and eps <= 5% (geometric gaps; at n = 50,000 the sample mean of
// the gap cost is within ~0.01 bits of its expectation).
TEST(FingerprintRunTest, BitsPerItemNearTheBound) {
  for (double eps : {0.05, 0.01, 0.00143, 1e-4}) {
    const size_t n = 50000;
    const FingerprintRun run =
        MustBuild(RandomHashes(n, 4), 32, UniverseFor(n, eps));
    const double bits = static_cast<double>(run.payload_bits()) / run.count();
    const double log_mu = std::log2(static_cast<double>(run.universe()) /
                                    static_cast<double>(run.count()));
    EXPECT_LE(bits, log_mu + 1.58) << eps;
    EXPECT_GE(bits, log_mu + 1.42) << eps;
  }
}

TEST(FingerprintRunTest, SerializeParseRoundTrips) {
  for (size_t n : kSizes) {
    const std::vector<uint64_t> items = RandomHashes(n, 200 + n);
    const FingerprintRun run = MustBuild(items, 32, UniverseFor(n, 0.01));
    const std::string bytes = run.Serialize();
    EXPECT_EQ(bytes.size(), FingerprintRun::kHeaderBytes + run.encoded_bytes());
    absl::StatusOr<FingerprintRun> back = FingerprintRun::Parse(bytes, {64});
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, run);
    for (uint64_t h : items) ASSERT_TRUE(back->Contains(h));
  }
}

TEST(FingerprintRunTest, ParseRejectsEveryTruncation) {
  for (size_t n : {1, 20, 333}) {
    const std::string bytes =
        MustBuild(RandomHashes(n, 300 + n), 32, UniverseFor(n, 0.01))
            .Serialize();
    for (size_t len = 0; len < bytes.size(); ++len) {
      EXPECT_FALSE(FingerprintRun::Parse(bytes.substr(0, len)).ok())
          << "n=" << n << " len=" << len;
    }
  }
}

TEST(FingerprintRunTest, ParseRejectsTrailingBytesAndPaddingBits) {
  const std::string bytes =
      MustBuild(RandomHashes(333, 9), 32, UniverseFor(333, 0.01)).Serialize();
  EXPECT_FALSE(FingerprintRun::Parse(bytes + std::string(1, '\0')).ok());
  EXPECT_FALSE(FingerprintRun::Parse(bytes + "\x01").ok());
  // The golden run uses 38 of 40 bits: set an unused one.
  std::string golden =
      FingerprintRun::FromFingerprints({3, 4, 10, 900}, 16, 1000)->Serialize();
  ASSERT_TRUE(FingerprintRun::Parse(golden).ok());
  golden.back() = static_cast<char>(golden.back() | 0x80);
  EXPECT_FALSE(FingerprintRun::Parse(golden).ok());
}

TEST(FingerprintRunTest, ParseRejectsBadHeaders) {
  const std::string good =
      FingerprintRun::FromFingerprints({3, 4, 10, 900}, 16, 1000)->Serialize();
  auto with = [&](size_t at, unsigned char v) {
    std::string s = good;
    s[at] = static_cast<char>(v);
    return s;
  };
  EXPECT_FALSE(FingerprintRun::Parse(with(0, 0)).ok());     // b = 0
  EXPECT_FALSE(FingerprintRun::Parse(with(0, 33)).ok());    // b = 33
  EXPECT_FALSE(FingerprintRun::Parse(with(0, 9)).ok());     // U > 2^9
  EXPECT_FALSE(FingerprintRun::Parse(with(1, 32)).ok());    // k = 32
  EXPECT_FALSE(FingerprintRun::Parse(with(2, 5)).ok());     // 5 codes, 4 there
  EXPECT_FALSE(FingerprintRun::Parse(with(2, 3)).ok());     // trailing code
  EXPECT_FALSE(FingerprintRun::Parse(with(6, 0x83)).ok());  // f=900 >= U=900
  // 2^32 - 1 codes claimed by a 15-byte input: rejected before allocating.
  std::string huge = good;
  huge[0] = 32;  // b = 32, U = 2^32: the claim passes the range checks
  for (int i = 2; i < 10; ++i) huge[i] = '\xff';
  // The size check before the allocation is the one that answers (the
  // decode loop would reject it too, after allocating a 512 MiB skip index).
  const absl::Status status = FingerprintRun::Parse(huge, {64}).status();
  EXPECT_NE(status.message().find("need more than"), std::string::npos)
      << status;
  // An empty run carries no payload.
  std::string empty =
      FingerprintRun::FromFingerprints({}, 16, 1000)->Serialize();
  ASSERT_TRUE(FingerprintRun::Parse(empty).ok());
  EXPECT_FALSE(FingerprintRun::Parse(empty + std::string(1, '\0')).ok());
}

// The wire limit on a run's payload (docs/filter-format.md: L - 10 below
// 2^29 - 8 bytes), checked from the header and the length alone before any
// payload word is read: the view is given one zero word for a payload
// declared 512 MiB long.
TEST(FingerprintRunTest, PayloadAtTheWireLimitIsRejectedBeforeItIsRead) {
  const uint64_t words[2] = {0, 0};
  auto status_of = [&](uint32_t n, int k, size_t payload_bytes) {
    unsigned char header[FingerprintRun::kHeaderBytes] = {
        32, static_cast<unsigned char>(k), 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    for (int i = 0; i < 4; ++i) {
      header[2 + i] = static_cast<unsigned char>(n >> (8 * i));
    }
    return FingerprintRunView::FromSerialized(header, words, 0, payload_bytes)
        .status();
  };
  const size_t limit = format::kMaxRunPayloadBytes;
  EXPECT_EQ(limit, (size_t{1} << 29) - 8);
  // b = 32, U = 2^32, 2^32 - 1 codes of k = 31: at the limit the size is
  // what rejects it; one byte below, the next check (2^32 - 1 codes need
  // more than 2^32 - 72 bits), which also reads no payload.
  const absl::Status at = status_of(0xffffffffu, 31, limit);
  EXPECT_NE(at.message().find("too large"), std::string::npos) << at;
  const absl::Status below = status_of(0xffffffffu, 31, limit - 1);
  EXPECT_NE(below.message().find("need more than"), std::string::npos) << below;
  // The size comes before n = 0.
  const absl::Status empty = status_of(0, 0, limit);
  EXPECT_NE(empty.message().find("too large"), std::string::npos) << empty;
}

// Random payloads behind valid headers: Parse either rejects them or yields
// a run whose fingerprints are strictly increasing inside the universe (run
// under ASan this also shows it never reads out of bounds).
TEST(FingerprintRunTest, ParseOfGarbageIsAnErrorOrAValidRun) {
  std::mt19937_64 rng(77);
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
    absl::StatusOr<FingerprintRun> run = FingerprintRun::Parse(s);
    if (!run.ok()) continue;
    ++accepted;
    const std::vector<uint32_t> f = run->Fingerprints();
    ASSERT_EQ(f.size(), run->count());
    for (size_t i = 0; i < f.size(); ++i) {
      ASSERT_LT(f[i], run->universe());
      if (i > 0) {
        ASSERT_LT(f[i - 1], f[i]);
      }
      ASSERT_TRUE(run->ContainsFingerprint(f[i]));
    }
    EXPECT_EQ(run->Serialize(), s);
  }
  EXPECT_GT(accepted, 0u);  // the valid branch is exercised
}

}  // namespace
}  // namespace exposure_filter

namespace exposure_filter {
namespace {

// A run's codes copied to any bit offset of another buffer decode to the
// same set through a view, and CopyOf rebuilds the identical run.
TEST(FingerprintRunViewTest, ViewAtAnyBitOffsetAnswersLikeTheRun) {
  const std::vector<uint64_t> items = RandomHashes(700, 77);
  const FingerprintRun run = MustBuild(items, 20, uint64_t{1} << 20);
  const std::vector<uint64_t> probes = MixedCandidates(items, 3000, 78);
  for (uint64_t offset : {0, 1, 37, 63, 64, 129}) {
    std::vector<uint64_t> buf((offset + run.payload_bits()) / 64 + 2, 0);
    run.view().CopyPayloadTo(buf.data(), offset);
    const FingerprintRunView v(buf.data(), offset, run.count(), run.universe(),
                               run.precision(), run.rice_k(),
                               run.payload_bits());
    std::vector<uint32_t> fps;
    v.AppendFingerprints(&fps);
    ASSERT_EQ(fps, run.Fingerprints()) << "offset " << offset;
    for (uint64_t h : probes) ASSERT_EQ(v.Contains(h), run.Contains(h));
    absl::StatusOr<FingerprintRun> copy = FingerprintRun::CopyOf(v);
    ASSERT_TRUE(copy.ok()) << copy.status();
    EXPECT_TRUE(*copy == run) << "offset " << offset;
  }
}

// RemoveContained (the run-driven walk over the candidates' buckets) must
// clear exactly what Contains claims: for runs sparser and denser than the
// batch, prefix and non-power-of-two universes, precisions below the bucket
// bits (b = 5), batches of every bucket width (m = 1: one bucket), crowded
// buckets (20 copies of one member: past the fixed window), and candidates
// on the first and last prefix of a member's fingerprint (the edges of the
// bucket range the walk derives).
TEST(FingerprintRunViewTest, RemoveContainedMatchesContainsForEveryCandidate) {
  CandidateSorter sorter;
  for (size_t n : {1, 20, 333, 2000, 50000}) {
    const std::vector<uint64_t> items = RandomHashes(n, 70 + n);
    for (int b : {5, 17, 32}) {
      // 2^32 - 1: fingerprints near 2^32, where a bucket bound rounded up
      // would overshoot (fingerprint_run_lookup.cc, RemoveContained).
      for (uint64_t u : {uint64_t{27}, uint64_t{1} << 17, UniverseFor(n, 0.3),
                         UniverseFor(n, 0.01) | 1, (uint64_t{1} << 32) - 1}) {
        if (u > (uint64_t{1} << b) || u < 2) continue;
        const FingerprintRun run = MustBuild(items, b, u);
        for (size_t m : {1, 2, 300, 5000}) {
          std::vector<uint64_t> cands = MixedCandidates(items, m, n + u + m);
          // Edges: the smallest hash of some member's fingerprint and the
          // largest hash just below it.
          const std::vector<uint32_t> fps = run.Fingerprints();
          for (size_t i = 1; i < m && !fps.empty(); i += 7) {
            const uint64_t f = fps[(i * 31) % fps.size()];
            // First b-bit prefix p with floor(p u / 2^b) = f.
            const uint64_t p = static_cast<uint64_t>(
                ((static_cast<unsigned __int128>(f) << b) + u - 1) / u);
            cands[i] = p << (64 - b);
            if (p > 0 && i + 1 < m) cands[i + 1] = (p << (64 - b)) - 1;
            // Last prefix of f (all low bits set) and the first of f + 1.
            const uint64_t p_end = static_cast<uint64_t>(
                ((static_cast<unsigned __int128>(f + 1) << b) + u - 1) / u);
            if (i + 2 < m)
              cands[i + 2] =
                  ((p_end - 1) << (64 - b)) | ((uint64_t{1} << (64 - b)) - 1);
            if (i + 3 < m && p_end < (uint64_t{1} << b)) {
              cands[i + 3] = p_end << (64 - b);
            }
          }
          for (size_t i = m / 2; i < m / 2 + 20 && i < m && m >= 40; ++i) {
            cands[i] = items[0];  // a crowded bucket
          }
          std::vector<uint64_t> keys(m);
          for (size_t i = 0; i < m; ++i) {
            keys[i] =
                FingerprintRun::SortKey(cands[i], static_cast<uint32_t>(i));
          }
          const BucketedCandidates bucketed = sorter.Bucket(keys);
          std::vector<uint8_t> keep(m, 1);
          for (size_t i = 0; i < m; i += 13) keep[i] = 0;  // stay cleared
          std::vector<uint8_t> expected = keep;
          size_t members = 0;
          for (size_t i = 0; i < m; ++i) {
            if (run.Contains(cands[i])) {
              expected[i] = 0;
              ++members;
            }
          }
          run.view().RemoveContained(bucketed, keep.data());
          ASSERT_EQ(keep, expected)
              << "n=" << n << " b=" << b << " u=" << u << " m=" << m;
          if (m >= 300) {
            ASSERT_GT(members, m / 4);  // the check has teeth
          }
        }
      }
    }
  }
}

// LocateInRun (UserFilter::Record's "already claimed?" walk, with word
// skips for few keys) against the merge and single lookups: runs packed at any
// bit offset of a buffer whose other bits are random, all ones, or zero but for
// one set bit right after the payload (a foreign "code" the word skip must not
// count); few and many keys, hits, misses, duplicates and the universe's last
// fingerprint; Rice parameters from 0 up.
void CheckSparseWalk(const FingerprintRun& run, uint64_t offset, int garbage,
                     const std::vector<uint64_t>& keys, std::mt19937_64& rng) {
  const FingerprintRunView v0 = run.view();
  const uint64_t end = offset + v0.payload_bits();
  std::vector<uint64_t> buf(end / 64 + 3);
  for (uint64_t& w : buf) {
    w = garbage == 0 ? rng() : garbage == 1 ? ~uint64_t{0} : 0;
  }
  for (uint64_t bit = offset; bit < end; ++bit) {
    buf[bit / 64] &= ~(uint64_t{1} << (bit % 64));
  }
  if (garbage == 2) buf[end / 64] |= uint64_t{1} << (end % 64);
  v0.CopyPayloadTo(buf.data(), offset);
  const FingerprintRunView v(buf.data(), offset, v0.count(), v0.universe(),
                             v0.precision(), v0.rice_k(), v0.payload_bits());
  const size_t m = keys.size();
  std::vector<uint8_t> expected(m, 1), merge(m, 1), sparse(m, 1);
  for (uint64_t key : keys) {
    // The key's top 32 bits are the hash's (SortKey).
    if (run.Contains(key)) expected[static_cast<uint32_t>(key)] = 0;
  }
  v.RemoveContainedSorted(keys, merge.data());
  // LocateInRun (run_splice.h): its word skips for few keys against a long
  // run, its decode merge otherwise; a key is claimed where its point holds
  // its fingerprint.
  std::vector<uint32_t> fps(m);
  for (size_t j = 0; j < m; ++j) {
    fps[j] = FingerprintRun::Fingerprint(keys[j], v.precision(), v.universe());
  }
  std::vector<SplicePoint> points(m);
  LocateInRun(v, fps, points.data());
  for (size_t j = 0; j < m; ++j) {
    if (points[j].Claims(v.count(), fps[j])) {
      sparse[static_cast<uint32_t>(keys[j])] = 0;
    }
  }
  ASSERT_EQ(merge, expected);
  ASSERT_EQ(sparse, expected) << "k=" << v.rice_k() << " offset=" << offset
                              << " garbage=" << garbage << " m=" << m;
}

TEST(FingerprintRunTest, SparseWalkMatchesTheMergeAtAnyOffset) {
  std::mt19937_64 rng(77);
  for (size_t n : {size_t{1}, size_t{20}, size_t{333}, size_t{5000}}) {
    const std::vector<uint64_t> items = RandomHashes(n, 900 + n);
    // A dense universe (k = 0 or 1), a 1% one, a prefix run as UserFilter's.
    for (uint64_t u : {std::max<uint64_t>(2, n + n / 2), UniverseFor(n, 0.01),
                       uint64_t{1} << 22}) {
      const int b = u == (uint64_t{1} << 22) ? 22 : 32;
      const FingerprintRun run = MustBuild(items, b, u);
      for (size_t m : {size_t{1}, size_t{3}, size_t{20}, size_t{400}}) {
        std::vector<uint64_t> cands = MixedCandidates(items, m, n * 31 + m);
        cands.push_back(~uint64_t{0});  // the universe's last fingerprint
        std::vector<uint64_t> keys(cands.size());
        for (size_t i = 0; i < cands.size(); ++i) {
          keys[i] = FingerprintRun::SortKey(cands[i], static_cast<uint32_t>(i));
        }
        std::sort(keys.begin(), keys.end());
        for (uint64_t offset : {0, 1, 31, 63, 64 + 17}) {
          for (int garbage = 0; garbage < 3; ++garbage) {
            ASSERT_NO_FATAL_FAILURE(
                CheckSparseWalk(run, offset, garbage, keys, rng))
                << "n=" << n << " u=" << u;
          }
        }
      }
    }
  }
}

// The bucket pass pads its keys with zeros (tag 0) so the fixed-width check
// may read past the last bucket; a zero hash has fingerprint 0, so a run
// holding 0 must not let the padding clear candidate 0, a non-member.
TEST(FingerprintRunViewTest, RemoveContainedPaddingNeverClearsCandidateZero) {
  std::vector<uint64_t> items = RandomHashes(300, 9);
  items.push_back(0);  // fingerprint 0 for every (b, U)
  const FingerprintRun run = MustBuild(items, 32, UniverseFor(301, 0.01));
  CandidateSorter sorter;
  for (size_t m : {1, 2, 3, 7}) {
    std::vector<uint64_t> keys;
    for (uint64_t h : RandomHashes(m, 100 + m)) {
      // Upper half: candidate 0 is not in fingerprint 0's bucket.
      h |= uint64_t{1} << 63;
      ASSERT_FALSE(run.Contains(h));  // fresh at 1%: seeds checked
      keys.push_back(
          FingerprintRun::SortKey(h, static_cast<uint32_t>(keys.size())));
    }
    std::vector<uint8_t> keep(m, 1);
    run.view().RemoveContained(sorter.Bucket(keys), keep.data());
    EXPECT_EQ(keep, std::vector<uint8_t>(m, 1)) << "m=" << m;
  }
}

}  // namespace
}  // namespace exposure_filter
