// libFuzzer harness: arbitrary bytes as a serialized ListTracedUsersRequest
// (no fields: unknown fields must be ignored) (rpc_fuzz_fixture.h). The
// answer lists the preloaded traced user with its entries and the limits.
#include <cstddef>
#include <cstdint>

#include "fuzz/rpc_fuzz_fixture.h"

using namespace exposure_filter;        // NOLINT: harness
using namespace exposure_filter::fuzz;  // NOLINT: harness

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RpcRun<exposure::v1::ListTracedUsersRequest,
         exposure::v1::ListTracedUsersResponse>
      run;
  if (!ParseAndRun(data, size, &ExposureFilterHandlers::ListTracedUsers,
                   &run)) {
    return 0;  // undecodable: checked, kept in the corpus
  }
  Require(run.status.ok(), "ListTracedUsers always answers");
  Require(run.resp.users_size() == 1 &&
              run.resp.users(0).user_id() == kPreloadedUser,
          "the preloaded traced user");
  // Five items on each of two surfaces, under the per-user cap of 16.
  Require(run.resp.users(0).entries() == 2 * (std::size(kPreloadedIds) + 1),
          "its exact entries");
  Require(run.resp.max_users() == 4 && run.resp.max_entries_per_user() == 16,
          "the limits");
  return 0;
}
