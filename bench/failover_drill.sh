#!/usr/bin/env bash
# The failover drill as a benchmark (docs/scale-out.md "Failover drill"):
# librdkafka's mock cluster, 3 real servers with --replication_factor=2 on
# 12 partitions, the C++ load driver
# (tools/drill/failover-drill: RecordExposure of 2 users x 10-20 items and
# FilterRecalled of 32 candidates through the RoutingClient, per-try timeout
# 250 ms inside a 1 s deadline), while both owners of partition 5 lag
# together (its broker answers their fetches of it EF_DRILL_LAG_STALL_S,
# default 5 s, late), then replica 0 is kill -9ed (down EF_DRILL_DOWN_S,
# default 3 s) and restarted, then all three are rolled (SIGTERM, restart,
# SERVING, next). Prints the calls during the stall, the kill and the roll
# with their p50/p99, the lag both owners reached and the reads answered
# least-stale with their staleness, failovers, restart -> SERVING and
# SERVING -> caught up with Kafka per restart, freshness (acknowledged ->
# filtered on every owner) and the check of every acknowledged exposure on
# every owner. The same scenario is the e2e test e2e_python_failover
# (tests/e2e/test_failover.py).
#   bash bench/failover_drill.sh [failover-drill load flags...]
#   e.g. bash bench/failover_drill.sh --threads=4 --users=20000
# Environment: BUILD (build); EF_DRILL_WARMUP_S, EF_DRILL_LAG_STALL_S,
# EF_DRILL_DOWN_S, EF_DRILL_BETWEEN_S, EF_DRILL_TAIL_S (seconds of load
# between events);
# EF_DRILL_PRELOAD_USERS (x EF_DRILL_PRELOAD_MESSAGES, default 5, messages
# of 10 items) produced into the topic first, so restarts recover a real
# snapshot, e.g. EF_DRILL_PRELOAD_USERS=200000.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export EF_E2E_SERVER=${EF_E2E_SERVER:-$PWD/$BUILD/src/server/exposure-filter-server}
export EF_KAFKA_TOOLS=${EF_KAFKA_TOOLS:-$PWD/$BUILD/tools/kafka}
export EF_DRILL_TOOLS=${EF_DRILL_TOOLS:-$PWD/$BUILD/tools/drill}
export GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=100
for f in "$EF_E2E_SERVER" "$EF_KAFKA_TOOLS/kafka-mock-cluster" \
         "$EF_DRILL_TOOLS/failover-drill"; do
  [[ -x $f ]] || { echo "failover_drill: build $f first" >&2; exit 2; }
done
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
cd tests/e2e
exec /usr/bin/python3 failover_drill.py --report "$@"
