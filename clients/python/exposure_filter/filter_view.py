"""Decoder of the exposure-filter portable filter format, versions 2 and 1.

Written from docs/filter-format.md alone (standard library + Debian's
python3-xxhash), independently of the C++ FilterView and of the server's
fingerprint-run code, and checked against the golden vectors in
tests/testdata/ (format 2) and tests/testdata/format1/ (the previous
release's format, which a client may still hold cached), and against a live
server.

    view = FilterView.parse(get_filter_response.filter)   # MalformedFilter on bad bytes
    view.may_contain_id(123)        # True: maybe exposed (drop); False: never exposed
    view.may_contain_key("video:9") # ValueError for "": not an item
    view.keep_mask_ids([1, 2, 3])   # [True, False, ...] True = keep (not exposed)
"""

import struct

import xxhash

MAGIC = b"EXPF"
FORMAT_VERSIONS = (1, 2)  # what this decoder reads; the server sends 2
TRAILER_BYTES = 8
HASH_SEED = 0x657275736F707865  # ASCII "exposure" read as a little-endian u64
HASH_XXH3_64 = 1
BLOCK_BYTES = 64
MAX_SLICES = 8
MAX_SEGMENTS_PER_SLICE = 8
MAX_BLOCKS_PER_SEGMENT = 1 << 26
MIN_PROBES = 1
MAX_PROBES = 16
MIN_FP_RATE = 1e-6
MAX_FP_RATE = 0.5
PROBE_MULTIPLIER = 0x9E3779B9
_U32 = 0xFFFFFFFF

# Format 1 (previous release).
HEADER1_BYTES = 32
SEGMENT1_BYTES = 32
BLOCK_BYTES_LOG2 = 6
MAX_SEGMENTS1 = 64
_HEADER1 = struct.Struct("<4sHHQIBBHd")
_SEGMENT1 = struct.Struct("<qqIIBB6s")

# Format 2.
_HEADER2 = struct.Struct("<4sHBBdq")  # magic, version, hash, S, delta, span
_SLICE2 = struct.Struct("<qBB")       # start_ms, Bloom segments G, runs R
_SEGMENT2 = struct.Struct("<IB")      # num_blocks, k
_RUN_HEADER = struct.Struct("<BBII")  # b, Rice k, n, U - 1
MIN_SLICE_SPAN_MS = 1000
MAX_RICE_K = 31
# A run's payload (L - 10) is shorter than this: under 2^32 - 64 bits.
MAX_RUN_PAYLOAD_BYTES = (1 << 29) - 8

_ID = struct.Struct("<Q")
_U16 = struct.Struct("<H")


class MalformedFilter(ValueError):
    """The bytes are not a valid filter of a version this decoder reads."""


def hash_id(item_id):
    """The 64-bit hash of a numeric item id (0 <= id < 2**64)."""
    return xxhash.xxh3_64_intdigest(_ID.pack(item_id), seed=HASH_SEED)


def hash_key(key):
    """The 64-bit hash of a string item key (str is encoded as UTF-8)."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    return xxhash.xxh3_64_intdigest(key, seed=HASH_SEED)


def _check_key(key, field):
    """Rejects the empty key, which is not an item: RecordExposure and
    FilterRecalled answer INVALID_ARGUMENT for it, so a local check must not
    answer either."""
    if len(key) == 0:
        raise ValueError("%s: empty (an item key is at least 1 byte; the "
                         "server rejects empty keys)" % field)


class Segment:
    """A blocked Bloom segment: format 1, or a legacy slice in format 2."""

    __slots__ = ("start_ms", "end_ms", "num_blocks", "item_count", "k",
                 "level", "offset")

    def __init__(self, start_ms, end_ms, num_blocks, item_count, k, level,
                 offset):
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.num_blocks = num_blocks
        self.item_count = item_count  # format 1 only (informational)
        self.k = k
        self.level = level  # position in its slice
        self.offset = offset  # where its blocks start in the filter bytes

    def as_dict(self):
        """Format 1's segment table entry."""
        return {"start_ms": self.start_ms, "end_ms": self.end_ms,
                "num_blocks": self.num_blocks, "item_count": self.item_count,
                "k": self.k, "level": self.level}


class Run:
    """A Golomb-Rice coded set of fingerprints (format 2)."""

    __slots__ = ("precision", "universe", "rice_k", "count", "payload_bytes",
                 "fingerprints", "_set")

    def __init__(self, precision, universe, rice_k, fingerprints,
                 payload_bytes):
        self.precision = precision
        self.universe = universe
        self.rice_k = rice_k
        self.count = len(fingerprints)
        self.payload_bytes = payload_bytes
        self.fingerprints = fingerprints  # ascending
        self._set = frozenset(fingerprints)

    def fingerprint(self, h):
        """fp(h) = (prefix_b(h) * U) >> b, prefix_b(h) = h >> (64 - b)."""
        return ((h >> (64 - self.precision)) * self.universe) >> self.precision

    def contains_hash(self, h):
        return self.fingerprint(h) in self._set

    def as_dict(self):
        return {"precision": self.precision, "universe": self.universe,
                "rice_k": self.rice_k, "count": self.count,
                "payload_bytes": self.payload_bytes}


class Slice:
    __slots__ = ("start_ms", "end_ms", "segments", "runs")

    def __init__(self, start_ms, end_ms):
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.segments = []
        self.runs = []

    def as_dict(self):
        return {"start_ms": self.start_ms, "end_ms": self.end_ms,
                "bloom_segments": [{"num_blocks": s.num_blocks, "k": s.k}
                                   for s in self.segments],
                "runs": [r.as_dict() for r in self.runs]}


def decode_run(data, offset, length, index):
    """Decodes and validates the run of `length` bytes at data[offset:] (b,
    k, n, U - 1, payload), which the caller has checked fit before the
    checksum. Checks in the order of docs/filter-format.md ("What a decoder
    must reject", 7e): the header, then the codes' layout, then the
    fingerprints' range, so that it names the same error as the C++
    decoder for a run that breaks several rules."""
    if length < _RUN_HEADER.size:
        raise MalformedFilter("run %d of %d bytes is shorter than its %d-byte "
                              "header" % (index, length, _RUN_HEADER.size))
    b, k, n, u_minus_1 = _RUN_HEADER.unpack_from(data, offset)
    u = u_minus_1 + 1
    if not 1 <= b <= 32:
        raise MalformedFilter("run %d precision %d outside 1..32" % (index, b))
    if not 2 <= u <= 1 << b:
        raise MalformedFilter("run %d universe %d outside 2..2^%d"
                              % (index, u, b))
    if k > MAX_RICE_K:
        raise MalformedFilter("run %d Rice parameter %d above 31" % (index, k))
    if n > u:
        raise MalformedFilter("run %d count %d exceeds universe %d"
                              % (index, n, u))
    payload_bytes = length - _RUN_HEADER.size
    # Checked before a payload byte is read: a run's bit positions stay
    # below 2^32 - 64, so no q_i * 2^k or f_i below can pass 2^63.
    if payload_bytes >= MAX_RUN_PAYLOAD_BYTES:
        raise MalformedFilter("run %d payload of %d bytes is too large (at "
                              "most 2^29 - 9)" % (index, payload_bytes))
    if n == 0:
        raise MalformedFilter("run %d is empty" % index)
    total = payload_bytes * 8
    if n * (k + 1) > total:
        raise MalformedFilter("run %d truncated: %d codes of k = %d need more "
                              "than %d payload bytes"
                              % (index, n, k, payload_bytes))
    payload = data[offset + _RUN_HEADER.size:offset + length]
    # The payload's bits, least significant bit of byte 0 first.
    bits = "".join(format(byte, "08b")[::-1] for byte in payload)
    # The codes' layout first: n one bits in the unary part (each q_i is the
    # number of zeros before the next one), nothing set after the last.
    pos = n * k  # the unary parts follow the n remainders
    quotients = []
    for i in range(n):
        one = bits.find("1", pos)
        if one < 0:
            raise MalformedFilter("run %d truncated in code %d" % (index, i))
        quotients.append(one - pos)
        pos = one + 1
    if (pos + 7) // 8 != payload_bytes or "1" in bits[pos:]:
        raise MalformedFilter("run %d has bytes or bits after its last code"
                              % index)
    # Then the fingerprints: f_i = f_(i-1) + 1 + q_i * 2^k + r_i, strictly
    # increasing, all below U. q_i >= U puts f_i at or past U already, so it
    # is rejected before the shift, as the spec asks of every decoder.
    fingerprints = []
    f = -1
    for i, q in enumerate(quotients):
        if q < u:
            r = int(bits[i * k:(i + 1) * k][::-1], 2) if k else 0
            f = f + 1 + ((q << k) | r)  # gap d_i = f_i - f_(i-1) - 1
        if q >= u or f >= u:
            raise MalformedFilter("run %d code %d: fingerprint reaches the "
                                  "universe %d" % (index, i, u))
        fingerprints.append(f)
    return Run(b, u, k, fingerprints, payload_bytes)


class FilterView:
    """A parsed, validated filter. Holds a reference to the bytes."""

    def __init__(self, data, format_version, slices, fp_rate_target,
                 slice_span_ms, checksum):
        self._data = data
        self.format_version = format_version
        self.slices = slices
        self.segments = [s for sl in slices for s in sl.segments]
        self.runs = [r for sl in slices for r in sl.runs]
        self.fp_rate_target = fp_rate_target
        self.slice_span_ms = slice_span_ms
        self.checksum = checksum

    @property
    def version(self):
        """The GetFilter `version` of these bytes (16 lowercase hex digits)."""
        return "%016x" % self.checksum

    @classmethod
    def parse(cls, data):
        data = bytes(data)
        if len(data) < 6 or data[:4] != MAGIC:
            if len(data) < _HEADER2.size + TRAILER_BYTES:
                raise MalformedFilter("length %d is shorter than a header"
                                      % len(data))
            raise MalformedFilter("bad magic")
        (version,) = _U16.unpack_from(data, 4)
        if version == 2:
            return cls._parse_v2(data)
        if version == 1:
            return cls._parse_v1(data)
        raise MalformedFilter(
            "unsupported format version %d: this decoder reads format "
            "versions 1 and 2; upgrade the exposure_filter client library "
            "(docs/filter-format.md) or use FilterRecalled" % version)

    @staticmethod
    def _checksum(data):
        body_end = len(data) - TRAILER_BYTES
        (checksum,) = struct.unpack_from("<Q", data, body_end)
        if xxhash.xxh3_64_intdigest(data[:body_end]) != checksum:
            raise MalformedFilter("checksum mismatch")
        return checksum

    @staticmethod
    def _check_segment(i, num_blocks, k):
        if not 1 <= num_blocks <= MAX_BLOCKS_PER_SEGMENT:
            raise MalformedFilter("segment %d block count %d out of range"
                                  % (i, num_blocks))
        if not MIN_PROBES <= k <= MAX_PROBES:
            raise MalformedFilter("segment %d probe count %d out of range"
                                  % (i, k))

    @staticmethod
    def _check_fp_rate(fp_rate):
        if not MIN_FP_RATE <= fp_rate <= MAX_FP_RATE:  # NaN fails too
            raise MalformedFilter("fp target %r outside [1e-6, 0.5]" % fp_rate)

    @classmethod
    def _parse_v2(cls, data):
        size = len(data)
        if size < _HEADER2.size + TRAILER_BYTES:
            raise MalformedFilter("length %d is shorter than header" % size)
        _magic, _version, algorithm, count, fp_rate, span = \
            _HEADER2.unpack_from(data, 0)
        if algorithm != HASH_XXH3_64:
            raise MalformedFilter("unknown hash algorithm %d" % algorithm)
        checksum = cls._checksum(data)
        if count > MAX_SLICES:
            raise MalformedFilter("slice count %d exceeds %d"
                                  % (count, MAX_SLICES))
        cls._check_fp_rate(fp_rate)
        if span < MIN_SLICE_SPAN_MS:
            raise MalformedFilter("slice span %d ms below 1000" % span)
        body_end = size - TRAILER_BYTES
        offset = _HEADER2.size
        slices = []
        n_segments = n_runs = 0

        def need(n, what):
            if n > body_end - offset:
                raise MalformedFilter("%s truncated" % what)

        for s in range(count):
            need(_SLICE2.size, "slice %d header" % s)
            start_ms, n_seg, n_run = _SLICE2.unpack_from(data, offset)
            offset += _SLICE2.size
            if start_ms < 0 or start_ms % span or start_ms > (1 << 63) - 1 - span:
                raise MalformedFilter("slice %d start %d is not a non-negative "
                                      "multiple of the span" % (s, start_ms))
            if slices and start_ms <= slices[-1].start_ms:
                raise MalformedFilter("slice %d out of order" % s)
            if n_seg > MAX_SEGMENTS_PER_SLICE or n_seg + n_run == 0:
                raise MalformedFilter("slice %d has %d segments and %d runs"
                                      % (s, n_seg, n_run))
            sl = Slice(start_ms, start_ms + span)
            need(_SEGMENT2.size * n_seg, "slice %d segment table" % s)
            for j in range(n_seg):
                num_blocks, k = _SEGMENT2.unpack_from(data, offset)
                offset += _SEGMENT2.size
                cls._check_segment(n_segments + j, num_blocks, k)
                sl.segments.append(Segment(sl.start_ms, sl.end_ms, num_blocks,
                                           0, k, j, None))
            for _ in range(n_run):
                need(4, "run %d length" % n_runs)
                (length,) = struct.unpack_from("<I", data, offset)
                offset += 4
                need(length, "run %d" % n_runs)
                sl.runs.append(decode_run(data, offset, length, n_runs))
                offset += length
                n_runs += 1
            for seg in sl.segments:
                need(seg.num_blocks * BLOCK_BYTES,
                     "segment %d blocks" % n_segments)
                seg.offset = offset
                offset += seg.num_blocks * BLOCK_BYTES
                n_segments += 1
            slices.append(sl)
        if offset != body_end:
            raise MalformedFilter("%d trailing bytes" % (body_end - offset))
        return cls(data, 2, slices, fp_rate, span, checksum)

    @classmethod
    def _parse_v1(cls, data):
        size = len(data)
        if size < HEADER1_BYTES + TRAILER_BYTES:
            raise MalformedFilter("length %d is shorter than header" % size)
        (_magic, _version, header_size, seed, count, algorithm, block_log2,
         _reserved, fp_rate) = _HEADER1.unpack_from(data, 0)
        if header_size != HEADER1_BYTES:
            raise MalformedFilter("unexpected header size %d" % header_size)
        if seed != HASH_SEED or algorithm != HASH_XXH3_64:
            raise MalformedFilter("unknown hash algorithm or seed")
        if block_log2 != BLOCK_BYTES_LOG2:
            raise MalformedFilter("unknown block size")
        checksum = cls._checksum(data)
        if count > MAX_SEGMENTS1:
            raise MalformedFilter("segment count %d exceeds %d"
                                  % (count, MAX_SEGMENTS1))
        cls._check_fp_rate(fp_rate)
        body_end = size - TRAILER_BYTES
        offset = HEADER1_BYTES + count * SEGMENT1_BYTES
        if offset > body_end:
            raise MalformedFilter("truncated segment table")
        slices = []
        span = 0
        for i in range(count):
            (start_ms, end_ms, num_blocks, item_count, k, level,
             _pad) = _SEGMENT1.unpack_from(data, HEADER1_BYTES
                                           + i * SEGMENT1_BYTES)
            cls._check_segment(i, num_blocks, k)
            if start_ms < 0 or end_ms <= start_ms:
                raise MalformedFilter("segment %d does not cover [start_ms, "
                                      "end_ms) with 0 <= start" % i)
            if slices and slices[-1].start_ms == start_ms:
                sl = slices[-1]
                if sl.end_ms != end_ms:
                    raise MalformedFilter("segment %d: slice end differs" % i)
                if level != len(sl.segments) or level >= MAX_SEGMENTS_PER_SLICE:
                    raise MalformedFilter("segment %d level %d out of order"
                                          % (i, level))
            else:
                if level != 0:
                    raise MalformedFilter("segment %d starts a slice at level %d"
                                          % (i, level))
                if slices and start_ms < slices[-1].start_ms:
                    raise MalformedFilter("segment %d: slices out of order" % i)
                if slices and end_ms - start_ms != span:
                    raise MalformedFilter("segment %d: slice span differs" % i)
                if len(slices) >= MAX_SLICES:
                    raise MalformedFilter("more than %d slices" % MAX_SLICES)
                span = end_ms - start_ms
                sl = Slice(start_ms, end_ms)
                slices.append(sl)
            block_bytes = num_blocks * BLOCK_BYTES
            if block_bytes > body_end - offset:
                raise MalformedFilter("segment %d blocks truncated" % i)
            sl.segments.append(Segment(start_ms, end_ms, num_blocks,
                                       item_count, k, level, offset))
            offset += block_bytes
        if offset != body_end:
            raise MalformedFilter("%d trailing bytes" % (body_end - offset))
        return cls(data, 1, slices, fp_rate, span, checksum)

    def _segment_claims(self, seg, h):
        data = self._data
        block = seg.offset + (((h >> 32) * seg.num_blocks) >> 32) * BLOCK_BYTES
        x = h & _U32
        for _ in range(seg.k):
            bit = x >> 23  # 0..511
            # Bit b of the block = bit (b & 63) of LE u64 word (b >> 6)
            # = bit (b & 7) of byte (b >> 3).
            if not data[block + (bit >> 3)] >> (bit & 7) & 1:
                return False
            x = (x * PROBE_MULTIPLIER) & _U32
        return True

    def may_contain_hash(self, h):
        """True iff any live slice's Bloom segment or run claims h."""
        for seg in self.segments:
            if self._segment_claims(seg, h):
                return True
        for run in self.runs:
            if run.contains_hash(h):
                return True
        return False

    def may_contain_id(self, item_id):
        return self.may_contain_hash(hash_id(item_id))

    def may_contain_key(self, key):
        """As may_contain_id for a string key. The empty key is not an item
        (the server rejects it, docs/filter-format.md): ValueError."""
        _check_key(key, "key")
        return self.may_contain_hash(hash_key(key))

    def keep_mask_hashes(self, hashes):
        """True where the hash was never exposed (keep it), in order.

        Runs are checked the batch way the spec describes: the candidates
        sorted once by their hash's top 32 bits, then one merge pass per run
        (fingerprints are monotone in the hash, so they come out sorted)."""
        keep = [True] * len(hashes)
        for i, h in enumerate(hashes):
            for seg in self.segments:
                if self._segment_claims(seg, h):
                    keep[i] = False
                    break
        order = sorted(range(len(hashes)), key=lambda i: hashes[i] >> 32)
        for run in self.runs:
            fps = run.fingerprints
            j = 0
            for i in order:
                f = run.fingerprint(hashes[i])
                while j < len(fps) and fps[j] < f:
                    j += 1
                if j == len(fps):
                    break
                if fps[j] == f:
                    keep[i] = False
        return keep

    def keep_mask_ids(self, ids):
        return self.keep_mask_hashes([hash_id(i) for i in ids])

    def keep_mask_keys(self, keys):
        """As keep_mask_ids for string keys; ValueError naming keys[i] for
        an empty key, as FilterRecalled rejects the whole request."""
        for i, k in enumerate(keys):
            _check_key(k, "keys[%d]" % i)
        return self.keep_mask_hashes([hash_key(k) for k in keys])

    def estimated_fp_rate(self):
        """P(a fresh item is claimed): 1 - prod(1 - p) over runs (p = n / U)
        and Bloom segments (p measured from the bits: the mean over blocks
        of (set bits / 512)^k)."""
        clean = 1.0
        for seg in self.segments:
            clean *= 1.0 - self._measured_fp(seg)
        for run in self.runs:
            clean *= 1.0 - run.count / run.universe
        return min(1.0, max(0.0, 1.0 - clean))

    def _measured_fp(self, seg):
        total = 0.0
        for b in range(seg.num_blocks):
            start = seg.offset + b * BLOCK_BYTES
            ones = sum(bin(x).count("1")
                       for x in self._data[start:start + BLOCK_BYTES])
            total += (ones / 512.0) ** seg.k
        return total / seg.num_blocks

