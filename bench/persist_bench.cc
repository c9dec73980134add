// Durability benchmarks (figures in docs/durability.md; never asserted):
//   BM_RecordCommit/<policy>   store Record of a 10-user x 20-item batch plus
//                              the write-ahead log Commit an RPC waits for,
//                              from 1 and 8 threads (group commit), per
//                              fsync policy, against no log at all.
//   BM_SnapshotWrite           builds EF_BENCH_USERS users (default
//                              1,000,000) x EF_BENCH_ITEMS items (200) and
//                              writes a snapshot: time, CPU and size.
//   BM_Recover                 recovers that data dir as the server does at
//                              startup: wall and CPU time.
//   build-rel/bench/persist_bench --benchmark_filter=RecordCommit
//   build-rel/bench/persist_bench --benchmark_filter=SnapshotWrite
//   build-rel/bench/persist_bench --benchmark_filter=Recover
// The data dir is under $TMPDIR (default /tmp): put it on the disk you care
// about, fsync cost is the disk's.
#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
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

// Restart figures (docs/durability.md): the two halves run as separate
// invocations so the page cache can be dropped between them (cold) or not
// (warm):
//   EF_BENCH_USERS=1000000 persist_bench --benchmark_filter=SnapshotWrite
//   sync; echo 3 > /proc/sys/vm/drop_caches            # cold only
//   persist_bench --benchmark_filter=Recover
// The data dir (EF_BENCH_DIR, default $TMPDIR/ef_persist_bench_restart) is
// kept between them; EF_BENCH_ITEMS (default 200) items per user.
std::string RestartDir() {
  const char* env = std::getenv("EF_BENCH_DIR");
  return env ? std::string(env)
             : (std::filesystem::temp_directory_path() /
                "ef_persist_bench_restart")
                   .string();
}

int EnvInt(const char* name, int fallback) {
  const char* env = std::getenv(name);
  return env ? std::atoi(env) : fallback;
}

// User and system CPU seconds of the whole process (every thread), so a
// parallel load shows its total work beside its wall time.
struct CpuSeconds {
  double user = 0, sys = 0;
  static CpuSeconds Now() {
    rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    auto s = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec * 1e-6; };
    return {s(ru.ru_utime), s(ru.ru_stime)};
  }
};

void BM_SnapshotWrite(benchmark::State& state) {
  const int users = EnvInt("EF_BENCH_USERS", 1'000'000);
  const int items = EnvInt("EF_BENCH_ITEMS", 200);
  const std::string dir = RestartDir();
  for (auto _ : state) {
    state.PauseTiming();
    std::filesystem::remove_all(dir);
    const absl::Time t0 = absl::Now();
    DurableStore s(dir, FsyncPolicy::kNever, /*durable=*/true);
    s.store->SetJournal(nullptr);  // build the state without logging it
    // Two builder threads (the machine's cores): the store is sharded, and
    // the build is setup, not a figure.
    std::vector<std::thread> builders;
    constexpr int kBuilders = 2;
    for (int b = 0; b < kBuilders; ++b) {
      builders.emplace_back([&, b] {
        std::vector<uint64_t> h(items);
        for (int u = b; u < users; u += kBuilders) {
          uint64_t id = uint64_t(u) * items;
          for (uint64_t& x : h) x = HashItemId(id++);
          const std::string user = "user-" + std::to_string(u);
          const UserExposures ue{user, h, 0};
          s.store->Record(*s.surface, {&ue, 1});
        }
      });
    }
    for (std::thread& t : builders) t.join();
    s.store->SetJournal(s.durability.get());
    state.counters["build_s"] = absl::ToDoubleSeconds(absl::Now() - t0);
    state.counters["store_bytes"] = double(s.store->Usage(1).bytes);
    state.ResumeTiming();
    const absl::Time t1 = absl::Now();
    const CpuSeconds c1 = CpuSeconds::Now();
    if (!s.durability->Snapshot().ok()) state.SkipWithError("snapshot");
    const CpuSeconds c2 = CpuSeconds::Now();
    state.counters["snapshot_s"] = absl::ToDoubleSeconds(absl::Now() - t1);
    state.counters["snapshot_user_s"] = c2.user - c1.user;
    state.counters["snapshot_sys_s"] = c2.sys - c1.sys;
    state.counters["snapshot_bytes"] =
        double(s.durability->stats().last_snapshot_bytes);
    state.PauseTiming();
    // Closed without a final snapshot: the dir holds exactly this one
    // snapshot and an empty log segment, as after a clean shutdown.
    if (!s.durability->Close(/*final_snapshot=*/false).ok()) {
      state.SkipWithError("close");
    }
    state.ResumeTiming();
  }
  state.counters["users"] = users;
  state.counters["items_per_user"] = items;
}
BENCHMARK(BM_SnapshotWrite)->Iterations(1)->Unit(benchmark::kSecond);

// Recovery through StoreDurability::Recover, as the server runs it at
// startup (same shard count, 64); the data dir is left as it was found.
void BM_Recover(benchmark::State& state) {
  const std::string dir = RestartDir();
  if (!std::filesystem::exists(dir)) {
    state.SkipWithError("no data dir: run BM_SnapshotWrite first");
    return;
  }
  for (auto _ : state) {
    const absl::Time t0 = absl::Now();
    const CpuSeconds c0 = CpuSeconds::Now();
    DurableStore r(dir, FsyncPolicy::kNever, /*durable=*/true);
    const CpuSeconds c1 = CpuSeconds::Now();
    state.counters["recover_s"] = absl::ToDoubleSeconds(absl::Now() - t0);
    state.counters["recover_user_s"] = c1.user - c0.user;
    state.counters["recover_sys_s"] = c1.sys - c0.sys;
    state.counters["users_loaded"] = double(r.recovery.users_loaded);
    state.counters["store_bytes"] = double(r.store->Usage(1).bytes);
    state.PauseTiming();
    // Not part of the figure: a clean close without a snapshot, so the
    // next run recovers the same snapshot again.
    r.durability->Close(/*final_snapshot=*/false).IgnoreError();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Recover)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace exposure_filter

BENCHMARK_MAIN();
