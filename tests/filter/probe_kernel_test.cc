#include "src/filter/probe_kernel.h"

#include <iterator>
#include <random>
#include <vector>

#include "exposure_filter/bloom_probe.h"
#include "exposure_filter/item_hash.h"
#include "gtest/gtest.h"
#include "src/filter/bloom_segment.h"
#include "tests/common/environment_skip.h"

namespace exposure_filter {
namespace {

// A segment loaded with `items` random hashes, plus candidates of which half
// were recorded: at high loads many fresh candidates are false positives too,
// so both outcomes are exercised on every path.
struct Fixture {
  BloomSegment seg;
  std::vector<uint64_t> candidates;
};

Fixture MakeFixture(uint32_t blocks, int k, size_t items, uint64_t seed) {
  Fixture f{BloomSegment(blocks, k, items), {}};
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> recorded(items);
  for (uint64_t& h : recorded) {
    h = HashItemId(rng());
    f.seg.Add(h);
  }
  for (size_t i = 0; i < 4000; ++i) {
    f.candidates.push_back(i % 2 == 0 && items > 0 ? recorded[i % items]
                                                   : HashItemId(rng()));
  }
  return f;
}

std::vector<uint8_t> Expected(const Fixture& f,
                              const std::vector<uint8_t>& keep_in) {
  std::vector<uint8_t> keep = keep_in;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i] && f.seg.MayContain(f.candidates[i])) keep[i] = 0;
  }
  return keep;
}

std::vector<uint8_t> RunKernel(RemoveContainedFn fn, const Fixture& f,
                               std::vector<uint8_t> keep) {
  fn(SegmentRef{f.seg.words(), f.seg.num_blocks(), f.seg.k()},
     f.candidates.data(), f.candidates.size(), keep.data());
  return keep;
}

TEST(ProbeKernelTest, PortableKernelMatchesBloomProbeDefinition) {
  for (int k = kMinProbes; k <= kMaxProbes; ++k) {
    for (size_t items : {0, 50, 400, 3000}) {
      const Fixture f = MakeFixture(37, k, items, 1000 * k + items);
      const std::vector<uint8_t> all(f.candidates.size(), 1);
      EXPECT_EQ(RunKernel(&RemoveContainedPortable, f, all), Expected(f, all))
          << "k=" << k << " items=" << items;
    }
  }
}

TEST(ProbeKernelTest, Avx2KernelGivesIdenticalResultsToPortable) {
  if (!Avx2Supported()) GTEST_SKIP() << kSkipNoAvx2;
  size_t removed_total = 0, kept_total = 0;
  for (int k = kMinProbes; k <= kMaxProbes; ++k) {
    for (size_t items : {0, 50, 400, 3000}) {
      for (uint32_t blocks : {1u, 37u, 1024u}) {
        const Fixture f = MakeFixture(blocks, k, items, 7 * k + items + blocks);
        const std::vector<uint8_t> all(f.candidates.size(), 1);
        const std::vector<uint8_t> want = Expected(f, all);
        EXPECT_EQ(RunKernel(&RemoveContainedAvx2, f, all), want)
            << "k=" << k << " items=" << items << " blocks=" << blocks;
        EXPECT_EQ(RunKernel(&RemoveContainedPortable, f, all), want);
        for (uint8_t v : want) (v ? kept_total : removed_total)++;
      }
    }
  }
  // Both outcomes occurred, so agreement is not vacuous.
  EXPECT_GT(removed_total, 10000u);
  EXPECT_GT(kept_total, 10000u);
}

TEST(ProbeKernelTest, CandidatesAlreadyRemovedStayRemovedOnEveryPath) {
  const Fixture f = MakeFixture(8, 9, 200, 5);
  std::vector<uint8_t> keep(f.candidates.size(), 1);
  for (size_t i = 0; i < keep.size(); i += 3) keep[i] = 0;
  const std::vector<uint8_t> want = Expected(f, keep);
  EXPECT_EQ(RunKernel(&RemoveContainedPortable, f, keep), want);
  if (Avx2Supported()) {
    EXPECT_EQ(RunKernel(&RemoveContainedAvx2, f, keep), want);
  }
  EXPECT_EQ(RunKernel(&RemoveContained, f, keep), want);
}

TEST(ProbeKernelTest, RecordedItemsAreAlwaysRemoved) {
  for (int k : {1, 8, 9, 16}) {
    const Fixture f = MakeFixture(64, k, 1000, k);
    std::vector<uint8_t> keep(f.candidates.size(), 1);
    RemoveContained(SegmentRef{f.seg.words(), f.seg.num_blocks(), f.seg.k()},
                    f.candidates.data(), f.candidates.size(), keep.data());
    for (size_t i = 0; i < keep.size(); i += 2) {
      ASSERT_EQ(keep[i], 0) << "recorded candidate " << i << " kept, k=" << k;
    }
  }
}

// Several segments of different k and sizes, as one user's live slices hold
// them: the candidate-major kernels must clear exactly what the segments,
// probed one after the other, clear. `blocks_scale` large enough pushes the
// filter past the whole-filter prefetch limit onto the segment-major path.
void ExpectAnyKernelsMatchSegmentBySegment(uint32_t blocks_scale,
                                           uint64_t seed) {
  std::vector<Fixture> fixtures;
  std::vector<SegmentRef> segs;
  const int ks[] = {1, 7, 8, 9, 12, 16, 10, 10};
  for (size_t s = 0; s < std::size(ks); ++s) {
    fixtures.push_back(MakeFixture(blocks_scale * (s + 1), ks[s],
                                   30 * blocks_scale * (s + 1), seed + s));
  }
  // Candidates drawn from every segment's recorded half and fresh ids.
  std::vector<uint64_t> candidates;
  for (const Fixture& f : fixtures) {
    candidates.insert(candidates.end(), f.candidates.begin(),
                      f.candidates.begin() + 600);
  }
  for (const Fixture& f : fixtures) {
    segs.push_back(SegmentRef{f.seg.words(), f.seg.num_blocks(), f.seg.k()});
  }
  std::vector<uint8_t> want(candidates.size(), 1);
  for (size_t i = 0; i < want.size(); i += 5) want[i] = 0;  // pre-removed
  const std::vector<uint8_t> start = want;
  size_t removed = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    for (const Fixture& f : fixtures) {
      if (want[i] && f.seg.MayContain(candidates[i])) want[i] = 0;
    }
    removed += start[i] && !want[i];
  }
  EXPECT_GT(removed, candidates.size() / 4);
  EXPECT_LT(removed, candidates.size() * 3 / 4);
  std::vector<RemoveContainedAnyFn> fns = {&RemoveContainedAnyPortable,
                                           &RemoveContainedAny};
  if (Avx2Supported()) fns.push_back(&RemoveContainedAnyAvx2);
  for (RemoveContainedAnyFn fn : fns) {
    std::vector<uint8_t> keep = start;
    fn(segs.data(), segs.size(), candidates.data(), candidates.size(),
       keep.data());
    EXPECT_EQ(keep, want) << "blocks_scale=" << blocks_scale;
  }
}

TEST(ProbeKernelTest, AnyKernelsMatchSegmentBySegmentOnSmallFilters) {
  ExpectAnyKernelsMatchSegmentBySegment(3, 11);
  ExpectAnyKernelsMatchSegmentBySegment(37, 12);
}

TEST(ProbeKernelTest, AnyKernelsMatchSegmentBySegmentOnLargeFilters) {
  // 8 segments of 1,000..8,000 blocks: 2.3 MB, past the prefetch limit.
  ExpectAnyKernelsMatchSegmentBySegment(1000, 13);
}

TEST(ProbeKernelTest, AnyKernelsHandleNoSegments) {
  const uint64_t hashes[] = {1, 2, 3};
  uint8_t keep[] = {1, 0, 1};
  RemoveContainedAny(nullptr, 0, hashes, 3, keep);
  EXPECT_EQ(keep[0], 1);
  EXPECT_EQ(keep[1], 0);
  EXPECT_EQ(keep[2], 1);
}

}  // namespace
}  // namespace exposure_filter
