# Sourced by the scripts that start background work (paper_repro/run_all.sh, tools/tune.sh): every
# background job gets its own process group (job control on), its standard input closed, and is ended
# with the script. Whenever the script exits (done, failed, Ctrl-C, kill, hangup), the trap sends
# SIGTERM to the process group of each job it started (by the ids it recorded, nothing else), then
# SIGKILL to what is left after 5 s. A queue function run in the background calls `set +m` first, so
# that the programs it runs stay in its group and end with it.
#   source tools/bg_jobs.sh; in_background CMD...; wait_for "$bg"
set -m
bg_pids=()
bg_jobs_cleanup() {
  local rc=$? p alive i
  trap - EXIT INT TERM HUP
  if [ ${#bg_pids[@]} -gt 0 ]; then
    for p in "${bg_pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
    for i in $(seq 50); do
      alive=0
      for p in "${bg_pids[@]}"; do kill -0 -- "-$p" 2>/dev/null && alive=1; done
      [ $alive = 1 ] || break
      sleep 0.1
    done
    for p in "${bg_pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; done
    [ "$rc" = 0 ] || echo "$(basename "$0"): stopped (exit $rc); every process it started has ended" >&2
  fi
  exit "$rc"
}
trap bg_jobs_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
# in_background <command...>: runs it as a job of its own, stdin closed; its process id in $bg.
in_background() {
  "$@" < /dev/null &
  bg=$!
  bg_pids+=("$bg")
}
# wait_for <pid>: the job's exit code (a signal interrupts the wait and runs the trap at once, where a
# program run in the foreground would delay the trap until it ended).
wait_for() {
  local rc=0
  wait "$1" || rc=$?
  return $rc
}
