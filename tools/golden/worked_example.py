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
        lines.append("%04x  %s" % (base + off, " ".join("%02x" % b for b in chunk)))
    return "\n".join(lines)


def probes(h, k):
    x = h & 0xFFFFFFFF
    out = []
    for _ in range(k):
        out.append(x >> 23)
        x = (x * 0x9E3779B9) & 0xFFFFFFFF
    return out


def explain(view, data, label, h):
    seg = view.segments[0]
    block = ((h >> 32) * seg.num_blocks) >> 32
    base = seg.offset + block * 64
    lines = ["%s: h = 0x%016x, block = ((0x%08x * %d) >> 32) = %d, x0 = 0x%08x"
             % (label, h, h >> 32, seg.num_blocks, block, h & 0xFFFFFFFF)]
    parts = []
    for b in probes(h, seg.k):
        bit = data[base + (b >> 3)] >> (b & 7) & 1
        parts.append("%d%s" % (b, "" if bit else " (unset)"))
        if not bit:
            break
    lines.append("  probe bits: " + ", ".join(parts))
    lines.append("  -> %s" % ("may have been exposed" if view.may_contain_hash(h)
                              else "never exposed"))
    return "\n".join(lines)


def main():
    with open(os.path.join(ROOT, "tests", "testdata", "tiny.json")) as f:
        v = json.load(f)
    data = bytes.fromhex(v["filter_hex"])
    view = FilterView.parse(data)
    seg = view.segments[0]
    out = sys.stdout
    out.write("```\n" + hexdump(data) + "\n```\n\n")
    fp = struct.unpack_from("<d", data, 24)[0]
    out.write("| offset | bytes | field | value |\n|---|---|---|---|\n")
    rows = [
        (0, 4, "magic", '"EXPF"'),
        (4, 2, "format version", "1"),
        (6, 2, "header size", "32"),
        (8, 8, "hash seed", "0x657275736f707865"),
        (16, 4, "segment count", str(len(view.segments))),
        (20, 1, "hash algorithm", "1 (XXH3-64)"),
        (21, 1, "log2(block bytes)", "6 (64-byte blocks)"),
        (22, 2, "reserved", "0"),
        (24, 8, "fp target (f64)", repr(fp)),
        (32, 8, "segment 0 start_ms", str(seg.start_ms)),
        (40, 8, "segment 0 end_ms", "%d (start + 5 days)" % seg.end_ms),
        (48, 4, "segment 0 num_blocks", str(seg.num_blocks)),
        (52, 4, "segment 0 item_count", str(seg.item_count)),
        (56, 1, "segment 0 k", str(seg.k)),
        (57, 1, "segment 0 level", str(seg.level)),
        (58, 6, "reserved", "0"),
        (64, 64, "segment 0 block 0", "eight LE u64 words"),
        (128, 8, "checksum = version", "0x%016x (\"%s\")"
         % (view.checksum, view.version)),
    ]
    for off, n, name, value in rows:
        out.write("| %d | %s | %s | %s |\n"
                  % (off, " ".join("%02x" % b for b in data[off:off + min(n, 8)])
                     + (" ..." if n > 8 else ""), name, value))
    out.write("\n```\n")
    out.write(explain(view, data, "id 1", hash_id(1)) + "\n")
    out.write(explain(view, data, 'key "video:42"', hash_key("video:42")) + "\n")
    out.write(explain(view, data, "id 4", hash_id(4)) + "\n")
    out.write("```\n")


if __name__ == "__main__":
    main()
