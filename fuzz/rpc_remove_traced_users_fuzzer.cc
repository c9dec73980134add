// libFuzzer harness: arbitrary bytes as a serialized RemoveTracedUsersRequest
// (rpc_fuzz_fixture.h). On OK: removed is 1 exactly when the preloaded
// traced user is named, and the filters themselves are untouched.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fuzz/rpc_fuzz_fixture.h"

using namespace exposure_filter;        // NOLINT: harness
using namespace exposure_filter::fuzz;  // NOLINT: harness

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RpcRun<exposure::v1::RemoveTracedUsersRequest,
         exposure::v1::RemoveTracedUsersResponse>
      run;
  if (!ParseAndRun(data, size, &ExposureFilterHandlers::RemoveTracedUsers,
                   &run)) {
    return 0;  // undecodable: checked, kept in the corpus
  }
  if (!run.status.ok()) {
    Require(run.status.code() == absl::StatusCode::kInvalidArgument,
            "removes fail only on bad input");
    return 0;
  }
  const bool named =
      std::find(run.req.user_ids().begin(), run.req.user_ids().end(),
                kPreloadedUser) != run.req.user_ids().end();
  Require(run.resp.removed() == (named ? 1u : 0u), "removed count");
  Require(run.resp.traced() == (named ? 0u : 1u), "traced count");
  Require(run.fixture.CheckedUsage() == run.usage_before,
          "untracing leaves the filters alone");
  Require(run.fixture.PreloadedItemsFiltered(""), "filters untouched");
  return 0;
}
