// The replica's pass over the items pushed since a user's snapshot
// (src/filter/pushed_item_bits.h): 5,000 candidates against 200 pushed
// items, by either kernel; the bit filter alone, and the whole pass with
// the replica's map behind it.
//   build/bench/pushed_items_bench --benchmark_repetitions=5
// range(0): 0 = the portable kernel, 1 = AVX-512 (skipped without it).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "src/filter/probe_kernel.h"
#include "src/filter/pushed_item_bits.h"

namespace exposure_filter {
namespace {

constexpr size_t kCandidates = 5000;
constexpr size_t kPushed = 200;

// The replica's state after a few pushes, and a check's candidates: 1 in 50
// of them pushed, keep[] 1 for about half (what a filter's check leaves).
struct PushedPass {
  PushedItemBits bits;
  absl::flat_hash_map<uint64_t, int64_t> pushed;  // as the replica's
  std::vector<uint64_t> hashes;
  std::vector<uint8_t> keep;

  PushedPass() {
    std::mt19937_64 rng(5);
    std::vector<uint64_t> items(kPushed);
    for (uint64_t& h : items) {
      h = rng();
      pushed.emplace(h, 0);
      bits.Add(h);
    }
    for (size_t i = 0; i < kCandidates; ++i) {
      hashes.push_back(i % 50 == 0 ? items[rng() % kPushed] : rng());
      keep.push_back(rng() & 1);
    }
  }
};

PushedCandidatesFn KernelOrSkip(benchmark::State& state) {
  if (state.range(0) == 0) {
    state.SetLabel("portable");
    return PushedCandidatesPortable;
  }
  if (!Avx512BwVlSupported()) {
    state.SkipWithError("no AVX-512 F/BW/VL on this CPU");
    return nullptr;
  }
  state.SetLabel("avx512");
  return PushedCandidatesAvx512;
}

void SetPerCandidate(benchmark::State& state) {
  state.counters["ns_per_candidate"] = benchmark::Counter(
      kCandidates * 1e-9, benchmark::Counter::kIsIterationInvariantRate |
                              benchmark::Counter::kInvert);
}

// The bit filter alone: the candidates the map is then probed for.
void BM_PushedCandidates(benchmark::State& state) {
  const PushedCandidatesFn find = KernelOrSkip(state);
  if (find == nullptr) return;
  const PushedPass p;
  std::vector<uint32_t> candidates(kCandidates);
  size_t found = 0;
  for (auto _ : state) {
    found = find(p.bits, p.hashes.data(), kCandidates, p.keep.data(),
                 candidates.data());
    benchmark::DoNotOptimize(candidates.data());
    benchmark::ClobberMemory();
  }
  state.counters["probed"] = static_cast<double>(found);
  SetPerCandidate(state);
}
BENCHMARK(BM_PushedCandidates)->Arg(0)->Arg(1);

// The replica's whole pass (Entry::RemovePushed), keep[] restored each
// iteration (a 5,000-byte copy, the same for both kernels).
void BM_RemovePushedItems(benchmark::State& state) {
  const PushedCandidatesFn find = KernelOrSkip(state);
  if (find == nullptr) return;
  const PushedPass p;
  std::vector<uint8_t> keep(kCandidates);
  for (auto _ : state) {
    std::memcpy(keep.data(), p.keep.data(), kCandidates);
    RemovePushedItems(p.bits, p.pushed, p.hashes.data(), kCandidates,
                      keep.data(), find);
    benchmark::DoNotOptimize(keep.data());
    benchmark::ClobberMemory();
  }
  SetPerCandidate(state);
}
BENCHMARK(BM_RemovePushedItems)->Arg(0)->Arg(1);

}  // namespace
}  // namespace exposure_filter

BENCHMARK_MAIN();
