#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (H100/H200 class): builds the CUDA targets for sm_90,
# runs the `cuda` tests (backend::cuda against backend::host), the GPU micro-benchmarks and a short
# training run of train_teacher_cuda on the project's own docs, and writes one summary file. Every step
# has its own time limit and the whole run is meant to end within about 8 minutes; a step that fails is
# recorded and the next one still runs.
#   tools/device_check.sh [output folder]      (default: $OUT, else device_out)
# Files written: summary.txt (what ran, pass/fail, key figures), test_cuda.txt, bench_cuda.json,
# bench_cuda.txt, bench_cuda_blaslt.json, bench_cuda_blaslt.txt, bench_cuda_segment.json,
# bench_cuda_segment.txt, cuda_latency_table.txt and cuda_latency/, train_teacher_cuda.txt, build.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-device_out}}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
jobs=$(nproc)

say "lwcl device check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no GPU visible (nvidia-smi missing or failing): nothing to check here"
  exit 2
fi
nvidia-smi -L | tee -a "$summary"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee -a "$summary"
missing=()
for t in cmake /usr/local/cuda/bin/nvcc; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
for h in /usr/include/doctest/doctest.h /usr/include/benchmark/benchmark.h /usr/include/nlohmann/json.hpp \
         /usr/include/boost/hana.hpp /usr/include/CLI/CLI.hpp; do
  [ -e "$h" ] || missing+=("$h")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "missing build dependencies: ${missing[*]} (tools/install_deps.sh installs them where Debian packages are reachable)"
  exit 3
fi

step() {  # name, time limit in seconds, command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  if timeout "$limit" "$@"; then
    say "PASS $name ($((SECONDS - t0)) s)"
  else
    say "FAIL $name (exit $?, $((SECONDS - t0)) s; limit $limit s)"
  fi
}

build=build/device
step configure 120 bash -c "cmake -S . -B $build -DLWCL_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_HOST_COMPILER=g++ -DCMAKE_CUDA_ARCHITECTURES=90 \
  > $out/build.txt 2>&1"
step build 330 bash -c "cmake --build $build --target test_cuda bench_cuda bench_cuda_segment bench_cuda_blaslt cuda_latency_table train_teacher_cuda prepare_data -j$jobs \
  >> $out/build.txt 2>&1"

# The cuda tests: every op and block family, forward and backward, against the host backend.
step test_cuda 120 bash -c "$build/tests/cuda/test_cuda > $out/test_cuda.txt 2>&1"
grep -E "test cases:|assertions:" "$out/test_cuda.txt" | tee -a "$summary"

# GPU micro-benchmarks (CUDA-event timing), JSON for the figures and text for reading.
step bench_cuda 150 bash -c "$build/bench/bench_cuda --benchmark_min_time=0.05 --benchmark_out=$out/bench_cuda.json \
  --benchmark_out_format=json > $out/bench_cuda.txt 2>&1"
grep -E "TFLOP|GB/s" "$out/bench_cuda.txt" | head -20 | tee -a "$summary"

# cuBLASLt GEMMs with the bias + GELU epilogue against a GEMM followed by a separate bias + GELU kernel.
step bench_cuda_blaslt 90 bash -c "$build/bench/bench_cuda_blaslt --benchmark_min_time=0.05 \
  --benchmark_out=$out/bench_cuda_blaslt.json --benchmark_out_format=json > $out/bench_cuda_blaslt.txt 2>&1"
grep -E "TFLOP" "$out/bench_cuda_blaslt.txt" | head -12 | tee -a "$summary"

# The trainer's figures: segment-step MFU (LLaMA-7B-shaped 2-layer segment, bf16 mixed precision and
# f32) against the bf16 peak and
# against cuBLAS on the same GEMMs, the cost of copying the next step's features on the copy stream,
# the pinned copy rate against a plain cudaMemcpyAsync, and layer-wise vs end-to-end KD peak memory.
step bench_cuda_segment 200 bash -c "$build/bench/bench_cuda_segment --benchmark_out=$out/bench_cuda_segment.json \
  --benchmark_out_format=json > $out/bench_cuda_segment.txt 2>&1"
grep -E "cuda_segment_step|cuda_pinned_upload|cuda_peak_memory" "$out/bench_cuda_segment.txt" | tee -a "$summary"

# The decoding latency table on the GPU: f32 (cuBLAS) against int8/int4 g128 (the dequantising GEMM) on
# LLaMA-shaped linears, one token, hot and streamed.
step cuda_latency_table 90 bash -c "$build/bench/cuda_latency_table --out $out/cuda_latency > $out/cuda_latency_table.txt 2>&1"
grep -E "^\| " "$out/cuda_latency_table.txt" | tee -a "$summary"

# A short teacher training on the GPU: the loss must fall.
work=$(mktemp -d)
source tests/support/docs_corpus.sh
make_docs_data "$build" "$PWD" "$work"
step train_teacher_cuda 90 bash -c "$build/experiments/train_teacher_cuda --data $work/data --out $work/run --device cuda \
  --width 128 --layers 4 --heads 4 --ffn 512 --seq 128 --batch 16 --steps 60 --eval-every 20 --quiet \
  > $out/train_teacher_cuda.txt 2>&1"
grep -E "val_loss|tokens/s|trained" "$out/train_teacher_cuda.txt" | tail -5 | tee -a "$summary"
rm -rf "$work"
say "done in $SECONDS s; files in $out/"
