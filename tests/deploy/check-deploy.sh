#!/usr/bin/env bash
# Renders deploy/ (and deploy/ with the deploy/mtls Component, through
# mtls-overlay/) with `kubectl kustomize` and validates every object against
# the Kubernetes API schema (validate.mjs), then proves the validator rejects
# typical mistakes (--self-test); checks the alert rules' PromQL and runs
# their unit tests (alerts_test.yaml) with promtool, taken from Debian's
# prometheus package. Registered in ctest as deploy_manifests.
#   tests/deploy/check-deploy.sh [output-dir]
# Exits 77 (ctest: skipped) only when kubectl is not installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out"

if ! command -v kubectl >/dev/null; then
  echo "SKIP: kubectl is not installed, cannot render deploy/ (kubectl 1.32 with" \
       "kustomize is expected on these machines; do not install Debian's" \
       "kubernetes-client, it conflicts)" >&2
  exit 77
fi
# node, npm and the validator's npm packages, pinned by package-lock.json
# (npm-deps.sh; reinstalled only when the lock file changes).
source "$here/npm-deps.sh"
ef_npm_deps "$here"

kubectl kustomize "$repo/deploy" >"$out/deploy-rendered.yaml"
echo "rendered $(grep -c '^kind:' "$out/deploy-rendered.yaml") objects into $out/deploy-rendered.yaml"
node "$here/validate.mjs" --self-test "$out/deploy-rendered.yaml"
# The base with the mutual-TLS/authorization Component, as an
# operator's overlay would render it.
kubectl kustomize "$here/mtls-overlay" >"$out/deploy-mtls-rendered.yaml"
echo "rendered $(grep -c '^kind:' "$out/deploy-mtls-rendered.yaml") objects into $out/deploy-mtls-rendered.yaml"
node "$here/validate.mjs" --self-test "$out/deploy-mtls-rendered.yaml"

# Alert rules: promtool from Debian's prometheus package, unpacked (not
# installed: installing would also set up and start a Prometheus server).
promtool=$(command -v promtool || true)
if [[ -z "$promtool" ]]; then
  cache="$here/.cache/prometheus"
  promtool="$cache/usr/bin/promtool"
  if [[ ! -x "$promtool" ]]; then
    mkdir -p "$cache"
    download() { (cd "$cache" && apt-get download prometheus 2>/dev/null); }
    download || { apt-get update -qq && download; } \
      || { echo "check-deploy: cannot download Debian's prometheus package" >&2; exit 1; }
    dpkg-deb -x "$cache"/prometheus_*.deb "$cache"
    rm -f "$cache"/prometheus_*.deb
  fi
fi
node "$here/extract-rules.mjs" "$out/deploy-rendered.yaml" "$out/exposure-filter.rules.yaml"
cp "$here/alerts_test.yaml" "$out/alerts_test.yaml"
"$promtool" check rules "$out/exposure-filter.rules.yaml"
(cd "$out" && "$promtool" test rules alerts_test.yaml)
