// Micro-benchmarks of the filter core: hashing, recording, the per-candidate
// membership check FilterRecalled runs (both probe kernels, warm and cold
// cache), and bytes per user across volumes.
//   build/bench/filter_bench --benchmark_min_time=0.5
// Figures and the machine they were measured on: docs/performance.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "absl/base/attributes.h"
#include "exposure_filter/item_hash.h"
#include "src/filter/item_hash_batch.h"
#include "src/filter/probe_kernel.h"
#include "src/filter/user_filter.h"

namespace exposure_filter {
namespace {

constexpr int64_t kDay = 24 * 3600 * 1000LL;
constexpr int64_t kNow = 1795392000000LL;
constexpr size_t kCandidates = 5000;

std::vector<uint64_t> RandomHashes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) x = HashItemId(rng());
  return h;
}

// A user with `items` exposures spread evenly over `slices` of the window,
// recorded in batches of `batch` (1 = one item per call, the worst case for
// growth segments).
// Filter: UserFilter (format 2, what the server stores) or BloomSlices
// (format 1, the previous release's filter, kept for legacy data).
template <typename Filter = UserFilter>
Filter MakeUser(const FilterPolicy& policy, const std::vector<uint64_t>& items,
                int slices, size_t batch) {
  Filter f;
  const size_t per_slice = (items.size() + slices - 1) / slices;
  for (int s = slices - 1; s >= 0; --s) {  // oldest slice first
    const size_t begin = std::min(items.size(), s * per_slice);
    const size_t end = std::min(items.size(), begin + per_slice);
    for (size_t i = begin; i < end; i += batch) {
      f.Record(policy, {items.data() + i, std::min(batch, end - i)},
               kNow - s * 5 * kDay);
    }
  }
  return f;
}

// Candidates: half drawn from the user's exposures, half fresh.
std::vector<uint64_t> Candidates(const std::vector<uint64_t>& recorded,
                                 uint64_t seed) {
  std::vector<uint64_t> c = RandomHashes(kCandidates, seed);
  for (size_t i = 0; i < c.size() && !recorded.empty(); i += 2) {
    c[i] = recorded[(i * 7919) % recorded.size()];
  }
  return c;
}

template <typename Filter>
int LiveSlices(const Filter& f, const FilterPolicy& policy) {
  return static_cast<int>(f.Stats(policy, kNow).slices);
}

void BM_HashItemId(benchmark::State& state) {
  uint64_t id = 0, acc = 0;
  for (auto _ : state) acc += HashItemId(id++);
  benchmark::DoNotOptimize(acc);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HashItemId);

void BM_HashItemKey(benchmark::State& state) {
  const std::string key = "video:1234567890";
  uint64_t acc = 0;
  for (auto _ : state) {
    acc += HashItemKey(key);
    benchmark::DoNotOptimize(acc);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HashItemKey);

// The batch FilterRecalled and RecordExposure hash ids with (XXH3 inlined);
// 5,000 ids, as a large FilterRecalled. range(0): 0 = the portable kernel,
// 1 = AVX-512 (skipped without CPU support). Compare the Release and the
// default RelWithDebInfo builds: the two should be within ~2x.
void BM_HashItemIds(benchmark::State& state) {
  const bool avx512 = state.range(0) == 1;
  if (avx512 && !HashItemIdsAvx512Supported()) {
    state.SkipWithError("no AVX-512 F/DQ on this CPU");
    return;
  }
  std::vector<uint64_t> ids(kCandidates);
  std::mt19937_64 rng(7);
  for (uint64_t& id : ids) id = rng();
  std::vector<uint64_t> out(kCandidates);
  for (auto _ : state) {
    if (avx512) {
      HashItemIdsAvx512(ids.data(), ids.size(), out.data());
    } else {
      HashItemIdsPortable(ids.data(), ids.size(), out.data());
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * ids.size());
  state.SetLabel(avx512 ? "avx512" : "portable");
}
BENCHMARK(BM_HashItemIds)->Arg(0)->Arg(1);

// Per-candidate check of 5,000 candidates against one user of range(1) items
// spread over range(0) live slices. range(2): 0 = portable kernel, 1 = AVX2.
// Counter ns_per_candidate_per_slice is the figure to hold at <= 2 ns.
void BM_RemoveExposedWarm(benchmark::State& state) {
  const int slices = static_cast<int>(state.range(0));
  const size_t items = static_cast<size_t>(state.range(1));
  const bool avx2 = state.range(2) == 1;
  if (avx2 && !Avx2Supported()) {
    state.SkipWithError("no AVX2");
    return;
  }
  const FilterPolicy policy = *FilterPolicy::Create({});
  const std::vector<uint64_t> recorded = RandomHashes(items, 1);
  const BloomSlices f = MakeUser<BloomSlices>(policy, recorded, slices, 100);
  const std::vector<uint64_t> candidates = Candidates(recorded, 2);
  std::vector<uint8_t> keep(candidates.size());
  const RemoveContainedFn kernel =
      avx2 ? &RemoveContainedAvx2 : &RemoveContainedPortable;
  for (auto _ : state) {
    std::fill(keep.begin(), keep.end(), 1);
    for (const BloomSlices::Slice& s : f.slices()) {
      for (const BloomSlices::Segment& seg : s.segments) {
        kernel(SegmentRef{seg.words(), seg.num_blocks(), seg.k()},
               candidates.data(), candidates.size(), keep.data());
      }
    }
    benchmark::DoNotOptimize(keep.data());
  }
  const UserFilterStats st = f.Stats(policy, kNow);
  state.counters["segments"] = st.segments;
  state.counters["ns_per_candidate_per_slice"] = benchmark::Counter(
      static_cast<double>(candidates.size()) * LiveSlices(f, policy) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate |
          benchmark::Counter::kInvert);
  state.SetItemsProcessed(state.iterations() * candidates.size());
  state.SetLabel(avx2 ? "avx2" : "portable");
}
BENCHMARK(BM_RemoveExposedWarm)
    ->ArgsProduct({{1, 4, 7}, {2000}, {0, 1}})
    ->Args({7, 50000, 0})
    ->Args({7, 50000, 1});

// The whole RemoveExposed of 5,000 candidates (what one FilterRecalled does
// per user) against one user of range(1) items over range(0) slices, 20 per
// call; range(2) = 1: format 1 (BloomSlices, the previous release), 2:
// format 2 (UserFilter: one radix sort of the candidates, one merge per
// run). Old and new side by side in one run.
void BM_RemoveExposedUser(benchmark::State& state) {
  const int slices = static_cast<int>(state.range(0));
  const size_t items = static_cast<size_t>(state.range(1));
  const bool format2 = state.range(2) == 2;
  const FilterPolicy policy = *FilterPolicy::Create({});
  const std::vector<uint64_t> recorded = RandomHashes(items, 1);
  const std::vector<uint64_t> candidates = Candidates(recorded, 2);
  std::vector<uint8_t> keep(candidates.size());
  auto run = [&](const auto& f) {
    for (auto _ : state) {
      std::fill(keep.begin(), keep.end(), 1);
      f.RemoveExposed(policy, kNow, candidates, keep.data());
      benchmark::DoNotOptimize(keep.data());
    }
    state.counters["bytes"] = static_cast<double>(f.MemoryBytes());
    state.counters["runs_or_segments"] = f.Stats(policy, kNow).segments;
  };
  if (format2) {
    run(MakeUser<UserFilter>(policy, recorded, slices, 20));
  } else {
    run(MakeUser<BloomSlices>(policy, recorded, slices, 20));
  }
  state.counters["ns_per_candidate"] =
      benchmark::Counter(static_cast<double>(candidates.size()) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate |
                             benchmark::Counter::kInvert);
  state.SetItemsProcessed(state.iterations() * candidates.size());
  state.SetLabel(format2 ? "format2" : "format1");
}
BENCHMARK(BM_RemoveExposedUser)
    ->ArgsProduct({{1, 7}, {300, 2000, 20000}, {1, 2}});

// Cold cache: 4,096 users (~11 MB of filters, beyond L2 and most L3 slices)
// visited in a random order, so every block is a cache miss that only the
// prefetch can hide. Uses the dispatching entry point the server uses.
// range(1): 1 = format 1 (BloomSlices), 2 = format 2 (UserFilter).
template <typename Filter>
void RemoveExposedCold(benchmark::State& state) {
  const int slices = static_cast<int>(state.range(0));
  const size_t items = 2000;
  const FilterPolicy policy = *FilterPolicy::Create({});
  constexpr size_t kUsers = 4096;
  std::vector<Filter> users;
  users.reserve(kUsers);
  std::vector<uint64_t> recorded;
  for (size_t u = 0; u < kUsers; ++u) {
    recorded = RandomHashes(items, 100 + u);
    users.push_back(MakeUser<Filter>(policy, recorded, slices, 100));
  }
  const std::vector<uint64_t> candidates = Candidates(recorded, 3);
  std::vector<uint8_t> keep(candidates.size());
  std::mt19937 rng(9);
  for (auto _ : state) {
    const Filter& f = users[rng() % kUsers];
    std::fill(keep.begin(), keep.end(), 1);
    f.RemoveExposed(policy, kNow, candidates, keep.data());
    benchmark::DoNotOptimize(keep.data());
  }
  state.counters["ns_per_candidate_per_slice"] =
      benchmark::Counter(static_cast<double>(candidates.size()) * slices * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate |
                             benchmark::Counter::kInvert);
  state.SetItemsProcessed(state.iterations() * candidates.size());
  state.SetLabel(ProbeKernelName(ActiveProbeKernel()));
}
void BM_RemoveExposedCold(benchmark::State& state) {
  if (state.range(1) == 2) {
    RemoveExposedCold<UserFilter>(state);
  } else {
    RemoveExposedCold<BloomSlices>(state);
  }
}
BENCHMARK(BM_RemoveExposedCold)->ArgsProduct({{1, 4, 7}, {1, 2}});

// 20 items per call into one user until 65,536 items, then a new user.
// range(0): 1 = format 1 (BloomSlices), 2 = format 2 (UserFilter).
template <typename Filter>
void RecordBatch(benchmark::State& state) {
  const FilterPolicy policy = *FilterPolicy::Create({});
  const std::vector<uint64_t> items = RandomHashes(1 << 16, 3);
  size_t offset = 0;
  Filter f;
  for (auto _ : state) {
    if (offset + 20 > items.size()) {
      state.PauseTiming();
      f = Filter();
      offset = 0;
      state.ResumeTiming();
    }
    f.Record(policy, {items.data() + offset, 20}, kNow);
    offset += 20;
  }
  state.SetItemsProcessed(state.iterations() * 20);
}
void BM_RecordBatch(benchmark::State& state) {
  if (state.range(0) == 2) {
    RecordBatch<UserFilter>(state);
  } else {
    RecordBatch<BloomSlices>(state);
  }
}
BENCHMARK(BM_RecordBatch)->Arg(1)->Arg(2);

// The feed loop's writes (bench/loadgen/feed_loop.cc): each user preloaded
// with 2,000 items at 7 event times over 28 days (the loop's preload, ~286
// items per time, so the current slice starts with ~286), then sessions of
// kFeedSessionRequests requests of 20 fresh items at "now", kFeedGroup
// users' sessions interleaved as one writer call batches them. After
// kFeedSessions sessions a user's current slice holds ~1,900 codes: the
// writes see slices of ~300-1,900. The iterations are exactly that cycle of
// every user, so runs are comparable (and callgrind counts the same writes:
// RecordFeedWrite, below).
constexpr int kFeedUsers = 20;
constexpr int kFeedGroup = 5;
constexpr int kFeedSessionRequests = 10;
constexpr int kFeedSessions = 8;
constexpr int kFeedItemsPerRequest = 20;
constexpr int kFeedWritesPerCycle =
    kFeedUsers * kFeedSessions * kFeedSessionRequests;
// Mid-slice (the 5-day grid has a boundary at kNow): the preload's newest
// time lands in the current slice, its second newest in the one before.
constexpr int64_t kFeedNow = kNow + 5 * kDay / 2;

void PreloadFeedUser(const FilterPolicy& policy, uint64_t seed, UserFilter* f) {
  constexpr int kTimes = 7;
  constexpr int64_t kStep = 28 * kDay / kTimes;
  const std::vector<uint64_t> items = RandomHashes(2000, seed);
  *f = UserFilter();
  for (int g = kTimes - 1; g >= 0; --g) {
    std::vector<uint64_t> batch;
    for (size_t j = g; j < items.size(); j += kTimes) batch.push_back(items[j]);
    f->Record(policy, batch, kFeedNow - g * kStep - 1000);
  }
}

// One request's write, kept out of line so that callgrind can count exactly
// the timed work: valgrind --tool=callgrind --collect-atstart=no
// --toggle-collect='*RecordFeedWrite*' (docs/performance.md).
ABSL_ATTRIBUTE_NOINLINE uint64_t RecordFeedWrite(const FilterPolicy& policy,
                                                 UserFilter& f,
                                                 const uint64_t* items,
                                                 int64_t event_ms) {
  return f.Record(policy, {items, kFeedItemsPerRequest}, event_ms);
}

void BM_RecordFeedWrites(benchmark::State& state) {
  const FilterPolicy policy = *FilterPolicy::Create({});
  std::vector<UserFilter> users(kFeedUsers);
  for (int u = 0; u < kFeedUsers; ++u)
    PreloadFeedUser(policy, 1000 + u, &users[u]);
  const std::vector<uint64_t> fresh =
      RandomHashes(size_t{kFeedWritesPerCycle} * kFeedItemsPerRequest, 7);
  int64_t w = 0;
  uint64_t added = 0;
  for (auto _ : state) {
    // w = ((round * groups + group) * requests + request) * kFeedGroup + user
    const int64_t in_group = w % kFeedGroup;
    const int64_t group =
        w / (kFeedGroup * kFeedSessionRequests) % (kFeedUsers / kFeedGroup);
    UserFilter& f = users[group * kFeedGroup + in_group];
    added += RecordFeedWrite(policy, f, fresh.data() + w * kFeedItemsPerRequest,
                             kFeedNow + w);
    ++w;
  }
  state.counters["added_per_write"] =
      static_cast<double>(added) / static_cast<double>(w);
  state.SetItemsProcessed(state.iterations() * kFeedItemsPerRequest);
}
BENCHMARK(BM_RecordFeedWrites)->Iterations(kFeedWritesPerCycle);

// Bytes per user (filter heap, excluding the store's map entry, which
// GetUserStats adds: ~100 B) at range(0) items spread over the 7 slices of
// the default 30-day window, recorded range(1) items per call; plus the
// measured false-positive rate over 200,000 fresh keys. Not a timing: the
// loop runs once.
void BM_BytesPerUser(benchmark::State& state) {
  const size_t items = static_cast<size_t>(state.range(0));
  const size_t batch = static_cast<size_t>(state.range(1));
  const FilterPolicy policy = *FilterPolicy::Create({});
  const std::vector<uint64_t> recorded = RandomHashes(items, 11);
  UserFilter f;
  for (auto _ : state) {
    f = MakeUser(policy, recorded, std::min<int>(7, items), batch);
  }
  const std::vector<uint64_t> fresh = RandomHashes(200000, 12);
  std::vector<uint8_t> keep(fresh.size(), 1);
  f.RemoveExposed(policy, kNow, fresh, keep.data());
  const size_t fp = std::count(keep.begin(), keep.end(), 0);
  const UserFilterStats st = f.Stats(policy, kNow);
  state.counters["bytes"] = static_cast<double>(f.MemoryBytes());
  state.counters["bits_per_item"] = 8.0 * f.MemoryBytes() / items;
  state.counters["segments"] = st.segments;
  state.counters["fp_measured"] = static_cast<double>(fp) / fresh.size();
}
BENCHMARK(BM_BytesPerUser)
    ->ArgsProduct({{1, 20, 200, 2000, 20000, 50000}, {1, 1000000}})
    ->Iterations(1);

// A population whose per-user volumes follow Zipf (exponent 1) over 1 to
// 50,000 items, recorded 20 items per call spread over the window: the
// average filter bytes per user and per item, and the worst measured FP rate
// over the 20 largest users. Add ~57 B per user for the store's map slot
// (ShardedFilterStore::EntryOverheadBytes; user ids <= 13 bytes stay inline).
void BM_BytesPerUserZipf(benchmark::State& state) {
  constexpr int kUsers = 1000;
  constexpr double kMax = 50000;
  const FilterPolicy policy = *FilterPolicy::Create({});
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> u01(0, 1);
  double bytes = 0, items = 0, worst_fp = 0;
  for (auto _ : state) {
    std::vector<std::pair<size_t, UserFilter>> users;
    for (int u = 0; u < kUsers; ++u) {
      // Inverse CDF of the continuous 1/x law on [1, kMax].
      const size_t n = static_cast<size_t>(std::pow(kMax, u01(rng)));
      const std::vector<uint64_t> rec = RandomHashes(n, 1000 + u);
      users.emplace_back(n, MakeUser(policy, rec, std::min<int>(7, n), 20));
      bytes += users.back().second.MemoryBytes();
      items += n;
    }
    std::sort(users.begin(), users.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    const std::vector<uint64_t> fresh = RandomHashes(100000, 22);
    for (int i = 0; i < 20; ++i) {
      std::vector<uint8_t> keep(fresh.size(), 1);
      users[i].second.RemoveExposed(policy, kNow, fresh, keep.data());
      const size_t fp = std::count(keep.begin(), keep.end(), 0);
      worst_fp = std::max(worst_fp, static_cast<double>(fp) / fresh.size());
    }
  }
  state.counters["avg_bytes_per_user"] = bytes / kUsers;
  state.counters["avg_items_per_user"] = items / kUsers;
  state.counters["bits_per_item"] = 8 * bytes / items;
  state.counters["worst_fp_top20"] = worst_fp;
}
BENCHMARK(BM_BytesPerUserZipf)->Iterations(1)->Unit(benchmark::kMillisecond);

// One slice, 20 items at once: the light user, whose target is <= 100 B.
void BM_BytesTinyUser(benchmark::State& state) {
  const FilterPolicy policy = *FilterPolicy::Create({});
  const std::vector<uint64_t> rec = RandomHashes(20, 31);
  UserFilter f;
  for (auto _ : state) {
    f = UserFilter();
    f.Record(policy, rec, kNow);
  }
  state.counters["bytes"] = static_cast<double>(f.MemoryBytes());
}
BENCHMARK(BM_BytesTinyUser)->Iterations(1);

}  // namespace
}  // namespace exposure_filter

BENCHMARK_MAIN();
