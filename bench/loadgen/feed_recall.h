// The recall side of the feed loop (exposure-filter-feed-bench): one
// Recall per client thread, the same interface for every system compared
// (docs/performance.md, "The feed loop"), and the options they share.
#ifndef EXPOSURE_FILTER_BENCH_LOADGEN_FEED_RECALL_H_
#define EXPOSURE_FILTER_BENCH_LOADGEN_FEED_RECALL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "exposure_filter/filter_replica.h"

namespace exposure_filter::bench {

struct FeedOptions {
  std::string system, target, surface, user_prefix;
  uint32_t users = 0, exposures = 0;
  size_t candidates = 0;
  double exposed_fraction = 0;
  int k = 0, shown = 0, threads = 0, sessions_per_thread = 0;
  bool forget = true;
  bool note_shown = true;
  std::chrono::steady_clock::duration bound{};
  bool redis() const { return system == "redis" || system == "redis_cached"; }
};

std::string UserOf(const FeedOptions& o, uint32_t u);
std::string RedisKey(const FeedOptions& o, const std::string& user);
absl::Status HostPort(const std::string& target, std::string* host, int* port);
// Its own connection, tuned as the server's transport.
std::shared_ptr<grpc::Channel> MakeChannel(const FeedOptions& o);

class Recall {
 public:
  virtual ~Recall() = default;
  // keep[i] for ids[i]; *hit when a local copy answered. `first`: the
  // session's first check of its user.
  virtual absl::Status Check(const std::string& user,
                             const std::vector<uint64_t>& ids, bool first,
                             uint8_t* keep, bool* hit) = 0;
  virtual void EndSession(const std::string& user) { (void)user; }
  // The items shown from the last check, as they go to the writer.
  virtual void Shown(const std::string& user,
                     const std::vector<uint64_t>& ids) {
    (void)user;
    (void)ids;
  }
  // Redis client-side caching: invalidation messages received.
  virtual uint64_t invalidations() const { return 0; }
};

// The Recall of --system (o.system): session, mode_a, mode_b, stream_a,
// redis or redis_cached. `replica` (session only) is shared by the threads.
absl::StatusOr<std::unique_ptr<Recall>> MakeRecall(const FeedOptions& o,
                                                   FilterReplica* replica);

}  // namespace exposure_filter::bench

#endif  // EXPOSURE_FILTER_BENCH_LOADGEN_FEED_RECALL_H_
