// What the routing client's failover path costs per call (docs/clients.md):
// FilterRecalled of 100 candidates against three no-op in-process replicas
// on loopback, through
//   - ExposureFilterClient (the blocking stub call, no routing),
//   - RoutingClient with R = 1 (callback API, one owner),
//   - RoutingClient with R = 2 and owner 0 answering UNAVAILABLE (every call
//     pays one failed try and fails over).
// The replicas do no work, so the figures are the client + transport cost.
#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure_filter/partitioning.h"
#include "exposure_filter/routing_client.h"

namespace exposure_filter {
namespace {

constexpr int32_t kPartitions = 12;
constexpr int kReplicas = 3;

class NoOpReplica final : public exposure::v1::ExposureFilter::Service {
 public:
  std::atomic<bool> unavailable{false};

  grpc::Status FilterRecalled(
      grpc::ServerContext*, const exposure::v1::FilterRecalledRequest* req,
      exposure::v1::FilterRecalledResponse* resp) override {
    if (unavailable) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
    *resp->mutable_kept_ids() = req->candidate_ids();
    return grpc::Status::OK;
  }
};

struct Cluster {
  Cluster() {
    for (int r = 0; r < kReplicas; ++r) {
      replicas.push_back(std::make_unique<NoOpReplica>());
      int port = 0;
      grpc::ServerBuilder b;
      b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                         &port);
      b.RegisterService(replicas.back().get());
      servers.push_back(b.BuildAndStart());
      addresses.push_back(absl::StrCat("127.0.0.1:", port));
    }
    for (int i = 0; user.empty(); ++i) {
      const std::string u = absl::StrCat("user:", i);
      if (ReplicaForUser(u, kPartitions, kReplicas) == 0) user = u;
    }
    request.set_surface("homefeed");
    request.set_user_id(user);
    for (int i = 0; i < 100; ++i) request.add_candidate_ids(1000 + i);
  }
  ~Cluster() {
    for (auto& s : servers) s->Shutdown();
  }

  std::unique_ptr<RoutingClient> Router(int32_t replication_factor) const {
    RoutingOptions o;
    o.partitions = kPartitions;
    o.replica_addresses = addresses;
    o.replication_factor = replication_factor;
    o.client.max_attempts = 1;
    o.client.deadline = absl::Seconds(5);
    return *RoutingClient::Connect(o, grpc::InsecureChannelCredentials());
  }

  std::vector<std::unique_ptr<NoOpReplica>> replicas;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<std::string> addresses;
  std::string user;
  exposure::v1::FilterRecalledRequest request;
};

void BM_DirectClient(benchmark::State& state) {
  Cluster c;
  ClientOptions o;
  o.max_attempts = 1;
  o.deadline = absl::Seconds(5);
  auto client = *ExposureFilterClient::Connect(
      c.addresses[0], grpc::InsecureChannelCredentials(), o);
  for (auto _ : state) {
    auto r = client->FilterRecalled(c.request);
    if (!r.ok()) state.SkipWithError("call failed");
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_DirectClient)->UseRealTime();

void BM_RoutedR1(benchmark::State& state) {
  Cluster c;
  auto router = c.Router(1);
  for (auto _ : state) {
    auto r = router->FilterRecalled(c.request);
    if (!r.ok()) state.SkipWithError("call failed");
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_RoutedR1)->UseRealTime();

void BM_RoutedR2OwnerZeroUnavailable(benchmark::State& state) {
  Cluster c;
  c.replicas[0]->unavailable = true;
  auto router = c.Router(2);
  for (auto _ : state) {
    auto r = router->FilterRecalled(c.request);
    if (!r.ok()) state.SkipWithError("call failed");
    benchmark::DoNotOptimize(r);
  }
  state.counters["failovers_per_call"] =
      static_cast<double>(router->stats().failovers) /
      static_cast<double>(state.iterations());
}
BENCHMARK(BM_RoutedR2OwnerZeroUnavailable)->UseRealTime();

}  // namespace
}  // namespace exposure_filter

BENCHMARK_MAIN();
