# Stage runner for .ci/run (sourced): `stage NAME COMMAND...` runs one CI
# stage and records its wall time and result; when the script exits (after
# the last stage, a failed stage or a signal) a table of every stage is
# printed, so a slow or failing stage is visible at the end of the log
# (docs/ci.md has the budget). The first failing stage ends the run with its status.
#   source .ci/stages.sh
#   stage build bash scripts/test.sh
ci_stage_names=()
ci_stage_seconds=()
ci_stage_status=()
ci_stage_start=$(date +%s)

ci_print_stage_table() {
  local rc=$? i total=$(($(date +%s) - ci_stage_start))
  # A stage cut short (signal, set -e in this script) has no row yet.
  if ((${#ci_stage_names[@]} > ${#ci_stage_status[@]})); then
    ci_stage_seconds+=($(($(date +%s) - ci_stage_t0)))
    ci_stage_status+=("interrupted (exit $rc)")
  fi
  echo
  echo "CI stages:"
  printf '  %-28s %8s  %s\n' stage seconds status
  for i in "${!ci_stage_names[@]}"; do
    printf '  %-28s %8d  %s\n' "${ci_stage_names[$i]}" \
      "${ci_stage_seconds[$i]}" "${ci_stage_status[$i]}"
  done
  printf '  %-28s %8d  %s\n' total "$total" \
    "$( ((rc == 0)) && echo passed || echo "FAILED (exit $rc)")"
}
trap ci_print_stage_table EXIT
# A CI timeout or Ctrl-C still gets the table: exit, which runs the trap.
trap 'exit 130' INT
trap 'exit 143' TERM

# stage NAME COMMAND...: runs COMMAND; a failure ends the run (exit status
# of the command), after the table.
stage() {
  local name=$1 rc=0
  shift
  ci_stage_names+=("$name")
  ci_stage_t0=$(date +%s)
  echo "=== stage $name: $*"
  "$@" || rc=$?
  ci_stage_seconds+=($(($(date +%s) - ci_stage_t0)))
  if ((rc != 0)); then
    ci_stage_status+=("FAILED (exit $rc)")
    exit "$rc"
  fi
  ci_stage_status+=(passed)
}
