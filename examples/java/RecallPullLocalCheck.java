import com.exposurefilter.client.FilterCache;
import com.exposurefilter.client.FilterView;
import com.exposurefilter.client.RoutingClient;
import java.util.ArrayList;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;

/**
 * Mode B: pull the user's filter (GetFilter) and check candidates locally;
 * FilterCache revalidates with if_version, so an unchanged filter is not
 * sent again. Checks twice to show the revalidation.
 *
 * <pre>
 * java -cp build/java/exposure-filter-examples.jar:$(cat build/java/classpath.txt) \
 *     RecallPullLocalCheck TARGET SURFACE USER_ID ID...
 * </pre>
 */
public final class RecallPullLocalCheck {
  /** What a recall server calls before ranking. */
  static List<Long> dropExposed(FilterCache cache, String surface, String userId,
      long[] candidates) {
    FilterView view = cache.get(surface, userId);
    boolean[] keep = view.keepMaskIds(candidates);
    List<Long> kept = new ArrayList<>();
    for (int i = 0; i < candidates.length; i++) {
      if (keep[i]) {
        kept.add(candidates[i]);
      }
    }
    return kept;
  }

  public static void main(String[] args) {
    if (args.length < 3) {
      System.err.println("usage: RecallPullLocalCheck TARGET SURFACE USER_ID ID...");
      System.exit(2);
    }
    long[] candidates = Arrays.stream(args, 3, args.length).mapToLong(Long::parseUnsignedLong)
        .toArray();
    try (RoutingClient client = RoutingClient.builder().replicaAddresses(List.of(args[0]))
        .partitions(1)
        // A one-shot program's first call also sets up the channel (and
        // warms the JVM): more than the 500 ms default on a loaded machine.
        .deadline(Duration.ofSeconds(5)).build()) {
      FilterCache cache = new FilterCache(client, 64L << 20);  // at most 64 MiB of filters
      for (int round = 0; round < 2; round++) {
        StringBuilder line = new StringBuilder("kept:");
        for (long id : dropExposed(cache, args[1], args[2], candidates)) {
          line.append(' ').append(Long.toUnsignedString(id));
        }
        System.out.println(line);
      }
      FilterCache.Stats st = cache.stats();
      System.out.println("full_pulls=" + st.fullPulls() + " not_modified=" + st.notModified());
    }
  }
}
