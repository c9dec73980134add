package com.exposurefilter.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/** XXH3-64 against python3-xxhash (the reference C library) and the spec's worked example. */
class Xxh3Test {

  /** make_xxh3_vectors.py's input of length n: a fixed LCG byte string. */
  static byte[] data(int n) {
    byte[] out = new byte[n];
    long x = n * 2654435761L + 1;
    for (int i = 0; i < n; i++) {
      x = x * 6364136223846793005L + 1442695040888963407L;
      out[i] = (byte) (x >>> 56);
    }
    return out;
  }

  @Test
  void agreesWithTheReferenceOnEveryLengthClassAndSeed() throws IOException {
    int checked = 0;
    try (InputStream in = Xxh3Test.class.getResourceAsStream("/xxh3_vectors.tsv")) {
      for (String line : new String(in.readAllBytes(), StandardCharsets.US_ASCII).split("\n")) {
        if (line.startsWith("#") || line.isBlank()) {
          continue;
        }
        String[] f = line.split("\t");
        int len = Integer.parseInt(f[0]);
        long seed = Long.parseUnsignedLong(f[1], 16);
        long want = Long.parseUnsignedLong(f[2], 16);
        assertEquals(want, Xxh3.hash(data(len), seed), "length " + len + " seed " + f[1]);
        checked++;
      }
    }
    assertEquals(930, checked);
  }

  @Test
  void itemHashesOfTheWorkedExample() {
    // docs/filter-format.md, "Worked example".
    assertEquals(0xcbc9ce2019210bb8L, Xxh3.hashId(1));
    assertEquals(0x3d1890b70352c69dL, Xxh3.hashId(4));
    assertEquals(0x6d5473d75b680149L,
        Xxh3.hashKey("video:42".getBytes(StandardCharsets.UTF_8)));
  }

  @Test
  void hashIdIsTheSeededHashOfTheIdsEightLittleEndianBytes() {
    long[] ids = {0, 7, -1, Long.MIN_VALUE, 0x0123456789abcdefL};
    for (long id : ids) {
      byte[] le = new byte[8];
      for (int i = 0; i < 8; i++) {
        le[i] = (byte) (id >>> (8 * i));
      }
      assertEquals(Xxh3.hash(le, Xxh3.ITEM_SEED), Xxh3.hashId(id), Long.toUnsignedString(id));
    }
  }
}
