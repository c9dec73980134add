#include "tools/kafka/kafka_mock_cluster.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace exposure_filter {

absl::StatusOr<std::unique_ptr<KafkaMockCluster>> KafkaMockCluster::Start(
    int brokers) {
  std::unique_ptr<KafkaMockCluster> m(new KafkaMockCluster());
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  // Silences the notice that this handle has no bootstrap.servers.
  rd_kafka_conf_set(conf, "log_level", "4", err, sizeof err);
  // The handle only hosts the mock brokers; it never connects anywhere.
  m->handle_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (m->handle_ == nullptr) {
    rd_kafka_conf_destroy(conf);
    return absl::InternalError(absl::StrCat("rd_kafka_new: ", err));
  }
  m->cluster_ = rd_kafka_mock_cluster_new(m->handle_, brokers);
  if (m->cluster_ == nullptr) {
    return absl::InternalError("rd_kafka_mock_cluster_new failed");
  }
  m->bootstrap_ = rd_kafka_mock_cluster_bootstraps(m->cluster_);
  return m;
}

KafkaMockCluster::~KafkaMockCluster() {
  if (cluster_ != nullptr) rd_kafka_mock_cluster_destroy(cluster_);
  if (handle_ != nullptr) rd_kafka_destroy(handle_);
}

absl::Status KafkaMockCluster::CreateTopic(const std::string& topic,
                                           int partitions) {
  const rd_kafka_resp_err_t err =
      rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, 1);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::InternalError(
        absl::StrCat("create topic ", topic, ": ", rd_kafka_err2str(err)));
  }
  return absl::OkStatus();
}

void KafkaMockCluster::FailNextProduceRequests(int error, size_t count) {
  // ApiKey 0 is ProduceRequest (the Kafka protocol's numbering).
  constexpr int16_t kProduceApiKey = 0;
  std::vector<rd_kafka_resp_err_t> errors(
      count, static_cast<rd_kafka_resp_err_t>(error));
  rd_kafka_mock_push_request_errors_array(cluster_, kProduceApiKey, count,
                                          errors.data());
}

void KafkaMockCluster::FailNextProduceRequestsOn(int broker_id, int error,
                                                 size_t count) {
  for (size_t i = 0; i < count; ++i) {
    rd_kafka_mock_broker_push_request_error_rtts(
        cluster_, broker_id, /*ApiKey=Produce*/ 0, 1,
        static_cast<rd_kafka_resp_err_t>(error), /*rtt_ms=*/0);
  }
}

absl::Status KafkaMockCluster::SetPartitionLeader(const std::string& topic,
                                                  int partition,
                                                  int broker_id) {
  const rd_kafka_resp_err_t err = rd_kafka_mock_partition_set_leader(
      cluster_, topic.c_str(), partition, broker_id);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::InternalError(absl::StrCat(
        "set leader of ", topic, "/", partition, ": ", rd_kafka_err2str(err)));
  }
  return absl::OkStatus();
}

void KafkaMockCluster::SetBrokerDown(int broker_id) {
  rd_kafka_mock_broker_set_down(cluster_, broker_id);
}

void KafkaMockCluster::SetBrokerUp(int broker_id) {
  rd_kafka_mock_broker_set_up(cluster_, broker_id);
}

absl::Status KafkaMockCluster::DelayNextRequestsOn(int broker_id, int api_key,
                                                   size_t count, int delay_ms) {
  for (size_t i = 0; i < count; ++i) {
    // An "error" of NO_ERROR with a round-trip time: the mock answers the
    // request normally, its response built at once and sent `delay_ms`
    // later (the data it carries is as old as the delay).
    const rd_kafka_resp_err_t err =
        rd_kafka_mock_broker_push_request_error_rtts(
            cluster_, broker_id, static_cast<int16_t>(api_key), 1,
            RD_KAFKA_RESP_ERR_NO_ERROR, delay_ms);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::InvalidArgumentError(absl::StrCat(
          "delay requests on broker ", broker_id, ": ", rd_kafka_err2str(err)));
    }
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter
