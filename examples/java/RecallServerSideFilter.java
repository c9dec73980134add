import com.exposurefilter.client.RoutingClient;
import com.exposurefilter.v1.FilterRecalledRequest;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;

/**
 * Mode A: send the user's candidates to FilterRecalled, keep what comes
 * back. Prints the candidates the user has not seen, in order.
 *
 * <pre>
 * java -cp build/java/exposure-filter-examples.jar:$(cat build/java/classpath.txt) \
 *     RecallServerSideFilter TARGET SURFACE USER_ID ID...
 * </pre>
 */
public final class RecallServerSideFilter {
  /** What a recall server calls before ranking. */
  static List<Long> dropExposed(RoutingClient client, String surface, String userId,
      List<Long> candidates) {
    return client.filterRecalled(FilterRecalledRequest.newBuilder().setSurface(surface)
        .setUserId(userId).addAllCandidateIds(candidates).build()).getKeptIdsList();
  }

  public static void main(String[] args) {
    if (args.length < 3) {
      System.err.println("usage: RecallServerSideFilter TARGET SURFACE USER_ID ID...");
      System.exit(2);
    }
    List<Long> candidates = Arrays.stream(args, 3, args.length).map(Long::parseUnsignedLong)
        .toList();
    // One server: a routing client over one replica and one partition.
    try (RoutingClient client = RoutingClient.builder().replicaAddresses(List.of(args[0]))
        .partitions(1)
        // A one-shot program's first call also sets up the channel (and
        // warms the JVM): more than the 500 ms default on a loaded machine.
        .deadline(Duration.ofSeconds(5)).build()) {
      List<Long> kept = dropExposed(client, args[1], args[2], candidates);
      System.out.println("kept:" + kept.stream().map(i -> " " + Long.toUnsignedString(i))
          .collect(Collectors.joining()));
    }
  }
}
