"""End-to-end tests of exposure-filter-cli: every subcommand against the real
server binary, its text and --json output, ids from arguments, files and
stdin, and bad arguments (a clear message and a non-zero exit code).

Exit codes (src/cli/exit_codes.h): 0 ok, 1 the server answered with an error
or not SERVING, 2 bad command line or input, 3 unreachable / deadline.

Run by ctest as e2e_python_cli; by hand from tests/e2e/:
  EF_E2E_SERVER=../../build/src/server/exposure-filter-server \\
  EF_E2E_CLI=../../build/src/cli/exposure-filter-cli \\
      /usr/bin/python3 -m unittest -v test_cli
"""

import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

import server_harness as harness

SUBCOMMANDS = ["health", "record", "filter", "get-filter", "stats",
               "explain", "delete", "trace add", "trace remove",
               "trace list"]


def cli_binary():
    path = os.environ.get("EF_E2E_CLI")
    if not path:
        raise RuntimeError("set EF_E2E_CLI to exposure-filter-cli (ctest "
                           "does this)")
    return path


class CliTestCase(unittest.TestCase):
    FLAGS = ("--surfaces=tiny:fp_rate=0.5:retention=10s:slice_span=2s",
             "--trace_max_users=3")

    @classmethod
    def setUpClass(cls):
        cls.server = harness.ServerProcess(*cls.FLAGS)
        try:
            cls.server.start()
        except BaseException:
            cls.server.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def cli(self, *args, stdin=None, address=None, expect=0):
        """Runs the CLI against the test server; checks the exit code and
        returns (stdout, stderr)."""
        env = {k: v for k, v in os.environ.items()
               if k != "EXPOSURE_FILTER_ADDRESS"}
        argv = [cli_binary()] + list(args)
        if address is not False:
            argv.append("--address=" + (address or self.server.address))
        p = subprocess.run(argv, input=(stdin or "").encode(),
                           capture_output=True, env=env, timeout=60)
        out, err = p.stdout.decode(), p.stderr.decode()
        self.assertEqual(p.returncode, expect,
                         "%s\nstdout: %s\nstderr: %s" % (argv, out, err))
        return out, err

    def cli_json(self, *args, **kwargs):
        out, _ = self.cli(*(list(args) + ["--json"]), **kwargs)
        return json.loads(out)


class CliCommandsTest(CliTestCase):
    def test_health(self):
        out, _ = self.cli("health")
        self.assertEqual(out, "SERVING\n")
        self.cli("health", "--service=exposure.v1.ExposureFilter")
        self.assertEqual(self.cli_json("health"), {"status": "SERVING"})
        _, err = self.cli("health", "--service=no.such.Service", expect=1)
        self.assertIn("NotFound", err)

    def test_health_unreachable(self):
        port = harness.free_port()
        # Nothing listens: refused at once (no wait_for_ready), so the
        # deadline only bounds a hang; generous for ASan.
        _, err = self.cli("health", "--deadline=30s",
                          address="127.0.0.1:%d" % port, expect=3)
        self.assertIn("Unavailable", err)

    def test_health_address_from_environment_and_before_subcommand(self):
        env = dict(os.environ, EXPOSURE_FILTER_ADDRESS=self.server.address)
        p = subprocess.run([cli_binary(), "health"], env=env,
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run([cli_binary(), "--address", self.server.address,
                            "health"], capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_record_filter_round_trip(self):
        out, _ = self.cli("record", "--user=c-rf", "--surface=homefeed",
                          "101", "102", "video:9")
        self.assertEqual(out, "recorded 3 items, 0 expired (older than the "
                              "window)\n")
        out, err = self.cli("filter", "--user=c-rf", "--surface=homefeed",
                            "101", "103", "video:9", "video:10")
        self.assertEqual(out.split(), ["103", "video:10"])
        self.assertIn("removed 2 of 4 candidates", err)
        out, _ = self.cli("filter", "--user=c-rf", "--surface=homefeed",
                          "--mask", "101", "103", "video:9", "video:10")
        self.assertEqual(out, "0101\n")
        j = self.cli_json("filter", "--user=c-rf", "--surface=homefeed",
                          "101", "103")
        self.assertEqual(j["keptIds"], ["103"])
        self.assertEqual(j["removedCount"], 1)

    def test_key_that_looks_numeric(self):
        self.cli("record", "--user=c-key", "--key=7")
        out, _ = self.cli("filter", "--user=c-key", "7", "--key=7")
        self.assertEqual(out, "7\n")  # id 7 kept, key "7" removed

    def test_items_from_file_and_stdin(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt",
                                         delete=False) as f:
            f.write("# exposed yesterday\n201\n\n  v:1  \n")
            path = f.name
        try:
            self.cli("record", "--user=c-file", "--items-from=" + path)
        finally:
            os.unlink(path)
        self.cli("record", "--user=c-file", "--keys-from=-", stdin="202\n")
        out, _ = self.cli("filter", "--user=c-file", "--items-from=-",
                          stdin="201\n202\n203\nv:1\nv:2\n")
        self.assertEqual(out.split(), ["202", "203", "v:2"])
        out, _ = self.cli("filter", "--user=c-file", "--key=202")
        self.assertEqual(out, "")

    def test_record_event_time(self):
        t = int(time.time() * 1000) - 3600 * 1000
        self.cli("record", "--user=c-time", "--time=%d" % t, "1")
        self.cli("record", "--user=c-time", "--time=2001-01-01T00:00:00Z",
                 "2")  # long expired
        j = self.cli_json("stats", "--user=c-time")
        self.assertEqual(j["oldestExposureMs"], str(t))
        self.assertEqual(j["items"], "1")

    def test_get_filter(self):
        self.cli("record", "--user=c-gf", "11", "12", "k:1")
        out, _ = self.cli("get-filter", "--user=c-gf", "11", "13",
                          "--key=k:1")
        self.assertRegex(out, r"^version [0-9a-f]+, \d+ bytes, checksum "
                              r"[0-9a-f]+, format 2\n")
        self.assertRegex(out, r"\n  slice \[[-0-9T:.Z]+ \.\. [-0-9T:.Z]+\)  "
                              r"(run  3 items  b=\d+|Bloom level 0  1 blocks)")
        self.assertIn("  11  may be exposed (would be filtered)", out)
        self.assertIn("  13  fresh (kept)", out)
        self.assertIn("  key:k:1  may be exposed", out)
        j = self.cli_json("get-filter", "--user=c-gf")
        self.assertEqual(j["formatVersion"], 2)
        self.assertEqual(j["fpRateTarget"], 0.01)
        self.assertEqual(len(j["slices"]), 1)
        # Format 2 counts the items of runs exactly; legacy Bloom segments
        # (this build's filter until runs land) carry no count.
        slice0 = j["slices"][0]
        self.assertEqual(j["items"],
                         sum(r["items"] for r in slice0["runs"]))
        self.assertEqual(len(slice0["runs"]) + len(slice0["bloomSegments"]),
                         1)
        again = self.cli_json("get-filter", "--user=c-gf",
                              "--if-version=" + j["version"])
        self.assertEqual(again, {"version": j["version"], "notModified": True})
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "f.bin")
            self.cli("get-filter", "--user=c-gf", "--out=" + path)
            with open(path, "rb") as f:
                self.assertEqual(f.read(4), b"EXPF")
            self.assertEqual(os.path.getsize(path), j["bytes"])

    def test_stats(self):
        self.cli("record", "--user=c-st", "--surface=homefeed", "1", "2")
        out, _ = self.cli("stats", "--user=c-st", "--surface=homefeed")
        self.assertIn("user c-st: 2 items", out)
        self.assertIn("1 slices, 1 runs, 0 Bloom segments", out)
        out, _ = self.cli("stats", "--user=c-nobody")
        self.assertEqual(out, "user c-nobody: no live history\n")
        j = self.cli_json("stats")
        self.assertEqual(j["shards"], 64)
        self.assertIn("homefeed", [s["surface"] for s in j["surfaceStats"]])
        out, _ = self.cli("stats")
        self.assertIn("64 shards", out)

    def test_delete(self):
        self.cli("record", "--user=c-del", "1")
        out, _ = self.cli("delete", "--user=c-del")
        self.assertEqual(out, "deleted\n")
        out, _ = self.cli("delete", "--user=c-del")
        self.assertEqual(out, "no such user\n")
        # --json prints every field; a server that is not replicated
        # writes no Kafka offsets.
        self.assertEqual(self.cli_json("delete", "--user=c-del"),
                         {"existed": False, "writtenOffsets": {}})

    def test_trace_and_explain(self):
        out, _ = self.cli("trace", "add", "c-tr")
        self.assertIn("now tracing 1 new users", out)
        try:
            self.cli("record", "--user=c-tr", "--surface=homefeed", "101")
            out, _ = self.cli("explain", "--user=c-tr", "--surface=homefeed",
                              "101", "103")
            self.assertIn("traced since", out)
            self.assertIn("101  filtered: exposed (recorded in the trace)",
                          out)
            self.assertIn("exposed at 20", out)
            self.assertIn("103  kept", out)
            j = self.cli_json("explain", "--user=c-tr", "--surface=homefeed",
                              "101")
            self.assertTrue(j["traced"])
            self.assertEqual(j["items"][0]["verdict"], "FILTERED_RECORDED")
            self.assertEqual(len(j["items"][0]["recordedExposuresMs"]), 1)
            listed = self.cli_json("trace", "list")
            entry = [u for u in listed["users"] if u["userId"] == "c-tr"]
            self.assertEqual(entry[0]["entries"], "1")
            out, _ = self.cli("trace", "list")
            self.assertIn("  c-tr  since ", out)
        finally:
            out, _ = self.cli("trace", "remove", "c-tr")
        self.assertIn("stopped tracing 1 users", out)
        out, _ = self.cli("explain", "--user=c-tr", "--surface=homefeed",
                          "101")
        self.assertIn("not traced", out)
        self.assertIn("101  filtered: exposed, or a false positive", out)

    def test_trace_users_from_stdin_and_limit(self):
        self.cli("trace", "add", "--users-from=-", stdin="c-l1\nc-l2\n")
        try:
            _, err = self.cli("trace", "add", "c-l3", "c-l4", expect=1)
            self.assertIn("ResourceExhausted", err)
            self.assertIn("--trace_max_users=3", err)
        finally:
            self.cli("trace", "remove", "c-l1", "c-l2")

    def test_explain_false_positive_on_tiny_surface(self):
        self.cli("record", "--user=c-fp", "--surface=tiny",
                 *[str(i) for i in range(1, 81)])
        j = self.cli_json("explain", "--user=c-fp", "--surface=tiny",
                          "--items-from=-",
                          stdin="\n".join(str(i) for i in range(1000, 3000)))
        filtered = [i for i in j["items"] if i.get("filtered")]
        self.assertGreater(len(filtered), 0)
        self.assertTrue(all(i["verdict"] == "FILTERED_UNVERIFIED"
                            for i in filtered))
        self.assertGreater(j["estimatedFpRate"], 0.01)


class CliErrorsTest(CliTestCase):
    def test_help_for_every_subcommand(self):
        out, _ = self.cli("--help", address=False)
        for name in SUBCOMMANDS:
            self.assertIn("  " + name + " ", out)
            out_sub, _ = self.cli(*(name.split() + ["--help"]), address=False)
            self.assertTrue(out_sub.startswith(
                "Usage: exposure-filter-cli " + name), out_sub)
            self.assertIn("Exit codes:", out_sub)

    def test_usage_errors_exit_2(self):
        cases = [
            ([], "Usage:"),
            (["frobnicate"], "unknown subcommand 'frobnicate'"),
            (["trace", "pause"], "unknown subcommand 'trace pause'"),
            (["record", "1"], "--user is required"),
            (["record", "--user=u"], "no items"),
            (["record", "--user=u", "--id=abc"], "--id: 'abc'"),
            (["record", "--user=u", "--time=yesterday", "1"], "--time"),
            (["filter", "--user=u", "--items-from=/nonexistent/x"],
             "cannot read '/nonexistent/x'"),
            (["filter", "--user=u", "--colour=red"], "unknown option --colour"),
            (["filter", "--user"], "needs a value"),
            (["filter", "--user=u", "--user=v"], "more than once"),
            (["health", "--json=yes"], "takes no value"),
            (["health", "extra"], "takes no arguments"),
            (["health", "--deadline=soon"], "--deadline"),
            (["explain", "--user=u"], "no items"),
            (["trace", "add"], "no user ids"),
            (["stats", "--surface=x"], "--surface needs --user"),
            (["filter", "--user=u", "--min_offsets=3", "1"],
             '--min_offsets: "3" is not PARTITION:OFFSET'),
            (["get-filter", "--user=u", "--min_offsets=3:-1"],
             '--min_offsets: "3:-1" is not PARTITION:OFFSET'),
            (["explain", "--user=u", "--min_offsets=1:2,1:3", "1"],
             "--min_offsets: partition 1 given more than once"),
            (["stats", "--allow_lagging"], "--allow_lagging needs --user"),
            (["filter", "--user=u", "--allow_lagging=yes", "1"],
             "takes no value"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                address = False if not args else None
                _, err = self.cli(*args, address=address, expect=2)
                self.assertIn(message, err)

    def test_server_errors_exit_1_and_name_the_field(self):
        cases = [
            (["record", "--user=u", "--surface=Bad Surface", "1"], "surface"),
            (["filter", "--user=" + "x" * 300, "1"], "user_id"),
            (["explain", "--user=u", "--key=" + "k" * 300], "item_keys[0]"),
            (["record", "--user=u", "--time=%d" % (
                int(time.time() * 1000) + 86400 * 1000), "1"],
             "exposures[0].event_time_ms"),
            (["trace", "add", "x" * 300], "user_ids[0]"),
        ]
        for args, field in cases:
            with self.subTest(args=args[:2]):
                _, err = self.cli(*args, expect=1)
                self.assertIn("InvalidArgument", err)
                self.assertIn(field, err)


    def test_read_freshness_options_reach_the_server(self):
        # This server is not replicated: it refuses read-your-writes
        # offsets naming the field (so they were sent), and a read that
        # allows lagging is answered as any other (it never lags).
        reads = [["filter", "--user=c-fresh", "1"],
                 ["get-filter", "--user=c-fresh"],
                 ["stats", "--user=c-fresh"],
                 ["explain", "--user=c-fresh", "1"]]
        for args in reads:
            with self.subTest(command=args[0]):
                _, err = self.cli(*(args + ["--min_offsets=0:5,2:7"]),
                                  expect=1)
                self.assertIn("FailedPrecondition", err)
                self.assertIn("min_offsets: read-your-writes offsets are "
                              "for a replicated deployment", err)
                _, err = self.cli(*(args + ["--allow_lagging"]))
                self.assertNotIn("lagging copy", err)


class CliHealthDrainTest(unittest.TestCase):
    """health exits non-zero once the server stops serving (SIGTERM)."""

    def test_not_serving_after_sigterm(self):
        with harness.ServerProcess("--shutdown_grace=3s") as server:
            # The deadline bounds a hang only: the live server answers, the
            # stopped one refuses at once (2 s was tight for an
            # ASan CLI and server on a loaded machine).
            argv = [cli_binary(), "health", "--address=" + server.address,
                    "--deadline=30s"]
            self.assertEqual(subprocess.run(argv, capture_output=True,
                                            timeout=60).returncode, 0)
            server.signal(signal.SIGTERM)
            self.assertEqual(server.wait_exit(), 0)
            p = subprocess.run(argv, capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 3, p.stderr)


if __name__ == "__main__":
    unittest.main()


class RoutedCliTest(unittest.TestCase):
    """Scale-out: two partitioned server processes (P = 4, N = 2);
    `--route` sends each user's calls to its owner, a direct call to the
    other replica is refused naming the owner, `stats` shows the partitions
    owned."""

    @classmethod
    def setUpClass(cls):
        cls.servers = []
        try:
            for ordinal in range(2):
                s = harness.ServerProcess(
                    "--partitions=4", "--replicas=2",
                    "--replica_ordinal=%d" % ordinal)
                cls.servers.append(s)
                s.start()
        except BaseException:
            for s in cls.servers:
                s.close()
            raise

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.close()

    def run_cli(self, *args, expect=0):
        env = {k: v for k, v in os.environ.items()
               if k != "EXPOSURE_FILTER_ADDRESS"}
        argv = [cli_binary()] + list(args)
        p = subprocess.run(argv, capture_output=True, env=env, timeout=60)
        out, err = p.stdout.decode(), p.stderr.decode()
        self.assertEqual(p.returncode, expect,
                         "%s\nstdout: %s\nstderr: %s" % (argv, out, err))
        return out, err

    def test_route_reaches_every_owner_and_direct_calls_are_refused(self):
        route = ["--route=" + ",".join(s.address for s in self.servers),
                 "--partitions=4"]
        users = ["route-%d" % i for i in range(6)]
        for u in users:
            self.run_cli("record", *route, "--user=" + u, "7")
            out, _ = self.run_cli("filter", *route, "--user=" + u, "7", "8")
            self.assertEqual(out, "8\n", u)
        held = [int(json.loads(self.run_cli(
            "stats", "--address=" + s.address, "--json")[0]).get("users", 0))
            for s in self.servers]
        self.assertEqual(sum(held), len(users))
        self.assertTrue(all(held), held)  # these 6 users land on both replicas
        refused = 0
        for u in users:
            for s in self.servers:
                p = subprocess.run([cli_binary(), "filter", "--address=" +
                                    s.address, "--user=" + u, "7"],
                                   capture_output=True, timeout=60)
                if p.returncode != 0:
                    self.assertIn("FailedPrecondition", p.stderr.decode())
                    self.assertIn("owned by replica", p.stderr.decode())
                    refused += 1
        self.assertEqual(refused, len(users))  # each user: one wrong replica
        out, _ = self.run_cli("stats", "--address=" + self.servers[1].address)
        self.assertIn("replica 1 of 2, partitions 4: owns [1,3]", out)
        _, err = self.run_cli("filter", "--route=" + self.servers[0].address,
                              "--user=u", "1", expect=2)
        self.assertIn("--route needs --partitions", err)
