// libFuzzer harness: arbitrary bytes as a serialized DeleteUserRequest
// (rpc_fuzz_fixture.h). On OK the user is gone (no stats, nothing
// filtered); deleting the preloaded user says existed and frees its bytes;
// other surfaces keep it.
#include <cstddef>
#include <cstdint>

#include "fuzz/rpc_fuzz_fixture.h"

using namespace exposure_filter;        // NOLINT: harness
using namespace exposure_filter::fuzz;  // NOLINT: harness

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RpcRun<exposure::v1::DeleteUserRequest, exposure::v1::DeleteUserResponse> run;
  if (!ParseAndRun(data, size, &ExposureFilterHandlers::DeleteUser, &run)) {
    return 0;  // undecodable: checked, kept in the corpus
  }
  if (!run.status.ok()) {
    Require(run.status.code() == absl::StatusCode::kInvalidArgument,
            "deletes fail only on bad input");
    return 0;
  }
  exposure::v1::GetUserStatsRequest q;
  q.set_surface(run.req.surface());
  q.set_user_id(run.req.user_id());
  exposure::v1::GetUserStatsResponse st;
  Require(run.fixture.handlers().GetUserStats(q, &st).ok() && !st.exists(),
          "a deleted user has no stats");
  const auto after = run.fixture.CheckedUsage();
  const bool preloaded_surface =
      run.req.surface().empty() || run.req.surface() == "homefeed";
  if (run.req.user_id() == kPreloadedUser && preloaded_surface) {
    Require(run.resp.existed(), "the preloaded user existed");
    Require(after.first + 1 == run.usage_before.first &&
                after.second < run.usage_before.second,
            "its entry and bytes are freed");
    Require(!run.fixture.PreloadedItemsFiltered(run.req.surface()),
            "nothing filtered after delete");
    const std::string other = run.req.surface().empty() ? "homefeed" : "";
    Require(run.fixture.PreloadedItemsFiltered(other),
            "the other surface keeps the user");
  } else if (!run.resp.existed()) {
    Require(after == run.usage_before, "deleting nobody changes nothing");
  }
  return 0;
}
