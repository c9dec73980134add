package com.exposurefilter.client;

import com.exposurefilter.v1.DeleteUserRequest;
import com.exposurefilter.v1.DeleteUserResponse;
import com.exposurefilter.v1.ExplainRequest;
import com.exposurefilter.v1.ExplainResponse;
import com.exposurefilter.v1.ExposureFilterGrpc;
import com.exposurefilter.v1.FilterRecalledRequest;
import com.exposurefilter.v1.FilterRecalledResponse;
import com.exposurefilter.v1.GetFilterRequest;
import com.exposurefilter.v1.GetFilterResponse;
import com.exposurefilter.v1.GetUserStatsRequest;
import com.exposurefilter.v1.GetUserStatsResponse;
import com.exposurefilter.v1.RecordExposureRequest;
import com.exposurefilter.v1.RecordExposureResponse;
import io.grpc.CallOptions;
import io.grpc.ChannelCredentials;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.StreamObserver;
import java.nio.channels.ClosedChannelException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.function.BiFunction;
import java.util.function.Function;
import java.util.function.Predicate;
import java.util.function.UnaryOperator;
import java.util.stream.Collectors;

/**
 * The routing client of docs/scale-out.md: one channel per replica (ordinal
 * order), each call sent to the user's owner, {@code RecordExposure} split
 * per owner. With replication factor R every user has R owners, owner
 * i = (partition + i) mod N; a call goes to owner 0 and fails over to the
 * next owner, inside one deadline, when a try ends in UNAVAILABLE,
 * CANCELLED or its per-try timeout (DEADLINE_EXCEEDED while the call still
 * has time): the codes the C++ RoutingClient fails over on (a connection
 * lost under a call, which grpc-java's Netty transport reports as UNKNOWN
 * "channel closed", counts as UNAVAILABLE: see {@link #codeOf}). Any other code
 * is final, except a FAILED_PRECONDITION whose owner hint reports another R
 * with this client's P and N (the client adopts it). A FAILED_PRECONDITION
 * hint with another P or N, or addresses out of order, is reported as
 * "routing misconfigured". The last owner's try of a read (R >= 2) sets
 * {@code allow_lagging}. With {@link Builder#readYourWrites} every read
 * carries the offset of this client's last write of the user as
 * {@code min_offsets}, unless the request has its own.
 *
 * <pre>{@code
 * try (RoutingClient router = RoutingClient.builder()
 *         .replicaAddresses(List.of("ef-0:50051", "ef-1:50051", "ef-2:50051"))
 *         .partitions(12).replicationFactor(2)
 *         .deadline(Duration.ofMillis(500)).perTryTimeout(Duration.ofMillis(200))
 *         .build()) {
 *   FilterRecalledResponse r = router.filterRecalled(request);            // blocking
 *   CompletableFuture<FilterRecalledResponse> f = router.filterRecalledAsync(request);
 * }
 * }</pre>
 *
 * <p>Blocking methods throw {@link StatusRuntimeException} with the
 * server's code and message (or the client's UNAVAILABLE / DEADLINE_EXCEEDED
 * naming every try); futures complete exceptionally with it. Thread-safe.
 * Hedging (a second owner asked while the first is slow) is not built in
 * this client.
 */
public final class RoutingClient implements AutoCloseable {

  /** Counters since the client was created (monotonic). */
  public record Stats(long failovers, long placementUpdates, long laggingAnswers,
      long readsWithOffsets, long[] replicaErrors) {}

  /** One owner's share of a routed RecordExposure. */
  public record OwnerWrite(int replica, int[] exposureIndices, Status status,
      RecordExposureResponse response) {
    public boolean ok() {
      return status.isOk();
    }
  }

  /** The per-owner outcome of a routed RecordExposure, ascending replica. */
  public record RoutedRecordResult(List<OwnerWrite> owners) {
    public boolean ok() {
      return owners.stream().allMatch(OwnerWrite::ok);
    }

    /** The indices (into the request's exposures) whose owner failed: resend them. */
    public int[] failedExposures() {
      return owners.stream().filter(o -> !o.ok()).flatMapToInt(o -> Arrays.stream(o.exposureIndices))
          .sorted().toArray();
    }

    /** Partition -> highest offset of the successful owners' written_offsets. */
    public Map<Integer, Long> writtenOffsets() {
      Map<Integer, Long> merged = new TreeMap<>();
      for (OwnerWrite o : owners) {
        if (o.ok()) {
          o.response.getWrittenOffsetsMap().forEach((p, off) -> merged.merge(p, off, Math::max));
        }
      }
      return merged;
    }
  }

  public static Builder builder() {
    return new Builder();
  }

  /** Options; defaults as the C++ client's (docs/clients.md). */
  public static final class Builder {
    private List<String> addresses;
    private List<ManagedChannel> channels;
    private ChannelCredentials credentials = InsecureChannelCredentials.create();
    private int partitions = -1;
    private int replicationFactor = 1;
    private Duration deadline = Duration.ofMillis(500);
    private Duration perTryTimeout;
    private int maxAttempts = 3;
    private boolean readYourWrites;
    private int readYourWritesMaxUsers = 100_000;

    /** Replica addresses in ordinal order; the client owns the channels it makes. */
    public Builder replicaAddresses(List<String> addresses) {
      this.addresses = List.copyOf(addresses);
      return this;
    }

    /** Channels in ordinal order, made by the caller (not closed by the client). */
    public Builder channels(List<ManagedChannel> channels) {
      this.channels = List.copyOf(channels);
      return this;
    }

    public Builder credentials(ChannelCredentials credentials) {
      this.credentials = credentials;
      return this;
    }

    /** The servers' --partitions. */
    public Builder partitions(int partitions) {
      this.partitions = partitions;
      return this;
    }

    /** The servers' --replication_factor (owners per partition). */
    public Builder replicationFactor(int replicationFactor) {
      this.replicationFactor = replicationFactor;
      return this;
    }

    /** The whole call, every owner's try included (default 500 ms). */
    public Builder deadline(Duration deadline) {
      this.deadline = deadline;
      return this;
    }

    /** One try on one owner (default none: a try may use the whole deadline). */
    public Builder perTryTimeout(Duration perTryTimeout) {
      this.perTryTimeout = perTryTimeout;
      return this;
    }

    /** gRPC's own retries of UNAVAILABLE on the same replica, inside each try (1..5). */
    public Builder maxAttempts(int maxAttempts) {
      this.maxAttempts = maxAttempts;
      return this;
    }

    /** Send each user's last written offset with its reads (replicated servers). */
    public Builder readYourWrites(boolean enabled) {
      this.readYourWrites = enabled;
      return this;
    }

    /** Users whose offsets are held one by one before they fold per partition. */
    public Builder readYourWritesMaxUsers(int maxUsers) {
      this.readYourWritesMaxUsers = maxUsers;
      return this;
    }

    public RoutingClient build() {
      if ((addresses == null) == (channels == null)) {
        throw new IllegalArgumentException("give replicaAddresses or channels, not both");
      }
      int replicas = addresses != null ? addresses.size() : channels.size();
      Partitioning.checkLayout(partitions, replicas, replicationFactor);
      if (deadline.isNegative() || deadline.isZero()) {
        throw new IllegalArgumentException("deadline: must be > 0, got " + deadline);
      }
      if (perTryTimeout != null && (perTryTimeout.isNegative() || perTryTimeout.isZero())) {
        throw new IllegalArgumentException("perTryTimeout: must be > 0, got " + perTryTimeout);
      }
      if (maxAttempts < 1 || maxAttempts > 5) {
        throw new IllegalArgumentException("maxAttempts: need 1..5, got " + maxAttempts);
      }
      boolean owned = addresses != null;
      List<ManagedChannel> made = owned
          ? addresses.stream().map(a -> Channels.connect(a, credentials, maxAttempts)).toList()
          : channels;
      return new RoutingClient(this, made, owned);
    }
  }

  /** What the routing needs to know of one RPC. */
  private record Rpc<Q, A>(MethodDescriptor<Q, A> method, boolean read, Function<Q, String> user,
      Predicate<Q> hasOwnOffsets, BiFunction<Q, Map<Integer, Long>, Q> withOffsets,
      UnaryOperator<Q> allowLagging, Predicate<A> lagging) {}

  private static final Rpc<FilterRecalledRequest, FilterRecalledResponse> FILTER_RECALLED =
      new Rpc<>(ExposureFilterGrpc.getFilterRecalledMethod(), true,
          FilterRecalledRequest::getUserId, q -> q.getMinOffsetsCount() > 0,
          (q, o) -> q.toBuilder().putAllMinOffsets(o).build(),
          q -> q.toBuilder().setAllowLagging(true).build(), a -> a.getStaleness().getLagging());
  private static final Rpc<GetFilterRequest, GetFilterResponse> GET_FILTER =
      new Rpc<>(ExposureFilterGrpc.getGetFilterMethod(), true, GetFilterRequest::getUserId,
          q -> q.getMinOffsetsCount() > 0, (q, o) -> q.toBuilder().putAllMinOffsets(o).build(),
          q -> q.toBuilder().setAllowLagging(true).build(), a -> a.getStaleness().getLagging());
  private static final Rpc<GetUserStatsRequest, GetUserStatsResponse> GET_USER_STATS =
      new Rpc<>(ExposureFilterGrpc.getGetUserStatsMethod(), true, GetUserStatsRequest::getUserId,
          q -> q.getMinOffsetsCount() > 0, (q, o) -> q.toBuilder().putAllMinOffsets(o).build(),
          q -> q.toBuilder().setAllowLagging(true).build(), a -> a.getStaleness().getLagging());
  private static final Rpc<ExplainRequest, ExplainResponse> EXPLAIN =
      new Rpc<>(ExposureFilterGrpc.getExplainMethod(), true, ExplainRequest::getUserId,
          q -> q.getMinOffsetsCount() > 0, (q, o) -> q.toBuilder().putAllMinOffsets(o).build(),
          q -> q.toBuilder().setAllowLagging(true).build(), a -> a.getStaleness().getLagging());
  private static final Rpc<DeleteUserRequest, DeleteUserResponse> DELETE_USER =
      new Rpc<>(ExposureFilterGrpc.getDeleteUserMethod(), false, DeleteUserRequest::getUserId,
          q -> true, (q, o) -> q, q -> q, a -> false);
  private static final Rpc<RecordExposureRequest, RecordExposureResponse> RECORD_EXPOSURE =
      new Rpc<>(ExposureFilterGrpc.getRecordExposureMethod(), false,
          q -> q.getExposures(0).getUserId(), q -> true, (q, o) -> q, q -> q, a -> false);

  private final List<ManagedChannel> channels;
  private final boolean ownsChannels;
  private final int partitions;
  private volatile int replicationFactor;
  private final long deadlineNanos;
  private final long perTryNanos;  // Long.MAX_VALUE: none
  private final ReadYourWritesTokens tokens;
  private final AtomicLong failovers = new AtomicLong();
  private final AtomicLong placementUpdates = new AtomicLong();
  private final AtomicLong laggingAnswers = new AtomicLong();
  private final AtomicLong readsWithOffsets = new AtomicLong();
  private final AtomicLongArray replicaErrors;

  private RoutingClient(Builder b, List<ManagedChannel> channels, boolean ownsChannels) {
    this.channels = channels;
    this.ownsChannels = ownsChannels;
    this.partitions = b.partitions;
    this.replicationFactor = b.replicationFactor;
    this.deadlineNanos = b.deadline.toNanos();
    this.perTryNanos = b.perTryTimeout == null ? Long.MAX_VALUE : b.perTryTimeout.toNanos();
    this.tokens = b.readYourWrites
        ? new ReadYourWritesTokens(b.partitions, b.readYourWritesMaxUsers) : null;
    this.replicaErrors = new AtomicLongArray(channels.size());
  }

  public int replicas() {
    return channels.size();
  }

  public int partitions() {
    return partitions;
  }

  public int replicationFactor() {
    return replicationFactor;
  }

  /** The user's owners, owner 0 first: the order calls try them. */
  public int[] ownersForUser(String userId) {
    return Partitioning.ownersOfUser(userId, partitions, channels.size(), replicationFactor);
  }

  public Stats stats() {
    long[] errors = new long[replicaErrors.length()];
    for (int i = 0; i < errors.length; i++) {
      errors[i] = replicaErrors.get(i);
    }
    return new Stats(failovers.get(), placementUpdates.get(), laggingAnswers.get(),
        readsWithOffsets.get(), errors);
  }

  // ------------------------------------------------------------ the calls

  public CompletableFuture<FilterRecalledResponse> filterRecalledAsync(FilterRecalledRequest q) {
    return routedRead(FILTER_RECALLED, q);
  }

  public FilterRecalledResponse filterRecalled(FilterRecalledRequest q) {
    return await(filterRecalledAsync(q));
  }

  public CompletableFuture<GetFilterResponse> getFilterAsync(GetFilterRequest q) {
    return routedRead(GET_FILTER, q);
  }

  public GetFilterResponse getFilter(GetFilterRequest q) {
    return await(getFilterAsync(q));
  }

  public CompletableFuture<GetUserStatsResponse> getUserStatsAsync(GetUserStatsRequest q) {
    return routedRead(GET_USER_STATS, q);
  }

  public GetUserStatsResponse getUserStats(GetUserStatsRequest q) {
    return await(getUserStatsAsync(q));
  }

  public CompletableFuture<ExplainResponse> explainAsync(ExplainRequest q) {
    return routedRead(EXPLAIN, q);
  }

  public ExplainResponse explain(ExplainRequest q) {
    return await(explainAsync(q));
  }

  /** A write (deleting twice deletes once): fails over like a read. */
  public CompletableFuture<DeleteUserResponse> deleteUserAsync(DeleteUserRequest q) {
    String user = q.getUserId();
    return new Call<>(DELETE_USER, q, user, ownersForUser(user)).start().thenApply(resp -> {
      remember(user, resp.getWrittenOffsetsMap());
      return resp;
    });
  }

  public DeleteUserResponse deleteUser(DeleteUserRequest q) {
    return await(deleteUserAsync(q));
  }

  /**
   * Splits the exposures by owner 0 and sends each share to its owners
   * (failing over like a read; recording is idempotent), all shares at
   * once. Never completes exceptionally: each share's status is in the
   * result, and {@link RoutedRecordResult#failedExposures} says what to resend.
   */
  public CompletableFuture<RoutedRecordResult> recordExposureAsync(RecordExposureRequest q) {
    int n = channels.size();
    TreeMap<Integer, List<Integer>> byOwner = new TreeMap<>();
    for (int i = 0; i < q.getExposuresCount(); i++) {
      int owner = Partitioning.partitionForUser(q.getExposures(i).getUserId(), partitions) % n;
      byOwner.computeIfAbsent(owner, k -> new ArrayList<>()).add(i);
    }
    List<CompletableFuture<OwnerWrite>> parts = new ArrayList<>();
    for (Map.Entry<Integer, List<Integer>> e : byOwner.entrySet()) {
      int replica = e.getKey();
      int[] indices = e.getValue().stream().mapToInt(Integer::intValue).toArray();
      RecordExposureRequest.Builder part = RecordExposureRequest.newBuilder()
          .setSurface(q.getSurface());
      for (int i : indices) {
        part.addExposures(q.getExposures(i));
      }
      RecordExposureRequest share = part.build();
      // Users sharing owner 0 share every owner: (replica + i) mod N.
      int[] owners = Partitioning.ownersOfPartition(replica, n, replicationFactor);
      parts.add(new Call<>(RECORD_EXPOSURE, share, share.getExposures(0).getUserId(), owners)
          .start()
          .handle((resp, err) -> {
            if (err != null) {
              return new OwnerWrite(replica, indices, Status.fromThrowable(unwrap(err)), null);
            }
            for (int i = 0; i < share.getExposuresCount(); i++) {
              remember(share.getExposures(i).getUserId(), resp.getWrittenOffsetsMap());
            }
            return new OwnerWrite(replica, indices, Status.OK, resp);
          }));
    }
    return CompletableFuture.allOf(parts.toArray(CompletableFuture[]::new))
        .thenApply(v -> new RoutedRecordResult(parts.stream().map(CompletableFuture::join).toList()));
  }

  public RoutedRecordResult recordExposure(RecordExposureRequest q) {
    return await(recordExposureAsync(q));
  }

  /** Shuts down the channels this client made (not ones it was given). */
  @Override
  public void close() {
    if (!ownsChannels) {
      return;
    }
    for (ManagedChannel c : channels) {
      c.shutdown();
    }
    for (ManagedChannel c : channels) {
      try {
        if (!c.awaitTermination(5, TimeUnit.SECONDS)) {
          c.shutdownNow();
        }
      } catch (InterruptedException e) {
        c.shutdownNow();
        Thread.currentThread().interrupt();
      }
    }
  }

  // ------------------------------------------------------------ internals

  private void remember(String user, Map<Integer, Long> written) {
    if (tokens == null || written.isEmpty()) {
      return;
    }
    Long off = written.get(Partitioning.partitionForUser(user, partitions));
    if (off != null) {
      tokens.record(user, off);
    }
  }

  private <Q, A> CompletableFuture<A> routedRead(Rpc<Q, A> rpc, Q request) {
    String user = rpc.user.apply(request);
    int[] owners;
    try {
      owners = ownersForUser(user);
    } catch (IllegalArgumentException e) {
      return CompletableFuture.failedFuture(e);
    }
    if (tokens != null && !rpc.hasOwnOffsets.test(request)) {
      int p = Partitioning.partitionForUser(user, partitions);
      long off = tokens.offsetFor(user, p);
      if (off >= 0) {
        request = rpc.withOffsets.apply(request, Map.of(p, off));
        readsWithOffsets.incrementAndGet();
      }
    }
    return new Call<>(rpc, request, user, owners).start();
  }

  private static <T> T await(CompletableFuture<T> f) {
    try {
      return f.get();
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof RuntimeException re) {
        throw re;
      }
      throw new StatusRuntimeException(Status.fromThrowable(cause));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw Status.CANCELLED.withDescription("interrupted").withCause(e).asRuntimeException();
    }
  }

  private static Throwable unwrap(Throwable t) {
    return t instanceof CompletionException && t.getCause() != null ? t.getCause() : t;
  }

  /** The owners to go on with after a hint, or null: only another R with this P and N. */
  private int[] replan(String user, OwnerHint hint) {
    if (hint.partitions() != partitions || hint.replicas() != channels.size()) {
      return null;
    }
    int r = hint.replicationFactor();
    if (r < 1 || r > channels.size()) {
      return null;
    }
    synchronized (this) {
      if (r == replicationFactor) {
        return null;
      }
      replicationFactor = r;
    }
    placementUpdates.incrementAndGet();
    return Partitioning.ownersOfUser(user, partitions, channels.size(), r);
  }

  private StatusRuntimeException diagnose(int replica, StatusRuntimeException e) {
    var hint = OwnerHint.of(e);
    if (hint.isEmpty()) {
      return e;
    }
    OwnerHint h = hint.get();
    String why;
    if (h.partitions() != partitions || h.replicas() != channels.size()) {
      why = "routing misconfigured: this client routes with partitions=" + partitions
          + " replicas=" + channels.size() + " but the server at replica_addresses[" + replica
          + "] runs --partitions=" + h.partitions() + " --replicas=" + h.replicas();
    } else if (h.replicationFactor() != replicationFactor) {
      why = "routing misconfigured: this client routes with replication_factor="
          + replicationFactor + " but replica " + replica + " runs --replication_factor="
          + h.replicationFactor();
    } else if (h.self() != replica) {
      why = "routing misconfigured: replica_addresses[" + replica + "] reaches replica "
          + h.self() + "; list the addresses in ordinal order";
    } else {
      why = "routing disagreement with replica " + replica;
    }
    return Status.FAILED_PRECONDITION
        .withDescription(why + ": " + e.getStatus().getDescription())
        .withCause(e).asRuntimeException(e.getTrailers());
  }

  /**
   * The code a try's failure is judged by. grpc-java's Netty transport
   * reports a connection that closed under a call's write as UNKNOWN
   * "channel closed" with a {@link ClosedChannelException} as the cause,
   * where gRPC's C core (the server's and the C++ client's) says
   * UNAVAILABLE: the transport was lost, the server gave no answer. That
   * case is UNAVAILABLE here, so a killed owner is failed over whichever of
   * the two ways the client noticed it. An UNKNOWN sent by a server carries
   * no cause (causes do not cross the wire) and stays final.
   */
  static Status.Code codeOf(Status status) {
    if (status.getCode() == Status.Code.UNKNOWN) {
      for (Throwable t = status.getCause(); t != null; t = t.getCause()) {
        if (t instanceof ClosedChannelException) {
          return Status.Code.UNAVAILABLE;
        }
      }
    }
    return status.getCode();
  }

  /** One call with failover between its owners, all inside one deadline. */
  private final class Call<Q, A> {
    private final Rpc<Q, A> rpc;
    private final Q request;
    private final String user;
    private int[] owners;
    private final long deadlineAt = System.nanoTime() + deadlineNanos;
    private final CompletableFuture<A> result = new CompletableFuture<>();
    private final List<String> failures = new ArrayList<>();
    private int next;  // guarded by: one try runs at a time (no hedging)
    private Q lastTry;
    // Replicas that answered UNAVAILABLE to a try that was not a last
    // owner's: once every owner failed, a read asks them again with
    // allow_lagging (the last owner in placement order may be down while
    // one of them only lagged). Null until that pass is planned.
    private final List<Integer> refused = new ArrayList<>();
    private java.util.ArrayDeque<Integer> lastResort;

    Call(Rpc<Q, A> rpc, Q request, String user, int[] owners) {
      this.rpc = rpc;
      this.request = request;
      this.user = user;
      this.owners = owners;
    }

    CompletableFuture<A> start() {
      launch();
      return result;
    }

    private void launch() {
      int replica = owners[next++];
      launch(replica, owners.length > 1 && next == owners.length);
    }

    private void launch(int replica, boolean lastOwner) {
      long budget = Math.min(deadlineAt - System.nanoTime(), perTryNanos);
      Q sent = request;
      // The last of two or more owners: nobody is left after it, so a lagging
      // copy's answer (which says how stale it is) beats a failed read.
      if (rpc.read && lastOwner) {
        if (lastTry == null) {
          lastTry = rpc.allowLagging.apply(request);
        }
        sent = lastTry;
      }
      CallOptions options = CallOptions.DEFAULT.withDeadlineAfter(Math.max(budget, 1),
          TimeUnit.NANOSECONDS);
      ClientCalls.asyncUnaryCall(channels.get(replica).newCall(rpc.method, options), sent,
          new StreamObserver<A>() {
            private A answer;

            @Override
            public void onNext(A value) {
              answer = value;
            }

            @Override
            public void onError(Throwable t) {
              failed(replica, lastOwner, t instanceof StatusRuntimeException sre ? sre
                  : Status.fromThrowable(t).asRuntimeException(Status.trailersFromThrowable(t)));
            }

            @Override
            public void onCompleted() {
              if (rpc.read && rpc.lagging.test(answer)) {
                laggingAnswers.incrementAndGet();
              }
              result.complete(answer);
            }
          });
    }

    private void failed(int replica, boolean lastOwner, StatusRuntimeException e) {
      replicaErrors.incrementAndGet(replica);
      Status.Code code = codeOf(e.getStatus());
      failures.add("replica " + replica + ": " + code + ": " + e.getStatus().getDescription());
      if (code == Status.Code.UNAVAILABLE && !lastOwner && !refused.contains(replica)) {
        refused.add(replica);
      }
      boolean inTime = System.nanoTime() < deadlineAt;
      // DEADLINE_EXCEEDED is a per-try timeout while the call has time left,
      // else the call's own (then no owner is started any more). CANCELLED:
      // a server shutting down as the call arrived; safe to repeat.
      boolean goOn = code == Status.Code.UNAVAILABLE || code == Status.Code.DEADLINE_EXCEEDED
          || code == Status.Code.CANCELLED;
      if (!goOn && code == Status.Code.FAILED_PRECONDITION) {
        var hint = OwnerHint.of(e);
        int[] replanned = hint.isPresent() ? replan(user, hint.get()) : null;
        // Owner i is (p + i) mod N whatever R: the new list extends or
        // truncates the old one, whose first `next` were tried.
        if (replanned != null && replanned.length > next) {
          owners = replanned;
          goOn = true;
        }
      }
      if (!goOn) {
        result.completeExceptionally(diagnose(replica, e));
        return;
      }
      if (next < owners.length && inTime) {
        failovers.incrementAndGet();
        launch();
        return;
      }
      if (rpc.read && owners.length > 1 && next >= owners.length && inTime) {
        if (lastResort == null) {
          lastResort = new java.util.ArrayDeque<>(refused);
        }
        if (!lastResort.isEmpty()) {
          failovers.incrementAndGet();
          launch(lastResort.poll(), true);
          return;
        }
      }
      int[] untried = Arrays.copyOfRange(owners, next, owners.length);
      if (failures.size() == 1 && untried.length == 0) {
        result.completeExceptionally(e);  // one owner (R = 1): its error as it came
        return;
      }
      String tries = String.join("; ", failures);
      long ms = TimeUnit.NANOSECONDS.toMillis(deadlineNanos);
      if (untried.length > 0) {
        result.completeExceptionally(Status.DEADLINE_EXCEEDED.withDescription("deadline of " + ms
            + "ms reached before owners "
            + Arrays.stream(untried).mapToObj(String::valueOf).collect(Collectors.joining(", "))
            + " were tried: " + tries).asRuntimeException());
      } else if (!inTime) {
        result.completeExceptionally(Status.DEADLINE_EXCEEDED.withDescription("deadline of " + ms
            + "ms reached; every owner was tried: " + tries).asRuntimeException());
      } else {
        result.completeExceptionally(Status.UNAVAILABLE.withDescription("every owner failed ("
            + Math.min(next, owners.length) + " of " + owners.length + " tried): " + tries)
            .asRuntimeException());
      }
    }
  }
}
