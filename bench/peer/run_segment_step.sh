#!/usr/bin/env bash
# Runs the segment-step benchmark for lwcl and PyTorch side by side, in one environment, alternating
# the two programs for several rounds (this machine is shared and noisy), and prints the ratio of the
# medians last (threads: see bench/peer/side_by_side.sh).
#   bench/peer/run_segment_step.sh [--rounds R] [program options, e.g. --steps 5 --batch 4 --seq 256]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3
if [ "${1:-}" = "--rounds" ]; then rounds=$2; shift 2; fi
source bench/peer/side_by_side.sh
side_by_side bench_segment_step bench/peer/segment_step.py "$rounds" "$@"
python3 - "${lwcl_times[*]}" "${torch_times[*]}" <<'PY'
import statistics, sys
l = [float(x) for x in sys.argv[1].split()]
p = [float(x) for x in sys.argv[2].split()]
print("lwcl median step seconds: %.4f" % statistics.median(l))
print("pytorch median step seconds: %.4f" % statistics.median(p))
print("lwcl/pytorch step-time ratio: %.3f" % (statistics.median(l) / statistics.median(p)))
PY
