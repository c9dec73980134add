// Decoding Kafka messages into exposures: each format, and each
// reason a message is skipped before validation.
#include "src/ingest/kafka_message_decoder.h"

#include <string>

#include "exposure_filter/partitioning.h"
#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

using exposure::v1::Exposure;
using exposure::v1::RecordExposureRequest;

Exposure MakeExposure(const std::string& user) {
  Exposure e;
  e.set_user_id(user);
  e.add_item_ids(42);
  e.add_item_keys("video-7");
  e.set_event_time_ms(1'700'000'000'000);
  return e;
}

std::optional<BadMessageReason> Decode(const KafkaMessageDecoder& d,
                                       const std::string& key,
                                       const std::string& value,
                                       RecordExposureRequest* out) {
  std::string why;
  auto r = d.Decode(key, value, out, &why);
  if (r.has_value()) {
    EXPECT_FALSE(why.empty());
  }
  return r;
}

TEST(KafkaMessageDecoderTest, RequestFormatKeepsItsSurface) {
  const KafkaMessageDecoder d(KafkaMessageFormat::kRequest, "ignored", nullptr);
  RecordExposureRequest req;
  req.set_surface("homefeed");
  *req.add_exposures() = MakeExposure("u1");
  *req.add_exposures() = MakeExposure("u1");
  RecordExposureRequest out;
  EXPECT_EQ(Decode(d, "u1", req.SerializeAsString(), &out), std::nullopt);
  EXPECT_EQ(out.surface(), "homefeed");
  ASSERT_EQ(out.exposures_size(), 2);
  EXPECT_EQ(out.exposures(1).item_keys(0), "video-7");
}

TEST(KafkaMessageDecoderTest, ExposureFormatTakesTheFlagSurface) {
  const KafkaMessageDecoder d(KafkaMessageFormat::kExposure, "video", nullptr);
  RecordExposureRequest out;
  EXPECT_EQ(Decode(d, "u1", MakeExposure("u1").SerializeAsString(), &out),
            std::nullopt);
  EXPECT_EQ(out.surface(), "video");
  ASSERT_EQ(out.exposures_size(), 1);
  EXPECT_EQ(out.exposures(0).item_ids(0), 42u);
  EXPECT_EQ(out.exposures(0).event_time_ms(), 1'700'000'000'000);
}

TEST(KafkaMessageDecoderTest, JsonAcceptsFieldNamesCamelCaseAndNumbers) {
  const KafkaMessageDecoder d(KafkaMessageFormat::kJson, "", nullptr);
  RecordExposureRequest out;
  EXPECT_EQ(Decode(d, "u1",
                   R"({"user_id":"u1","item_ids":["42", 43],)"
                   R"("item_keys":["a"],"event_time_ms":"1700000000000"})",
                   &out),
            std::nullopt);
  ASSERT_EQ(out.exposures_size(), 1);
  EXPECT_EQ(out.exposures(0).item_ids_size(), 2);
  EXPECT_EQ(out.exposures(0).item_ids(1), 43u);
  EXPECT_EQ(out.exposures(0).event_time_ms(), 1'700'000'000'000);
  EXPECT_EQ(Decode(d, "u2",
                   R"({"userId":"u2","itemKeys":["b"],"eventTimeMs":5})", &out),
            std::nullopt);
  EXPECT_EQ(out.exposures(0).item_keys(0), "b");
  EXPECT_EQ(out.exposures(0).event_time_ms(), 5);
}

TEST(KafkaMessageDecoderTest, UndecodableInEachFormat) {
  RecordExposureRequest out;
  const std::string garbage(11, '\xff');  // a varint that never ends
  EXPECT_EQ(
      Decode(KafkaMessageDecoder(KafkaMessageFormat::kRequest, "", nullptr),
             "u1", garbage, &out),
      BadMessageReason::kUndecodable);
  EXPECT_EQ(
      Decode(KafkaMessageDecoder(KafkaMessageFormat::kExposure, "", nullptr),
             "u1", garbage, &out),
      BadMessageReason::kUndecodable);
  const KafkaMessageDecoder json(KafkaMessageFormat::kJson, "", nullptr);
  EXPECT_EQ(Decode(json, "u1", R"({"user_id": )", &out),
            BadMessageReason::kUndecodable);
  // A misspelt field is not silently an exposure of nothing.
  EXPECT_EQ(Decode(json, "u1", R"({"user_id":"u1","item_id":[1]})", &out),
            BadMessageReason::kUndecodable);
  EXPECT_EQ(Decode(json, "u1", R"({"user_id":"u1","item_ids":["x"]})", &out),
            BadMessageReason::kUndecodable);
}

TEST(KafkaMessageDecoderTest, MissingUser) {
  RecordExposureRequest out;
  const KafkaMessageDecoder d(KafkaMessageFormat::kExposure, "", nullptr);
  EXPECT_EQ(Decode(d, "u1", MakeExposure("").SerializeAsString(), &out),
            BadMessageReason::kMissingUser);
  // An empty value is a valid, empty protobuf: no user either.
  EXPECT_EQ(Decode(d, "u1", "", &out), BadMessageReason::kMissingUser);
  const KafkaMessageDecoder r(KafkaMessageFormat::kRequest, "", nullptr);
  EXPECT_EQ(Decode(r, "u1", RecordExposureRequest().SerializeAsString(), &out),
            BadMessageReason::kMissingUser);
}

TEST(KafkaMessageDecoderTest, KeyMustBeEveryExposuresUser) {
  RecordExposureRequest out;
  const KafkaMessageDecoder d(KafkaMessageFormat::kExposure, "", nullptr);
  EXPECT_EQ(Decode(d, "u2", MakeExposure("u1").SerializeAsString(), &out),
            BadMessageReason::kKeyMismatch);
  EXPECT_EQ(Decode(d, "", MakeExposure("u1").SerializeAsString(), &out),
            BadMessageReason::kKeyMismatch);
  RecordExposureRequest req;
  *req.add_exposures() = MakeExposure("u1");
  *req.add_exposures() = MakeExposure("u2");
  const KafkaMessageDecoder r(KafkaMessageFormat::kRequest, "", nullptr);
  EXPECT_EQ(Decode(r, "u1", req.SerializeAsString(), &out),
            BadMessageReason::kKeyMismatch);
}

TEST(KafkaMessageDecoderTest, UsersOfOtherReplicasAreNotOwned) {
  const ReplicaOwnership ownership(ClusterOptions{12, 3, 1});
  const KafkaMessageDecoder d(KafkaMessageFormat::kExposure, "", &ownership);
  int owned = 0;
  int foreign = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string user = "user-" + std::to_string(i);
    RecordExposureRequest out;
    const auto r =
        Decode(d, user, MakeExposure(user).SerializeAsString(), &out);
    const bool ours =
        KafkaPartitionForKey(user, 12) % 3 == 1;  // Kafka's partition, p mod N
    if (ours) {
      EXPECT_EQ(r, std::nullopt) << user;
      ++owned;
    } else {
      EXPECT_EQ(r, BadMessageReason::kNotOwned) << user;
      ++foreign;
    }
  }
  EXPECT_GT(owned, 50);
  EXPECT_GT(foreign, 100);
}

}  // namespace
}  // namespace exposure_filter
