// kafka-produce-exposures: produces a deterministic stream of exposure
// messages, keyed by user id, partitioned like Kafka's Java client
// (murmur2_random), for the end-to-end test and the ingest benchmark.
//
// Message k (0 <= k < users * messages_per_user) is for user
// "<user_prefix><k mod users>" and carries the item ids
// item_base + k * items_per_message + t, t < items_per_message, so a test
// knows exactly what every user was shown. --bad adds that many undecodable
// messages (keyed by real users, so they land on every replica).
//
//   kafka-produce-exposures --brokers=127.0.0.1:9092 --topic=exposures
//       --users=20000 --messages_per_user=10 --format=exposure
#include <google/protobuf/util/json_util.h>
#include <librdkafka/rdkafkacpp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exposure/v1/exposure_filter.pb.h"

ABSL_FLAG(std::string, brokers, "", "bootstrap servers");
ABSL_FLAG(std::string, topic, "exposures", "topic");
ABSL_FLAG(std::string, format, "exposure", "request | exposure | json");
ABSL_FLAG(std::string, surface, "", "surface of request-format messages");
ABSL_FLAG(std::string, user_prefix, "user-", "user ids are prefix + number");
ABSL_FLAG(int64_t, users, 20000, "distinct users");
ABSL_FLAG(int64_t, messages_per_user, 10, "messages per user");
ABSL_FLAG(int64_t, items_per_message, 1, "item ids per message");
ABSL_FLAG(int64_t, item_base, 0, "first item id");
ABSL_FLAG(int64_t, bad, 0, "undecodable messages to add at the end");
ABSL_FLAG(int64_t, event_time_ms, 0, "event time; 0 = now when produced");

namespace {

std::string Encode(const std::string& format, const std::string& surface,
                   const exposure::v1::Exposure& e) {
  std::string out;
  if (format == "request") {
    exposure::v1::RecordExposureRequest req;
    req.set_surface(surface);
    *req.add_exposures() = e;
    req.SerializeToString(&out);
  } else if (format == "json") {
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(e, &out, options);
  } else {
    e.SerializeToString(&out);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "request" && format != "exposure" && format != "json") {
    std::fprintf(stderr, "--format must be request, exposure or json\n");
    return 2;
  }
  std::string err;
  std::unique_ptr<RdKafka::Conf> conf(
      RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  for (const auto& [k, v] :
       std::initializer_list<std::pair<const char*, std::string>>{
           {"bootstrap.servers", absl::GetFlag(FLAGS_brokers)},
           // Kafka's Java default partitioner: murmur2(key) mod P.
           {"partitioner", "murmur2_random"},
           {"linger.ms", "5"},
           {"queue.buffering.max.messages", "1000000"},
           {"acks", "all"}}) {
    if (conf->set(k, v, err) != RdKafka::Conf::CONF_OK) {
      std::fprintf(stderr, "%s: %s\n", k, err.c_str());
      return 2;
    }
  }
  std::unique_ptr<RdKafka::Producer> producer(
      RdKafka::Producer::create(conf.get(), err));
  if (!producer) {
    std::fprintf(stderr, "producer: %s\n", err.c_str());
    return 1;
  }
  const std::string topic = absl::GetFlag(FLAGS_topic);
  const std::string prefix = absl::GetFlag(FLAGS_user_prefix);
  const int64_t users = absl::GetFlag(FLAGS_users);
  const int64_t total = users * absl::GetFlag(FLAGS_messages_per_user);
  const int64_t per = absl::GetFlag(FLAGS_items_per_message);
  const int64_t base = absl::GetFlag(FLAGS_item_base);
  const int64_t bad = absl::GetFlag(FLAGS_bad);
  auto produce = [&](const std::string& key, const std::string& value) {
    for (;;) {
      const RdKafka::ErrorCode e = producer->produce(
          topic, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY,
          const_cast<char*>(value.data()), value.size(), key.data(), key.size(),
          0, nullptr);
      if (e == RdKafka::ERR_NO_ERROR) return true;
      if (e != RdKafka::ERR__QUEUE_FULL) {
        std::fprintf(stderr, "produce: %s\n", RdKafka::err2str(e).c_str());
        return false;
      }
      producer->poll(50);
    }
  };
  exposure::v1::Exposure e;
  for (int64_t k = 0; k < total; ++k) {
    e.Clear();
    e.set_user_id(absl::StrCat(prefix, k % users));
    for (int64_t t = 0; t < per; ++t) {
      e.add_item_ids(static_cast<uint64_t>(base + k * per + t));
    }
    const int64_t t = absl::GetFlag(FLAGS_event_time_ms);
    e.set_event_time_ms(t != 0 ? t : absl::ToUnixMillis(absl::Now()));
    if (!produce(e.user_id(),
                 Encode(format, absl::GetFlag(FLAGS_surface), e))) {
      return 1;
    }
    producer->poll(0);
  }
  for (int64_t b = 0; b < bad; ++b) {
    // A varint that never ends is no protobuf; an unclosed brace no JSON.
    const std::string value = format == "json" ? std::string("{\"user_id\": ")
                                               : std::string(11, '\xff');
    if (!produce(absl::StrCat(prefix, b % users), value)) return 1;
  }
  if (producer->flush(60000) != RdKafka::ERR_NO_ERROR ||
      producer->outq_len() > 0) {
    std::fprintf(stderr, "flush: %d messages not delivered\n",
                 producer->outq_len());
    return 1;
  }
  std::printf("%lld\n", static_cast<long long>(total + bad));
  return 0;
}
