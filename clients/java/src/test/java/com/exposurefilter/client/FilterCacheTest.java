package com.exposurefilter.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.exposurefilter.v1.GetFilterRequest;
import com.exposurefilter.v1.GetFilterResponse;
import com.google.protobuf.ByteString;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Pull mode's cache against one scripted replica serving golden-vector bytes. */
class FilterCacheTest {
  ScriptedReplicas replicas;
  RoutingClient router;
  byte[] tiny;
  byte[] multi;

  @BeforeEach
  void start() throws Exception {
    replicas = new ScriptedReplicas(1);
    router = replicas.router(1).build();
    Map<String, com.google.gson.JsonObject> v = GoldenVectorsTest.load(GoldenVectorsTest.TESTDATA);
    tiny = GoldenVectorsTest.bytesOf(v.get("tiny"));
    multi = GoldenVectorsTest.bytesOf(v.get("multi_slice"));
    // Each user's filter: "big" gets multi_slice, every other user tiny.
    replicas.scripts.get(0).getFilter = q -> serve(q, q.getUserId().startsWith("big") ? multi : tiny);
  }

  @AfterEach
  void stop() {
    router.close();
    replicas.close();
  }

  static GetFilterResponse serve(GetFilterRequest q, byte[] bytes) {
    String version;
    try {
      version = FilterView.parse(bytes).version();
    } catch (MalformedFilterException e) {
      version = "bad";
    }
    if (q.getIfVersion().equals(version)) {
      return GetFilterResponse.newBuilder().setVersion(version).setNotModified(true).build();
    }
    return GetFilterResponse.newBuilder().setVersion(version).setFilter(ByteString.copyFrom(bytes))
        .build();
  }

  @Test
  void revalidatesWithIfVersionAndKeepsTheView() {
    FilterCache cache = new FilterCache(router, 1 << 20);
    FilterView first = cache.get("homefeed", "u1");
    FilterView second = cache.get("homefeed", "u1");
    assertSame(first, second);
    List<Object> got = replicas.received.get(0);
    GetFilterRequest q0 = (GetFilterRequest) got.get(0);
    GetFilterRequest q1 = (GetFilterRequest) got.get(1);
    assertEquals("", q0.getIfVersion());
    assertEquals(List.of(1, 2), q0.getAcceptedFormatsList());
    assertEquals(first.version(), q1.getIfVersion());
    assertEquals(1, cache.stats().fullPulls());
    assertEquals(1, cache.stats().notModified());
  }

  @Test
  void boundedByBytesLeastRecentlyUsedFirst() throws Exception {
    long tinySize = FilterView.parse(tiny).retainedBytes();
    long bigSize = FilterView.parse(multi).retainedBytes();
    // Room for big and one and a half tiny ones: big evicts one tiny.
    long bound = bigSize + tinySize + tinySize / 2;
    FilterCache cache = new FilterCache(router, bound);
    cache.get("s", "u1");
    cache.get("s", "u2");
    cache.get("s", "u1");  // u2 is now the least recently used
    cache.get("s", "big");
    FilterCache.Stats st = cache.stats();
    assertTrue(st.bytes() <= bound, st.toString());
    assertEquals(2, st.users(), st.toString());
    assertEquals(1, st.evictions());
    int before = replicas.received.get(0).size();
    cache.get("s", "u1");  // still held: not_modified
    assertEquals(1, cache.stats().notModified() - 1);
    assertEquals(before + 1, replicas.received.get(0).size());
  }

  @Test
  void aFilterAboveTheBoundIsReturnedNotKept() {
    FilterCache cache = new FilterCache(router, 10);
    cache.get("s", "u1");
    assertEquals(0, cache.stats().users());
    assertEquals(0, cache.stats().bytes());
  }

  @Test
  void corruptBytesAreDataLossAndNeverCached() {
    byte[] bad = tiny.clone();
    bad[40] ^= 1;
    replicas.scripts.get(0).getFilter = q -> GetFilterResponse.newBuilder().setVersion("x")
        .setFilter(ByteString.copyFrom(bad)).build();
    FilterCache cache = new FilterCache(router, 1 << 20);
    StatusRuntimeException e =
        assertThrows(StatusRuntimeException.class, () -> cache.get("s", "u1"));
    assertEquals(Status.Code.DATA_LOSS, e.getStatus().getCode());
    assertTrue(e.getStatus().getDescription().contains("checksum mismatch"));
    assertEquals(0, cache.stats().users());
    assertEquals(1, cache.stats().errors());
  }

  @Test
  void aVersionThatIsNotTheChecksumIsDataLoss() {
    replicas.scripts.get(0).getFilter = q -> GetFilterResponse.newBuilder()
        .setVersion("0000000000000000").setFilter(ByteString.copyFrom(tiny)).build();
    FilterCache cache = new FilterCache(router, 1 << 20);
    StatusRuntimeException e =
        assertThrows(StatusRuntimeException.class, () -> cache.get("s", "u1"));
    assertEquals(Status.Code.DATA_LOSS, e.getStatus().getCode());
  }
}
