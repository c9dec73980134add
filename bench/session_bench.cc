// The feed loop a recall server runs, per recall mode, against the real
// server in-process on loopback (docs/session-stream.md): sessions of K
// requests per user; each request checks 5,000 candidates for the user,
// then 20 of the survivors are recorded for that user (the feed's own
// exposures) before the session's next request. Modes:
//   Session  FilterReplica: subscribe on first use, local checks after
//   ModeA    unary FilterRecalled (KEEP_MASK) per request
//   ModeB    FilterCache: GetFilter with if_version per request, local check
// The write is the same unary RecordExposure in every mode (not batched
// by a separate writer as production loggers do), so the differences
// between modes are the recall path. Counters: the replica's hit ratio,
// checks by path; false negatives (an item recorded by an earlier request
// of the session kept by a later one) are counted, not asserted.
//
//   build-release/bench/session_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/filter_cache.h"
#include "exposure_filter/filter_replica.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;

constexpr int kCandidates = 5000;
constexpr int kShown = 20;

struct Fixture {
  Fixture() {
    ServerConfig c;
    c.listen_address = "127.0.0.1:0";
    server = *ExposureFilterServer::Start(c, &clock);
    channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                  grpc::InsecureChannelCredentials());
    stub = v1::ExposureFilter::NewStub(channel);
  }
  SystemClock clock;
  std::unique_ptr<ExposureFilterServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::ExposureFilter::Stub> stub;
};

Fixture& Shared() {
  static Fixture* f = new Fixture();
  return *f;
}

// kSessionSync also waits, after each write, for a pong (one round trip):
// the next request of a real feed comes seconds after the write, long
// after its push; this loop's comes at once, within the staleness bound.
// CPU of the whole process (client and in-process server), in seconds.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

enum class Mode { kSession, kSessionSync, kModeA, kModeB };

void BM_FeedLoop(benchmark::State& state, Mode mode) {
  Fixture& f = Shared();
  const int k = static_cast<int>(state.range(0));
  static int run = 0;
  const std::string prefix = absl::StrCat("bench-", ++run, "-");
  std::unique_ptr<FilterReplica> replica;
  std::unique_ptr<ExposureFilterClient> client;
  std::unique_ptr<FilterCache> cache;
  if (mode == Mode::kSession || mode == Mode::kSessionSync) {
    replica = *FilterReplica::Connect(f.channel, FilterReplicaOptions{});
  } else if (mode == Mode::kModeB) {
    client = std::make_unique<ExposureFilterClient>(f.channel, ClientOptions{});
    cache = std::make_unique<FilterCache>(client.get(), FilterCacheOptions{});
  }
  std::mt19937_64 rng(42);
  std::vector<uint64_t> ids(kCandidates);
  std::vector<uint8_t> keep(kCandidates);
  std::vector<uint64_t> shown;
  uint64_t requests = 0, false_negatives = 0;
  const double cpu_before = ProcessCpuSeconds();
  int user = 0, in_session = 0;
  std::string user_id = absl::StrCat(prefix, user);
  for (auto _ : state) {
    if (in_session == k) {
      in_session = 0;
      user_id = absl::StrCat(prefix, ++user);
      shown.clear();
    }
    // Candidates: fresh ones, plus everything shown so far in the session
    // (a recall source that keeps returning them).
    for (int i = 0; i < kCandidates; ++i) ids[i] = rng();
    for (size_t i = 0; i < shown.size() && i < ids.size(); ++i) {
      ids[i] = shown[i];
    }
    if (replica != nullptr) {
      if (!replica->Check("h", user_id, ids, {}, keep.data()).ok()) {
        state.SkipWithError("check failed");
        break;
      }
    } else if (mode == Mode::kModeA) {
      v1::FilterRecalledRequest req;
      req.set_surface("h");
      req.set_user_id(user_id);
      req.set_mode(v1::KEEP_MASK);
      req.mutable_candidate_ids()->Add(ids.begin(), ids.end());
      v1::FilterRecalledResponse resp;
      grpc::ClientContext ctx;
      if (!f.stub->FilterRecalled(&ctx, req, &resp).ok()) {
        state.SkipWithError("FilterRecalled failed");
        break;
      }
      for (int i = 0; i < kCandidates; ++i) {
        keep[i] =
            (static_cast<unsigned char>(resp.keep_mask()[i / 8]) >> (i % 8)) &
            1;
      }
    } else {
      auto pulled = cache->Get("h", user_id);
      if (!pulled.ok()) {
        state.SkipWithError("GetFilter failed");
        break;
      }
      (*pulled)->view().KeepMaskIds(ids, keep.data());
    }
    for (size_t i = 0; i < shown.size() && i < ids.size(); ++i) {
      false_negatives += keep[i];
    }
    // The feed shows 20 survivors; the logger records them.
    v1::RecordExposureRequest rec;
    rec.set_surface("h");
    v1::Exposure* e = rec.add_exposures();
    e->set_user_id(user_id);
    int added = 0;
    for (int i = static_cast<int>(shown.size());
         i < kCandidates && added < kShown; ++i) {
      if (!keep[i]) continue;
      e->add_item_ids(ids[i]);
      shown.push_back(ids[i]);
      ++added;
    }
    v1::RecordExposureResponse rr;
    grpc::ClientContext ctx;
    if (!f.stub->RecordExposure(&ctx, rec, &rr).ok()) {
      state.SkipWithError("RecordExposure failed");
      break;
    }
    if (mode == Mode::kSessionSync && !replica->Sync().ok()) {
      state.SkipWithError("Sync failed");
      break;
    }
    ++in_session;
    ++requests;
  }
  state.SetItemsProcessed(static_cast<int64_t>(requests));
  state.counters["cpu_us_per_request"] =
      requests == 0 ? 0 : (ProcessCpuSeconds() - cpu_before) * 1e6 / requests;
  state.counters["false_negatives"] = static_cast<double>(false_negatives);
  if (replica != nullptr) {
    const FilterReplicaStats st = replica->stats();
    state.counters["hit_ratio"] = st.hit_ratio();
    state.counters["stream_checks"] = static_cast<double>(st.stream_checks);
    state.counters["not_synced"] = static_cast<double>(st.not_synced);
    state.counters["stale"] = static_cast<double>(st.stale);
  }
}

// The recall path alone: the same user (1,000 exposures) checked again and
// again, no writes: what each mode costs a request, client and server.
void BM_Recall(benchmark::State& state, Mode mode) {
  Fixture& f = Shared();
  static int run = 0;
  const std::string user = absl::StrCat("recall-", ++run);
  std::mt19937_64 rng(7);
  {
    v1::RecordExposureRequest rec;
    rec.set_surface("h");
    v1::Exposure* e = rec.add_exposures();
    e->set_user_id(user);
    for (int i = 0; i < 1000; ++i) e->add_item_ids(rng());
    v1::RecordExposureResponse rr;
    grpc::ClientContext ctx;
    if (!f.stub->RecordExposure(&ctx, rec, &rr).ok()) {
      state.SkipWithError("RecordExposure failed");
      return;
    }
  }
  std::unique_ptr<FilterReplica> replica;
  std::unique_ptr<ExposureFilterClient> client;
  std::unique_ptr<FilterCache> cache;
  if (mode == Mode::kSession) {
    replica = *FilterReplica::Connect(f.channel, FilterReplicaOptions{});
  } else if (mode == Mode::kModeB) {
    client = std::make_unique<ExposureFilterClient>(f.channel, ClientOptions{});
    cache = std::make_unique<FilterCache>(client.get(), FilterCacheOptions{});
  }
  std::vector<uint64_t> ids(kCandidates);
  for (uint64_t& id : ids) id = rng();
  std::vector<uint8_t> keep(kCandidates);
  v1::FilterRecalledRequest req;
  req.set_surface("h");
  req.set_user_id(user);
  req.set_mode(v1::KEEP_MASK);
  req.mutable_candidate_ids()->Add(ids.begin(), ids.end());
  uint64_t requests = 0;
  const double cpu_before = ProcessCpuSeconds();
  for (auto _ : state) {
    bool ok = true;
    if (mode == Mode::kSession) {
      ok = replica->Check("h", user, ids, {}, keep.data()).ok();
    } else if (mode == Mode::kModeA) {
      v1::FilterRecalledResponse resp;
      grpc::ClientContext ctx;
      ok = f.stub->FilterRecalled(&ctx, req, &resp).ok();
    } else {
      auto pulled = cache->Get("h", user);
      ok = pulled.ok();
      if (ok) (*pulled)->view().KeepMaskIds(ids, keep.data());
    }
    if (!ok) {
      state.SkipWithError("check failed");
      break;
    }
    ++requests;
  }
  state.SetItemsProcessed(static_cast<int64_t>(requests));
  state.counters["cpu_us_per_request"] =
      requests == 0 ? 0 : (ProcessCpuSeconds() - cpu_before) * 1e6 / requests;
  if (replica != nullptr)
    state.counters["hit_ratio"] = replica->stats().hit_ratio();
}

BENCHMARK_CAPTURE(BM_Recall, Session, Mode::kSession)->UseRealTime();
BENCHMARK_CAPTURE(BM_Recall, ModeA, Mode::kModeA)->UseRealTime();
BENCHMARK_CAPTURE(BM_Recall, ModeB, Mode::kModeB)->UseRealTime();

BENCHMARK_CAPTURE(BM_FeedLoop, Session, Mode::kSession)
    ->Arg(1)
    ->Arg(10)
    ->Arg(50)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_FeedLoop, SessionSync, Mode::kSessionSync)
    ->Arg(1)
    ->Arg(10)
    ->Arg(50)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_FeedLoop, ModeA, Mode::kModeA)
    ->Arg(1)
    ->Arg(10)
    ->Arg(50)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_FeedLoop, ModeB, Mode::kModeB)
    ->Arg(1)
    ->Arg(10)
    ->Arg(50)
    ->UseRealTime();

}  // namespace
}  // namespace exposure_filter

BENCHMARK_MAIN();
