#!/usr/bin/env bash
# The host GEMM provider's effect on whole steps: each step timed with the provider forced through LWCL_GEMM
# (host<> is gemm::chosen, which obeys it), then with the run-time choice (auto),
# one after the other in one run on one machine: the tiny and the deep gpt2 teacher-training steps
# (bench_train_step) and the segment step (bench_segment_step, 2 GPT-2-small blocks), 2 threads.
#   bash bench/results/gemm_choice/steps.sh [build dir]      (build/host)
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${1:-build/host}
source bench/peer/side_by_side.sh  # machine_line
echo "# $(date -u +%FT%TZ), revision $(git rev-parse --short HEAD), OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
machine_line | sed 's/^/# /'
for p in openblas onednn blis auto; do
  echo "## LWCL_GEMM=$p"
  LWCL_GEMM=$p "$b/bench/peer/bench_train_step" --steps 10 --warmup 2 2>&1 | sed 's/^/tiny: /'
  LWCL_GEMM=$p "$b/bench/peer/bench_train_step" --width 192 --layers 8 --heads 6 --ffn 768 --vocab 1024 --batch 16 \
    --seq 128 --steps 5 --warmup 1 2>&1 | sed 's/^/deep: /'
  LWCL_GEMM=$p "$b/bench/peer/bench_segment_step" --steps 3 --warmup 1 2>&1 | sed 's/^/segment: /'
done
