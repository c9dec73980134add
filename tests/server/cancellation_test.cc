// Clients that cancel, time out or vanish mid-call leak nothing: the real
// ExposureFilterServer in-process, every exposure.v1 RPC called many times
// with TryCancel() right after the start, with deadlines that expire before
// or during the call, and over raw TCP connections that send a call's
// headers and half its message and then close. Afterwards the server's
// in-flight gauge (grpc_server_in_flight_rpcs) is back at its baseline, the
// store holds exactly what the idempotent writes left, and the process's
// heap has not grown beyond a tolerance between two equal storms. Under
// ASan the leak checker also covers everything at exit.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tests/common/environment_skip.h"

namespace exposure_filter {
namespace {

constexpr int64_t kNowMs = 1'700'000'000'000;
constexpr char kService[] = "/exposure.v1.ExposureFilter/";

std::string FreshDataDir() {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "ef_cancel_test_XXXXXX")
          .string();
  return mkdtemp(tmpl.data());
}

// One request per RPC, all idempotent once applied: re-recording the same
// items, deleting a user that does not exist, tracing the same user.
struct Call {
  std::string method;
  std::string request;
};

std::vector<Call> EveryRpc() {
  std::vector<Call> calls;
  auto add = [&](const std::string& method,
                 const google::protobuf::Message& m) {
    calls.push_back({absl::StrCat(kService, method), m.SerializeAsString()});
  };
  exposure::v1::RecordExposureRequest record;
  record.set_surface("homefeed");
  for (int u = 0; u < 4; ++u) {
    exposure::v1::Exposure* e = record.add_exposures();
    e->set_user_id(absl::StrCat("user", u));
    for (uint64_t i = 0; i < 500; ++i) e->add_item_ids(i * 7919);
  }
  add("RecordExposure", record);
  exposure::v1::FilterRecalledRequest filter;
  filter.set_surface("homefeed");
  filter.set_user_id("user1");
  for (uint64_t i = 0; i < 5000; ++i) filter.add_candidate_ids(i);
  add("FilterRecalled", filter);
  exposure::v1::GetFilterRequest pull;
  pull.set_surface("homefeed");
  pull.set_user_id("user2");
  add("GetFilter", pull);
  exposure::v1::GetUserStatsRequest stats;
  stats.set_surface("homefeed");
  stats.set_user_id("user3");
  add("GetUserStats", stats);
  exposure::v1::DeleteUserRequest del;
  del.set_surface("homefeed");
  del.set_user_id("nobody");
  add("DeleteUser", del);
  add("GetServerStats", exposure::v1::GetServerStatsRequest());
  exposure::v1::ExplainRequest explain;
  explain.set_surface("homefeed");
  explain.set_user_id("user0");
  for (uint64_t i = 0; i < 100; ++i) explain.add_item_ids(i * 7919);
  add("Explain", explain);
  exposure::v1::AddTracedUsersRequest trace;
  trace.add_user_ids("traced");
  add("AddTracedUsers", trace);
  exposure::v1::RemoveTracedUsersRequest untrace;
  untrace.add_user_ids("nobody");
  add("RemoveTracedUsers", untrace);
  add("ListTracedUsers", exposure::v1::ListTracedUsersRequest());
  return calls;
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// Heap bytes in use (glibc); 0 where the allocator does not report it
// (ASan replaces malloc; its leak checker covers that build instead).
size_t HeapInUse() {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks;
}

// One HPACK literal header field without indexing, new name (RFC 7541
// 6.2.2), both strings raw; names and values here are < 127 bytes.
void AppendHeader(std::string* out, const std::string& name,
                  const std::string& value) {
  out->push_back('\0');
  out->push_back(static_cast<char>(name.size()));
  out->append(name);
  out->push_back(static_cast<char>(value.size()));
  out->append(value);
}

void AppendFrame(std::string* out, uint8_t type, uint8_t flags, uint32_t stream,
                 const std::string& payload) {
  const uint32_t n = payload.size();
  out->push_back(static_cast<char>(n >> 16));
  out->push_back(static_cast<char>(n >> 8));
  out->push_back(static_cast<char>(n));
  out->push_back(static_cast<char>(type));
  out->push_back(static_cast<char>(flags));
  for (int shift : {24, 16, 8, 0}) {
    out->push_back(static_cast<char>(stream >> shift));
  }
  out->append(payload);
}

// A client that vanishes mid-call: over a raw TCP connection, the HTTP/2
// preface, the call's HEADERS and a DATA frame holding the gRPC message
// prefix and half the message, then close (no RST_STREAM, no GOAWAY).
bool HalfCallThenDisconnect(int port, const Call& call) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return false;
  }
  std::string wire = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  AppendFrame(&wire, /*SETTINGS*/ 0x4, 0, 0, "");
  std::string headers;
  AppendHeader(&headers, ":method", "POST");
  AppendHeader(&headers, ":scheme", "http");
  AppendHeader(&headers, ":path", call.method);
  AppendHeader(&headers, ":authority", "localhost");
  AppendHeader(&headers, "content-type", "application/grpc");
  AppendHeader(&headers, "te", "trailers");
  AppendFrame(&wire, /*HEADERS*/ 0x1, /*END_HEADERS*/ 0x4, 1, headers);
  std::string data(1, '\0');                      // not compressed
  const uint32_t len = call.request.size() + 16;  // more than is sent
  for (int shift : {24, 16, 8, 0}) {
    data.push_back(static_cast<char>(len >> shift));
  }
  data.append(call.request.substr(0, call.request.size() / 2));
  AppendFrame(&wire, /*DATA*/ 0x0, 0, 1, data);
  const bool sent = send(fd, wire.data(), wire.size(), MSG_NOSIGNAL) ==
                    static_cast<ssize_t>(wire.size());
  close(fd);
  return sent;
}

class CancellationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ = FreshDataDir();
    ServerConfig config;
    config.durability.data_dir = data_dir_;
    config.listen_address = "127.0.0.1:0";
    config.shards = 4;
    config.shutdown_grace = absl::Seconds(2);
    auto server = ExposureFilterServer::Start(config, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }
  void TearDown() override {
    stub_.reset();
    channel_.reset();
    server_.reset();
    std::filesystem::remove_all(data_dir_);
  }

  // Every RPC once to completion (deadline only so a broken server fails
  // instead of hanging).
  void CompleteEach() {
    for (const Call& call : EveryRpc()) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
      grpc::ByteBuffer req = ToBuffer(call.request), resp;
      grpc::Status status;
      absl::Notification n;
      stub_->UnaryCall(&ctx, call.method, grpc::StubOptions(), &req, &resp,
                       [&](grpc::Status s) {
                         status = s;
                         n.Notify();
                       });
      n.WaitForNotification();
      ASSERT_TRUE(status.ok()) << call.method << ": " << status.error_message();
    }
  }

  // `rounds` x every RPC, each started and then: cancelled at once (0),
  // given a deadline already past (1), or a deadline of 1 ms (2); plus a
  // raw half-sent call per RPC and round that disconnects.
  void Storm(int rounds) {
    const std::vector<Call> calls = EveryRpc();
    for (int r = 0; r < rounds; ++r) {
      absl::BlockingCounter pending(static_cast<int>(calls.size()) * 3);
      std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
      std::vector<std::unique_ptr<grpc::ByteBuffer>> buffers;
      for (const Call& call : calls) {
        for (int kind = 0; kind < 3; ++kind) {
          auto ctx = std::make_unique<grpc::ClientContext>();
          if (kind == 1) {
            ctx->set_deadline(std::chrono::system_clock::now() -
                              std::chrono::milliseconds(1));
          } else if (kind == 2) {
            ctx->set_deadline(std::chrono::system_clock::now() +
                              std::chrono::milliseconds(1));
          } else {
            ctx->set_deadline(std::chrono::system_clock::now() +
                              std::chrono::seconds(60));
          }
          buffers.push_back(
              std::make_unique<grpc::ByteBuffer>(ToBuffer(call.request)));
          grpc::ByteBuffer* req = buffers.back().get();
          buffers.push_back(std::make_unique<grpc::ByteBuffer>());
          grpc::ByteBuffer* resp = buffers.back().get();
          stub_->UnaryCall(
              ctx.get(), call.method, grpc::StubOptions(), req, resp,
              [&pending](grpc::Status) { pending.DecrementCount(); });
          if (kind == 0) ctx->TryCancel();
          contexts.push_back(std::move(ctx));
        }
        ASSERT_TRUE(HalfCallThenDisconnect(server_->port(), call));
      }
      pending.Wait();
    }
  }

  // Polls until the server has released every call; the deadline only
  // bounds a leak and is generous for ASan on a loaded machine.
  void ExpectInFlightReturnsTo(int64_t baseline) {
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (server_->grpc_metrics().InFlight() != baseline &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(server_->grpc_metrics().InFlight(), baseline);
  }

  std::pair<uint64_t, uint64_t> UsersAndBytes() {
    const auto usage = server_->store().Usage(8);
    return {usage.users, usage.bytes};
  }

  ManualClock clock_{kNowMs};
  std::string data_dir_;
  std::unique_ptr<ExposureFilterServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(CancellationTest, AbandonedCallsOfEveryRpcReleaseEverything) {
  CompleteEach();
  ExpectInFlightReturnsTo(0);
  const auto store_before = UsersAndBytes();
  const uint64_t started_before = server_->grpc_metrics().StartedCount("");
  Storm(/*rounds=*/10);
  ExpectInFlightReturnsTo(0);
  // The server saw (most of) the calls: the storm reached it. Some calls
  // cancelled or expired client-side never reach the server at all.
  // Margin: one of 200 calls suffices (100 cancelled right after
  // their start, 100 with a 1 ms deadline); a slow client loses more of
  // those races, all 200 of them only if the storm never ran. The verdicts
  // that matter (gauge, store, heap) do not depend on how many got through.
  EXPECT_GT(server_->grpc_metrics().StartedCount(""), started_before);
  // Writes that ran before their client left are idempotent here: the
  // store holds exactly what one completed round left.
  EXPECT_EQ(UsersAndBytes(), store_before);
  // And the server still answers every RPC.
  CompleteEach();
  ExpectInFlightReturnsTo(0);
}

TEST_F(CancellationTest, HeapDoesNotGrowAcrossRepeatedStorms) {
  CompleteEach();
  // The first storm warms gRPC's pools and arenas; the second must not
  // need more. Tolerance: 4 MiB (allocator slack, channel buffers), far
  // below what leaking every abandoned call would cost (10 rounds x 33
  // calls x tens of KB of request and response).
  Storm(/*rounds=*/10);
  ExpectInFlightReturnsTo(0);
  const size_t warm = HeapInUse();
  if (warm == 0) GTEST_SKIP() << kSkipNoHeapFigures;
  Storm(/*rounds=*/10);
  ExpectInFlightReturnsTo(0);
  const size_t after = HeapInUse();
  EXPECT_LT(after, warm + (size_t{4} << 20))
      << "heap grew from " << warm << " to " << after << " bytes";
}

}  // namespace
}  // namespace exposure_filter
