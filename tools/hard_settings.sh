#!/usr/bin/env bash
# The harder settings of the evidence page: for the deep gpt2 and llama teachers (preset `deep`, trained
# once and cached under runs/), a Wanda-sp student with 50% and 70% of every layer's heads (KV groups)
# and FFN channels removed, and one with its depth halved by block influence, each recovered by LWCL,
# layer-wise training without curriculum and end-to-end KD under one wall-clock budget over 3 seeds
# (experiments/lwcl_vs_kd: time to quality read off the held-out curves). Runs single-threaded on the
# first processor (OMP_NUM_THREADS=1, taskset -c 0) so that both sides meet the same machine; then
# writes the Markdown table (tools/hard_settings_table.py) to stdout. HARD_FLAGS adds flags to every run
# (the tuned settings, e.g. "--lwcl-lr 0.004 --e2e-hidden-mse 1"), HARD_SETTINGS keeps only the settings
# it names (e.g. "ratio0.5 ratio0.7"), HARD_CPU picks another processor. One program at a time, as a job
# that ends with the script (Ctrl-C or a kill; tools/bg_jobs.sh); started again, a setting finished with the same
# command is not run again and lwcl_vs_kd reads back the seeds it finished (the comparison harness's resume).
#   tools/hard_settings.sh [budget seconds] [out] [families...]
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-60}
out=${2:-runs/hard_settings}
shift 2 || true
families=("$@")
[ ${#families[@]} -gt 0 ] || families=(gpt2 llama)
x=build/host/experiments
# shellcheck source=bg_jobs.sh
source tools/bg_jobs.sh
for f in "${families[@]}"; do
  [ -d "runs/teacher_deep_$f/model" ] && continue
  in_background $x/train_teacher --data data/prepared --preset deep --family "$f" --out "runs/teacher_deep_$f"
  wait_for "$bg" || { echo "hard_settings: the deep $f teacher failed" >&2; exit 1; }
done
mkdir -p "$out"
for f in "${families[@]}"; do
  for s in "ratio0.5|--ratio 0.5" "ratio0.7|--ratio 0.7" "depth0.5|--ratio 0 --depth 0.5"; do
    IFS='|' read -r name flags <<<"$s"
    [ -z "${HARD_SETTINGS:-}" ] || [[ " $HARD_SETTINGS " == *" $name "* ]] || continue
    dir="$out/${f}_$name"
    command="${LWCL_VS_KD:-$x/lwcl_vs_kd} --teacher runs/teacher_deep_$f --budget $budget $flags ${HARD_FLAGS:-} --seeds 3 --test-split --out $dir"
    if [ -f "$dir/report.json" ] && grep -q '"seeds"' "$dir/report.json" && [ "$(cat "$dir.command" 2>/dev/null)" = "$command" ]; then
      echo "hard_settings: $dir done before with the same command" >&2
      continue
    fi
    echo "hard_settings: $f $name ($(date -u +%H:%M:%S))" >&2
    echo "$command" > "$dir.command"
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive in_background taskset -c "${HARD_CPU:-0}" $command >>"$dir.log" 2>&1
    wait_for "$bg" || { echo "hard_settings: $f $name failed, see $dir.log" >&2; exit 1; }
  done
done
python3 tools/hard_settings_table.py "$out"
