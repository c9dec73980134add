package com.exposurefilter.client;

import com.exposurefilter.v1.Exposure;
import com.exposurefilter.v1.ExposureFilterGrpc;
import com.exposurefilter.v1.FilterRecalledRequest;
import com.exposurefilter.v1.FilterRecalledResponse;
import com.exposurefilter.v1.RecordExposureRequest;
import com.exposurefilter.v1.ResultMode;
import io.grpc.ManagedChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

/**
 * FilterReplica (mode B+) against a real server (run by
 * tests/e2e/test_java_client.py). Prints one summary line of key=value
 * pairs.
 *
 * <ul>
 *   <li>{@code compacted}: users with 0 to 3,000 exposures over 29 days;
 *       240 writes of 1 to 20 items (a third days back) interleaved with
 *       checks of 440 candidates of the written user, each after the write's
 *       acknowledgement and two syncs, every push compacted into a fresh
 *       snapshot: the replica and FilterRecalled are compared on every
 *       candidate;
 *   <li>{@code held}: the same with pushed items held (one sync): the
 *       answers may differ only where the spec allows, counted apart
 *       ({@code fp_kept}: a never-exposed candidate the server removes as a
 *       false positive of fingerprints recorded since the snapshot, kept by
 *       the replica, which holds pushed items exactly);
 *   <li>{@code seen}: 100 writes, no sync; checks right after each
 *       acknowledgement until a local one removes the items written.
 * </ul>
 *
 * <p>Usage: E2eReplica TARGET compacted|held|seen
 */
public final class E2eReplica {
  static final long DAY_MS = 24L * 3600 * 1000;
  static final String SURFACE = "homefeed";
  static final int[] HISTORIES = {0, 1, 5, 20, 50, 100, 200, 400, 700, 1000, 1500, 2000, 3000};
  static final int USERS = 3 * HISTORIES.length;
  static final int ROUNDS = 240;
  static final int CANDIDATES_PER_CHECK = 440;

  private final ExposureFilterGrpc.ExposureFilterBlockingStub stub;

  E2eReplica(ManagedChannel channel) {
    this.stub = ExposureFilterGrpc.newBlockingStub(channel);
  }

  void record(String user, List<Long> ids, List<String> keys, long eventTimeMs) {
    stub.withDeadlineAfter(60, TimeUnit.SECONDS).recordExposure(RecordExposureRequest
        .newBuilder().setSurface(SURFACE).addExposures(Exposure.newBuilder().setUserId(user)
            .setEventTimeMs(eventTimeMs).addAllItemIds(ids).addAllItemKeys(keys)).build());
  }

  public static void main(String[] args) throws Exception {
    ManagedChannel channel = Channels.connect(args[0], 1);
    try {
      E2eReplica e2e = new E2eReplica(channel);
      String line = switch (args[1]) {
        case "compacted" -> e2e.agreement(channel, "jcompact", 1, 2, 20261128);
        case "held" -> e2e.agreement(channel, "jheld", 4096, 1, 20261129);
        case "seen" -> e2e.seen(channel);
        default -> throw new IllegalArgumentException("mode " + args[1]);
      };
      System.out.println(line);
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  String agreement(ManagedChannel channel, String prefix, int compactAfter, int syncs, long seed) {
    Random rng = new Random(seed);
    long now = System.currentTimeMillis();
    TreeMap<String, List<Long>> ids = new TreeMap<>();
    TreeMap<String, List<String>> keys = new TreeMap<>();
    for (int u = 0; u < USERS; u++) {
      String user = prefix + "-" + u;
      int n = HISTORIES[u % HISTORIES.length];
      List<Long> i = new ArrayList<>();
      List<String> k = new ArrayList<>();
      for (int j = 0; j < n - n / 10; j++) {
        i.add(rng.nextLong());
      }
      for (int j = 0; j < n / 10; j++) {
        k.add("item:" + u + ":" + (rng.nextLong() >>> 24));
      }
      for (int start = 0; start < n; start += 500) {
        record(user, i.subList(Math.min(start, i.size()), Math.min(start + 500, i.size())),
            k.subList(Math.min(start / 10, k.size()), Math.min((start + 500) / 10, k.size())),
            now - (long) (rng.nextDouble() * 29 * DAY_MS));
      }
      ids.put(user, i);
      keys.put(user, k);
    }
    List<String> users = new ArrayList<>(ids.keySet());
    long total = 0, removed = 0, exposed = 0, falseNegatives = 0, fpKept = 0, otherDiffer = 0;
    FilterReplica.Stats stats;
    try (FilterReplica replica = FilterReplica.builder(channel).timeout(Duration.ofSeconds(60))
        .compactAfterItems(compactAfter).build()) {
      for (int round = 0; round < ROUNDS; round++) {
        String user = users.get(rng.nextInt(users.size()));
        List<Long> ui = ids.get(user);
        List<String> uk = keys.get(user);
        List<Long> newIds = new ArrayList<>();
        for (int j = 1 + rng.nextInt(20); j > 0; j--) {
          newIds.add(rng.nextLong());
        }
        List<String> newKeys = rng.nextDouble() < 0.3
            ? List.of("new:" + (rng.nextLong() >>> 24)) : List.of();
        long when = rng.nextDouble() < 2.0 / 3 ? 0
            : System.currentTimeMillis() - (long) (rng.nextDouble() * 20 * DAY_MS);
        record(user, newIds, newKeys, when);
        ui.addAll(newIds);
        uk.addAll(newKeys);
        // Acknowledged: a ping sent now is answered after the write's push.
        for (int s = 0; s < syncs; s++) {
          replica.sync(Duration.ofSeconds(60));
        }
        List<Long> candIds = new ArrayList<>(newIds);
        List<String> candKeys = new ArrayList<>(newKeys);
        while (candIds.size() + candKeys.size() < CANDIDATES_PER_CHECK) {
          double r = rng.nextDouble();
          if (!ui.isEmpty() && r < 0.3) {
            candIds.add(ui.get(rng.nextInt(ui.size())));
          } else if (!uk.isEmpty() && r < 0.35) {
            candKeys.add(uk.get(rng.nextInt(uk.size())));
          } else if (r < 0.45) {
            candKeys.add("fresh:" + (rng.nextLong() >>> 16));
          } else {
            candIds.add(rng.nextLong());
          }
        }
        long[] ca = candIds.stream().mapToLong(Long::longValue).toArray();
        boolean[] local = replica.check(SURFACE, user, ca, candKeys);
        FilterRecalledResponse server = stub.withDeadlineAfter(60, TimeUnit.SECONDS)
            .filterRecalled(FilterRecalledRequest.newBuilder().setSurface(SURFACE)
                .setUserId(user).addAllCandidateIds(candIds).addAllCandidateKeys(candKeys)
                .setMode(ResultMode.KEEP_MASK).build());
        Set<Long> seenIds = new HashSet<>(ui);
        Set<String> seenKeys = new HashSet<>(uk);
        for (int i = 0; i < local.length; i++) {
          boolean serverKeeps = (server.getKeepMask().byteAt(i >> 3) >> (i & 7) & 1) != 0;
          boolean wasExposed = i < ca.length ? seenIds.contains(ca[i])
              : seenKeys.contains(candKeys.get(i - ca.length));
          total++;
          removed += serverKeeps ? 0 : 1;
          if (wasExposed) {
            exposed++;
            if (local[i]) {
              falseNegatives++;
            }
          }
          if (serverKeeps != local[i]) {
            if (!serverKeeps && local[i] && !wasExposed) {
              fpKept++;
            } else {
              otherDiffer++;
            }
          }
        }
      }
      stats = replica.stats();
    }
    return String.format("total=%d agree=%d fp_kept=%d other_differ=%d false_negatives=%d"
        + " exposed=%d removed=%d users=%d writes=%d local_checks=%d stream_checks=%d"
        + " unary_checks=%d hit_ratio=%.3f snapshots=%d pushes=%d pushed_items=%d"
        + " compactions=%d gaps=%d resyncs=%d bytes_held=%d",
        total, total - fpKept - otherDiffer, fpKept, otherDiffer, falseNegatives, exposed,
        removed, USERS, ROUNDS, stats.localChecks(), stats.streamChecks(), stats.unaryChecks(),
        stats.hitRatio(), stats.snapshots(), stats.pushes(), stats.pushedItems(),
        stats.compactions(), stats.gaps(), stats.resyncs(), stats.bytesHeld());
  }

  String seen(ManagedChannel channel) throws InterruptedException {
    Random rng = new Random(7);
    int writes = 100;
    long boundNanos = Duration.ofMillis(100).toNanos();
    double[] firstLocalMs = new double[writes];
    long lateMisses = 0;
    FilterReplica.Stats stats;
    try (FilterReplica replica = FilterReplica.builder(channel).timeout(Duration.ofSeconds(60))
        .build()) {
      List<String> users = new ArrayList<>();
      for (int u = 0; u < 10; u++) {
        users.add("jseen-" + u);
        replica.check(SURFACE, users.get(u), new long[] {1}, List.of());  // subscribed
      }
      for (int w = 0; w < writes; w++) {
        String user = users.get(rng.nextInt(users.size()));
        List<Long> items = new ArrayList<>();
        for (int j = 1 + rng.nextInt(20); j > 0; j--) {
          items.add(rng.nextLong());
        }
        long[] cand = items.stream().mapToLong(Long::longValue).toArray();
        record(user, items, List.of(), 0);
        long acked = System.nanoTime();
        // No sync: checks right after the acknowledgement until a local one
        // removes every item (the push has arrived).
        while (true) {
          long started = System.nanoTime();
          FilterReplica.Result r = replica.checkPath(SURFACE, user, cand, List.of());
          boolean anyKept = false;
          for (boolean k : r.keep()) {
            anyKept |= k;
          }
          if (anyKept && started - acked >= boundNanos) {
            lateMisses++;
          }
          if (r.path() == FilterReplica.Path.LOCAL && !anyKept) {
            firstLocalMs[w] = (started - acked) / 1e6;
            break;
          }
          if (started - acked > 30_000_000_000L) {
            throw new AssertionError("write " + w + " never filtered");
          }
          Thread.sleep(0, 200_000);  // a recall server does other work between checks
        }
      }
      stats = replica.stats();
    }
    Arrays.sort(firstLocalMs);
    return String.format("writes=%d late_misses=%d p50_ms=%.2f max_ms=%.2f bound_ms=100"
        + " local_checks=%d mode_a_checks=%d pushes=%d",
        writes, lateMisses, firstLocalMs[writes / 2], firstLocalMs[writes - 1],
        stats.localChecks(), stats.streamChecks() + stats.unaryChecks(), stats.pushes());
  }
}
