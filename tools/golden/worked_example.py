#!/usr/bin/env python3
"""Prints the worked example of docs/filter-format.md from the golden vector
tests/testdata/tiny.json (bytes made by the real encoder), annotated with the
independent Python decoder's arithmetic. Regenerate the doc section with:
    PYTHONPATH=clients/python /usr/bin/python3 tools/golden/worked_example.py
clients/python/tests/test_golden_vectors.py checks the doc still shows the
vector's bytes.
"""

import json
import os
import struct
import sys

from exposure_filter.filter_view import FilterView, hash_id, hash_key

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def hexdump(data, base=0):
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        lines.append("%04x  %s" % (base + off,
                                   " ".join("%02x" % b for b in chunk)))
    return "\n".join(lines)


def explain(run, label, h):
    b, u = run.precision, run.universe
    prefix = h >> (64 - b)
    fp = (prefix * u) >> b
    hit = fp in run.fingerprints
    return ("%s: h = 0x%016x, prefix_%d = h >> %d = %d, fp = (%d * %d) >> %d"
            " = %d\n  -> %s" % (label, h, b, 64 - b, prefix, prefix, u, b, fp,
                                "in the run: may have been exposed" if hit
                                else "not in the run: never exposed"))


def main():
    with open(os.path.join(ROOT, "tests", "testdata", "tiny.json")) as f:
        v = json.load(f)
    data = bytes.fromhex(v["filter_hex"])
    view = FilterView.parse(data)
    sl = view.slices[0]
    run = view.runs[0]
    out = sys.stdout
    out.write("```\n" + hexdump(data) + "\n```\n\n")
    fp = struct.unpack_from("<d", data, 8)[0]
    run_at = 24 + 10 + 4
    payload_at = run_at + 10
    rows = [
        (0, 4, "magic", '"EXPF"'),
        (4, 2, "format version", "2"),
        (6, 1, "hash algorithm", "1 (XXH3-64, seed \"exposure\")"),
        (7, 1, "slice count S", str(len(view.slices))),
        (8, 8, "fp target δ (f64)", repr(fp)),
        (16, 8, "slice span (i64 ms)", "%d (5 days)" % view.slice_span_ms),
        (24, 8, "slice 0 start_ms", "%d (end = start + span = %d)"
         % (sl.start_ms, sl.end_ms)),
        (32, 1, "slice 0 Bloom segment count G", str(len(sl.segments))),
        (33, 1, "slice 0 run count R", str(len(sl.runs))),
        (34, 4, "run 0 length L", "%d: the 10-byte run header and %d payload "
         "bytes that follow L (the run takes 4 + %d bytes)"
         % (10 + run.payload_bytes, run.payload_bytes,
            10 + run.payload_bytes)),
        (run_at, 1, "run 0 precision b", str(run.precision)),
        (run_at + 1, 1, "run 0 Rice k", str(run.rice_k)),
        (run_at + 2, 4, "run 0 count n", str(run.count)),
        (run_at + 6, 4, "run 0 universe U − 1", "%d (U = 2^%d = %d)"
         % (run.universe - 1, run.precision, run.universe)),
        (payload_at, run.payload_bytes, "run 0 payload",
         "%d remainders of %d bits, then %d unary codes"
         % (run.count, run.rice_k, run.count)),
        (len(data) - 8, 8, "checksum = version", "0x%016x (\"%s\")"
         % (view.checksum, view.version)),
    ]
    out.write("| offset | bytes | field | value |\n|---|---|---|---|\n")
    for off, n, name, value in rows:
        out.write("| %d | %s | %s | %s |\n"
                  % (off, " ".join("%02x" % b
                                   for b in data[off:off + min(n, 8)])
                     + (" ..." if n > 8 else ""), name, value))
    # The run's codes, as a decoder reads them.
    k = run.rice_k
    payload = data[payload_at:payload_at + run.payload_bytes]
    bits = "".join(format(byte, "08b")[::-1] for byte in payload)
    out.write("\nThe payload's %d bits, LSB of byte 0 first:\n\n```\n"
              % (8 * len(payload)))
    out.write("remainders: " + " ".join(
        bits[i * k:(i + 1) * k] for i in range(run.count)) + "\n")
    pos = run.count * k
    codes = []
    for _ in range(run.count):
        one = bits.index("1", pos)
        codes.append(bits[pos:one + 1])
        pos = one + 1
    out.write("unary:      " + " ".join(codes) + "  (then %d zero padding bits)\n"
              % (8 * len(payload) - pos))
    prev = -1
    for i, f in enumerate(run.fingerprints):
        q = len(codes[i]) - 1
        r = int(bits[i * k:(i + 1) * k][::-1], 2)
        out.write("code %d: r = %d, q = %d, gap d = q * 2^%d + r = %d, "
                  "f%d = %s%d\n" % (i, r, q, k, (q << k) | r, i,
                                     "" if i == 0 else "f%d + 1 + d = " % (i - 1),
                                     f))
        prev = f
    out.write("```\n\n```\n")
    out.write(explain(run, "id 1", hash_id(1)) + "\n")
    out.write(explain(run, 'key "video:42"', hash_key("video:42")) + "\n")
    out.write(explain(run, "id 4", hash_id(4)) + "\n")
    out.write("```\n")


if __name__ == "__main__":
    main()
