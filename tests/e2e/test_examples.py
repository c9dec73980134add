"""The recall-server examples (examples/, C++ and Python, modes A, B and
B+) run against the real server binary and give FilterRecalled's answer,
so they cannot silently rot.

Run by ctest with EF_E2E_SERVER, EF_EXAMPLES_BIN (the built C++ examples),
EF_EXAMPLES_SRC (examples/) and PYTHONPATH set.
"""

import os

os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import subprocess  # pylint: disable=wrong-import-position
import sys
import unittest

from exposure.v1 import exposure_filter_pb2 as pb
from exposure_filter.client import ExposureFilterClient, connect

import server_harness as harness

EXPOSED = [11, 12, 13]
CANDIDATES = [10, 11, 12, 13, 14, 15, 16]


class ExamplesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = harness.ServerProcess().start()
        cls.channel = connect(cls.server.address)
        client = ExposureFilterClient(cls.channel, timeout_s=60)
        client.record_exposure(pb.RecordExposureRequest(
            surface="homefeed",
            exposures=[pb.Exposure(user_id="alice", item_ids=EXPOSED)]))
        resp = client.filter_recalled(pb.FilterRecalledRequest(
            surface="homefeed", user_id="alice", candidate_ids=CANDIDATES))
        cls.expected = "kept:" + "".join(" %d" % i for i in resp.kept_ids)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()
        cls.server.close()

    def run_example(self, argv):
        args = argv + [self.server.address, "homefeed", "alice"] + \
            [str(c) for c in CANDIDATES]
        out = subprocess.run(args, capture_output=True, text=True, timeout=120,
                             check=False)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.splitlines()

    def cpp(self, name):
        return [os.path.join(os.environ["EF_EXAMPLES_BIN"], name)]

    def py(self, name):
        return [sys.executable,
                os.path.join(os.environ["EF_EXAMPLES_SRC"], "python", name)]

    def test_expected_answer_drops_the_exposed_items(self):
        for i in EXPOSED:
            self.assertNotIn(" %d " % i, self.expected + " ")

    def test_server_side_filter_examples(self):
        for argv in (self.cpp("recall_server_side_filter"),
                     self.py("recall_server_side_filter.py")):
            with self.subTest(argv[-1]):
                self.assertEqual(self.run_example(argv), [self.expected])

    def test_pull_local_check_examples(self):
        for argv in (self.cpp("recall_pull_local_check"),
                     self.py("recall_pull_local_check.py")):
            with self.subTest(argv[-1]):
                self.assertEqual(self.run_example(argv),
                                 [self.expected, self.expected,
                                  "full_pulls=1 not_modified=1"])

    def test_session_replica_example(self):
        # The first check waits for the snapshot and its pong, so both are
        # local; the path printed says so.
        self.assertEqual(
            self.run_example(self.py("recall_session_replica.py")),
            [self.expected, "path=local", self.expected, "path=local",
             "snapshots=1 local_checks=2"])


if __name__ == "__main__":
    unittest.main()
