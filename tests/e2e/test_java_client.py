"""The Java client (clients/java) end to end, against the real server
binary. The Java programs of clients/java/src/e2e do the client's side;
this file starts the servers, runs them and asserts on their summary line:

- pull mode agrees with FilterRecalled: one server, 12 users with 0 to
  10,000 exposures over 29 days, 108,000 candidates (a third exposed, ids
  and keys), each user's filter pulled through the Java FilterCache and
  checked locally: 0 disagreements (batch, single and server answers),
  0 false negatives, every revalidation answered not_modified;
- failover: 3 replicas with --replication_factor=2 on 12 partitions (writes
  through librdkafka's mock cluster, as failover_drill.py starts them), a
  write + read load through the Java RoutingClient (read-your-writes on)
  while replica 0 is kill -9ed and restarted: 0 failed reads, 0 failed
  writes, 0 acknowledged exposures missing afterwards;
- the Session-stream replica (FilterReplica, mode B+) agrees with
  FilterRecalled: 39 users with 0 to 3,000 exposures over 29 days, 240
  writes interleaved with checks of 440 candidates (105,600 in all), each
  after the write's acknowledgement and a sync: with every push compacted,
  every answer agrees; with pushed items held, the only differences are
  never-exposed candidates the server removes as false positives of
  fingerprints recorded since the snapshot (counted apart as fp_kept), and
  there is no false negative either way; and pushed exposures are filtered
  by a local check within the staleness bound (100 ms) of the write's
  acknowledgement, with no sync;
- the examples (examples/java) run and print the same survivors;
- the local-check micro-benchmark runs (its figure is printed, never
  asserted: docs/clients.md).

Run by ctest (clients/java/CMakeLists.txt) with EF_E2E_SERVER,
EF_KAFKA_TOOLS, EF_JAVA and EF_JAVA_CLASSPATH set.
"""

import os
import subprocess
import time
import unittest

import failover_drill
import server_harness as harness

JAVA_TIMEOUT_S = 480


def java(main, *args):
    return [os.environ.get("EF_JAVA", "java"), "-cp",
            os.environ["EF_JAVA_CLASSPATH"], "com.exposurefilter.client." + main
            ] + list(args)


def run_example(main, *args):
    """The lines an examples/java program prints (it is in no package)."""
    return subprocess.run(
        [os.environ.get("EF_JAVA", "java"), "-cp",
         os.environ["EF_JAVA_CLASSPATH"], main] + list(args),
        capture_output=True, text=True, check=True,
        timeout=JAVA_TIMEOUT_S).stdout.splitlines()


def summary(line):
    """{key: int or str} of a Java program's last line of key=value pairs."""
    out = {}
    for pair in line.split():
        key, _, value = pair.partition("=")
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def run_java(main, *args):
    proc = subprocess.run(java(main, *args), capture_output=True, text=True,
                          timeout=JAVA_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise AssertionError("%s exited %d: %s" % (main, proc.returncode,
                                                   proc.stderr[-4000:]))
    print(proc.stdout, end="")
    return summary(proc.stdout.strip().splitlines()[-1])


class JavaPullAgreementTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = harness.ServerProcess().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.server.close()

    def test_local_check_agrees_with_filter_recalled(self):
        s = run_java("E2eAgreement", self.server.address)
        self.assertGreaterEqual(s["total"], 100000, s)
        self.assertEqual(s["disagreements"], 0, s)
        self.assertEqual(s["false_negatives"], 0, s)
        self.assertGreater(s["removed"], 30000, s)
        # Every user's second get() was revalidated with if_version.
        self.assertEqual(s["revalidated_not_modified"], 12, s)
        self.assertEqual(s["cache_not_modified"], 12, s)

    def test_replica_agrees_with_filter_recalled(self):
        # Every push compacted into a fresh snapshot: identical answers.
        s = run_java("E2eReplica", self.server.address, "compacted")
        self.assertGreaterEqual(s["total"], 100000, s)
        self.assertEqual(s["agree"], s["total"], s)
        self.assertEqual(s["false_negatives"], 0, s)
        self.assertGreater(s["exposed"], 20000, s)
        self.assertGreaterEqual(s["hit_ratio"], 0.9, s)
        self.assertGreaterEqual(s["compactions"], s["pushes"] // 2, s)
        self.assertGreater(s["pushes"], 120, s)
        self.assertEqual((s["gaps"], s["resyncs"]), (0, 0), s)

    def test_replica_with_pushed_items_held_differs_only_as_allowed(self):
        s = run_java("E2eReplica", self.server.address, "held")
        self.assertGreaterEqual(s["total"], 100000, s)
        self.assertEqual(s["false_negatives"], 0, s)
        # The only differences the spec allows: a never-exposed candidate
        # the server removes as a false positive and the replica keeps,
        # within delta (0.01) of the fresh candidates and far below it.
        self.assertEqual(s["other_differ"], 0, s)
        self.assertLess(s["fp_kept"], 0.001 * (s["total"] - s["removed"]), s)
        self.assertGreaterEqual(s["hit_ratio"], 0.9, s)
        self.assertEqual(s["compactions"], 0, s)
        self.assertGreater(s["pushes"], 120, s)
        self.assertEqual((s["gaps"], s["resyncs"]), (0, 0), s)

    def test_replica_sees_pushed_exposures_within_the_staleness_bound(self):
        s = run_java("E2eReplica", self.server.address, "seen")
        self.assertEqual(s["late_misses"], 0, s)
        self.assertEqual(s["pushes"], s["writes"], s)
        self.assertLess(s["max_ms"], 30000, s)

    def test_examples_agree(self):
        # examples/java: mode A and mode B print the same survivors; the
        # second pull is revalidated with if_version. A user recorded by no
        # test keeps every candidate.
        ids = ["101", "102", "18446744073709551615"]
        a = run_example("RecallServerSideFilter", self.server.address,
                        "homefeed", "nobody", *ids)
        b = run_example("RecallPullLocalCheck", self.server.address,
                        "homefeed", "nobody", *ids)
        want = "kept: " + " ".join(ids)
        self.assertEqual(a, [want])
        self.assertEqual(b, [want, want, "full_pulls=1 not_modified=1"])

    def test_local_check_benchmark_runs(self):
        s = run_java("LocalCheckBench", self.server.address, "2000")
        self.assertEqual(s["candidates"], 5000, s)
        # Every other candidate was recorded: at least those are dropped.
        self.assertLessEqual(s["kept"], 2500, s)


class JavaFailoverTest(unittest.TestCase):

    def setUp(self):
        self.drill = failover_drill.Drill()
        drill = self.drill
        drill.mock = subprocess.Popen(
            [failover_drill.tool("EF_KAFKA_TOOLS", "kafka-mock-cluster"),
             "--topic=" + failover_drill.TOPIC,
             "--partitions=%d" % failover_drill.PARTITIONS],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        drill.brokers = drill.mock.stdout.readline().strip()
        if not drill.brokers.startswith("127.0.0.1:"):
            raise RuntimeError("kafka-mock-cluster printed %r" % drill.brokers)
        for r in range(failover_drill.REPLICAS):
            drill.start_replica(r)

    def tearDown(self):
        self.drill.close()

    def test_one_owner_killed_fails_no_call(self):
        drill = self.drill
        proc = subprocess.Popen(
            java("E2eFailover", ",".join(drill.addresses()),
                 str(failover_drill.PARTITIONS),
                 str(failover_drill.REPLICATION_FACTOR)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(proc.stdout.readline().strip(), "LOADING")
            time.sleep(failover_drill.WARMUP_S)
            drill.servers[0].kill()          # kill -9
            drill._retire(0)  # pylint: disable=protected-access
            time.sleep(failover_drill.DOWN_S)
            drill.start_replica(0)           # back, SERVING
            time.sleep(failover_drill.TAIL_S)
            out, err = proc.communicate(input="", timeout=JAVA_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 0, err[-4000:])
        print(out, end="")
        s = summary(out.strip().splitlines()[-1])
        self.assertGreater(s["reads"], 100, s)
        # stderr names the first failures of each kind.
        self.assertEqual(s["failed_reads"], 0, (s, err[-2000:]))
        self.assertEqual(s["failed_writes"], 0, (s, err[-2000:]))
        self.assertEqual(s["missing"], 0, s)
        self.assertEqual(s["verify_failed"], 0, s)
        # The kill was seen and worked around: replica 0 failed tries and
        # the calls went on to the next owner.
        self.assertGreater(s["failovers"], 0, s)
        self.assertGreater(s["reads_with_offsets"], 0, s)


if __name__ == "__main__":
    unittest.main()
