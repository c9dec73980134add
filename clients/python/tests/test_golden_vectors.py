"""The Python decoder against the golden vectors (tests/testdata/*.json:
format 2; tests/testdata/format1/*.json: the previous release's format 1)
and against malformed input. Run by ctest; by hand, from clients/python/:
    /usr/bin/python3 -m unittest -v tests.test_golden_vectors
"""

import glob
import json
import os
import struct
import unittest

import xxhash

from exposure_filter.filter_view import (MAX_RUN_PAYLOAD_BYTES, FilterView,
                                         MalformedFilter, decode_run)

TESTDATA = os.environ.get(
    "EF_TESTDATA_DIR",
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests",
                 "testdata"))


def load_vectors(directory):
    vectors = []
    for p in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(p, encoding="utf-8") as f:
            vectors.append(json.load(f))
    return vectors


def reseal(data):
    """Recomputes the trailing checksum so structural checks are reached."""
    body = data[:-8]
    return body + struct.pack("<Q", xxhash.xxh3_64_intdigest(body))


def vector(vectors, name):
    return bytes.fromhex(next(x for x in vectors
                              if x["name"] == name)["filter_hex"])


def check_answers(test, vectors):
    checked = 0
    for v in vectors:
        view = FilterView.parse(bytes.fromhex(v["filter_hex"]))
        ids, expected = [], []
        for c in v["candidates"]:
            if "id" in c:
                got = view.may_contain_id(int(c["id"]))
                ids.append(int(c["id"]))
                expected.append(not c["may_contain"])
            else:
                got = view.may_contain_key(c["key"])
            test.assertEqual(got, c["may_contain"], (v["name"], c))
            checked += 1
        test.assertEqual(view.keep_mask_ids(ids), expected, v["name"])
    return checked


class GoldenVectorsTest(unittest.TestCase):
    """Format 2, what the server sends."""

    @classmethod
    def setUpClass(cls):
        cls.vectors = load_vectors(TESTDATA)

    def test_all_vectors_are_present(self):
        names = {v["name"] for v in self.vectors}
        self.assertEqual(names, {"empty", "tiny", "multi_slice", "mixed",
                                 "string_keys", "max_geometry",
                                 "run_extremes"})

    def test_headers_and_versions(self):
        for v in self.vectors:
            with self.subTest(v["name"]):
                data = bytes.fromhex(v["filter_hex"])
                self.assertEqual(len(data), v["filter_size"])
                view = FilterView.parse(data)
                self.assertEqual(view.format_version, 2)
                self.assertEqual(v["format_version"], 2)
                self.assertEqual(view.version, v["version"])
                self.assertEqual(view.fp_rate_target, v["fp_rate_target"])
                self.assertEqual(view.slice_span_ms, v["slice_span_ms"])
                self.assertEqual([s.as_dict() for s in view.slices],
                                 v["slices"])

    def test_every_candidate_answer(self):
        self.assertGreater(check_answers(self, self.vectors), 7000)

    def test_every_truncation_is_rejected(self):
        for name in ("mixed", "string_keys", "run_extremes"):
            data = vector(self.vectors, name)
            for n in range(len(data)):
                with self.assertRaises(MalformedFilter):
                    FilterView.parse(data[:n])

    def test_bit_flips_are_rejected(self):
        for name in ("tiny", "run_extremes"):
            data = vector(self.vectors, name)
            for i in range(len(data)):
                bad = bytearray(data)
                bad[i] ^= 1 << (i % 8)
                with self.assertRaises(MalformedFilter):
                    FilterView.parse(bytes(bad))

    def test_structural_errors_behind_a_valid_checksum(self):
        # tiny: header 24 bytes, slice at 24 (start, G, R), run length at 34,
        # run at 38: b, k, n (u32), U - 1 (u32), payload.
        good = vector(self.vectors, "tiny")
        cases = {"version 3": (4, "<H", 3), "algorithm": (6, "<B", 2),
                 "9 slices": (7, "<B", 9),
                 "slice count beyond data": (7, "<B", 2),
                 "no slices but data": (7, "<B", 0),
                 "fp target 0.6": (8, "<d", 0.6),
                 "fp target nan": (8, "<d", float("nan")),
                 "span 999": (16, "<q", 999),
                 "start not a multiple": (24, "<q", 1795392000001),
                 "negative start": (24, "<q", -432000000),
                 "empty slice": (33, "<B", 0),
                 "segment without blocks": (32, "<B", 1),
                 "run length beyond data": (34, "<I", 1000),
                 "run length one short": (34, "<I", 18),
                 "run length below header": (34, "<I", 9),
                 "precision 0": (38, "<B", 0), "precision 33": (38, "<B", 33),
                 "Rice k off by one": (39, "<B", 15),
                 "Rice k 32": (39, "<B", 32),
                 "count 0": (40, "<I", 0), "count + 1": (40, "<I", 5),
                 "universe 1": (44, "<I", 0),
                 "universe off by one": (44, "<I", 1 << 19),
                 }
        for name, (offset, fmt, value) in cases.items():
            with self.subTest(name):
                bad = bytearray(good)
                struct.pack_into(fmt, bad, offset, value)
                with self.assertRaises(MalformedFilter):
                    FilterView.parse(reseal(bytes(bad)))
        self.assertEqual(len(FilterView.parse(reseal(good)).runs), 1)
        # Slices out of order: multi_slice's second slice start moved before
        # its first.
        multi = FilterView.parse(vector(self.vectors, "multi_slice"))
        self.assertGreater(len(multi.slices), 2)
        with self.assertRaises(MalformedFilter) as ctx:
            FilterView.parse(reseal(b"EXPF\x03\x00" + good[6:]))
        self.assertIn("versions 1 and 2", str(ctx.exception))
        self.assertIn("FilterRecalled", str(ctx.exception))

    def test_checks_run_in_the_specified_order(self):
        """Bytes that break two rules get the error of the one the spec
        ("What a decoder must reject") checks first, as the C++ decoder
        (tests/filter/filter_format_test.cc has the same cases)."""
        good = vector(self.vectors, "tiny")
        # tiny: run length L at 34, U - 1 at 44, payload 48..56 (64 bits of
        # remainders, then the unary byte 0x96 = codes 01 1 01 001), f_0 =
        # 108897 of U = 2^19, checksum at 57.

        def put(data, offset, fmt, value):
            bad = bytearray(data)
            struct.pack_into(fmt, bad, offset, value)
            return bytes(bad)

        small_u = put(good, 44, "<I", 100000 - 1)  # f_0 reaches U
        cases = {
            # A code runs past the payload before any fingerprint is formed.
            "truncated before fingerprint range":
                (reseal(put(small_u, 56, "<B", 0x16)), "truncated in code 3"),
            # A byte after the last code, before the fingerprint range.
            "bytes after the codes before fingerprint range":
                (reseal(put(small_u[:57] + b"\0" + small_u[57:], 34, "<I",
                            20)), "after its last code"),
            # The checksum before any field behind it.
            "checksum before slice count": (put(good, 7, "<B", 9),
                                            "checksum mismatch"),
            # The version before the length.
            "version before length": (b"EXPF\x03\x00" + good[6:20],
                                      "unsupported format version 3"),
            # A slice's start before its segment and run counts.
            "start before counts": (reseal(put(put(good, 24, "<q",
                                                   1795392000001),
                                               32, "<B", 9)),
                                    "not a non-negative multiple"),
            # A run before the trailing-bytes check.
            "run before trailing bytes":
                (reseal(put(good[:57] + b"\0" + good[57:], 38, "<B", 33)),
                 "precision 33"),
        }
        for name, (data, expected) in cases.items():
            with self.subTest(name):
                with self.assertRaises(MalformedFilter) as ctx:
                    FilterView.parse(data)
                self.assertIn(expected, str(ctx.exception))

    def test_run_payload_limit_is_checked_before_the_payload(self):
        # b = 32, k = 0, n = 1, U = 2^32: only the declared length differs.
        # The limit is checked before any payload byte is read, so a run
        # declaring 2^29 - 8 payload bytes needs none of them present.
        header = struct.pack("<BBII", 32, 0, 1, 0xFFFFFFFF)
        with self.assertRaises(MalformedFilter) as ctx:
            decode_run(header, 0, 10 + MAX_RUN_PAYLOAD_BYTES, 0)
        self.assertIn("too large", str(ctx.exception))
        self.assertEqual(MAX_RUN_PAYLOAD_BYTES, (1 << 29) - 8)
        # One byte less is within the limit: the next check (the codes, not
        # present here) is the one that fails.
        with self.assertRaises(MalformedFilter) as ctx:
            decode_run(header, 0, 10 + MAX_RUN_PAYLOAD_BYTES - 1, 0)
        self.assertIn("truncated in code 0", str(ctx.exception))
        # The limit comes before n = 0.
        empty = struct.pack("<BBII", 32, 0, 0, 0xFFFFFFFF)
        with self.assertRaises(MalformedFilter) as ctx:
            decode_run(empty, 0, 10 + MAX_RUN_PAYLOAD_BYTES, 0)
        self.assertIn("too large", str(ctx.exception))

    def test_the_empty_key_is_rejected_not_answered(self):
        view = FilterView.parse(vector(self.vectors, "string_keys"))
        with self.assertRaises(ValueError) as ctx:
            view.may_contain_key("")
        self.assertIn("empty", str(ctx.exception))
        with self.assertRaises(ValueError):
            view.may_contain_key(b"")
        with self.assertRaises(ValueError) as ctx:
            view.keep_mask_keys(["video:1", ""])
        self.assertIn("keys[1]", str(ctx.exception))
        self.assertEqual(view.keep_mask_keys(["video:1"]),
                         [not view.may_contain_key("video:1")])

    def test_no_vector_expects_an_answer_for_the_empty_key(self):
        for v in self.vectors:
            self.assertNotIn("", [c.get("key") for c in v["candidates"]],
                             v["name"])

    def test_estimated_fp_rate_is_the_runs_share(self):
        view = FilterView.parse(vector(self.vectors, "multi_slice"))
        expected = 1.0
        for r in view.runs:
            expected *= 1 - r.count / r.universe
        self.assertAlmostEqual(view.estimated_fp_rate(), 1 - expected)
        self.assertLess(view.estimated_fp_rate(), view.fp_rate_target)

    def test_the_spec_shows_the_tiny_vector_bytes(self):
        """docs/filter-format.md's worked example is this vector's bytes
        (regenerate with tools/golden/worked_example.py)."""
        doc_path = os.path.join(TESTDATA, "..", "..", "docs",
                                "filter-format.md")
        with open(doc_path, encoding="utf-8") as f:
            doc = f.read()
        data = vector(self.vectors, "tiny")
        for off in range(0, len(data), 16):
            line = "%04x  %s" % (off, " ".join(
                "%02x" % b for b in data[off:off + 16]))
            self.assertIn(line + "\n", doc)


class Format1VectorsTest(unittest.TestCase):
    """The previous release's vectors: a cached format-1 filter still
    answers exactly."""

    @classmethod
    def setUpClass(cls):
        cls.vectors = load_vectors(os.path.join(TESTDATA, "format1"))

    def test_all_vectors_are_present(self):
        self.assertEqual({v["name"] for v in self.vectors},
                         {"empty", "tiny", "multi_slice", "string_keys",
                          "max_geometry"})

    def test_headers_and_versions(self):
        for v in self.vectors:
            with self.subTest(v["name"]):
                view = FilterView.parse(bytes.fromhex(v["filter_hex"]))
                self.assertEqual(view.format_version, 1)
                self.assertEqual(view.version, v["version"])
                self.assertEqual([s.as_dict() for s in view.segments],
                                 v["segments"])

    def test_every_candidate_answer(self):
        self.assertGreater(check_answers(self, self.vectors), 3000)

    def test_structural_errors_behind_a_valid_checksum(self):
        good = vector(self.vectors, "tiny")
        cases = {"version 3": (4, "<H", 3), "header size": (6, "<H", 40),
                 "segment count": (16, "<I", 65),
                 "count beyond data": (16, "<I", 2),
                 "algorithm": (20, "<B", 2), "block size": (21, "<B", 7),
                 "fp target 0.6": (24, "<d", 0.6),
                 "zero blocks": (48, "<I", 0),
                 "huge blocks": (48, "<I", (1 << 26) + 1),
                 "zero probes": (56, "<B", 0), "17 probes": (56, "<B", 17),
                 "level 1 first": (57, "<B", 1),
                 "ends before start": (40, "<q", 0),
                 "ends at start": (40, "<q", 1795392000000)}
        for name, (offset, fmt, value) in cases.items():
            with self.subTest(name):
                bad = bytearray(good)
                struct.pack_into(fmt, bad, offset, value)
                with self.assertRaises(MalformedFilter):
                    FilterView.parse(reseal(bytes(bad)))
        self.assertEqual(len(FilterView.parse(reseal(good)).segments), 1)

    def test_slice_order_levels_and_spans(self):
        good = vector(self.vectors, "multi_slice")
        view = FilterView.parse(good)
        segs = view.segments
        grown = next(i for i in range(len(segs) - 1) if segs[i + 1].level == 1)
        at = 32 + 32 * (grown + 1)
        cases = {"level skipped": (at + 25, "<B", 2),
                 "slice end differs": (at + 8, "<q", segs[grown].end_ms + 1),
                 "span differs": (32 + 8, "<q",
                                  segs[0].end_ms + view.slice_span_ms)}
        for name, (offset, fmt, value) in cases.items():
            with self.subTest(name):
                bad = bytearray(good)
                struct.pack_into(fmt, bad, offset, value)
                with self.assertRaises(MalformedFilter):
                    FilterView.parse(reseal(bytes(bad)))
        bad = bytearray(good)
        span = view.slice_span_ms
        struct.pack_into("<qq", bad, 32, segs[0].start_ms + 100 * span,
                         segs[0].end_ms + 100 * span)
        with self.assertRaises(MalformedFilter):
            FilterView.parse(reseal(bytes(bad)))


if __name__ == "__main__":
    unittest.main()
