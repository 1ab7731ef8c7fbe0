#!/usr/bin/env bash
# Sourced by the program tests: make_docs_data <build dir> <source dir> <work dir> writes a small
# corpus from the project's own docs/ (train) and README.md (validation) and tokenises it into
# <work dir>/data with experiments/prepare_data (BPE vocabulary 320).
# make_docs_corpus <source dir> <work dir>: the raw corpus alone, <work dir>/corpus/manifest.json and the
# files it lists.
make_docs_corpus() {
  local src=$1 work=$2
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
}

make_docs_data() {
  local build=$1 src=$2 work=$3
  make_docs_corpus "$src" "$work"
  "$build/experiments/prepare_data" --corpus "$work/corpus" --out "$work/data" --vocab 320 >/dev/null 2>&1
}

# make_docs_teacher <build dir> <source dir> <work dir>: the data above, then a 4-layer gpt2 (width 64,
# 4 heads, FFN 128) trained 30 steps of 8 x 32 tokens on it, in <work dir>/teacher (model/ inside).
make_docs_teacher() {
  local build=$1 src=$2 work=$3
  make_docs_data "$build" "$src" "$work"
  "$build/experiments/train_teacher" --data "$work/data" --out "$work/teacher" --quiet --width 64 --layers 4 --heads 4 \
    --ffn 128 --seq 32 --batch 8 --steps 30 >/dev/null
}
