package com.exposurefilter.client;

import com.exposurefilter.v1.Exposure;
import com.exposurefilter.v1.FilterRecalledRequest;
import com.exposurefilter.v1.FilterRecalledResponse;
import com.exposurefilter.v1.RecordExposureRequest;
import com.exposurefilter.v1.ResultMode;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Load through the RoutingClient while tests/e2e/test_java_client.py kills
 * one owner and restarts it: writes and reads (read-your-writes on) from
 * two threads until standard input closes, then every acknowledged
 * exposure is read back through the router. Prints one summary line.
 *
 * <p>Usage: E2eFailover ADDR0,ADDR1,ADDR2 PARTITIONS REPLICATION_FACTOR
 */
public final class E2eFailover {
  public static void main(String[] args) throws Exception {
    List<String> route = Arrays.asList(args[0].split(","));
    int partitions = Integer.parseInt(args[1]);
    int r = Integer.parseInt(args[2]);
    // Deadline and per-try timeout as the C++ failover test's: a loaded
    // machine must not time out both owners of a healthy pair, and a dead
    // owner fails fast (refused connection) whatever they are. The
    // channel's own retries give a read right after its write the time the
    // owners need to apply it (without them both owners refuse such a read
    // at once): five attempts, the most the policy takes (backoffs of 50,
    // 100, 200 and 400 ms with jitter), not the default three, so that a
    // loaded machine's apply delay fits inside the 1 s try.
    try (RoutingClient router = RoutingClient.builder().replicaAddresses(route)
        .partitions(partitions).replicationFactor(r).deadline(Duration.ofSeconds(3))
        .perTryTimeout(Duration.ofSeconds(1)).maxAttempts(5).readYourWrites(true)
        .build()) {
      AtomicBoolean stop = new AtomicBoolean();
      AtomicLong reads = new AtomicLong();
      AtomicLong writes = new AtomicLong();
      Map<String, AtomicLong> failedReads = new ConcurrentHashMap<>();
      Map<String, AtomicLong> failedWrites = new ConcurrentHashMap<>();
      ConcurrentLinkedQueue<long[]> acked = new ConcurrentLinkedQueue<>();  // user index, item
      List<Thread> threads = new ArrayList<>();
      for (int t = 0; t < 2; t++) {
        final int seed = t;
        Thread th = new Thread(() -> {
          Random rng = new Random(seed);
          while (!stop.get()) {
            int u = rng.nextInt(300);
            long item = rng.nextLong();
            RoutingClient.RoutedRecordResult w = router.recordExposure(
                RecordExposureRequest.newBuilder().setSurface("homefeed").addExposures(
                    Exposure.newBuilder().setUserId("fo-" + u).addItemIds(item)).build());
            writes.incrementAndGet();
            if (w.ok()) {
              acked.add(new long[] {u, item});
            } else {
              failedWrites.computeIfAbsent(w.owners().get(0).status().getCode().toString(),
                  k -> new AtomicLong()).incrementAndGet();
            }
            try {
              router.filterRecalled(FilterRecalledRequest.newBuilder().setSurface("homefeed")
                  .setUserId("fo-" + u).addCandidateIds(item).addCandidateIds(rng.nextLong())
                  .setMode(ResultMode.KEEP_MASK).build());
            } catch (StatusRuntimeException e) {
              failedReads.computeIfAbsent(e.getStatus().getCode() + ": "
                  + e.getStatus().getDescription(), k -> new AtomicLong()).incrementAndGet();
            }
            reads.incrementAndGet();
          }
        });
        th.start();
        threads.add(th);
      }
      System.out.println("LOADING");
      System.out.flush();
      while (System.in.read() >= 0) {
        // until the driver closes standard input
      }
      stop.set(true);
      for (Thread th : threads) {
        th.join();
      }
      // Every acknowledged exposure, read back by user through the router.
      Map<Long, List<Long>> byUser = new TreeMap<>();
      for (long[] a : acked) {
        byUser.computeIfAbsent(a[0], k -> new ArrayList<>()).add(a[1]);
      }
      long missing = 0;
      long verifyFailed = 0;
      for (Map.Entry<Long, List<Long>> e : byUser.entrySet()) {
        try {
          FilterRecalledResponse resp = router.filterRecalled(FilterRecalledRequest.newBuilder()
              .setSurface("homefeed").setUserId("fo-" + e.getKey())
              .addAllCandidateIds(e.getValue()).build());
          missing += resp.getKeptIdsCount();  // an acknowledged item kept: missing
        } catch (StatusRuntimeException ex) {
          verifyFailed++;
        }
      }
      RoutingClient.Stats st = router.stats();
      System.out.println("reads=" + reads + " writes=" + writes + " failed_reads="
          + failedReads.values().stream().mapToLong(AtomicLong::get).sum() + " failed_writes="
          + failedWrites.values().stream().mapToLong(AtomicLong::get).sum() + " acked="
          + acked.size() + " missing=" + missing + " verify_failed=" + verifyFailed
          + " failovers=" + st.failovers() + " reads_with_offsets=" + st.readsWithOffsets()
          + " replica_errors=" + Arrays.toString(st.replicaErrors()).replace(" ", "")
          + " read_failure_kinds=" + failedReads.size()
          + " write_failure_kinds=" + failedWrites.size());
      // The first few failures in full, for a failing run's log.
      failedReads.keySet().stream().limit(3).forEach(k -> System.err.println("read: " + k));
      failedWrites.keySet().stream().limit(3).forEach(k -> System.err.println("write: " + k));
    }
  }
}
