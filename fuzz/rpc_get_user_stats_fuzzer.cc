// libFuzzer harness: arbitrary bytes as a serialized GetUserStatsRequest
// (rpc_fuzz_fixture.h). On OK the per-slice figures must add up to the
// user's totals and the times must be ordered.
#include <cstddef>
#include <cstdint>

#include "fuzz/rpc_fuzz_fixture.h"

using namespace exposure_filter;        // NOLINT: harness
using namespace exposure_filter::fuzz;  // NOLINT: harness

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RpcRun<exposure::v1::GetUserStatsRequest, exposure::v1::GetUserStatsResponse>
      run;
  if (!ParseAndRun(data, size, &ExposureFilterHandlers::GetUserStats, &run)) {
    return 0;  // undecodable: checked, kept in the corpus
  }
  if (!run.status.ok()) {
    Require(IsExpectedReadRefusal(run.status, run.req),
            "reads fail only on bad input or offsets we do not serve");
    return 0;
  }
  const auto& st = run.resp;
  if (!st.exists()) {
    Require(st.items() == 0 && st.slices() == 0 && st.slice_stats_size() == 0,
            "unknown users have no figures");
    Require(run.req.user_id() != kPreloadedUser ||
                !(run.req.surface().empty() || run.req.surface() == "homefeed"),
            "the preloaded user exists");
    return 0;
  }
  uint64_t items = 0, segments = 0;
  for (const auto& s : st.slice_stats()) {
    Require(s.start_ms() < s.end_ms(), "slice range ordered");
    Require(s.items() <= s.capacity() * 2 + 64 && s.bytes() > 0,
            "slice figures sane");
    Require(s.estimated_fp_rate() >= 0 && s.estimated_fp_rate() <= 1,
            "slice fp in [0,1]");
    items += s.items();
    segments += s.segments();
  }
  Require(st.slices() == static_cast<uint32_t>(st.slice_stats_size()) &&
              st.items() == items && st.segments() == segments,
          "slices add up to the user");
  Require(st.oldest_exposure_ms() <= st.newest_exposure_ms(),
          "oldest <= newest");
  Require(st.estimated_fp_rate() >= 0 && st.estimated_fp_rate() <= 1,
          "fp in [0,1]");
  return 0;
}
