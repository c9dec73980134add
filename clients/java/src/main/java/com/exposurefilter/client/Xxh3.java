package com.exposurefilter.client;

/**
 * XXH3-64 ({@code XXH3_64bits_withSeed} of xxHash 0.8), written from the
 * algorithm's description because no Debian Java package ships it. The
 * filter format hashes every item with it (seed {@link #ITEM_SEED}) and
 * checksums every filter with it (seed 0). Checked against python3-xxhash
 * (src/test/resources/xxh3_vectors.tsv: every length 0..300 and longer
 * inputs, three seeds) and against the golden vectors.
 *
 * <p>All arithmetic is on {@code long} as 64-bit patterns: products wrap
 * mod 2^64 as in C, and every right shift is {@code >>>}.
 */
public final class Xxh3 {
  /** ASCII "exposure" read as a little-endian u64: the item hash seed. */
  public static final long ITEM_SEED = 0x657275736f707865L;

  private static final long P32_1 = 0x9E3779B1L;
  private static final long P32_2 = 0x85EBCA77L;
  private static final long P32_3 = 0xC2B2AE3DL;
  private static final long P64_1 = 0x9E3779B185EBCA87L;
  private static final long P64_2 = 0xC2B2AE3D27D4EB4FL;
  private static final long P64_3 = 0x165667B19E3779F9L;
  private static final long P64_4 = 0x85EBCA77C2B2AE63L;
  private static final long P64_5 = 0x27D4EB2F165667C5L;
  private static final long PRIME_MX1 = 0x165667919E3779F9L;
  private static final long PRIME_MX2 = 0x9FB21C651E98DF25L;

  private static final int STRIPE_LEN = 64;
  private static final int SECRET_CONSUME_RATE = 8;
  private static final int SECRET_SIZE = 192;
  // (secret size - stripe) / consume rate stripes per 1,024-byte block.
  private static final int STRIPES_PER_BLOCK = (SECRET_SIZE - STRIPE_LEN) / SECRET_CONSUME_RATE;
  private static final int BLOCK_LEN = STRIPE_LEN * STRIPES_PER_BLOCK;

  private static final byte[] K_SECRET = hex(
      "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
          + "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
          + "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
          + "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
          + "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
          + "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e");

  // Derived once from the secret: the constants the 8-byte path uses.
  private static final long BITFLIP_4TO8 = le64(K_SECRET, 8) ^ le64(K_SECRET, 16);
  private static final long ITEM_SEED_4TO8 = ITEM_SEED ^ ((long) Integer.reverseBytes((int) ITEM_SEED) << 32);

  private Xxh3() {}

  /** The filter format's hash of a numeric item id: its 8 bytes LE, seeded. */
  public static long hashId(long id) {
    // len_4to8 on 8 bytes: input1 = low 32 bits, input2 = high 32 bits.
    long input64 = (id >>> 32) + (id << 32);
    return rrmxmx(input64 ^ (BITFLIP_4TO8 - ITEM_SEED_4TO8), 8);
  }

  /** The filter format's hash of a string item key's bytes. */
  public static long hashKey(byte[] key) {
    return hash(key, 0, key.length, ITEM_SEED);
  }

  public static long hash(byte[] data, long seed) {
    return hash(data, 0, data.length, seed);
  }

  /** XXH3-64 of data[off, off + len) with {@code seed} (0: unseeded). */
  public static long hash(byte[] data, int off, int len, long seed) {
    if (len <= 16) {
      return len0to16(data, off, len, K_SECRET, seed);
    }
    if (len <= 128) {
      return len17to128(data, off, len, K_SECRET, seed);
    }
    if (len <= 240) {
      return len129to240(data, off, len, K_SECRET, seed);
    }
    return hashLong(data, off, len, seed == 0 ? K_SECRET : customSecret(seed));
  }

  private static long len0to16(byte[] in, int off, int len, byte[] s, long seed) {
    if (len > 8) {
      long bitflip1 = (le64(s, 24) ^ le64(s, 32)) + seed;
      long bitflip2 = (le64(s, 40) ^ le64(s, 48)) - seed;
      long lo = le64(in, off) ^ bitflip1;
      long hi = le64(in, off + len - 8) ^ bitflip2;
      long acc = len + Long.reverseBytes(lo) + hi + mul128Fold64(lo, hi);
      return avalanche(acc);
    }
    if (len >= 4) {
      seed ^= (long) Integer.reverseBytes((int) seed) << 32;
      long input1 = le32(in, off);
      long input2 = le32(in, off + len - 4);
      long bitflip = (le64(s, 8) ^ le64(s, 16)) - seed;
      long input64 = input2 + (input1 << 32);
      return rrmxmx(input64 ^ bitflip, len);
    }
    if (len > 0) {
      int c1 = in[off] & 0xff;
      int c2 = in[off + (len >> 1)] & 0xff;
      int c3 = in[off + len - 1] & 0xff;
      long combined = ((long) c1 << 16) | ((long) c2 << 24) | c3 | ((long) len << 8);
      long bitflip = (le32(s, 0) ^ le32(s, 4)) + seed;
      return xxh64Avalanche(combined ^ bitflip);
    }
    return xxh64Avalanche(seed ^ le64(s, 56) ^ le64(s, 64));
  }

  private static long mix16(byte[] in, int off, byte[] s, int soff, long seed) {
    long lo = le64(in, off);
    long hi = le64(in, off + 8);
    return mul128Fold64(lo ^ (le64(s, soff) + seed), hi ^ (le64(s, soff + 8) - seed));
  }

  private static long len17to128(byte[] in, int off, int len, byte[] s, long seed) {
    long acc = len * P64_1;
    if (len > 32) {
      if (len > 64) {
        if (len > 96) {
          acc += mix16(in, off + 48, s, 96, seed);
          acc += mix16(in, off + len - 64, s, 112, seed);
        }
        acc += mix16(in, off + 32, s, 64, seed);
        acc += mix16(in, off + len - 48, s, 80, seed);
      }
      acc += mix16(in, off + 16, s, 32, seed);
      acc += mix16(in, off + len - 32, s, 48, seed);
    }
    acc += mix16(in, off, s, 0, seed);
    acc += mix16(in, off + len - 16, s, 16, seed);
    return avalanche(acc);
  }

  private static long len129to240(byte[] in, int off, int len, byte[] s, long seed) {
    long acc = len * P64_1;
    int rounds = len / 16;
    for (int i = 0; i < 8; i++) {
      acc += mix16(in, off + 16 * i, s, 16 * i, seed);
    }
    acc = avalanche(acc);
    // Rounds 8.. use the secret from offset 3 (MIDSIZE_STARTOFFSET); the
    // last 16 bytes use it at 136 - 17 (SECRET_SIZE_MIN - MIDSIZE_LASTOFFSET).
    for (int i = 8; i < rounds; i++) {
      acc += mix16(in, off + 16 * i, s, 16 * (i - 8) + 3, seed);
    }
    acc += mix16(in, off + len - 16, s, 136 - 17, seed);
    return avalanche(acc);
  }

  private static byte[] customSecret(long seed) {
    byte[] out = new byte[SECRET_SIZE];
    for (int i = 0; i < SECRET_SIZE / 16; i++) {
      putLe64(out, 16 * i, le64(K_SECRET, 16 * i) + seed);
      putLe64(out, 16 * i + 8, le64(K_SECRET, 16 * i + 8) - seed);
    }
    return out;
  }

  private static long hashLong(byte[] in, int off, int len, byte[] s) {
    long[] acc = {P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1};
    int blocks = (len - 1) / BLOCK_LEN;
    for (int n = 0; n < blocks; n++) {
      accumulate(acc, in, off + n * BLOCK_LEN, s, STRIPES_PER_BLOCK);
      scramble(acc, s, SECRET_SIZE - STRIPE_LEN);
    }
    int stripes = ((len - 1) - BLOCK_LEN * blocks) / STRIPE_LEN;
    accumulate(acc, in, off + blocks * BLOCK_LEN, s, stripes);
    // The last stripe, with the secret at SECRET_SIZE - 64 - 7 (LASTACC_START).
    accumulate512(acc, in, off + len - STRIPE_LEN, s, SECRET_SIZE - STRIPE_LEN - 7);
    long result = len * P64_1;
    for (int i = 0; i < 4; i++) {  // MERGEACCS_START = 11
      result += mul128Fold64(acc[2 * i] ^ le64(s, 11 + 16 * i),
          acc[2 * i + 1] ^ le64(s, 11 + 16 * i + 8));
    }
    return avalanche(result);
  }

  private static void accumulate(long[] acc, byte[] in, int off, byte[] s, int stripes) {
    for (int n = 0; n < stripes; n++) {
      accumulate512(acc, in, off + n * STRIPE_LEN, s, n * SECRET_CONSUME_RATE);
    }
  }

  private static void accumulate512(long[] acc, byte[] in, int off, byte[] s, int soff) {
    for (int i = 0; i < 8; i++) {
      long value = le64(in, off + 8 * i);
      long key = value ^ le64(s, soff + 8 * i);
      acc[i ^ 1] += value;
      acc[i] += (key & 0xffffffffL) * (key >>> 32);
    }
  }

  private static void scramble(long[] acc, byte[] s, int soff) {
    for (int i = 0; i < 8; i++) {
      long a = acc[i];
      a ^= a >>> 47;
      a ^= le64(s, soff + 8 * i);
      acc[i] = a * P32_1;
    }
  }

  /** The low 64 bits of the 128-bit product XORed with its high 64 bits. */
  private static long mul128Fold64(long a, long b) {
    long lo = a * b;
    // Math.multiplyHigh is signed: add back b (a) where a (b) is "negative".
    long hi = Math.multiplyHigh(a, b) + ((a >> 63) & b) + ((b >> 63) & a);
    return lo ^ hi;
  }

  private static long avalanche(long h) {
    h ^= h >>> 37;
    h *= PRIME_MX1;
    return h ^ (h >>> 32);
  }

  private static long xxh64Avalanche(long h) {
    h ^= h >>> 33;
    h *= P64_2;
    h ^= h >>> 29;
    h *= P64_3;
    return h ^ (h >>> 32);
  }

  private static long rrmxmx(long h, int len) {
    h ^= Long.rotateLeft(h, 49) ^ Long.rotateLeft(h, 24);
    h *= PRIME_MX2;
    h ^= (h >>> 35) + len;
    h *= PRIME_MX2;
    return h ^ (h >>> 28);
  }

  static long le64(byte[] b, int off) {
    return (b[off] & 0xffL) | (b[off + 1] & 0xffL) << 8 | (b[off + 2] & 0xffL) << 16
        | (b[off + 3] & 0xffL) << 24 | (b[off + 4] & 0xffL) << 32 | (b[off + 5] & 0xffL) << 40
        | (b[off + 6] & 0xffL) << 48 | (b[off + 7] & 0xffL) << 56;
  }

  static long le32(byte[] b, int off) {
    return (b[off] & 0xffL) | (b[off + 1] & 0xffL) << 8 | (b[off + 2] & 0xffL) << 16
        | (b[off + 3] & 0xffL) << 24;
  }

  private static void putLe64(byte[] b, int off, long v) {
    for (int i = 0; i < 8; i++) {
      b[off + i] = (byte) (v >>> (8 * i));
    }
  }

  private static byte[] hex(String s) {
    byte[] out = new byte[s.length() / 2];
    for (int i = 0; i < out.length; i++) {
      out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
    }
    return out;
  }
}
