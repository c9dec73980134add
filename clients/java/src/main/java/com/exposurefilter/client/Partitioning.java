package com.exposurefilter.client;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Which replica owns a user (docs/scale-out.md, as
 * include/exposure_filter/partitioning.h computes it):
 *
 * <pre>
 * partition = (murmur2(user id UTF-8 bytes) &amp; 0x7fffffff) % P   // Kafka's default partitioner
 * owner i   = (partition + i) % N,  i = 0 .. R-1                 // owner 0: the preferred copy
 * </pre>
 *
 * <p>murmur2 is Kafka's {@code Utils.murmur2}: MurmurHash2, seed
 * 0x9747b28c, little-endian 4-byte words; the sign bit is masked
 * ({@code Utils.toPositive}), not negated.
 */
public final class Partitioning {
  private static final int SEED = 0x9747b28c;
  private static final int M = 0x5bd1e995;

  private Partitioning() {}

  /** Kafka's murmur2 of {@code key}, a signed 32-bit int as Java's. */
  public static int murmur2(byte[] key) {
    int length = key.length;
    int h = SEED ^ length;
    int words = length / 4;
    for (int i = 0; i < words; i++) {
      int k = (key[4 * i] & 0xff) | (key[4 * i + 1] & 0xff) << 8 | (key[4 * i + 2] & 0xff) << 16
          | (key[4 * i + 3] & 0xff) << 24;
      k *= M;
      k ^= k >>> 24;
      k *= M;
      h *= M;
      h ^= k;
    }
    int tail = 4 * words;
    switch (length % 4) {
      case 3:
        h ^= (key[tail + 2] & 0xff) << 16;
        // fall through
      case 2:
        h ^= (key[tail + 1] & 0xff) << 8;
        // fall through
      case 1:
        h ^= key[tail] & 0xff;
        h *= M;
        break;
      default:
        break;
    }
    h ^= h >>> 13;
    h *= M;
    h ^= h >>> 15;
    return h;
  }

  public static int murmur2(String key) {
    return murmur2(key.getBytes(StandardCharsets.UTF_8));
  }

  /** Kafka's default partition of a record keyed by {@code key}. */
  public static int partitionForKey(byte[] key, int partitions) {
    if (partitions < 1) {
      throw new IllegalArgumentException("partitions must be >= 1, got " + partitions);
    }
    return (murmur2(key) & 0x7fffffff) % partitions;
  }

  public static int partitionForUser(String userId, int partitions) {
    return partitionForKey(userId.getBytes(StandardCharsets.UTF_8), partitions);
  }

  /** The ordinals owning {@code partition}, owner 0 first: (partition + i) % replicas. */
  public static int[] ownersOfPartition(int partition, int replicas, int replicationFactor) {
    int[] owners = new int[replicationFactor];
    for (int i = 0; i < replicationFactor; i++) {
      owners[i] = (partition + i) % replicas;
    }
    return owners;
  }

  /** The ordinals owning {@code userId}, owner 0 first. */
  public static int[] ownersOfUser(String userId, int partitions, int replicas,
      int replicationFactor) {
    checkLayout(partitions, replicas, replicationFactor);
    return ownersOfPartition(partitionForUser(userId, partitions), replicas, replicationFactor);
  }

  /** The partitions replica {@code ordinal} is one of the owners of, ascending. */
  public static List<Integer> partitionsOfReplica(int ordinal, int partitions, int replicas,
      int replicationFactor) {
    checkLayout(partitions, replicas, replicationFactor);
    List<Integer> out = new ArrayList<>();
    for (int p = 0; p < partitions; p++) {
      if (Math.floorMod(ordinal - p, replicas) < replicationFactor) {
        out.add(p);
      }
    }
    return out;
  }

  /**
   * Per-pod DNS names behind a headless Service, in ordinal order:
   * {@code <statefulset>-<i>.<service>[.<namespace>]:<port>}.
   */
  public static List<String> statefulSetReplicaAddresses(String statefulSet, String service,
      int port, int replicas, String namespace) {
    String suffix = namespace.isEmpty() ? "" : "." + namespace;
    List<String> out = new ArrayList<>();
    for (int i = 0; i < replicas; i++) {
      out.add(statefulSet + "-" + i + "." + service + suffix + ":" + port);
    }
    return out;
  }

  static void checkLayout(int partitions, int replicas, int replicationFactor) {
    if (replicas < 1 || replicas > partitions) {
      throw new IllegalArgumentException(
          "need 1 <= replicas (" + replicas + ") <= partitions (" + partitions + ")");
    }
    if (replicationFactor < 1 || replicationFactor > replicas) {
      throw new IllegalArgumentException("need 1 <= replication_factor (" + replicationFactor
          + ") <= replicas (" + replicas + ")");
    }
  }
}
