// libFuzzer harness: arbitrary bytes as a serialized GetFilterRequest
// (rpc_fuzz_fixture.h). On OK the filter must parse with the public
// FilterView, claim the preloaded user's items, and answer not_modified
// (with no bytes) exactly when if_version equals the current version.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "exposure_filter/filter_format.h"
#include "exposure_filter/filter_view.h"
#include "fuzz/rpc_fuzz_fixture.h"

using namespace exposure_filter;        // NOLINT: harness
using namespace exposure_filter::fuzz;  // NOLINT: harness

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RpcRun<exposure::v1::GetFilterRequest, exposure::v1::GetFilterResponse> run;
  if (!ParseAndRun(data, size, &ExposureFilterHandlers::GetFilter, &run)) {
    return 0;  // undecodable: checked, kept in the corpus
  }
  if (!run.status.ok()) {
    // FAILED_PRECONDITION only for a client that accepts formats, none of
    // them this server's.
    const auto& accepted = run.req.accepted_formats();
    const bool refuses_our_format =
        !accepted.empty() && std::find(accepted.begin(), accepted.end(),
                                       format::kVersion) == accepted.end();
    Require(IsExpectedReadRefusal(run.status, run.req) ||
                (refuses_our_format &&
                 run.status.code() == absl::StatusCode::kFailedPrecondition),
            "reads fail only on bad input, offsets we do not serve or formats "
            "we do not encode");
    return 0;
  }
  const auto& resp = run.resp;
  Require(!resp.version().empty(), "a version is always returned");
  if (resp.not_modified()) {
    Require(resp.filter().empty() && resp.version() == run.req.if_version(),
            "not_modified only for the current version, without bytes");
    return 0;
  }
  Require(resp.version() != run.req.if_version(),
          "the current version is answered not_modified");
  absl::StatusOr<FilterView> view = FilterView::Parse(resp.filter());
  Require(view.ok(), "the served filter parses");
  if (run.req.user_id() == kPreloadedUser &&
      (run.req.surface().empty() || run.req.surface() == "homefeed")) {
    for (uint64_t id : kPreloadedIds) {
      Require(view->MayContainId(id), "pulled filter claims preloaded ids");
    }
    Require(view->MayContainKey(kPreloadedKey).value_or(false),
            "claims the preloaded key");
  }
  // Asking again with the version just served is not_modified.
  exposure::v1::GetFilterRequest again = run.req;
  again.set_if_version(resp.version());
  exposure::v1::GetFilterResponse second;
  Require(run.fixture.handlers().GetFilter(again, &second).ok() &&
              second.not_modified(),
          "if_version round trip");
  return 0;
}
