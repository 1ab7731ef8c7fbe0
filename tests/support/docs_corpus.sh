#!/usr/bin/env bash
# Sourced by the program tests: make_docs_data <build dir> <source dir> <work dir> writes a small
# corpus from the project's own docs/ (train) and README.md (validation) and tokenises it into
# <work dir>/data with experiments/prepare_data (BPE vocabulary 320).
make_docs_data() {
  local build=$1 src=$2 work=$3
  mkdir -p "$work/corpus/docs"
  cp "$src"/docs/*.md "$work/corpus/docs/"
  cp "$src/README.md" "$work/corpus/README.md"
  {
    echo '{"documents": ['
    local sep="" f
    for f in "$work"/corpus/docs/*.md; do
      printf '%s{"path": "docs/%s", "split": "train"}\n' "$sep" "$(basename "$f")"
      sep=","
    done
    echo ',{"path": "README.md", "split": "validation"}]}'
  } > "$work/corpus/manifest.json"
  "$build/experiments/prepare_data" --corpus "$work/corpus" --out "$work/data" --vocab 320 >/dev/null 2>&1
}
