// kafka-mock-cluster: runs librdkafka's mock Kafka cluster on loopback until
// SIGTERM/SIGINT, for multi-process tests (tests/e2e/test_kafka.py) and for
// trying the Kafka consumer without a broker (docs/kafka.md).
//
//   kafka-mock-cluster --topic=exposures --partitions=12
//
// prints one line, the bootstrap servers ("127.0.0.1:PORT"), then serves.
// With --control it also reads commands on stdin, one reply line each on
// stdout (tools/kafka/mock_cluster_control.h), e.g. for the failover drill:
//
//   kafka-mock-cluster --brokers=2 --control
//   leader exposures 5 2        -> ok
//   delay 2 1 2 5000            -> ok
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "tools/kafka/kafka_mock_cluster.h"
#include "tools/kafka/mock_cluster_control.h"

ABSL_FLAG(int, brokers, 1, "mock brokers");
ABSL_FLAG(std::vector<std::string>, topic, {"exposures"},
          "topics to create (comma-separated)");
ABSL_FLAG(int, partitions, 12, "partitions of each topic");
ABSL_FLAG(
    bool, control, false,
    "read control commands on stdin (tools/kafka/mock_cluster_control.h)");

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
  // A command runs under `mu`; the cluster is destroyed under it too and
  // the lock is never given back, so a command cannot meet a destroyed
  // cluster. The reader is detached (it may sit in a read of stdin until
  // the process ends), so `mu` is never destroyed.
  auto* mu = new absl::Mutex;
  if (absl::GetFlag(FLAGS_control)) {
    std::thread([mu, c = cluster->get()] {
      std::string line;
      while (std::getline(std::cin, line)) {
        absl::MutexLock lock(mu);
        std::printf("%s\n",
                    exposure_filter::RunMockClusterCommand(*c, line).c_str());
        std::fflush(stdout);
      }
    }).detach();
  }
  int sig = 0;
  sigwait(&stop, &sig);
  mu->Lock();
  cluster->reset();
  return 0;
}
