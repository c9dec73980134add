// libFuzzer harness: arbitrary bytes as a serialized RecordExposureRequest,
// straight into ExposureFilterHandlers (rpc_fuzz_fixture.h). On OK, every
// item of every exposure whose event time is inside the window must then be
// filtered for its user (no false negatives) and the counts must add up.
#include <cstddef>
#include <cstdint>

#include "fuzz/rpc_fuzz_fixture.h"

using namespace exposure_filter;        // NOLINT: harness
using namespace exposure_filter::fuzz;  // NOLINT: harness

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RpcRun<exposure::v1::RecordExposureRequest,
         exposure::v1::RecordExposureResponse>
      run;
  if (!ParseAndRun(data, size, &ExposureFilterHandlers::RecordExposure, &run)) {
    return 0;  // undecodable: checked, kept in the corpus
  }
  if (!run.status.ok()) return 0;
  uint64_t items = 0;
  for (const auto& e : run.req.exposures()) {
    items += e.item_ids_size() + e.item_keys_size();
  }
  Require(run.resp.items_recorded() + run.resp.items_expired() == items,
          "recorded + expired = items sent");
  const int64_t now = run.fixture.clock().NowMs();
  for (const auto& e : run.req.exposures()) {
    // Expired (older than the shortest window, 1 day): may be ignored.
    if (e.event_time_ms() != 0 && e.event_time_ms() < now - 86'400'000) {
      continue;
    }
    exposure::v1::FilterRecalledRequest f;
    f.set_surface(run.req.surface());
    f.set_user_id(e.user_id());
    *f.mutable_candidate_ids() = e.item_ids();
    *f.mutable_candidate_keys() = e.item_keys();
    exposure::v1::FilterRecalledResponse kept;
    Require(run.fixture.handlers().FilterRecalled(f, &kept).ok(),
            "filter after record");
    Require(kept.kept_ids_size() == 0 && kept.kept_keys_size() == 0,
            "recorded items are filtered (no false negatives)");
  }
  return 0;
}
