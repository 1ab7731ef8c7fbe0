#!/usr/bin/env bash
# Runs the segment-step benchmark for lwcl and PyTorch side by side, in one environment, alternating
# the two programs for several rounds (this machine is shared and noisy), and prints the ratio of the
# medians last. PyTorch runs with torch.set_num_threads(1) while its BLAS uses every core, its fastest
# setting on this 2-core machine; lwcl runs with its defaults (OpenMP over all cores).
#   bench/peer/run_segment_step.sh [--rounds R] [program options, e.g. --steps 5 --batch 4 --seq 256]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3
if [ "${1:-}" = "--rounds" ]; then rounds=$2; shift 2; fi
tools/install_deps.sh --python
cmake --preset host >/dev/null
cmake --build --preset host --target bench_segment_step -j"$(nproc)" >/dev/null
lwcl_times=() torch_times=()
for r in $(seq "$rounds"); do
  out=$(build/host/bench/peer/bench_segment_step "$@")
  [ "$r" = 1 ] && echo "$out"
  lwcl_times+=("$(echo "$out" | sed -n 's/^lwcl step seconds.*: //p')")
  out=$(/usr/bin/python3 bench/peer/segment_step.py --threads 1 "$@")
  [ "$r" = 1 ] && echo "$out"
  torch_times+=("$(echo "$out" | sed -n 's/^pytorch step seconds.*: //p')")
  echo "round $r: lwcl ${lwcl_times[-1]} s, pytorch ${torch_times[-1]} s"
done
python3 - "${lwcl_times[*]}" "${torch_times[*]}" <<'PY'
import statistics, sys
l = [float(x) for x in sys.argv[1].split()]
p = [float(x) for x in sys.argv[2].split()]
print("lwcl median step seconds: %.4f" % statistics.median(l))
print("pytorch median step seconds: %.4f" % statistics.median(p))
print("lwcl/pytorch step-time ratio: %.3f" % (statistics.median(l) / statistics.median(p)))
PY
