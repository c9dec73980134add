package com.exposurefilter.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.exposurefilter.v1.Exposure;
import com.exposurefilter.v1.FilterRecalledRequest;
import com.exposurefilter.v1.FilterRecalledResponse;
import com.exposurefilter.v1.RecordExposureRequest;
import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.nio.channels.ClosedChannelException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Routing, failover, deadlines and read-your-writes against scripted in-process replicas. */
class RoutingClientTest {
  static final int P = 12;
  ScriptedReplicas replicas;

  @BeforeEach
  void start() throws Exception {
    replicas = new ScriptedReplicas(3);
  }

  @AfterEach
  void stop() {
    replicas.close();
  }

  static FilterRecalledRequest read(String user) {
    return FilterRecalledRequest.newBuilder().setSurface("homefeed").setUserId(user)
        .addCandidateIds(1).addCandidateIds(2).build();
  }

  /** A user whose owner 0 is {@code replica} (P = 12, N = 3). */
  static String userOwnedBy(int replica) {
    for (int i = 0; ; i++) {
      if (Partitioning.partitionForUser("u" + i, P) % 3 == replica) {
        return "u" + i;
      }
    }
  }

  @Test
  void callGoesToOwnerZeroOnly() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2).build()) {
      String user = userOwnedBy(1);
      assertEquals(List.of(1L, 2L), router.filterRecalled(read(user)).getKeptIdsList());
      assertEquals(1, replicas.received.get(1).size());
      assertEquals(0, replicas.received.get(2).size());
      assertEquals(0, router.stats().failovers());
    }
  }

  @Test
  void unavailableFailsOverToTheNextOwnerWhichMayAnswerLagging() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2).maxAttempts(1).build()) {
      String user = userOwnedBy(0);
      replicas.scripts.get(0).status = Status.UNAVAILABLE.withDescription("scripted");
      FilterRecalledResponse r = router.filterRecalled(read(user));
      assertEquals(2, r.getKeptIdsCount());
      assertEquals(1, router.stats().failovers());
      assertEquals(1, router.stats().replicaErrors()[0]);
      // The first try is the caller's request as it was; the last owner's
      // try allows a lagging answer.
      FilterRecalledRequest first = (FilterRecalledRequest) replicas.received.get(0).get(0);
      FilterRecalledRequest last = (FilterRecalledRequest) replicas.received.get(1).get(0);
      assertFalse(first.getAllowLagging());
      assertTrue(last.getAllowLagging());
    }
  }

  @Test
  void cancelledFailsOverToo() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2).build()) {
      replicas.scripts.get(0).status = Status.CANCELLED.withDescription("shutting down");
      assertEquals(2, router.filterRecalled(read(userOwnedBy(0))).getKeptIdsCount());
    }
  }

  /**
   * A channel whose every call ends as grpc-java's Netty transport ends a
   * call whose connection closed under its write: UNKNOWN "channel closed"
   * caused by a ClosedChannelException, no answer from any server.
   */
  static final class ClosedUnderWriteChannel extends ManagedChannel {
    private final ManagedChannel inner;

    ClosedUnderWriteChannel(ManagedChannel inner) {
      this.inner = inner;
    }

    @Override
    public <Q, A> ClientCall<Q, A> newCall(MethodDescriptor<Q, A> method, CallOptions options) {
      return new ClientCall<>() {
        @Override
        public void start(Listener<A> listener, Metadata headers) {
          listener.onClose(Status.UNKNOWN.withDescription("channel closed")
              .withCause(new ClosedChannelException()), new Metadata());
        }

        @Override
        public void request(int n) {}

        @Override
        public void cancel(String message, Throwable cause) {}

        @Override
        public void halfClose() {}

        @Override
        public void sendMessage(Q message) {}
      };
    }

    @Override
    public String authority() {
      return inner.authority();
    }

    @Override
    public ManagedChannel shutdown() {
      return inner.shutdown();
    }

    @Override
    public boolean isShutdown() {
      return inner.isShutdown();
    }

    @Override
    public boolean isTerminated() {
      return inner.isTerminated();
    }

    @Override
    public ManagedChannel shutdownNow() {
      return inner.shutdownNow();
    }

    @Override
    public boolean awaitTermination(long timeout, TimeUnit unit) throws InterruptedException {
      return inner.awaitTermination(timeout, unit);
    }
  }

  @Test
  void aConnectionClosedUnderTheCallFailsOverLikeUnavailable() {
    replicas.channels.set(0, new ClosedUnderWriteChannel(replicas.channels.get(0)));
    try (RoutingClient router = replicas.router(P).replicationFactor(2).build()) {
      String user = userOwnedBy(0);
      assertEquals(2, router.filterRecalled(read(user)).getKeptIdsCount());
      assertEquals(1, router.stats().failovers());
      assertEquals(1, router.stats().replicaErrors()[0]);
      assertEquals(1, replicas.received.get(1).size());
      RecordExposureRequest write = RecordExposureRequest.newBuilder()
          .addExposures(Exposure.newBuilder().setUserId(user).addItemIds(7)).build();
      assertEquals(0, router.recordExposure(write).failedExposures().length);
      assertEquals(2, replicas.received.get(1).size());
    }
  }

  @Test
  void anUnknownAnsweredByAServerIsFinal() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2).build()) {
      replicas.scripts.get(0).status = Status.UNKNOWN.withDescription("channel closed");
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> router.filterRecalled(read(userOwnedBy(0))));
      assertEquals(Status.Code.UNKNOWN, e.getStatus().getCode());
      assertEquals(0, replicas.received.get(1).size());
    }
  }

  @Test
  void otherCodesAreFinal() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2).build()) {
      replicas.scripts.get(0).status = Status.INVALID_ARGUMENT.withDescription("candidate_keys[0]");
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> router.filterRecalled(read(userOwnedBy(0))));
      assertEquals(Status.Code.INVALID_ARGUMENT, e.getStatus().getCode());
      assertEquals(0, replicas.received.get(1).size());
    }
  }

  @Test
  void everyOwnerFailedNamesEachTry() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2).maxAttempts(1).build()) {
      replicas.scripts.get(0).status = Status.UNAVAILABLE.withDescription("scripted");
      replicas.scripts.get(1).status = Status.UNAVAILABLE.withDescription("scripted");
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> router.filterRecalled(read(userOwnedBy(0))));
      assertEquals(Status.Code.UNAVAILABLE, e.getStatus().getCode());
      // Owner 0 is asked once more as a last owner (it might only have
      // been lagging) and fails again.
      assertEquals("every owner failed (2 of 2 tried): replica 0: UNAVAILABLE: scripted; "
          + "replica 1: UNAVAILABLE: scripted; replica 0: UNAVAILABLE: scripted",
          e.getStatus().getDescription());
    }
  }

  /** The last owner is down and the earlier one lags: asked again with allow_lagging. */
  @Test
  void aLaggingOwnerAnswersWhenTheLastOwnerIsDown() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2).maxAttempts(1).build()) {
      replicas.scripts.get(0).lagging = true;
      replicas.scripts.get(1).status = Status.UNAVAILABLE.withDescription("scripted");
      FilterRecalledResponse r = router.filterRecalled(read(userOwnedBy(0)));
      assertTrue(r.getStaleness().getLagging());
      assertEquals(2, replicas.received.get(0).size());
      assertTrue(((FilterRecalledRequest) replicas.received.get(0).get(1)).getAllowLagging());
      assertEquals(1, router.stats().laggingAnswers());
      assertEquals(2, router.stats().failovers());
    }
  }

  /** Writes get no last-resort pass. */
  @Test
  void aWriteIsNotRetriedAsALastResort() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2).maxAttempts(1).build()) {
      replicas.scripts.get(0).status = Status.UNAVAILABLE.withDescription("scripted");
      replicas.scripts.get(1).status = Status.UNAVAILABLE.withDescription("scripted");
      RecordExposureRequest w = RecordExposureRequest.newBuilder().setSurface("homefeed")
          .addExposures(Exposure.newBuilder().setUserId(userOwnedBy(0)).addItemIds(7)).build();
      router.recordExposure(w);
      assertEquals(1, replicas.received.get(0).size());
      assertEquals(1, replicas.received.get(1).size());
    }
  }

  @Test
  void oneOwnersErrorComesAsItCame() {
    try (RoutingClient router = replicas.router(P).maxAttempts(1).build()) {
      replicas.scripts.get(0).status = Status.UNAVAILABLE.withDescription("scripted");
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> router.filterRecalled(read(userOwnedBy(0))));
      assertEquals("scripted", e.getStatus().getDescription());
    }
  }

  @Test
  void aHangingOwnerCostsThePerTryTimeoutThenFailsOver() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2)
        .deadline(Duration.ofSeconds(5)).perTryTimeout(Duration.ofMillis(100)).build()) {
      replicas.scripts.get(0).hang = true;
      long start = System.nanoTime();
      assertEquals(2, router.filterRecalled(read(userOwnedBy(0))).getKeptIdsCount());
      assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(5));
      assertEquals(1, router.stats().failovers());
    }
  }

  @Test
  void theDeadlineCoversEveryOwner() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2)
        .deadline(Duration.ofMillis(200)).build()) {
      replicas.scripts.get(0).hang = true;
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> router.filterRecalled(read(userOwnedBy(0))));
      assertEquals(Status.Code.DEADLINE_EXCEEDED, e.getStatus().getCode());
      assertTrue(e.getStatus().getDescription()
          .startsWith("deadline of 200ms reached before owners 1 were tried: replica 0: "
              + "DEADLINE_EXCEEDED"), e.getStatus().getDescription());
      assertEquals(0, replicas.received.get(1).size());
    }
  }

  @Test
  void futuresCompleteWithTheAnswerOrTheStatus() throws Exception {
    try (RoutingClient router = replicas.router(P).build()) {
      CompletableFuture<FilterRecalledResponse> ok = router.filterRecalledAsync(read("a"));
      assertEquals(2, ok.get(5, TimeUnit.SECONDS).getKeptIdsCount());
      replicas.scripts.forEach(s -> s.status = Status.NOT_FOUND.withDescription("x"));
      ExecutionException e = assertThrows(ExecutionException.class,
          () -> router.filterRecalledAsync(read("a")).get(5, TimeUnit.SECONDS));
      assertEquals(Status.Code.NOT_FOUND, Status.fromThrowable(e.getCause()).getCode());
    }
  }

  static Metadata hint(String value) {
    Metadata m = new Metadata();
    m.put(OwnerHint.METADATA_KEY, value);
    return m;
  }

  @Test
  void anOwnerHintWithAnotherLayoutIsRoutingMisconfigured() {
    try (RoutingClient router = replicas.router(8).build()) {
      replicas.scripts.forEach(s -> {
        s.status = Status.FAILED_PRECONDITION.withDescription("not mine");
        s.trailers = hint("ordinal=1;partition=7;partitions=12;replicas=3;self=0");
      });
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> router.filterRecalled(read("alice")));
      assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode());
      assertTrue(e.getStatus().getDescription().startsWith("routing misconfigured: this client "
          + "routes with partitions=8 replicas=3 but the server at replica_addresses["),
          e.getStatus().getDescription());
    }
  }

  @Test
  void anOwnerHintWithAnotherReplicationFactorIsAdopted() {
    try (RoutingClient router = replicas.router(P).maxAttempts(1).build()) {
      String user = userOwnedBy(0);
      replicas.scripts.get(0).status = Status.FAILED_PRECONDITION.withDescription("not serving");
      replicas.scripts.get(0).trailers =
          hint("ordinal=0;partition=0;partitions=12;replicas=3;self=0;replication_factor=2");
      assertEquals(2, router.filterRecalled(read(user)).getKeptIdsCount());
      assertEquals(2, router.replicationFactor());
      assertEquals(1, router.stats().placementUpdates());
      assertEquals(1, replicas.received.get(1).size());
    }
  }

  @Test
  void recordExposureSplitsPerOwnerAndReportsWhatToResend() {
    try (RoutingClient router = replicas.router(P).maxAttempts(1).build()) {
      RecordExposureRequest.Builder q = RecordExposureRequest.newBuilder().setSurface("s");
      String[] users = {userOwnedBy(0), userOwnedBy(1), userOwnedBy(2), userOwnedBy(0)};
      for (String u : users) {
        q.addExposures(Exposure.newBuilder().setUserId(u).addItemIds(7));
      }
      replicas.scripts.get(1).status = Status.UNAVAILABLE.withDescription("down");
      RoutingClient.RoutedRecordResult r = router.recordExposure(q.build());
      assertFalse(r.ok());
      assertEquals(3, r.owners().size());
      assertArrayEquals(new int[] {0, 3}, r.owners().get(0).exposureIndices());
      assertArrayEquals(new int[] {1}, r.failedExposures());
      assertEquals(2, replicas.received.get(0).size() + replicas.received.get(2).size());
    }
  }

  @Test
  void readYourWritesSendsTheUsersLastOffset() {
    try (RoutingClient router = replicas.router(P).replicationFactor(2).readYourWrites(true)
        .build()) {
      String user = userOwnedBy(2);
      int p = Partitioning.partitionForUser(user, P);
      router.filterRecalled(read(user));
      router.recordExposure(RecordExposureRequest.newBuilder()
          .addExposures(Exposure.newBuilder().setUserId(user).addItemIds(9)).build());
      router.filterRecalled(read(user));
      // A request with offsets of its own keeps them.
      router.filterRecalled(read(user).toBuilder().putMinOffsets(p, 3).build());
      List<Object> got = replicas.received.get(2);
      assertEquals(0, ((FilterRecalledRequest) got.get(0)).getMinOffsetsCount());
      assertEquals(java.util.Map.of(p, 41L), ((FilterRecalledRequest) got.get(2)).getMinOffsetsMap());
      assertEquals(java.util.Map.of(p, 3L), ((FilterRecalledRequest) got.get(3)).getMinOffsetsMap());
      assertEquals(1, router.stats().readsWithOffsets());
    }
  }

  @Test
  void readYourWritesTokensFoldPerPartitionPastTheBound() {
    ReadYourWritesTokens t = new ReadYourWritesTokens(P, 2);
    t.record("a", 5);
    t.record("b", 9);
    t.record("c", 1);  // "a" folds into its partition
    assertEquals(2, t.usersHeld());
    int pa = Partitioning.partitionForUser("a", P);
    assertEquals(5, t.offsetFor("a", pa));
    // Folded: every user of a's partition now waits for a's write (stricter,
    // never weaker); a user of another partition waits for nothing.
    assertEquals(5, t.offsetFor("no-write", pa));
    assertEquals(-1, t.offsetFor("no-write", (pa + 1) % P));
    assertEquals(9, t.offsetFor("b", Partitioning.partitionForUser("b", P)));
  }

  @Test
  void builderRejectsBadOptions() {
    assertThrows(IllegalArgumentException.class,
        () -> replicas.router(P).replicationFactor(4).build());
    assertThrows(IllegalArgumentException.class, () -> replicas.router(2).build());
    assertThrows(IllegalArgumentException.class,
        () -> replicas.router(P).perTryTimeout(Duration.ZERO).build());
    assertThrows(IllegalArgumentException.class, () -> replicas.router(P).maxAttempts(6).build());
  }
}
