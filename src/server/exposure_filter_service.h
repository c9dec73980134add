// ExposureFilterService: the gRPC callback-API edge of ExposureFilterHandlers.
// Handlers never block (they take only short shard locks), so they run inline
// on gRPC's threads and finish their reactor before returning; the one
// exception, a replicated write (R >= 2), finishes its reactor
// later, from Kafka's delivery report (ServeThroughLog).
//
// Every method is registered "raw" (the request and response as bytes) and
// parsed here (request_parser.h): gRPC's generated handlers answer a request
// that does not parse with UNIMPLEMENTED and no message, which tells a client
// that sent, say, a non-UTF-8 item key that the method does not exist. Here
// it gets INVALID_ARGUMENT naming the request type and the defect. The parse
// is the one gRPC would do (zero-copy over the received slices, into the
// same pooled arenas for the hot RPCs), so the hot path costs the same.
#ifndef EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVICE_H_
#define EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVICE_H_

#include <grpcpp/support/byte_buffer.h>

#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/server/admission_gate.h"
#include "src/server/arena_message_allocator.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/server/session_hub.h"

namespace exposure_filter {

namespace service_internal {

// Base with each Mixin applied in turn: Mixins<...<Base>>, the first
// outermost (as the generated CallbackService typedef nests its mixins).
template <typename Base, template <typename> class... Mixins>
struct Mixed {
  using type = Base;
};
template <typename Base, template <typename> class First,
          template <typename> class... Rest>
struct Mixed<Base, First, Rest...> {
  using type = First<typename Mixed<Base, Rest...>::type>;
};

using Api = exposure::v1::ExposureFilter;

// exposure.v1.ExposureFilter with every method taking raw bytes. A method
// missing here would stay a synchronous one answering UNIMPLEMENTED;
// tests/server/undecodable_request_test.cc calls every method the proto
// declares and would fail.
using RawExposureFilterService =
    Mixed<Api::Service, Api::WithRawCallbackMethod_RecordExposure,
          Api::WithRawCallbackMethod_FilterRecalled,
          Api::WithRawCallbackMethod_GetFilter,
          Api::WithRawCallbackMethod_GetUserStats,
          Api::WithRawCallbackMethod_DeleteUser,
          Api::WithRawCallbackMethod_GetServerStats,
          Api::WithRawCallbackMethod_Explain,
          Api::WithRawCallbackMethod_AddTracedUsers,
          Api::WithRawCallbackMethod_RemoveTracedUsers,
          Api::WithRawCallbackMethod_ListTracedUsers,
          Api::WithRawCallbackMethod_Session>::type;

}  // namespace service_internal

class ExposureFilterService final
    : public service_internal::RawExposureFilterService {
 public:
  // `gate` (overload protection) may be null: nothing is shed.
  // Data-plane RPCs pass it before their request is parsed; GetServerStats
  // and the traced-user administration do not.
  // `hub` (the session stream's subscriptions) must outlive the service.
  ExposureFilterService(ExposureFilterHandlers* handlers, SessionHub* hub,
                        AdmissionGate* gate = nullptr)
      : handlers_(handlers), hub_(hub), gate_(gate) {}

  // The generated synchronous overloads stay visible (and unused: every
  // method is raw), so declaring the raw ones below hides nothing.
  using service_internal::RawExposureFilterService::AddTracedUsers;
  using service_internal::RawExposureFilterService::DeleteUser;
  using service_internal::RawExposureFilterService::Explain;
  using service_internal::RawExposureFilterService::FilterRecalled;
  using service_internal::RawExposureFilterService::GetFilter;
  using service_internal::RawExposureFilterService::GetServerStats;
  using service_internal::RawExposureFilterService::GetUserStats;
  using service_internal::RawExposureFilterService::ListTracedUsers;
  using service_internal::RawExposureFilterService::RecordExposure;
  using service_internal::RawExposureFilterService::RemoveTracedUsers;
  using service_internal::RawExposureFilterService::Session;

  using Reactor = grpc::ServerUnaryReactor;
  using Context = grpc::CallbackServerContext;
  using Bytes = grpc::ByteBuffer;

  Reactor* RecordExposure(Context* ctx, const Bytes* req, Bytes* resp) override;
  Reactor* FilterRecalled(Context* ctx, const Bytes* req, Bytes* resp) override;
  Reactor* GetFilter(Context* ctx, const Bytes* req, Bytes* resp) override;
  Reactor* GetUserStats(Context* ctx, const Bytes* req, Bytes* resp) override;
  Reactor* DeleteUser(Context* ctx, const Bytes* req, Bytes* resp) override;
  Reactor* GetServerStats(Context* ctx, const Bytes* req, Bytes* resp) override;
  // Debugging.
  Reactor* Explain(Context* ctx, const Bytes* req, Bytes* resp) override;
  Reactor* AddTracedUsers(Context* ctx, const Bytes* req, Bytes* resp) override;
  Reactor* RemoveTracedUsers(Context* ctx, const Bytes* req,
                             Bytes* resp) override;
  Reactor* ListTracedUsers(Context* ctx, const Bytes* req,
                           Bytes* resp) override;
  // The session stream (docs/session-stream.md): one SessionStream reactor
  // per call. Its mode-A requests pass the admission gate one by one; the
  // stream itself is bounded by --session_max_streams instead.
  grpc::ServerBidiReactor<Bytes, Bytes>* Session(Context* ctx) override;

 private:
  // Whether the RPC passes the admission gate (data plane) or not.
  enum class Gate { kAdmit, kBypass };

  // Admits (if gated) a request of its wire size, parses it into messages
  // from `allocator` (stack messages if null), runs `handler`, serializes
  // the response into `resp` and finishes the RPC with the status.
  template <typename Req, typename Resp, typename Handler>
  Reactor* Serve(Context* ctx, const char* method, Gate gate, const Bytes* req,
                 Bytes* resp, ArenaMessageAllocator<Req, Resp>* allocator,
                 Handler&& handler);

  // The replicated writes: admits and parses like Serve,
  // then `handler(request, response, done)` enqueues the write to Kafka and
  // returns at once; `done` (on the producer's delivery thread) serializes
  // the response and finishes the RPC. No gRPC thread waits for Kafka, so a
  // slow broker holds calls (bounded by the admission gate and the produce
  // timeout), never the callback threads that serve reads.
  template <typename Req, typename Resp, typename Handler>
  Reactor* ServeThroughLog(Context* ctx, const char* method, const Bytes* req,
                           Bytes* resp, Handler&& handler);

  ExposureFilterHandlers* const handlers_;
  SessionHub* const hub_;
  ArenaMessageAllocator<exposure::v1::RecordExposureRequest,
                        exposure::v1::RecordExposureResponse>
      record_allocator_;
  ArenaMessageAllocator<exposure::v1::FilterRecalledRequest,
                        exposure::v1::FilterRecalledResponse>
      filter_allocator_{
          &ReserveCandidateIds<exposure::v1::FilterRecalledRequest>};
  ArenaMessageAllocator<exposure::v1::GetFilterRequest,
                        exposure::v1::GetFilterResponse>
      get_filter_allocator_;
  AdmissionGate* const gate_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVICE_H_
