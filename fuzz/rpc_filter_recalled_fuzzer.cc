// libFuzzer harness: arbitrary bytes as a serialized FilterRecalledRequest
// (rpc_fuzz_fixture.h). On OK the answer must be a faithful subset of the
// candidates: survivors in request order, removed + kept = candidates, a
// mask of exactly ceil(n/8) bytes with zero padding, and the preloaded
// user's items always removed.
#include <cstddef>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "fuzz/rpc_fuzz_fixture.h"

using namespace exposure_filter;        // NOLINT: harness
using namespace exposure_filter::fuzz;  // NOLINT: harness

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RpcRun<exposure::v1::FilterRecalledRequest,
         exposure::v1::FilterRecalledResponse>
      run;
  if (!ParseAndRun(data, size, &ExposureFilterHandlers::FilterRecalled, &run)) {
    return 0;  // undecodable: checked, kept in the corpus
  }
  if (!run.status.ok()) {
    Require(IsExpectedReadRefusal(run.status, run.req),
            "reads fail only on bad input or offsets we do not serve");
    return 0;
  }
  const auto& req = run.req;
  const auto& resp = run.resp;
  const size_t n = req.candidate_ids_size() + req.candidate_keys_size();
  const bool preloaded_user =
      req.user_id() == kPreloadedUser &&
      (req.surface().empty() || req.surface() == "homefeed");
  absl::flat_hash_set<uint64_t> preloaded_ids(std::begin(kPreloadedIds),
                                              std::end(kPreloadedIds));
  if (req.mode() == exposure::v1::KEEP_MASK) {
    Require(resp.keep_mask().size() == (n + 7) / 8, "mask length");
    Require(resp.kept_ids_size() == 0 && resp.kept_keys_size() == 0,
            "mask mode returns no ids");
    size_t kept = 0;
    for (size_t i = 0; i < resp.keep_mask().size() * 8; ++i) {
      const bool bit = (resp.keep_mask()[i / 8] >> (i % 8)) & 1;
      Require(i < n || !bit, "padding bits are zero");
      if (!bit) continue;
      ++kept;
      if (preloaded_user && i < static_cast<size_t>(req.candidate_ids_size())) {
        Require(!preloaded_ids.contains(req.candidate_ids(i)),
                "preloaded id kept (false negative)");
      }
    }
    Require(kept + resp.removed_count() == n, "kept + removed = candidates");
    return 0;
  }
  Require(resp.keep_mask().empty(), "id mode returns no mask");
  Require(
      resp.kept_ids_size() + resp.kept_keys_size() + resp.removed_count() == n,
      "kept + removed = candidates");
  // Survivors are a subsequence of the candidates, in order.
  int j = 0;
  for (uint64_t id : resp.kept_ids()) {
    while (j < req.candidate_ids_size() && req.candidate_ids(j) != id) ++j;
    Require(j < req.candidate_ids_size(), "kept id is a candidate, in order");
    ++j;
    if (preloaded_user) {
      Require(!preloaded_ids.contains(id),
              "preloaded id kept (false negative)");
    }
  }
  j = 0;
  for (const std::string& key : resp.kept_keys()) {
    while (j < req.candidate_keys_size() && req.candidate_keys(j) != key) ++j;
    Require(j < req.candidate_keys_size(), "kept key is a candidate, in order");
    ++j;
    if (preloaded_user) {
      Require(key != kPreloadedKey, "preloaded key kept (false negative)");
    }
  }
  return 0;
}
