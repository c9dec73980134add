// SessionCall (src/client/session_call.h) against a server that never
// reads its stream: once flow control holds a write, TrySend gives up at
// once, WriteBlockedFor grows (what the replica's pinger watches), and
// Cancel releases the blocked writer.
#include "src/client/session_call.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;

// Holds every stream open without reading it until the call is cancelled.
class DeafService final : public v1::ExposureFilter::Service {
 public:
  grpc::Status Session(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<v1::SessionResponse,
                                                v1::SessionRequest>*) override {
    while (!ctx->IsCancelled() && !stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return grpc::Status::CANCELLED;
  }
  std::atomic<bool> stop_{false};
};

class NoListener final : public SessionCall::Listener {
 public:
  void OnResponse(const SessionCall*, const v1::SessionResponse&) override {}
  void OnEnded(const SessionCall*, const grpc::Status&) override {}
};

TEST(SessionCallTest, AWriteHeldByFlowControlIsSeenAndReleasedByCancel) {
  DeafService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::ExposureFilter::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  NoListener listener;
  std::shared_ptr<SessionCall> call = SessionCall::Start(stub.get(), &listener);

  // A mode-A-sized request (40 KB of candidates), sent until one is held.
  v1::SessionRequest r;
  r.mutable_filter()->set_surface("h");
  r.mutable_filter()->set_user_id("u1");
  for (int i = 0; i < 5000; ++i) r.mutable_filter()->add_candidate_ids(i);
  std::atomic<int> sent{0};
  absl::Notification writer_done;
  bool last_send = true;
  std::thread writer([&] {
    // Bounded: a window this large would mean flow control is not in play.
    while (sent < 100000 && call->Send(r)) ++sent;
    last_send = false;
    writer_done.Notify();
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (call->WriteBlockedFor() < absl::Milliseconds(300) &&
         !writer_done.HasBeenNotified() && absl::Now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(writer_done.HasBeenNotified())
      << "no write was ever held (" << sent << " sent)";
  EXPECT_GE(call->WriteBlockedFor(), absl::Milliseconds(300));
  EXPECT_FALSE(call->TrySend(r)) << "TrySend waited behind the held write";

  call->Cancel();
  EXPECT_TRUE(writer_done.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "Cancel did not release the held write";
  writer.join();
  EXPECT_FALSE(last_send);
  EXPECT_EQ(call->WriteBlockedFor(), absl::ZeroDuration());
  call->WaitDone();
  EXPECT_TRUE(call->ended());
  call.reset();
  service.stop_ = true;
  server->Shutdown();
}

}  // namespace
}  // namespace exposure_filter
