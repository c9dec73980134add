package com.exposurefilter.client;

import com.exposurefilter.v1.ExposureFilterGrpc;
import com.exposurefilter.v1.FilterRecalledRequest;
import com.exposurefilter.v1.FilterRecalledResponse;
import com.exposurefilter.v1.ResultMode;
import com.exposurefilter.v1.SessionPing;
import com.exposurefilter.v1.SessionPong;
import com.exposurefilter.v1.SessionPush;
import com.exposurefilter.v1.SessionRequest;
import com.exposurefilter.v1.SessionResponse;
import com.exposurefilter.v1.SessionSnapshot;
import com.exposurefilter.v1.SessionSubscribe;
import com.exposurefilter.v1.SessionUnsubscribe;
import com.exposurefilter.v1.SessionUnsubscribed;
import com.google.protobuf.ByteString;
import io.grpc.Channel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * Mode B+ for Java recall servers (docs/session-stream.md): one Session
 * stream to a server; each user checked is subscribed on first use, its
 * filter arrives once (format 2, decoded by {@link FilterView}) and every
 * exposure the server applies for it after that is pushed as exact item
 * hashes, so a check is a local computation with no call at all.
 *
 * <p>Whenever the local copy cannot be trusted the check is answered through
 * mode A instead, on the stream (or by the unary FilterRecalled while the
 * stream is down): the copy is not synced (first snapshot, a sequence gap, a
 * resync, an expired lease, the stream's end), the newest pong answers a ping
 * sent more than {@code maxStaleness} ago (or the server says it lags), or a
 * slice held is at its expiry and the server's clock cannot be told from
 * here. So a check never misses an exposure the server acknowledged more
 * than {@code maxStaleness} before it (the spec's guarantee).
 *
 * <pre>{@code
 * try (FilterReplica replica = FilterReplica.builder(channel).build()) {
 *   boolean[] keep = replica.check("homefeed", "u1", new long[] {101, 102}, List.of("video:9"));
 * }
 * }</pre>
 *
 * <p>The local answer is FilterRecalled's with one difference, in the safe
 * direction: a fresh candidate that collides only with fingerprints the
 * server recorded after the last snapshot is kept here (the pushed items are
 * held exactly) and removed there. A fresh snapshot (compaction past
 * {@code compactAfterItems} pushed items) makes them identical again.
 *
 * <p>Memory is bounded by {@code maxBytes} (filters and pushed items, as
 * estimated by {@link FilterView#retainedBytes} and {@link #PUSHED_ITEM_BYTES}):
 * past it the least recently checked user is unsubscribed and dropped.
 * Thread-safe: gRPC's threads deliver the stream, one daemon thread pings;
 * checks may come from any thread. One replica per server (per owner, with
 * scale-out).
 */
public final class FilterReplica implements AutoCloseable {
  /** Where a check's answer came from. */
  public enum Path { LOCAL, STREAM, UNARY }

  /** A check's answer: keep[i] (true: never shown, keep) for ids then keys, and its path. */
  public record Result(boolean[] keep, Path path) {}

  /**
   * Counters since creation and the current state. {@code subscribesInFlight}:
   * subscribes sent and not yet answered (by a snapshot or an error); a user
   * forgotten or evicted takes its own off.
   */
  public record Stats(long localChecks, long streamChecks, long unaryChecks, long failedChecks,
      long notSynced, long stale, long aging, long snapshots, long notModified, long pushes,
      long pushedItems, long gaps, long resyncs, long resets, long expired, long compactions,
      long reconnects, long evictions, long bytesHeld, int usersHeld, int subscribesInFlight,
      Duration staleness) {
    /** Local checks over answered checks (0 before any). */
    public double hitRatio() {
      long answered = localChecks + streamChecks + unaryChecks;
      return answered == 0 ? 0.0 : (double) localChecks / answered;
    }
  }

  /** Bytes a user costs beyond its filter's: the entry, its strings, the maps' slots. */
  static final long ENTRY_OVERHEAD_BYTES = 512;
  /** Per pushed item: a HashMap node with a boxed key and value. */
  static final long PUSHED_ITEM_BYTES = 80;
  /** At most this many pings unanswered: a silent server is not made to queue more. */
  static final int MAX_PINGS_IN_FLIGHT = 256;
  static final int FORMAT = 2;

  /** Options; see the setters. */
  public static final class Builder {
    private final Channel channel;
    private long maxBytes = 256L << 20;
    private Duration maxStaleness = Duration.ofMillis(100);
    private Duration pingInterval = Duration.ofMillis(20);
    private Duration timeout = Duration.ofMillis(500);
    private int compactAfterItems = 4096;
    private Duration reconnectBackoff = Duration.ofMillis(100);
    private Executor asyncExecutor = ForkJoinPool.commonPool();

    private Builder(Channel channel) {
      this.channel = Objects.requireNonNull(channel, "channel");
    }

    /** Bound on filters and pushed items held (default 256 MiB, at least 1 MiB). */
    public Builder maxBytes(long v) {
      maxBytes = v;
      return this;
    }

    /** A check is local only if a pong answers a ping sent within this (default 100 ms). */
    public Builder maxStaleness(Duration v) {
      maxStaleness = v;
      return this;
    }

    /** How often the stream is pinged (default 20 ms; less than maxStaleness). */
    public Builder pingInterval(Duration v) {
      pingInterval = v;
      return this;
    }

    /** How long a first subscribe, and then a mode-A answer, may take (default 500 ms). */
    public Builder timeout(Duration v) {
      timeout = v;
      return this;
    }

    /** Re-subscribe (a fresh snapshot) once a user holds this many pushed items (4096). */
    public Builder compactAfterItems(int v) {
      compactAfterItems = v;
      return this;
    }

    /** A stream that ended is reopened after this (default 100 ms). */
    public Builder reconnectBackoff(Duration v) {
      reconnectBackoff = v;
      return this;
    }

    /** Where {@link #checkAsync} runs checks (default the common pool). */
    public Builder asyncExecutor(Executor v) {
      asyncExecutor = Objects.requireNonNull(v);
      return this;
    }

    /** Opens the stream; IllegalArgumentException on inconsistent options. */
    public FilterReplica build() {
      if (pingInterval.isNegative() || pingInterval.isZero()
          || pingInterval.compareTo(maxStaleness) >= 0) {
        throw new IllegalArgumentException(
            "need 0 < pingInterval < maxStaleness (a healthy stream must stay fresh)");
      }
      if (maxBytes < 1L << 20 || compactAfterItems < 1 || timeout.isNegative()
          || timeout.isZero()) {
        throw new IllegalArgumentException(
            "need maxBytes >= 1 MiB, compactAfterItems >= 1, timeout > 0");
      }
      return new FilterReplica(this);
    }
  }

  public static Builder builder(Channel channel) {
    return new Builder(channel);
  }

  /**
   * One user's copy. Guarded by the replica's lock. Package-private, as are
   * Stream, lock, entries, liveStream, local, getOrCreate and subscribe:
   * SessionTranscriptsTest replays the golden transcripts through the
   * replica's own message handling with them.
   */
  static final class Entry {
    final String surface;
    final String userId;
    FilterView filter;  // the last snapshot's (null: nothing claimed)
    FilterView view;    // the same without the slices aged out
    String version = "";
    HashMap<Long, Long> pushed = new HashMap<>();  // hash -> newest slice index
    long sequence;
    boolean synced;
    boolean subscribed;
    boolean compacting;
    StatusRuntimeException refused;
    long retentionMs;
    long spanMs = 1;
    long nextExpiryMs = Long.MAX_VALUE;  // MAX_VALUE: nothing held ages
    long renewAtNanos = Long.MAX_VALUE;
    long subscribeId;
    long bytes;

    Entry(String surface, String userId) {
      this.surface = surface;
      this.userId = userId;
    }

    void updateExpiry() {
      long min = Long.MAX_VALUE;
      if (view != null) {
        for (FilterView.Slice s : view.slices()) {
          min = Math.min(min, s.endMs);
        }
      }
      for (long slice : pushed.values()) {
        min = Math.min(min, (slice + 1) * spanMs);
      }
      nextExpiryMs = min == Long.MAX_VALUE ? Long.MAX_VALUE : min + retentionMs;
    }

    /** Drops what the server's clock, as far as it has shown it, has aged out. */
    void age(long seenMs) {
      long cutoff = seenMs - retentionMs;
      if (view != null) {
        view = view.withSlicesEndingAfter(cutoff);
      }
      pushed.values().removeIf(s -> (s + 1) * spanMs <= cutoff);
      updateExpiry();
    }

    long cost() {
      return ENTRY_OVERHEAD_BYTES + 2L * (surface.length() + userId.length())
          + (filter != null ? filter.retainedBytes() : 0) + pushed.size() * PUSHED_ITEM_BYTES;
    }
  }

  /** A mode-A request on the stream waiting for its answer. */
  private static final class Pending {
    boolean done;
    ByteString keepMask;
    StatusRuntimeException error;
  }

  /** One Session call. */
  final class Stream implements StreamObserver<SessionResponse> {
    StreamObserver<SessionRequest> requests;
    boolean ended;  // guarded by lock
    boolean finished;  // gRPC ended the call (guarded by lock)

    @Override
    public void onNext(SessionResponse r) {
      onResponse(this, r);
    }

    @Override
    public void onError(Throwable t) {
      onEnded(this);
    }

    @Override
    public void onCompleted() {
      onEnded(this);
    }

    /** Lock held: the requests observer is not thread-safe, and order matters. */
    void send(SessionRequest r) {
      if (!ended) {
        try {
          requests.onNext(r);
        } catch (RuntimeException e) {
          // A call already cancelled: its end is on its way to onEnded.
        }
      }
    }
  }

  private final Builder opt;
  private final long maxStalenessNanos;
  private final ExposureFilterGrpc.ExposureFilterStub async;
  private final ExposureFilterGrpc.ExposureFilterBlockingStub blocking;
  final Object lock = new Object();
  private final ScheduledExecutorService pinger;
  final LinkedHashMap<String, Entry> entries = new LinkedHashMap<>();
  private final Map<Long, Long> pings = new HashMap<>();  // id -> nanoTime sent
  private final Map<Long, Entry> subscribes = new HashMap<>();
  private final Map<Long, Pending> filters = new HashMap<>();
  private long nextId = 1;
  private boolean closed;
  private Stream stream;
  private long reconnectAtNanos;
  private long bytes;
  // The server's clock as shown: the largest server_time_ms received, and
  // the newest pong's server time with the nanoTime its ping was sent.
  private long seenMs;
  private long refMs;
  private long refSentNanos;
  private boolean haveRef;
  private boolean lagging;
  private long localChecks, streamChecks, unaryChecks, failedChecks, notSynced, stale, aging,
      snapshots, notModified, pushes, pushedItems, gaps, resyncs, resets, expired, compactions,
      reconnects, evictions;

  private FilterReplica(Builder b) {
    this.opt = b;
    this.maxStalenessNanos = b.maxStaleness.toNanos();
    this.async = ExposureFilterGrpc.newStub(b.channel);
    this.blocking = ExposureFilterGrpc.newBlockingStub(b.channel);
    ScheduledThreadPoolExecutor p = new ScheduledThreadPoolExecutor(1, r -> {
      Thread t = new Thread(r, "exposure-filter-session-ping");
      t.setDaemon(true);
      return t;
    });
    this.pinger = p;
    synchronized (lock) {
      openStream();
    }
    long every = b.pingInterval.toNanos();
    pinger.scheduleWithFixedDelay(this::pingTick, every, every, TimeUnit.NANOSECONDS);
  }

  private static String key(String surface, String userId) {
    return surface + '\u0000' + userId;
  }

  // ------------------------------------------------------------ public face

  /** keep[i] (true: keep, never shown) for ids, then keys. */
  public boolean[] check(String surface, String userId, long[] ids, List<String> keys) {
    return checkPath(surface, userId, ids, keys).keep();
  }

  /** As {@link #checkPath}, on the builder's executor. */
  public CompletableFuture<Result> checkAsync(String surface, String userId, long[] ids,
      List<String> keys) {
    return CompletableFuture.supplyAsync(() -> checkPath(surface, userId, ids, keys),
        opt.asyncExecutor);
  }

  /**
   * The answer and where it came from. Throws StatusRuntimeException with the
   * server's code and message (an empty key is INVALID_ARGUMENT before any
   * call), or DEADLINE_EXCEEDED / UNAVAILABLE when no answer came.
   */
  public Result checkPath(String surface, String userId, long[] ids, List<String> keys) {
    if (ids == null) {
      ids = new long[0];
    }
    if (keys == null) {
      keys = List.of();
    }
    int n = ids.length + keys.size();
    long[] hashes = new long[n];
    for (int i = 0; i < ids.length; i++) {
      hashes[i] = Xxh3.hashId(ids[i]);
    }
    for (int i = 0; i < keys.size(); i++) {
      byte[] k = keys.get(i).getBytes(StandardCharsets.UTF_8);
      if (k.length == 0) {
        throw Status.INVALID_ARGUMENT.withDescription("candidate_keys[" + i + "]: empty")
            .asRuntimeException();
      }
      hashes[ids.length + i] = Xxh3.hashKey(k);
    }
    long deadline = System.nanoTime() + opt.timeout.toNanos();
    synchronized (lock) {
      Entry e = getOrCreate(surface, userId);
      Stream s = liveStream();
      long now = System.nanoTime();
      boolean first = false;
      if (s != null && !e.subscribed) {
        first = e.filter == null && !e.synced;
        subscribe(e, s);
      } else if (s != null && e.synced && e.renewAtNanos != Long.MAX_VALUE
          && now - e.renewAtNanos >= 0) {
        subscribe(e, s);  // renew the lease; the snapshot also compacts
      }
      if (first) {
        // The snapshot, and the pong of the ping sent right behind the
        // subscribe, are one round trip away: what mode A would cost.
        while (!e.synced && e.refused == null && e.subscribed && await(deadline)) {
          // wait
        }
        while ((!haveRef || refSentNanos - now < 0) && liveStream() != null
            && await(deadline)) {
          // wait
        }
      }
      boolean[] keep = local(e, hashes);
      if (keep != null) {
        localChecks++;
        return new Result(keep, Path.LOCAL);
      }
    }
    try {
      return modeA(surface, userId, ids, keys, n, System.nanoTime() + opt.timeout.toNanos());
    } catch (StatusRuntimeException ex) {
      synchronized (lock) {
        failedChecks++;
      }
      throw ex;
    }
  }

  /**
   * Returns once a ping sent now is answered: every write the server had
   * acknowledged before the call is then in the copies of synced users (or
   * the replica knows they are not synced). UNAVAILABLE / DEADLINE_EXCEEDED
   * otherwise.
   */
  public void sync(Duration timeout) {
    long deadline = System.nanoTime() + timeout.toNanos();
    synchronized (lock) {
      Stream s = liveStream();
      if (s == null) {
        throw Status.UNAVAILABLE.withDescription("session: the stream is down")
            .asRuntimeException();
      }
      long sent = System.nanoTime();
      if (sendPing(s) == 0) {
        throw Status.UNAVAILABLE.withDescription("session: too many pings unanswered")
            .asRuntimeException();
      }
      while (!haveRef || refSentNanos - sent < 0) {
        if (liveStream() != s) {
          throw Status.UNAVAILABLE.withDescription("session: the stream ended")
              .asRuntimeException();
        }
        if (!await(deadline)) {
          throw Status.DEADLINE_EXCEEDED.withDescription("session: no pong within the timeout")
              .asRuntimeException();
        }
      }
    }
  }

  /** Drops the user's copy and unsubscribes it; the next check subscribes again. */
  public void forget(String surface, String userId) {
    synchronized (lock) {
      Entry e = entries.remove(key(surface, userId));
      if (e != null) {
        bytes -= e.bytes;
        e.bytes = 0;
        drop(e);
      }
    }
  }

  /**
   * Ends the stream and opens a new one: every user is answered through
   * mode A until its new snapshot. Done on its own after the stream ends,
   * or when pings go unanswered for 10 x maxStaleness (at least 1 s).
   */
  public void reconnect() {
    synchronized (lock) {
      if (closed) {
        return;
      }
      Stream old = stream;
      if (old != null) {
        reconnects++;
        endStream(old);
        try {
          old.requests.onError(Status.CANCELLED.withDescription("reconnect").asException());
        } catch (RuntimeException ignored) {
          // already ended
        }
      }
      openStream();
    }
  }

  /** Half-closes the stream (the server ends it with OK) and stops the pinger. */
  @Override
  public void close() {
    Stream s;
    synchronized (lock) {
      if (closed) {
        return;
      }
      closed = true;
      s = stream;
      if (s != null && !s.ended) {
        try {
          s.requests.onCompleted();
        } catch (RuntimeException ignored) {
          // already ended
        }
        endStream(s);
        // The server ends a half-closed stream with OK; cancel only if it
        // does not within a second.
        long deadline = System.nanoTime() + 1_000_000_000L;
        while (!s.finished && deadline - System.nanoTime() > 0) {
          try {
            TimeUnit.NANOSECONDS.timedWait(lock, deadline - System.nanoTime());
          } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
            break;
          }
        }
        if (!s.finished) {
          try {
            s.requests.onError(Status.CANCELLED.withDescription("closed").asException());
          } catch (RuntimeException ignored) {
            // already ended
          }
        }
      }
      lock.notifyAll();
    }
    pinger.shutdownNow();
  }

  public Stats stats() {
    synchronized (lock) {
      Duration staleness = haveRef ? Duration.ofNanos(System.nanoTime() - refSentNanos) : null;
      return new Stats(localChecks, streamChecks, unaryChecks, failedChecks, notSynced, stale,
          aging, snapshots, notModified, pushes, pushedItems, gaps, resyncs, resets, expired,
          compactions, reconnects, evictions, bytes, entries.size(), subscribes.size(),
          staleness);
    }
  }

  // ------------------------------------------------------- checks (lock held)

  private boolean await(long deadline) {
    long left = deadline - System.nanoTime();
    if (left <= 0 || closed) {
      return false;
    }
    try {
      TimeUnit.NANOSECONDS.timedWait(lock, left);
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
      return false;
    }
    return true;
  }

  Stream liveStream() {
    Stream s = stream;
    return s != null && !s.ended && !closed ? s : null;
  }

  private boolean fresh(long now) {
    return liveStream() != null && !lagging && haveRef
        && now - refSentNanos <= maxStalenessNanos;
  }

  /** The local answer, or null (counted) when the copy cannot be trusted. */
  boolean[] local(Entry e, long[] hashes) {
    long now = System.nanoTime();
    if (!e.synced) {
      notSynced++;
      return null;
    }
    if (!fresh(now)) {
      stale++;
      return null;
    }
    if (e.nextExpiryMs <= seenMs) {
      e.age(seenMs);
      account(e);
    }
    // The latest the server's clock can read now: it read the ping after it
    // was sent (equal clock rates).
    long upper = refMs + (now - refSentNanos) / 1_000_000 + 1;
    if (e.nextExpiryMs <= upper) {
      aging++;  // a slice at its expiry: wait for a pong past it
      return null;
    }
    boolean[] keep;
    if (e.view != null) {
      keep = e.view.keepMaskHashes(hashes);
    } else {
      keep = new boolean[hashes.length];
      java.util.Arrays.fill(keep, true);
    }
    if (!e.pushed.isEmpty()) {
      for (int i = 0; i < hashes.length; i++) {
        if (keep[i] && e.pushed.containsKey(hashes[i])) {
          keep[i] = false;
        }
      }
    }
    return keep;
  }

  private Result modeA(String surface, String userId, long[] ids, List<String> keys, int n,
      long deadline) {
    FilterRecalledRequest.Builder rb = FilterRecalledRequest.newBuilder().setSurface(surface)
        .setUserId(userId).addAllCandidateKeys(keys).setMode(ResultMode.KEEP_MASK);
    for (long id : ids) {
      rb.addCandidateIds(id);
    }
    FilterRecalledRequest request = rb.build();
    synchronized (lock) {
      Stream s = liveStream();
      if (s != null) {
        long rid = nextId++;
        Pending pending = new Pending();
        filters.put(rid, pending);
        s.send(SessionRequest.newBuilder().setRequestId(rid).setFilter(request).build());
        while (!pending.done && await(deadline)) {
          // wait
        }
        if (!pending.done) {
          filters.remove(rid);
          throw Status.DEADLINE_EXCEEDED.withDescription("session: no answer to filter within "
              + opt.timeout.toMillis() + " ms").asRuntimeException();
        }
        if (pending.error != null) {
          throw pending.error;
        }
        if (pending.keepMask != null) {
          streamChecks++;
          return new Result(unpack(pending.keepMask, n), Path.STREAM);
        }
        // The stream ended before the answer: the unary call.
      }
    }
    long left = Math.max(deadline - System.nanoTime(), 1_000_000);
    FilterRecalledResponse resp =
        blocking.withDeadlineAfter(left, TimeUnit.NANOSECONDS).filterRecalled(request);
    boolean[] keep = unpack(resp.getKeepMask(), n);
    synchronized (lock) {
      unaryChecks++;
    }
    return new Result(keep, Path.UNARY);
  }

  private static boolean[] unpack(ByteString mask, int n) {
    if (mask.size() != (n + 7) / 8) {
      throw Status.INTERNAL.withDescription("keep_mask of " + mask.size() + " bytes for " + n
          + " candidates").asRuntimeException();
    }
    boolean[] keep = new boolean[n];
    for (int i = 0; i < n; i++) {
      keep[i] = (mask.byteAt(i >> 3) >> (i & 7) & 1) != 0;
    }
    return keep;
  }

  // ------------------------------------------------ the copies (lock held)

  /** The user's entry, now the most recently used (entries is in insertion order). */
  Entry getOrCreate(String surface, String userId) {
    String k = key(surface, userId);
    Entry e = entries.remove(k);
    if (e == null) {
      e = new Entry(surface, userId);
      entries.put(k, e);
      account(e);
    } else {
      entries.put(k, e);
    }
    return e;
  }

  /** A lookup that does not count as use. */
  private Entry find(String surface, String userId) {
    return entries.get(key(surface, userId));
  }

  /** A subscribe with the version held and a ping right behind it. */
  void subscribe(Entry e, Stream s) {
    long rid = nextId++;
    e.subscribed = true;
    e.refused = null;
    if (e.subscribeId != 0) {
      subscribes.remove(e.subscribeId);
    }
    e.subscribeId = rid;
    e.renewAtNanos = Long.MAX_VALUE;  // set again by the snapshot
    subscribes.put(rid, e);
    s.send(SessionRequest.newBuilder().setRequestId(rid).setSubscribe(
        SessionSubscribe.newBuilder().setSurface(e.surface).setUserId(e.userId)
            .setIfVersion(e.version).addAcceptedFormats(FORMAT)).build());
    sendPing(s);
  }

  /** The ping's id, or 0 when too many are unanswered. */
  private long sendPing(Stream s) {
    if (pings.size() >= MAX_PINGS_IN_FLIGHT) {
      return 0;
    }
    long rid = nextId++;
    pings.put(rid, System.nanoTime());
    s.send(SessionRequest.newBuilder().setRequestId(rid).setPing(SessionPing.getDefaultInstance())
        .build());
    return rid;
  }

  /** Re-accounts e's bytes and evicts the least recently checked users beyond maxBytes. */
  private void account(Entry e) {
    if (!entries.containsKey(key(e.surface, e.userId))) {
      return;  // evicted since
    }
    long cost = e.cost();
    bytes += cost - e.bytes;
    e.bytes = cost;
    Iterator<Entry> it = entries.values().iterator();
    while (bytes > opt.maxBytes && entries.size() > 1 && it.hasNext()) {
      Entry victim = it.next();
      if (victim == e) {
        continue;
      }
      it.remove();
      bytes -= victim.bytes;
      victim.bytes = 0;
      evictions++;
      drop(victim);
    }
  }

  private void drop(Entry e) {
    e.synced = false;
    if (e.subscribeId != 0) {
      // A subscribe still unanswered: its answer will find no entry, so
      // nothing else would take its id off the map while the stream lasts.
      subscribes.remove(e.subscribeId);
      e.subscribeId = 0;
    }
    Stream s = liveStream();
    if (e.subscribed && s != null) {
      // Quiet: no answer wanted. The user is no longer held, so its pushes
      // still in flight are dropped (onPush), and a refused unsubscribe's
      // error matches no request waited for (onAnswer).
      s.send(SessionRequest.newBuilder().setRequestId(nextId++).setUnsubscribe(
          SessionUnsubscribe.newBuilder().setSurface(e.surface).setUserId(e.userId)
              .setQuiet(true)).build());
    }
    e.subscribed = false;
  }

  // ------------------------------------------------------ what the stream brings

  private void onResponse(Stream s, SessionResponse r) {
    synchronized (lock) {
      if (s != stream || s.ended) {
        return;  // a stream replaced since
      }
      switch (r.getKindCase()) {
        case SNAPSHOT -> onSnapshot(r.getSnapshot());
        case PUSH -> onPush(r.getPush(), s);
        case FILTER, ERROR -> onAnswer(r);
        case PONG -> onPong(r.getRequestId(), r.getPong());
        case RESYNC -> {
          resyncs++;
          for (Entry e : entries.values()) {
            e.synced = false;
          }
        }
        case UNSUBSCRIBED -> {
          SessionUnsubscribed u = r.getUnsubscribed();
          if (u.getReason() == SessionUnsubscribed.Reason.IDLE) {
            expired++;
            Entry e = find(u.getSurface(), u.getUserId());
            if (e != null) {
              e.subscribed = false;
              e.synced = false;
            }
          }
        }
        default -> { }
      }
      lock.notifyAll();
    }
  }

  private void onAnswer(SessionResponse r) {
    Pending pending = filters.remove(r.getRequestId());
    if (pending != null) {
      pending.done = true;
      if (r.hasFilter()) {
        pending.keepMask = r.getFilter().getKeepMask();
      } else {
        pending.error = errorOf(r);
      }
      return;
    }
    Entry e = subscribes.remove(r.getRequestId());
    if (e != null && r.hasError()) {
      e.refused = errorOf(r);
      e.subscribeId = 0;
      e.subscribed = false;
      e.synced = false;
    }
  }

  private static StatusRuntimeException errorOf(SessionResponse r) {
    return Status.fromCodeValue(r.getError().getCode())
        .withDescription(r.getError().getMessage()).asRuntimeException();
  }

  private void onPong(long rid, SessionPong pong) {
    Long sent = pings.get(rid);
    if (sent == null) {
      return;
    }
    // Older pings are answered already or never will be (FIFO).
    pings.values().removeIf(t -> t - sent <= 0);
    if (!haveRef || sent - refSentNanos >= 0) {
      haveRef = true;
      refSentNanos = sent;
      refMs = pong.getServerTimeMs();
      lagging = pong.getLagging();
    }
    seenMs = Math.max(seenMs, pong.getServerTimeMs());
  }

  private void onSnapshot(SessionSnapshot s) {
    seenMs = Math.max(seenMs, s.getServerTimeMs());
    Entry e = find(s.getSurface(), s.getUserId());
    if (e == null) {
      return;  // evicted since it was subscribed
    }
    // Taken as the one for its user, whatever its request_id.
    subscribes.remove(e.subscribeId);
    e.subscribeId = 0;
    snapshots++;
    if (s.getNotModified()) {
      notModified++;
      if (e.filter == null || !s.getVersion().equals(e.version)) {
        untrusted(e, "session: not_modified for version \"" + s.getVersion() + "\", not held");
        return;
      }
    } else {
      try {
        FilterView view = FilterView.parse(s.getFilter().toByteArray());
        if (!view.version().equals(s.getVersion())) {
          throw new MalformedFilterException("checksum " + view.version()
              + " is not the version \"" + s.getVersion() + "\"");
        }
        e.filter = view;
        e.version = s.getVersion();
      } catch (MalformedFilterException ex) {
        untrusted(e, "session: snapshot: " + ex.getMessage());
        return;
      }
    }
    e.view = e.filter;
    e.pushed = new HashMap<>();
    e.sequence = s.getSequence();
    e.retentionMs = s.getRetentionMs();
    e.spanMs = Math.max(1, s.getSliceSpanMs());
    e.synced = true;
    e.subscribed = true;
    e.compacting = false;
    e.refused = null;
    e.renewAtNanos = System.nanoTime() + s.getIdleTimeoutMs() * 500_000L;
    e.updateExpiry();
    account(e);
  }

  /** Never used: the user is answered through mode A until a good snapshot. */
  private static void untrusted(Entry e, String why) {
    e.synced = false;
    e.subscribed = false;
    e.refused = Status.DATA_LOSS.withDescription(why).asRuntimeException();
  }

  private void onPush(SessionPush p, Stream s) {
    Entry e = find(p.getSurface(), p.getUserId());
    if (e == null || !e.synced || Long.compareUnsigned(p.getSequence(), e.sequence) <= 0) {
      return;
    }
    pushes++;
    if (p.getSequence() != e.sequence + 1) {
      gaps++;  // something was lost: not trusted until a new snapshot
      e.synced = false;
      subscribe(e, s);
      return;
    }
    e.sequence = p.getSequence();
    if (p.getReset()) {
      resets++;
      e.filter = null;
      e.view = null;
      e.version = "";
      e.pushed = new HashMap<>();
    } else {
      pushedItems += p.getItemHashesCount();
      long slice = Math.floorDiv(p.getEventTimeMs(), e.spanMs);
      for (long h : p.getItemHashesList()) {
        e.pushed.merge(h, slice, Math::max);
      }
      if (e.pushed.size() >= opt.compactAfterItems && !e.compacting) {
        compactions++;
        e.compacting = true;
        subscribe(e, s);
      }
    }
    e.updateExpiry();
    account(e);
  }

  private void onEnded(Stream s) {
    synchronized (lock) {
      s.finished = true;
      lock.notifyAll();
      if (s != stream || s.ended) {
        s.ended = true;
        return;
      }
      endStream(s);
      reconnectAtNanos = System.nanoTime() + opt.reconnectBackoff.toNanos();
      lock.notifyAll();
    }
  }

  /** The current stream's end: nothing synced, waiting requests to the unary call. */
  private void endStream(Stream s) {
    s.ended = true;
    for (Pending p : filters.values()) {
      p.done = true;  // no mask, no error: the unary call
    }
    filters.clear();
    subscribes.clear();
    pings.clear();
    for (Entry e : entries.values()) {
      e.synced = false;
      e.subscribed = false;
    }
    lock.notifyAll();
  }

  private void openStream() {
    Stream s = new Stream();
    stream = s;
    haveRef = false;  // nothing vouched for yet
    pings.clear();
    reconnectAtNanos = System.nanoTime() + opt.reconnectBackoff.toNanos();
    s.requests = async.session(s);
  }

  // ------------------------------------------------------------------ pinger

  private void pingTick() {
    try {
      long silence = Math.max(1_000_000_000L, 10 * maxStalenessNanos);
      synchronized (lock) {
        if (closed) {
          return;
        }
        long now = System.nanoTime();
        Stream s = liveStream();
        if (s == null) {
          if (now - reconnectAtNanos >= 0) {
            reconnect();
          }
          return;
        }
        for (long t : pings.values()) {
          if (now - t > silence) {
            reconnect();
            return;
          }
        }
        if (!entries.isEmpty()) {
          sendPing(s);
        }
      }
    } catch (RuntimeException e) {
      // Never let the scheduled task die; the next tick tries again.
    }
  }
}
