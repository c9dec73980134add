// Shared by the per-RPC libFuzzer harnesses (fuzz/rpc_*_fuzzer.cc): a small
// in-process service (ExposureFilterHandlers over a 4-shard store, a
// ManualClock, small request limits, a traced user) built afresh for every
// input so a crash reproduces from its input alone, plus the checks every
// answer must pass. The harness feeds the fuzz bytes as the serialized
// request of its RPC, parsed by the service's own parser (request_parser.h)
// from a multi-slice ByteBuffer, as the service gets it from gRPC.
//
// Checks (a failed one traps, so libFuzzer reports it as a crash):
//   - bytes that are not a valid request are refused exactly when protobuf
//     refuses them, with INVALID_ARGUMENT naming the request type (what a
//     client of the real server gets);
//   - the status is OK, INVALID_ARGUMENT whose message starts with a field
//     path ("exposures[3].item_keys[0]: ..."), or RESOURCE_EXHAUSTED;
//   - a rejected request changed nothing (users and bytes as before);
//   - the store's byte and user accounting adds up (shards, surfaces, total)
//     and never goes "negative" (wraps past a sane bound);
//   - the preloaded user's items are still filtered unless the input deleted
//     that user (no false negatives).
#ifndef EXPOSURE_FILTER_FUZZ_RPC_FUZZ_FIXTURE_H_
#define EXPOSURE_FILTER_FUZZ_RPC_FUZZ_FIXTURE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "src/server/config/server_config.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/server/request_parser.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"
#include "src/store/trace_log.h"

namespace exposure_filter {
namespace fuzz {

// Fails the run with a message (libFuzzer saves the input).
inline void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  __builtin_trap();
}

// Whether a read RPC's refusal is one this fixture's server may give: bad
// input (INVALID_ARGUMENT naming the field), or read-your-writes offsets
// sent to a server that is not replicated, which applies every write before
// acknowledging it (FAILED_PRECONDITION naming min_offsets; docs/scale-out.md
// "Consistency"). Found by CI's fuzz stage once min_offsets was added.
template <typename Request>
bool IsExpectedReadRefusal(const absl::Status& s, const Request& req) {
  if (s.code() == absl::StatusCode::kInvalidArgument) return true;
  return s.code() == absl::StatusCode::kFailedPrecondition &&
         req.min_offsets_size() > 0 &&
         absl::StartsWith(s.message(), "min_offsets: ");
}

// 2023-11-14T22:13:20Z: far from 0 and from int64 limits, on no slice edge.
constexpr int64_t kFuzzNowMs = 1'700'000'000'000;

// Small limits so fuzzed requests reach them (and one past them) cheaply.
inline RequestLimits FuzzLimits() {
  RequestLimits l;
  l.max_id_bytes = 32;
  l.max_items_per_request = 64;
  l.max_exposures_per_request = 8;
  l.max_candidates_per_request = 64;
  l.max_future_skew = absl::Minutes(5);
  return l;
}

// The user and items every fixture starts with, on the default surface and
// on "homefeed" (so reads of existing filters, version checks and deletes of
// real users are reachable from a few bytes).
constexpr char kPreloadedUser[] = "u1";
constexpr uint64_t kPreloadedIds[] = {1, 2, 3, 0xffffffffffffffffull};
constexpr char kPreloadedKey[] = "k";

// "" is the default surface; the strings fuzzers mutate most easily.
inline const std::vector<std::string>& PreloadedSurfaces() {
  static const std::vector<std::string>* s =
      new std::vector<std::string>{"", "homefeed"};
  return *s;
}

// True if the message looks like "field.path[3].x: problem".
inline bool StartsWithFieldPath(absl::string_view m) {
  size_t i = 0;
  while (i < m.size() &&
         ((m[i] >= 'a' && m[i] <= 'z') || (m[i] >= '0' && m[i] <= '9') ||
          m[i] == '_' || m[i] == '.' || m[i] == '[' || m[i] == ']')) {
    ++i;
  }
  return i > 0 && m[0] >= 'a' && m[0] <= 'z' && m.substr(i, 2) == ": ";
}

// One registry per process, shared by every input's fresh store: building a
// registry sizes its policies numerically (bloom_math), which would
// otherwise dominate each run (~2 runs/s instead of thousands). Surfaces
// an input creates therefore stay (names only; the users are in the
// per-input store), and max_surfaces is high enough never to be reached,
// so runs do not depend on earlier inputs; the --max_surfaces check is
// covered by the unit tests (tests/server/handlers_test.cc).
inline SurfaceRegistry* SharedRegistry() {
  static SurfaceRegistry* const registry = [] {
    // A second surface with a short window, so aging paths are reachable.
    FilterPolicyOptions short_window;
    short_window.fp_rate = 0.001;
    short_window.retention = absl::Hours(24);
    short_window.slice_span = absl::Hours(6);
    auto r = SurfaceRegistry::Create(FilterPolicyOptions{},
                                     {{"short", short_window}},
                                     /*max_surfaces=*/65535);
    Require(r.ok(), "registry");
    return r->release();
  }();
  return registry;
}

class RpcFuzzFixture {
 public:
  RpcFuzzFixture() : clock_(kFuzzNowMs) {
    surfaces_ = SharedRegistry();
    store_ = std::make_unique<ShardedFilterStore>(4, &clock_, surfaces_);
    TraceLimits trace_limits;
    trace_limits.max_users = 4;
    trace_limits.max_entries_per_user = 16;
    trace_log_ = std::make_unique<TraceLog>(trace_limits);
    handlers_ = std::make_unique<ExposureFilterHandlers>(
        surfaces_, store_.get(), FuzzLimits(), trace_log_.get());
    exposure::v1::AddTracedUsersRequest trace;
    trace.add_user_ids(kPreloadedUser);
    exposure::v1::AddTracedUsersResponse traced;
    Require(handlers_->AddTracedUsers(trace, &traced).ok(), "trace preload");
    for (const std::string& surface : PreloadedSurfaces()) {
      exposure::v1::RecordExposureRequest req;
      req.set_surface(surface);
      exposure::v1::Exposure* e = req.add_exposures();
      e->set_user_id(kPreloadedUser);
      for (uint64_t id : kPreloadedIds) e->add_item_ids(id);
      e->add_item_keys(kPreloadedKey);
      // An hour ago: a late event into the current slice.
      e->set_event_time_ms(kFuzzNowMs - 3'600'000);
      exposure::v1::Exposure* other = req.add_exposures();
      other->set_user_id("u2");
      other->add_item_ids(7);
      exposure::v1::RecordExposureResponse resp;
      Require(handlers_->RecordExposure(req, &resp).ok(), "preload");
    }
  }

  ExposureFilterHandlers& handlers() { return *handlers_; }
  ShardedFilterStore& store() { return *store_; }
  ManualClock& clock() { return clock_; }
  const RequestLimits& limits() const { return limits_; }

  // Users and bytes the store holds, checked for consistency on the way.
  std::pair<uint64_t, uint64_t> CheckedUsage() {
    exposure::v1::GetServerStatsResponse stats;
    Require(handlers_->GetServerStats({}, &stats).ok(), "GetServerStats");
    uint64_t users = 0, bytes = 0;
    for (const auto& s : stats.shard_stats()) {
      users += s.users();
      bytes += s.bytes();
    }
    Require(users == stats.users() && bytes == stats.bytes(),
            "shard sums equal the totals");
    uint64_t surface_users = 0, surface_bytes = 0;
    for (const auto& s : stats.surface_stats()) {
      surface_users += s.users();
      surface_bytes += s.bytes();
    }
    Require(surface_users == users && surface_bytes == bytes,
            "surface sums equal the totals");
    // A wrapped (negative) count would be near 2^64.
    Require(bytes < (uint64_t{1} << 40) && users < (uint64_t{1} << 32),
            "accounting not negative");
    Require(store_->total_bytes() == bytes + stats.table_slack_bytes(),
            "running total equals bytes + table slack");
    Require((users == 0) == (bytes == 0), "no bytes without users");
    return {users, bytes};
  }

  // Whether the preloaded user's items are still all filtered on `surface`.
  bool PreloadedItemsFiltered(const std::string& surface) {
    exposure::v1::FilterRecalledRequest req;
    req.set_surface(surface);
    req.set_user_id(kPreloadedUser);
    for (uint64_t id : kPreloadedIds) req.add_candidate_ids(id);
    req.add_candidate_keys(kPreloadedKey);
    exposure::v1::FilterRecalledResponse resp;
    Require(handlers_->FilterRecalled(req, &resp).ok(), "FilterRecalled");
    return resp.kept_ids_size() == 0 && resp.kept_keys_size() == 0 &&
           resp.removed_count() == std::size(kPreloadedIds) + 1;
  }

 private:
  ManualClock clock_;
  const RequestLimits limits_ = FuzzLimits();
  SurfaceRegistry* surfaces_;
  std::unique_ptr<ShardedFilterStore> store_;
  std::unique_ptr<TraceLog> trace_log_;
  std::unique_ptr<ExposureFilterHandlers> handlers_;
};

// The status every RPC may answer with, for any input.
inline void CheckStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return;
    case absl::StatusCode::kInvalidArgument:
      Require(StartsWithFieldPath(s.message()),
              "INVALID_ARGUMENT names the field first");
      return;
    case absl::StatusCode::kFailedPrecondition:
      // GetFilter's accepted_formats without this server's format.
      Require(StartsWithFieldPath(s.message()),
              "FAILED_PRECONDITION names the field first");
      return;
    case absl::StatusCode::kResourceExhausted:
      Require(!s.message().empty(), "RESOURCE_EXHAUSTED says why");
      return;
    default:
      std::fprintf(stderr, "status: %s\n", s.ToString().c_str());
      Require(false,
              "status is OK, INVALID_ARGUMENT, FAILED_PRECONDITION or "
              "RESOURCE_EXHAUSTED");
  }
}

// The fuzz bytes as gRPC hands them to the service: a ByteBuffer, here of
// three slices (cut at thirds) so the parse also crosses slice boundaries.
inline grpc::ByteBuffer AsReceived(const uint8_t* data, size_t size) {
  const size_t cuts[] = {0, size / 3, 2 * size / 3, size};
  std::vector<grpc::Slice> slices;
  for (int i = 0; i < 3; ++i) {
    slices.emplace_back(data + cuts[i], cuts[i + 1] - cuts[i]);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// Runs one RPC on the fuzz bytes as its serialized request: parses them with
// the service's own parser (request_parser.h), calls the handler, checks the
// status and the accounting, and returns the fixture, request, response and
// status for RPC-specific checks. Bytes that are not a valid request must be
// refused exactly when protobuf refuses them, with INVALID_ARGUMENT naming
// the request type; ParseAndRun then returns false (the harness returns 0,
// so such inputs stay in the corpus and the error path is explored too).
template <typename Req, typename Resp>
struct RpcRun {
  RpcFuzzFixture fixture;
  Req req;
  Resp resp;
  absl::Status status;
  std::pair<uint64_t, uint64_t> usage_before;
};

template <typename Req, typename Resp>
bool ParseAndRun(const uint8_t* data, size_t size,
                 absl::Status (ExposureFilterHandlers::*rpc)(const Req&, Resp*),
                 RpcRun<Req, Resp>* run) {
  grpc::ByteBuffer received = AsReceived(data, size);
  const absl::Status parsed = ParseRequest(&received, &run->req);
  Req flat;
  Require(parsed.ok() == flat.ParseFromArray(data, static_cast<int>(size)),
          "the edge parses exactly what protobuf parses");
  if (!parsed.ok()) {
    Require(parsed.code() == absl::StatusCode::kInvalidArgument &&
                absl::StartsWith(parsed.message(),
                                 Req::descriptor()->full_name() +
                                     ": not a valid protobuf message"),
            "an undecodable request is INVALID_ARGUMENT naming its type");
    return false;
  }
  run->usage_before = run->fixture.CheckedUsage();
  run->status = (run->fixture.handlers().*rpc)(run->req, &run->resp);
  CheckStatus(run->status);
  const std::pair<uint64_t, uint64_t> after = run->fixture.CheckedUsage();
  if (!run->status.ok()) {
    Require(after == run->usage_before, "a rejected request changes nothing");
  }
  // The answer serializes (e.g. no invalid UTF-8 echoed into a string).
  std::string wire;
  Require(run->resp.SerializeToString(&wire), "response serializes");
  return true;
}

}  // namespace fuzz
}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_FUZZ_RPC_FUZZ_FIXTURE_H_
