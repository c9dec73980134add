// The RoutingClient options for the replicated-cluster fixture's running
// servers (tests/ingest/replicated_cluster_test_base.h), shared by the
// tests that read through a router. Separate from the fixture so that the
// tests without a router do not link the client library.
#ifndef EXPOSURE_FILTER_TESTS_INGEST_REPLICATED_CLUSTER_ROUTING_H_
#define EXPOSURE_FILTER_TESTS_INGEST_REPLICATED_CLUSTER_ROUTING_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exposure_filter/routing_client.h"
#include "tests/ingest/replicated_cluster_test_base.h"

namespace exposure_filter {

// P, R and the servers' addresses in ordinal order, with a deadline as
// generous as kPatience's reasons (nothing is timed).
inline RoutingOptions ClusterRoutingOptions(
    const std::vector<std::unique_ptr<ExposureFilterServer>>& servers,
    bool read_your_writes = false) {
  RoutingOptions o;
  o.partitions = kPartitions;
  o.replication_factor = kReplication;
  for (const auto& server : servers) {
    o.replica_addresses.push_back(absl::StrCat("127.0.0.1:", server->port()));
  }
  o.client.deadline = absl::Seconds(30);
  o.read_your_writes.enabled = read_your_writes;
  return o;
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_TESTS_INGEST_REPLICATED_CLUSTER_ROUTING_H_
