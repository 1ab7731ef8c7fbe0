#!/usr/bin/env bash
# The README's test command (and CI's): installs dependencies (the pretrained all-MiniLM-L6-v2 that
# tests/model/test_bert.cpp checks included), builds the programs, benchmarks and interop writer with g++
# and runs every test but the unit tests (labels slow, cuda and unit excluded: the programs end to end,
# the interop, consumer and compile-fail checks), builds the unit tests and the fuzz targets with
# clang++ under AddressSanitizer and UndefinedBehaviorSanitizer and runs them (each fuzz target 20 s), runs the
# cache, core and search tests (the prefetcher's, the memory tracker's and GeLaCo's threads) under ThreadSanitizer, then
# compiles every CUDA translation unit with nvcc for sm_90 (compile and link only; the cuda tests run
# where a GPU is present: ctest --preset cuda; --preset cuda-all adds sm_80). Each stage prints its
# wall time; docs/building.md has the measured stages and what keeps them short.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
stage_start=$SECONDS
stage() {  # prints how long the previous stage took, then names the next
  echo "== ($((SECONDS - stage_start)) s) $1"
  stage_start=$SECONDS
}

stage "install dependencies"
tools/install_deps.sh --minilm --hf  # --hf: transformers for the interop tests (hf_module, generate_program)

stage "g++: configure and build the programs, benchmarks and interop writer"
# The unit tests are built and run once, in the sanitizer stage below (ctest --preset host runs them
# with g++ after a full build).
cmake --preset host >/dev/null
cmake --build --preset host -j"$jobs" --target lwcl_programs
stage "g++: every test but the unit tests (the programs end to end, interop, consumers, compile-fail checks)"
ctest --preset host-programs -j"$jobs"

stage "clang++ with ASan + UBSan: configure and build the unit tests and fuzz targets"
# The programs (experiments/, paper_repro/, bench/) are left to the g++ stage, which runs them end to end.
# Built at -O0 (CMakePresets.json): clang++ takes about a third of -O1's time on these units under ASan
# (32 s against 95 s for tests/distill/test_pipeline.cpp); the tests run slower (distill 43 s against 15 s).
cmake --preset sanitize >/dev/null
cmake --build --preset sanitize -j"$jobs"
stage "clang++ with ASan + UBSan: unit tests, then each fuzz target for 20 s"
ctest --preset sanitize -j"$jobs"

stage "clang++ with TSan: configure, build and run the tests of lwcl's own threads (cache, core, search)"
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j"$jobs"
ctest --preset tsan

nvcc=/usr/local/cuda/bin/nvcc
if [ -x "$nvcc" ]; then
  stage "nvcc: compile every CUDA translation unit (sm_90)"
  cmake --preset cuda >/dev/null
  cmake --build --preset cuda --target lwcl_cuda_units -j"$jobs"
  stage "done"
else
  echo "== nvcc not found at $nvcc: CUDA translation units not compiled" >&2
  [ -z "${CI:-}" ] || exit 1
fi
