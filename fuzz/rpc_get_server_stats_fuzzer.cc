// libFuzzer harness: arbitrary bytes as a serialized GetServerStatsRequest
// (no fields: every input is unknown fields, which must be ignored)
// (rpc_fuzz_fixture.h). The answer must describe the preloaded fixture.
#include <cstddef>
#include <cstdint>

#include "fuzz/rpc_fuzz_fixture.h"

using namespace exposure_filter;        // NOLINT: harness
using namespace exposure_filter::fuzz;  // NOLINT: harness

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RpcRun<exposure::v1::GetServerStatsRequest,
         exposure::v1::GetServerStatsResponse>
      run;
  if (!ParseAndRun(data, size, &ExposureFilterHandlers::GetServerStats, &run)) {
    return 0;  // undecodable: checked, kept in the corpus
  }
  Require(run.status.ok(), "GetServerStats always answers");
  const auto& st = run.resp;
  // u1 on two surfaces, u2 on two surfaces.
  Require(st.users() == 4 && st.shards() == 4 && st.shard_stats_size() == 4,
          "the preloaded users and shards");
  Require(st.items_recorded() == 2 * (std::size(kPreloadedIds) + 2),
          "items recorded since start");
  // The registry is shared by all inputs (rpc_fuzz_fixture.h): at least
  // the preloaded surfaces.
  Require(st.surface_stats_size() >= 2, "the default and homefeed surfaces");
  Require(st.uptime_ms() >= 0, "uptime not negative");
  return 0;
}
