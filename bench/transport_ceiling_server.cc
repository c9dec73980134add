// transport-ceiling-server: the exposure.v1 service with no filtering work.
//
// FilterRecalled keeps every candidate (echoing the ids, or an all-ones keep
// mask), GetFilter returns one fixed, real encoded filter (a user with
// --filter_items exposures spread over the window, built once at startup, so
// a pulling client runs the same local check it runs against the real
// server), RecordExposure only counts. It
// parses the same flags as exposure-filter-server (ConfigFromFlags), so it
// listens with the same message limits and transport tuning; whatever rate it
// reaches is the ceiling gRPC itself sets on this machine, and the real
// server's rate in the same run is reported as a fraction of it.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "bench/no_work_server.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/item_hash.h"
#include "src/filter/filter_encoder.h"
#include "src/filter/user_filter.h"
#include "src/server/arena_message_allocator.h"
#include "src/server/config/server_flags.h"

ABSL_FLAG(int, filter_items, 2000,
          "exposures of the one filter GetFilter returns (spread over 7 "
          "slices of the default window)");

namespace exposure_filter {
namespace {

using namespace exposure::v1;  // NOLINT: bench tool, many message types

constexpr char kVersion[] = "ceiling-v1";

// The encoding of a user shown `items` ids at 7 event times 4 days apart.
std::string EncodedFilter(int items) {
  const FilterPolicy policy = *FilterPolicy::Create({});
  const int64_t now = absl::ToUnixMillis(absl::Now());
  UserFilter f;
  for (int g = 6; g >= 0; --g) {
    std::vector<uint64_t> hashes;
    for (int j = g; j < items; j += 7) hashes.push_back(HashItemId(j));
    f.Record(policy, hashes, now - g * int64_t{4 * 86'400'000} - 1000);
  }
  std::string out;
  EncodeFilter(&f, policy, now, &out);
  return out;
}

class CeilingService final : public ExposureFilter::CallbackService {
 public:
  explicit CeilingService(std::string filter) : filter_(std::move(filter)) {
    // Per-call arenas, as ExposureFilterService uses them.
    SetMessageAllocatorFor_RecordExposure(&record_allocator_);
    SetMessageAllocatorFor_FilterRecalled(&filter_allocator_);
    SetMessageAllocatorFor_GetFilter(&get_filter_allocator_);
  }

  grpc::ServerUnaryReactor* RecordExposure(
      grpc::CallbackServerContext* ctx, const RecordExposureRequest* req,
      RecordExposureResponse* resp) override {
    uint64_t items = 0;
    for (const Exposure& e : req->exposures()) {
      items += e.item_ids_size() + e.item_keys_size();
    }
    resp->set_items_recorded(items);
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* FilterRecalled(
      grpc::CallbackServerContext* ctx, const FilterRecalledRequest* req,
      FilterRecalledResponse* resp) override {
    const size_t n = req->candidate_ids_size() + req->candidate_keys_size();
    if (req->mode() == KEEP_MASK) {
      std::string* mask = resp->mutable_keep_mask();
      mask->assign((n + 7) / 8, '\xff');
      if (n % 8 != 0) mask->back() = static_cast<char>((1u << (n % 8)) - 1);
    } else {
      *resp->mutable_kept_ids() = req->candidate_ids();
      *resp->mutable_kept_keys() = req->candidate_keys();
    }
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* GetFilter(grpc::CallbackServerContext* ctx,
                                      const GetFilterRequest* req,
                                      GetFilterResponse* resp) override {
    resp->set_version(kVersion);
    if (req->if_version() == kVersion) {
      resp->set_not_modified(true);
    } else {
      resp->set_filter(filter_);
    }
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* GetUserStats(grpc::CallbackServerContext* ctx,
                                         const GetUserStatsRequest*,
                                         GetUserStatsResponse*) override {
    return Done(ctx);
  }
  grpc::ServerUnaryReactor* DeleteUser(grpc::CallbackServerContext* ctx,
                                       const DeleteUserRequest*,
                                       DeleteUserResponse*) override {
    return Done(ctx);
  }
  grpc::ServerUnaryReactor* GetServerStats(grpc::CallbackServerContext* ctx,
                                           const GetServerStatsRequest*,
                                           GetServerStatsResponse*) override {
    return Done(ctx);
  }

 private:
  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx) {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  const std::string filter_;
  ArenaMessageAllocator<RecordExposureRequest, RecordExposureResponse>
      record_allocator_;
  ArenaMessageAllocator<FilterRecalledRequest, FilterRecalledResponse>
      filter_allocator_{&ReserveCandidateIds<FilterRecalledRequest>};
  ArenaMessageAllocator<GetFilterRequest, GetFilterResponse>
      get_filter_allocator_;
};

}  // namespace
}  // namespace exposure_filter

int main(int argc, char** argv) {
  using namespace exposure_filter;
  constexpr char kProgram[] = "transport-ceiling-server";
  std::optional<ServerConfig> config =
      bench::NoWorkServerConfig(kProgram, argc, argv);
  if (!config) return 2;
  const int filter_items = absl::GetFlag(FLAGS_filter_items);
  if (filter_items < 0) {
    std::fprintf(stderr, "transport-ceiling-server: --filter_items < 0\n");
    return 2;
  }
  CeilingService service(EncodedFilter(filter_items));
  grpc::EnableDefaultHealthCheckService(true);
  bench::NoWorkServerBuilder no_work(kProgram, *config);
  no_work.builder().RegisterService(&service);
  std::unique_ptr<grpc::Server> server = no_work.Start();
  if (server == nullptr) return 1;
  std::fprintf(stderr, "transport-ceiling-server serving on port %d\n",
               no_work.port());
  bench::WaitForStopThenShutdown(server.get());
  return 0;
}
