// The Redis block list with Redis client-side caching, as a recall server
// would run it on hiredis 0.14 (RESP2 only, so no RESP3 push messages on
// the data connection): the data connection turns on
// `CLIENT TRACKING on REDIRECT <id>` naming a second connection SUBSCRIBEd
// to `__redis__:invalidate`; Redis then sends that connection the keys it
// must drop whenever a key the data connection read is modified. Fetched
// block lists are kept in a local map; an invalidation drops the key; a
// miss fetches with LRANGE (which Redis then tracks again).
//
// The race every such cache has: an invalidation that arrives while the
// LRANGE that read the old value is in flight. A key being fetched is
// marked; an invalidation of a marked key means the answer may be older
// than the write, so it is used for that one check and not kept.
#ifndef EXPOSURE_FILTER_BENCH_LOADGEN_REDIS_TRACKING_CACHE_H_
#define EXPOSURE_FILTER_BENCH_LOADGEN_REDIS_TRACKING_CACHE_H_

#include <hiredis/hiredis.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "bench/loadgen/redis_block_list.h"

namespace exposure_filter::bench {

class RedisTrackingCache {
 public:
  ~RedisTrackingCache();
  // Opens both connections, subscribes, turns tracking on, and starts the
  // thread that reads invalidations.
  absl::Status Connect(const std::string& host, int port);

  // keep[i] for each candidate (by item hash), from the local copy when it
  // holds the user (*hit = true), else from a fresh LRANGE.
  absl::Status Filter(const std::string& user,
                      absl::Span<const uint64_t> hashes, uint8_t* keep,
                      bool* hit);
  // Drops the local copy (the user's session ended).
  void Forget(const std::string& user);

  uint64_t invalidations() const { return invalidations_.load(); }

 private:
  using Blocks = std::vector<std::string>;
  void ReadInvalidations();

  RedisBlockListClient data_;
  redisContext* subscriber_ = nullptr;
  std::thread reader_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> invalidations_{0};
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Blocks>> copies_
      ABSL_GUARDED_BY(mu_);
  // Keys whose LRANGE is in flight -> invalidated meanwhile.
  absl::flat_hash_map<std::string, bool> fetching_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exposure_filter::bench

#endif  // EXPOSURE_FILTER_BENCH_LOADGEN_REDIS_TRACKING_CACHE_H_
