// Encoding replicated writes as exposure-topic messages: each
// format round-trips through the consumer's decoder, the request format
// groups a call by user, the formats without a surface refuse another one,
// and a delete or trace record decodes only as one of its key's user.
#include "src/ingest/kafka_message_encoder.h"

#include <google/protobuf/util/message_differencer.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ingest/kafka_message_decoder.h"

namespace exposure_filter {
namespace {

using exposure::v1::DeleteUserRequest;
using exposure::v1::Exposure;
using exposure::v1::RecordExposureRequest;
using exposure::v1::TracedUser;
using google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

RecordExposureRequest ThreeExposuresTwoUsers(const std::string& surface) {
  RecordExposureRequest req;
  req.set_surface(surface);
  for (const char* user : {"alice", "bob", "alice"}) {
    Exposure* e = req.add_exposures();
    e->set_user_id(user);
    e->add_item_ids(req.exposures_size());
    e->add_item_keys("k");
    e->set_event_time_ms(1'700'000'000'000 + req.exposures_size());
  }
  return req;
}

// Decodes every message and concatenates the exposures, as the owners
// would apply them.
RecordExposureRequest DecodeAll(KafkaMessageFormat format,
                                const std::string& surface,
                                const std::vector<LogMessage>& messages) {
  const KafkaMessageDecoder d(format, surface, nullptr);
  RecordExposureRequest all;
  for (const LogMessage& m : messages) {
    EXPECT_TRUE(m.op.empty());
    RecordExposureRequest one;
    std::string why;
    EXPECT_EQ(d.Decode(m.key, m.value, &one, &why), std::nullopt) << why;
    all.set_surface(one.surface());
    for (const Exposure& e : one.exposures()) *all.add_exposures() = e;
  }
  return all;
}

TEST(KafkaMessageEncoderTest, RequestFormatIsOneMessagePerUserInCallOrder) {
  const KafkaMessageEncoder enc(KafkaMessageFormat::kRequest, "");
  const RecordExposureRequest req = ThreeExposuresTwoUsers("homefeed");
  std::vector<LogMessage> out;
  ASSERT_TRUE(enc.EncodeExposures(req, {0, 1, 2}, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].key, "alice");
  EXPECT_EQ(out[0].what, "exposures[0,2] (user \"alice\")");
  EXPECT_EQ(out[0].items, 4u);
  EXPECT_EQ(out[1].key, "bob");
  EXPECT_EQ(out[1].what, "exposures[1] (user \"bob\")");
  const RecordExposureRequest back =
      DecodeAll(KafkaMessageFormat::kRequest, "", out);
  EXPECT_EQ(back.surface(), "homefeed");
  ASSERT_EQ(back.exposures_size(), 3);
  // alice's two, then bob's: per user the call's order is kept.
  EXPECT_TRUE(MessageDifferencer::Equals(back.exposures(0), req.exposures(0)));
  EXPECT_TRUE(MessageDifferencer::Equals(back.exposures(1), req.exposures(2)));
  EXPECT_TRUE(MessageDifferencer::Equals(back.exposures(2), req.exposures(1)));
}

TEST(KafkaMessageEncoderTest, ExposureAndJsonRoundTripOnePerExposure) {
  for (KafkaMessageFormat f :
       {KafkaMessageFormat::kExposure, KafkaMessageFormat::kJson}) {
    const KafkaMessageEncoder enc(f, "feed");
    const RecordExposureRequest req = ThreeExposuresTwoUsers("feed");
    std::vector<LogMessage> out;
    // The positions name the caller's exposures (some may have been left
    // out before encoding).
    ASSERT_TRUE(enc.EncodeExposures(req, {1, 4, 6}, &out).ok());
    ASSERT_EQ(out.size(), 3u) << KafkaMessageFormatName(f);
    EXPECT_EQ(out[2].what, "exposures[6] (user \"alice\")");
    const RecordExposureRequest back = DecodeAll(f, "feed", out);
    EXPECT_TRUE(MessageDifferencer::Equals(back, req))
        << KafkaMessageFormatName(f) << ": " << back.DebugString();
  }
}

TEST(KafkaMessageEncoderTest, FormatsWithoutASurfaceRefuseAnotherOne) {
  const KafkaMessageEncoder enc(KafkaMessageFormat::kJson, "feed");
  std::vector<LogMessage> out;
  const absl::Status s =
      enc.EncodeExposures(ThreeExposuresTwoUsers("video"), {0, 1, 2}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("surface: \"video\" cannot be written"));
  EXPECT_TRUE(out.empty());
}

TEST(KafkaMessageEncoderTest, ADeleteRecordDecodesAsTheDeleteOfItsKey) {
  const KafkaMessageEncoder enc(KafkaMessageFormat::kExposure, "");
  DeleteUserRequest req;
  req.set_surface("feed");
  req.set_user_id("alice");
  const LogMessage m = enc.EncodeDeleteUser(req);
  EXPECT_EQ(m.op, kLogOpDeleteUser);
  EXPECT_EQ(m.key, "alice");
  const KafkaMessageDecoder d(KafkaMessageFormat::kExposure, "", nullptr);
  DeleteUserRequest back;
  std::string why;
  ASSERT_EQ(d.DecodeDeleteUser(m.key, m.value, &back, &why), std::nullopt)
      << why;
  EXPECT_TRUE(MessageDifferencer::Equals(back, req));
  // Under another key it would delete a user of another partition.
  EXPECT_EQ(d.DecodeDeleteUser("bob", m.value, &back, &why),
            BadMessageReason::kKeyMismatch);
  EXPECT_EQ(d.DecodeDeleteUser("alice", "\xff\xff", &back, &why),
            BadMessageReason::kUndecodable);
}

TEST(KafkaMessageEncoderTest, ATraceRecordCarriesTheProducersTracedSince) {
  const KafkaMessageEncoder enc(KafkaMessageFormat::kJson, "feed");
  const LogMessage add = enc.EncodeTraceChange("alice", true, 1700000000123);
  EXPECT_EQ(add.op, kLogOpTraceAdd);
  EXPECT_EQ(add.key, "alice");
  EXPECT_EQ(add.what, "the trace_add of user \"alice\"");
  const KafkaMessageDecoder d(KafkaMessageFormat::kJson, "feed", nullptr);
  TracedUser back;
  std::string why;
  ASSERT_EQ(d.DecodeTraceChange(add.op, add.key, add.value, &back, &why),
            std::nullopt)
      << why;
  EXPECT_EQ(back.user_id(), "alice");
  EXPECT_EQ(back.traced_since_ms(), 1700000000123);
  EXPECT_EQ(d.DecodeTraceChange(add.op, "bob", add.value, &back, &why),
            BadMessageReason::kKeyMismatch);
  // A trace_add without a time: each owner would have to pick its own.
  const LogMessage remove = enc.EncodeTraceChange("alice", false, 0);
  EXPECT_EQ(remove.op, kLogOpTraceRemove);
  EXPECT_EQ(
      d.DecodeTraceChange(remove.op, remove.key, remove.value, &back, &why),
      std::nullopt)
      << why;
  EXPECT_EQ(d.DecodeTraceChange(kLogOpTraceAdd, remove.key, remove.value, &back,
                                &why),
            BadMessageReason::kInvalid);
  EXPECT_THAT(why, HasSubstr("traced_since_ms is 0"));
  EXPECT_EQ(
      d.DecodeTraceChange(kLogOpTraceAdd, "alice", "\xff\xff", &back, &why),
      BadMessageReason::kUndecodable);
}

}  // namespace
}  // namespace exposure_filter
