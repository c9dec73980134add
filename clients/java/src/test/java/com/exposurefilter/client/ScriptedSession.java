package com.exposurefilter.client;

import com.exposurefilter.v1.ExposureFilterGrpc;
import com.exposurefilter.v1.FilterRecalledRequest;
import com.exposurefilter.v1.FilterRecalledResponse;
import com.exposurefilter.v1.SessionError;
import com.exposurefilter.v1.SessionPong;
import com.exposurefilter.v1.SessionPush;
import com.exposurefilter.v1.SessionRequest;
import com.exposurefilter.v1.SessionResponse;
import com.exposurefilter.v1.SessionResync;
import com.exposurefilter.v1.SessionSnapshot;
import com.exposurefilter.v1.SessionUnsubscribed;
import com.google.protobuf.ByteString;
import io.grpc.ManagedChannel;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * An in-process server whose Session stream a test scripts: it answers
 * subscribes with a snapshot of the empty filter (tests/testdata/empty.json)
 * at the user's current sequence, pings with pongs at {@link #serverTimeMs},
 * mode-A filters (stream and unary) with "keep all", unsubscribes as a real
 * server does (unsubscribed, nothing when quiet, {@link #refuseUnsubscribes}
 * when set); the test pushes,
 * resyncs or ends the stream, holds snapshots or pongs back, and reads the
 * requests received.
 */
final class ScriptedSession implements AutoCloseable {
  static final byte[] EMPTY_FILTER = HexFormat.of().parseHex(
      "45585046020001007b14ae47e17a843f00ccbf1900000000bf4c4c906b1cd016");
  static final String EMPTY_VERSION = "16d01c6b904c4cbf";

  volatile long serverTimeMs = 1_000_000_000L;
  volatile long retentionMs = 10_000;
  volatile long sliceSpanMs = 1_000;
  volatile long idleTimeoutMs = 600_000;
  volatile boolean holdSnapshots;
  volatile boolean silent;  // no pongs
  volatile boolean lagging;
  volatile SessionError refuse;  // answers subscribes when set
  volatile SessionError refuseUnsubscribes;  // answers unsubscribes, quiet or not, when set
  final List<SessionRequest> received = new CopyOnWriteArrayList<>();
  final AtomicInteger unaryCalls = new AtomicInteger();
  final AtomicInteger streamsOpened = new AtomicInteger();
  final Map<String, Long> sequence = new HashMap<>();  // guarded by this
  final ManagedChannel channel;
  private final Server server;
  private StreamObserver<SessionResponse> out;  // guarded by this

  ScriptedSession() throws IOException {
    String name = "scripted-session-" + System.nanoTime();
    server = InProcessServerBuilder.forName(name).addService(new Service()).build().start();
    channel = InProcessChannelBuilder.forName(name).build();
  }

  synchronized void send(SessionResponse r) {
    if (out != null) {
      out.onNext(r);
    }
  }

  synchronized long seq(String user) {
    return sequence.getOrDefault(user, 0L);
  }

  synchronized void snapshot(String user) {
    send(SessionResponse.newBuilder().setSnapshot(SessionSnapshot.newBuilder()
        .setSurface("homefeed").setUserId(user).setSequence(seq(user))
        .setFilter(ByteString.copyFrom(EMPTY_FILTER)).setVersion(EMPTY_VERSION)
        .setServerTimeMs(serverTimeMs).setRetentionMs(retentionMs)
        .setSliceSpanMs(sliceSpanMs).setFpRate(0.01).setIdleTimeoutMs(idleTimeoutMs)).build());
  }

  /** A push at the user's next sequence (or at {@code skip} more: a gap). */
  synchronized void push(String user, int skip, long eventTimeMs, long... hashes) {
    long s = seq(user) + 1 + skip;
    sequence.put(user, s);
    SessionPush.Builder p = SessionPush.newBuilder().setSurface("homefeed").setUserId(user)
        .setSequence(s).setEventTimeMs(eventTimeMs);
    for (long h : hashes) {
      p.addItemHashes(h);
    }
    send(SessionResponse.newBuilder().setPush(p).build());
  }

  /** The user's filter deleted on the server: a push with reset. */
  synchronized void reset(String user) {
    long s = seq(user) + 1;
    sequence.put(user, s);
    send(SessionResponse.newBuilder().setPush(SessionPush.newBuilder().setSurface("homefeed")
        .setUserId(user).setSequence(s).setReset(true)).build());
  }

  /** The user's lease ran out. */
  void expire(String user) {
    send(SessionResponse.newBuilder().setUnsubscribed(SessionUnsubscribed.newBuilder()
        .setSurface("homefeed").setUserId(user).setReason(SessionUnsubscribed.Reason.IDLE))
        .build());
  }

  void resync() {
    send(SessionResponse.newBuilder().setResync(
        SessionResync.newBuilder().setReason(SessionResync.Reason.QUEUE_FULL)).build());
  }

  synchronized void endStream(Status status) {
    if (out != null) {
      out.onError(status.asRuntimeException());
      out = null;
    }
  }

  long subscribes(String user) {
    return received.stream().filter(r -> r.hasSubscribe()
        && r.getSubscribe().getUserId().equals(user)).count();
  }

  @Override
  public void close() {
    channel.shutdownNow();
    server.shutdownNow();
  }

  private static FilterRecalledResponse keepAll(FilterRecalledRequest q) {
    int n = q.getCandidateIdsCount() + q.getCandidateKeysCount();
    byte[] mask = new byte[(n + 7) / 8];
    for (int i = 0; i < n; i++) {
      mask[i >> 3] |= (byte) (1 << (i & 7));
    }
    return FilterRecalledResponse.newBuilder().setKeepMask(ByteString.copyFrom(mask)).build();
  }

  private final class Service extends ExposureFilterGrpc.ExposureFilterImplBase {
    @Override
    public void filterRecalled(FilterRecalledRequest q, StreamObserver<FilterRecalledResponse> o) {
      unaryCalls.incrementAndGet();
      o.onNext(keepAll(q));
      o.onCompleted();
    }

    @Override
    public StreamObserver<SessionRequest> session(StreamObserver<SessionResponse> o) {
      synchronized (ScriptedSession.this) {
        out = o;
      }
      streamsOpened.incrementAndGet();
      return new StreamObserver<>() {
        @Override
        public void onNext(SessionRequest r) {
          received.add(r);
          synchronized (ScriptedSession.this) {
            if (out != o) {
              return;
            }
            SessionResponse.Builder a = SessionResponse.newBuilder().setRequestId(r.getRequestId());
            switch (r.getKindCase()) {
              case SUBSCRIBE -> {
                if (refuse != null) {
                  send(a.setError(refuse).build());
                } else if (!holdSnapshots) {
                  snapshot(r.getSubscribe().getUserId());
                }
              }
              case PING -> {
                if (!silent) {
                  send(a.setPong(SessionPong.newBuilder().setServerTimeMs(serverTimeMs)
                      .setLagging(lagging)).build());
                }
              }
              case FILTER -> send(refuse != null ? a.setError(refuse).build()
                  : a.setFilter(keepAll(r.getFilter())).build());
              case UNSUBSCRIBE -> {
                if (refuseUnsubscribes != null) {
                  send(a.setError(refuseUnsubscribes).build());
                } else if (!r.getUnsubscribe().getQuiet()) {
                  send(a.setUnsubscribed(SessionUnsubscribed.newBuilder()
                      .setSurface(r.getUnsubscribe().getSurface())
                      .setUserId(r.getUnsubscribe().getUserId())
                      .setReason(SessionUnsubscribed.Reason.REQUESTED)).build());
                }
              }
              default -> { }
            }
          }
        }

        @Override
        public void onError(Throwable t) {
        }

        @Override
        public void onCompleted() {
          synchronized (ScriptedSession.this) {
            if (out == o) {
              out = null;
              o.onCompleted();
            }
          }
        }
      };
    }
  }
}
