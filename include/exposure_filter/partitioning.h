// Which Kafka partition a user's exposures live in, and which replica owns
// that partition. Every producer, consumer, server and routing client must
// agree on both, so they are defined once, here, header-only.
//
//   partition(user) = toPositive(murmur2(user id bytes)) mod P
//     — exactly what Kafka's default Java partitioner (and librdkafka's
//       "murmur2_random" partitioner) does for a keyed record, so any
//       producer keyed by the user id agrees with us;
//   owner_i(partition) = (partition + i) mod N,  i = 0 .. R-1
//     — with replication factor R each partition has R distinct
//       owners among the N replicas (StatefulSet ordinals): owner 0 is the
//       preferred one (clients read there first), owners 1..R-1 are its
//       copies on the next ordinals, wrapping. R = 1 is the unreplicated
//       layout: replica r owns partitions r, r + N, r + 2N, ...
//     — replica r is owner i of p exactly when i = (r - p) mod N and i < R,
//       so it owns the partitions p with (r - p) mod N < R: R/N of all.
//     — the R owners are distinct because R <= N; placing copies on the
//       next ordinals spreads a dead replica's load: replica r's owner-0
//       partitions fall over to r + 1, whose own load grows by at most P/N.
//
// Resharding (changing N or P) is an operational procedure: see
// docs/scale-out.md.
#ifndef EXPOSURE_FILTER_PARTITIONING_H_
#define EXPOSURE_FILTER_PARTITIONING_H_

#include <cstdint>
#include <string_view>
#include <vector>

namespace exposure_filter {

// Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2): MurmurHash2
// with seed 0x9747b28c over the key bytes, little-endian 4-byte words.
// Unsigned arithmetic here; Java's int overflow wraps the same way.
inline int32_t KafkaMurmur2(std::string_view key) {
  constexpr uint32_t kSeed = 0x9747b28c;
  constexpr uint32_t kM = 0x5bd1e995;
  constexpr int kR = 24;
  const auto* data = reinterpret_cast<const unsigned char*>(key.data());
  const size_t length = key.size();
  uint32_t h = kSeed ^ static_cast<uint32_t>(length);
  const size_t words = length / 4;
  for (size_t i = 0; i < words; ++i) {
    const unsigned char* w = data + 4 * i;
    uint32_t k = uint32_t{w[0]} | uint32_t{w[1]} << 8 | uint32_t{w[2]} << 16 |
                 uint32_t{w[3]} << 24;
    k *= kM;
    k ^= k >> kR;
    k *= kM;
    h *= kM;
    h ^= k;
  }
  const unsigned char* tail = data + 4 * words;
  switch (length % 4) {
    case 3:
      h ^= uint32_t{tail[2]} << 16;
      [[fallthrough]];
    case 2:
      h ^= uint32_t{tail[1]} << 8;
      [[fallthrough]];
    case 1:
      h ^= uint32_t{tail[0]};
      h *= kM;
  }
  h ^= h >> 13;
  h *= kM;
  h ^= h >> 15;
  return static_cast<int32_t>(h);
}

// Kafka's default partition of a keyed record among `partitions` (> 0):
// Utils.toPositive(murmur2(key)) % partitions. toPositive masks the sign bit
// (it is not abs()).
inline int32_t KafkaPartitionForKey(std::string_view key, int32_t partitions) {
  return static_cast<int32_t>(
      (static_cast<uint32_t>(KafkaMurmur2(key)) & 0x7fffffffu) %
      static_cast<uint32_t>(partitions));
}

// The replica (0-based ordinal, < replicas) that owns `partition`: its
// owner 0, the only owner without replication.
inline int32_t ReplicaForPartition(int32_t partition, int32_t replicas) {
  return partition % replicas;
}

// The `replication_factor` (R, 1 <= R <= replicas) owners of `partition`,
// owner 0 first: owner i = (partition + i) mod replicas.
inline std::vector<int32_t> OwnersOfPartition(int32_t partition,
                                              int32_t replicas,
                                              int32_t replication_factor) {
  std::vector<int32_t> owners;
  owners.reserve(replication_factor);
  for (int32_t i = 0; i < replication_factor; ++i) {
    owners.push_back((partition + i) % replicas);
  }
  return owners;
}

// Which owner of `partition` replica `ordinal` is: i = (ordinal - partition)
// mod replicas when i < replication_factor, else -1 (not an owner). Both
// operands are non-negative, so adding `replicas` before the mod keeps the
// result in [0, replicas) without C++'s negative remainders.
inline int32_t OwnerIndexOfReplica(int32_t ordinal, int32_t partition,
                                   int32_t replicas,
                                   int32_t replication_factor) {
  const int32_t i = (ordinal - partition % replicas + replicas) % replicas;
  return i < replication_factor ? i : -1;
}

// The replica that owns a user: its partition's owner (owner 0).
inline int32_t ReplicaForUser(std::string_view user_id, int32_t partitions,
                              int32_t replicas) {
  return ReplicaForPartition(KafkaPartitionForKey(user_id, partitions),
                             replicas);
}

// The owners of a user's partition, owner 0 first.
inline std::vector<int32_t> OwnersOfUser(std::string_view user_id,
                                         int32_t partitions, int32_t replicas,
                                         int32_t replication_factor) {
  return OwnersOfPartition(KafkaPartitionForKey(user_id, partitions), replicas,
                           replication_factor);
}

// The partitions replica `ordinal` of `replicas` is one of the
// `replication_factor` owners of, ascending. R = 1: ordinal, ordinal + N, ...
inline std::vector<int32_t> PartitionsOfReplica(
    int32_t ordinal, int32_t partitions, int32_t replicas,
    int32_t replication_factor = 1) {
  std::vector<int32_t> owned;
  for (int32_t p = 0; p < partitions; ++p) {
    if (OwnerIndexOfReplica(ordinal, p, replicas, replication_factor) >= 0) {
      owned.push_back(p);
    }
  }
  return owned;
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_PARTITIONING_H_
