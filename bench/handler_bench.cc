// Micro-benchmarks of the server's request path without the network: parse a
// 5,000-candidate FilterRecalled request, run the handler (validation,
// hashing, shard lookup, probes, response building), serialize the response.
// Together with the transport-ceiling server this splits a request's cost
// into transport, protobuf and filter (docs/performance.md).
//   build/bench/handler_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "exposure_filter/filter_view.h"
#include "src/server/arena_message_allocator.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/server/request_parser.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;
constexpr int64_t kDayMs = 86'400'000;
constexpr int64_t kNowMs = 1795392000000LL;
constexpr int kUsers = 1000;
constexpr int kItemsPerUser = 2000;

// A server core with kUsers users of kItemsPerUser exposures spread over the
// 30-day window (7 live slices), as exposure-filter-bench preloads them.
struct Core {
  ManualClock clock{kNowMs};
  std::unique_ptr<SurfaceRegistry> surfaces =
      *SurfaceRegistry::Create(FilterPolicyOptions{}, {}, 8);
  ShardedFilterStore store{64, &clock, surfaces.get()};
  ExposureFilterHandlers handlers{surfaces.get(), &store, RequestLimits{}};

  Core() {
    for (int u = 0; u < kUsers; ++u) {
      v1::RecordExposureRequest req;
      req.set_surface("bench");
      for (int g = 6; g >= 0; --g) {  // oldest first, as a stream
        v1::Exposure* e = req.add_exposures();
        e->set_user_id("u" + std::to_string(u));
        e->set_event_time_ms(kNowMs - g * 4 * kDayMs - 1000);
        for (int j = g; j < kItemsPerUser; j += 7) {
          e->add_item_ids((uint64_t{1} + u) << 32 | j);
        }
      }
      v1::RecordExposureResponse resp;
      (void)handlers.RecordExposure(req, &resp);
    }
  }
};

Core& SharedCore() {
  static Core* core = new Core();
  return *core;
}

v1::FilterRecalledRequest Request(int u, v1::ResultMode mode, uint64_t seed) {
  std::mt19937_64 rng(seed);
  v1::FilterRecalledRequest req;
  req.set_surface("bench");
  req.set_user_id("u" + std::to_string(u));
  req.set_mode(mode);
  for (int i = 0; i < 5000; ++i) {
    // Half recorded, at random positions (a fixed alternation would let the
    // branch predictor learn which candidates are members).
    req.add_candidate_ids(
        rng() & 1
            ? ((uint64_t{1} + u) << 32 | (rng() % kItemsPerUser))
            : ((uint64_t{1} + u) << 32 | 0x80000000u | (rng() & 0x7fffffff)));
  }
  return req;
}

void BM_FilterRecalledParse(benchmark::State& state) {
  const std::string wire = Request(1, v1::KEEP_MASK, 1).SerializeAsString();
  v1::FilterRecalledRequest req;
  for (auto _ : state) {
    benchmark::DoNotOptimize(req.ParseFromString(wire));
  }
  state.SetBytesProcessed(state.iterations() * wire.size());
}
BENCHMARK(BM_FilterRecalledParse);

// The 40 KB request as the service receives it (slices of a 16 KB HTTP/2
// frame each) parsed into a pooled arena message with the ids reserved:
// range(0) 0 = gRPC's generated-handler path (SerializationTraits::
// Deserialize, what the service used before it parsed requests itself),
// 1 = the service's own ParseRequest (request_parser.h) that replaced it.
// Same process, back to back, so the ratio holds on a loaded machine.
void BM_FilterRecalledParseReceived(benchmark::State& state) {
  const std::string wire = Request(1, v1::KEEP_MASK, 1).SerializeAsString();
  constexpr size_t kFrame = 16384;
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < wire.size(); at += kFrame) {
    slices.emplace_back(wire.data() + at, std::min(kFrame, wire.size() - at));
  }
  const grpc::ByteBuffer received(slices.data(), slices.size());
  ArenaMessageAllocator<v1::FilterRecalledRequest, v1::FilterRecalledResponse>
      allocator(&ReserveCandidateIds<v1::FilterRecalledRequest>);
  const bool service_parser = state.range(0) == 1;
  for (auto _ : state) {
    grpc::ByteBuffer bytes(received);  // shares the slices, copies nothing
    grpc::MessageHolder<v1::FilterRecalledRequest, v1::FilterRecalledResponse>*
        messages = allocator.AllocateMessages();
    const bool ok =
        service_parser
            ? ParseRequest(&bytes, messages->request()).ok()
            : grpc::SerializationTraits<v1::FilterRecalledRequest>::Deserialize(
                  &bytes, messages->request())
                  .ok();
    benchmark::DoNotOptimize(ok);
    messages->Release();
  }
  state.SetBytesProcessed(state.iterations() * wire.size());
  state.SetLabel(service_parser ? "ParseRequest" : "gRPC Deserialize");
}
BENCHMARK(BM_FilterRecalledParseReceived)->Arg(0)->Arg(1);

// range(0): 1 = KEEP_MASK, 0 = KEPT_IDS.
void BM_FilterRecalledHandler(benchmark::State& state) {
  Core& core = SharedCore();
  const v1::ResultMode mode = state.range(0) ? v1::KEEP_MASK : v1::KEPT_IDS;
  std::vector<v1::FilterRecalledRequest> reqs;
  for (int u = 0; u < 64; ++u)
    reqs.push_back(Request(u * 13 % kUsers, mode, u));
  size_t i = 0;
  for (auto _ : state) {
    v1::FilterRecalledResponse resp;
    benchmark::DoNotOptimize(
        core.handlers.FilterRecalled(reqs[i++ % reqs.size()], &resp));
  }
  state.SetItemsProcessed(state.iterations() * 5000);
  state.SetLabel(mode == v1::KEEP_MASK ? "KEEP_MASK" : "KEPT_IDS");
}
BENCHMARK(BM_FilterRecalledHandler)->Arg(1)->Arg(0);

void BM_FilterRecalledResponseSerialize(benchmark::State& state) {
  Core& core = SharedCore();
  const v1::ResultMode mode = state.range(0) ? v1::KEEP_MASK : v1::KEPT_IDS;
  v1::FilterRecalledResponse resp;
  (void)core.handlers.FilterRecalled(Request(3, mode, 3), &resp);
  std::string out;
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(resp.SerializeToString(&out));
  }
  state.SetBytesProcessed(state.iterations() * out.size());
}
BENCHMARK(BM_FilterRecalledResponseSerialize)->Arg(1)->Arg(0);

// RecordExposure of 50 users x 20 items (an exposure logger's batched write).
void BM_RecordExposureHandler(benchmark::State& state) {
  Core& core = SharedCore();
  std::mt19937_64 rng(5);
  std::vector<v1::RecordExposureRequest> reqs(16);
  for (auto& req : reqs) {
    req.set_surface("bench");
    for (int u = 0; u < 50; ++u) {
      v1::Exposure* e = req.add_exposures();
      e->set_user_id("w" + std::to_string(rng() % 20000));
      for (int j = 0; j < 20; ++j) e->add_item_ids(rng());
    }
  }
  size_t i = 0;
  for (auto _ : state) {
    v1::RecordExposureResponse resp;
    benchmark::DoNotOptimize(
        core.handlers.RecordExposure(reqs[i++ % reqs.size()], &resp));
  }
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(BM_RecordExposureHandler);

// The loadgen's record mix (exposure-filter-bench --mix=record): every call
// records 20 NEW items for each of 50 users drawn from a population of
// kFreshUsers, so users grow and every item is written (above, the 16
// requests repeat: after the first pass nothing is new). A fixed number of
// calls on a fresh core, so every build does the same work: each user gets
// ~kFreshCalls * 50 / kFreshUsers writes, ending near 500 items as in a
// compare_releases.sh record run. Requests are built kFreshBatch at a time
// outside the timing.
constexpr int kFreshUsers = 20'000;
constexpr int kFreshCalls = 10'000;
constexpr int kFreshBatch = 1'000;
void BM_RecordExposureHandlerFresh(benchmark::State& state) {
  ManualClock clock{kNowMs};
  std::unique_ptr<SurfaceRegistry> surfaces =
      *SurfaceRegistry::Create(FilterPolicyOptions{}, {}, 8);
  ShardedFilterStore store{64, &clock, surfaces.get()};
  ExposureFilterHandlers handlers{surfaces.get(), &store, RequestLimits{}};
  std::mt19937_64 rng(11);
  uint64_t next_item = 1;
  std::vector<v1::RecordExposureRequest> reqs;
  auto refill = [&] {
    reqs.assign(kFreshBatch, {});
    for (auto& req : reqs) {
      req.set_surface("bench");
      for (int u = 0; u < 50; ++u) {
        v1::Exposure* e = req.add_exposures();
        e->set_user_id("f" + std::to_string(rng() % kFreshUsers));
        for (int j = 0; j < 20; ++j) e->add_item_ids(next_item++);
      }
    }
  };
  refill();
  size_t i = 0;
  uint64_t added = 0;
  for (auto _ : state) {
    if (i == reqs.size()) {
      state.PauseTiming();
      refill();
      i = 0;
      state.ResumeTiming();
    }
    v1::RecordExposureResponse resp;
    benchmark::DoNotOptimize(handlers.RecordExposure(reqs[i++], &resp));
    added += resp.items_recorded();
  }
  state.SetItemsProcessed(state.iterations() * 1000);
  // Items the server counted as recorded per call.
  state.counters["recorded_per_call"] =
      static_cast<double>(added) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_RecordExposureHandlerFresh)->Iterations(kFreshCalls);

void BM_GetFilterHandler(benchmark::State& state) {
  Core& core = SharedCore();
  v1::GetFilterRequest req;
  req.set_surface("bench");
  req.set_user_id("u7");
  if (state.range(0)) {
    v1::GetFilterResponse first;
    (void)core.handlers.GetFilter(req, &first);
    req.set_if_version(first.version());
  }
  size_t bytes = 0;
  for (auto _ : state) {
    v1::GetFilterResponse resp;
    benchmark::DoNotOptimize(core.handlers.GetFilter(req, &resp));
    bytes = resp.filter().size();
  }
  state.counters["filter_bytes"] = static_cast<double>(bytes);
  state.SetLabel(state.range(0) ? "if_version (not modified)" : "full");
}
BENCHMARK(BM_GetFilterHandler)->Arg(0)->Arg(1);

// "GetFilter + local check" (pull mode): a client pulls the user's filter
// (the handler, as above), parses it (FilterView::Parse) and checks the
// 5,000 candidates of a FilterRecalled request locally (KeepMaskIds).
// Arg 0: all three per iteration; Arg 1: parse + check only, of bytes
// pulled once (the client's share). Same source in every build compared,
// so old and new servers' filters are checked by the same loop.
void BM_GetFilterLocalCheck(benchmark::State& state) {
  Core& core = SharedCore();
  v1::GetFilterRequest req;
  req.set_surface("bench");
  req.set_user_id("u7");
  const v1::FilterRecalledRequest cands = Request(7, v1::KEEP_MASK, 7);
  const std::vector<uint64_t> ids(cands.candidate_ids().begin(),
                                  cands.candidate_ids().end());
  std::vector<uint8_t> keep(ids.size());
  v1::GetFilterResponse pulled;
  (void)core.handlers.GetFilter(req, &pulled);
  const bool pull_each_time = state.range(0) == 0;
  for (auto _ : state) {
    v1::GetFilterResponse resp;
    if (pull_each_time) (void)core.handlers.GetFilter(req, &resp);
    absl::StatusOr<FilterView> view =
        FilterView::Parse(pull_each_time ? resp.filter() : pulled.filter());
    if (!view.ok()) {
      state.SkipWithError(std::string(view.status().message()).c_str());
      break;
    }
    view->KeepMaskIds(ids, keep.data());
    benchmark::DoNotOptimize(keep.data());
  }
  state.counters["filter_bytes"] = static_cast<double>(pulled.filter().size());
  state.counters["kept"] =
      static_cast<double>(std::count(keep.begin(), keep.end(), uint8_t{1}));
  state.SetLabel(pull_each_time ? "pull + parse + check 5000"
                                : "parse + check 5000");
}
BENCHMARK(BM_GetFilterLocalCheck)->Arg(0)->Arg(1);

}  // namespace
}  // namespace exposure_filter

BENCHMARK_MAIN();
