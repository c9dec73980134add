// kafka-mock-cluster: runs librdkafka's mock Kafka cluster on loopback until
// SIGTERM/SIGINT, for multi-process tests (tests/e2e/test_kafka.py) and for
// trying the Kafka consumer without a broker (docs/kafka.md).
//
//   kafka-mock-cluster --topic=exposures --partitions=12
//
// prints one line, the bootstrap servers ("127.0.0.1:PORT"), then serves.
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "tools/kafka/kafka_mock_cluster.h"

ABSL_FLAG(int, brokers, 1, "mock brokers");
ABSL_FLAG(std::vector<std::string>, topic, {"exposures"},
          "topics to create (comma-separated)");
ABSL_FLAG(int, partitions, 12, "partitions of each topic");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Block the signals before any librdkafka thread starts, so they all
  // inherit the mask and sigwait below gets them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto cluster =
      exposure_filter::KafkaMockCluster::Start(absl::GetFlag(FLAGS_brokers));
  if (!cluster.ok()) {
    std::fprintf(stderr, "kafka-mock-cluster: %s\n",
                 cluster.status().ToString().c_str());
    return 1;
  }
  for (const std::string& topic : absl::GetFlag(FLAGS_topic)) {
    absl::Status s =
        (*cluster)->CreateTopic(topic, absl::GetFlag(FLAGS_partitions));
    if (!s.ok()) {
      std::fprintf(stderr, "kafka-mock-cluster: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::printf("%s\n", (*cluster)->bootstrap_servers().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  return 0;
}
