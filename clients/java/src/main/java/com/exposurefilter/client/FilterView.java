package com.exposurefilter.client;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;

/**
 * A parsed, validated filter in the portable format (docs/filter-format.md):
 * format 2, what the server sends, and format 1, which a client may still
 * hold cached. Written from the spec alone; checked against the golden
 * vectors and a live server's FilterRecalled.
 *
 * <pre>{@code
 * FilterView view = FilterView.parse(getFilterResponse.getFilter().toByteArray());
 * view.mayContainId(123);          // true: maybe exposed (drop); false: never exposed
 * boolean[] keep = view.keepMaskIds(ids);  // true = keep (not exposed)
 * }</pre>
 *
 * <p>Immutable and thread-safe. Runs are decoded once, at parse, into sorted
 * fingerprint arrays; Bloom segments are read from the filter's bytes, which
 * the view keeps (they are not copied: do not modify the array).
 */
public final class FilterView {
  /** The format versions this decoder reads; the server sends 2. */
  public static final List<Integer> FORMAT_VERSIONS = List.of(1, 2);

  private static final int TRAILER = 8;
  private static final int HEADER2 = 24;
  private static final int SLICE_HEADER2 = 10;
  private static final int RUN_HEADER = 10;
  private static final int BLOCK_BYTES = 64;
  private static final int MAX_SLICES = 8;
  private static final int MAX_SEGMENTS_PER_SLICE = 8;
  private static final long MAX_BLOCKS = 1L << 26;
  private static final long MIN_SPAN_MS = 1000;
  private static final int MAX_RICE_K = 31;
  // A run's payload is shorter than this: under 2^32 - 64 bits, so every bit
  // position fits 32 bits and every q_i * 2^k stays below 2^63.
  static final long MAX_RUN_PAYLOAD_BYTES = (1L << 29) - 8;
  private static final int PROBE_MULTIPLIER = 0x9e3779b9;
  // Format 1.
  private static final int HEADER1 = 32;
  private static final int SEGMENT1 = 32;
  private static final int MAX_SEGMENTS1 = 64;

  /** A legacy blocked Bloom segment (format 1, or a legacy slice of format 2). */
  public static final class Segment {
    public final long numBlocks;
    public final int k;
    /** Format 1's informational insert count; 0 in format 2. */
    public final long itemCount;
    final int offset;  // where its blocks start in the filter bytes

    Segment(long numBlocks, int k, long itemCount, int offset) {
      this.numBlocks = numBlocks;
      this.k = k;
      this.itemCount = itemCount;
      this.offset = offset;
    }
  }

  /** A Golomb-Rice coded run of fingerprints (format 2). */
  public static final class Run {
    public final int precision;
    public final long universe;
    public final int riceK;
    public final int payloadBytes;
    final long[] fingerprints;  // ascending

    Run(int precision, long universe, int riceK, long[] fingerprints, int payloadBytes) {
      this.precision = precision;
      this.universe = universe;
      this.riceK = riceK;
      this.fingerprints = fingerprints;
      this.payloadBytes = payloadBytes;
    }

    public int count() {
      return fingerprints.length;
    }

    /** fp(h) = (prefix_b(h) * U) >> b with prefix_b(h) = h >> (64 - b). */
    long fingerprint(long h) {
      return ((h >>> (64 - precision)) * universe) >>> precision;
    }

    boolean containsHash(long h) {
      return Arrays.binarySearch(fingerprints, fingerprint(h)) >= 0;
    }
  }

  /** A live time slice [startMs, endMs), oldest first. */
  public static final class Slice {
    public final long startMs;
    public final long endMs;
    public final List<Segment> segments;
    public final List<Run> runs;

    Slice(long startMs, long endMs, List<Segment> segments, List<Run> runs) {
      this.startMs = startMs;
      this.endMs = endMs;
      this.segments = Collections.unmodifiableList(segments);
      this.runs = Collections.unmodifiableList(runs);
    }
  }

  private final byte[] data;
  private final int formatVersion;
  private final List<Slice> slices;
  private final Segment[] segments;
  private final Run[] runs;
  private final double fpRateTarget;
  private final long sliceSpanMs;
  private final long checksum;

  private FilterView(byte[] data, int formatVersion, List<Slice> slices, double fpRateTarget,
      long sliceSpanMs, long checksum) {
    this.data = data;
    this.formatVersion = formatVersion;
    this.slices = Collections.unmodifiableList(slices);
    this.segments = slices.stream().flatMap(s -> s.segments.stream()).toArray(Segment[]::new);
    this.runs = slices.stream().flatMap(s -> s.runs.stream()).toArray(Run[]::new);
    this.fpRateTarget = fpRateTarget;
    this.sliceSpanMs = sliceSpanMs;
    this.checksum = checksum;
  }

  /**
   * This view without the slices that end at or before {@code cutoffMs}
   * (format 2's aging rule: a slice is live while its end is after
   * now - retention); this view itself when every slice is live.
   */
  FilterView withSlicesEndingAfter(long cutoffMs) {
    List<Slice> live = new ArrayList<>();
    for (Slice s : slices) {
      if (s.endMs > cutoffMs) {
        live.add(s);
      }
    }
    if (live.size() == slices.size()) {
      return this;
    }
    return new FilterView(data, formatVersion, live, fpRateTarget, sliceSpanMs, checksum);
  }

  public int formatVersion() {
    return formatVersion;
  }

  public List<Slice> slices() {
    return slices;
  }

  public List<Segment> segments() {
    return List.of(segments);
  }

  public List<Run> runs() {
    return List.of(runs);
  }

  public double fpRateTarget() {
    return fpRateTarget;
  }

  public long sliceSpanMs() {
    return sliceSpanMs;
  }

  /** The filter's size in bytes, as received. */
  public int sizeBytes() {
    return data.length;
  }

  /**
   * What this view holds in memory: the bytes plus the decoded fingerprints
   * (8 bytes each) and a fixed overhead per object. FilterCache bounds its
   * total.
   */
  public long retainedBytes() {
    long total = 64 + data.length + 48L * slices.size() + 32L * segments.length;
    for (Run r : runs) {
      total += 48 + 16 + 8L * r.fingerprints.length;
    }
    return total;
  }

  /** The GetFilter {@code version} of these bytes: the checksum as 16 lowercase hex digits. */
  public String version() {
    return String.format("%016x", checksum);
  }

  // ---------------------------------------------------------------- parse

  /** Parses and validates {@code data} (kept by reference, not copied). */
  public static FilterView parse(byte[] data) throws MalformedFilterException {
    if (data.length < 6 || data[0] != 'E' || data[1] != 'X' || data[2] != 'P' || data[3] != 'F') {
      if (data.length < HEADER2 + TRAILER) {
        throw new MalformedFilterException(
            "length " + data.length + " is shorter than a header");
      }
      throw new MalformedFilterException("bad magic");
    }
    int version = u16(data, 4);
    if (version == 2) {
      return parseV2(data);
    }
    if (version == 1) {
      return parseV1(data);
    }
    throw new MalformedFilterException("unsupported format version " + version
        + ": this decoder reads format versions 1 and 2; upgrade the exposure-filter Java"
        + " client (docs/filter-format.md) or use FilterRecalled");
  }

  private static long checksum(byte[] data) throws MalformedFilterException {
    int bodyEnd = data.length - TRAILER;
    long stored = Xxh3.le64(data, bodyEnd);
    if (Xxh3.hash(data, 0, bodyEnd, 0) != stored) {
      throw new MalformedFilterException("checksum mismatch");
    }
    return stored;
  }

  private static void checkSegment(int i, long numBlocks, int k) throws MalformedFilterException {
    if (numBlocks < 1 || numBlocks > MAX_BLOCKS) {
      throw new MalformedFilterException(
          "segment " + i + " block count " + numBlocks + " out of range");
    }
    if (k < 1 || k > 16) {
      throw new MalformedFilterException("segment " + i + " probe count " + k + " out of range");
    }
  }

  private static void checkFpRate(double fp) throws MalformedFilterException {
    if (!(fp >= 1e-6 && fp <= 0.5)) {  // NaN fails too
      throw new MalformedFilterException("fp target " + fp + " outside [1e-6, 0.5]");
    }
  }

  /** Offsets within [0, bodyEnd) and the "fits" rule of the spec, in 64-bit arithmetic. */
  private static final class Cursor {
    final byte[] data;
    final int bodyEnd;
    int offset;

    Cursor(byte[] data, int offset) {
      this.data = data;
      this.bodyEnd = data.length - TRAILER;
      this.offset = offset;
    }

    void need(long n, String what) throws MalformedFilterException {
      if (n > (long) bodyEnd - offset) {
        throw new MalformedFilterException(what + " truncated");
      }
    }
  }

  private static FilterView parseV2(byte[] data) throws MalformedFilterException {
    if (data.length < HEADER2 + TRAILER) {
      throw new MalformedFilterException("length " + data.length + " is shorter than header");
    }
    int algorithm = data[6] & 0xff;
    int count = data[7] & 0xff;
    double fpRate = Double.longBitsToDouble(Xxh3.le64(data, 8));
    long span = Xxh3.le64(data, 16);
    if (algorithm != 1) {
      throw new MalformedFilterException("unknown hash algorithm " + algorithm);
    }
    long checksum = checksum(data);
    if (count > MAX_SLICES) {
      throw new MalformedFilterException("slice count " + count + " exceeds " + MAX_SLICES);
    }
    checkFpRate(fpRate);
    if (span < MIN_SPAN_MS) {
      throw new MalformedFilterException("slice span " + span + " ms below 1000");
    }
    Cursor c = new Cursor(data, HEADER2);
    List<Slice> slices = new ArrayList<>();
    int nSegments = 0;
    int nRuns = 0;
    for (int s = 0; s < count; s++) {
      c.need(SLICE_HEADER2, "slice " + s + " header");
      long start = Xxh3.le64(data, c.offset);
      int g = data[c.offset + 8] & 0xff;
      int r = data[c.offset + 9] & 0xff;
      c.offset += SLICE_HEADER2;
      if (start < 0 || start % span != 0 || start > Long.MAX_VALUE - span) {
        throw new MalformedFilterException(
            "slice " + s + " start " + start + " is not a non-negative multiple of the span");
      }
      if (!slices.isEmpty() && start <= slices.get(slices.size() - 1).startMs) {
        throw new MalformedFilterException("slice " + s + " out of order");
      }
      if (g > MAX_SEGMENTS_PER_SLICE || g + r == 0) {
        throw new MalformedFilterException(
            "slice " + s + " has " + g + " segments and " + r + " runs");
      }
      c.need(5L * g, "slice " + s + " segment table");
      long[] blocks = new long[g];
      int[] ks = new int[g];
      for (int j = 0; j < g; j++) {
        blocks[j] = Xxh3.le32(data, c.offset);
        ks[j] = data[c.offset + 4] & 0xff;
        c.offset += 5;
        checkSegment(nSegments + j, blocks[j], ks[j]);
      }
      List<Run> sliceRuns = new ArrayList<>(r);
      for (int j = 0; j < r; j++) {
        c.need(4, "run " + nRuns + " length");
        long length = Xxh3.le32(data, c.offset);
        c.offset += 4;
        c.need(length, "run " + nRuns);
        sliceRuns.add(decodeRun(data, c.offset, length, nRuns));
        c.offset += (int) length;
        nRuns++;
      }
      List<Segment> sliceSegments = new ArrayList<>(g);
      for (int j = 0; j < g; j++) {
        c.need(blocks[j] * BLOCK_BYTES, "segment " + nSegments + " blocks");
        sliceSegments.add(new Segment(blocks[j], ks[j], 0, c.offset));
        c.offset += (int) (blocks[j] * BLOCK_BYTES);
        nSegments++;
      }
      slices.add(new Slice(start, start + span, sliceSegments, sliceRuns));
    }
    if (c.offset != c.bodyEnd) {
      throw new MalformedFilterException((c.bodyEnd - c.offset) + " trailing bytes");
    }
    return new FilterView(data, 2, slices, fpRate, span, checksum);
  }

  /**
   * Decodes and validates the run of {@code length} bytes at data[offset]
   * (b, k, n, U - 1, payload), which the caller has checked fit. Checks in
   * the spec's order (7e): the header, the payload limit before any payload
   * byte is read, the codes' layout, then the fingerprints' range.
   */
  static Run decodeRun(byte[] data, int offset, long length, int index)
      throws MalformedFilterException {
    if (length < RUN_HEADER) {
      throw new MalformedFilterException("run " + index + " of " + length
          + " bytes is shorter than its " + RUN_HEADER + "-byte header");
    }
    int b = data[offset] & 0xff;
    int k = data[offset + 1] & 0xff;
    long n = Xxh3.le32(data, offset + 2);
    long u = Xxh3.le32(data, offset + 6) + 1;
    if (b < 1 || b > 32) {
      throw new MalformedFilterException("run " + index + " precision " + b + " outside 1..32");
    }
    if (u < 2 || u > 1L << b) {
      throw new MalformedFilterException(
          "run " + index + " universe " + u + " outside 2..2^" + b);
    }
    if (k > MAX_RICE_K) {
      throw new MalformedFilterException("run " + index + " Rice parameter " + k + " above 31");
    }
    if (n > u) {
      throw new MalformedFilterException(
          "run " + index + " count " + n + " exceeds universe " + u);
    }
    long payloadBytes = length - RUN_HEADER;
    if (payloadBytes >= MAX_RUN_PAYLOAD_BYTES) {
      throw new MalformedFilterException("run " + index + " payload of " + payloadBytes
          + " bytes is too large (at most 2^29 - 9)");
    }
    if (n == 0) {
      throw new MalformedFilterException("run " + index + " is empty");
    }
    long totalBits = payloadBytes * 8;
    if (n * (k + 1) > totalBits) {
      throw new MalformedFilterException("run " + index + " truncated: " + n
          + " codes of k = " + k + " need more than " + payloadBytes + " payload bytes");
    }
    if (n > Integer.MAX_VALUE - 8) {
      // Not a format rule: a Java array holds fewer. Such a run needs a
      // payload of 256 MiB or more, 64 times gRPC's default message limit.
      throw new MalformedFilterException(
          "run " + index + " count " + n + " is more than this decoder holds");
    }
    int p = offset + RUN_HEADER;  // payload start; bit j = bit (j & 7) of byte p + (j >> 3)
    int count = (int) n;
    // The codes' layout first: n one bits after the remainders.
    long[] quotients = new long[count];
    long pos = n * k;
    for (int i = 0; i < count; i++) {
      long one = nextOne(data, p, pos, totalBits);
      if (one < 0) {
        throw new MalformedFilterException("run " + index + " truncated in code " + i);
      }
      quotients[i] = one - pos;
      pos = one + 1;
    }
    if ((pos + 7) / 8 != payloadBytes || nextOne(data, p, pos, totalBits) >= 0) {
      throw new MalformedFilterException("run " + index + " has bytes or bits after its last code");
    }
    // Then the fingerprints; q_i >= U is rejected before the shift.
    long[] fps = quotients;  // decoded in place
    long f = -1;
    for (int i = 0; i < count; i++) {
      long q = quotients[i];
      if (q < u) {
        long r = k == 0 ? 0 : readBits(data, p, (long) i * k, k);
        f = f + 1 + ((q << k) | r);
      }
      if (q >= u || f >= u) {
        throw new MalformedFilterException(
            "run " + index + " code " + i + ": fingerprint reaches the universe " + u);
      }
      fps[i] = f;
    }
    return new Run(b, u, k, fps, (int) payloadBytes);
  }

  /** The first set bit at or after {@code from} and below {@code end}, or -1. */
  private static long nextOne(byte[] data, int p, long from, long end) {
    long j = from;
    while (j < end) {
      if ((j & 7) == 0 && j + 8 <= end) {
        int v = data[p + (int) (j >>> 3)] & 0xff;
        if (v == 0) {
          j += 8;
          continue;
        }
        return j + Integer.numberOfTrailingZeros(v);
      }
      if ((data[p + (int) (j >>> 3)] >>> (j & 7) & 1) != 0) {
        return j;
      }
      j++;
    }
    return -1;
  }

  /** {@code width} (<= 31) bits at bit {@code at}, least significant first. */
  private static long readBits(byte[] data, int p, long at, int width) {
    long v = 0;
    int got = 0;
    while (got < width) {
      int byteIndex = (int) ((at + got) >>> 3);
      int shift = (int) ((at + got) & 7);
      int take = Math.min(8 - shift, width - got);
      long bits = ((data[p + byteIndex] & 0xff) >>> shift) & ((1 << take) - 1);
      v |= bits << got;
      got += take;
    }
    return v;
  }

  private static FilterView parseV1(byte[] data) throws MalformedFilterException {
    if (data.length < HEADER1 + TRAILER) {
      throw new MalformedFilterException("length " + data.length + " is shorter than header");
    }
    int headerSize = u16(data, 6);
    long seed = Xxh3.le64(data, 8);
    long count = Xxh3.le32(data, 16);
    int algorithm = data[20] & 0xff;
    int blockLog2 = data[21] & 0xff;
    double fpRate = Double.longBitsToDouble(Xxh3.le64(data, 24));
    if (headerSize != HEADER1) {
      throw new MalformedFilterException("unexpected header size " + headerSize);
    }
    if (seed != Xxh3.ITEM_SEED || algorithm != 1) {
      throw new MalformedFilterException("unknown hash algorithm or seed");
    }
    if (blockLog2 != 6) {
      throw new MalformedFilterException("unknown block size");
    }
    long checksum = checksum(data);
    if (count > MAX_SEGMENTS1) {
      throw new MalformedFilterException("segment count " + count + " exceeds " + MAX_SEGMENTS1);
    }
    checkFpRate(fpRate);
    Cursor c = new Cursor(data, HEADER1);
    c.need(SEGMENT1 * count, "segment table");
    c.offset = HEADER1 + SEGMENT1 * (int) count;
    List<long[]> starts = new ArrayList<>();  // per slice: start, end
    List<List<Segment>> sliceSegments = new ArrayList<>();
    long span = 0;
    for (int i = 0; i < count; i++) {
      int e = HEADER1 + i * SEGMENT1;
      long start = Xxh3.le64(data, e);
      long end = Xxh3.le64(data, e + 8);
      long numBlocks = Xxh3.le32(data, e + 16);
      long itemCount = Xxh3.le32(data, e + 20);
      int k = data[e + 24] & 0xff;
      int level = data[e + 25] & 0xff;
      checkSegment(i, numBlocks, k);
      if (start < 0 || end <= start) {
        throw new MalformedFilterException(
            "segment " + i + " does not cover [start_ms, end_ms) with 0 <= start");
      }
      int last = starts.size() - 1;
      if (last >= 0 && starts.get(last)[0] == start) {
        if (starts.get(last)[1] != end) {
          throw new MalformedFilterException("segment " + i + ": slice end differs");
        }
        if (level != sliceSegments.get(last).size() || level >= MAX_SEGMENTS_PER_SLICE) {
          throw new MalformedFilterException(
              "segment " + i + " level " + level + " out of order");
        }
      } else {
        if (level != 0) {
          throw new MalformedFilterException(
              "segment " + i + " starts a slice at level " + level);
        }
        if (last >= 0 && start < starts.get(last)[0]) {
          throw new MalformedFilterException("segment " + i + ": slices out of order");
        }
        if (last >= 0 && end - start != span) {
          throw new MalformedFilterException("segment " + i + ": slice span differs");
        }
        if (starts.size() >= MAX_SLICES) {
          throw new MalformedFilterException("more than " + MAX_SLICES + " slices");
        }
        span = end - start;
        starts.add(new long[] {start, end});
        sliceSegments.add(new ArrayList<>());
      }
      c.need(numBlocks * BLOCK_BYTES, "segment " + i + " blocks");
      sliceSegments.get(starts.size() - 1).add(new Segment(numBlocks, k, itemCount, c.offset));
      c.offset += (int) (numBlocks * BLOCK_BYTES);
    }
    if (c.offset != c.bodyEnd) {
      throw new MalformedFilterException((c.bodyEnd - c.offset) + " trailing bytes");
    }
    List<Slice> slices = new ArrayList<>();
    for (int s = 0; s < starts.size(); s++) {
      slices.add(new Slice(starts.get(s)[0], starts.get(s)[1], sliceSegments.get(s), List.of()));
    }
    return new FilterView(data, 1, slices, fpRate, span, checksum);
  }

  private static int u16(byte[] b, int off) {
    return (b[off] & 0xff) | (b[off + 1] & 0xff) << 8;
  }

  // ------------------------------------------------------------ membership

  private boolean segmentClaims(Segment seg, long h) {
    long block = ((h >>> 32) * seg.numBlocks) >>> 32;
    int start = seg.offset + (int) block * BLOCK_BYTES;
    int x = (int) h;
    for (int i = 0; i < seg.k; i++) {
      int pos = x >>> 23;  // top 9 bits: 0..511
      if ((data[start + (pos >>> 3)] >>> (pos & 7) & 1) == 0) {
        return false;
      }
      x *= PROBE_MULTIPLIER;  // wraps mod 2^32
    }
    return true;
  }

  /** True iff a live slice's run or Bloom segment claims the hash. */
  public boolean mayContainHash(long h) {
    for (Segment seg : segments) {
      if (segmentClaims(seg, h)) {
        return true;
      }
    }
    for (Run run : runs) {
      if (run.containsHash(h)) {
        return true;
      }
    }
    return false;
  }

  /** True: may have been exposed (drop). False: certainly never exposed (keep). */
  public boolean mayContainId(long id) {
    return mayContainHash(Xxh3.hashId(id));
  }

  /**
   * As {@link #mayContainId} for a string key (its UTF-8 bytes). The empty
   * key is not an item (the server rejects it): IllegalArgumentException.
   */
  public boolean mayContainKey(String key) {
    return mayContainHash(hashKey(key, "key"));
  }

  /**
   * True where the hash was never exposed (keep it), in order. Runs are
   * checked the batch way of the spec: the candidates sorted once by their
   * hash's top 32 bits (every run's fp is monotone in them, and depends on
   * nothing else), then one merge per run; Bloom segments probe each
   * candidate.
   */
  public boolean[] keepMaskHashes(long[] hashes) {
    int m = hashes.length;
    boolean[] keep = new boolean[m];
    Arrays.fill(keep, true);
    if (segments.length > 0) {
      for (int i = 0; i < m; i++) {
        for (Segment seg : segments) {
          if (segmentClaims(seg, hashes[i])) {
            keep[i] = false;
            break;
          }
        }
      }
    }
    if (runs.length == 0 || m == 0) {
      return keep;
    }
    // The candidates' top 32 bits, sorted by an LSD radix sort (four 8-bit
    // passes: O(m), and small counting arrays for batches of thousands),
    // with their indices; every run's prefix_b(h) = top >>> (32 - b) for
    // b <= 32, so the merges below read the arrays in order.
    int[] idx = new int[m];
    int[] tmp = new int[m];
    for (int i = 0; i < m; i++) {
      idx[i] = i;
    }
    int[] count = new int[256];
    for (int pass = 0; pass < 4; pass++) {
      int shift = 32 + 8 * pass;
      Arrays.fill(count, 0);
      for (int i = 0; i < m; i++) {
        count[(int) (hashes[i] >>> shift) & 0xff]++;
      }
      prefixSums(count);
      for (int t : idx) {
        tmp[count[(int) (hashes[t] >>> shift) & 0xff]++] = t;
      }
      int[] swap = idx;
      idx = tmp;
      tmp = swap;
    }
    long[] top = new long[m];
    for (int s = 0; s < m; s++) {
      top[s] = hashes[idx[s]] >>> 32;
    }
    for (Run run : runs) {
      long[] fps = run.fingerprints;
      int n = fps.length;
      int shift = 32 - run.precision;
      int b = run.precision;
      long u = run.universe;
      int j = 0;
      for (int s = 0; s < m; s++) {
        long f = ((top[s] >>> shift) * u) >>> b;
        while (j < n && fps[j] < f) {
          j++;
        }
        if (j == n) {
          break;
        }
        if (fps[j] == f) {
          keep[idx[s]] = false;
        }
      }
    }
    return keep;
  }

  /** Turns counts into each bucket's first position. */
  private static void prefixSums(int[] count) {
    int sum = 0;
    for (int k = 0; k < count.length; k++) {
      int c = count[k];
      count[k] = sum;
      sum += c;
    }
  }

  public boolean[] keepMaskIds(long[] ids) {
    long[] hashes = new long[ids.length];
    for (int i = 0; i < ids.length; i++) {
      hashes[i] = Xxh3.hashId(ids[i]);
    }
    return keepMaskHashes(hashes);
  }

  /**
   * As {@link #keepMaskIds} for string keys; IllegalArgumentException naming
   * keys[i] for an empty key, as FilterRecalled refuses the whole request.
   */
  public boolean[] keepMaskKeys(List<String> keys) {
    long[] hashes = new long[keys.size()];
    for (int i = 0; i < hashes.length; i++) {
      hashes[i] = hashKey(keys.get(i), "keys[" + i + "]");
    }
    return keepMaskHashes(hashes);
  }

  private static long hashKey(String key, String field) {
    byte[] bytes = key.getBytes(StandardCharsets.UTF_8);
    if (bytes.length == 0) {
      throw new IllegalArgumentException(field + ": empty (an item key is at least 1 byte;"
          + " the server rejects empty keys)");
    }
    return Xxh3.hashKey(bytes);
  }

  /**
   * P(a fresh item is claimed): 1 - prod(1 - p) over runs (p = n / U) and
   * Bloom segments (p from the bits: the mean over blocks of (set bits /
   * 512)^k). Informational: never a reason to doubt the bytes.
   */
  public double estimatedFpRate() {
    double clean = 1.0;
    for (Segment seg : segments) {
      double total = 0;
      for (long b = 0; b < seg.numBlocks; b++) {
        int start = seg.offset + (int) b * BLOCK_BYTES;
        int ones = 0;
        for (int i = 0; i < BLOCK_BYTES; i += 8) {
          ones += Long.bitCount(Xxh3.le64(data, start + i));
        }
        total += Math.pow(ones / 512.0, seg.k);
      }
      clean *= 1.0 - total / seg.numBlocks;
    }
    for (Run run : runs) {
      clean *= 1.0 - (double) run.count() / run.universe;
    }
    return Math.min(1.0, Math.max(0.0, 1.0 - clean));
  }
}
