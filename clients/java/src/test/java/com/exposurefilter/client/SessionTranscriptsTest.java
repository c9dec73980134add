package com.exposurefilter.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.exposurefilter.v1.SessionRequest;
import com.exposurefilter.v1.SessionResponse;
import com.exposurefilter.v1.SessionSnapshot;
import com.exposurefilter.v1.SessionUnsubscribe;
import com.google.protobuf.TextFormat;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * The golden Session transcripts (tests/testdata/session/, the real server's
 * answers, pinned by tests/server/session_transcript_test.cc) replayed
 * against the Java replica's message handling, as the Go
 * (clients/go/replica/transcripts_test.go) and Python
 * (clients/python/tests/test_session_transcripts.py) replicas' tests do.
 *
 * <p>Each transcript's subscribes and unsubscribes are made by the replica
 * itself on a stream to a scripted server ({@link ScriptedSession}, which
 * answers only pings, at the transcripts' fixed clock), and the server's
 * answers are delivered as recorded (request ids mapped to the replica's
 * own); mode-A requests, pings and requests the replica never makes (none
 * set, an unsubscribe of a user it does not hold) are skipped with their
 * answers. After every answer the replica's local answer for each user it
 * holds is compared with what the transcript's server holds at that point
 * (the {@code ! record} / {@code ! delete} lines): a synced user answers
 * every id the transcript names, and fresh ones, exactly; a user the server
 * stopped serving (refused, idle, unsubscribed) is not answered locally.
 * Also: every push's hashes are the Java hashes of the ids recorded, every
 * snapshot decodes to its version, and the replica's unsubscribes are quiet.
 */
class SessionTranscriptsTest {
  static final Path SESSION =
      Path.of(System.getProperty("ef.testdata", "tests/testdata"), "session");
  /** The transcripts' server clock, fixed at 2026-11-22T00:00:00Z. */
  static final long NOW_MS = 1795392000000L;

  /** One transcript through one replica. */
  static final class Replay implements AutoCloseable {
    final String name;
    final ScriptedSession server;
    final FilterReplica replica;
    final Map<Long, Long> ids = new HashMap<>();  // transcript request id -> replica's, or 0
    final Map<String, Set<Long>> held = new HashMap<>();  // surface \0 user -> ids
    final Set<Long> named = new TreeSet<>();  // every id the transcript names
    List<Long> recorded = new ArrayList<>();  // ids of the last `! record` since a push
    int readUpTo;  // requests of server.received already looked at
    long checked;

    Replay(String name) throws IOException {
      this.name = name;
      server = new ScriptedSession();
      server.serverTimeMs = NOW_MS;
      server.holdSnapshots = true;  // the transcript's answers only
      // A minute of staleness: every comparison follows a sync(), and the
      // pinger's own pings (every 30 s) never interleave with the script.
      replica = FilterReplica.builder(server.channel).maxStaleness(Duration.ofMinutes(1))
          .pingInterval(Duration.ofSeconds(30)).timeout(Duration.ofSeconds(5)).build();
      for (long i = 1000; i < 1064; i++) {
        named.add(i);
      }
    }

    static String key(String surface, String user) {
      return surface + '\u0000' + user;
    }

    /** The last request of the kind the server received since the previous call. */
    SessionRequest received(SessionRequest.KindCase kind) throws InterruptedException {
      long deadline = System.nanoTime() + 5_000_000_000L;
      while (true) {
        SessionRequest last = null;
        List<SessionRequest> all = server.received;
        for (int i = readUpTo; i < all.size(); i++) {
          if (all.get(i).getKindCase() == kind) {
            last = all.get(i);
            readUpTo = i + 1;
          }
        }
        if (last != null) {
          return last;
        }
        assertTrue(System.nanoTime() < deadline, name + ": no " + kind + " within 5 s");
        Thread.sleep(1);
      }
    }

    void send(SessionRequest m) throws InterruptedException {
      long rid = 0;
      switch (m.getKindCase()) {
        case SUBSCRIBE -> {
          synchronized (replica.lock) {
            FilterReplica.Entry e =
                replica.getOrCreate(m.getSubscribe().getSurface(), m.getSubscribe().getUserId());
            replica.subscribe(e, replica.liveStream());
          }
          rid = received(SessionRequest.KindCase.SUBSCRIBE).getRequestId();
        }
        case UNSUBSCRIBE -> {
          SessionUnsubscribe u = m.getUnsubscribe();
          boolean subscribed;
          synchronized (replica.lock) {
            FilterReplica.Entry e = replica.entries.get(key(u.getSurface(), u.getUserId()));
            subscribed = e != null && e.subscribed;
          }
          if (subscribed) {
            replica.forget(u.getSurface(), u.getUserId());
            SessionRequest sent = received(SessionRequest.KindCase.UNSUBSCRIBE);
            // The replica's unsubscribes are quiet, whatever the
            // transcript's; the answer recorded for one that is not is
            // delivered all the same and must change nothing.
            assertTrue(sent.getUnsubscribe().getQuiet(), name + ": unsubscribe not quiet");
            rid = sent.getRequestId();
          }
        }
        default -> { }  // ping: answered by the server; filter, none set: not the replica's
      }
      ids.put(m.getRequestId(), rid);
    }

    void receive(SessionResponse m) {
      if (m.getRequestId() != 0) {
        long rid = ids.getOrDefault(m.getRequestId(), 0L);
        if (rid == 0) {
          return;  // the answer to a request the replica did not make
        }
        m = m.toBuilder().setRequestId(rid).build();
      }
      switch (m.getKindCase()) {
        case PONG -> {
          return;
        }
        case SNAPSHOT -> {
          SessionSnapshot s = m.getSnapshot();
          if (!s.getNotModified()) {
            try {
              assertEquals(s.getVersion(), FilterView.parse(s.getFilter().toByteArray()).version(),
                  name);
            } catch (MalformedFilterException ex) {
              fail(name + ": snapshot of version " + s.getVersion() + ": " + ex.getMessage());
            }
          }
        }
        case PUSH -> {
          if (!m.getPush().getReset()) {
            long[] want = recorded.stream().mapToLong(Xxh3::hashId).toArray();
            long[] got = m.getPush().getItemHashesList().stream().mapToLong(Long::longValue)
                .toArray();
            assertArrayEquals(want, got, name + ": push hashes against the ids " + recorded);
          }
        }
        default -> { }
      }
      recorded = new ArrayList<>();
      server.send(m);
      // The pong of a ping sent now follows the answer on the stream: once
      // it is back the replica has handled the answer.
      replica.sync(Duration.ofSeconds(5));
      compare();
    }

    void action(List<String> words) {
      switch (words.get(0)) {
        case "record" -> {
          Set<Long> ids = held.computeIfAbsent(key(words.get(1), words.get(2)),
              k -> new HashSet<>());
          recorded = new ArrayList<>();
          for (String w : words.subList(4, words.size())) {
            long id = Long.parseUnsignedLong(w);
            ids.add(id);
            named.add(id);
            recorded.add(id);
          }
        }
        case "delete" -> held.remove(key(words.get(1), words.get(2)));
        default -> { }  // advance, tick: the server's clock; it shows in its answers
      }
    }

    void compare() {
      long[] candidates = named.stream().mapToLong(Long::longValue).toArray();
      long[] hashes = new long[candidates.length];
      for (int i = 0; i < candidates.length; i++) {
        hashes[i] = Xxh3.hashId(candidates[i]);
      }
      synchronized (replica.lock) {
        for (Map.Entry<String, FilterReplica.Entry> kv : replica.entries.entrySet()) {
          FilterReplica.Entry e = kv.getValue();
          String who = name + ": " + e.surface + "/" + e.userId;
          boolean[] keep = replica.local(e, hashes);
          if (!(e.synced && e.subscribed)) {
            assertNull(keep, who + " answered locally while not synced");
            continue;
          }
          assertNotNull(keep, who + " synced but not answered locally");
          Set<Long> ids = held.getOrDefault(kv.getKey(), Set.of());
          for (int i = 0; i < candidates.length; i++) {
            assertEquals(!ids.contains(candidates[i]), keep[i],
                who + ": candidate " + candidates[i]);
          }
          checked += candidates.length;
        }
      }
    }

    Replay run() throws Exception {
      for (String line : Files.readAllLines(SESSION.resolve(name), StandardCharsets.UTF_8)) {
        if (line.isEmpty() || line.startsWith("#")) {
          continue;
        }
        String rest = line.substring(1).strip();
        switch (line.charAt(0)) {
          case '>' -> send(TextFormat.parse(rest, SessionRequest.class));
          case '<' -> receive(TextFormat.parse(rest, SessionResponse.class));
          case '!' -> action(words(rest));
          default -> fail(name + ": unknown line " + line);
        }
      }
      return this;
    }

    /** An action's words; "" is the empty surface or user. */
    static List<String> words(String s) {
      List<String> out = new ArrayList<>();
      for (String w : s.split("\\s+")) {
        out.add(w.length() >= 2 && w.startsWith("\"") && w.endsWith("\"")
            ? w.substring(1, w.length() - 1) : w);
      }
      return out;
    }

    @Override
    public void close() {
      replica.close();
      server.close();
    }
  }

  @Test
  void subscribeAndPush() throws Exception {
    try (Replay rp = new Replay("subscribe_and_push.transcript").run()) {
      FilterReplica.Stats s = rp.replica.stats();
      assertEquals(2, s.snapshots());
      assertEquals(3, s.pushes());
      assertEquals(1, s.resets());
      assertEquals(0, s.gaps());
      assertTrue(rp.checked > 0);
    }
  }

  @Test
  void filterVersionsAndLeases() throws Exception {
    try (Replay rp = new Replay("filter_versions_and_leases.transcript").run()) {
      FilterReplica.Stats s = rp.replica.stats();
      assertEquals(3, s.snapshots());
      assertEquals(1, s.notModified());
      assertEquals(1, s.expired());
      assertTrue(rp.checked > 0);
    }
  }

  @Test
  void errors() throws Exception {
    try (Replay rp = new Replay("errors.transcript").run()) {
      Map<String, StatusRuntimeException> refused = new HashMap<>();
      synchronized (rp.replica.lock) {
        rp.replica.entries.forEach((k, e) -> {
          if (e.refused != null) {
            refused.put(k, e.refused);
          }
        });
      }
      StatusRuntimeException empty = refused.get(Replay.key("homefeed", ""));
      assertNotNull(empty, "refused " + refused);
      assertEquals(Status.Code.INVALID_ARGUMENT, empty.getStatus().getCode());
      assertEquals("subscribe.user_id: empty", empty.getStatus().getDescription());
      StatusRuntimeException fourth = refused.get(Replay.key("", "d"));
      assertNotNull(fourth, "refused " + refused);
      assertEquals(Status.Code.RESOURCE_EXHAUSTED, fourth.getStatus().getCode());
      assertTrue(rp.checked > 0);
    }
  }

  @Test
  void quietUnsubscribe() throws Exception {
    // Nothing answers the quiet unsubscribe, and nothing the replica holds
    // depends on an answer; the refused one (user_id empty) is not the
    // replica's request (it holds no such user).
    try (Replay rp = new Replay("quiet_unsubscribe.transcript").run()) {
      FilterReplica.Stats s = rp.replica.stats();
      assertEquals(1, s.snapshots());
      assertEquals(0, s.pushes());
      synchronized (rp.replica.lock) {
        assertFalse(rp.replica.entries.containsKey(Replay.key("homefeed", "u1")));
      }
      assertTrue(rp.checked > 0);
    }
  }

  @Test
  void everyTranscriptIsReplayed() throws IOException {
    // A transcript added to session/ fails here until a test above replays
    // it (push_batches/ holds streams that opted into batches: not these).
    List<String> names;
    try (Stream<Path> files = Files.list(SESSION)) {
      names = files.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".transcript"))
          .sorted().toList();
    }
    assertEquals(List.of("errors.transcript", "filter_versions_and_leases.transcript",
        "quiet_unsubscribe.transcript", "subscribe_and_push.transcript"), names);
  }
}
