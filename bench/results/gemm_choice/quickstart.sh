#!/usr/bin/env bash
# The quickstart's wall time with the host GEMM provider of before (LWCL_GEMM=openblas: host<> was
# host<gemm::openblas>) and of now (auto: gemm::chosen's run-time choice), one after the other on one
# machine, each training its own tiny teacher (so the teacher's training is in the time) at the default
# budget, at the machine's thread count. The data (data/prepared, data/mc) must be there already
# (bash tools/quickstart.sh once); what each run printed goes to <out>/<provider>.log.
#   bash bench/results/gemm_choice/quickstart.sh [build dir] [out]      (build/host, runs/gemm_quickstart)
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${1:-build/host}
out=${2:-runs/gemm_quickstart}
source bench/peer/side_by_side.sh  # machine_line
[ -f data/prepared/validation.bin ] || { echo "quickstart.sh: data/prepared is missing (run bash tools/quickstart.sh once)" >&2; exit 2; }
mkdir -p "$out"
echo "# $(date -u +%FT%TZ), revision $(git rev-parse --short HEAD), OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
machine_line | sed 's/^/# /'
# What a run printed that the comparison needs: the provider, the teacher's last training step (its
# seconds), and the table of perplexity, memory, wall seconds and tokens.
summary() {
  grep -E "^lwcl gemm:|^step +600 |^method +val ppl|^(teacher|pruned|lwcl|layerwise_no_curriculum|e2e_kd) +[0-9]" "$1" |
    sed 's/^/  /' || true
}
for p in openblas auto; do
  rm -rf "${out:?}/$p"
  start=$(date +%s.%N)
  LWCL_GEMM=$p "$b/experiments/quickstart" --teacher "$out/$p/teacher" --out "$out/$p/run" > "$out/$p.log" 2>&1
  end=$(date +%s.%N)
  echo "## LWCL_GEMM=$p: wall $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s"
  summary "$out/$p.log"
done
