// The load half of the failover drill (docs/scale-out.md
// "Failover drill"): a continuous mix of RecordExposure and FilterRecalled
// through the RoutingClient, the way a recall server and an exposure logger
// would send them, while the harness (tests/e2e/test_failover.py,
// bench/failover_drill.sh) kills and restarts replicas underneath.
//
// What it keeps:
//  - every call's outcome (start time on CLOCK_MONOTONIC, op, latency,
//    status code), so a harness can cut the run into windows around its own
//    events (time.monotonic() in Python reads the same clock);
//  - every exposure an owner acknowledged (OwnerWrite::status OK), and only
//    those: an unacknowledged write is the caller's to resend, not a loss;
//  - reads that missed an item acknowledged more than `stale_after` earlier
//    (a copy serving before it caught up; counted, not a failure: the lag
//    gate refuses those reads);
//  - freshness samples: a probe write acknowledged -> filtered on EVERY
//    owner, polled directly (replicated_write_bench's method); a sample
//    during which an owner did not answer is dropped and counted.
#ifndef EXPOSURE_FILTER_TOOLS_DRILL_DRILL_LOAD_H_
#define EXPOSURE_FILTER_TOOLS_DRILL_DRILL_LOAD_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "exposure_filter/routing_client.h"

namespace exposure_filter::drill {

struct LoadOptions {
  RoutingOptions routing;
  int threads = 4;   // each owns the users u with u % threads == t
  int users = 2000;  // "drill-<u>"
  double write_fraction = 0.4;
  int users_per_write = 2;  // exposures per RecordExposure call
  int min_items = 10;       // items per exposure, uniform in [min, max]
  int max_items = 20;
  int acked_per_read = 8;   // acknowledged items put among the candidates
  int fresh_per_read = 24;  // never-written candidates
  absl::Duration stale_after = absl::Seconds(2);
  absl::Duration freshness_interval = absl::Milliseconds(100);
  // Per-owner clients of the freshness probe: one try each, this deadline.
  absl::Duration probe_deadline = absl::Milliseconds(300);
  absl::Duration probe_give_up = absl::Seconds(10);
  uint64_t seed = 1;
};

enum class Op : uint8_t { kWrite = 0, kRead = 1 };

struct CallRecord {
  int64_t start_ns;  // CLOCK_MONOTONIC
  float latency_ms;
  Op op;
  uint8_t code;  // absl::StatusCode; a write: its last failed owner's
  bool stale;    // a read that missed an old acknowledged item
  // A read answered least-stale (staleness.lagging: every owner was past
  // its lag bound and the last one answered because of allow_lagging), and
  // the answer's staleness.lag_ms and partition (-1: no staleness, e.g. a
  // failed read or a server that is not replicated).
  bool lagging = false;
  int32_t lag_ms = 0;
  int32_t partition = -1;
};

// The routing client's counters at one moment (RunLoad takes one every
// 100 ms): failovers per time window, for the bench.
struct StatsSample {
  int64_t t_ns;
  RoutingStats stats;
};

struct AckedExposure {
  std::string user_id;
  std::vector<uint64_t> item_ids;
};

struct LoadResult {
  std::vector<CallRecord> calls;
  std::vector<AckedExposure> acked;
  uint64_t stale_reads = 0;  // reads missing an old acknowledged item
  uint64_t stale_items = 0;
  // Reads every owner refused as lagging, answered by the router's last
  // try with allow_lagging (the response's staleness.lagging), and the
  // largest lag such an answer carried.
  uint64_t lagging_reads = 0;
  int64_t lagging_max_ms = 0;
  std::vector<std::string> read_errors;  // the first few failed reads
  std::vector<std::string> write_errors;
  std::vector<double> freshness_ms;
  uint64_t freshness_dropped = 0;  // an owner did not answer meanwhile
};

// Runs the load until `stop` becomes true, appending the router's counters
// to `samples` every 100 ms from the calling thread; then fills `result`.
// An error only when the clients cannot be created.
absl::Status RunLoad(const LoadOptions& options, const std::atomic<bool>& stop,
                     LoadResult* result, std::vector<StatsSample>* samples);

}  // namespace exposure_filter::drill

#endif  // EXPOSURE_FILTER_TOOLS_DRILL_DRILL_LOAD_H_
