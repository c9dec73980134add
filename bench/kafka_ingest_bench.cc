// kafka_ingest_bench: the Kafka consumer's ingest throughput and end-to-end
// freshness, against librdkafka's mock cluster on loopback with
// the real server in-process (durable, --fsync=interval).
//
//  throughput  N messages are produced first; then the server starts and
//              the clock runs until it has recorded them all. Reports
//              messages/s and items/s (wall), and per core: items per CPU
//              second of the whole process (consumer, store, log and the
//              mock broker serving the fetches).
//  freshness   with the consumer caught up, one message at a time: produce
//              (acks from the mock broker), then poll FilterRecalled over
//              gRPC until the item is filtered. Reports p50/p99/max of
//              produce -> visible.
//
//   build/bench/kafka_ingest_bench --messages=200000 --items=10 --probes=300
#include <grpcpp/grpcpp.h>
#include <librdkafka/rdkafkacpp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tools/kafka/kafka_mock_cluster.h"

ABSL_FLAG(int, messages, 200000, "messages for the throughput run");
ABSL_FLAG(int, items, 10, "item ids per message");
ABSL_FLAG(int, users, 20000, "distinct users");
ABSL_FLAG(int, partitions, 12, "topic partitions");
ABSL_FLAG(int, probes, 300, "freshness samples");
ABSL_FLAG(std::string, fetch_wait_max_ms, "",
          "librdkafka fetch.wait.max.ms of the consumer (\"\" = its default)");
ABSL_FLAG(absl::Duration, batch_wait, absl::Milliseconds(50),
          "--kafka_max_batch_wait of the server");

namespace {

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::string Message(const std::string& user, uint64_t first, int n) {
  exposure::v1::Exposure e;
  e.set_user_id(user);
  for (int i = 0; i < n; ++i) e.add_item_ids(first + i);
  return e.SerializeAsString();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using exposure_filter::KafkaMockCluster;
  auto cluster = KafkaMockCluster::Start();
  if (!cluster.ok() ||
      !(*cluster)
           ->CreateTopic("exposures", absl::GetFlag(FLAGS_partitions))
           .ok()) {
    std::fprintf(stderr, "mock cluster failed\n");
    return 1;
  }
  std::string err;
  std::unique_ptr<RdKafka::Conf> conf(
      RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  conf->set("bootstrap.servers", (*cluster)->bootstrap_servers(), err);
  conf->set("partitioner", "murmur2_random", err);
  conf->set("queue.buffering.max.messages", "1000000", err);
  std::unique_ptr<RdKafka::Producer> producer(
      RdKafka::Producer::create(conf.get(), err));
  auto produce = [&](const std::string& key, const std::string& value) {
    while (producer->produce("exposures", RdKafka::Topic::PARTITION_UA,
                             RdKafka::Producer::RK_MSG_COPY,
                             const_cast<char*>(value.data()), value.size(),
                             key.data(), key.size(), 0,
                             nullptr) == RdKafka::ERR__QUEUE_FULL) {
      producer->poll(10);
    }
  };
  const int messages = absl::GetFlag(FLAGS_messages);
  const int items = absl::GetFlag(FLAGS_items);
  const int users = absl::GetFlag(FLAGS_users);
  for (int k = 0; k < messages; ++k) {
    produce(absl::StrCat("user-", k % users),
            Message(absl::StrCat("user-", k % users),
                    static_cast<uint64_t>(k) * items, items));
  }
  producer->flush(120000);

  std::string tmpl =
      (std::filesystem::temp_directory_path() / "ef_kafka_bench_XXXXXX")
          .string();
  const std::string dir = mkdtemp(tmpl.data());
  exposure_filter::ServerConfig c;
  c.listen_address = "127.0.0.1:0";
  c.durability.data_dir = dir;
  c.kafka.brokers = (*cluster)->bootstrap_servers();
  c.kafka.topic = "exposures";
  c.kafka.format = exposure_filter::KafkaMessageFormat::kExposure;
  c.kafka.max_batch_wait = absl::GetFlag(FLAGS_batch_wait);
  if (!absl::GetFlag(FLAGS_fetch_wait_max_ms).empty()) {
    c.kafka.librdkafka_config.emplace_back(
        "fetch.wait.max.ms", absl::GetFlag(FLAGS_fetch_wait_max_ms));
  }
  exposure_filter::SystemClock clock;
  const double cpu0 = CpuSeconds();
  const absl::Time t0 = absl::Now();
  auto server = exposure_filter::ExposureFilterServer::Start(c, &clock);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  exposure_filter::KafkaIngest* ingest = (*server)->kafka_ingest();
  while (ingest->stats().messages < static_cast<uint64_t>(messages)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  while (ingest->stats().exposures < static_cast<uint64_t>(messages)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
  const double cpu = CpuSeconds() - cpu0;
  const double total_items = static_cast<double>(messages) * items;
  std::printf(
      "throughput: %d messages x %d items in %.2f s wall, %.2f s CPU: "
      "%.0f messages/s, %.0f items/s; per core: %.0f messages/s, %.0f "
      "items/s (batches %llu)\n",
      messages, items, wall, cpu, messages / wall, total_items / wall,
      messages / cpu, total_items / cpu,
      static_cast<unsigned long long>(ingest->stats().batches));

  auto stub = exposure::v1::ExposureFilter::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                          grpc::InsecureChannelCredentials()));
  std::vector<double> ms;
  const int probes = absl::GetFlag(FLAGS_probes);
  for (int i = 0; i < probes; ++i) {
    const std::string user = absl::StrCat("fresh-", i % 97);
    const uint64_t item = (uint64_t{1} << 50) + i;
    const absl::Time start = absl::Now();
    produce(user, Message(user, item, 1));
    producer->flush(10000);
    exposure::v1::FilterRecalledRequest req;
    req.set_user_id(user);
    req.add_candidate_ids(item);
    for (;;) {
      exposure::v1::FilterRecalledResponse resp;
      grpc::ClientContext ctx;
      if (stub->FilterRecalled(&ctx, req, &resp).ok() &&
          resp.kept_ids_size() == 0) {
        break;
      }
      absl::SleepFor(absl::Microseconds(200));
    }
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(p * ms.size()))];
  };
  std::printf(
      "freshness (produce -> visible in FilterRecalled), %d samples, "
      "batch_wait %s, fetch.wait.max.ms %s: p50 %.1f ms, p99 %.1f ms, max %.1f "
      "ms\n",
      probes, absl::FormatDuration(absl::GetFlag(FLAGS_batch_wait)).c_str(),
      absl::GetFlag(FLAGS_fetch_wait_max_ms).empty()
          ? "default"
          : absl::GetFlag(FLAGS_fetch_wait_max_ms).c_str(),
      pct(0.50), pct(0.99), ms.back());
  (*server)->Shutdown();
  server->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
