package com.exposurefilter.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * The decoder against the golden vectors (tests/testdata/*.json: format 2;
 * tests/testdata/format1/*.json: format 1) and malformed input, as
 * clients/python/tests/test_golden_vectors.py does for the Python decoder.
 */
class GoldenVectorsTest {
  static final Path TESTDATA = Path.of(System.getProperty("ef.testdata", "tests/testdata"));

  static Map<String, JsonObject> load(Path dir) throws IOException {
    Map<String, JsonObject> out = new TreeMap<>();
    try (Stream<Path> files = Files.list(dir)) {
      for (Path p : files.filter(f -> f.toString().endsWith(".json")).sorted().toList()) {
        JsonObject v = JsonParser.parseString(Files.readString(p, StandardCharsets.UTF_8))
            .getAsJsonObject();
        out.put(v.get("name").getAsString(), v);
      }
    }
    return out;
  }

  static byte[] hex(String s) {
    byte[] out = new byte[s.length() / 2];
    for (int i = 0; i < out.length; i++) {
      out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
    }
    return out;
  }

  static byte[] bytesOf(JsonObject v) {
    return hex(v.get("filter_hex").getAsString());
  }

  /** Recomputes the trailing checksum so that structural checks are reached. */
  static byte[] reseal(byte[] data) {
    byte[] out = data.clone();
    long sum = Xxh3.hash(out, 0, out.length - 8, 0);
    ByteBuffer.wrap(out).order(ByteOrder.LITTLE_ENDIAN).putLong(out.length - 8, sum);
    return out;
  }

  static byte[] put(byte[] data, int offset, String fmt, Number value) {
    byte[] out = data.clone();
    ByteBuffer b = ByteBuffer.wrap(out).order(ByteOrder.LITTLE_ENDIAN);
    switch (fmt) {
      case "B" -> b.put(offset, value.byteValue());
      case "H" -> b.putShort(offset, value.shortValue());
      case "I" -> b.putInt(offset, (int) value.longValue());
      case "q" -> b.putLong(offset, value.longValue());
      case "d" -> b.putDouble(offset, value.doubleValue());
      default -> throw new IllegalArgumentException(fmt);
    }
    return out;
  }

  static byte[] concat(byte[]... parts) {
    int n = 0;
    for (byte[] p : parts) {
      n += p.length;
    }
    ByteBuffer b = ByteBuffer.allocate(n);
    for (byte[] p : parts) {
      b.put(p);
    }
    return b.array();
  }

  static byte[] slice(byte[] d, int from, int to) {
    return java.util.Arrays.copyOfRange(d, from, to);
  }

  /** Every candidate one by one, and the ids and keys as batches: the count checked. */
  static int checkAnswers(Map<String, JsonObject> vectors) throws MalformedFilterException {
    int checked = 0;
    for (JsonObject v : vectors.values()) {
      String name = v.get("name").getAsString();
      FilterView view = FilterView.parse(bytesOf(v));
      List<Long> ids = new ArrayList<>();
      List<Boolean> idsKeep = new ArrayList<>();
      List<String> keys = new ArrayList<>();
      List<Boolean> keysKeep = new ArrayList<>();
      for (JsonElement e : v.getAsJsonArray("candidates")) {
        JsonObject c = e.getAsJsonObject();
        boolean want = c.get("may_contain").getAsBoolean();
        boolean got;
        if (c.has("id")) {
          long id = Long.parseUnsignedLong(c.get("id").getAsString());
          got = view.mayContainId(id);
          ids.add(id);
          idsKeep.add(!want);
        } else {
          String key = c.get("key").getAsString();
          got = view.mayContainKey(key);
          keys.add(key);
          keysKeep.add(!want);
        }
        assertEquals(want, got, name + " " + c);
        checked++;
      }
      boolean[] idMask = view.keepMaskIds(ids.stream().mapToLong(Long::longValue).toArray());
      boolean[] keyMask = view.keepMaskKeys(keys);
      for (int i = 0; i < ids.size(); i++) {
        assertEquals(idsKeep.get(i), idMask[i], name + " batch id " + ids.get(i));
      }
      for (int i = 0; i < keys.size(); i++) {
        assertEquals(keysKeep.get(i), keyMask[i], name + " batch key " + keys.get(i));
      }
    }
    return checked;
  }

  // ---------------------------------------------------------------- format 2

  @Test
  void allVectorsArePresent() throws IOException {
    assertEquals(List.of("empty", "max_geometry", "mixed", "multi_slice", "run_extremes",
        "string_keys", "tiny"), new ArrayList<>(load(TESTDATA).keySet()));
  }

  @Test
  void headersVersionsAndSliceTables() throws Exception {
    for (JsonObject v : load(TESTDATA).values()) {
      String name = v.get("name").getAsString();
      byte[] data = bytesOf(v);
      assertEquals(v.get("filter_size").getAsInt(), data.length, name);
      FilterView view = FilterView.parse(data);
      assertEquals(2, view.formatVersion(), name);
      assertEquals(v.get("version").getAsString(), view.version(), name);
      assertEquals(v.get("fp_rate_target").getAsDouble(), view.fpRateTarget(), name);
      assertEquals(v.get("slice_span_ms").getAsLong(), view.sliceSpanMs(), name);
      JsonArray want = v.getAsJsonArray("slices");
      assertEquals(want.size(), view.slices().size(), name);
      for (int s = 0; s < want.size(); s++) {
        JsonObject ws = want.get(s).getAsJsonObject();
        FilterView.Slice gs = view.slices().get(s);
        assertEquals(ws.get("start_ms").getAsLong(), gs.startMs, name);
        assertEquals(ws.get("end_ms").getAsLong(), gs.endMs, name);
        JsonArray segs = ws.getAsJsonArray("bloom_segments");
        assertEquals(segs.size(), gs.segments.size(), name);
        for (int j = 0; j < segs.size(); j++) {
          JsonObject w = segs.get(j).getAsJsonObject();
          assertEquals(w.get("num_blocks").getAsLong(), gs.segments.get(j).numBlocks, name);
          assertEquals(w.get("k").getAsInt(), gs.segments.get(j).k, name);
        }
        JsonArray runs = ws.getAsJsonArray("runs");
        assertEquals(runs.size(), gs.runs.size(), name);
        for (int j = 0; j < runs.size(); j++) {
          JsonObject w = runs.get(j).getAsJsonObject();
          FilterView.Run r = gs.runs.get(j);
          assertEquals(w.get("precision").getAsInt(), r.precision, name);
          assertEquals(w.get("universe").getAsLong(), r.universe, name);
          assertEquals(w.get("rice_k").getAsInt(), r.riceK, name);
          assertEquals(w.get("count").getAsInt(), r.count(), name);
          assertEquals(w.get("payload_bytes").getAsInt(), r.payloadBytes, name);
        }
      }
    }
  }

  @Test
  void everyCandidateAnswerSingleAndBatch() throws Exception {
    assertTrue(checkAnswers(load(TESTDATA)) > 7000);
  }

  @Test
  void everyTruncationIsRejected() throws Exception {
    Map<String, JsonObject> vectors = load(TESTDATA);
    for (String name : List.of("mixed", "string_keys", "run_extremes")) {
      byte[] data = bytesOf(vectors.get(name));
      for (int n = 0; n < data.length; n++) {
        byte[] cut = slice(data, 0, n);
        assertThrows(MalformedFilterException.class, () -> FilterView.parse(cut), name + " " + n);
      }
    }
  }

  @Test
  void bitFlipsAreRejected() throws Exception {
    Map<String, JsonObject> vectors = load(TESTDATA);
    for (String name : List.of("tiny", "run_extremes")) {
      byte[] data = bytesOf(vectors.get(name));
      for (int i = 0; i < data.length; i++) {
        byte[] bad = data.clone();
        bad[i] ^= (byte) (1 << (i % 8));
        assertThrows(MalformedFilterException.class, () -> FilterView.parse(bad), name + " " + i);
      }
    }
  }

  @Test
  void structuralErrorsBehindAValidChecksum() throws Exception {
    // tiny: header 24 bytes, slice at 24 (start, G, R), run length at 34,
    // run at 38: b, k, n (u32), U - 1 (u32), payload.
    byte[] good = bytesOf(load(TESTDATA).get("tiny"));
    Map<String, Object[]> cases = new HashMap<>();
    cases.put("version 3", new Object[] {4, "H", 3});
    cases.put("algorithm", new Object[] {6, "B", 2});
    cases.put("9 slices", new Object[] {7, "B", 9});
    cases.put("slice count beyond data", new Object[] {7, "B", 2});
    cases.put("no slices but data", new Object[] {7, "B", 0});
    cases.put("fp target 0.6", new Object[] {8, "d", 0.6});
    cases.put("fp target nan", new Object[] {8, "d", Double.NaN});
    cases.put("span 999", new Object[] {16, "q", 999L});
    cases.put("start not a multiple", new Object[] {24, "q", 1795392000001L});
    cases.put("negative start", new Object[] {24, "q", -432000000L});
    cases.put("empty slice", new Object[] {33, "B", 0});
    cases.put("segment without blocks", new Object[] {32, "B", 1});
    cases.put("run length beyond data", new Object[] {34, "I", 1000});
    cases.put("run length one short", new Object[] {34, "I", 18});
    cases.put("run length below header", new Object[] {34, "I", 9});
    cases.put("precision 0", new Object[] {38, "B", 0});
    cases.put("precision 33", new Object[] {38, "B", 33});
    cases.put("Rice k off by one", new Object[] {39, "B", 15});
    cases.put("Rice k 32", new Object[] {39, "B", 32});
    cases.put("count 0", new Object[] {40, "I", 0});
    cases.put("count + 1", new Object[] {40, "I", 5});
    cases.put("universe 1", new Object[] {44, "I", 0});
    cases.put("universe off by one", new Object[] {44, "I", 1 << 19});
    for (var e : cases.entrySet()) {
      Object[] c = e.getValue();
      byte[] bad = reseal(put(good, (Integer) c[0], (String) c[1], (Number) c[2]));
      assertThrows(MalformedFilterException.class, () -> FilterView.parse(bad), e.getKey());
    }
    assertEquals(1, FilterView.parse(reseal(good)).runs().size());
    MalformedFilterException ex = assertThrows(MalformedFilterException.class,
        () -> FilterView.parse(reseal(put(good, 4, "H", 3))));
    assertTrue(ex.getMessage().contains("versions 1 and 2"), ex.getMessage());
    assertTrue(ex.getMessage().contains("FilterRecalled"), ex.getMessage());
  }

  @Test
  void checksRunInTheSpecifiedOrder() throws Exception {
    // Bytes that break two rules get the error of the one checked first
    // (the same cases as the C++ and Python decoders' tests).
    byte[] good = bytesOf(load(TESTDATA).get("tiny"));
    byte[] smallU = put(good, 44, "I", 100000 - 1);  // f_0 reaches U
    Map<String, Object[]> cases = new HashMap<>();
    cases.put("truncated before fingerprint range",
        new Object[] {reseal(put(smallU, 56, "B", 0x16)), "truncated in code 3"});
    cases.put("bytes after the codes before fingerprint range", new Object[] {
        reseal(put(concat(slice(smallU, 0, 57), new byte[1], slice(smallU, 57, smallU.length)),
            34, "I", 20)), "after its last code"});
    cases.put("checksum before slice count",
        new Object[] {put(good, 7, "B", 9), "checksum mismatch"});
    cases.put("version before length", new Object[] {
        concat("EXPF".getBytes(StandardCharsets.US_ASCII), new byte[] {3, 0}, slice(good, 6, 20)),
        "unsupported format version 3"});
    cases.put("start before counts", new Object[] {
        reseal(put(put(good, 24, "q", 1795392000001L), 32, "B", 9)),
        "not a non-negative multiple"});
    cases.put("run before trailing bytes", new Object[] {
        reseal(put(concat(slice(good, 0, 57), new byte[1], slice(good, 57, good.length)), 38,
            "B", 33)), "precision 33"});
    for (var e : cases.entrySet()) {
      byte[] data = (byte[]) e.getValue()[0];
      String want = (String) e.getValue()[1];
      MalformedFilterException ex =
          assertThrows(MalformedFilterException.class, () -> FilterView.parse(data), e.getKey());
      assertTrue(ex.getMessage().contains(want), e.getKey() + ": " + ex.getMessage());
    }
  }

  @Test
  void runPayloadLimitIsCheckedBeforeThePayload() {
    // b = 32, k = 0, n = 1, U = 2^32: only the declared length differs; the
    // limit is checked before any payload byte is read, so none is present.
    byte[] header = ByteBuffer.allocate(10).order(ByteOrder.LITTLE_ENDIAN)
        .put((byte) 32).put((byte) 0).putInt(1).putInt(0xffffffff).array();
    long limit = FilterView.MAX_RUN_PAYLOAD_BYTES;
    assertEquals((1L << 29) - 8, limit);
    MalformedFilterException ex = assertThrows(MalformedFilterException.class,
        () -> FilterView.decodeRun(header, 0, 10 + limit, 0));
    assertTrue(ex.getMessage().contains("too large"), ex.getMessage());
    byte[] empty = ByteBuffer.allocate(10).order(ByteOrder.LITTLE_ENDIAN)
        .put((byte) 32).put((byte) 0).putInt(0).putInt(0xffffffff).array();
    ex = assertThrows(MalformedFilterException.class,
        () -> FilterView.decodeRun(empty, 0, 10 + limit, 0));
    assertTrue(ex.getMessage().contains("too large"), ex.getMessage());
  }

  @Test
  void theEmptyKeyIsRejectedNotAnswered() throws Exception {
    FilterView view = FilterView.parse(bytesOf(load(TESTDATA).get("string_keys")));
    IllegalArgumentException ex =
        assertThrows(IllegalArgumentException.class, () -> view.mayContainKey(""));
    assertTrue(ex.getMessage().contains("empty"), ex.getMessage());
    ex = assertThrows(IllegalArgumentException.class,
        () -> view.keepMaskKeys(List.of("video:1", "")));
    assertTrue(ex.getMessage().contains("keys[1]"), ex.getMessage());
    assertArrayEquals(new boolean[] {!view.mayContainKey("video:1")},
        view.keepMaskKeys(List.of("video:1")));
  }

  @Test
  void estimatedFpRateIsTheRunsShare() throws Exception {
    FilterView view = FilterView.parse(bytesOf(load(TESTDATA).get("multi_slice")));
    double clean = 1.0;
    for (FilterView.Run r : view.runs()) {
      clean *= 1 - (double) r.count() / r.universe;
    }
    assertEquals(1 - clean, view.estimatedFpRate(), 1e-12);
    assertTrue(view.estimatedFpRate() < view.fpRateTarget());
  }

  @Test
  void emptyFilterClaimsNothing() throws Exception {
    FilterView view = FilterView.parse(bytesOf(load(TESTDATA).get("empty")));
    assertEquals(32, view.sizeBytes());
    assertFalse(view.mayContainId(1));
    assertArrayEquals(new boolean[] {true, true}, view.keepMaskIds(new long[] {1, 2}));
  }

  // ---------------------------------------------------------------- format 1

  @Test
  void format1VectorsAnswerExactly() throws Exception {
    Map<String, JsonObject> vectors = load(TESTDATA.resolve("format1"));
    assertFalse(vectors.isEmpty());
    for (JsonObject v : vectors.values()) {
      String name = v.get("name").getAsString();
      FilterView view = FilterView.parse(bytesOf(v));
      assertEquals(1, view.formatVersion(), name);
      assertEquals(v.get("version").getAsString(), view.version(), name);
      JsonArray segs = v.getAsJsonArray("segments");
      assertEquals(segs.size(), view.segments().size(), name);
      for (int i = 0; i < segs.size(); i++) {
        JsonObject w = segs.get(i).getAsJsonObject();
        assertEquals(w.get("num_blocks").getAsLong(), view.segments().get(i).numBlocks, name);
        assertEquals(w.get("k").getAsInt(), view.segments().get(i).k, name);
        assertEquals(w.get("item_count").getAsLong(), view.segments().get(i).itemCount, name);
      }
    }
    assertTrue(checkAnswers(vectors) > 0);
  }

  @Test
  void format1TruncationsAndFlipsAreRejected() throws Exception {
    for (JsonObject v : load(TESTDATA.resolve("format1")).values()) {
      byte[] data = bytesOf(v);
      for (int n = 0; n < Math.min(data.length, 400); n++) {
        byte[] cut = slice(data, 0, n);
        assertThrows(MalformedFilterException.class, () -> FilterView.parse(cut));
      }
      for (int i = 0; i < Math.min(data.length, 400); i++) {
        byte[] bad = data.clone();
        bad[i] ^= (byte) (1 << (i % 8));
        assertThrows(MalformedFilterException.class, () -> FilterView.parse(bad));
      }
    }
  }
}
