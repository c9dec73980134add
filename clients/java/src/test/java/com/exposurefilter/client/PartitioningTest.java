package com.exposurefilter.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The partitioner against Kafka's murmur2 vectors and the shared vectors
 * the C++ and Python partitioners are pinned to
 * (tests/testdata/partitioning/).
 */
class PartitioningTest {
  static final Path DIR = GoldenVectorsTest.TESTDATA.resolve("partitioning");

  static List<String[]> rows(String file) throws IOException {
    return Files.readAllLines(DIR.resolve(file), StandardCharsets.US_ASCII).stream()
        .filter(l -> !l.startsWith("#") && !l.isBlank()).map(l -> l.split("\t")).toList();
  }

  @Test
  void kafkaUtilsTestVectors() {
    // org.apache.kafka.common.utils.UtilsTest.testMurmur2
    Map<String, Integer> cases = Map.of("21", -973932308, "foobar", -790332482,
        "a-little-bit-long-string", -985981536, "a-little-bit-longer-string", -1486304829,
        "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, "abc", 479470107);
    cases.forEach((key, want) -> assertEquals(want, Partitioning.murmur2(key), key));
  }

  @Test
  void signBitIsMaskedNotNegated() {
    assertEquals(1173551340 % 7, Partitioning.partitionForUser("21", 7));
  }

  @Test
  void workedExampleOfScaleOut() {
    assertEquals(9, Partitioning.partitionForUser("alice", 12));
    assertEquals(6, Partitioning.partitionForUser("bob", 12));
    assertEquals(1, Partitioning.partitionForUser("user:42", 12));
    assertArrayEquals(new int[] {1}, Partitioning.ownersOfUser("alice", 12, 4, 1));
  }

  @Test
  void agreesWithTheSharedMurmur2Vectors() throws IOException {
    int checked = 0;
    for (String[] f : rows("murmur2_vectors.tsv")) {
      byte[] key = f[0].equals("-") ? new byte[0] : GoldenVectorsTest.hex(f[0]);
      assertEquals(Integer.parseInt(f[1]), Partitioning.murmur2(key), f[0]);
      assertEquals(Integer.parseInt(f[2]), Partitioning.partitionForKey(key, 12), f[0]);
      assertEquals(Integer.parseInt(f[3]), Partitioning.partitionForKey(key, 1000), f[0]);
      checked++;
    }
    assertEquals(960, checked);
  }

  @Test
  void agreesWithTheSharedPlacementVectors() throws IOException {
    int owners = 0;
    int owned = 0;
    for (String[] f : rows("placement_vectors.tsv")) {
      if (f[0].equals("owners")) {
        int n = Integer.parseInt(f[1]);
        int r = Integer.parseInt(f[2]);
        int p = Integer.parseInt(f[3]);
        int[] want = Arrays.stream(f[4].split(",")).mapToInt(Integer::parseInt).toArray();
        assertArrayEquals(want, Partitioning.ownersOfPartition(p, n, r), String.join(" ", f));
        owners++;
      } else {
        assertEquals("owned", f[0]);
        int p = Integer.parseInt(f[1]);
        int n = Integer.parseInt(f[2]);
        int r = Integer.parseInt(f[3]);
        int o = Integer.parseInt(f[4]);
        List<Integer> want = f[5].equals("-") ? List.of()
            : Arrays.stream(f[5].split(",")).map(Integer::valueOf).toList();
        assertEquals(want, Partitioning.partitionsOfReplica(o, p, n, r), String.join(" ", f));
        owned++;
      }
    }
    assertEquals(526, owners);
    assertEquals(166, owned);
  }

  @Test
  void ownerZeroIsTheUnreplicatedOwner() {
    for (int i = 0; i < 200; i++) {
      String user = "user-" + i;
      int[] o = Partitioning.ownersOfUser(user, 12, 3, 2);
      assertEquals(Partitioning.partitionForUser(user, 12) % 3, o[0]);
      assertEquals((o[0] + 1) % 3, o[1]);
    }
    assertThrows(IllegalArgumentException.class, () -> Partitioning.ownersOfUser("u", 12, 3, 4));
    assertThrows(IllegalArgumentException.class, () -> Partitioning.ownersOfUser("u", 2, 3, 1));
  }

  @Test
  void ownerHintParsesEveryField() {
    OwnerHint h = OwnerHint.parse("ordinal=2;partition=5;partitions=12;replicas=3;self=1;"
        + "replication_factor=2;address=ef-2:1").orElseThrow();
    assertEquals(new OwnerHint(2, 5, 12, 3, 1, 2, "ef-2:1"), h);
    assertEquals(1, OwnerHint.parse("ordinal=0;partition=0;partitions=1;replicas=1;self=0")
        .orElseThrow().replicationFactor());
  }

  @Test
  void statefulSetAddresses() {
    assertEquals(List.of("ef-0.ef-headless:50051", "ef-1.ef-headless:50051"),
        Partitioning.statefulSetReplicaAddresses("ef", "ef-headless", 50051, 2, ""));
  }
}
