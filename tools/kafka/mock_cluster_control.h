// The control commands of `kafka-mock-cluster --control`: one line each on
// its stdin, one reply line each on its stdout, so a multi-process drill
// (tests/e2e/failover_drill.py) places partitions and injects broker faults
// at the moments it chooses, while the servers run against the cluster.
//
//   leader <topic> <partition> <broker>
//       the partition's leader becomes that broker (ids start at 1): where
//       its producers write and its consumers fetch;
//   delay <broker> <api_key> <count> <ms>
//       the broker's next <count> requests of that ApiKey (1 = Fetch) are
//       answered as usual but <ms> late (KafkaMockCluster::
//       DelayNextRequestsOn).
//
// The reply is "ok", or "error: <why>" (the cluster is unchanged then).
#ifndef EXPOSURE_FILTER_TOOLS_KAFKA_MOCK_CLUSTER_CONTROL_H_
#define EXPOSURE_FILTER_TOOLS_KAFKA_MOCK_CLUSTER_CONTROL_H_

#include <string>

#include "absl/strings/string_view.h"
#include "tools/kafka/kafka_mock_cluster.h"

namespace exposure_filter {

// Runs one command line (without its newline) on `cluster`; returns the
// reply line (without its newline).
std::string RunMockClusterCommand(KafkaMockCluster& cluster,
                                  absl::string_view line);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_TOOLS_KAFKA_MOCK_CLUSTER_CONTROL_H_
