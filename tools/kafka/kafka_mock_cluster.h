// KafkaMockCluster: librdkafka's in-process mock Kafka cluster
// (rdkafka_mock.h) on loopback, for tests and benchmarks: real Kafka
// protocol, real clients, no JVM. Brokers listen on 127.0.0.1 ephemeral
// ports for as long as the object lives.
#ifndef EXPOSURE_FILTER_TOOLS_KAFKA_KAFKA_MOCK_CLUSTER_H_
#define EXPOSURE_FILTER_TOOLS_KAFKA_KAFKA_MOCK_CLUSTER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_mock_cluster_s rd_kafka_mock_cluster_t;

namespace exposure_filter {

class KafkaMockCluster {
 public:
  static absl::StatusOr<std::unique_ptr<KafkaMockCluster>> Start(
      int brokers = 1);
  ~KafkaMockCluster();
  KafkaMockCluster(const KafkaMockCluster&) = delete;
  KafkaMockCluster& operator=(const KafkaMockCluster&) = delete;

  // "127.0.0.1:port,..." for bootstrap.servers.
  const std::string& bootstrap_servers() const { return bootstrap_; }
  absl::Status CreateTopic(const std::string& topic, int partitions);

 private:
  KafkaMockCluster() = default;
  rd_kafka_t* handle_ = nullptr;  // the mock cluster lives in this client
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  std::string bootstrap_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_TOOLS_KAFKA_KAFKA_MOCK_CLUSTER_H_
