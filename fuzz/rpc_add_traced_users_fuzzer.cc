// libFuzzer harness: arbitrary bytes as a serialized AddTracedUsersRequest
// (rpc_fuzz_fixture.h). The trace cap (4 users) must hold: past it the call
// is RESOURCE_EXHAUSTED and adds nobody; on OK the count matches the list.
#include <cstddef>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "fuzz/rpc_fuzz_fixture.h"

using namespace exposure_filter;        // NOLINT: harness
using namespace exposure_filter::fuzz;  // NOLINT: harness

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RpcRun<exposure::v1::AddTracedUsersRequest,
         exposure::v1::AddTracedUsersResponse>
      run;
  if (!ParseAndRun(data, size, &ExposureFilterHandlers::AddTracedUsers, &run)) {
    return 0;  // undecodable: checked, kept in the corpus
  }
  exposure::v1::ListTracedUsersResponse list;
  Require(run.fixture.handlers().ListTracedUsers({}, &list).ok(), "list");
  Require(list.users_size() <= 4, "never more than --trace_max_users");
  if (!run.status.ok()) {
    Require(list.users_size() == 1, "a rejected add adds nobody");
    return 0;
  }
  absl::flat_hash_set<std::string> distinct(run.req.user_ids().begin(),
                                            run.req.user_ids().end());
  const size_t fresh = distinct.size() - distinct.contains(kPreloadedUser);
  Require(run.resp.added() == fresh, "added = distinct new users");
  Require(run.resp.traced() == static_cast<uint32_t>(list.users_size()) &&
              run.resp.traced() == 1 + fresh,
          "traced count matches the list");
  for (int i = 1; i < list.users_size(); ++i) {
    Require(list.users(i - 1).user_id() < list.users(i).user_id(),
            "list sorted by user_id");
  }
  return 0;
}
