// ExposureFilterService: the gRPC callback-API edge of ExposureFilterHandlers.
// Handlers never block (they take only short shard locks), so they run inline
// on gRPC's threads and finish their reactor before returning.
#ifndef EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVICE_H_
#define EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVICE_H_

#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/server/admission_gate.h"
#include "src/server/arena_message_allocator.h"
#include "src/server/exposure_filter_handlers.h"

namespace exposure_filter {

class ExposureFilterService final
    : public exposure::v1::ExposureFilter::CallbackService {
 public:
  // `gate` (overload protection, issue 8) may be null: nothing is shed.
  // Data-plane RPCs pass it before their handler runs; GetServerStats and
  // the traced-user administration do not.
  explicit ExposureFilterService(ExposureFilterHandlers* handlers,
                                 AdmissionGate* gate = nullptr)
      : handlers_(handlers), gate_(gate) {
    // The hot RPCs parse into a per-call arena (arena_message_allocator.h).
    SetMessageAllocatorFor_RecordExposure(&record_allocator_);
    SetMessageAllocatorFor_FilterRecalled(&filter_allocator_);
    SetMessageAllocatorFor_GetFilter(&get_filter_allocator_);
  }

  grpc::ServerUnaryReactor* RecordExposure(
      grpc::CallbackServerContext* ctx,
      const exposure::v1::RecordExposureRequest* req,
      exposure::v1::RecordExposureResponse* resp) override;
  grpc::ServerUnaryReactor* FilterRecalled(
      grpc::CallbackServerContext* ctx,
      const exposure::v1::FilterRecalledRequest* req,
      exposure::v1::FilterRecalledResponse* resp) override;
  grpc::ServerUnaryReactor* GetFilter(
      grpc::CallbackServerContext* ctx,
      const exposure::v1::GetFilterRequest* req,
      exposure::v1::GetFilterResponse* resp) override;
  grpc::ServerUnaryReactor* GetUserStats(
      grpc::CallbackServerContext* ctx,
      const exposure::v1::GetUserStatsRequest* req,
      exposure::v1::GetUserStatsResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteUser(
      grpc::CallbackServerContext* ctx,
      const exposure::v1::DeleteUserRequest* req,
      exposure::v1::DeleteUserResponse* resp) override;
  grpc::ServerUnaryReactor* GetServerStats(
      grpc::CallbackServerContext* ctx,
      const exposure::v1::GetServerStatsRequest* req,
      exposure::v1::GetServerStatsResponse* resp) override;
  // Debugging (issue 6).
  grpc::ServerUnaryReactor* Explain(
      grpc::CallbackServerContext* ctx, const exposure::v1::ExplainRequest* req,
      exposure::v1::ExplainResponse* resp) override;
  grpc::ServerUnaryReactor* AddTracedUsers(
      grpc::CallbackServerContext* ctx,
      const exposure::v1::AddTracedUsersRequest* req,
      exposure::v1::AddTracedUsersResponse* resp) override;
  grpc::ServerUnaryReactor* RemoveTracedUsers(
      grpc::CallbackServerContext* ctx,
      const exposure::v1::RemoveTracedUsersRequest* req,
      exposure::v1::RemoveTracedUsersResponse* resp) override;
  grpc::ServerUnaryReactor* ListTracedUsers(
      grpc::CallbackServerContext* ctx,
      const exposure::v1::ListTracedUsersRequest* req,
      exposure::v1::ListTracedUsersResponse* resp) override;

 private:
  // Runs `handler` if the gate admits a request of `request_bytes`, and
  // finishes the RPC with its status (or the gate's RESOURCE_EXHAUSTED).
  template <typename Handler>
  grpc::ServerUnaryReactor* Admitted(grpc::CallbackServerContext* ctx,
                                     const char* method, size_t request_bytes,
                                     Handler&& handler);

  ExposureFilterHandlers* const handlers_;
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
