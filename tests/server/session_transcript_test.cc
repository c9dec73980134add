// Replays the golden session transcripts (tests/testdata/session/, format
// in docs/session-stream.md "Golden transcripts") against the real server
// in-process with its clock fixed, so every response, filter bytes,
// versions and server times included, must equal the file's. A change of
// the protocol's answers fails here, naming the line.
//
// Regenerate (only when the protocol or the filter encoding is meant to
// change, and say so in the commit): EF_REGENERATE_SESSION_TRANSCRIPTS=1
// build/tests/server/server_session_transcript_test rewrites every `<` line
// with what the server answered.
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tests/server/session_test_client.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;
using testing::SessionTestClient;

// 2026-11-22T00:00:00Z, the golden vectors' instant.
constexpr int64_t kNowMs = 1'795'392'000'000;

std::string Path(const std::string& name) {
  return absl::StrCat(EF_TESTDATA_DIR, "/session/", name, ".transcript");
}

std::string OneLine(const google::protobuf::Message& m) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  std::string out;
  printer.PrintToString(m, &out);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

class SessionTranscriptTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ServerConfig c = testing::SessionTestConfig();
    c.session.max_subscriptions_per_stream = 3;
    auto server = ExposureFilterServer::Start(c, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::ExposureFilter::NewStub(channel_);
  }

  // `! record <surface> <user> <event_time_ms> <id>... [| <user>
  // <event_time_ms> <id>...]...` (several users: one call), `! delete
  // <surface> <user>`, `! advance <duration>`, `! tick` (the housekeeping
  // pass: leases), `! metadata <key> <value>` (read before the stream
  // opens, by the test).
  void Command(const std::string& line, int number) {
    std::vector<std::string> w =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    ASSERT_FALSE(w.empty()) << "line " << number;
    // The default surface is written as "".
    auto surface = [](const std::string& s) {
      return s == "\"\"" ? std::string() : s;
    };
    if (w[0] == "record") {
      ASSERT_GE(w.size(), 5u) << "line " << number;
      v1::RecordExposureRequest req;
      req.set_surface(surface(w[1]));
      // Each exposure: <user> <event_time_ms> <id>..., the next after "|".
      for (size_t at = 2; at < w.size();) {
        size_t end = at;
        while (end < w.size() && w[end] != "|") ++end;
        ASSERT_GE(end - at, 3u) << "line " << number;
        v1::Exposure* e = req.add_exposures();
        e->set_user_id(w[at]);
        int64_t event = 0;
        ASSERT_TRUE(absl::SimpleAtoi(w[at + 1], &event)) << "line " << number;
        e->set_event_time_ms(event);
        for (size_t i = at + 2; i < end; ++i) {
          uint64_t id = 0;
          ASSERT_TRUE(absl::SimpleAtoi(w[i], &id)) << "line " << number;
          e->add_item_ids(id);
        }
        at = end + 1;
      }
      v1::RecordExposureResponse resp;
      grpc::ClientContext ctx;
      ASSERT_TRUE(stub_->RecordExposure(&ctx, req, &resp).ok())
          << "line " << number;
    } else if (w[0] == "delete") {
      ASSERT_EQ(w.size(), 3u) << "line " << number;
      v1::DeleteUserRequest req;
      req.set_surface(surface(w[1]));
      req.set_user_id(w[2]);
      v1::DeleteUserResponse resp;
      grpc::ClientContext ctx;
      ASSERT_TRUE(stub_->DeleteUser(&ctx, req, &resp).ok())
          << "line " << number;
    } else if (w[0] == "advance") {
      absl::Duration d;
      ASSERT_TRUE(w.size() == 2 && absl::ParseDuration(w[1], &d))
          << "line " << number;
      clock_.Advance(d);
    } else if (w[0] == "tick") {
      server_->session_hub().Tick(server_->store().clock().MonotonicMs());
    } else if (w[0] == "metadata") {
      ASSERT_EQ(w.size(), 3u) << "line " << number;
      ASSERT_FALSE(stream_opened_)
          << "line " << number << ": metadata after the first request";
    } else {
      FAIL() << "line " << number << ": unknown command " << w[0];
    }
  }

  // A `>` line was replayed: the stream's metadata is sent.
  bool stream_opened_ = false;
  ManualClock clock_{kNowMs};
  std::unique_ptr<ExposureFilterServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ExposureFilter::Stub> stub_;
};

TEST_P(SessionTranscriptTest, ServerAnswersAsTheTranscriptSays) {
  const std::string path = Path(GetParam());
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const bool regenerate =
      std::getenv("EF_REGENERATE_SESSION_TRANSCRIPTS") != nullptr;
  // The stream opens (and sends its metadata) before the first line runs.
  std::vector<std::pair<std::string, std::string>> metadata;
  for (const std::string& line : lines) {
    std::vector<std::string> w =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (w.size() == 4 && w[0] == "!" && w[1] == "metadata") {
      metadata.emplace_back(w[2], w[3]);
    }
  }
  SessionTestClient client(channel_, /*start_reading=*/true, metadata);
  int responses = 0;
  for (size_t n = 0; n < lines.size(); ++n) {
    const int number = static_cast<int>(n) + 1;
    const std::string& line = lines[n];
    if (line.empty() || line[0] == '#') continue;
    const std::string body(absl::StripAsciiWhitespace(line.substr(1)));
    if (line[0] == '!') {
      Command(body, number);
    } else if (line[0] == '>') {
      stream_opened_ = true;
      v1::SessionRequest req;
      ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(body, &req))
          << path << ":" << number << ": not a SessionRequest";
      ASSERT_TRUE(client.Write(req)) << path << ":" << number;
    } else if (line[0] == '<') {
      ++responses;
      std::optional<v1::SessionResponse> got = client.Next();
      ASSERT_TRUE(got.has_value())
          << path << ":" << number << ": no response from the server";
      if (regenerate) {
        lines[n] = "< " + OneLine(*got);
        continue;
      }
      v1::SessionResponse want;
      ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(body, &want))
          << path << ":" << number << ": not a SessionResponse";
      EXPECT_TRUE(
          google::protobuf::util::MessageDifferencer::Equals(*got, want))
          << path << ":" << number << ": the server answered\n< "
          << OneLine(*got) << "\n(regenerate only if the protocol is meant "
          << "to change: see the top of session_transcript_test.cc)";
    } else {
      FAIL() << path << ":" << number << ": a line starts with #, >, < or !";
    }
  }
  EXPECT_GT(responses, 0);
  EXPECT_FALSE(client.Next(std::chrono::milliseconds(200)).has_value())
      << path << ": the server sent more than the transcript lists";
  if (regenerate) {
    std::ofstream out(path);
    for (const std::string& line : lines) out << line << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, SessionTranscriptTest,
                         ::testing::Values("subscribe_and_push", "errors",
                                           "filter_versions_and_leases",
                                           "quiet_unsubscribe",
                                           "push_batches/two_users"));

}  // namespace
}  // namespace exposure_filter
