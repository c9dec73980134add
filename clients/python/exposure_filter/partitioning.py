"""Which replica owns a user (docs/scale-out.md), as the C++ header
include/exposure_filter/partitioning.h computes it:

    partition = (murmur2(user id bytes) & 0x7fffffff) % P   # Kafka's default
    replica   = partition % N                               # StatefulSet ordinal
    owner i   = (partition + i) % N,  i = 0 .. R-1          # replication R

With replication factor R owner 0 is `replica` above, the
preferred copy, and owners 1..R-1 follow on the next ordinals, wrapping.

murmur2 is Kafka's (org.apache.kafka.common.utils.Utils.murmur2): MurmurHash2,
seed 0x9747b28c, little-endian 4-byte words; the sign bit is masked, not
negated (Utils.toPositive). Standard library only.
"""

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def murmur2(key):
    """Kafka's murmur2 of `key` (bytes, or str encoded as UTF-8), as a signed
    32-bit int like Java's."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    length = len(key)
    h = (_SEED ^ length) & _MASK32
    words = length // 4
    for i in range(words):
        k = int.from_bytes(key[4 * i:4 * i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = key[4 * words:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key, partitions):
    """Kafka's default partition of a record keyed by `key`."""
    if partitions < 1:
        raise ValueError("partitions must be >= 1, got %d" % partitions)
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def replica_for_user(user_id, partitions, replicas):
    """The ordinal of the replica that owns `user_id`."""
    if not 1 <= replicas <= partitions:
        raise ValueError("need 1 <= replicas (%d) <= partitions (%d)"
                         % (replicas, partitions))
    return partition_for_key(user_id, partitions) % replicas


def _check_layout(partitions, replicas, replication_factor):
    if not 1 <= replicas <= partitions:
        raise ValueError("need 1 <= replicas (%d) <= partitions (%d)"
                         % (replicas, partitions))
    if not 1 <= replication_factor <= replicas:
        raise ValueError("need 1 <= replication_factor (%d) <= replicas (%d)"
                         % (replication_factor, replicas))


def owners_of_partition(partition, replicas, replication_factor=1):
    """The ordinals owning `partition`, owner 0 (the preferred one) first:
    owner i = (partition + i) % replicas."""
    return [(partition + i) % replicas for i in range(replication_factor)]


def owners_of_user(user_id, partitions, replicas, replication_factor=1):
    """The ordinals owning `user_id`, owner 0 first."""
    _check_layout(partitions, replicas, replication_factor)
    return owners_of_partition(partition_for_key(user_id, partitions),
                               replicas, replication_factor)


def partitions_of_replica(ordinal, partitions, replicas, replication_factor=1):
    """The partitions replica `ordinal` is one of the owners of, ascending:
    p with (ordinal - p) % replicas < replication_factor (Python's % is
    never negative)."""
    _check_layout(partitions, replicas, replication_factor)
    return [p for p in range(partitions)
            if (ordinal - p) % replicas < replication_factor]


def statefulset_replica_addresses(statefulset, service, port, replicas,
                                  namespace=""):
    """Per-pod DNS names behind the headless Service, in ordinal order:
    "<statefulset>-<i>.<service>[.<namespace>]:<port>"."""
    suffix = "." + namespace if namespace else ""
    return ["%s-%d.%s%s:%d" % (statefulset, i, service, suffix, port)
            for i in range(replicas)]
