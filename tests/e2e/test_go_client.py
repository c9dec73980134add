"""The Go client (clients/go) end to end, driven from here with the same
harnesses as the Python tests: this file starts the servers and runs the Go
e2e test binary (clients/go/e2e, built by CMake as go test -c) with their
addresses in its environment.

- One plain server: the Go decoder's local answers equal FilterRecalled's
  on every one of 108,000 candidates, FilterCache revalidates with
  if_version, and the Go examples print what the C++ and Python ones print.
  The same server: the Go replica (mode B+, clients/go/replica) agrees with
  FilterRecalled on 105,600 candidates per run while the users are written
  (no false negative; with pushed items held, differences only where the
  spec allows them, counted apart), and a check after a write's
  acknowledgement removes its items within the staleness bound.
- Three replicas, R = 2, P = 12, writes through librdkafka's mock cluster
  (failover_drill.Drill's replicas): RoutingClient load (reads and writes,
  read-your-writes on) while replica 0 is kill -9ed and restarted; no read
  may fail and every read sees the user's acknowledged writes.

By hand, from tests/e2e/:
  EF_E2E_SERVER=../../build/src/server/exposure-filter-server \\
  EF_KAFKA_TOOLS=../../build/tools/kafka EF_GO_E2E_TEST=../../build/go/bin/e2e.test \\
  EF_GO_EXAMPLES_BIN=../../build/examples/go \\
      /usr/bin/python3 -m unittest -v test_go_client
"""

import json
import os
import subprocess
import sys
import threading
import time
import unittest

import failover_drill
import server_harness as harness

LOAD_SECONDS = 8.0
KILL_AFTER_S = 2.5
DOWN_S = 1.5


def go_test(pattern, env, timeout):
    binary = os.environ.get("EF_GO_E2E_TEST")
    if not binary:
        raise RuntimeError("set EF_GO_E2E_TEST (ctest does this)")
    return subprocess.Popen(
        [binary, "-test.v", "-test.count=1", "-test.run", pattern],
        env=dict(os.environ, **env), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)


def finish(test, proc, timeout):
    out, _ = proc.communicate(timeout=timeout)
    test.assertEqual(proc.returncode, 0, out)
    return out


class GoPullAgreementTest(unittest.TestCase):

    def test_pull_agreement_and_examples(self):
        with harness.ServerProcess() as server:
            proc = go_test("^(TestPullAgreement|TestExamples|TestReplica.*)$", {
                "EF_GO_E2E_SERVER_ADDR": server.address,
                "EF_GO_EXAMPLES_BIN": os.environ.get("EF_GO_EXAMPLES_BIN", ""),
            }, 300)
            out = finish(self, proc, 300)
        for line in out.splitlines():
            if line.startswith(("go pull agreement", "go replica")):
                print("\n" + line, file=sys.stderr)
        self.assertIn("--- PASS: TestPullAgreement", out)
        self.assertIn("--- PASS: TestExamples", out)
        for test in ("TestReplicaAgreementCompacted",
                     "TestReplicaAgreementPushedItemsHeld",
                     "TestReplicaPushedExposuresSeen"):
            self.assertIn("--- PASS: " + test, out)


class GoFailoverTest(unittest.TestCase):

    def setUp(self):
        self.drill = failover_drill.Drill()
        d = self.drill
        d.mock = subprocess.Popen(
            [failover_drill.tool("EF_KAFKA_TOOLS", "kafka-mock-cluster"),
             "--topic=" + failover_drill.TOPIC,
             "--partitions=%d" % failover_drill.PARTITIONS],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        d.brokers = d.mock.stdout.readline().strip()
        if not d.brokers.startswith("127.0.0.1:"):
            d.close()
            raise RuntimeError("kafka-mock-cluster printed %r" % d.brokers)
        try:
            for r in range(failover_drill.REPLICAS):
                d.start_replica(r)
        except BaseException:
            d.close()
            raise

    def tearDown(self):
        self.drill.close()

    def test_no_read_fails_while_an_owner_is_killed(self):
        d = self.drill
        proc = go_test("^TestFailoverLoad$", {
            "EF_GO_E2E_ROUTE": ",".join(d.addresses()),
            "EF_GO_E2E_PARTITIONS": str(failover_drill.PARTITIONS),
            "EF_GO_E2E_REPLICATION_FACTOR":
                str(failover_drill.REPLICATION_FACTOR),
            "EF_GO_E2E_SECONDS": str(LOAD_SECONDS),
        }, 120)
        # Drain the output while the replica is killed and restarted.
        chunks = []
        reader = threading.Thread(
            target=lambda: chunks.append(proc.stdout.read()), daemon=True)
        reader.start()
        time.sleep(KILL_AFTER_S)
        d.servers[0].kill()
        d._retire(0)  # pylint: disable=protected-access
        time.sleep(DOWN_S)
        d.start_replica(0)
        proc.wait(timeout=120)
        reader.join(timeout=30)
        out = "".join(chunks)
        self.assertEqual(proc.returncode, 0, out)
        summary = json.loads(next(line for line in reversed(out.splitlines())
                                  if line.startswith("{")))
        print("\ngo failover: %s" % json.dumps(summary), file=sys.stderr)
        self.assertEqual(summary["ReadFailed"], 0, out)
        self.assertEqual(summary["RYWMissed"], 0, out)
        self.assertGreater(summary["Reads"], 100)
        self.assertGreater(summary["RYWChecked"], 100)
        # The kill did make the client fail over.
        self.assertGreater(summary["Failovers"], 0, summary)
        self.assertGreater(summary["ReplicaErrors"][0], 0, summary)


if __name__ == "__main__":
    unittest.main()
