#include "tools/kafka/kafka_mock_cluster.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

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

}  // namespace exposure_filter
