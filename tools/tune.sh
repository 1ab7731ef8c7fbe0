#!/usr/bin/env bash
# One tuning sweep, every setting run the same way: lwcl_vs_kd over 3 seeds with the test split scored,
# on the deep teacher of <family> with the common <flags>, under <budget> seconds per method. Each
# setting is NAME="its own flags" (e.g. kd0.2="--only lwcl --final-kd-share 0.2"), run in <out>/NAME/
# with its flags in <out>/NAME.flags; the settings are shared out over the processors, one run per
# processor at a time (OMP_NUM_THREADS=1, taskset), and a setting already finished is not run again.
# LWCL_VS_KD names another build of the program (one that a rebuild of build/host leaves alone).
# Then tools/tune_table.py picks each method's setting on the validation sample and reports the test split.
#   tools/tune.sh <family> "<flags>" <budget seconds> <out> NAME="<flags>"...
set -euo pipefail
cd "$(dirname "$0")/.."
family=$1 flags=$2 budget=$3 out=$4
shift 4
mkdir -p "$out"
cpus=$(nproc)
run_queue() {  # cpu, then the settings this processor runs one after the other
  local cpu=$1 setting name extra dir
  shift
  for setting in "$@"; do
    name=${setting%%=*} extra=${setting#*=}
    dir="$out/$name"
    if [ -f "$dir/report.json" ] && grep -q '"seeds"' "$dir/report.json"; then continue; fi
    echo "$extra" > "$dir.flags"
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 taskset -c "$cpu" "${LWCL_VS_KD:-build/host/experiments/lwcl_vs_kd}" --teacher "runs/teacher_deep_$family" \
      --budget "$budget" $flags $extra --seeds 3 --test-split --out "$dir" > "$dir.log" 2>&1 ||
      echo "tune.sh: $name failed (see $dir.log)" >&2
  done
}
pids=()
for ((c = 0; c < cpus; ++c)); do
  mine=()
  i=0
  for setting in "$@"; do
    if (( i % cpus == c )); then mine+=("$setting"); fi
    i=$((i + 1))
  done
  if [ ${#mine[@]} -gt 0 ]; then run_queue "$c" "${mine[@]}" & pids+=($!); fi
done
[ ${#pids[@]} -eq 0 ] || wait "${pids[@]}"
python3 tools/tune_table.py "$out"/*/
