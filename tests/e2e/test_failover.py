"""High availability end to end: 3 replicas, R = 2, P = 12,
writes through the Kafka log (librdkafka's mock cluster), a continuous
RecordExposure + FilterRecalled load through the C++ RoutingClient while
both owners of one partition lag together past --max_serving_lag (their
fetches of it answered 5 s late by its broker), then one replica is kill
-9ed and restarted and then all three are rolled (SIGTERM, restart,
SERVING, next). The scenario is failover_drill.py's; this file asserts what
replication promises across the whole run:

- zero failed FilterRecalled calls at the client;
- writes fail only as UNAVAILABLE/DEADLINE_EXCEEDED, i.e. the client was
  told (and those exposures are not checked: not acknowledged);
- zero acknowledged exposures missing on ANY owner afterwards (each owner
  asked directly, every item of every user);
- every restarted copy became SERVING by itself, and a SIGTERMed one
  exited 0;
- while both owners lagged: no read and no write failed, and reads were
  answered least-stale (the routing client's last try sets allow_lagging),
  those of the stalled partition's users saying they were past the bound.

Nothing here asserts a time; the figures are bench/failover_drill.sh's.

By hand, from tests/e2e/:
  EF_E2E_SERVER=../../build/src/server/exposure-filter-server \\
  EF_KAFKA_TOOLS=../../build/tools/kafka EF_DRILL_TOOLS=../../build/tools/drill \\
      /usr/bin/python3 -m unittest -v test_failover
"""

import os

os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import unittest  # pylint: disable=wrong-import-position

import failover_drill  # pylint: disable=wrong-import-position
import server_harness as harness  # pylint: disable=wrong-import-position

# Failures a write may end in while a replica or the broker is away: the
# caller is told, and resends (RoutedRecordResult::FailedExposures).
TOLD_WRITE_FAILURES = {"UNAVAILABLE", "DEADLINE_EXCEEDED"}


class FailoverDrillTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        # Deadline and per-try timeout above the bench's (1 s / 250 ms): a
        # sanitizer build on a loaded machine must not time out both owners
        # of a healthy pair. Dead owners fail fast (refused or reset
        # connections), so failover is exercised all the same.
        cls.drill = failover_drill.Drill(
            driver_args=["--threads=3", "--users=1500", "--deadline_ms=3000",
                         "--per_try_timeout_ms=1000"])
        try:
            cls.drill.run()
        except BaseException:
            cls.drill.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.drill.close()

    def test_the_drill_did_what_it_says(self):
        # Guards the other tests against passing on a drill that did not
        # happen: load flowed, the kill and all three SIGTERMs took place and
        # the client did fail over.
        load = self.drill.load
        self.assertGreater(load["read"]["total"], 500)
        self.assertGreater(load["acked_items"], 5000)
        self.assertEqual(
            [(r, how) for r, how, _ in self.drill.restarts],
            [(0, "kill -9"), (2, "SIGTERM"), (1, "SIGTERM"), (0, "SIGTERM")])
        self.assertGreater(load["failovers"], 0, load)
        # Reads kept arriving while the killed replica was away.
        start, end = self.drill.window("kill -9 replica 0",
                                       "replica 0 SERVING")
        self.assertGreater(len(self.drill.calls_in(start, end, "read")), 0)

    def test_no_filter_recalled_call_failed(self):
        read = self.drill.load["read"]
        self.assertEqual(read["failed"], 0,
                         "%s\nfirst errors: %s\n%s"
                         % (read, self.drill.load["read_errors"],
                            self.drill.report_text()))

    def test_writes_failed_only_as_told(self):
        write = self.drill.load["write"]
        self.assertLessEqual(set(write["failed_by_code"]), TOLD_WRITE_FAILURES,
                             self.drill.load["write_errors"])

    def test_no_acknowledged_exposure_missing_on_any_owner(self):
        v = self.drill.verify
        # Item ids are never reused, so every acknowledged item is checked.
        self.assertEqual(v["items"], self.drill.load["acked_items"], v)
        self.assertEqual(v["owner_checks"], 2 * v["users"])
        self.assertEqual(v["unreachable"], 0, v["examples"])
        self.assertEqual(v["missing"], 0, v["examples"])

    def test_both_owners_of_a_partition_lagged_past_the_bound(self):
        # Guards the least-stale tests below against a stall that did not
        # happen: both owners' /metrics showed the partition's lag past
        # --max_serving_lag in the same sample.
        ph = self.drill.lag_phase()
        self.assertEqual(len(self.drill.lag_owners), 2)
        self.assertGreater(ph["both_past_bound_samples"], 0,
                           self.drill.lag_samples)

    def test_reads_during_the_lag_answered_least_stale_none_failed(self):
        ph = self.drill.lag_phase()
        self.assertGreater(ph["reads"], 0)
        self.assertEqual(ph["reads_failed"], 0,
                         "%s\n%s" % (self.drill.failed_calls()[:10],
                                     self.drill.report_text()))
        self.assertGreater(ph["lagging"], 0, self.drill.report_text())
        # The stalled partition's users were told how stale: past the bound.
        self.assertGreater(max(ph["stalled_lag_ms"] or [0]),
                           1000 * failover_drill.MAX_SERVING_LAG_S,
                           self.drill.report_text())

    def test_no_write_failed_during_the_lag(self):
        # Writes go to Kafka, not to the lagging copies: they may wait,
        # never fail.
        ph = self.drill.lag_phase()
        self.assertGreater(ph["writes"], 0)
        self.assertEqual(ph["writes_failed"], 0,
                         "%s\n%s" % (self.drill.failed_calls()[:10],
                                     self.drill.load["write_errors"]))

    def test_restarted_copies_became_ready_and_terminated_cleanly(self):
        # start_replica() returned only once health said SERVING with no
        # help from the drill; every server is still SERVING at the end.
        for r, server in enumerate(self.drill.servers):
            self.assertIsNotNone(server)
            self.assertIsNone(server.proc.poll(), "replica %d exited" % r)
            server.wait_ready(timeout=10)
        self.assertEqual(self.drill.exit_codes, [(2, 0), (1, 0), (0, 0)])


if __name__ == "__main__":
    unittest.main()
