// Micro-benchmarks of the filter core: hashing, recording, and the per
// candidate membership check that FilterRecalled runs.
//   build/bench/filter_bench --benchmark_min_time=0.5
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "exposure_filter/item_hash.h"
#include "src/filter/user_filter.h"

namespace exposure_filter {
namespace {

constexpr int64_t kDay = 24 * 3600 * 1000LL;
constexpr int64_t kNow = 1795392000000LL;

std::vector<uint64_t> RandomHashes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) x = HashItemId(rng());
  return h;
}

void BM_HashItemId(benchmark::State& state) {
  uint64_t id = 0, acc = 0;
  for (auto _ : state) acc += HashItemId(id++);
  benchmark::DoNotOptimize(acc);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HashItemId);

// A user with `items` exposures spread evenly over `slices` live slices,
// checked against 5,000 candidates (half of them exposed).
void BM_RemoveExposed(benchmark::State& state) {
  const int slices = static_cast<int>(state.range(0));
  const size_t items = static_cast<size_t>(state.range(1));
  const FilterPolicy policy = *FilterPolicy::Create({});
  const std::vector<uint64_t> recorded = RandomHashes(items, 1);
  UserFilter f;
  for (size_t i = 0; i < items; ++i) {
    f.Record(policy, {&recorded[i], 1}, kNow - (i % slices) * 5 * kDay);
  }
  std::vector<uint64_t> candidates = RandomHashes(5000, 2);
  for (size_t i = 0; i < candidates.size(); i += 2) {
    candidates[i] = recorded[i % items];
  }
  std::vector<uint8_t> keep(candidates.size());
  for (auto _ : state) {
    std::fill(keep.begin(), keep.end(), 1);
    f.RemoveExposed(policy, kNow, candidates, keep.data());
    benchmark::DoNotOptimize(keep.data());
  }
  const int segments = static_cast<int>(f.Stats(policy, kNow).segments);
  state.counters["segments"] = segments;
  state.counters["per_candidate_per_segment"] = benchmark::Counter(
      static_cast<double>(candidates.size()) * segments,
      benchmark::Counter::kIsIterationInvariantRate |
          benchmark::Counter::kInvert);
  state.SetItemsProcessed(state.iterations() * candidates.size());
}
BENCHMARK(BM_RemoveExposed)
    ->Args({1, 2000})
    ->Args({4, 2000})
    ->Args({7, 2000})
    ->Args({7, 50000});

void BM_RecordBatch(benchmark::State& state) {
  const FilterPolicy policy = *FilterPolicy::Create({});
  const std::vector<uint64_t> items = RandomHashes(1 << 16, 3);
  size_t offset = 0;
  UserFilter f;
  for (auto _ : state) {
    if (offset + 20 > items.size()) {
      state.PauseTiming();
      f = UserFilter();
      offset = 0;
      state.ResumeTiming();
    }
    f.Record(policy, {items.data() + offset, 20}, kNow);
    offset += 20;
  }
  state.SetItemsProcessed(state.iterations() * 20);
}
BENCHMARK(BM_RecordBatch);

}  // namespace
}  // namespace exposure_filter

BENCHMARK_MAIN();
