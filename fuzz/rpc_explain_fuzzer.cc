// libFuzzer harness: arbitrary bytes as a serialized ExplainRequest
// (rpc_fuzz_fixture.h). On OK: one explanation per item, ids then keys, and
// "filtered" agrees with FilterRecalled on the same candidates; verdicts
// match filtered; the traced preloaded user's items are FILTERED_RECORDED.
#include <cstddef>
#include <cstdint>

#include "fuzz/rpc_fuzz_fixture.h"

using namespace exposure_filter;        // NOLINT: harness
using namespace exposure_filter::fuzz;  // NOLINT: harness

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RpcRun<exposure::v1::ExplainRequest, exposure::v1::ExplainResponse> run;
  if (!ParseAndRun(data, size, &ExposureFilterHandlers::Explain, &run)) {
    return 0;  // undecodable: checked, kept in the corpus
  }
  if (!run.status.ok()) {
    Require(IsExpectedReadRefusal(run.status, run.req),
            "reads fail only on bad input or offsets we do not serve");
    return 0;
  }
  const auto& req = run.req;
  const auto& resp = run.resp;
  const int n = req.item_ids_size() + req.item_keys_size();
  Require(resp.items_size() == n, "one explanation per item");
  exposure::v1::FilterRecalledRequest f;
  f.set_surface(req.surface());
  f.set_user_id(req.user_id());
  *f.mutable_candidate_ids() = req.item_ids();
  *f.mutable_candidate_keys() = req.item_keys();
  f.set_mode(exposure::v1::KEEP_MASK);
  exposure::v1::FilterRecalledResponse kept;
  Require(run.fixture.handlers().FilterRecalled(f, &kept).ok(),
          "the same request filters");
  const bool preloaded_user =
      req.user_id() == kPreloadedUser &&
      (req.surface().empty() || req.surface() == "homefeed");
  for (int i = 0; i < n; ++i) {
    const auto& item = resp.items(i);
    if (i < req.item_ids_size()) {
      Require(item.has_item_id() && item.item_id() == req.item_ids(i),
              "ids first, in order");
    } else {
      Require(item.has_item_key() &&
                  item.item_key() == req.item_keys(i - req.item_ids_size()),
              "then keys, in order");
    }
    const bool kept_bit = (kept.keep_mask()[i / 8] >> (i % 8)) & 1;
    Require(item.filtered() == !kept_bit, "Explain agrees with FilterRecalled");
    Require(item.filtered() ==
                (item.verdict() != exposure::v1::ItemExplanation::KEPT),
            "verdict matches filtered");
    Require(item.filtered() == (item.claimed_by_size() > 0),
            "filtered iff a live slice claims it");
    if (preloaded_user && item.has_item_key() &&
        item.item_key() == kPreloadedKey) {
      Require(
          item.verdict() == exposure::v1::ItemExplanation::FILTERED_RECORDED,
          "traced exposure is reported as recorded");
    }
  }
  Require(!preloaded_user || (resp.user_exists() && resp.traced()),
          "the preloaded user exists and is traced");
  return 0;
}
