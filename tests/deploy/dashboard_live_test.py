"""The Grafana dashboard against a live server.

Starts the real exposure-filter-server (tests/e2e/server_harness.py: a free
port, a temporary --data_dir) consuming from librdkafka's mock Kafka cluster
(tools/kafka), with a memory ceiling, --fsync=always and short snapshot and
sweep intervals, so every series the dashboard reads exists: several are
created lazily (a histogram's buckets are there from the start, but per-
surface gauges need a surface, Kafka lag needs an assigned partition with a
known high watermark, the snapshot and sweep timestamps need a snapshot and
a sweep). Makes a few RPCs of every kind and produces Kafka messages, good
and undecodable, waits for their effects, scrapes /metrics once and runs
check-dashboard.mjs --self-test on the dashboard and the scrape.

  dashboard_live_test.py DASHBOARD.json OUT_DIR
Environment: EF_E2E_SERVER (the server binary), EF_KAFKA_TOOLS (the
directory of kafka-mock-cluster and kafka-produce-exposures), EF_PROTOC.
Registered in ctest as deploy_dashboard (tests/deploy/check-dashboard.sh).
"""

import os
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import server_harness as harness  # pylint: disable=wrong-import-position
from test_e2e import Client  # pylint: disable=wrong-import-position

TOPIC = "exposures"
PARTITIONS = 4
USERS = 50
MESSAGES_PER_USER = 2
BAD = 3
SURFACE = "homefeed"
# Generous: a shared machine, maybe a sanitizer build. Nothing is timed.
DEADLINE_S = 120.0


def tool(name):
    return os.path.join(os.environ["EF_KAFKA_TOOLS"], name)


def scrape_text(server):
    url = "http://127.0.0.1:%d/metrics" % server.admin_port
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def samples(text):
    """{sample name: [(labels string, value)]}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, labels = head.partition("{")
        out.setdefault(name, []).append((labels.rstrip("}"), float(value)))
    return out


# Waits on effects of what this test did (consumption, snapshots, sweeps),
# never on the series the dashboard reads, so a renamed series fails the
# check at once with its name rather than this wait.
def wait_for(server, what, ready):
    deadline = time.monotonic() + DEADLINE_S
    while True:
        text = scrape_text(server)
        if ready(samples(text)):
            return text
        if time.monotonic() > deadline:
            raise SystemExit("dashboard_live_test: %s not seen on /metrics "
                             "within %.0fs; last scrape:\n%s"
                             % (what, DEADLINE_S, text))
        time.sleep(0.2)


def make_traffic(server):
    client = Client(server.address)
    try:
        now_ms = int(time.time() * 1000)
        # One exposure with an event time so exposure lag is observed, on
        # a named surface and on the default one.
        client.record(client.exposure("u1", ids=[1, 2, 3], t=now_ms - 5000),
                      surface=SURFACE)
        client.record(client.exposure("u2", ids=[4, 5], t=now_ms))
        client.filter("u1", ids=[1, 2, 9], surface=SURFACE)
        client.filter("u2", ids=[4, 7])
        client.get_filter("u1", surface=SURFACE)
        client.user_stats("u2")
        client.server_stats()
    finally:
        client.close()


def main():
    dashboard, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    mock = subprocess.Popen(
        [tool("kafka-mock-cluster"), "--topic=" + TOPIC,
         "--partitions=%d" % PARTITIONS],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    server = None
    try:
        brokers = mock.stdout.readline().strip()
        if not brokers.startswith("127.0.0.1:"):
            raise SystemExit("kafka-mock-cluster printed %r" % brokers)
        server = harness.ServerProcess(
            "--kafka_brokers=" + brokers, "--kafka_topic=" + TOPIC,
            "--kafka_format=exposure", "--kafka_group=dashboard",
            "--fsync=always", "--snapshot_interval=1s", "--sweep_interval=1s",
            "--memory_limit_bytes=%d" % (256 << 20), "--shards=4")
        server.start()
        make_traffic(server)
        produced = subprocess.run(
            [tool("kafka-produce-exposures"), "--brokers=" + brokers,
             "--topic=" + TOPIC, "--format=exposure", "--users=%d" % USERS,
             "--messages_per_user=%d" % MESSAGES_PER_USER, "--item_base=1000",
             "--bad=%d" % BAD],
            capture_output=True, text=True, timeout=300, check=True)
        total = int(produced.stdout.strip())

        def ready(s):
            consumed = sum(v for _, v in
                           s.get("exposure_filter_kafka_partition_offset", []))
            snapshots = s.get("exposure_filter_snapshots_total", [("", 0)])
            # Two: the first one's series are complete once the count is
            # past it (the count is bumped first).
            return (consumed == total and
                    len(s.get("exposure_filter_kafka_consumer_lag_messages",
                              [])) == PARTITIONS and
                    snapshots[0][1] >= 2 and
                    "exposure_filter_last_sweep_timestamp_seconds" in s)
        text = wait_for(server, "all %d Kafka messages consumed, a snapshot "
                        "and a sweep" % total, ready)
    finally:
        if server is not None:
            server.close()
        mock.terminate()
        mock.wait(timeout=30)
        mock.stdout.close()
    metrics = os.path.join(out_dir, "metrics.txt")
    with open(metrics, "w") as f:
        f.write(text)
    print("dashboard_live_test: scraped %d series into %s"
          % (len(samples(text)), metrics))
    sys.stdout.flush()
    check = subprocess.run(
        ["node", os.path.join(HERE, "check-dashboard.mjs"), "--self-test",
         dashboard, metrics], check=False)
    sys.exit(check.returncode)


if __name__ == "__main__":
    main()
