// Durability benchmarks (figures in docs/durability.md; never asserted):
//   BM_RecordCommit/<policy>   store Record of a 10-user x 20-item batch plus
//                              the write-ahead log Commit an RPC waits for,
//                              from 1 and 8 threads (group commit), per
//                              fsync policy, against no log at all.
//   BM_SnapshotAndRecover      snapshot write time and size, then recovery
//                              time, for EF_BENCH_USERS users (default
//                              1,000,000) x 200 items each.
//   build-rel/bench/persist_bench --benchmark_filter=RecordCommit
//   build-rel/bench/persist_bench --benchmark_filter=SnapshotAndRecover
// The data dir is under $TMPDIR (default /tmp): put it on the disk you care
// about, fsync cost is the disk's.
#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "exposure_filter/item_hash.h"
#include "src/persist/store_durability.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {
namespace {

std::string TempDataDir(const char* name) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           (std::string("ef_persist_bench_") + name))
                              .string();
  std::filesystem::remove_all(dir);
  return dir;
}

struct DurableStore {
  explicit DurableStore(const std::string& dir, FsyncPolicy policy,
                        bool durable, int shards = 64) {
    spdlog::set_level(spdlog::level::warn);  // no recovery lines in figures
    surfaces = *SurfaceRegistry::Create(FilterPolicyOptions{}, {}, 8);
    store =
        std::make_unique<ShardedFilterStore>(shards, &clock, surfaces.get());
    surface = *surfaces->GetOrCreate("homefeed");
    if (!durable) return;
    DurabilityOptions o;
    o.data_dir = dir;
    o.fsync = policy;
    o.snapshot_interval = absl::ZeroDuration();
    o.snapshot_wal_bytes = 0;
    durability = *StoreDurability::Open(o, surfaces.get(), store.get());
    auto report = durability->Recover();
    if (!report.ok()) std::abort();
    recovery = *report;
  }
  SystemClock clock;
  std::unique_ptr<SurfaceRegistry> surfaces;
  std::unique_ptr<ShardedFilterStore> store;
  const Surface* surface = nullptr;
  std::unique_ptr<StoreDurability> durability;
  RecoveryReport recovery;
};

// policy: 0 always, 1 interval, 2 never, 3 no log.
DurableStore* g_store = nullptr;

void BM_RecordCommit(benchmark::State& state) {
  const int policy = static_cast<int>(state.range(0));
  if (state.thread_index() == 0) {
    g_store =
        new DurableStore(TempDataDir("record"),
                         static_cast<FsyncPolicy>(policy % 3), policy != 3);
  }
  // Barrier: Google Benchmark starts the timed loop of all threads together
  // after every thread reached it.
  constexpr int kUsers = 10, kItems = 20;
  std::vector<std::vector<uint64_t>> hashes(kUsers);
  std::vector<std::string> users(kUsers);
  uint64_t next = uint64_t(state.thread_index() + 1) << 40;
  uint64_t round = 0;
  for (auto _ : state) {
    std::vector<UserExposures> batch;
    for (int u = 0; u < kUsers; ++u) {
      users[u] = "t" + std::to_string(state.thread_index()) + "-u" +
                 std::to_string((round * kUsers + u) % 10000);
      hashes[u].clear();
      for (int i = 0; i < kItems; ++i) hashes[u].push_back(HashItemId(next++));
      batch.push_back(UserExposures{users[u], hashes[u], 0});
    }
    g_store->store->Record(*g_store->surface, batch);
    if (g_store->durability) {
      if (!g_store->durability->Commit().ok()) state.SkipWithError("commit");
    }
    ++round;
  }
  state.SetItemsProcessed(state.iterations() * kUsers * kItems);
  if (state.thread_index() == 0) {
    if (g_store->durability) {
      const WalStats st = g_store->durability->stats().wal;
      state.counters["records_per_write"] =
          st.writes ? double(st.records) / st.writes : 0;
      state.counters["fsyncs"] = double(st.syncs);
    }
    delete g_store;
    g_store = nullptr;
  }
}
BENCHMARK(BM_RecordCommit)
    ->ArgName("policy_always0_interval1_never2_nolog3")
    ->DenseRange(0, 3)
    ->Threads(1)
    ->Threads(8)
    ->UseRealTime()
    ->MinTime(1.0);

void BM_SnapshotAndRecover(benchmark::State& state) {
  const char* env = std::getenv("EF_BENCH_USERS");
  const int users = env ? std::atoi(env) : 1'000'000;
  constexpr int kItems = 200;
  const std::string dir = TempDataDir("snapshot");
  for (auto _ : state) {
    double snapshot_s = 0, recover_s = 0, recover_cpu_s = 0, bytes = 0,
           loaded = 0, build_s = 0, mem = 0;
    {
      state.PauseTiming();
      const absl::Time t0 = absl::Now();
      DurableStore s(dir, FsyncPolicy::kNever, /*durable=*/true);
      s.store->SetJournal(nullptr);  // build the state without logging it
      std::vector<uint64_t> h(kItems);
      uint64_t id = 0;
      for (int u = 0; u < users; ++u) {
        for (uint64_t& x : h) x = HashItemId(id++);
        const std::string user = "user-" + std::to_string(u);
        const UserExposures ue{user, h, 0};
        s.store->Record(*s.surface, {&ue, 1});
      }
      s.store->SetJournal(s.durability.get());
      build_s = absl::ToDoubleSeconds(absl::Now() - t0);
      mem = double(s.store->Usage(1).bytes);
      state.ResumeTiming();
      const absl::Time t1 = absl::Now();
      if (!s.durability->Snapshot().ok()) state.SkipWithError("snapshot");
      snapshot_s = absl::ToDoubleSeconds(absl::Now() - t1);
      bytes = double(s.durability->stats().last_snapshot_bytes);
      state.PauseTiming();
    }
    {
      const absl::Time t2 = absl::Now();
      const std::clock_t c2 = std::clock();
      DurableStore r(dir, FsyncPolicy::kNever, /*durable=*/true);
      recover_s = absl::ToDoubleSeconds(absl::Now() - t2);
      // CPU seconds of the process: on a shared machine, wall time also
      // counts other tenants' load.
      recover_cpu_s = double(std::clock() - c2) / CLOCKS_PER_SEC;
      loaded = double(r.recovery.users_loaded);
    }
    state.ResumeTiming();
    state.counters["users"] = users;
    state.counters["store_bytes"] = mem;
    state.counters["build_s"] = build_s;
    state.counters["snapshot_s"] = snapshot_s;
    state.counters["snapshot_bytes"] = bytes;
    state.counters["recover_s"] = recover_s;
    state.counters["recover_cpu_s"] = recover_cpu_s;
    state.counters["users_loaded"] = loaded;
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_SnapshotAndRecover)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace exposure_filter

BENCHMARK_MAIN();
