#!/usr/bin/env bash
# Runs the teacher-training-step benchmark (whole GPT-2 LM: forward, backward, clipping, AdamW) for
# lwcl and PyTorch side by side, in one environment, alternating the two programs for several rounds
# (machines here are shared and noisy), PyTorch at every thread count each round, and prints tokens/s
# for each and last the ratio of lwcl's median step time to PyTorch's fastest setting's, naming that
# setting (bench/peer/side_by_side.sh).
#   bench/peer/run_train_step.sh [--rounds R] [program options, e.g. --steps 20 --batch 16 --seq 128]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3
if [ "${1:-}" = "--rounds" ]; then rounds=$2; shift 2; fi
source bench/peer/side_by_side.sh
side_by_side bench_train_step bench/peer/train_step.py "$rounds" "$@"
# Tokens per step from the options (the programs' defaults otherwise), for tokens/s of the medians.
batch=16 seq=128
while [ $# -gt 0 ]; do
  case "$1" in
    --batch) batch=$2; shift ;;
    --seq) seq=$2; shift ;;
  esac
  shift
done
peer_summary train-step "$((batch * seq))"
