"""Decoder of the exposure-filter portable filter format, version 1.

Written from docs/filter-format.md alone (standard library + Debian's
python3-xxhash), independently of the C++ FilterView, and checked against the
golden vectors in tests/testdata/ and against a live server.

    view = FilterView.parse(get_filter_response.filter)   # MalformedFilter on bad bytes
    view.may_contain_id(123)        # True: maybe exposed (drop); False: never exposed
    view.may_contain_key("video:9")
    view.keep_mask_ids([1, 2, 3])   # [True, False, ...] True = keep (not exposed)
"""

import struct

import xxhash

MAGIC = b"EXPF"
FORMAT_VERSION = 1
HEADER_BYTES = 32
SEGMENT_HEADER_BYTES = 32
TRAILER_BYTES = 8
HASH_SEED = 0x657275736F707865  # ASCII "exposure" read as a little-endian u64
HASH_XXH3_64 = 1
BLOCK_BYTES_LOG2 = 6
BLOCK_BYTES = 64
MAX_SEGMENTS = 64
MAX_BLOCKS_PER_SEGMENT = 1 << 26
MIN_PROBES = 1
MAX_PROBES = 16
PROBE_MULTIPLIER = 0x9E3779B9
_U32 = 0xFFFFFFFF

_HEADER = struct.Struct("<4sHHQIBBHd")
_SEGMENT = struct.Struct("<qqIIBB6s")
_ID = struct.Struct("<Q")


class MalformedFilter(ValueError):
    """The bytes are not a valid version-1 filter."""


def hash_id(item_id):
    """The 64-bit hash of a numeric item id (0 <= id < 2**64)."""
    return xxhash.xxh3_64_intdigest(_ID.pack(item_id), seed=HASH_SEED)


def hash_key(key):
    """The 64-bit hash of a string item key (str is encoded as UTF-8)."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    return xxhash.xxh3_64_intdigest(key, seed=HASH_SEED)


class Segment:
    """One entry of the segment table."""

    __slots__ = ("start_ms", "end_ms", "num_blocks", "item_count", "k",
                 "level", "offset")

    def __init__(self, start_ms, end_ms, num_blocks, item_count, k, level,
                 offset):
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.num_blocks = num_blocks
        self.item_count = item_count
        self.k = k
        self.level = level
        self.offset = offset  # where its blocks start in the filter bytes

    def as_dict(self):
        return {"start_ms": self.start_ms, "end_ms": self.end_ms,
                "num_blocks": self.num_blocks, "item_count": self.item_count,
                "k": self.k, "level": self.level}


class FilterView:
    """A parsed, validated filter. Holds a reference to the bytes."""

    def __init__(self, data, segments, fp_rate_target, checksum):
        self._data = data
        self.segments = segments
        self.fp_rate_target = fp_rate_target
        self.checksum = checksum

    @property
    def version(self):
        """The GetFilter `version` of these bytes (16 lowercase hex digits)."""
        return "%016x" % self.checksum

    @classmethod
    def parse(cls, data):
        data = bytes(data)
        size = len(data)
        if size < HEADER_BYTES + TRAILER_BYTES:
            raise MalformedFilter("length %d is shorter than header" % size)
        (magic, version, header_size, seed, count, algorithm, block_log2,
         _reserved, fp_rate) = _HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise MalformedFilter("bad magic")
        if version != FORMAT_VERSION:
            raise MalformedFilter("unsupported format version %d" % version)
        if header_size != HEADER_BYTES:
            raise MalformedFilter("unexpected header size %d" % header_size)
        if seed != HASH_SEED or algorithm != HASH_XXH3_64:
            raise MalformedFilter("unknown hash algorithm or seed")
        if block_log2 != BLOCK_BYTES_LOG2:
            raise MalformedFilter("unknown block size")
        body_end = size - TRAILER_BYTES
        (checksum,) = struct.unpack_from("<Q", data, body_end)
        if xxhash.xxh3_64_intdigest(data[:body_end]) != checksum:
            raise MalformedFilter("checksum mismatch")
        if count > MAX_SEGMENTS:
            raise MalformedFilter("segment count %d exceeds %d"
                                  % (count, MAX_SEGMENTS))
        offset = HEADER_BYTES + count * SEGMENT_HEADER_BYTES
        if offset > body_end:
            raise MalformedFilter("truncated segment table")
        segments = []
        for i in range(count):
            (start_ms, end_ms, num_blocks, item_count, k, level,
             _pad) = _SEGMENT.unpack_from(
                 data, HEADER_BYTES + i * SEGMENT_HEADER_BYTES)
            if not 1 <= num_blocks <= MAX_BLOCKS_PER_SEGMENT:
                raise MalformedFilter("segment %d block count %d out of range"
                                      % (i, num_blocks))
            if not MIN_PROBES <= k <= MAX_PROBES:
                raise MalformedFilter("segment %d probe count %d out of range"
                                      % (i, k))
            if end_ms < start_ms:
                raise MalformedFilter("segment %d ends before it starts" % i)
            block_bytes = num_blocks * BLOCK_BYTES
            if block_bytes > body_end - offset:
                raise MalformedFilter("segment %d blocks truncated" % i)
            segments.append(Segment(start_ms, end_ms, num_blocks, item_count,
                                    k, level, offset))
            offset += block_bytes
        if offset != body_end:
            raise MalformedFilter("%d trailing bytes" % (body_end - offset))
        return cls(data, segments, fp_rate, checksum)

    def may_contain_hash(self, h):
        data = self._data
        hi = h >> 32
        for seg in self.segments:
            block = seg.offset + ((hi * seg.num_blocks) >> 32) * BLOCK_BYTES
            x = h & _U32
            for _ in range(seg.k):
                bit = x >> 23  # 0..511
                # Bit b of the block = bit (b & 63) of LE u64 word (b >> 6)
                # = bit (b & 7) of byte (b >> 3).
                if not data[block + (bit >> 3)] >> (bit & 7) & 1:
                    break
                x = (x * PROBE_MULTIPLIER) & _U32
            else:
                return True
        return False

    def may_contain_id(self, item_id):
        return self.may_contain_hash(hash_id(item_id))

    def may_contain_key(self, key):
        return self.may_contain_hash(hash_key(key))

    def keep_mask_ids(self, ids):
        """True where the id was never exposed (keep it), in order."""
        return [not self.may_contain_hash(hash_id(i)) for i in ids]

    def keep_mask_keys(self, keys):
        return [not self.may_contain_hash(hash_key(k)) for k in keys]
