#!/usr/bin/env bash
# Runs every table of paper_repro/ in full, or with --quick each in about a minute on small teachers.
#   bash paper_repro/run_all.sh [--quick] [out]     (out: runs/paper_repro, or runs/paper_repro_quick)
# First, and not counted in the estimate: the dependencies, the build, the corpora (fetched and
# tokenised once: data/prepared with every corpus's held-out documents apart, and data/prepared_kjv whose
# training split is the King James Bible alone) and the teachers (trained once, cached under runs/:
# the deep gpt2, llama and qwen2 on both corpora and a deep llama on the Bible alone; --quick trains tiny
# ones in the run directory). Then the tables run in two queues, one per processor, each program
# single-threaded on its own processor (OMP_NUM_THREADS=1, taskset), as the evidence page's runs did:
#   processor 0: efficiency_gpt2, pruning_methods on the llama teacher and on the Bible-only llama
#   processor 1: efficiency_bert, ablation, pruning_methods on the qwen2 teacher
# Every minute it prints each queue's program and that program's last progress line; each program's
# output is in <out>/<program>.log and its tables in <out>/<program>/table.md (paper_repro/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
suffix=""
[ $quick = 1 ] && suffix=_quick
out=${1:-runs/paper_repro$suffix}
mkdir -p "$out"
start=$SECONDS
say() { echo "run_all ($(( (SECONDS - start) / 60 )) min): $*"; }

tools/install_deps.sh --corpus --minilm
cmake --preset host >/dev/null
cmake --build --preset host -j"$(nproc)" --target prepare_data train_teacher efficiency_gpt2 efficiency_bert \
  pruning_methods ablation
x=build/host
if [ ! -f data/prepared/test.kjv.bin ]; then
  [ -f data/corpus/manifest.json ] || tools/fetch_corpus.sh data/corpus
  say "tokenising the corpora into data/prepared"
  $x/experiments/prepare_data --corpus data/corpus --out data/prepared --vocab 1024
fi
if [ ! -f data/prepared_kjv/test.austen.bin ]; then
  say "tokenising the corpora into data/prepared_kjv (training split: the King James Bible alone)"
  $x/experiments/prepare_data --corpus data/corpus --out data/prepared_kjv --vocab 1024 --train-corpus kjv
fi
if [ ! -f data/mc/austen_next_sentence.test.jsonl ]; then
  say "writing the multiple-choice tasks into data/mc"
  python3 tools/make_mc_tasks.py --corpus data/corpus --out data/mc
fi

# The teachers: <name> <family> <data>. Full mode trains them in two queues, one per processor, each
# single-threaded (the deep teachers' shapes gain little from a second thread), and prints each
# queue's last progress line every minute.
teachers=("deep_gpt2 gpt2 data/prepared" "deep_llama llama data/prepared" "deep_qwen2 qwen2 data/prepared"
          "deep_llama_kjv llama data/prepared_kjv")
tdir() { if [ $quick = 1 ]; then echo "$out/teachers/$1"; else echo "runs/teacher_$1"; fi; }
train() {  # train <processor> <name> <family> <data>
  local cpu=$1 name=$2 family=$3 data=$4 dir
  dir=$(tdir "$name")
  [ -f "$dir/report.json" ] && return 0  # written last: a finished teacher
  if [ $quick = 1 ]; then
    say "training the teacher $dir"
    $x/experiments/train_teacher --data "$data" --preset tiny --family "$family" --steps 40 --out "$dir" --quiet
  else
    echo "teacher_$name" > "$out/.tqueue$cpu"
    mkdir -p "$dir"
    OMP_NUM_THREADS=1 taskset -c "$cpu" $x/experiments/train_teacher --data "$data" --preset deep \
      --family "$family" --out "$dir" > "$out/teacher_$name.log" 2>&1 ||
      { echo "run_all: teacher $name failed, see $out/teacher_$name.log" >&2; return 1; }
  fi
}
# watch <marker prefix> <pattern> <pid> <pid>: until both processes end, every minute prints each
# queue's current job (named in <out>/<prefix><processor>) and the last line of its log that matches
# <pattern> (carriage-return progress lines split), then waits for both; fails when either failed.
watch() {
  local prefix=$1 pattern=$2 p0=$3 p1=$4 k name last rc=0
  while kill -0 "$p0" 2>/dev/null || kill -0 "$p1" 2>/dev/null; do
    sleep 60 &
    wait $! || true
    for k in 0 1; do
      [ -f "$out/$prefix$k" ] || continue
      name=$(cat "$out/$prefix$k")
      [ "$name" = done ] && continue
      last=$(tr '\r' '\n' < "$out/$name.log" 2>/dev/null | grep -a -- "$pattern" | tail -1 | sed 's/^######## //')
      say "processor $k: $name: ${last:-starting}"
    done
  done
  wait "$p0" || rc=1
  [ "$p1" = "$p0" ] || wait "$p1" || rc=1
  rm -f "$out/${prefix}0" "$out/${prefix}1"
  return $rc
}
tqueue() {  # tqueue <processor> <teacher index>...
  local cpu=$1 i
  shift
  for i in "$@"; do
    # shellcheck disable=SC2086
    train "$cpu" ${teachers[$i]} || return 1
  done
  echo done > "$out/.tqueue$cpu"
}
if [ $quick = 1 ] || [ "$(nproc)" -lt 2 ]; then
  tqueue 0 0 1 2 3
  rm -f "$out/.tqueue0"
else
  pending=0
  for t in "${teachers[@]}"; do read -r name _ <<<"$t"; [ -f "$(tdir "$name")/report.json" ] || pending=1; done
  if [ $pending = 1 ]; then
    say "training the teachers in two queues (about 35 minutes each, single-threaded)"
    tqueue 0 0 1 & tp0=$!
    tqueue 1 2 3 & tp1=$!
    watch .tqueue . "$tp0" "$tp1" || { echo "run_all: a teacher failed (see the logs in $out)" >&2; exit 1; }
  fi
fi

q=(); [ $quick = 1 ] && q=(--quick)
# Zero-shot multiple choice on the test split's tasks (lm-eval's protocol), beside perplexity.
mc=(--mc data/mc/kjv_next_verse.test.jsonl,data/mc/austen_next_sentence.test.jsonl --mc-limit "$([ $quick = 1 ] && echo 10 || echo 100)")
p=$x/paper_repro
run() {  # run <processor> <name> <program> <args...>
  local cpu=$1 name=$2 prog=$3
  shift 3
  echo "$name" > "$out/.queue$cpu"
  echo "run_all command: OMP_NUM_THREADS=1 taskset -c $cpu $p/$prog ${q[*]} $* --out $out/$name" > "$out/$name.log"
  OMP_NUM_THREADS=1 taskset -c "$cpu" "$p/$prog" "${q[@]}" "$@" --out "$out/$name" >> "$out/$name.log" 2>&1 ||
    { echo "run_all: $name failed, see $out/$name.log" >&2; return 1; }
}
# Single-threaded times of the last full run (paper_repro/README.md, the programs' defaults):
# efficiency_gpt2 29.9 min (40-second budgets), efficiency_bert 32.1 (40-second budgets, pools of 1000
# sentences), ablation 25.6, pruning_methods 31.6-32.2 a teacher (30 runs of two 10-second recoveries,
# each student scored on both corpora's test documents and the multiple-choice tasks): the queues below
# took 93.7 and 89.3 minutes.
queue0() {
  run 0 efficiency_gpt2 efficiency_gpt2 --teacher "$(tdir deep_gpt2)" "${mc[@]}" &&
  run 0 pruning_methods_llama pruning_methods --teachers "$(tdir deep_llama)" --eval-splits test.kjv,test.austen \
    "${mc[@]}" &&
  run 0 pruning_methods_llama_kjv pruning_methods --teachers "$(tdir deep_llama_kjv)@data/prepared_kjv" \
    --eval-splits test.kjv,test.austen "${mc[@]}"
  local rc=$?
  echo done > "$out/.queue0"
  return $rc
}
queue1() {
  run 1 efficiency_bert efficiency_bert --corpus data/corpus &&
  run 1 ablation ablation --teacher "$(tdir deep_gpt2)" &&
  run 1 pruning_methods_qwen2 pruning_methods --teachers "$(tdir deep_qwen2)" --eval-splits test.kjv,test.austen \
    "${mc[@]}"
  local rc=$?
  echo done > "$out/.queue1"
  return $rc
}
cpus=$(nproc)
say "running the tables ($([ $quick = 1 ] && echo quick || echo "full: about 95 minutes on 2 processors"))"
tables_start=$SECONDS
if [ "$cpus" -ge 2 ]; then
  queue0 & pid0=$!
  queue1 & pid1=$!
else
  (queue0 && queue1) & pid0=$!
  pid1=$pid0
fi
watch .queue '########' "$pid0" "$pid1" || { echo "run_all: a table failed (see the logs in $out)" >&2; exit 1; }
say "the tables took $(( (SECONDS - tables_start) / 60 )) min; every table: $out/*/table.md"
for f in "$out"/*/table.md; do
  echo
  cat "$f"
done
