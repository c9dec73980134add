package com.exposurefilter.client;

import java.util.Arrays;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Per user, the Kafka offset this client's last write of the user got in the
 * user's partition (docs/scale-out.md "Read-your-writes"). Bounded by
 * {@code maxUsers}: past it the oldest user's offset folds into one offset
 * per partition, which makes reads of that partition's users wait for the
 * highest folded write (stricter, never weaker). Thread-safe.
 */
final class ReadYourWritesTokens {
  private final int maxUsers;
  private final LinkedHashMap<String, Long> users = new LinkedHashMap<>();
  private final long[] folded;  // per partition; -1 = none

  ReadYourWritesTokens(int partitions, int maxUsers) {
    this.maxUsers = maxUsers;
    this.folded = new long[partitions];
    Arrays.fill(folded, -1);
  }

  synchronized void record(String user, long offset) {
    Long old = users.remove(user);  // re-inserted last: the most recent write
    users.put(user, old == null ? offset : Math.max(old, offset));
    if (users.size() > maxUsers) {
      Iterator<Map.Entry<String, Long>> eldest = users.entrySet().iterator();
      Map.Entry<String, Long> e = eldest.next();
      int p = Partitioning.partitionForUser(e.getKey(), folded.length);
      folded[p] = Math.max(folded[p], e.getValue());
      eldest.remove();
    }
  }

  /** The offset a read of {@code user} (in {@code partition}) must see applied, or -1. */
  synchronized long offsetFor(String user, int partition) {
    Long own = users.get(user);
    return Math.max(own == null ? -1 : own, folded[partition]);
  }

  synchronized int usersHeld() {
    return users.size();
  }
}
