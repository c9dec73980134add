package com.exposurefilter.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.exposurefilter.v1.SessionError;
import com.exposurefilter.v1.SessionRequest;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * FilterReplica against a scripted Session server (ScriptedSession): the
 * path of each check (local only while synced, fresh and clear of an
 * uncertain slice expiry), a gap and a resync notice, aging by the
 * server's clock, staleness and a stream's end, the LRU bound, forget (both
 * quiet unsubscribes).
 */
class FilterReplicaTest {
  static final String U = "u1";
  static final long[] IDS = {7, 8, 9};

  ScriptedSession server;
  FilterReplica replica;

  @BeforeEach
  void setUp() throws Exception {
    server = new ScriptedSession();
    replica = FilterReplica.builder(server.channel).build();
  }

  @AfterEach
  void tearDown() {
    replica.close();
    server.close();
  }

  /** The server pushes item 7 (IDS[0]) for U; U's next check removes it. */
  void pushItem7AndSeeItRemoved() throws Exception {
    server.push(U, 0, server.serverTimeMs, Xxh3.hashId(7));
    replica.sync(Duration.ofSeconds(5));
    assertFalse(check(U, IDS).keep()[0]);
  }

  FilterReplica.Result check(String user, long... ids) {
    return replica.checkPath("homefeed", user, ids, List.of());
  }

  static void eventually(BooleanSupplier what) throws InterruptedException {
    long deadline = System.nanoTime() + 5_000_000_000L;
    while (!what.getAsBoolean()) {
      assertTrue(System.nanoTime() < deadline, "condition not reached within 5 s");
      Thread.sleep(2);
    }
  }

  @Test
  void firstCheckSubscribesThenAnswersLocally() {
    FilterReplica.Result r = check(U, IDS);
    assertEquals(FilterReplica.Path.LOCAL, r.path());
    assertArrayEquals(new boolean[] {true, true, true}, r.keep());
    SessionRequest sub = server.received.get(0);
    assertEquals("homefeed", sub.getSubscribe().getSurface());
    assertEquals(List.of(2), sub.getSubscribe().getAcceptedFormatsList());
    assertEquals(1, replica.stats().snapshots());
    assertEquals(1.0, replica.stats().hitRatio());
    assertThrows(StatusRuntimeException.class,
        () -> replica.checkPath("homefeed", U, new long[0], List.of("")));
  }

  @Test
  void pushesApplyAndAGapResubscribesWithTheVersionHeld() throws Exception {
    check(U, IDS);
    server.push(U, 0, server.serverTimeMs, Xxh3.hashId(7), Xxh3.hashKey("k".getBytes()));
    replica.sync(Duration.ofSeconds(5));
    FilterReplica.Result r = replica.checkPath("homefeed", U, IDS, List.of("k", "j"));
    assertEquals(FilterReplica.Path.LOCAL, r.path());
    assertArrayEquals(new boolean[] {false, true, true, false, true}, r.keep());

    server.holdSnapshots = true;
    server.push(U, 1, server.serverTimeMs, Xxh3.hashId(8));  // sequence 3 after 1: a gap
    eventually(() -> replica.stats().gaps() == 1);
    eventually(() -> server.subscribes(U) == 2);  // on its way to the server
    SessionRequest again = server.received.stream().filter(SessionRequest::hasSubscribe)
        .reduce((a, b) -> b).orElseThrow();
    assertEquals(ScriptedSession.EMPTY_VERSION, again.getSubscribe().getIfVersion());
    // Not synced until the snapshot: mode A on the stream.
    assertEquals(FilterReplica.Path.STREAM, check(U, IDS).path());
    server.snapshot(U);
    replica.sync(Duration.ofSeconds(5));
    r = check(U, IDS);
    assertEquals(FilterReplica.Path.LOCAL, r.path());
    // The snapshot replaced the pushed items (the empty filter claims nothing).
    assertArrayEquals(new boolean[] {true, true, true}, r.keep());

    // A resync notice: every user unsynced until its snapshot.
    server.resync();
    replica.sync(Duration.ofSeconds(5));
    assertEquals(FilterReplica.Path.STREAM, check(U, IDS).path());
    assertEquals(1, replica.stats().resyncs());
    server.snapshot(U);
    replica.sync(Duration.ofSeconds(5));
    assertEquals(FilterReplica.Path.LOCAL, check(U, IDS).path());
    assertTrue(replica.stats().notSynced() >= 2);
  }

  @Test
  void pushedItemsAgeByTheServersClock() throws Exception {
    long t = server.serverTimeMs;  // a multiple of the 1 s span
    check(U, IDS);
    // Slice [t - 10 s, t - 9 s): expires at t + 1 s (retention 10 s).
    server.push(U, 0, t - 9_500, Xxh3.hashId(7));
    // A slice already dead by the server's clock is dropped at once.
    server.push(U, 0, t - 10_500, Xxh3.hashId(8));
    replica.sync(Duration.ofSeconds(5));
    FilterReplica.Result r = check(U, IDS);
    assertEquals(FilterReplica.Path.LOCAL, r.path());
    assertArrayEquals(new boolean[] {false, true, true}, r.keep());

    // The server's clock 1 ms before the expiry: by the time of the check it
    // may have passed it, and only a later pong can tell.
    server.serverTimeMs = t + 999;
    replica.sync(Duration.ofSeconds(5));
    r = check(U, IDS);
    assertEquals(FilterReplica.Path.STREAM, r.path());
    assertTrue(replica.stats().aging() >= 1);

    // Past it: the slice is dead, the item is kept locally.
    server.serverTimeMs = t + 1_000;
    replica.sync(Duration.ofSeconds(5));
    r = check(U, IDS);
    assertEquals(FilterReplica.Path.LOCAL, r.path());
    assertArrayEquals(new boolean[] {true, true, true}, r.keep());
  }

  @Test
  void staleLaggingOrDownFallsBackToModeA() throws Exception {
    check(U, IDS);
    server.silent = true;  // pongs withheld
    Thread.sleep(150);
    assertEquals(FilterReplica.Path.STREAM, check(U, IDS).path());
    assertTrue(replica.stats().stale() >= 1);
    assertTrue(replica.stats().staleness().toMillis() >= 100);
    server.silent = false;
    replica.sync(Duration.ofSeconds(5));
    assertEquals(FilterReplica.Path.LOCAL, check(U, IDS).path());

    server.lagging = true;
    replica.sync(Duration.ofSeconds(5));
    assertEquals(FilterReplica.Path.STREAM, check(U, IDS).path());
    server.lagging = false;
    replica.sync(Duration.ofSeconds(5));

    // The stream ends: unary until the replica has reconnected (after its
    // backoff) and resubscribed.
    server.endStream(Status.UNAVAILABLE);
    eventually(() -> check(U, IDS).path() == FilterReplica.Path.UNARY);
    assertTrue(server.unaryCalls.get() >= 1);
    eventually(() -> server.streamsOpened.get() == 2);
    eventually(() -> check(U, IDS).path() == FilterReplica.Path.LOCAL);
    assertEquals(2, server.subscribes(U));
    assertTrue(replica.stats().unaryChecks() >= 1);
  }

  @Test
  void resetExpiryRefusalAndLeaseRenewal() throws Exception {
    check(U, IDS);
    pushItem7AndSeeItRemoved();

    // The lease ran out: mode A, and the check subscribes again with the
    // version held.
    server.expire(U);
    replica.sync(Duration.ofSeconds(5));
    assertEquals(FilterReplica.Path.STREAM, check(U, IDS).path());
    assertEquals(1, replica.stats().expired());
    assertEquals(2, server.subscribes(U));
    replica.sync(Duration.ofSeconds(5));
    assertEquals(FilterReplica.Path.LOCAL, check(U, IDS).path());

    // The user deleted on the server: everything held forgotten.
    pushItem7AndSeeItRemoved();
    server.reset(U);
    replica.sync(Duration.ofSeconds(5));
    FilterReplica.Result r = check(U, IDS);
    assertEquals(FilterReplica.Path.LOCAL, r.path());
    assertArrayEquals(new boolean[] {true, true, true}, r.keep());
    assertEquals(1, replica.stats().resets());

    // A refused subscribe: mode A, whose refusal is the check's error.
    server.refuse = SessionError.newBuilder().setCode(9)
        .setMessage("subscribe.user_id: user \"v\" is owned by replica 1").build();
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> check("v", 1));
    assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode());
    assertEquals(1, replica.stats().failedChecks());
    server.refuse = null;

    // A short lease is renewed at half its length by a check.
    server.idleTimeoutMs = 100;
    check("w", IDS);
    Thread.sleep(60);
    check("w", IDS);
    eventually(() -> server.subscribes("w") == 2);
  }

  @Test
  void boundedByBytesEvictingTheLeastRecentlyChecked() throws Exception {
    replica.close();
    replica = FilterReplica.builder(server.channel).maxBytes(1L << 20)
        .compactAfterItems(1_000_000).build();
    for (String u : List.of("a", "b", "c")) {
      check(u, IDS);
    }
    long[] many = new long[5000];
    for (int i = 0; i < many.length; i++) {
      many[i] = Xxh3.hashId(1000 + i);
    }
    server.push("a", 0, server.serverTimeMs, many);
    server.push("b", 0, server.serverTimeMs, many);
    replica.sync(Duration.ofSeconds(5));
    assertEquals(0, replica.stats().evictions());
    check("a", IDS);  // b is now the least recently checked
    server.push("c", 0, server.serverTimeMs, many);
    replica.sync(Duration.ofSeconds(5));
    FilterReplica.Stats s = replica.stats();
    assertEquals(1, s.evictions());
    assertEquals(2, s.usersHeld());
    assertTrue(s.bytesHeld() <= 1L << 20, "bytes held " + s.bytesHeld());
    assertTrue(s.bytesHeld() >= 2 * 5000 * FilterReplica.PUSHED_ITEM_BYTES);
    eventually(() -> server.received.stream().anyMatch(
        r -> r.hasUnsubscribe() && r.getUnsubscribe().getUserId().equals("b")));
    assertFalse(server.received.stream().anyMatch(
        r -> r.hasUnsubscribe() && !r.getUnsubscribe().getUserId().equals("b")));
    assertTrue(server.received.stream().filter(SessionRequest::hasUnsubscribe)
        .allMatch(r -> r.getUnsubscribe().getQuiet()), "eviction's unsubscribe is quiet");
    // b comes back through a new subscribe.
    assertEquals(FilterReplica.Path.LOCAL, check("b", IDS).path());
    assertEquals(2, server.subscribes("b"));
  }

  @Test
  void forgetUnsubscribesQuietlyAndDropsWhatFollows() throws Exception {
    check(U, IDS);
    pushItem7AndSeeItRemoved();
    // A refused quiet unsubscribe is still answered, by its error: it
    // answers no request the replica waits for.
    server.refuseUnsubscribes = SessionError.newBuilder().setCode(3)
        .setMessage("unsubscribe.user_id: scripted refusal").build();
    replica.forget("homefeed", U);
    // A push the server queued before it read the unsubscribe, for a user
    // no longer held: dropped.
    server.push(U, 0, server.serverTimeMs, Xxh3.hashId(8));
    replica.sync(Duration.ofSeconds(5));  // the unsubscribe read, its error received
    List<SessionRequest> unsubscribes = server.received.stream()
        .filter(SessionRequest::hasUnsubscribe).toList();
    assertEquals(1, unsubscribes.size());
    assertEquals(U, unsubscribes.get(0).getUnsubscribe().getUserId());
    // Quiet: the server answers nothing, so nothing may wait for it.
    assertTrue(unsubscribes.get(0).getUnsubscribe().getQuiet(), "forget's unsubscribe is quiet");
    FilterReplica.Stats s = replica.stats();
    assertEquals(1, s.pushes());
    assertEquals(0, s.usersHeld());
    assertEquals(0, s.failedChecks());
    // The next check subscribes again, from the server's snapshot alone
    // (the empty filter: neither pushed item is held).
    server.refuseUnsubscribes = null;
    FilterReplica.Result r = check(U, IDS);
    assertEquals(FilterReplica.Path.LOCAL, r.path());
    assertArrayEquals(new boolean[] {true, true, true}, r.keep());
    assertEquals(2, replica.stats().snapshots());
    assertEquals(2, server.subscribes(U));
  }

  /**
   * a and b checked (a the least recently), then the server holds its
   * snapshots and a gap makes a subscribe again: one subscribe in flight
   * when the test lets a go.
   */
  void holdAResubscribeOfA() throws Exception {
    check("a", IDS);
    check("b", IDS);
    server.holdSnapshots = true;
    server.push("a", 1, server.serverTimeMs, Xxh3.hashId(8));  // sequence 2 after 0: a gap
    replica.sync(Duration.ofSeconds(5));
    assertEquals(1, replica.stats().subscribesInFlight());
  }

  /**
   * The held subscribe's answer arrives for a user no longer held: nothing
   * is left in flight, nothing else changes, and a's next check subscribes
   * again as any first one does.
   */
  void answerLateThenCheckAAgain() throws Exception {
    replica.sync(Duration.ofSeconds(5));  // the resubscribe has been read
    assertEquals(2, server.subscribes("a"));
    FilterReplica.Stats before = replica.stats();
    server.holdSnapshots = false;
    server.snapshot("a");
    replica.sync(Duration.ofSeconds(5));
    FilterReplica.Stats s = replica.stats();
    assertEquals(0, s.subscribesInFlight());
    assertEquals(before.usersHeld(), s.usersHeld());
    assertEquals(before.snapshots(), s.snapshots());
    assertEquals(FilterReplica.Path.LOCAL, check("a", IDS).path());
    s = replica.stats();
    assertEquals(0, s.subscribesInFlight());
    assertEquals(before.snapshots() + 1, s.snapshots());
    assertEquals(3, server.subscribes("a"));
  }

  @Test
  void aUserForgottenBeforeItsSnapshotLeavesNothingInFlight() throws Exception {
    holdAResubscribeOfA();
    replica.forget("homefeed", "a");
    answerLateThenCheckAAgain();
  }

  @Test
  void aUserEvictedBeforeItsSnapshotLeavesNothingInFlight() throws Exception {
    replica.close();
    replica = FilterReplica.builder(server.channel).maxBytes(1L << 20)
        .compactAfterItems(1_000_000).build();
    holdAResubscribeOfA();
    // Pushed items that take b past the room a leaves: a, the least
    // recently checked, is evicted.
    long[] items = new long[(int) (((1L << 20) - replica.stats().bytesHeld())
        / FilterReplica.PUSHED_ITEM_BYTES + 1)];
    for (int i = 0; i < items.length; i++) {
      items[i] = Xxh3.hashId(1000 + i);
    }
    server.push("b", 0, server.serverTimeMs, items);
    replica.sync(Duration.ofSeconds(5));
    assertEquals(1, replica.stats().evictions());
    assertEquals(1, replica.stats().usersHeld());
    answerLateThenCheckAAgain();
  }

  @Test
  void checksFromSeveralThreadsWhilePushesArrive() throws Exception {
    check(U, IDS);
    List<CompletableFuture<Void>> loops = new ArrayList<>();
    for (int t = 0; t < 4; t++) {
      loops.add(CompletableFuture.runAsync(() -> {
        for (int i = 0; i < 300; i++) {
          check(U, 5000 + i, 7);
        }
      }));
    }
    for (int i = 0; i < 200; i++) {
      server.push(U, 0, server.serverTimeMs, Xxh3.hashId(5000 + i));
    }
    CompletableFuture.allOf(loops.toArray(new CompletableFuture[0])).get();
    replica.sync(Duration.ofSeconds(5));
    for (int i = 0; i < 200; i++) {
      assertFalse(check(U, 5000 + i).keep()[0], "pushed item " + i);
    }
    assertEquals(200, replica.stats().pushes());
    assertEquals(0, replica.stats().gaps());
    assertTrue(replica.checkAsync("homefeed", U, new long[] {1}, List.of()).get().keep()[0]);
  }
}
