# Sourced by check-deploy.sh and check-dashboard.sh: makes sure node and npm
# are installed (Debian's, as root) and that node_modules/ holds exactly the
# packages package-lock.json pins, running `npm ci` only when the lock file
# changed since the last install. The two tests may run at once (ctest -j),
# so the install is serialized with flock.
#   source npm-deps.sh DIR    (DIR holds package.json and package-lock.json)
ef_npm_deps() {
  local dir=$1
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "npm-deps: installing Debian's nodejs and npm" >&2
    export DEBIAN_FRONTEND=noninteractive
    (flock 9 && { command -v npm >/dev/null || {
        apt-get update -qq &&
        apt-get install -y -qq --no-install-recommends nodejs npm; }; }) \
      9>"/tmp/ef-npm-deps-apt.lock"
  fi
  local lock_sum stamp
  lock_sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  stamp="$dir/node_modules/.ef-lock.sha256"
  (
    flock 9
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$lock_sum" ]]; then
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
      echo "$lock_sum" >"$stamp"
    fi
  ) 9>"$dir/.npm-deps.lock"
}
