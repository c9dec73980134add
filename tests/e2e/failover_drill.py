"""The failover drill: librdkafka's mock cluster, 3 server
processes with --replication_factor=2 on 12 partitions (writes go through
the Kafka log), and the C++ load driver (tools/drill, `failover-drill`)
sending a continuous mix of RecordExposure and FilterRecalled through the
RoutingClient, while this script

  (a) kill -9s one replica and restarts it on its data dir and port;
  (b) rolls all three: SIGTERM, wait for exit, restart, wait for health
      SERVING, then the next (StatefulSet order 2, 1, 0; a PDB of
      maxUnavailable 1 allows no more than one down);

and, before both, makes BOTH owners of one partition lag together: the
mock cluster has two brokers, broker 2 leads LAG_PARTITION alone, and it
answers each owner's next Fetch LAG_STALL_S late (kafka-mock-cluster
--control, "delay"). Produce and ListOffsets requests are answered at once,
so writes go on and each owner's broker probe sees the log's end move
while its consumer cannot apply it: both owners' lag of that partition
grows past --max_serving_lag (1 s), both refuse fresh reads, and the
routing client's last try (allow_lagging) gets the least-stale answer.
The other partitions, led by broker 1, keep up.

Afterwards every exposure the driver saw acknowledged is checked on every
owner of its user, directly (`failover-drill --mode=verify`).

tests/e2e/test_failover.py asserts on the result (ctest
e2e_python_failover); bench/failover_drill.sh prints the figures
(`python3 failover_drill.py --report`). Times are CLOCK_MONOTONIC
(time.monotonic() here, steady_clock in the driver), so the driver's call
log can be cut at this script's events.
"""

import csv
import json
import os
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import server_harness as harness

PARTITIONS = 12
REPLICAS = 3
REPLICATION_FACTOR = 2
TOPIC = "exposures"


def _env_float(name, default):
    return float(os.environ.get(name, default))


# Phase lengths (seconds of load between events); short enough that the
# whole drill stays well under ctest's timeout on a loaded 2-core machine.
WARMUP_S = _env_float("EF_DRILL_WARMUP_S", 3)
DOWN_S = _env_float("EF_DRILL_DOWN_S", 3)      # killed replica stays down
BETWEEN_S = _env_float("EF_DRILL_BETWEEN_S", 2)
TAIL_S = _env_float("EF_DRILL_TAIL_S", 2)
# Bench only: users (x PRELOAD_MESSAGES messages of 10 items) produced
# straight into the topic before the load starts, so that a restart has a
# real snapshot to recover. 0 (the test): none.
PRELOAD_USERS = int(os.environ.get("EF_DRILL_PRELOAD_USERS", "0"))
PRELOAD_MESSAGES = int(os.environ.get("EF_DRILL_PRELOAD_MESSAGES", "5"))
PRELOAD_DEADLINE_S = 600.0


# The both-owners-lag phase. Broker 2 leads LAG_PARTITION and nothing else;
# only its two owners fetch from broker 2. Each owner's next Fetch there is
# answered LAG_STALL_S late (librdkafka keeps one Fetch in flight per
# broker, so the two delays stall one Fetch of each owner). An owner's lag
# grows from the moment its broker probe (every 250 ms) sees the log's end
# pass what it applied, and drops when the late Fetch arrives: past the 1 s
# bound for about LAG_STALL_S - 1.25 s, here nearly 4 s.
LAG_PARTITION = 5
LAG_BROKER = 2
FETCH_API_KEY = 1  # the Kafka protocol's numbering
LAG_STALL_S = _env_float("EF_DRILL_LAG_STALL_S", 5)
MAX_SERVING_LAG_S = 1.0  # the servers' default --max_serving_lag
LAG_RECOVER_S = 30.0  # both owners SERVING again after the stall, at most


# A restarted copy counts as caught up with Kafka once its consumer lag
# summed over its partitions is at most this many messages: about 30 ms of
# the drill's writes (~3,000 messages/s over the 8 partitions a replica
# owns), i.e. what one fetch round trip leaves behind in steady state.
CAUGHT_UP_LAG = 100
CATCH_UP_WATCH_S = 30.0


def metrics_text(admin_port):
    """A replica's /metrics text, or None when it does not answer."""
    url = "http://127.0.0.1:%d/metrics" % admin_port
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.read().decode()
    except OSError:
        return None


def consumer_lag(admin_port):
    """Summed exposure_filter_kafka_consumer_lag_messages, or None."""
    text = metrics_text(admin_port)
    if text is None:
        return None
    values = [float(m.group(1)) for m in re.finditer(
        r"^exposure_filter_kafka_consumer_lag_messages\{[^}]*\} (\S+)$",
        text, re.M)]
    return sum(values) if values else None


def partition_gauge(text, name, partition):
    """The value of gauge `name`{partition="<partition>"} in a /metrics
    text, or None when the copy does not own the partition."""
    m = re.search(r'^%s\{partition="%d"\} (\S+)$' % (name, partition),
                  text or "", re.M)
    return float(m.group(1)) if m else None


def serving_ready(text):
    """exposure_filter_serving_ready == 1 (health SERVING for reads)."""
    return re.search(r"^exposure_filter_serving_ready 1$", text or "",
                     re.M) is not None


def tool(env_name, name):
    directory = os.environ.get(env_name)
    if not directory:
        raise RuntimeError("set %s (ctest does this)" % env_name)
    return os.path.join(directory, name)


class Drill:
    """One run of the drill. Use run(), then read the attributes."""

    def __init__(self, driver_args=(), victim=0):
        self.tmp = tempfile.mkdtemp(prefix="ef_failover_drill_")
        self.driver_args = list(driver_args)
        self.victim = victim
        self.mock = None
        self.servers = [None] * REPLICAS
        self.ports = [harness.free_port() for _ in range(REPLICAS)]
        self.brokers = None
        # (monotonic time, what) for every event of the drill.
        self.events = []
        # Per restart: (ordinal, how, seconds from spawn to SERVING).
        self.restarts = []
        # Per restart: (ordinal, seconds from SERVING until the consumer lag
        # was <= CAUGHT_UP_LAG or None, the highest lag seen).
        self.catch_ups = []
        self._watchers = []
        self.exit_codes = []  # SIGTERMed replicas' exit codes
        self.load = None     # the driver's JSON summary
        self.verify = None   # the checker's JSON summary
        self.calls = []      # (start_s, op, latency_ms, code)
        self.samples = []    # (t_s, failovers, hedges, [errors per replica])
        self.logs = {}       # ordinal -> logs of its earlier processes
        self.preload_s = None  # produce + consume time of the preload
        # The both-owners-lag phase: LAG_PARTITION's owners (ordinals), and
        # (monotonic time, [their exposure_filter_serving_lag_seconds of it,
        # None when /metrics did not answer]) every 50 ms during it.
        self.lag_owners = []
        self.lag_samples = []

    # --- processes ---------------------------------------------------------

    def addresses(self):
        return ["127.0.0.1:%d" % p for p in self.ports]

    def start_replica(self, ordinal):
        data_dir = os.path.join(self.tmp, "replica-%d" % ordinal)
        os.makedirs(data_dir, exist_ok=True)
        server = harness.ServerProcess(
            "--partitions=%d" % PARTITIONS, "--replicas=%d" % REPLICAS,
            "--replica_ordinal=%d" % ordinal,
            "--replication_factor=%d" % REPLICATION_FACTOR,
            "--kafka_brokers=" + self.brokers, "--kafka_topic=" + TOPIC,
            "--kafka_group=drill", "--kafka_max_batch_wait=5ms",
            # The mock broker holds an empty fetch for fetch.wait.max.ms
            # (librdkafka's default 500 ms): freshness would measure that.
            "--kafka_config=fetch.wait.max.ms=10",
            "--snapshot_interval=3s", "--shards=8",
            # --max_serving_lag stays at its default (1 s). Both owners of a
            # partition consume the same stream, so a stall that hits every
            # process at once (the three snapshots every 3 s on 2 shared
            # cores, a sanitizer build) makes both lag together; the routing
            # client's last try then sets allow_lagging and the least-stale
            # copy answers (docs/scale-out.md "Least-stale reads"): the
            # drill's zero failed reads hold at the default bound.
            data_dir=data_dir, port=self.ports[ordinal])
        spawned = time.monotonic()
        server.start()
        ready = time.monotonic() - spawned
        self.servers[ordinal] = server
        return ready

    def _watch_catch_up(self, ordinal):
        """Times SERVING -> consumer lag <= CAUGHT_UP_LAG in the background
        (a server serves once its lag is within --max_serving_lag, 1 s by
        default, so it may still be catching up)."""
        server = self.servers[ordinal]
        serving = time.monotonic()

        def watch():
            peak = 0.0
            while time.monotonic() - serving < CATCH_UP_WATCH_S:
                lag = consumer_lag(server.admin_port)
                if lag is not None:
                    peak = max(peak, lag)
                    if lag <= CAUGHT_UP_LAG:
                        self.catch_ups.append(
                            (ordinal, time.monotonic() - serving, peak))
                        return
                time.sleep(0.02)
            self.catch_ups.append((ordinal, None, peak))

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        self._watchers.append(t)

    def _retire(self, ordinal):
        server = self.servers[ordinal]
        self.logs.setdefault(ordinal, []).append(server.log())
        server.close()
        self.servers[ordinal] = None

    def event(self, what):
        self.events.append((time.monotonic(), what))

    def kill_and_restart(self, ordinal):
        self.event("kill -9 replica %d" % ordinal)
        self.servers[ordinal].kill()
        self._retire(ordinal)
        time.sleep(DOWN_S)
        self.event("restart replica %d" % ordinal)
        ready = self.start_replica(ordinal)
        self.restarts.append((ordinal, "kill -9", ready))
        self.event("replica %d SERVING" % ordinal)
        self._watch_catch_up(ordinal)

    def terminate_and_restart(self, ordinal):
        self.event("SIGTERM replica %d" % ordinal)
        self.servers[ordinal].signal(signal.SIGTERM)
        self.exit_codes.append(
            (ordinal, self.servers[ordinal].wait_exit()))
        self._retire(ordinal)
        self.event("restart replica %d" % ordinal)
        ready = self.start_replica(ordinal)
        self.restarts.append((ordinal, "SIGTERM", ready))
        self.event("replica %d SERVING" % ordinal)
        self._watch_catch_up(ordinal)

    def mock_command(self, line):
        """One kafka-mock-cluster --control command; raises unless "ok"."""
        self.mock.stdin.write(line + "\n")
        self.mock.stdin.flush()
        reply = self.mock.stdout.readline().strip()
        if reply != "ok":
            raise RuntimeError("kafka-mock-cluster: %s: %s" % (line, reply))

    def owners_of(self, partition):
        """The ordinals whose /metrics export a lag for `partition`."""
        return [r for r, server in enumerate(self.servers)
                if partition_gauge(metrics_text(server.admin_port),
                                   "exposure_filter_serving_lag_seconds",
                                   partition) is not None]

    def both_owners_lag(self):
        """Stalls LAG_PARTITION's owners' fetches for LAG_STALL_S (see
        LAG_PARTITION), sampling their lag of it, until both are SERVING
        again."""
        self.lag_owners = self.owners_of(LAG_PARTITION)
        if len(self.lag_owners) != REPLICATION_FACTOR:
            raise RuntimeError("partition %d has owners %s"
                               % (LAG_PARTITION, self.lag_owners))
        ports = [self.servers[r].admin_port for r in self.lag_owners]
        done = threading.Event()

        def sample():
            while not done.is_set():
                texts = [metrics_text(p) for p in ports]
                self.lag_samples.append((time.monotonic(), [
                    partition_gauge(t, "exposure_filter_serving_lag_seconds",
                                    LAG_PARTITION) for t in texts]))
                done.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            self.event("both owners of partition %d stall" % LAG_PARTITION)
            self.mock_command("delay %d %d %d %d" % (
                LAG_BROKER, FETCH_API_KEY, len(self.lag_owners),
                int(LAG_STALL_S * 1000)))
            time.sleep(LAG_STALL_S)
            deadline = time.monotonic() + LAG_RECOVER_S
            while not all(serving_ready(metrics_text(p)) for p in ports):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        "partition %d's owners not SERVING %.0f s after the "
                        "stall" % (LAG_PARTITION, LAG_RECOVER_S))
                time.sleep(0.05)
            self.event("both owners of partition %d SERVING" % LAG_PARTITION)
        finally:
            done.set()
            sampler.join()

    def lag_reached(self):
        """Per lag owner, the highest lag of LAG_PARTITION sampled; and the
        times of the samples in which both were past MAX_SERVING_LAG_S."""
        peaks = [max([s[1][i] for s in self.lag_samples
                      if s[1][i] is not None] or [0.0])
                 for i in range(len(self.lag_owners))]
        both = [t for t, lags in self.lag_samples
                if all(x is not None and x > MAX_SERVING_LAG_S for x in lags)]
        return peaks, both

    def preload(self):
        """PRELOAD_USERS users into the topic; waits until every replica has
        consumed them and written a snapshot (--snapshot_interval=3s)."""
        start = time.monotonic()
        subprocess.run(
            [tool("EF_KAFKA_TOOLS", "kafka-produce-exposures"),
             "--brokers=" + self.brokers, "--topic=" + TOPIC,
             "--format=request", "--user_prefix=preload-",
             "--users=%d" % PRELOAD_USERS,
             "--messages_per_user=%d" % PRELOAD_MESSAGES,
             "--items_per_message=10"],
            check=True, capture_output=True, timeout=PRELOAD_DEADLINE_S)
        for server in self.servers:
            while True:
                lag = consumer_lag(server.admin_port)
                if lag == 0:
                    break
                if time.monotonic() - start > PRELOAD_DEADLINE_S:
                    raise RuntimeError("preload not consumed in time")
                time.sleep(0.2)
        self.preload_s = time.monotonic() - start
        time.sleep(4)  # one snapshot interval

    # --- the drill ---------------------------------------------------------

    def run(self):
        self.mock = subprocess.Popen(
            [tool("EF_KAFKA_TOOLS", "kafka-mock-cluster"), "--topic=" + TOPIC,
             "--partitions=%d" % PARTITIONS, "--brokers=2", "--control"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        self.brokers = self.mock.stdout.readline().strip()
        if not self.brokers.startswith("127.0.0.1:"):
            raise RuntimeError("kafka-mock-cluster printed %r" % self.brokers)
        # Before any server fetches: broker 2 leads LAG_PARTITION alone.
        for p in range(PARTITIONS):
            self.mock_command("leader %s %d %d" % (
                TOPIC, p, LAG_BROKER if p == LAG_PARTITION else 1))
        for r in range(REPLICAS):
            self.start_replica(r)
        if PRELOAD_USERS > 0:
            self.preload()
        route = ",".join(self.addresses())
        acked = os.path.join(self.tmp, "acked.tsv")
        calls = os.path.join(self.tmp, "calls.csv")
        samples = os.path.join(self.tmp, "samples.csv")
        driver = subprocess.Popen(
            [tool("EF_DRILL_TOOLS", "failover-drill"), "--mode=load",
             "--route=" + route, "--partitions=%d" % PARTITIONS,
             "--replication_factor=%d" % REPLICATION_FACTOR,
             "--acked_out=" + acked, "--calls_out=" + calls,
             "--samples_out=" + samples] + self.driver_args,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            self.event("load started")
            time.sleep(WARMUP_S)
            # (0) both owners of one partition lag together, past the bound.
            self.both_owners_lag()
            time.sleep(BETWEEN_S)
            # (a) a crash: no drain, no snapshot, connections reset.
            self.kill_and_restart(self.victim)
            time.sleep(BETWEEN_S)
            # (b) a rolling update, highest ordinal first as a StatefulSet
            # does, one at a time (PDB maxUnavailable 1), each back SERVING
            # before the next goes.
            for r in reversed(range(REPLICAS)):
                self.terminate_and_restart(r)
                time.sleep(BETWEEN_S)
            time.sleep(max(0.0, TAIL_S - BETWEEN_S))
            self.event("load stopped")
        finally:
            out, err = driver.communicate(timeout=120)
        if driver.returncode != 0:
            raise RuntimeError("failover-drill --mode=load exited %d: %s"
                               % (driver.returncode, err))
        self.load = json.loads(out)
        for t in self._watchers:
            t.join()
        self._read_calls(calls, samples)
        check = subprocess.run(
            [tool("EF_DRILL_TOOLS", "failover-drill"), "--mode=verify",
             "--route=" + route, "--partitions=%d" % PARTITIONS,
             "--replication_factor=%d" % REPLICATION_FACTOR,
             "--acked_in=" + acked, "--catch_up_s=60"],
            capture_output=True, text=True, timeout=180, check=False)
        if check.returncode != 0:
            raise RuntimeError("failover-drill --mode=verify exited %d: %s"
                               % (check.returncode, check.stderr))
        self.verify = json.loads(check.stdout)
        return self

    def _read_calls(self, calls, samples):
        with open(calls) as f:
            for row in csv.DictReader(f):
                self.calls.append((int(row["start_ns"]) / 1e9, row["op"],
                                   float(row["latency_ms"]), int(row["code"]),
                                   row["stale"] == "1", row["lagging"] == "1",
                                   int(row["lag_ms"]), int(row["partition"])))
        with open(samples) as f:
            for row in csv.DictReader(f):
                self.samples.append((
                    int(row["t_ns"]) / 1e9, int(row["failovers"]),
                    int(row["hedges"]),
                    [int(x) for x in row["replica_errors"].split(";") if x]))

    def close(self):
        for r in range(REPLICAS):
            if self.servers[r] is not None:
                self.servers[r].close()
        if self.mock is not None:
            self.mock.terminate()
            self.mock.wait(timeout=30)
            # Other tests (test_go_client, test_java_client) start the mock
            # themselves, without --control and its stdin pipe.
            if self.mock.stdin is not None:
                self.mock.stdin.close()
            self.mock.stdout.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- figures -----------------------------------------------------------

    def report_text(self):
        return report(self)

    def window(self, start_event, end_event):
        """(start, end): the monotonic times of the first event named
        `start_event` and of the first `end_event` after it."""
        start = next(t for t, what in self.events if what == start_event)
        end = next(t for t, what in self.events
                   if what == end_event and t >= start)
        return start, end

    def failed_calls(self):
        """Each failed call as text, placed after the event before it."""
        out = []
        for start, op, ms, code, *_ in self.calls:
            if code == 0:
                continue
            before = [(t, w) for t, w in self.events if t <= start]
            t, what = before[-1] if before else (start, "start")
            out.append("%s code %d (%.1f ms) %.3f s after '%s'"
                       % (op, code, ms, start - t, what))
        return out

    def calls_in(self, start, end, op=None):
        return [c for c in self.calls
                if start <= c[0] < end and (op is None or c[1] == op)]

    def lag_phase(self):
        """Figures of the both-owners-lag phase: its window (stall -> both
        owners SERVING again), the reads and writes that started in it, and
        its least-stale answers (all, and those for LAG_PARTITION's users,
        whose lag_ms is the stalled partition's)."""
        start, end = self.window(
            "both owners of partition %d stall" % LAG_PARTITION,
            "both owners of partition %d SERVING" % LAG_PARTITION)
        reads = self.calls_in(start, end, "read")
        writes = self.calls_in(start, end, "write")
        lagging = [c for c in reads if c[5]]
        stalled = [c for c in lagging if c[7] == LAG_PARTITION]
        peaks, both = self.lag_reached()
        return {
            "seconds": end - start,
            "reads": len(reads),
            "reads_failed": sum(1 for c in reads if c[3] != 0),
            "writes": len(writes),
            "writes_failed": sum(1 for c in writes if c[3] != 0),
            "write_ms": [c[2] for c in writes],
            "lagging": len(lagging),
            "lagging_lag_ms": [c[6] for c in lagging],
            "stalled": len(stalled),
            "stalled_lag_ms": [c[6] for c in stalled],
            "lag_peaks_s": peaks,
            # Samples (every 50 ms) with both owners past the bound, and
            # the time from the first such sample to the last.
            "both_past_bound_samples": len(both),
            "both_past_bound_s": (max(both) - min(both)) if both else 0.0,
        }

    def failovers_in(self, start, end):
        """Failovers counted by the client between the samples bracketing
        [start, end] (sampled every 100 ms)."""
        before = [s for s in self.samples if s[0] <= start]
        after = [s for s in self.samples if s[0] >= end]
        first = before[-1][1] if before else 0
        last = after[0][1] if after else self.samples[-1][1]
        return last - first


def percentile(values, q):
    """Nearest rank, as the driver computes it."""
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def report(drill):
    """The bench's figures, as text."""
    lines = []
    load = drill.load
    if drill.preload_s is not None:
        lines.append(
            "preload: %d users x %d messages x 10 items through Kafka, "
            "consumed by every owner in %.1f s" % (
                PRELOAD_USERS, PRELOAD_MESSAGES, drill.preload_s))
    for op in ("read", "write"):
        s = load[op]
        lines.append(
            "%-5s calls=%d ok=%d failed=%d %s p50=%.2f ms p99=%.2f ms "
            "max=%.2f ms" % (op, s["total"], s["ok"], s["failed"],
                             json.dumps(s["failed_by_code"]), s["p50_ms"],
                             s["p99_ms"], s["max_ms"]))
    v = drill.victim
    start, end = drill.window("kill -9 replica %d" % v,
                              "replica %d SERVING" % v)
    for op in ("read", "write"):
        c = drill.calls_in(start, end, op)
        ms = [x[2] for x in c]
        lines.append(
            "during kill -9 of replica %d (%.1f s down + restart): %s "
            "calls=%d failed=%d p50=%.2f ms p99=%.2f ms max=%.2f ms"
            % (v, end - start, op, len(c), sum(1 for x in c if x[3] != 0),
               percentile(ms, 0.5), percentile(ms, 0.99),
               max(ms) if ms else 0))
    lines.append("failovers during the kill: %d"
                 % drill.failovers_in(start, end))
    start, end = drill.window("SIGTERM replica %d" % (REPLICAS - 1),
                              "replica 0 SERVING")
    c = drill.calls_in(start, end, "read")
    ms = [x[2] for x in c]
    lines.append(
        "during the rolling restart (%.1f s): read calls=%d failed=%d "
        "p50=%.2f ms p99=%.2f ms; failovers %d"
        % (end - start, len(c), sum(1 for x in c if x[3] != 0),
           percentile(ms, 0.5), percentile(ms, 0.99),
           drill.failovers_in(start, end)))
    ph = drill.lag_phase()
    lines.append(
        "during the stall of both owners (replicas %s) of partition %d "
        "(%.1f s, until both SERVING): read calls=%d failed=%d; write "
        "calls=%d failed=%d p99=%.2f ms max=%.2f ms"
        % (" and ".join(str(r) for r in drill.lag_owners), LAG_PARTITION,
           ph["seconds"], ph["reads"], ph["reads_failed"], ph["writes"],
           ph["writes_failed"], percentile(ph["write_ms"], 0.99),
           max(ph["write_ms"] or [0])))
    lines.append(
        "lag of partition %d reached %s; both past the %.0f s bound at "
        "once for %.2f s" % (
            LAG_PARTITION, ", ".join(
                "%.2f s on replica %d" % (peak, r)
                for r, peak in zip(drill.lag_owners, ph["lag_peaks_s"])),
            MAX_SERVING_LAG_S, ph["both_past_bound_s"]))
    lines.append(
        "reads answered least-stale during the stall: %d, staleness.lag_ms "
        "p50=%d p99=%d max=%d; of them for partition %d's users: %d, "
        "p50=%d p99=%d max=%d (the others are users of the owners' other "
        "partitions, which keep up)"
        % (ph["lagging"], percentile(ph["lagging_lag_ms"], 0.5),
           percentile(ph["lagging_lag_ms"], 0.99),
           max(ph["lagging_lag_ms"] or [0]), LAG_PARTITION, ph["stalled"],
           percentile(ph["stalled_lag_ms"], 0.5),
           percentile(ph["stalled_lag_ms"], 0.99),
           max(ph["stalled_lag_ms"] or [0])))
    lines.append("failovers in the whole run: %d; replica_errors %s"
                 % (load["failovers"], load["replica_errors"]))
    for ordinal, how, ready in drill.restarts:
        lines.append("restart after %s of replica %d: process start -> "
                     "SERVING %.2f s" % (how, ordinal, ready))
    for ordinal, seconds, peak in drill.catch_ups:
        lines.append("replica %d: SERVING -> Kafka consumer lag <= %d "
                     "messages %s (highest lag seen %d)"
                     % (ordinal, CAUGHT_UP_LAG,
                        "%.2f s" % seconds if seconds is not None
                        else "not within %.0f s" % CATCH_UP_WATCH_S, peak))
    # Stale reads placed in time: after which restart, and how long after
    # that copy said SERVING the last one came.
    serving = [(t, w) for t, w in drill.events if w.endswith(" SERVING")]
    for i, (t, what) in enumerate(serving):
        until = serving[i + 1][0] if i + 1 < len(serving) else float("inf")
        stale = [c[0] for c in drill.calls if c[4] and t <= c[0] < until]
        if stale:
            lines.append("stale reads after '%s': %d, the last %.2f s after "
                         "it" % (what, len(stale), max(stale) - t))
    f = load["freshness"]
    lines.append(
        "freshness acknowledged -> filtered on every owner: samples=%d "
        "(dropped %d: an owner down or lagging) p50=%.2f ms p99=%.2f ms "
        "max=%.2f ms"
        % (f["samples"], f["dropped"], f["p50_ms"], f["p99_ms"],
           f["max_ms"]))
    lines.append("stale reads (missed an item acknowledged >= 2 s before): "
                 "%d reads, %d items; of them answered least-stale (saying "
                 "so): %d" % (load["stale_reads"], load["stale_items"],
                              sum(1 for c in drill.calls if c[4] and c[5])))
    lines.append("reads every owner refused as lagging, answered least-stale "
                 "(allow_lagging on the last try), whole run: %d, "
                 "staleness.lag_ms max=%d p99=%d"
                 % (load["lagging_reads"], load["lagging_max_ms"],
                    load["lagging_p99_ms"]))
    for line in drill.failed_calls()[:10]:
        lines.append("failed call: " + line)
    for e in load["read_errors"][:5]:
        lines.append("read error: " + e)
    for e in load["write_errors"][:5]:
        lines.append("write error: " + e)
    ver = drill.verify
    lines.append(
        "check: %d users, %d acknowledged items, %d (user, owner) pairs: "
        "%d missing, %d unreachable (after %.2f s)"
        % (ver["users"], ver["items"], ver["owner_checks"], ver["missing"],
           ver["unreachable"], ver["waited_s"]))
    return "\n".join(lines)


def main(argv):
    if "--report" not in argv:
        print("usage: failover_drill.py --report [driver flags...]",
              file=sys.stderr)
        return 2
    driver_args = [a for a in argv if a != "--report"]
    drill = Drill(driver_args=driver_args)
    try:
        drill.run()
        print(report(drill))
    finally:
        drill.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
