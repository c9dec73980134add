"""The replica kill drill: mode B+ (the session stream's local replica)
through a failover, end to end. librdkafka's mock cluster, 3 server
processes with --replication_factor=2 on 12 partitions, and the C++
`replica-drill` client (tools/drill): a RoutingFilterReplica checking users
whose owner 0 is replica 0, so every subscription of the client is on
replica 0's stream, while a writer records exposures through the
RoutingClient. Then replica 0 is kill -9ed under that load, left down, and
restarted on its data dir and port.

Asserted over the whole run:

- zero failed checks at the client (the kill included);
- zero silent misses: no check kept an item acknowledged more than the
  staleness bound before it started (--max_serving_lag 2 s + the
  replica's max_staleness 100 ms + the lag's 100 ms sampling + a fetch,
  rounded up to 2.5 s);
- the drill happened: the client held its users on replica 0 at the kill,
  moved them to their next owner and answered locally there, and moved
  them back once replica 0 served again.

Nothing here asserts a time. By hand, from tests/e2e/:
  EF_E2E_SERVER=../../build/src/server/exposure-filter-server \\
  EF_KAFKA_TOOLS=../../build/tools/kafka EF_DRILL_TOOLS=../../build/tools/drill \\
      /usr/bin/python3 -m unittest -v test_replica_failover
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import server_harness as harness  # pylint: disable=wrong-import-position

PARTITIONS = 12
REPLICAS = 3
REPLICATION_FACTOR = 2
TOPIC = "exposures"
VICTIM = 0
# Seconds of load: before the kill, while the victim is down, after it is
# back (short: the whole test stays well under a minute on 2 loaded cores).
WARMUP_S = 4
DOWN_S = 4
TAIL_S = 4
BOUND_MS = 2500


def tool(env_name, name):
    directory = os.environ.get(env_name)
    if not directory:
        raise RuntimeError("set %s (ctest does this)" % env_name)
    return os.path.join(directory, name)


class ReplicaKillDrillTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ef_replica_drill_")
        cls.mock = None
        cls.servers = [None] * REPLICAS
        cls.ports = [harness.free_port() for _ in range(REPLICAS)]
        try:
            cls._run()
        except BaseException:
            cls._close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls._close()

    @classmethod
    def _start_replica(cls, ordinal):
        data_dir = os.path.join(cls.tmp, "replica-%d" % ordinal)
        os.makedirs(data_dir, exist_ok=True)
        server = harness.ServerProcess(
            "--partitions=%d" % PARTITIONS, "--replicas=%d" % REPLICAS,
            "--replica_ordinal=%d" % ordinal,
            "--replication_factor=%d" % REPLICATION_FACTOR,
            "--kafka_brokers=" + cls.brokers, "--kafka_topic=" + TOPIC,
            "--kafka_group=replica-drill", "--kafka_max_batch_wait=5ms",
            # The mock broker holds an empty fetch for fetch.wait.max.ms
            # (500 ms by default): pushes would wait for it.
            "--kafka_config=fetch.wait.max.ms=10",
            "--shards=4", "--max_serving_lag=2s",
            data_dir=data_dir, port=cls.ports[ordinal])
        server.start()
        cls.servers[ordinal] = server

    @classmethod
    def _run(cls):
        cls.mock = subprocess.Popen(
            [tool("EF_KAFKA_TOOLS", "kafka-mock-cluster"), "--topic=" + TOPIC,
             "--partitions=%d" % PARTITIONS],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        cls.brokers = cls.mock.stdout.readline().strip()
        if not cls.brokers.startswith("127.0.0.1:"):
            raise RuntimeError("kafka-mock-cluster printed %r" % cls.brokers)
        for r in range(REPLICAS):
            cls._start_replica(r)
        route = ",".join("127.0.0.1:%d" % p for p in cls.ports)
        driver = subprocess.Popen(
            [tool("EF_DRILL_TOOLS", "replica-drill"), "--route=" + route,
             "--partitions=%d" % PARTITIONS,
             "--replication_factor=%d" % REPLICATION_FACTOR,
             "--owner0=%d" % VICTIM, "--bound_ms=%d" % BOUND_MS],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(WARMUP_S)
            # The counters at the kill: the client's users are on the victim.
            driver.stdin.write("mark\n")
            driver.stdin.flush()
            if driver.stdout.readline().strip() != "marked":
                raise RuntimeError("replica-drill did not mark")
            cls.servers[VICTIM].kill()
            cls.servers[VICTIM].close()
            cls.servers[VICTIM] = None
            time.sleep(DOWN_S)
            cls._start_replica(VICTIM)
            time.sleep(TAIL_S)
        finally:
            out, err = driver.communicate(timeout=120)
        if driver.returncode != 0:
            raise RuntimeError("replica-drill exited %d: %s"
                               % (driver.returncode, err))
        cls.result = json.loads(out)
        # The figures, for the log (ctest --output-on-failure, -V).
        print("replica-drill: %s" % out.strip(), file=sys.stderr)

    @classmethod
    def _close(cls):
        for r in range(REPLICAS):
            if cls.servers[r] is not None:
                cls.servers[r].close()
        if cls.mock is not None:
            cls.mock.terminate()
            cls.mock.wait(timeout=30)
            cls.mock.stdout.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_drill_did_what_it_says(self):
        r = self.result
        at_mark = r["at_mark"]
        # At the kill the client's users were subscribed on the victim and
        # answered there locally.
        self.assertGreater(at_mark["users_held"][VICTIM], 0, r)
        self.assertGreater(at_mark["local_checks"], 0, r)
        # Load went on through the kill, the users moved to their next
        # owner with the version held, and were answered locally there.
        self.assertGreater(r["checks_after_mark"], 100, r)
        self.assertGreater(r["writes_acked"], 100, r)
        self.assertGreater(r["replica"]["moves"], 0, r)
        self.assertGreater(r["local_on_next_owner"], 0, r)
        # Back up, the restarted owner took its users back.
        self.assertGreater(r["replica"]["users_held"][VICTIM], 0, r)

    def test_no_check_failed(self):
        self.assertEqual(self.result["failed"], 0, self.result)

    def test_no_acknowledged_exposure_missed_beyond_the_bound(self):
        self.assertEqual(self.result["misses"], 0, self.result)


if __name__ == "__main__":
    unittest.main()
