// unary-api-probe: where a small unary call's server CPU goes, by the gRPC
// server API that runs it (docs/performance.md, "The fixed cost of a call").
//
// Serves only FilterRecalled, doing no filter work (an all-ones keep mask,
// as the transport-ceiling server answers), with the real server's flags,
// message limits, transport tuning, malloc and mutex settings, on one of:
//
//   --api=callback  the callback API, as exposure-filter-server and the
//                   transport-ceiling server serve every RPC. In gRPC 1.51 on
//                   Linux its reactors run on an "alternative" completion
//                   queue drained by its own threads (two on a 2-core
//                   machine), besides the threads that poll the sockets;
//   --api=async     the completion-queue API: --completion_queues queues,
//                   each drained by one thread that also runs the handler
//                   (no hand-off between threads inside a call).
//
// Run under bench/unary_cost.sh, which drives it, the ceiling server and the
// real server one call at a time and reports CPU and context switches per
// call side by side.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/no_work_server.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/server/config/server_flags.h"

ABSL_FLAG(std::string, api, "callback", "callback or async");
ABSL_FLAG(int, completion_queues, 1,
          "--api=async: completion queues, each drained by one thread");

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;

// The ceiling server's answer: every candidate kept.
void KeepAll(const v1::FilterRecalledRequest& request,
             v1::FilterRecalledResponse* response) {
  const size_t n = request.candidate_ids_size() + request.candidate_keys_size();
  std::string* mask = response->mutable_keep_mask();
  mask->assign((n + 7) / 8, '\xff');
  if (n % 8 != 0) mask->back() = static_cast<char>((1u << (n % 8)) - 1);
}

class CallbackProbe final : public v1::ExposureFilter::CallbackService {
  grpc::ServerUnaryReactor* FilterRecalled(
      grpc::CallbackServerContext* ctx, const v1::FilterRecalledRequest* req,
      v1::FilterRecalledResponse* resp) override {
    KeepAll(*req, resp);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// One FilterRecalled on the completion-queue API: requested, answered on
// the thread that dequeued it, freed when the answer is sent. A new call is
// requested before the handler runs, so one is always waiting.
class AsyncCall {
 public:
  AsyncCall(v1::ExposureFilter::AsyncService* service,
            grpc::ServerCompletionQueue* cq)
      : service_(service), cq_(cq), writer_(&ctx_) {
    service_->RequestFilterRecalled(&ctx_, &request_, &writer_, cq_, cq_, this);
  }
  // The call's next event: its request arrived (answer it) or its answer
  // was sent or failed (free it).
  void OnEvent(bool ok) {
    if (!ok || answered_) {
      delete this;
      return;
    }
    new AsyncCall(service_, cq_);
    KeepAll(request_, &response_);
    answered_ = true;
    writer_.Finish(response_, grpc::Status::OK, this);
  }

 private:
  v1::ExposureFilter::AsyncService* const service_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext ctx_;
  v1::FilterRecalledRequest request_;
  v1::FilterRecalledResponse response_;
  grpc::ServerAsyncResponseWriter<v1::FilterRecalledResponse> writer_;
  bool answered_ = false;
};

void Drain(grpc::ServerCompletionQueue* cq) {
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) static_cast<AsyncCall*>(tag)->OnEvent(ok);
}

int Main(int argc, char** argv) {
  constexpr char kProgram[] = "unary-api-probe";
  std::optional<ServerConfig> config =
      bench::NoWorkServerConfig(kProgram, argc, argv);
  if (!config) return 2;
  const std::string api = absl::GetFlag(FLAGS_api);
  const int queues = absl::GetFlag(FLAGS_completion_queues);
  if (api != "callback" && api != "async") {
    std::fprintf(stderr, "unary-api-probe: --api is callback or async\n");
    return 2;
  }
  if (queues < 1 || queues > 64) {
    std::fprintf(stderr, "unary-api-probe: --completion_queues in [1, 64]\n");
    return 2;
  }
  bench::NoWorkServerBuilder no_work(kProgram, *config);
  CallbackProbe callback_service;
  v1::ExposureFilter::AsyncService async_service;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs;
  if (api == "callback") {
    no_work.builder().RegisterService(&callback_service);
  } else {
    no_work.builder().RegisterService(&async_service);
    for (int i = 0; i < queues; ++i)
      cqs.push_back(no_work.builder().AddCompletionQueue());
  }
  std::unique_ptr<grpc::Server> server = no_work.Start();
  if (server == nullptr) return 1;
  std::vector<std::thread> drains;
  for (auto& cq : cqs) {
    // A few calls requested ahead, as a server keeps them.
    for (int i = 0; i < 4; ++i) new AsyncCall(&async_service, cq.get());
    drains.emplace_back(Drain, cq.get());
  }
  std::fprintf(stderr, "unary-api-probe (%s) serving on port %d\n", api.c_str(),
               no_work.port());
  bench::WaitForStopThenShutdown(server.get());
  for (auto& cq : cqs) cq->Shutdown();
  for (std::thread& t : drains) t.join();
  return 0;
}

}  // namespace
}  // namespace exposure_filter

int main(int argc, char** argv) { return exposure_filter::Main(argc, argv); }
