#!/usr/bin/env bash
# tools/device_check.sh from the archive tools/device_pack.sh wrote: no build on the GPU machine. Runs the
# cuda tests, the dequantising-GEMM and other GPU micro-benchmarks, the GPU latency table, the
# segment-step benchmark and a short teacher training, each under its own time limit (about 6 minutes in
# all), and writes summary.txt and each program's output into the output folder.
#   tools/device_check_packed.sh [archive] [output folder]   (defaults .devrun/bin.tar.xz, $OUT or device_out)
set -uo pipefail
cd "$(dirname "$0")/.."
archive=${1:-.devrun/bin.tar.xz}
out=${2:-${OUT:-device_out}}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
say "lwcl device check (packed), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
d=$(mktemp -d)
work=
trap 'rm -rf "$d" $work' EXIT
tar -xJf "$archive" -C "$d" || { say "cannot unpack $archive"; exit 1; }
lib_dir() { dirname "$(find /usr/local /opt /usr/lib -name "$1" 2>/dev/null | head -1)"; }
export LD_LIBRARY_PATH=$d/lib:$(lib_dir 'libcublasLt.so.1*'):$(lib_dir 'libcudart.so.1*'):${LD_LIBRARY_PATH:-}
nvidia-smi -L | tee -a "$summary" || { say "no GPU visible"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee -a "$summary"
for b in "$d"/*; do [ -x "$b" ] && [ -f "$b" ] && ldd "$b" | grep "not found" | sed "s|^|$(basename "$b"): |" | tee -a "$summary"; done
# test_cuda reads its fixtures from the source folder it was built in.
src=$(cat "$d/source_dir")
if [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
step() {  # name, time limit in seconds, command...
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  if timeout "$limit" "$@"; then say "PASS $name ($((SECONDS - t0)) s)"; else say "FAIL $name (exit $?, $((SECONDS - t0)) s; limit $limit s)"; fi
}
step test_cuda 120 bash -c "$d/test_cuda > $out/test_cuda.txt 2>&1"
grep -E "test cases:|assertions:|ERROR" "$out/test_cuda.txt" | head -20 | tee -a "$summary"
step bench_dequant 60 bash -c "$d/bench_cuda --benchmark_filter=cuda_dequant_matmul --benchmark_min_time=0.03 > $out/bench_dequant.txt 2>&1"
grep -E "dequant" "$out/bench_dequant.txt" | tee -a "$summary"
step cuda_latency_table 60 bash -c "$d/cuda_latency_table --out $out/latency > $out/cuda_latency_table.txt 2>&1"
grep -E "^\| " "$out/cuda_latency_table.txt" | tee -a "$summary"
step bench_cuda 90 bash -c "$d/bench_cuda --benchmark_filter=-cuda_dequant_matmul --benchmark_min_time=0.03 \
  --benchmark_out=$out/bench_cuda.json --benchmark_out_format=json > $out/bench_cuda.txt 2>&1"
step bench_cuda_blaslt 40 bash -c "$d/bench_cuda_blaslt --benchmark_min_time=0.03 > $out/bench_cuda_blaslt.txt 2>&1"
step bench_cuda_segment 120 bash -c "$d/bench_cuda_segment > $out/bench_cuda_segment.txt 2>&1"
grep -E "cuda_segment_step|cuda_pinned_upload|cuda_peak_memory" "$out/bench_cuda_segment.txt" | tee -a "$summary"
work=$(mktemp -d)
source tests/support/docs_corpus.sh
mkdir -p "$work/b/experiments" && cp "$d/prepare_data" "$work/b/experiments/"
make_docs_data "$work/b" "$PWD" "$work"
step train_teacher_cuda 45 bash -c "$d/train_teacher_cuda --data $work/data --out $work/run --device cuda --width 128 --layers 4 \
  --heads 4 --ffn 512 --seq 128 --batch 16 --steps 60 --eval-every 20 --quiet > $out/train_teacher_cuda.txt 2>&1"
grep -E "val_loss|trained" "$out/train_teacher_cuda.txt" | tail -4 | tee -a "$summary"
say "done in $SECONDS s; files in $out/"
