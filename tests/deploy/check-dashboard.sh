#!/usr/bin/env bash
# The Grafana dashboard (deploy/dashboards/exposure-filter.json) against a
# live server: dashboard_live_test.py starts the real binary and a mock
# Kafka cluster, makes RPCs, scrapes /metrics, and check-dashboard.mjs
# checks that every series and label the dashboard queries exists there and
# that Grafana can load it (then proves it rejects typical mistakes).
# Registered in ctest as deploy_dashboard.
#   tests/deploy/check-dashboard.sh SERVER_BINARY KAFKA_TOOLS_DIR [output-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [[ $# -lt 2 ]]; then
  echo "usage: $0 SERVER_BINARY KAFKA_TOOLS_DIR [output-dir]" >&2
  exit 2
fi
out=${3:-$(mktemp -d)}
mkdir -p "$out"

# node and the PromQL parser, pinned by package-lock.json.
source "$here/npm-deps.sh"
ef_npm_deps "$here"

# Debian's python3-grpcio imports only under the system interpreter.
EF_E2E_SERVER=$1 EF_KAFKA_TOOLS=$2 EF_PROTOC=${EF_PROTOC:-/usr/bin/protoc} \
  PYTHONDONTWRITEBYTECODE=1 GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=100 \
  /usr/bin/python3 "$here/dashboard_live_test.py" \
  "$repo/deploy/dashboards/exposure-filter.json" "$out"
