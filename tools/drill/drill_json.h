// The failover drill's JSON summaries (one line each on stdout), read by
// tests/e2e/test_failover.py and bench/failover_drill.py.
#ifndef EXPOSURE_FILTER_TOOLS_DRILL_DRILL_JSON_H_
#define EXPOSURE_FILTER_TOOLS_DRILL_DRILL_JSON_H_

#include <string>

#include "exposure_filter/routing_client.h"
#include "tools/drill/drill_load.h"
#include "tools/drill/drill_verify.h"

namespace exposure_filter::drill {

// Calls per op (total, ok, failed by status code name) with p50/p99, the
// router's counters `stats`, acknowledged counts, stale reads, least-stale
// answers (count, staleness.lag_ms max and p99), freshness p50/p99 and the
// first errors.
std::string LoadJson(const LoadResult& result, const RoutingStats& stats);
std::string VerifyJson(const VerifyResult& result);

}  // namespace exposure_filter::drill

#endif  // EXPOSURE_FILTER_TOOLS_DRILL_DRILL_JSON_H_
