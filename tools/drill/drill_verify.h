// The check half of the failover drill: after the run, every
// acknowledged exposure must be filtered on EVERY owner of its user, asked
// directly (no routing, no failover), with the server's own placement
// (src/cluster/replica_ownership). A copy still catching up gets until
// `catch_up` to apply the log; what is missing after that is lost.
#ifndef EXPOSURE_FILTER_TOOLS_DRILL_DRILL_VERIFY_H_
#define EXPOSURE_FILTER_TOOLS_DRILL_DRILL_VERIFY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tools/drill/drill_load.h"

namespace exposure_filter::drill {

struct VerifyOptions {
  int32_t partitions = 0;
  int32_t replication_factor = 1;
  std::vector<std::string> replica_addresses;  // ordinal order
  absl::Duration catch_up = absl::Seconds(60);
  int max_candidates = 1000;  // per FilterRecalled (the server caps it)
};

struct VerifyResult {
  uint64_t users = 0;
  uint64_t items = 0;         // distinct (user, item) acknowledged
  uint64_t owner_checks = 0;  // (user, owner) pairs checked
  uint64_t missing = 0;       // (user, owner, item) not filtered at the end
  uint64_t unreachable = 0;   // (user, owner) pairs whose owner never answered
  double waited_s = 0;        // until every copy had everything (or gave up)
  std::vector<std::string> examples;  // the first few misses and errors
};

VerifyResult VerifyAcked(const VerifyOptions& options,
                         const std::vector<AckedExposure>& acked);

}  // namespace exposure_filter::drill

#endif  // EXPOSURE_FILTER_TOOLS_DRILL_DRILL_VERIFY_H_
