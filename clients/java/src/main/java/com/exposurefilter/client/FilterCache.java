package com.exposurefilter.client;

import com.exposurefilter.v1.GetFilterRequest;
import com.exposurefilter.v1.GetFilterResponse;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/**
 * Pull mode: the last filter of each (surface, user), revalidated on every
 * {@link #get} with {@code if_version} (an unchanged filter costs one small
 * round trip and no bytes), through a {@link RoutingClient} (so with its
 * failover between owners). Bytes that do not parse, or whose checksum is
 * not the announced version, fail with DATA_LOSS and are never cached.
 * Bounded by bytes: the views' {@link FilterView#retainedBytes} add up to at
 * most {@code maxBytes}, least recently used evicted first (a single filter
 * above the bound is returned but not kept). Thread-safe.
 *
 * <pre>{@code
 * FilterCache cache = new FilterCache(router, 64L << 20);
 * FilterView view = cache.get("homefeed", "u1");
 * boolean[] keep = view.keepMaskIds(candidates);
 * }</pre>
 */
public final class FilterCache {

  /** Counters since creation. */
  public record Stats(long fullPulls, long notModified, long errors, long evictions,
      int users, long bytes) {}

  private record Key(String surface, String user) {}

  private final RoutingClient router;
  private final long maxBytes;
  private final LinkedHashMap<Key, FilterView> views = new LinkedHashMap<>(16, 0.75f, true);
  private long bytes;
  private long fullPulls;
  private long notModified;
  private long errors;
  private long evictions;

  public FilterCache(RoutingClient router, long maxBytes) {
    if (maxBytes < 0) {
      throw new IllegalArgumentException("maxBytes: must be >= 0, got " + maxBytes);
    }
    this.router = router;
    this.maxBytes = maxBytes;
  }

  /** The user's filter, revalidated now; throws StatusRuntimeException. */
  public FilterView get(String surface, String userId) {
    try {
      return getAsync(surface, userId).get();
    } catch (ExecutionException e) {
      if (e.getCause() instanceof RuntimeException re) {
        throw re;
      }
      throw new StatusRuntimeException(Status.fromThrowable(e.getCause()));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw Status.CANCELLED.withDescription("interrupted").asRuntimeException();
    }
  }

  public CompletableFuture<FilterView> getAsync(String surface, String userId) {
    Key key = new Key(surface, userId);
    FilterView cached;
    synchronized (this) {
      cached = views.get(key);
    }
    GetFilterRequest.Builder q = GetFilterRequest.newBuilder().setSurface(surface)
        .setUserId(userId);
    // The versions FilterView reads: a server that moves past them refuses
    // clearly (FAILED_PRECONDITION) instead of sending bytes it cannot read.
    FilterView.FORMAT_VERSIONS.forEach(q::addAcceptedFormats);
    if (cached != null) {
      q.setIfVersion(cached.version());
    }
    return router.getFilterAsync(q.build()).thenApply(resp -> answer(key, cached, resp))
        .whenComplete((v, err) -> {
          if (err != null) {
            synchronized (this) {
              errors++;
            }
          }
        });
  }

  private FilterView answer(Key key, FilterView cached, GetFilterResponse resp) {
    if (resp.getNotModified()) {
      if (cached == null || !resp.getVersion().equals(cached.version())) {
        throw new CompletionException(Status.DATA_LOSS.withDescription("not_modified for version "
            + resp.getVersion() + ", which this cache does not hold").asRuntimeException());
      }
      synchronized (this) {
        notModified++;
        views.get(key);  // touch: most recently used
      }
      return cached;
    }
    FilterView view;
    try {
      view = FilterView.parse(resp.getFilter().toByteArray());
    } catch (MalformedFilterException e) {
      throw new CompletionException(Status.DATA_LOSS.withDescription("GetFilter of "
          + key.user + ": " + e.getMessage()).asRuntimeException());
    }
    if (!view.version().equals(resp.getVersion())) {
      throw new CompletionException(Status.DATA_LOSS.withDescription("checksum "
          + view.version() + " does not match version " + resp.getVersion())
          .asRuntimeException());
    }
    synchronized (this) {
      fullPulls++;
      FilterView old = views.remove(key);
      if (old != null) {
        bytes -= old.retainedBytes();
      }
      long size = view.retainedBytes();
      if (size <= maxBytes) {
        views.put(key, view);
        bytes += size;
        Iterator<Map.Entry<Key, FilterView>> it = views.entrySet().iterator();
        while (bytes > maxBytes && it.hasNext()) {
          bytes -= it.next().getValue().retainedBytes();
          it.remove();
          evictions++;
        }
      }
    }
    return view;
  }

  public synchronized Stats stats() {
    return new Stats(fullPulls, notModified, errors, evictions, views.size(), bytes);
  }
}
