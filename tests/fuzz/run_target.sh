#!/usr/bin/env bash
# Runs one libFuzzer target for a time: new inputs go to <work>/corpus (the committed seeds stay as
# they are), a crashing input to <work>/crash-*; prints the run's last status line (executions,
# coverage) and fails when the target found anything.
#   run_target.sh <fuzz binary> <seed dir> <work dir> <seconds>
set -euo pipefail
bin=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work/corpus" "$work/tmp"
log="$work/fuzz.log"
# The target's scratch files go under the work dir (libFuzzer may end without running exit handlers).
if ! TMPDIR="$work/tmp" "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
     -artifact_prefix="$work/" "$work/corpus" "$seeds" > "$log" 2>&1; then
  tail -40 "$log"
  echo "fuzz: $(basename "$bin") failed; the input is under $work/ (crash-*, timeout-*, oom-*)" >&2
  exit 1
fi
grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | tail -1 || true
grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log"
