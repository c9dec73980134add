// session-api-probe: what a Session stream's mode A message costs the
// server, by the gRPC server API that runs the stream (docs/performance.md,
// "The feed loop"; bench/session_api_cost.sh drives it).
//
// Serves Session, answering each SessionRequest.filter from a plain hash
// set per user (no filter format: the feed loop only needs the items it
// recorded removed, or its sessions end probing them), and RecordExposure,
// which fills the sets, on the callback API in both modes so the feed
// loop's writes cost the same. The Session stream runs on one of:
//
//   --api=callback  a callback-API reactor, as exposure-filter-server runs
//                   it: each read completes on one of gRPC's callback
//                   threads, the next read starts at once, answers are
//                   queued and written one at a time;
//   --api=sync      the synchronous API: the handler's thread reads a
//                   request, answers it and writes the answer itself (no
//                   hand-off between threads inside a message).
//
// bench/session_api_cost.sh drives it with the feed loop's mode A on the
// stream and compares the two APIs' server CPU per request, alternated.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/synchronization/mutex.h"
#include "bench/no_work_server.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/server/config/server_flags.h"

ABSL_FLAG(std::string, api, "callback", "callback or sync: the Session API");

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;

// Every item recorded, per user: what the answers remove.
class Recorded {
 public:
  void Add(const v1::RecordExposureRequest& request) {
    absl::MutexLock lock(&mu_);
    for (const v1::Exposure& e : request.exposures()) {
      absl::flat_hash_set<uint64_t>& items = users_[e.user_id()];
      items.insert(e.item_ids().begin(), e.item_ids().end());
    }
  }
  // A KEEP_MASK answer to `request`'s filter (candidate ids only).
  void Answer(const v1::SessionRequest& request,
              v1::SessionResponse* response) {
    response->Clear();
    response->set_request_id(request.request_id());
    const v1::FilterRecalledRequest& f = request.filter();
    const int n = f.candidate_ids_size();
    std::string* mask = response->mutable_filter()->mutable_keep_mask();
    mask->assign((n + 7) / 8, '\0');
    absl::MutexLock lock(&mu_);
    auto it = users_.find(f.user_id());
    for (int i = 0; i < n; ++i) {
      if (it == users_.end() || !it->second.contains(f.candidate_ids(i)))
        (*mask)[i / 8] = static_cast<char>((*mask)[i / 8] | (1 << (i % 8)));
    }
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::flat_hash_set<uint64_t>> users_
      ABSL_GUARDED_BY(mu_);
};

// The callback API's stream, shaped as SessionStream: reads back to back,
// answers through a queue with one write in flight. Deletes itself in
// OnDone.
class CallbackStream final
    : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  explicit CallbackStream(Recorded* recorded) : recorded_(recorded) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    if (!ok) {
      reads_done_ = true;
      if (!writing_) Finish(grpc::Status::OK);
      return;
    }
    queue_.emplace_back();
    recorded_->Answer(request_, &queue_.back());
    StartRead(&request_);
    if (!writing_) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }
  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    queue_.pop_front();
    if (ok && !queue_.empty()) {
      StartWrite(&queue_.front());
      return;
    }
    writing_ = false;
    if (reads_done_ || !ok) Finish(grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  Recorded* const recorded_;
  v1::SessionRequest request_;  // only the reading callback touches it
  absl::Mutex mu_;
  std::deque<v1::SessionResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
};

// RecordExposure, the same on both APIs: the items go into the sets.
grpc::ServerUnaryReactor* AnswerRecord(Recorded* recorded,
                                       grpc::CallbackServerContext* ctx,
                                       const v1::RecordExposureRequest* request,
                                       v1::RecordExposureResponse* response) {
  recorded->Add(*request);
  uint64_t items = 0;
  for (const auto& e : request->exposures()) items += e.item_ids_size();
  response->set_items_recorded(items);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

class CallbackProbe final : public v1::ExposureFilter::CallbackService {
  grpc::ServerUnaryReactor* RecordExposure(
      grpc::CallbackServerContext* ctx, const v1::RecordExposureRequest* req,
      v1::RecordExposureResponse* resp) override {
    return AnswerRecord(&recorded_, ctx, req, resp);
  }
  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* Session(
      grpc::CallbackServerContext* /*ctx*/) override {
    return new CallbackStream(&recorded_);
  }
  Recorded recorded_;
};

class SyncProbe final
    : public v1::ExposureFilter::WithCallbackMethod_RecordExposure<
          v1::ExposureFilter::Service> {
  grpc::ServerUnaryReactor* RecordExposure(
      grpc::CallbackServerContext* ctx, const v1::RecordExposureRequest* req,
      v1::RecordExposureResponse* resp) override {
    return AnswerRecord(&recorded_, ctx, req, resp);
  }
  grpc::Status Session(
      grpc::ServerContext* /*ctx*/,
      grpc::ServerReaderWriter<v1::SessionResponse, v1::SessionRequest>* stream)
      override {
    v1::SessionRequest request;
    v1::SessionResponse response;
    while (stream->Read(&request)) {
      recorded_.Answer(request, &response);
      if (!stream->Write(response)) break;
    }
    return grpc::Status::OK;
  }
  Recorded recorded_;
};

int Main(int argc, char** argv) {
  constexpr char kProgram[] = "session-api-probe";
  std::optional<ServerConfig> config =
      bench::NoWorkServerConfig(kProgram, argc, argv);
  if (!config) return 2;
  const std::string api = absl::GetFlag(FLAGS_api);
  if (api != "callback" && api != "sync") {
    std::fprintf(stderr, "session-api-probe: --api is callback or sync\n");
    return 2;
  }
  bench::NoWorkServerBuilder no_work(kProgram, *config);
  CallbackProbe callback_service;
  SyncProbe sync_service;
  if (api == "callback") {
    no_work.builder().RegisterService(&callback_service);
  } else {
    no_work.builder().RegisterService(&sync_service);
  }
  std::unique_ptr<grpc::Server> server = no_work.Start();
  if (server == nullptr) return 1;
  std::fprintf(stderr, "session-api-probe (%s) serving on port %d\n",
               api.c_str(), no_work.port());
  bench::WaitForStopThenShutdown(server.get());
  return 0;
}

}  // namespace
}  // namespace exposure_filter

int main(int argc, char** argv) { return exposure_filter::Main(argc, argv); }
