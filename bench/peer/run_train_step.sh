#!/usr/bin/env bash
# Runs the teacher-training-step benchmark (whole GPT-2 LM: forward, backward, clipping, AdamW) for
# lwcl and PyTorch side by side, in one environment, alternating the two programs for several rounds
# (this machine is shared and noisy), and prints tokens/s for each and the ratio of the median step
# times last. PyTorch runs with torch.set_num_threads(1) while its BLAS uses every core, its fastest
# setting on this 2-core machine; lwcl runs with its defaults (OpenMP over all cores).
#   bench/peer/run_train_step.sh [--rounds R] [program options, e.g. --steps 20 --batch 16 --seq 128]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3
if [ "${1:-}" = "--rounds" ]; then rounds=$2; shift 2; fi
tools/install_deps.sh --python
cmake --preset host >/dev/null
cmake --build --preset host --target bench_train_step -j"$(nproc)" >/dev/null
lwcl_times=() torch_times=()
for r in $(seq "$rounds"); do
  out=$(build/host/bench/peer/bench_train_step "$@")
  [ "$r" = 1 ] && echo "$out"
  lwcl_times+=("$(echo "$out" | sed -n 's/^lwcl step seconds.*: //p')")
  out=$(/usr/bin/python3 bench/peer/train_step.py --threads 1 "$@")
  [ "$r" = 1 ] && echo "$out"
  torch_times+=("$(echo "$out" | sed -n 's/^pytorch step seconds.*: //p')")
  echo "round $r: lwcl ${lwcl_times[-1]} s, pytorch ${torch_times[-1]} s"
done
# Tokens per step from the options (the programs' defaults otherwise), for tokens/s of the medians.
batch=16 seq=128
while [ $# -gt 0 ]; do
  case "$1" in
    --batch) batch=$2; shift ;;
    --seq) seq=$2; shift ;;
  esac
  shift
done
python3 - "${lwcl_times[*]}" "${torch_times[*]}" "$((batch * seq))" <<'PY'
import statistics, sys
l = statistics.median(float(x) for x in sys.argv[1].split())
p = statistics.median(float(x) for x in sys.argv[2].split())
tokens = int(sys.argv[3])
print("lwcl median step seconds: %.5f (%.0f tokens/s)" % (l, tokens / l))
print("pytorch median step seconds: %.5f (%.0f tokens/s)" % (p, tokens / p))
print("lwcl/pytorch train-step ratio: %.3f" % (l / p))
PY
