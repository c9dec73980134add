// ParseRequest (the service's parse of the received bytes) and
// DescribeMalformedMessage (what is wrong with bytes that do not parse).
#include "src/server/request_parser.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "exposure/v1/exposure_filter.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/malformed_message.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;
using ::testing::HasSubstr;

// `bytes` as gRPC may deliver them: in slices cut at `cuts`.
grpc::ByteBuffer Received(const std::string& bytes,
                          const std::vector<size_t>& cuts = {}) {
  std::vector<grpc::Slice> slices;
  size_t from = 0;
  for (size_t to : cuts) {
    slices.emplace_back(bytes.data() + from, to - from);
    from = to;
  }
  slices.emplace_back(bytes.data() + from, bytes.size() - from);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Defect(const std::string& bytes, const v1::RecordExposureRequest&) {
  return DescribeMalformedMessage(bytes,
                                  *v1::RecordExposureRequest::descriptor());
}
std::string Defect(const std::string& bytes, const v1::FilterRecalledRequest&) {
  return DescribeMalformedMessage(bytes,
                                  *v1::FilterRecalledRequest::descriptor());
}

v1::FilterRecalledRequest Candidates(int n) {
  v1::FilterRecalledRequest req;
  req.set_surface("homefeed");
  req.set_user_id("u1");
  for (int i = 0; i < n; ++i) req.add_candidate_ids(0x9e3779b97f4a7c15ull * i);
  req.add_candidate_keys("video:9");
  return req;
}

TEST(ParseRequestTest, ParsesARequestSplitAcrossSlices) {
  const v1::FilterRecalledRequest sent = Candidates(5000);
  const std::string bytes = sent.SerializeAsString();
  // Cuts inside the tag, the length and a fixed64 value.
  grpc::ByteBuffer wire = Received(bytes, {1, 9, 12, 20'003, 39'999});
  v1::FilterRecalledRequest got;
  ASSERT_TRUE(ParseRequest(&wire, &got).ok());
  EXPECT_EQ(got.SerializeAsString(), bytes);
  EXPECT_FALSE(wire.Valid()) << "the bytes are released once parsed";
}

TEST(ParseRequestTest, UndecodableIsInvalidArgumentNamingTypeAndField) {
  std::string bytes = Candidates(3).SerializeAsString();
  bytes += std::string("\x22\x02\xc3\x28", 4);  // candidate_keys: not UTF-8
  grpc::ByteBuffer wire = Received(bytes, {5});
  v1::FilterRecalledRequest got;
  const absl::Status s = ParseRequest(&wire, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "exposure.v1.FilterRecalledRequest: not a valid protobuf message: "
            "candidate_keys[1]: invalid UTF-8 in a string field (send text as "
            "UTF-8; arbitrary bytes do not fit a string)");
}

TEST(ParseRequestTest, AMissingMessageIsInvalidArgument) {
  grpc::ByteBuffer none;
  v1::GetServerStatsRequest got;
  const absl::Status s = ParseRequest(&none, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "exposure.v1.GetServerStatsRequest: no request message");
}

TEST(DescribeMalformedMessageTest, NamesTheNestedElement) {
  v1::RecordExposureRequest req;
  req.add_exposures()->set_user_id("u1");
  std::string bytes = req.SerializeAsString();
  // exposures[1] = {user_id: "\xff"}
  bytes += std::string("\x12\x03\x0a\x01\xff", 5);
  EXPECT_EQ(Defect(bytes, req),
            "exposures[1].user_id: invalid UTF-8 in a string field (send text "
            "as UTF-8; arbitrary bytes do not fit a string)");
}

TEST(DescribeMalformedMessageTest, LengthPastTheEnd) {
  // surface, length 9, 2 bytes.
  EXPECT_EQ(Defect(std::string("\x0a\x09hi", 4), v1::FilterRecalledRequest()),
            "surface: length runs past the end of the message at byte 1");
}

TEST(DescribeMalformedMessageTest, PackedIdsOfAPartialValue) {
  // candidate_ids packed: 9 bytes is one id and a piece.
  const std::string bytes = std::string("\x1a\x09", 2) + std::string(9, '\1');
  EXPECT_EQ(Defect(bytes, v1::FilterRecalledRequest()),
            "candidate_ids: packed field of 9 bytes is not a whole number of "
            "8-byte values");
}

TEST(DescribeMalformedMessageTest, InvalidWireType) {
  // mode (field 5) and an unknown field 15, each with wire type 7.
  EXPECT_EQ(Defect("\x2f", v1::FilterRecalledRequest()),
            "mode: invalid wire type 7 at byte 0");
  EXPECT_EQ(Defect("\x7f", v1::FilterRecalledRequest()),
            "field 15: invalid wire type 7 at byte 0");
}

TEST(DescribeMalformedMessageTest, TruncatedVarint) {
  // mode (field 5, varint) whose varint never ends.
  EXPECT_THAT(Defect("\x28\xff", v1::FilterRecalledRequest()),
              HasSubstr("mode: truncated or malformed value at byte 0"));
}

TEST(DescribeMalformedMessageTest, FieldNumberZero) {
  EXPECT_EQ(Defect(std::string("\x02\x00", 2), v1::FilterRecalledRequest()),
            "invalid field tag at byte 0");
}

// Random damage to valid requests: the parse over slices agrees with
// protobuf's own, and every refused input gets a named defect.
TEST(DescribeMalformedMessageTest, EveryRefusalOfDamagedRequestsIsExplained) {
  v1::RecordExposureRequest record;
  record.set_surface("homefeed");
  for (int u = 0; u < 3; ++u) {
    v1::Exposure* e = record.add_exposures();
    e->set_user_id("u" + std::to_string(u));
    e->add_item_ids(u + 1);
    e->add_item_ids(1ull << 60);
    e->add_item_keys("video:" + std::to_string(u));
    e->set_event_time_ms(1'700'000'000'000 + u);
  }
  const std::string valid[] = {record.SerializeAsString(),
                               Candidates(4).SerializeAsString()};
  std::mt19937_64 rng(17);
  int refused = 0, accepted = 0;
  for (int trial = 0; trial < 20'000; ++trial) {
    const int which = trial % 2;
    std::string bytes = valid[which];
    for (int edits = 1 + rng() % 3; edits > 0; --edits) {
      const size_t at = rng() % (bytes.size() + 1);
      switch (rng() % 4) {
        case 0:  // overwrite a byte
          if (at < bytes.size()) bytes[at] = static_cast<char>(rng());
          break;
        case 1:  // insert a byte
          bytes.insert(at, 1, static_cast<char>(rng()));
          break;
        case 2:  // delete a byte
          if (at < bytes.size()) bytes.erase(at, 1);
          break;
        default:  // truncate
          bytes.resize(at);
      }
    }
    std::vector<size_t> cuts;
    if (bytes.size() > 2) cuts = {rng() % (bytes.size() / 2 + 1)};
    grpc::ByteBuffer wire = Received(bytes, cuts);
    absl::Status s;
    bool flat_ok = false;
    std::string defect;
    if (which == 0) {
      v1::RecordExposureRequest a, b;
      s = ParseRequest(&wire, &a);
      flat_ok = b.ParseFromString(bytes);
      if (!flat_ok) defect = Defect(bytes, a);
    } else {
      v1::FilterRecalledRequest a, b;
      s = ParseRequest(&wire, &a);
      flat_ok = b.ParseFromString(bytes);
      if (!flat_ok) defect = Defect(bytes, a);
    }
    ASSERT_EQ(s.ok(), flat_ok) << "trial " << trial;
    if (flat_ok) {
      ++accepted;
      continue;
    }
    ++refused;
    ASSERT_FALSE(defect.empty()) << "trial " << trial << ": unexplained";
    ASSERT_THAT(std::string(s.message()), HasSubstr(defect));
  }
  // Both outcomes occur often enough for the agreement to mean something.
  EXPECT_GT(refused, 2'000);
  EXPECT_GT(accepted, 2'000);
}

}  // namespace
}  // namespace exposure_filter
