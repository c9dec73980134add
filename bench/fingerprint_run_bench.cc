// Golomb-Rice fingerprint runs (src/filter/fingerprint_run.h) against the
// blocked Bloom segments of format 1, at the same FP target:
//   build/bench/fingerprint_run_bench --benchmark_min_time=0.3
// BM_Space: bits per item (payload, and all-in with the object and its heap
// block) and measured FP of a run, next to the information bound
// log2(1/eps), the Rice estimate log2(U/n) + 1.47 and a Bloom segment sized
// by bloom_math.h for the same n and eps.
// BM_Batch*: ns per candidate of a 5,000-candidate FilterRecalled-shaped
// batch against one run / one segment.
// BM_LocateInRun: a write's claimed-check walk of one run (ns per code).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "exposure_filter/item_hash.h"
#include "src/filter/bloom_math.h"
#include "src/filter/bloom_segment.h"
#include "src/filter/candidate_sort.h"
#include "src/filter/claim_bitmap.h"
#include "src/filter/claim_index.h"
#include "src/filter/fingerprint_run.h"
#include "src/filter/probe_kernel.h"
#include "src/filter/run_splice.h"

namespace exposure_filter {
namespace {

constexpr size_t kCandidates = 5000;
constexpr double kEps[] = {0.01, 0.00143};

std::vector<uint64_t> RandomHashes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) x = HashItemId(rng());
  return h;
}

// Half drawn from the recorded items, half fresh (as in filter_bench).
std::vector<uint64_t> Candidates(const std::vector<uint64_t>& recorded,
                                 uint64_t seed) {
  std::vector<uint64_t> c = RandomHashes(kCandidates, seed);
  // Half of them recorded, at random positions (as exposure-filter-bench's
  // --exposed_fraction): a fixed alternation would let the branch predictor
  // learn which candidates are members.
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < c.size() && !recorded.empty(); ++i) {
    if (rng() & 1) c[i] = recorded[rng() % recorded.size()];
  }
  return c;
}

uint64_t UniverseFor(size_t n, double eps) {
  return static_cast<uint64_t>(std::llround(n / eps));
}

FingerprintRun MustBuild(const std::vector<uint64_t>& items, uint64_t u,
                         uint32_t stride = 0) {
  return *FingerprintRun::Build(items, 32, u, {stride});
}

BloomSegment BloomFor(const std::vector<uint64_t>& items, double eps) {
  const BlockSizing sizing = SizeForFpRate(eps);
  BloomSegment seg(BlocksForCapacity(items.size(), sizing), sizing.k,
                   items.size());
  for (uint64_t h : items) seg.Add(h);
  return seg;
}

void BM_Space(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const double eps = kEps[state.range(1)];
  const std::vector<uint64_t> items = RandomHashes(n, 1 + n);
  const uint64_t u = UniverseFor(n, eps);
  for (auto _ : state) {
    FingerprintRun run = MustBuild(items, u);
    benchmark::DoNotOptimize(run);
  }
  const FingerprintRun run = MustBuild(items, u);
  // Measured FP: 2,000,000 fresh hashes (~2,900 hits at 0.143%: +-2% sd).
  constexpr size_t kTrials = 2000000;
  std::vector<uint32_t> fps(kTrials);
  std::vector<uint64_t> fresh = RandomHashes(kTrials, 99);
  for (size_t i = 0; i < kTrials; ++i) fps[i] = run.FingerprintOf(fresh[i]);
  std::sort(fps.begin(), fps.end());
  std::vector<uint8_t> member(kTrials);
  run.ContainsSorted(fps, member.data());
  const double hits = std::count(member.begin(), member.end(), 1);
  const BloomSegment bloom = BloomFor(items, eps);
  std::vector<uint8_t> keep(kTrials, 1);
  RemoveContained(SegmentRef{bloom.words(), bloom.num_blocks(), bloom.k()},
                  fresh.data(), kTrials, keep.data());
  const double bloom_hits = std::count(keep.begin(), keep.end(), 0);

  state.counters["bits_per_item"] = 8.0 * run.encoded_bytes() / n;
  state.counters["bits_all_in"] =
      8.0 * (sizeof(FingerprintRun) + run.heap_bytes()) / n;
  state.counters["info_bound"] = std::log2(1 / eps);
  state.counters["rice_est"] =
      std::log2(static_cast<double>(u) / run.count()) + 1.47;
  state.counters["fp_pct"] = 100 * hits / kTrials;
  state.counters["fp_expect_pct"] = 100 * run.FpRate();
  state.counters["bloom_bits"] = 8.0 * bloom.bit_bytes() / n;
  state.counters["bloom_fp_pct"] = 100 * bloom_hits / kTrials;
  state.SetLabel(eps == 0.01 ? "eps=1%" : "eps=0.143%");
}
BENCHMARK(BM_Space)->ArgsProduct({{20, 333, 2000, 5000, 50000}, {0, 1}});

void SetPerCandidate(benchmark::State& state) {
  state.counters["ns_per_candidate"] = benchmark::Counter(
      kCandidates * 1e-9, benchmark::Counter::kIsIterationInvariantRate |
                              benchmark::Counter::kInvert);
}

// The whole batch path at 1%: keys from the 5,000 hashes, sort (0 = none:
// keys pre-sorted, the merge alone; 1 = std::sort; 2 = radix), merge.
// range(2) = skip stride.
void BM_BatchSorted(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const int sort_kind = static_cast<int>(state.range(1));
  const uint32_t stride = static_cast<uint32_t>(state.range(2));
  const std::vector<uint64_t> items = RandomHashes(n, 1 + n);
  const FingerprintRun run = MustBuild(items, UniverseFor(n, 0.01), stride);
  const std::vector<uint64_t> cands = Candidates(items, 2);
  std::vector<uint64_t> keys(kCandidates), tmp;
  std::vector<uint64_t> presorted(kCandidates);
  for (size_t i = 0; i < kCandidates; ++i) {
    presorted[i] = FingerprintRun::SortKey(cands[i], static_cast<uint32_t>(i));
  }
  std::sort(presorted.begin(), presorted.end());
  std::vector<uint8_t> keep(kCandidates);
  for (auto _ : state) {
    if (sort_kind == 0) {
      keys = presorted;
    } else {
      for (size_t i = 0; i < kCandidates; ++i) {
        keys[i] = FingerprintRun::SortKey(cands[i], static_cast<uint32_t>(i));
      }
      if (sort_kind == 1) {
        std::sort(keys.begin(), keys.end());
      } else {
        SortKeysByHashPrefix(absl::MakeSpan(keys), tmp);
      }
    }
    std::memset(keep.data(), 1, keep.size());
    run.RemoveContainedSorted(keys, keep.data());
    benchmark::DoNotOptimize(keep.data());
  }
  SetPerCandidate(state);
  state.SetLabel(sort_kind == 0   ? "merge only"
                 : sort_kind == 1 ? "std::sort + merge"
                                  : "radix + merge");
}
BENCHMARK(BM_BatchSorted)
    ->ArgsProduct({{20, 333, 2000, 50000}, {0, 1, 2}, {0}})
    ->Args({2000, 2, 64})
    ->Args({50000, 2, 64});

// Sorting alone, to split the batch figure.
void BM_SortKeys(benchmark::State& state) {
  const bool radix = state.range(0) == 1;
  const std::vector<uint64_t> cands = Candidates({}, 2);
  std::vector<uint64_t> keys(kCandidates), tmp;
  for (auto _ : state) {
    for (size_t i = 0; i < kCandidates; ++i) {
      keys[i] = FingerprintRun::SortKey(cands[i], static_cast<uint32_t>(i));
    }
    if (radix) {
      SortKeysByHashPrefix(absl::MakeSpan(keys), tmp);
    } else {
      std::sort(keys.begin(), keys.end());
    }
    benchmark::DoNotOptimize(keys.data());
  }
  SetPerCandidate(state);
  state.SetLabel(radix ? "SortKeysByHashPrefix" : "std::sort");
}
BENCHMARK(BM_SortKeys)->Arg(0)->Arg(1);

// One Contains per candidate (no sort): range(1) = skip stride.
void BM_SingleContains(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const uint32_t stride = static_cast<uint32_t>(state.range(1));
  const std::vector<uint64_t> items = RandomHashes(n, 1 + n);
  const FingerprintRun run = MustBuild(items, UniverseFor(n, 0.01), stride);
  const std::vector<uint64_t> cands = Candidates(items, 2);
  std::vector<uint8_t> keep(kCandidates);
  for (auto _ : state) {
    for (size_t i = 0; i < kCandidates; ++i) keep[i] = !run.Contains(cands[i]);
    benchmark::DoNotOptimize(keep.data());
  }
  SetPerCandidate(state);
  state.counters["skip_bits_per_item"] = stride == 0 ? 0.0 : 64.0 / stride;
}
BENCHMARK(BM_SingleContains)
    ->ArgsProduct({{20, 333, 2000}, {0, 16, 64}})
    ->Args({50000, 64})
    ->Args({50000, 128})
    ->Args({50000, 0});

// The same batch against one blocked Bloom segment sized for n at 1%
// (bloom_math.h), through the dispatching kernel FilterRecalled uses.
void BM_BatchBloom(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const std::vector<uint64_t> items = RandomHashes(n, 1 + n);
  const BloomSegment seg = BloomFor(items, 0.01);
  const SegmentRef ref{seg.words(), seg.num_blocks(), seg.k()};
  const std::vector<uint64_t> cands = Candidates(items, 2);
  std::vector<uint8_t> keep(kCandidates);
  for (auto _ : state) {
    std::memset(keep.data(), 1, keep.size());
    RemoveContainedAny(&ref, 1, cands.data(), cands.size(), keep.data());
    benchmark::DoNotOptimize(keep.data());
  }
  SetPerCandidate(state);
  state.counters["bits_per_item"] = 8.0 * seg.bit_bytes() / n;
  state.SetLabel(ProbeKernelName(ActiveProbeKernel()));
}
BENCHMARK(BM_BatchBloom)->Arg(20)->Arg(333)->Arg(2000)->Arg(50000);

// A user's runs for the checks below. n = 0: a user's usual shape, one
// sealed run (b = 21, U rounded up to a multiple of 256 from n / 0.0014, as
// a seal sizes it) of 2,450 codes beside the slice still filling, an open
// prefix run (b = 19) of 47: 2,497 codes. n > 0: n codes over `runs` runs
// (b = 32), each at U = n_r / (0.01 / runs) (1% split by the union bound,
// as a user's runs are sized).
struct UserRuns {
  std::vector<FingerprintRun> runs;
  std::vector<FingerprintRunView> views;
  std::vector<uint64_t> items;
  const char* label;
};

UserRuns MakeUserRuns(size_t n, size_t runs) {
  UserRuns u;
  if (n == 0) {
    constexpr size_t kSealed = 2450;
    constexpr size_t kOpen = 47;
    u.items = RandomHashes(kSealed + kOpen, 5);
    const std::vector<uint64_t> sealed(u.items.begin(),
                                       u.items.begin() + kSealed);
    const std::vector<uint64_t> open(u.items.begin() + kSealed, u.items.end());
    const uint64_t universe = (UniverseFor(kSealed, 0.0014) + 255) / 256 * 256;
    u.runs.push_back(*FingerprintRun::Build(sealed, 21, universe));
    u.runs.push_back(*FingerprintRun::Build(open, 19, uint64_t{1} << 19));
    u.label = "sealed 2,450 + open 47";
  } else {
    u.items = RandomHashes(n, 3 + n);
    for (size_t r = 0; r < runs; ++r) {
      const std::vector<uint64_t> part(u.items.begin() + r * n / runs,
                                       u.items.begin() + (r + 1) * n / runs);
      u.runs.push_back(MustBuild(part, UniverseFor(part.size(), 0.01 / runs)));
    }
    u.label = "equal runs";
  }
  for (const FingerprintRun& r : u.runs) u.views.push_back(r.view());
  return u;
}

// FilterRecalled's hash join (ClaimIndex) for a user of range(0) codes
// (MakeUserRuns, 7 runs; 0 = the usual shape), split into its two halves:
// range(1) = 0 times Build alone (decode every code, file it), 1 the probe
// of the 5,000 candidates alone against the built index, 2 both (what a
// request does).
void BM_ClaimIndex(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const int part = static_cast<int>(state.range(1));
  const UserRuns user = MakeUserRuns(n, 7);
  const std::vector<uint64_t> cands = Candidates(user.items, 4);
  std::vector<uint8_t> keep(kCandidates, 1);
  ClaimIndex index;
  if (!index.Build(user.views)) {
    state.SkipWithError("ClaimIndex refused");
    return;
  }
  for (auto _ : state) {
    if (part != 1) benchmark::DoNotOptimize(index.Build(user.views));
    if (part != 0) {
      index.RemoveClaimed(cands, keep.data());
      benchmark::DoNotOptimize(keep.data());
    }
  }
  state.counters["filings_per_code"] = static_cast<double>(index.filings()) /
                                       static_cast<double>(user.items.size());
  // The cost model's inputs (claim_cost.h): codes n and buckets 2^E.
  state.counters["codes"] = static_cast<double>(user.items.size());
  state.counters["buckets"] =
      static_cast<double>(size_t{1} << index.bucket_bits());
  state.SetLabel(part == 0 ? "build" : part == 1 ? "probe 5,000" : "both");
}
BENCHMARK(BM_ClaimIndex)->ArgsProduct({{0, 333, 2000, 20000}, {0, 1, 2}});

// The probe a replica makes through runs it filed once (FilterView::
// FileRuns): 5,000 candidates against one of range(1) users of range(0)
// codes each (MakeUserRuns, 7 runs), user after user, so that with many
// users each probe finds its index out of cache as a recall server's
// checks do (a session's next request comes after other sessions').
void BM_ClaimIndexProbeAcrossUsers(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const size_t users = static_cast<size_t>(state.range(1));
  const UserRuns user = MakeUserRuns(n, 7);
  const std::vector<uint64_t> cands = Candidates(user.items, 4);
  std::vector<uint8_t> keep(kCandidates, 1);
  // The same runs filed for every user: the indexes sit apart in memory,
  // which is what the cache sees.
  std::vector<ClaimIndex> indexes(users);
  for (ClaimIndex& index : indexes) {
    if (!index.Build(user.views)) {
      state.SkipWithError("ClaimIndex refused");
      return;
    }
  }
  size_t u = 0;
  for (auto _ : state) {
    indexes[u].RemoveClaimed(cands, keep.data());
    benchmark::DoNotOptimize(keep.data());
    u = u + 1 == users ? 0 : u + 1;
  }
  SetPerCandidate(state);
}
BENCHMARK(BM_ClaimIndexProbeAcrossUsers)->ArgsProduct({{2000, 20000}, {1, 64}});

// The other exact check (ClaimBitmap): range(0) codes in range(1) runs
// (MakeUserRuns), set, probed by the 5,000 candidates and cleared: against
// BM_ClaimIndex/n/2, what RemoveClaimedByRuns's cost model weighs.
void BM_ClaimBitmap(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const UserRuns user = MakeUserRuns(n, static_cast<size_t>(state.range(1)));
  if (!ClaimBitmap::Fits(user.views)) {
    state.SkipWithError("universes too large for ClaimBitmap");
    return;
  }
  const std::vector<uint64_t> cands = Candidates(user.items, 4);
  std::vector<uint8_t> keep(kCandidates, 1);
  ClaimBitmap bitmap;
  for (auto _ : state) {
    bitmap.RemoveClaimed(user.views, cands, keep.data());
    benchmark::DoNotOptimize(keep.data());
  }
  // The cost model's inputs (claim_cost.h): codes n, non-empty runs R and
  // passes p.
  size_t nonempty = 0;
  for (const FingerprintRunView& v : user.views) nonempty += v.count() != 0;
  state.counters["codes"] = static_cast<double>(user.items.size());
  state.counters["runs"] = static_cast<double>(nonempty);
  state.counters["passes"] =
      static_cast<double>(ClaimBitmap::Passes(user.views));
  state.SetLabel(user.label);
}
BENCHMARK(BM_ClaimBitmap)
    ->Args({0, 2})
    ->ArgsProduct({{333, 2000}, {1, 2, 3, 4, 7}})
    ->Args({20000, 1})
    ->Args({20000, 7});

// The whole check a request makes (RemoveClaimedByRuns, whichever way it
// takes), 5,000 candidates with keep[] reset each time, for a user of
// range(0) codes (MakeUserRuns, 7 runs; 0 = the usual shape).
void BM_RemoveClaimedByRuns(benchmark::State& state) {
  const UserRuns user = MakeUserRuns(static_cast<size_t>(state.range(0)), 7);
  const std::vector<uint64_t> cands = Candidates(user.items, 4);
  std::vector<uint8_t> keep(kCandidates);
  for (auto _ : state) {
    std::memset(keep.data(), 1, keep.size());
    RemoveClaimedByRuns(user.views, cands, keep.data());
    benchmark::DoNotOptimize(keep.data());
  }
  SetPerCandidate(state);
  state.SetLabel(user.label);
}
BENCHMARK(BM_RemoveClaimedByRuns)->Arg(0)->Arg(333)->Arg(2000)->Arg(20000);

// Record's "already claimed?" walk of one run (LocateInRun, run_splice.h):
// range(1) sorted fingerprints (a write's items) against a run of range(0)
// codes at b = 19 (the feed loop's first open run) or b = 27 (its second),
// range(2). Below 32 codes per item the walk decodes code by code, above
// it passes over whole words of codes.
void BM_LocateInRun(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  const size_t m = static_cast<size_t>(state.range(1));
  const int b = static_cast<int>(state.range(2));
  const uint64_t u = uint64_t{1} << b;
  std::mt19937_64 rng(5);
  std::vector<uint32_t> fps(n);
  for (uint32_t& f : fps) f = static_cast<uint32_t>(rng() % u);
  const FingerprintRun run = *FingerprintRun::FromFingerprints(fps, b, u);
  // Query sets cycled so that the branch predictor cannot learn one.
  constexpr size_t kSets = 64;
  std::vector<std::vector<uint32_t>> queries(kSets, std::vector<uint32_t>(m));
  for (auto& q : queries) {
    for (uint32_t& x : q) x = static_cast<uint32_t>(rng() % u);
    std::sort(q.begin(), q.end());
  }
  std::vector<SplicePoint> at(m);
  size_t i = 0;
  for (auto _ : state) {
    LocateInRun(run.view(), queries[i++ % kSets], at.data());
    benchmark::DoNotOptimize(at.data());
  }
  state.counters["ns_per_code"] =
      benchmark::Counter(static_cast<double>(run.count()) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate |
                             benchmark::Counter::kInvert);
}
BENCHMARK(BM_LocateInRun)
    ->ArgsProduct({{300, 600, 1000, 2000}, {20}, {19, 27}});

}  // namespace
}  // namespace exposure_filter

BENCHMARK_MAIN();
