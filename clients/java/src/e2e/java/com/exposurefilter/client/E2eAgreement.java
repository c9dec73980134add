package com.exposurefilter.client;

import com.exposurefilter.v1.Exposure;
import com.exposurefilter.v1.FilterRecalledRequest;
import com.exposurefilter.v1.FilterRecalledResponse;
import com.exposurefilter.v1.RecordExposureRequest;
import com.exposurefilter.v1.ResultMode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;

/**
 * Pull mode agrees with server mode against a real server (run by
 * tests/e2e/test_java_client.py): users with 0 to 10,000 exposures spread
 * over 29 days, each user's filter pulled through FilterCache and checked
 * locally (batch, ids and keys), compared with FilterRecalled's keep mask
 * on every candidate. Prints one summary line of key=value pairs.
 *
 * <p>Usage: E2eAgreement TARGET
 */
public final class E2eAgreement {
  static final long DAY_MS = 24L * 3600 * 1000;
  static final int[] EXPOSURES = {0, 1, 2, 10, 31, 100, 400, 1000, 2500, 5000, 7500, 10000};
  static final int CANDIDATES_PER_USER = 9000;
  static final int RECORD_BATCH = 1000;
  static final int QUIET_WRITES = 10;  // > RunSizing::kQuietWrites (8): seals slices

  public static void main(String[] args) throws Exception {
    Random rng = new Random(20261128);
    long now = System.currentTimeMillis();
    long total = 0;
    long disagreements = 0;
    long falseNegatives = 0;
    long removed = 0;
    long notModified = 0;
    try (RoutingClient router = RoutingClient.builder().replicaAddresses(List.of(args[0]))
        .partitions(1).deadline(Duration.ofSeconds(60)).build()) {
      FilterCache cache = new FilterCache(router, 64L << 20);
      for (int u = 0; u < EXPOSURES.length; u++) {
        int n = EXPOSURES[u];
        String user = "java-user-" + u;
        List<Long> ids = new ArrayList<>();
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < n - n / 10; i++) {
          ids.add(rng.nextLong());
        }
        for (int i = 0; i < n / 10; i++) {
          keys.add("item:" + u + ":" + (rng.nextLong() >>> 24));
        }
        List<Object> items = new ArrayList<>(ids);
        items.addAll(keys);
        Collections.shuffle(items, rng);
        for (int start = 0; start < items.size(); start += RECORD_BATCH) {
          Exposure.Builder e = Exposure.newBuilder().setUserId(user)
              .setEventTimeMs(now - (long) (rng.nextDouble() * 29 * DAY_MS));
          for (Object item : items.subList(start, Math.min(items.size(), start + RECORD_BATCH))) {
            if (item instanceof Long id) {
              e.addItemIds(id);
            } else {
              e.addItemKeys((String) item);
            }
          }
          check(router.recordExposure(RecordExposureRequest.newBuilder().setSurface("homefeed")
              .addExposures(e).build()));
        }
        if (n >= 100) {
          for (int i = 0; i < QUIET_WRITES; i++) {
            ids.add(rng.nextLong());
            check(router.recordExposure(RecordExposureRequest.newBuilder().setSurface("homefeed")
                .addExposures(Exposure.newBuilder().setUserId(user).setEventTimeMs(now)
                    .addItemIds(ids.get(ids.size() - 1))).build()));
          }
        }
        FilterView view = cache.get("homefeed", user);
        if (cache.get("homefeed", user) == view) {
          notModified++;  // revalidated with if_version: the same view back
        }
        List<Long> candIds = new ArrayList<>();
        List<String> candKeys = new ArrayList<>();
        for (int i = 0; i < CANDIDATES_PER_USER; i++) {
          if (n > 0 && rng.nextDouble() < 1.0 / 3) {
            if (!keys.isEmpty() && rng.nextDouble() < 0.1) {
              candKeys.add(keys.get(rng.nextInt(keys.size())));
            } else {
              candIds.add(ids.get(rng.nextInt(ids.size())));
            }
          } else if (rng.nextDouble() < 0.1) {
            candKeys.add("fresh:" + (rng.nextLong() >>> 16));
          } else {
            candIds.add(rng.nextLong());
          }
        }
        FilterRecalledResponse server = router.filterRecalled(FilterRecalledRequest.newBuilder()
            .setSurface("homefeed").setUserId(user).addAllCandidateIds(candIds)
            .addAllCandidateKeys(candKeys).setMode(ResultMode.KEEP_MASK).build());
        boolean[] localIds = view.keepMaskIds(candIds.stream().mapToLong(Long::longValue).toArray());
        boolean[] localKeys = view.keepMaskKeys(candKeys);
        Set<Object> exposed = new HashSet<>(ids);
        exposed.addAll(keys);
        byte[] mask = server.getKeepMask().toByteArray();
        int m = candIds.size() + candKeys.size();
        for (int i = 0; i < m; i++) {
          boolean serverKeeps = (mask[i / 8] >> (i % 8) & 1) != 0;
          boolean localKeeps = i < localIds.length ? localIds[i] : localKeys[i - localIds.length];
          Object cand = i < localIds.length ? candIds.get(i) : candKeys.get(i - localIds.length);
          // Single lookups must agree with the batch.
          boolean single = i < localIds.length ? !view.mayContainId(candIds.get(i))
              : !view.mayContainKey(candKeys.get(i - localIds.length));
          total++;
          if (serverKeeps != localKeeps || single != localKeeps) {
            disagreements++;
          }
          if (!serverKeeps) {
            removed++;
          }
          if (exposed.contains(cand) && localKeeps) {
            falseNegatives++;
          }
        }
      }
      FilterCache.Stats st = cache.stats();
      System.out.println("total=" + total + " disagreements=" + disagreements
          + " false_negatives=" + falseNegatives + " removed=" + removed
          + " revalidated_not_modified=" + notModified + " cache_full_pulls=" + st.fullPulls()
          + " cache_not_modified=" + st.notModified());
    }
  }

  static void check(RoutingClient.RoutedRecordResult r) {
    if (!r.ok()) {
      throw new IllegalStateException("RecordExposure failed: " + r.owners());
    }
  }
}
