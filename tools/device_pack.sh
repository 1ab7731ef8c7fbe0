#!/usr/bin/env bash
# Packs the CUDA programs built here (cmake --preset cuda, sm_90) with the shared libraries they need
# beside glibc, libstdc++ and CUDA's own, into one archive for tools/device_check_packed.sh, so that a GPU
# machine runs the checks without building (its build would spend device time) and without Debian's
# -dev packages. Builds the targets first.
#   tools/device_pack.sh [archive]      (default .devrun/bin.tar.xz; keep .devrun/ out of git)
set -euo pipefail
cd "$(dirname "$0")/.."
archive=${1:-.devrun/bin.tar.xz}
targets=(tests/cuda/test_cuda bench/bench_cuda bench/cuda_latency_table bench/bench_cuda_blaslt bench/bench_cuda_segment
         experiments/train_teacher_cuda experiments/prepare_data)
cmake --preset cuda >/dev/null
cmake --build build/cuda -j"$(nproc)" --target $(for t in "${targets[@]}"; do basename "$t"; done)
stage=$(mktemp -d)
mkdir -p "$stage/lib"
for t in "${targets[@]}"; do
  cp "build/cuda/$t" "$stage/"
  strip --strip-debug "$stage/$(basename "$t")"
done
for l in $(ldd "$stage"/* 2>/dev/null | awk '/=>/ {print $3}' | sort -u); do
  case $(basename "$l") in
    libcublas*|libcudart*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++*|libgcc_s*|ld-linux*) ;;
    *) cp -L "$l" "$stage/lib/" ;;
  esac
done
pwd > "$stage/source_dir"  # test_cuda reads its fixtures from <source_dir>/tests/data
mkdir -p "$(dirname "$archive")"
tar -cJf "$archive" -C "$stage" .
rm -rf "$stage"
echo "device_pack: wrote $archive ($(du -h "$archive" | cut -f1)); on the GPU machine: bash tools/device_check_packed.sh $archive"
