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

  // Fault injection (rdkafka_mock.h), for the replicated write tests: the
  // next `count` Produce requests (to any broker) fail with `error` (an
  // rd_kafka_resp_err_t value); and a broker (ids start at 1) stops
  // answering / answers again, as when its process dies and restarts.
  void FailNextProduceRequests(int error, size_t count);
  // The same for the Produce requests that one broker receives.
  void FailNextProduceRequestsOn(int broker_id, int error, size_t count);
  // Makes `broker_id` the leader of a partition (where its writes go).
  absl::Status SetPartitionLeader(const std::string& topic, int partition,
                                  int broker_id);
  void SetBrokerDown(int broker_id);
  void SetBrokerUp(int broker_id);
  // The next `count` requests of `api_key` (the Kafka protocol's numbering:
  // 1 is Fetch) that `broker_id` receives are answered as usual but
  // `delay_ms` late: a broker slow for one kind of request, e.g. the
  // consumers' fetches of the partitions it leads while its producers and
  // offset queries are answered at once. A client keeps one Fetch in flight
  // per broker, so each delayed Fetch stalls a different consumer's next
  // one: `count` = the consumers of that broker stalls each of them once.
  absl::Status DelayNextRequestsOn(int broker_id, int api_key, size_t count,
                                   int delay_ms);

 private:
  KafkaMockCluster() = default;
  rd_kafka_t* handle_ = nullptr;  // the mock cluster lives in this client
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  std::string bootstrap_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_TOOLS_KAFKA_KAFKA_MOCK_CLUSTER_H_
