// replicated_write_bench: what a RecordExposure costs when it goes through
// Kafka (--replication_factor >= 2), against librdkafka's mock cluster on
// loopback with the real servers in-process (durable, --fsync=interval).
//
//   replicated  N = 2 replicas, R = 2 (each owns every partition), Kafka
//               ingest on: the call is produced (idempotent, acks=all) and
//               answered from the delivery report; both copies apply it
//               from the topic.
//   standalone  one replica, R = 1, no Kafka: the call is applied and
//               answered once the write-ahead log has it (today's path).
//
// `--threads` clients each send `--calls / --threads` calls of one user and
// `--items` items, back to back, to replica 0; the latency of every call is
// kept and p50/p99/max reported per mode. With --freshness, after each
// replicated call the bench polls FilterRecalled on both copies until the
// item is filtered (acknowledged -> visible on every copy).
//
//   build/bench/replicated_write_bench --calls=2000 --threads=1
//   build/bench/replicated_write_bench --calls=300 --freshness
//   --fetch_wait_max_ms=10
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tools/kafka/kafka_mock_cluster.h"

ABSL_FLAG(int, calls, 2000, "RecordExposure calls per mode");
ABSL_FLAG(int, threads, 1, "concurrent clients");
ABSL_FLAG(int, items, 10, "item ids per call");
ABSL_FLAG(int, partitions, 12, "topic partitions");
ABSL_FLAG(std::string, fetch_wait_max_ms, "",
          "librdkafka fetch.wait.max.ms of the consumers (\"\" = its default "
          "500: the mock broker holds an empty fetch that long)");
ABSL_FLAG(bool, freshness, false,
          "replicated: also measure acknowledged -> filtered on both copies "
          "(one client)");

namespace {

using exposure_filter::ExposureFilterServer;
using exposure_filter::ServerConfig;

std::string TempDir() {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "ef_rw_bench_XXXXXX").string();
  return mkdtemp(tmpl.data());
}

ServerConfig BaseConfig(const std::string& dir) {
  ServerConfig c;
  c.listen_address = "127.0.0.1:0";
  c.durability.data_dir = dir;
  c.durability.fsync = exposure_filter::FsyncPolicy::kInterval;
  return c;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

void Report(const char* mode, const std::vector<double>& ms, double wall_s) {
  std::printf(
      "%-11s calls=%zu threads=%d items/call=%d  p50=%.2f ms  p99=%.2f ms  "
      "max=%.2f ms  calls/s=%.0f\n",
      mode, ms.size(), absl::GetFlag(FLAGS_threads), absl::GetFlag(FLAGS_items),
      Percentile(ms, 0.5), Percentile(ms, 0.99),
      *std::max_element(ms.begin(), ms.end()), ms.size() / wall_s);
}

exposure::v1::RecordExposureRequest Call(int thread, int i) {
  exposure::v1::RecordExposureRequest req;
  exposure::v1::Exposure* e = req.add_exposures();
  e->set_user_id(absl::StrCat("bench-", thread, "-", i % 500));
  const int items = absl::GetFlag(FLAGS_items);
  for (int k = 0; k < items; ++k) {
    e->add_item_ids(static_cast<uint64_t>(i) * items + k);
  }
  return req;
}

// Drives the calls against `address`; returns per-call latencies in ms.
// `after_call` (may be empty) runs after each acknowledged call, untimed.
std::vector<double> Drive(
    const std::string& address, double* wall_s,
    const std::function<void(const exposure::v1::RecordExposureRequest&)>&
        after_call) {
  const int threads = absl::GetFlag(FLAGS_threads);
  const int per_thread = absl::GetFlag(FLAGS_calls) / threads;
  std::vector<std::vector<double>> lat(threads);
  const absl::Time start = absl::Now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto stub = exposure::v1::ExposureFilter::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
      for (int i = 0; i < per_thread; ++i) {
        const exposure::v1::RecordExposureRequest req = Call(t, i);
        exposure::v1::RecordExposureResponse resp;
        grpc::ClientContext ctx;
        const absl::Time t0 = absl::Now();
        const grpc::Status s = stub->RecordExposure(&ctx, req, &resp);
        lat[t].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
        if (!s.ok()) {
          std::fprintf(stderr, "RecordExposure: %s\n",
                       s.error_message().c_str());
          std::exit(1);
        }
        if (after_call) after_call(req);
      }
    });
  }
  for (std::thread& th : pool) th.join();
  *wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  std::vector<double> all;
  for (const auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  exposure_filter::SystemClock clock;
  std::vector<std::string> dirs;
  {
    // Standalone baseline.
    dirs.push_back(TempDir());
    auto server = ExposureFilterServer::Start(BaseConfig(dirs.back()), &clock);
    if (!server.ok()) {
      std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
      return 1;
    }
    double wall = 0;
    const std::vector<double> ms =
        Drive(absl::StrCat("127.0.0.1:", (*server)->port()), &wall, nullptr);
    Report("standalone", ms, wall);
  }
  {
    auto cluster = exposure_filter::KafkaMockCluster::Start();
    if (!cluster.ok() ||
        !(*cluster)
             ->CreateTopic("exposures", absl::GetFlag(FLAGS_partitions))
             .ok()) {
      std::fprintf(stderr, "mock cluster failed\n");
      return 1;
    }
    std::vector<std::unique_ptr<ExposureFilterServer>> servers;
    std::vector<std::unique_ptr<exposure::v1::ExposureFilter::Stub>> stubs;
    for (int r = 0; r < 2; ++r) {
      dirs.push_back(TempDir());
      ServerConfig c = BaseConfig(dirs.back());
      c.cluster.partitions = absl::GetFlag(FLAGS_partitions);
      c.cluster.replicas = 2;
      c.cluster.replica_ordinal = r;
      c.cluster.replication_factor = 2;
      c.kafka.brokers = (*cluster)->bootstrap_servers();
      c.kafka.max_batch_wait = absl::Milliseconds(5);
      if (!absl::GetFlag(FLAGS_fetch_wait_max_ms).empty()) {
        c.kafka.librdkafka_config.emplace_back(
            "fetch.wait.max.ms", absl::GetFlag(FLAGS_fetch_wait_max_ms));
      }
      auto server = ExposureFilterServer::Start(c, &clock);
      if (!server.ok()) {
        std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
        return 1;
      }
      servers.push_back(*std::move(server));
      stubs.push_back(exposure::v1::ExposureFilter::NewStub(grpc::CreateChannel(
          absl::StrCat("127.0.0.1:", servers.back()->port()),
          grpc::InsecureChannelCredentials())));
    }
    std::vector<double> fresh_ms;
    std::function<void(const exposure::v1::RecordExposureRequest&)> fresh;
    if (absl::GetFlag(FLAGS_freshness)) {
      fresh = [&](const exposure::v1::RecordExposureRequest& req) {
        const absl::Time t0 = absl::Now();
        for (auto& stub : stubs) {
          for (;;) {
            exposure::v1::FilterRecalledRequest f;
            f.set_user_id(req.exposures(0).user_id());
            f.add_candidate_ids(req.exposures(0).item_ids(0));
            exposure::v1::FilterRecalledResponse out;
            grpc::ClientContext ctx;
            if (stub->FilterRecalled(&ctx, f, &out).ok() &&
                out.kept_ids_size() == 0) {
              break;
            }
            absl::SleepFor(absl::Microseconds(200));
          }
        }
        fresh_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      };
    }
    double wall = 0;
    const std::vector<double> ms =
        Drive(absl::StrCat("127.0.0.1:", servers[0]->port()), &wall, fresh);
    Report("replicated", ms, wall);
    if (!fresh_ms.empty()) {
      std::printf(
          "freshness  acknowledged -> filtered on both copies: p50=%.2f ms  "
          "p99=%.2f ms  max=%.2f ms (--kafka_max_batch_wait=5ms)\n",
          Percentile(fresh_ms, 0.5), Percentile(fresh_ms, 0.99),
          *std::max_element(fresh_ms.begin(), fresh_ms.end()));
    }
    servers.clear();
  }
  for (const std::string& d : dirs) std::filesystem::remove_all(d);
  return 0;
}
