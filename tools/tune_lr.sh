#!/usr/bin/env bash
# The learning rate of every method, tuned the same way on one harder setting: lwcl_vs_kd (LWCL,
# layer-wise without curriculum, end-to-end KD) over 3 seeds at each peak learning rate given, one run
# per processor at a time (OMP_NUM_THREADS=1, taskset), on the deep teacher of <family> with <flags>.
# Then tools/tune_table.py picks each method's rate on the validation sample and reports the test split.
#   tools/tune_lr.sh <family> "<flags>" <budget seconds> <out> <lr>...
set -euo pipefail
cd "$(dirname "$0")/.."
family=$1 flags=$2 budget=$3 out=$4
shift 4
mkdir -p "$out"
cpu=0
pids=()
for lr in "$@"; do
  dir="$out/lr$lr"
  if [ -f "$dir/report.json" ] && grep -q '"seeds"' "$dir/report.json"; then continue; fi
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 taskset -c $cpu build/host/experiments/lwcl_vs_kd --teacher "runs/teacher_deep_$family" \
    --budget "$budget" $flags --lr "$lr" --seeds 3 --test-split --out "$dir" > "$dir.log" 2>&1 &
  pids+=($!)
  cpu=$(( (cpu + 1) % $(nproc) ))
  if [ ${#pids[@]} -ge "$(nproc)" ]; then wait "${pids[@]}"; pids=(); fi
done
[ ${#pids[@]} -eq 0 ] || wait "${pids[@]}"
python3 tools/tune_table.py "$out"/lr*/
