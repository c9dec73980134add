#!/usr/bin/env bash
# Quick start: installs dependencies, builds, and runs the server on
# localhost:50051 with the built-in defaults. Extra arguments go to the server
# (e.g. --listen=0.0.0.0:50051); see --help.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
exec build/src/server/exposure-filter-server "$@"
