package com.exposurefilter.client;

import com.exposurefilter.v1.Exposure;
import com.exposurefilter.v1.RecordExposureRequest;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.time.Duration;
import java.util.List;
import java.util.Random;

/**
 * Micro-benchmark of the local batch check: 5,000 candidates (every other
 * one exposed, as bench/filter_bench.cc's) against one user's filter of
 * 2,000 items recorded 20 per call over 29 days (7 live slices at the
 * default 5-day span), pulled from a real server. A warm-up, then a timed
 * loop of keepMaskIds (hashing included) and of keepMaskHashes (hashes
 * given, as the C++ benchmark's); prints the thread's CPU time per call
 * (what the C++ figure is: on a shared machine wall time measures the
 * other processes too) and the wall time. No assertion on time: the
 * figures are for docs/clients.md.
 *
 * <p>Usage: LocalCheckBench TARGET [ITERATIONS]
 */
public final class LocalCheckBench {
  public static void main(String[] args) throws Exception {
    int iterations = args.length > 1 ? Integer.parseInt(args[1]) : 20000;
    Random rng = new Random(7);
    long now = System.currentTimeMillis();
    long day = 24L * 3600 * 1000;
    long[] recorded = new long[2000];
    String user = "bench-" + now;
    try (RoutingClient router = RoutingClient.builder().replicaAddresses(List.of(args[0]))
        .partitions(1).deadline(Duration.ofSeconds(30)).build()) {
      for (int call = 0; call < 100; call++) {
        Exposure.Builder e = Exposure.newBuilder().setUserId(user)
            .setEventTimeMs(now - (long) (rng.nextDouble() * 29 * day));
        for (int i = 0; i < 20; i++) {
          recorded[call * 20 + i] = rng.nextLong();
          e.addItemIds(recorded[call * 20 + i]);
        }
        router.recordExposure(RecordExposureRequest.newBuilder().setSurface("homefeed")
            .addExposures(e).build());
      }
      FilterView view = new FilterCache(router, 1 << 20).get("homefeed", user);
      long[] ids = new long[5000];
      for (int i = 0; i < ids.length; i++) {
        ids[i] = i % 2 == 0 ? recorded[(i * 7919) % recorded.length] : rng.nextLong();
      }
      long[] hashes = new long[ids.length];
      for (int i = 0; i < ids.length; i++) {
        hashes[i] = Xxh3.hashId(ids[i]);
      }
      long sink = 0;
      for (int i = 0; i < iterations / 2; i++) {  // warm-up: JIT compilation
        sink += view.keepMaskIds(ids)[i % ids.length] ? 1 : 0;
        sink += view.keepMaskHashes(hashes)[i % ids.length] ? 1 : 0;
      }
      ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
      long w0 = System.nanoTime();
      long t0 = cpu.getCurrentThreadCpuTime();
      for (int i = 0; i < iterations; i++) {
        sink += view.keepMaskIds(ids)[i % ids.length] ? 1 : 0;
      }
      long t1 = cpu.getCurrentThreadCpuTime();
      long w1 = System.nanoTime();
      for (int i = 0; i < iterations; i++) {
        sink += view.keepMaskHashes(hashes)[i % ids.length] ? 1 : 0;
      }
      long t2 = cpu.getCurrentThreadCpuTime();
      int kept = 0;
      for (boolean k : view.keepMaskIds(ids)) {
        kept += k ? 1 : 0;
      }
      System.out.printf("slices=%d runs=%d items=2000 candidates=%d kept=%d iterations=%d"
              + " keepMaskIds_cpu_us=%.1f keepMaskHashes_cpu_us=%.1f ns_per_candidate=%.2f"
              + " keepMaskIds_wall_us=%.1f sink=%d%n",
          view.slices().size(), view.runs().size(), ids.length, kept, iterations,
          (t1 - t0) / 1e3 / iterations, (t2 - t1) / 1e3 / iterations,
          (double) (t1 - t0) / iterations / ids.length, (w1 - w0) / 1e3 / iterations, sink);
    }
  }
}
