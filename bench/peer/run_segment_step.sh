#!/usr/bin/env bash
# Runs the segment-step benchmark for lwcl and PyTorch side by side, in one environment, alternating
# the two programs for several rounds (machines here are shared and noisy), PyTorch at every thread
# count each round, and prints last the ratio of lwcl's median to the median of PyTorch's fastest
# setting, naming that setting (bench/peer/side_by_side.sh).
#   bench/peer/run_segment_step.sh [--rounds R] [program options, e.g. --steps 5 --batch 4 --seq 256]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3
if [ "${1:-}" = "--rounds" ]; then rounds=$2; shift 2; fi
source bench/peer/side_by_side.sh
side_by_side bench_segment_step bench/peer/segment_step.py "$rounds" "$@"
peer_summary step-time
