"""The Python decoder against the golden vectors (tests/testdata/*.json) and
against malformed input. Run by ctest; by hand, from clients/python/:
    /usr/bin/python3 -m unittest -v tests.test_golden_vectors
"""

import glob
import json
import os
import struct
import unittest

import xxhash

from exposure_filter.filter_view import FilterView, MalformedFilter

TESTDATA = os.environ.get(
    "EF_TESTDATA_DIR",
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests",
                 "testdata"))


def load_vectors():
    paths = sorted(glob.glob(os.path.join(TESTDATA, "*.json")))
    vectors = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            vectors.append(json.load(f))
    return vectors


def reseal(data):
    """Recomputes the trailing checksum so structural checks are reached."""
    body = data[:-8]
    return body + struct.pack("<Q", xxhash.xxh3_64_intdigest(body))


class GoldenVectorsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.vectors = load_vectors()

    def test_all_vectors_are_present(self):
        names = {v["name"] for v in self.vectors}
        self.assertEqual(names, {"empty", "tiny", "multi_slice", "string_keys",
                                 "max_geometry"})

    def test_headers_and_versions(self):
        for v in self.vectors:
            with self.subTest(v["name"]):
                data = bytes.fromhex(v["filter_hex"])
                self.assertEqual(len(data), v["filter_size"])
                view = FilterView.parse(data)
                self.assertEqual(view.version, v["version"])
                self.assertEqual(view.fp_rate_target, v["fp_rate_target"])
                self.assertEqual([s.as_dict() for s in view.segments],
                                 v["segments"])

    def test_every_candidate_answer(self):
        checked = 0
        for v in self.vectors:
            view = FilterView.parse(bytes.fromhex(v["filter_hex"]))
            for c in v["candidates"]:
                if "id" in c:
                    got = view.may_contain_id(int(c["id"]))
                else:
                    got = view.may_contain_key(c["key"])
                self.assertEqual(got, c["may_contain"], (v["name"], c))
                checked += 1
        self.assertGreater(checked, 3000)

    def test_batch_masks_match_single_answers(self):
        v = next(x for x in self.vectors if x["name"] == "multi_slice")
        view = FilterView.parse(bytes.fromhex(v["filter_hex"]))
        ids = [int(c["id"]) for c in v["candidates"] if "id" in c]
        self.assertEqual(view.keep_mask_ids(ids),
                         [not view.may_contain_id(i) for i in ids])

    def test_every_truncation_is_rejected(self):
        data = bytes.fromhex(next(x for x in self.vectors
                                  if x["name"] == "string_keys")["filter_hex"])
        for n in range(len(data)):
            with self.assertRaises(MalformedFilter):
                FilterView.parse(data[:n])

    def test_bit_flips_are_rejected(self):
        data = bytes.fromhex(next(x for x in self.vectors
                                  if x["name"] == "tiny")["filter_hex"])
        for i in range(len(data)):
            bad = bytearray(data)
            bad[i] ^= 1 << (i % 8)
            with self.assertRaises(MalformedFilter):
                FilterView.parse(bytes(bad))

    def test_structural_errors_behind_a_valid_checksum(self):
        good = bytes.fromhex(next(x for x in self.vectors
                                  if x["name"] == "tiny")["filter_hex"])
        cases = {"version": (4, "<H", 2), "header size": (6, "<H", 40),
                 "segment count": (16, "<I", 65),
                 "count beyond data": (16, "<I", 2),
                 "algorithm": (20, "<B", 2), "block size": (21, "<B", 7),
                 "zero blocks": (48, "<I", 0),
                 "huge blocks": (48, "<I", (1 << 26) + 1),
                 "zero probes": (56, "<B", 0), "17 probes": (56, "<B", 17),
                 "ends before start": (40, "<q", 0)}
        for name, (offset, fmt, value) in cases.items():
            with self.subTest(name):
                bad = bytearray(good)
                struct.pack_into(fmt, bad, offset, value)
                with self.assertRaises(MalformedFilter):
                    FilterView.parse(reseal(bytes(bad)))
        self.assertEqual(len(FilterView.parse(reseal(good)).segments), 1)

    def test_the_spec_shows_the_tiny_vector_bytes(self):
        """docs/filter-format.md's worked example is this vector's bytes
        (regenerate with tools/golden/worked_example.py)."""
        doc_path = os.path.join(TESTDATA, "..", "..", "docs",
                                "filter-format.md")
        with open(doc_path, encoding="utf-8") as f:
            doc = f.read()
        data = bytes.fromhex(next(x for x in self.vectors
                                  if x["name"] == "tiny")["filter_hex"])
        for off in range(0, len(data), 16):
            line = "%04x  %s" % (off, " ".join(
                "%02x" % b for b in data[off:off + 16]))
            self.assertIn(line + "\n", doc)


if __name__ == "__main__":
    unittest.main()
