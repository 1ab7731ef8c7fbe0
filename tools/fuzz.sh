#!/usr/bin/env bash
# Runs every fuzz target of tests/fuzz (or those named) for a while each, from its committed seeds, and
# prints per target the executions, the coverage libFuzzer reached (cov: edges, ft: features) and the
# corpus it grew; a crash stops with the input's path. Builds the sanitize preset first.
#   tools/fuzz.sh [seconds per target, default 600] [target ...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors hf_config tokenizers shards codecs)
cmake --preset sanitize >/dev/null
cmake --build --preset sanitize -j"$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}")
for t in "${targets[@]}"; do
  work=build/sanitize/fuzz_long/$t
  echo "== fuzz_$t for $seconds s"
  bash tests/fuzz/run_target.sh "build/sanitize/tests/fuzz/fuzz_$t" "tests/fuzz/seeds/$t" "$work" "$seconds"
  echo "   corpus: $(find "$work/corpus" -type f | wc -l) inputs grown beyond the $(find "tests/fuzz/seeds/$t" -type f | wc -l) seeds"
done
