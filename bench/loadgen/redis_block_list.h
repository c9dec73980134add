// The Redis baseline of the seed-004 design (shared/seeds/004_*.txt): each
// user is a Redis list of up to 5 serialized Bloom blocks of 1,000 items at
// 0.1% false positives, newest first; a recall server fetches the list with
// LRANGE and tests candidates client-side.
//
// A block is a classical Bloom filter: m = ceil(n ln(1/p) / ln^2 2) = 14,378
// bits for n = 1,000, p = 0.001, rounded up to whole bytes (1,798 B), with
// k = round(m/n ln 2) = 10 probes by Kirsch-Mitzenmacher double hashing of the
// item's XXH3-64 (h1 = low 32 bits, h2 = high 32 bits | 1).
#ifndef EXPOSURE_FILTER_BENCH_LOADGEN_REDIS_BLOCK_LIST_H_
#define EXPOSURE_FILTER_BENCH_LOADGEN_REDIS_BLOCK_LIST_H_

#include <hiredis/hiredis.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace exposure_filter::bench {

inline constexpr uint32_t kRedisBlockItems = 1000;
inline constexpr int kRedisMaxBlocks = 5;

class RedisBloomBlock {
 public:
  static constexpr uint32_t kBits = 14378;
  static constexpr int kProbes = 10;
  static constexpr size_t kBytes = (kBits + 7) / 8;

  RedisBloomBlock() : bits_(kBytes, '\0') {}
  void Add(uint64_t item_hash);
  // `block` is a serialized block (kBytes bytes).
  static bool MayContain(const char* block, uint64_t item_hash);
  const std::string& bytes() const { return bits_; }

 private:
  std::string bits_;
};

// Blocks for a user shown `ids` (oldest first): 1,000 per block, the newest
// kRedisMaxBlocks kept, newest first (the LPUSH + LTRIM order).
std::vector<std::string> BuildBlockList(absl::Span<const uint64_t> ids);

// One connection to a Redis server on loopback.
class RedisBlockListClient {
 public:
  ~RedisBlockListClient();
  absl::Status Connect(const std::string& host, int port);
  // Replaces the user's list (DEL + RPUSH, pipelined).
  absl::Status Store(const std::string& user,
                     const std::vector<std::string>& blocks);
  // LRANGE user 0 4, then keep[i] = 0 for each candidate a block may contain.
  absl::Status Filter(const std::string& user, absl::Span<const uint64_t> ids,
                      uint8_t* keep, std::vector<uint64_t>* scratch);
  // LRANGE user 0 4: the serialized blocks, newest first.
  absl::Status Fetch(const std::string& user, std::vector<std::string>* blocks);

  // Appends exposures for many users in two pipelined round trips, the way
  // an exposure logger updates this design: a Bloom block is one list
  // element, so adding items is a read-modify-write of the newest block.
  // Round trip 1: LINDEX user 0 and INCRBY user:n (the items in the newest
  // block, kept beside the list). Round trip 2, per user: the block with the
  // new items' bits set (LSET user 0), or, when the newest block already
  // held kRedisBlockItems (or the user has none), a new block (LPUSH, LTRIM
  // to kRedisMaxBlocks, SET user:n). One writer per user: the read and the
  // write are not atomic.
  struct UserItems {
    const std::string* user;
    absl::Span<const uint64_t> ids;
  };
  absl::Status Record(absl::Span<const UserItems> batch);
  // Sets user:n after Store (the items in the newest stored block).
  absl::Status SetNewestCount(const std::string& user, uint32_t n);

  // Raw access, for CLIENT TRACKING and its invalidation subscriber.
  redisContext* context() { return ctx_; }

 private:
  redisContext* ctx_ = nullptr;
};

// keep[i] = 0 for each candidate (by item hash) that one of `blocks` may
// contain; keep[i] = 1 otherwise.
void FilterByBlocks(const std::vector<std::string>& blocks,
                    absl::Span<const uint64_t> hashes, uint8_t* keep);

}  // namespace exposure_filter::bench

#endif  // EXPOSURE_FILTER_BENCH_LOADGEN_REDIS_BLOCK_LIST_H_
