// Which Kafka partition a user's exposures live in, and which replica owns
// that partition. Every producer, consumer, server and routing client must
// agree on both, so they are defined once, here, header-only.
//
//   partition(user) = toPositive(murmur2(user id bytes)) mod P
//     — exactly what Kafka's default Java partitioner (and librdkafka's
//       "murmur2_random" partitioner) does for a keyed record, so any
//       producer keyed by the user id agrees with us;
//   owner(partition) = partition mod N
//     — replica r of N (the StatefulSet ordinal) owns partitions
//       r, r + N, r + 2N, ...
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

// The replica (0-based ordinal, < replicas) that owns `partition`.
inline int32_t ReplicaForPartition(int32_t partition, int32_t replicas) {
  return partition % replicas;
}

// The replica that owns a user: its partition's owner.
inline int32_t ReplicaForUser(std::string_view user_id, int32_t partitions,
                              int32_t replicas) {
  return ReplicaForPartition(KafkaPartitionForKey(user_id, partitions),
                             replicas);
}

// The partitions replica `ordinal` of `replicas` owns, ascending.
inline std::vector<int32_t> PartitionsOfReplica(int32_t ordinal,
                                                int32_t partitions,
                                                int32_t replicas) {
  std::vector<int32_t> owned;
  for (int32_t p = ordinal; p < partitions; p += replicas) owned.push_back(p);
  return owned;
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_PARTITIONING_H_
