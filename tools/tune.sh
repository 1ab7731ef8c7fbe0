#!/usr/bin/env bash
# One tuning sweep, every setting run the same way: lwcl_vs_kd over 3 seeds with the test split scored,
# on the deep teacher of <family> with the common <flags>, under <budget> seconds per method (family
# minilm: minilm_compress on the pretrained all-MiniLM-L6-v2, its pools of 1000 sentences). Each
# setting is NAME="its own flags" (e.g. kd0.2="--only lwcl --final-kd-share 0.2"), run in <out>/NAME/
# with its flags in <out>/NAME.flags; the settings are shared out over the processors, one run per
# processor at a time (OMP_NUM_THREADS=1, passive OpenMP waiting, taskset; TUNE_CPUS: which processors). A setting finished before with
# the same command is not run again, and inside a setting lwcl_vs_kd reads back every seed it finished
# before (the comparison harness's resume): stopping the sweep at any moment (which ends the queues and
# their programs, tools/bg_jobs.sh) and starting it again loses at most the seeds in progress.
# LWCL_VS_KD (MINILM_COMPRESS) names another build of the program (one that a rebuild of build/host leaves
# alone). Then tools/tune_table.py picks each method's setting on the validation sample and reports the
# test split.
#   tools/tune.sh <family> "<flags>" <budget seconds> <out> NAME="<flags>"...
set -euo pipefail
cd "$(dirname "$0")/.."
family=$1 flags=$2 budget=$3 out=$4
shift 4
mkdir -p "$out"
# The processors the queues run on: TUNE_CPUS (e.g. "1" or "0 1"), every one by default.
read -r -a cpu_list <<< "${TUNE_CPUS:-$(seq -s ' ' 0 $(($(nproc) - 1)))}"
cpus=${#cpu_list[@]}
# shellcheck source=bg_jobs.sh
source tools/bg_jobs.sh
run_queue() {  # cpu, then the settings this processor runs one after the other
  set +m
  local cpu=$1 setting name extra dir command
  shift
  for setting in "$@"; do
    name=${setting%%=*} extra=${setting#*=}
    dir="$out/$name"
    if [ "$family" = minilm ]; then
      command="${MINILM_COMPRESS:-build/host/experiments/minilm_compress} --pool 1000 --budget $budget $flags $extra --seeds 3 --test-split --out $dir"
    else
      command="${LWCL_VS_KD:-build/host/experiments/lwcl_vs_kd} --teacher runs/teacher_deep_$family --budget $budget $flags $extra --seeds 3 --test-split --out $dir"
    fi
    # Finished: the seeds' summary is there (lwcl_vs_kd's names its seeds, minilm_compress's holds each
    # figure's per-seed values) and was made by the same command.
    if [ -f "$dir/report.json" ] && grep -q '"seeds"\|"values"' "$dir/report.json" &&
       [ "$(cat "$dir.command" 2>/dev/null)" = "$command" ]; then
      continue
    fi
    echo "$extra" > "$dir.flags"
    echo "$command" > "$dir.command"
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive taskset -c "$cpu" $command >> "$dir.log" 2>&1 ||
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
  if [ ${#mine[@]} -gt 0 ]; then in_background run_queue "${cpu_list[$c]}" "${mine[@]}"; pids+=("$bg"); fi
done
for p in "${pids[@]}"; do wait_for "$p" || true; done
python3 tools/tune_table.py "$out"/*/
