"""Crash test: the real server binary with --fsync=always, concurrent
RecordExposure traffic, kill -9 at random moments over several rounds, a
restart on the same data dir after each; every write the server acknowledged
must still be filtered (zero false negatives) and fresh ids must still pass
at the configured false-positive rate or better. Then a clean SIGTERM writes
a final snapshot and the next start replays an empty log tail.

Run by ctest (tests/e2e/CMakeLists.txt). By hand, from tests/e2e/:
  EF_E2E_SERVER=../../build/src/server/exposure-filter-server \\
      /usr/bin/python3 -m unittest -v test_crash
"""

import os

os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import glob  # pylint: disable=wrong-import-position
import random
import re
import shutil
import signal
import tempfile
import threading
import time
import unittest

import grpc

import server_harness as harness
from test_e2e import Client

ROUNDS = 4
WRITERS = 4
USERS = 40
BATCH = 25
FP_RATE = 0.01
FRESH_PER_USER = 2500
# Small enough that snapshots and log rotations happen while traffic runs
# (and so while kills land), not only at shutdown.
SERVER_FLAGS = ("--fsync=always", "--snapshot_wal_bytes=300000",
                "--snapshot_interval=1s", "--fp_rate=%g" % FP_RATE,
                "--shards=8", "--shutdown_grace=5s")
# Fresh ids live far from the written ones.
FRESH_BASE = 1 << 50


def user_name(u):
    return "crash-user-%d" % u


class Writer(threading.Thread):
    """Records batches of unique ids until the server goes away; remembers
    exactly the batches the server acknowledged."""

    def __init__(self, address, writer_id, round_no, rng_seed):
        super().__init__(daemon=True)
        self.address = address
        self.base = ((round_no * WRITERS + writer_id) + 1) << 32
        self.rng = random.Random(rng_seed)
        self.acked = []  # (user index, [ids])
        self.stop = threading.Event()
        self.errors = []

    def run(self):
        client = Client(self.address)
        try:
            n = 0
            while not self.stop.is_set():
                users = self.rng.sample(range(USERS), 3)
                batch = []
                for u in users:
                    ids = [self.base + n + i for i in range(BATCH)]
                    n += BATCH
                    batch.append((u, ids))
                try:
                    client.record(*[client.exposure(user_name(u), ids=ids)
                                    for u, ids in batch])
                except grpc.RpcError as e:
                    # The kill: unacknowledged, so nothing to check.
                    self.errors.append(e.code())
                    return
                self.acked.extend(batch)
        finally:
            client.close()


def wait_for_acks(writers, deadline_s=120.0):
    """Until every writer has an acknowledged batch (or stopped on an
    error): the kill then always lands on traffic, on any machine. A fixed
    sleep alone could kill an ASan server on a loaded machine before any
    write was acknowledged, and `acked > 0` would fail."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if all(w.acked or not w.is_alive() for w in writers):
            return
        time.sleep(0.05)


class CrashRecoveryTest(unittest.TestCase):

    def setUp(self):
        self.data_dir = tempfile.mkdtemp(prefix="ef_crash_data_")
        self.acked = {u: [] for u in range(USERS)}

    def tearDown(self):
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def start(self, flags=SERVER_FLAGS):
        server = harness.ServerProcess(*flags, data_dir=self.data_dir)
        server.start()
        return server

    def verify(self, server, label):
        client = Client(server.address)
        try:
            missing = 0
            fresh_total = fresh_removed = 0
            for u in range(USERS):
                ids = self.acked[u]
                for i in range(0, len(ids), 20000):
                    chunk = ids[i:i + 20000]
                    resp = client.filter(user_name(u), ids=chunk)
                    missing += len(resp.kept_ids)
                fresh = [FRESH_BASE + u * FRESH_PER_USER + i
                         for i in range(FRESH_PER_USER)]
                resp = client.filter(user_name(u), ids=fresh)
                fresh_total += len(fresh)
                fresh_removed += resp.removed_count
            acked = sum(len(v) for v in self.acked.values())
            self.assertGreater(acked, 0, label)
            self.assertEqual(missing, 0,
                             "%s: %d of %d acknowledged items lost:\n%s"
                             % (label, missing, acked, server.log()))
            fp = fresh_removed / fresh_total
            self.assertLessEqual(fp, FP_RATE, "%s: FP rate %.4f on %d fresh "
                                 "ids" % (label, fp, fresh_total))
            return acked, fp
        finally:
            client.close()

    def test_acknowledged_writes_survive_kill9(self):
        rng = random.Random(20261123)
        server = self.start()
        try:
            for round_no in range(ROUNDS):
                writers = [Writer(server.address, w, round_no,
                                  rng.randrange(1 << 30))
                           for w in range(WRITERS)]
                for w in writers:
                    w.start()
                wait_for_acks(writers)
                time.sleep(rng.uniform(0.5, 2.0))
                server.proc.kill()  # SIGKILL: no flush, no snapshot
                server.proc.wait()
                for w in writers:
                    w.stop.set()
                    w.join(timeout=30)
                    self.assertFalse(w.is_alive())
                    for u, ids in w.acked:
                        self.acked[u].extend(ids)
                server.close()
                server = self.start()
                acked, fp = self.verify(server, "round %d" % round_no)
                print("round %d: %d acknowledged items all filtered after "
                      "kill -9, FP %.4f" % (round_no, acked, fp))

            # Snapshots and rotations ran while kills landed, not only at
            # shutdown.
            self.assertTrue(glob.glob(os.path.join(self.data_dir,
                                                   "snapshot-*.efs")))
            # Clean shutdown: final snapshot, then an empty log tail.
            server.signal(signal.SIGTERM)
            self.assertEqual(server.wait_exit(timeout=60), 0, server.log())
            self.assertRegex(server.log(), r"snapshot \d+: \d+ users")
            segments = sorted(glob.glob(os.path.join(self.data_dir,
                                                     "wal-*.log")))
            self.assertTrue(segments)
            # Only the 32-byte header: nothing after the final snapshot.
            self.assertEqual(os.path.getsize(segments[-1]), 32)
            server.close()
            server = self.start()
            match = re.search(r"recovery: (\d+) users from snapshot (\d+) "
                              r"\(\d+ aged out\), (\d+) log records",
                              server.log())
            self.assertIsNotNone(match, server.log())
            self.assertEqual(int(match.group(1)), USERS)
            self.assertEqual(int(match.group(3)), 0)
            self.verify(server, "after SIGTERM")
        finally:
            server.close()

    def test_default_fsync_interval_also_survives_kill9(self):
        # The quick start's policy: an OK means write(2) happened, which a
        # process crash cannot undo (only a power loss could).
        flags = ("--fp_rate=%g" % FP_RATE, "--shards=8")
        server = self.start(flags)
        try:
            writers = [Writer(server.address, w, 0, 77 + w)
                       for w in range(WRITERS)]
            for w in writers:
                w.start()
            wait_for_acks(writers)
            time.sleep(1.0)
            server.proc.kill()
            server.proc.wait()
            for w in writers:
                w.stop.set()
                w.join(timeout=30)
                for u, ids in w.acked:
                    self.acked[u].extend(ids)
            server.close()
            server = self.start(flags)
            self.verify(server, "fsync=interval")
        finally:
            server.close()

    def test_second_server_on_same_data_dir_is_refused(self):
        server = self.start()
        try:
            code, out = harness.run_to_exit("--data_dir=" + self.data_dir)
            self.assertEqual(code, 1, out)
            self.assertIn("in use by another exposure-filter-server", out)
        finally:
            server.close()


if __name__ == "__main__":
    unittest.main()
