// Requests that do not parse, sent as raw bytes through a generic stub to the
// real server in-process, for every method exposure.v1.ExposureFilter
// declares: each answers INVALID_ARGUMENT naming the request type
// and the defect (not gRPC's UNIMPLEMENTED with an empty message), counts
// under its method and code in grpc_server_handled_total, and changes
// nothing; the server keeps serving well-formed calls.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"

namespace exposure_filter {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::MethodDescriptor;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kNowMs = 1'700'000'000'000;
// An invalid UTF-8 sequence: 0xC3 starts a two-byte character, 0x28 ('(')
// cannot continue it.
constexpr char kNotUtf8[] = "\xc3\x28";

std::string FreshDataDir() {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "ef_undecodable_test_XXXXXX")
          .string();
  return mkdtemp(tmpl.data());
}

// A field of `number` with a length-delimited value, as on the wire.
std::string LengthDelimited(int number, const std::string& value) {
  std::string out;
  out.push_back(static_cast<char>(number << 3 | 2));  // numbers < 16 here
  out.push_back(static_cast<char>(value.size()));     // values < 128 bytes
  return out + value;
}

// The first string field of `type`, if any.
const FieldDescriptor* FirstStringField(const Descriptor& type) {
  for (int i = 0; i < type.field_count(); ++i) {
    if (type.field(i)->type() == FieldDescriptor::TYPE_STRING) {
      return type.field(i);
    }
  }
  return nullptr;
}

class ExposureFilterServerUndecodableRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ = FreshDataDir();
    ServerConfig c;
    c.durability.data_dir = data_dir_;
    c.listen_address = "127.0.0.1:0";
    c.shards = 4;
    absl::StatusOr<std::unique_ptr<ExposureFilterServer>> server =
        ExposureFilterServer::Start(c, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    generic_ = std::make_unique<grpc::GenericStub>(channel_);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(data_dir_);
  }

  // Sends `bytes` as the request of `method` ("/pkg.Service/Method").
  grpc::Status CallRaw(const std::string& method, const std::string& bytes) {
    grpc::ClientContext ctx;
    // Only so a broken server fails instead of hanging; nothing is timed.
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(60));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Notification done;
    generic_->UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                        [&](grpc::Status s) {
                          status = std::move(s);
                          done.Notify();
                        });
    done.WaitForNotification();
    return status;
  }

  // grpc_server_handled_total{grpc_method=method, grpc_code=code}.
  double Handled(const std::string& method, const std::string& code) {
    for (const prometheus::MetricFamily& f :
         server_->grpc_metrics().Collect()) {
      if (f.name != "grpc_server_handled_total") continue;
      for (const prometheus::ClientMetric& m : f.metric) {
        bool method_matches = false, code_matches = false;
        for (const prometheus::ClientMetric::Label& l : m.label) {
          method_matches |= l.name == "grpc_method" && l.value == method;
          code_matches |= l.name == "grpc_code" && l.value == code;
        }
        if (method_matches && code_matches) return m.counter.value;
      }
    }
    return -1;
  }

  uint64_t Users() {
    exposure::v1::GetServerStatsResponse stats;
    grpc::ClientContext ctx;
    auto stub = exposure::v1::ExposureFilter::NewStub(channel_);
    EXPECT_TRUE(stub->GetServerStats(&ctx, {}, &stats).ok());
    return stats.users();
  }

  ManualClock clock_{kNowMs};
  std::string data_dir_;
  std::unique_ptr<ExposureFilterServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> generic_;
};

// Every method the proto declares, so a new RPC is covered without edits.
const google::protobuf::ServiceDescriptor& Api() {
  return *google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      exposure::v1::ExposureFilter::service_full_name());
}

std::string Path(const MethodDescriptor& m) {
  return absl::StrCat("/", m.service()->full_name(), "/", m.name());
}

TEST_F(ExposureFilterServerUndecodableRequestTest,
       GarbageIsInvalidArgumentNamingTheTypeOnEveryRpc) {
  // 0xff 0xff ...: a tag whose varint never ends, then wire type 7.
  const std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff";
  ASSERT_GE(Api().method_count(), 10);
  for (int i = 0; i < Api().method_count(); ++i) {
    const MethodDescriptor& m = *Api().method(i);
    SCOPED_TRACE(m.name());
    const grpc::Status s = CallRaw(Path(m), garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(),
                StartsWith(absl::StrCat(m.input_type()->full_name(),
                                        ": not a valid protobuf message: ")));
    EXPECT_EQ(Handled(m.name(), "InvalidArgument"), 1);
    EXPECT_EQ(Handled(m.name(), "Unimplemented"), 0);
  }
}

TEST_F(ExposureFilterServerUndecodableRequestTest,
       NonUtf8StringNamesTheFieldOnEveryRpcWithOne) {
  int with_strings = 0;
  for (int i = 0; i < Api().method_count(); ++i) {
    const MethodDescriptor& m = *Api().method(i);
    const FieldDescriptor* f = FirstStringField(*m.input_type());
    if (f == nullptr) continue;  // GetServerStats, ListTracedUsers: no strings
    ++with_strings;
    SCOPED_TRACE(m.name());
    const grpc::Status s =
        CallRaw(Path(m), LengthDelimited(f->number(), kNotUtf8));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(
        s.error_message(),
        StartsWith(absl::StrCat(m.input_type()->full_name(),
                                ": not a valid protobuf message: ", f->name(),
                                f->is_repeated() ? "[0]" : "",
                                ": invalid UTF-8 in a string field")));
  }
  EXPECT_EQ(with_strings, 8);
}

TEST_F(ExposureFilterServerUndecodableRequestTest,
       NonUtf8CandidateKeyNamesItsIndex) {
  exposure::v1::FilterRecalledRequest req;
  req.set_user_id("u1");
  for (uint64_t id = 1; id <= 5000; ++id) req.add_candidate_ids(id);
  req.add_candidate_keys("video:1");
  const std::string bytes =
      req.SerializeAsString() + LengthDelimited(4, kNotUtf8);
  const grpc::Status s =
      CallRaw("/exposure.v1.ExposureFilter/FilterRecalled", bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(
      s.error_message(),
      HasSubstr(": candidate_keys[1]: invalid UTF-8 in a string field"));
}

TEST_F(ExposureFilterServerUndecodableRequestTest,
       NonUtf8ItemKeyInABatchRecordsNothing) {
  exposure::v1::Exposure good;
  good.set_user_id("u1");
  good.add_item_ids(7);
  const std::string bad_exposure =
      LengthDelimited(1, "u2") + LengthDelimited(3, kNotUtf8);
  const std::string bytes = LengthDelimited(2, good.SerializeAsString()) +
                            LengthDelimited(2, bad_exposure);
  const grpc::Status s =
      CallRaw("/exposure.v1.ExposureFilter/RecordExposure", bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr(": exposures[1].item_keys[0]: invalid UTF-8"));
  EXPECT_EQ(Users(), 0u) << "a request that does not parse applies nothing";
}

TEST_F(ExposureFilterServerUndecodableRequestTest,
       WellFormedRawCallsStillSucceed) {
  exposure::v1::RecordExposureRequest req;
  exposure::v1::Exposure* e = req.add_exposures();
  e->set_user_id("u1");
  e->add_item_keys("video:9");
  EXPECT_TRUE(CallRaw("/exposure.v1.ExposureFilter/RecordExposure",
                      req.SerializeAsString())
                  .ok());
  EXPECT_TRUE(CallRaw("/exposure.v1.ExposureFilter/GetServerStats", "").ok());
  EXPECT_EQ(Users(), 1u);
}

}  // namespace
}  // namespace exposure_filter
