#!/usr/bin/env bash
# The README's test command (and CI's): installs dependencies (the pretrained all-MiniLM-L6-v2 that
# tests/model/test_bert.cpp checks included), builds everything with g++ and runs the
# default test suite (labels slow and cuda excluded), does the same with clang++, then
# compiles every CUDA translation unit with nvcc for sm_80 and sm_90 (compile and link only; the cuda
# tests run where a GPU is present: ctest --preset cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
tools/install_deps.sh --minilm

echo "== g++: build and test"
cmake --preset host >/dev/null
cmake --build --preset host -j"$jobs"
ctest --preset host -j"$jobs"

echo "== clang++: build and test"
cmake --preset clang >/dev/null
cmake --build --preset clang -j"$jobs"
ctest --preset clang -j"$jobs"

nvcc=/usr/local/cuda/bin/nvcc
if [ -x "$nvcc" ]; then
  echo "== nvcc: compile every CUDA translation unit (sm_80, sm_90)"
  cmake --preset cuda >/dev/null
  cmake --build --preset cuda --target lwcl_cuda_units -j"$jobs"
else
  echo "== nvcc not found at $nvcc: CUDA translation units not compiled" >&2
  [ -z "${CI:-}" ] || exit 1
fi
