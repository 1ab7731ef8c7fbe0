#!/usr/bin/env bash
# Runs every table of paper_repro/ in full, or with --quick each in about a minute on small teachers.
#   bash paper_repro/run_all.sh [--quick] [--teachers-only] [--only JOB,...] [--build DIR] [--corpus DIR]
#                               [--data DIR] [--mc] [--mc-items N] [--args JOB=ARGS]... [out]
# out: runs/paper_repro (runs/paper_repro_quick with --quick). JOB: a table's name below, or a program's
# (pruning_methods: its three tables). --build DIR uses that build tree as it is (no install, no build);
# --corpus and --data name the corpus (data/corpus) and where its tokenised forms and multiple-choice
# tasks go (data); --mc: also score zero-shot multiple choice (left out by default: the teachers trained
# here score at chance on it), --mc-items: items a task (400; fewer for a small corpus); --args adds arguments to
# a job's program (e.g. --args 'efficiency_gpt2=--settings ratio0.5'). Stop it at any moment
# (Ctrl-C, kill): it ends every process it started, and the same command started again resumes:
# finished teachers and tables are not run again, and inside a table every finished seed of every
# setting is read back (the comparison harness's resume), so at most the seeds in progress are lost.
# Progress, with the time left estimated from the tables measured so far, every minute; each job's
# output in <out>/<job>.log, its tables in <out>/<job>/table.md.
#
# First: the dependencies, the build, the corpora (tokenised once: <data>/prepared with every corpus's
# held-out documents apart, <data>/prepared_kjv whose training split is the King James Bible alone, and for
# the job deeper_teacher <data>/prepared_v8192 with an 8192-token vocabulary) and the teachers (the deep
# gpt2, llama and qwen2 on both corpora, a deep llama on the Bible alone, and for deeper_teacher a 16-layer
# gpt2 on 8192 tokens; with --quick tiny ones of 40 steps in <out>/teachers). Tokenised corpora and teachers are also kept in a
# cache outside the work tree (${LWCL_CACHE_DIR:-~/.cache/lwcl}/prepared, .../teachers, keyed by the
# data's hash, the family, the preset and the hash of the training or tokenising code), so that a fresh
# checkout on the same machine reuses them. Then the tables, in two queues, one per processor, each program
# single-threaded on its own processor (OMP_NUM_THREADS=1, passive OpenMP waiting, taskset):
#   processor 0: efficiency_gpt2, teacher_heavy, deeper_teacher
#   processor 1: efficiency_bert, ablation, budget_scaling
#   both: each pruning table in two parts (half its criteria each), then whole (every cell read back)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0 teachers_only=0 only="" build="" corpus=data/corpus data=data with_mc=0 mc_items=400 out=""
declare -A job_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --teachers-only) teachers_only=1 ;;
    --only) only=${2:?run_all: --only needs a list of jobs}; shift ;;
    --build) build=${2:?run_all: --build needs a build tree}; shift ;;
    --corpus) corpus=${2:?run_all: --corpus needs a folder}; shift ;;
    --data) data=${2:?run_all: --data needs a folder}; shift ;;
    --mc) with_mc=1 ;;
    --mc-items) mc_items=${2:?run_all: --mc-items needs a number}; shift ;;
    --args) [[ ${2:-} == ?*=* ]] || { echo "run_all: --args takes JOB=ARGUMENTS, got '${2:-}'" >&2; exit 2; }
            job_args[${2%%=*}]=${2#*=}; shift ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run_all: unknown option '$1' (expected --quick, --teachers-only, --only, --build, --corpus, --data, --mc, --mc-items, --args)" >&2
        exit 2 ;;
    *) [ -z "$out" ] || { echo "run_all: one output folder, got '$out' and '$1'" >&2; exit 2; }
       out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || out=runs/paper_repro$([ $quick = 1 ] && echo _quick || true)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cache=${LWCL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lwcl}
start=$SECONDS
say() { echo "run_all ($(( (SECONDS - start) / 60 )) min): $*"; }

# ---- the jobs: <name> <queue> <minutes single-threaded in the last full run> <program> <args...> ----------
# (paper_repro/README.md: efficiency_gpt2 29.9 min without the memory-limited end-to-end runs (two more
# methods: about 45), efficiency_bert 32.1, ablation 25.6, pruning_methods at its current defaults (60 s a
# recovery, 3 seeds) 116 a teacher (the llama, 2026-12-07: 78 for --fractions 0.2,0.35 and 38 for 0.5, run
# by hand on the two processors into one --out, then whole); the teachers about 28-35 minutes each;
# budget_scaling not run in full yet: 20 s x (1 + 2 + 4 + 8) for each of 3 methods (LWCL, LWCL closed by
# end-to-end KD, end-to-end KD) and 3 seeds, about 52 minutes; teacher_heavy, efficiency_gpt2 at one
# setting (70% width and half depth together), a third of efficiency_gpt2's; deeper_teacher, efficiency_gpt2 at
# two settings on the 16-layer teacher, whose steps take about twice the deep teacher's: about 40 minutes.)
all_jobs=(efficiency_gpt2 teacher_heavy pruning_methods_llama pruning_methods_llama_kjv efficiency_bert ablation pruning_methods_qwen2
          budget_scaling deeper_teacher)
declare -A job_queue=([efficiency_gpt2]=0 [teacher_heavy]=0 [pruning_methods_llama]=0 [pruning_methods_llama_kjv]=0
                      [efficiency_bert]=1 [ablation]=1 [pruning_methods_qwen2]=1 [budget_scaling]=1
                      [deeper_teacher]=0)
declare -A job_minutes=([efficiency_gpt2]=45 [teacher_heavy]=15 [pruning_methods_llama]=116 [pruning_methods_llama_kjv]=116
                        [efficiency_bert]=32 [ablation]=26 [pruning_methods_qwen2]=116 [budget_scaling]=52
                        [deeper_teacher]=40)
# The pruning tables, about two hours of one processor each, run in two parts at once where there are two
# processors: each part the cells of half the criteria (two of the four recovered ones each) on its own
# queue, into the table's folder; once both queues end, the table runs whole, reading every cell back, and
# writes it. On one processor, or when --args chooses the criteria, a table runs whole on its queue.
declare -A job_split=([pruning_methods_llama]=1 [pruning_methods_llama_kjv]=1 [pruning_methods_qwen2]=1)
part_criteria=(random,wanda_sp,magnitude_l1,magnitude_l2,wanda_sp_in_out flap,block_influence,flap_pooled,taylor,activation)
jobs=()
if [ -z "$only" ]; then
  jobs=("${all_jobs[@]}")
else
  IFS=',' read -r -a wanted <<<"$only"
  for w in "${wanted[@]}"; do
    found=0
    for j in "${all_jobs[@]}"; do
      if [ "$j" = "$w" ] || [[ $j == "$w"_* ]]; then
        [[ " ${jobs[*]} " == *" $j "* ]] || jobs+=("$j")
        found=1
      fi
    done
    [ $found = 1 ] || { echo "run_all: --only names '$w', which is neither a job (${all_jobs[*]}) nor a program of one" >&2
                        exit 2; }
  done
fi
for j in "${!job_args[@]}"; do
  [[ " ${all_jobs[*]} " == *" $j "* ]] || { echo "run_all: --args names the job '$j' (expected one of ${all_jobs[*]})" >&2; exit 2; }
done
split() {  # split <job>: true when the job runs in two parts (two processors, its criteria not chosen by --args)
  [ -n "${job_split[$1]:-}" ] && [ "$(nproc)" -ge 2 ] && [[ " ${job_args[$1]:-} " != *" --criteria "* ]]
}
# The teachers each job needs (names of the list below).
declare -A job_teachers=([efficiency_gpt2]=deep_gpt2 [teacher_heavy]=deep_gpt2 [ablation]=deep_gpt2 [pruning_methods_llama]=deep_llama
                         [pruning_methods_llama_kjv]=deep_llama_kjv [pruning_methods_qwen2]=deep_qwen2 [efficiency_bert]=""
                         [budget_scaling]=deep_gpt2 [deeper_teacher]=deeper_gpt2)
# <name> <family> <data folder> <queue> [layers: the preset's when not given]. The deeper teacher: the deep
# preset at 16 layers on an 8192-token vocabulary (in quick mode the tiny one at 6 layers on the 1024-token one).
deeper_data=$data/prepared_v8192
[ $quick = 0 ] || deeper_data=$data/prepared
# (the 16-layer one, about twice the others' time, shares its queue with one other: about 105 minutes a
# queue on a fresh machine)
teachers=("deep_gpt2 gpt2 $data/prepared 0" "deep_llama llama $data/prepared 0" "deep_qwen2 qwen2 $data/prepared 0"
          "deep_llama_kjv llama $data/prepared_kjv 1" "deeper_gpt2 gpt2 $deeper_data 1 $([ $quick = 1 ] && echo 6 || echo 16)")

# ---- every process this script starts in the background, ended with it (tools/bg_jobs.sh) -----------
# shellcheck source=../tools/bg_jobs.sh
source tools/bg_jobs.sh

# ---- dependencies, build, corpora ------------------------------------------------------------------
if [ -z "$build" ]; then
  tools/install_deps.sh --corpus --minilm
  cmake --preset host >/dev/null
  cmake --build --preset host -j"$(nproc)" --target prepare_data train_teacher efficiency_gpt2 efficiency_bert \
    pruning_methods ablation budget_scaling
  build=build/host
fi
build=$(cd "$build" && pwd)
x=$build/experiments p=$build/paper_repro
for prog in "$x/prepare_data" "$x/train_teacher" "$p/efficiency_gpt2" "$p/efficiency_bert" "$p/pruning_methods" \
            "$p/ablation" "$p/budget_scaling"; do
  [ -x "$prog" ] || { echo "run_all: $prog is not built (cmake --build --preset host)" >&2; exit 2; }
done
hash_of() { cat "$@" | sha256sum | cut -c1-16; }  # hash_of <files...>
code_hash() { find "$@" -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16; }  # code_hash <paths...>
# The code a cached teacher or tokenised corpus depends on, by content: a change to it trains or
# tokenises again (a change elsewhere, say a faster kernel, keeps what is cached).
train_code=$(code_hash include/lwcl/train experiments/train_teacher.cpp)
data_code=$(code_hash include/lwcl/data include/lwcl/model/tokenizer experiments/prepare_data.cpp)

if [ ! -f "$corpus/manifest.json" ]; then
  [ "$corpus" = data/corpus ] || { echo "run_all: $corpus has no manifest.json (tools/fetch_corpus.sh writes one)" >&2; exit 2; }
  tools/fetch_corpus.sh "$corpus"
fi
corpus_hash=$(cd "$corpus" && find . -type f -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-16)
# from_cache <entry> <folder>: the cached folder copied in whole (a temporary name, then a rename).
from_cache() {
  rm -rf "$2.tmp" && mkdir -p "$(dirname "$2")" && cp -a "$1" "$2.tmp" && rm -rf "$2" && mv "$2.tmp" "$2"
}
# into_cache <folder> <entry>: the folder copied into the cache whole; an entry another run wrote first is
# kept (mv -T does not replace a folder that has files).
into_cache() {
  mkdir -p "$(dirname "$2")" && rm -rf "$2.tmp.$$" && cp -a "$1" "$2.tmp.$$" && mv -T "$2.tmp.$$" "$2" 2>/dev/null ||
    rm -rf "$2.tmp.$$"
}
# prepare <folder> [prepare_data options]: tokenised once, through the cache (a vocabulary of 1024 tokens
# unless the options give --vocab).
prepare() {
  local dir=$1 key entry vocab=(--vocab 1024)
  shift
  [[ " $* " != *" --vocab "* ]] || vocab=()
  [ -f "$dir/done.json" ] && return 0
  key=$(echo "$corpus_hash $* $data_code" | sha256sum | cut -c1-16)
  entry=$cache/prepared/$key
  if [ -f "$entry/done.json" ]; then
    say "tokenised corpus $dir from the cache ($entry)"
    from_cache "$entry" "$dir"
    return 0
  fi
  say "tokenising the corpus into $dir ($*)"
  rm -rf "$dir"
  in_background "$x/prepare_data" --corpus "$corpus" --out "$dir" "${vocab[@]}" "$@" > "$out/prepare_$(basename "$dir").log" 2>&1
  wait_for "$bg" || { echo "run_all: prepare_data for $dir failed, see $out/prepare_$(basename "$dir").log" >&2; exit 1; }
  echo "{\"corpus_hash\": \"$corpus_hash\", \"options\": \"$*\"}" > "$dir/done.json.tmp" && mv "$dir/done.json.tmp" "$dir/done.json"
  into_cache "$dir" "$entry"
}
prepare "$data/prepared"
prepare "$data/prepared_kjv" --train-corpus kjv
# The deeper teacher's corpus (8192 tokens), tokenised only when a job needs it.
if [ $quick = 0 ] && { [[ " ${jobs[*]} " == *" deeper_teacher "* ]] || [ $teachers_only = 1 ]; }; then
  prepare "$deeper_data" --vocab 8192
fi
if [ $with_mc = 1 ] && [ ! -f "$data/mc/austen_next_sentence.test.jsonl" ]; then
  say "writing the multiple-choice tasks into $data/mc"
  python3 tools/make_mc_tasks.py --corpus "$corpus" --out "$data/mc" --items "$mc_items"
fi

# ---- the teachers ----------------------------------------------------------------------------------
needed_teachers=()
for j in "${jobs[@]}"; do
  for t in ${job_teachers[$j]}; do [[ " ${needed_teachers[*]} " == *" $t "* ]] || needed_teachers+=("$t"); done
done
[ $teachers_only = 0 ] || needed_teachers=(deep_gpt2 deep_llama deep_qwen2 deep_llama_kjv deeper_gpt2)
tdir() { if [ $quick = 1 ]; then echo "$out/teachers/$1"; else echo "runs/teacher_$1"; fi; }
teacher_args() {  # teacher_args <family> <data> [layers: the preset's when not given]
  if [ $quick = 1 ]; then echo "--data $2 --preset tiny --family $1 --steps 40 --quiet${3:+ --layers $3}"
  else echo "--data $2 --preset deep --family $1${3:+ --layers $3}"; fi
}
# The cache entry of a teacher: its family, preset, layers and steps, the data's hash and the training code.
teacher_entry() {  # teacher_entry <family> <data> [layers]
  echo "$cache/teachers/$(echo "$(teacher_args "$1" "$2" "${3:-}" | sed "s|--data [^ ]*||") $(hash_of "$2/train.bin" "$2"/tokenizer/*) $train_code" |
                           sha256sum | cut -c1-16)"
}
# train_one <queue> <name> <family> <data> [layers]: a teacher is finished when its report.json is there
# (train_teacher writes it last); train_teacher resumes from its own checkpoints when restarted.
train_one() {
  local cpu=$1 name=$2 family=$3 tdata=$4 layers=${5:-} dir entry
  dir=$(tdir "$name")
  [ -f "$dir/report.json" ] && return 0
  entry=$(teacher_entry "$family" "$tdata" "$layers")
  if [ -f "$entry/report.json" ]; then
    echo "teacher $name from the cache ($entry)"
    from_cache "$entry" "$dir"
    return 0
  fi
  mkdir -p "$dir"
  # shellcheck disable=SC2046
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive taskset -c "$cpu" "$x/train_teacher" $(teacher_args "$family" "$tdata" "$layers") \
    --out "$dir" || { echo "run_all: teacher $name failed" >&2; return 1; }
  into_cache "$dir" "$entry"
}
tqueue() {  # tqueue <queue>: this queue's needed teachers, one after the other
  set +m
  local q=$1 t name family tdata tq layers
  for t in "${teachers[@]}"; do
    read -r name family tdata tq layers <<<"$t"
    if [ "$(nproc)" -ge 2 ] && [ "$tq" != "$q" ]; then continue; fi  # on one processor, queue 0 has them all
    [[ " ${needed_teachers[*]} " == *" $name "* ]] || continue
    echo "teacher_$name" > "$out/.tqueue$q"
    train_one "$q" "$name" "$family" "$tdata" "$layers" >> "$out/teacher_$name.log" 2>&1 || return 1
  done
  echo done > "$out/.tqueue$q"
}

# ---- progress ---------------------------------------------------------------------------------------
# watch <marker prefix> <pattern> <pids...>: until every queue ends, every minute prints each queue's
# current job (named in <out>/<prefix><queue>), the last line of its log that matches <pattern>, and
# the time left; then waits for them; fails when any failed.
watch() {
  local prefix=$1 pattern=$2 k name last rc=0 pid alive printed=$SECONDS
  shift 2
  while :; do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 1 ] || break
    sleep 2 < /dev/null &
    wait $! || true
    [ $((SECONDS - printed)) -ge 60 ] || continue
    printed=$SECONDS
    for k in 0 1; do
      [ -f "$out/$prefix$k" ] || continue
      name=$(cat "$out/$prefix$k")
      [ "$name" = done ] && continue
      last=$(tr '\r' '\n' < "$out/$name.log" 2>/dev/null | grep -a -- "$pattern" | tail -1 | sed 's/^######## //')
      say "queue $k: $name: ${last:-starting}"
    done
    [ "$prefix" = .queue ] && say "$(time_left)"
  done
  for pid in "$@"; do wait "$pid" || rc=1; done
  rm -f "$out/${prefix}0" "$out/${prefix}1"
  return $rc
}
# The time left: the last full run's minutes of the jobs not started, scaled by how this run's finished
# jobs compare with theirs, plus, for the job each queue runs now, the program's own estimate from the
# runs it has trained (its log's last progress line), shared over the queues.
time_left() {
  local j done_n=0 measured=0 planned=0 left0=0 left1=0 live0=0 live1=0 s k
  # add_left <queue> <log name> <planned minutes>: the program's own estimate (live<queue>) when the queue
  # runs that log now and the program gave one, else the planned minutes (left<queue>)
  add_left() {
    local now=""
    if [ -f "$out/.queue$1" ] && [ "$(cat "$out/.queue$1")" = "$2" ]; then
      now=$(grep -a '^######## .* min left)' "$out/$2.log" 2>/dev/null | tail -1 | sed -n 's/.*about \([0-9]*\) min left)$/\1/p') ||
        now=""
    fi
    if [ -n "$now" ]; then eval "live$1=\$((live$1 + now))"; else eval "left$1=\$((left$1 + $3))"; fi
  }
  for j in "${jobs[@]}"; do
    if [ -f "$out/$j/run_all.done" ]; then
      done_n=$((done_n + 1))
      # A split table's processor seconds: its parts' and the whole run's.
      s=$(cat "$out/$j"/run_all{.part0,.part1,}.done 2>/dev/null | sed -n 's/^seconds //p' | awk '{ t += $1 } END { print t + 0 }')
      if [ -n "$s" ] && [ "$s" -gt 0 ]; then measured=$((measured + s)); planned=$((planned + ${job_minutes[$j]} * 60)); fi
    elif split "$j"; then  # half of it on each queue, for each part not finished
      for k in 0 1; do
        [ -f "$out/$j/run_all.part$k.done" ] || add_left "$k" "$j.part$k" $((${job_minutes[$j]} / 2))
      done
    else
      k=${job_queue[$j]}; [ "$(nproc)" -ge 2 ] || k=0
      add_left "$k" "$j" "${job_minutes[$j]}"
    fi
  done
  awk -v a="$left0" -v b="$left1" -v la="$live0" -v lb="$live1" -v m="$measured" -v p="$planned" -v d="$done_n" \
      -v n="${#jobs[@]}" -v c="$(nproc)" -v q="$quick" 'BEGIN {
    s = p > 0 ? m / p : 1
    qa = a * s + la; qb = b * s + lb
    l = c >= 2 ? (qa > qb ? qa : qb) : qa + qb
    if (p > 0) printf "%d of %d tables done; about %.0f min left (the finished ones took %.2fx the last full run)", d, n, l, s
    else if (q == 1) printf "%d of %d tables done (quick mode: minutes, no estimate before the first table ends)", d, n
    else if (la + lb > 0) printf "%d of %d tables done; about %.0f min left (the running tables'"'"' own estimates, the last full run'"'"'s times for the rest)", d, n, l
    else printf "%d of %d tables done; about %.0f min left (the last full run'"'"'s times; measured after the first table)", d, n, l }'
}

start_queues() {  # start_queues <queue function>: queue 0, and queue 1 where there is a second processor; ids in $pids
  pids=()
  in_background "$1" 0
  pids+=("$bg")
  if [ "$(nproc)" -ge 2 ]; then
    in_background "$1" 1
    pids+=("$bg")
  fi
}
if [ ${#needed_teachers[@]} -gt 0 ]; then
  say "the teachers: ${needed_teachers[*]} (each about 35 minutes single-threaded in full mode, once: then cached)"
  start_queues tqueue
  watch .tqueue . "${pids[@]}" || { echo "run_all: a teacher failed (see $out/teacher_*.log)" >&2; exit 1; }
fi
if [ $teachers_only = 1 ]; then
  say "the teachers are ready ($(for t in "${needed_teachers[@]}"; do printf '%s ' "$(tdir "$t")"; done))"
  exit 0
fi

# ---- the tables -------------------------------------------------------------------------------------
q=(); [ $quick = 1 ] && q=(--quick)
# With --mc: zero-shot multiple choice on the test split's tasks (lm-eval's protocol), beside perplexity.
mc=()
[ $with_mc = 0 ] || mc=(--mc "$data/mc/kjv_next_verse.test.jsonl,$data/mc/austen_next_sentence.test.jsonl"
                        --mc-limit "$([ $quick = 1 ] && echo 10 || echo 100)")
job_command() {  # job_command <job>: the program and its arguments, one per line
  local splits=(--eval-splits test.kjv,test.austen)
  case $1 in
    # Both with end-to-end KD as a user short of memory runs it (checkpointed; micro-batches under LWCL's
    # training peak): the equal-memory regime.
    efficiency_gpt2) printf '%s\n' "$p/efficiency_gpt2" "${q[@]}" --teacher "$(tdir deep_gpt2)" --data "$data/prepared" \
                       --e2e-memory-limited "${mc[@]}" ;;
    teacher_heavy) printf '%s\n' "$p/efficiency_gpt2" "${q[@]}" --teacher "$(tdir deep_gpt2)" --data "$data/prepared" \
                     --settings ratio0.7+depth0.5 --e2e-memory-limited "${mc[@]}" ;;
    pruning_methods_llama) printf '%s\n' "$p/pruning_methods" "${q[@]}" --teachers "$(tdir deep_llama)" --data "$data/prepared" \
                             "${splits[@]}" "${mc[@]}" ;;
    pruning_methods_llama_kjv) printf '%s\n' "$p/pruning_methods" "${q[@]}" --data "$data/prepared" \
                                 --teachers "$(tdir deep_llama_kjv)@$data/prepared_kjv" "${splits[@]}" "${mc[@]}" ;;
    pruning_methods_qwen2) printf '%s\n' "$p/pruning_methods" "${q[@]}" --teachers "$(tdir deep_qwen2)" --data "$data/prepared" \
                             "${splits[@]}" "${mc[@]}" ;;
    efficiency_bert) printf '%s\n' "$p/efficiency_bert" "${q[@]}" --corpus "$corpus" ;;
    ablation) printf '%s\n' "$p/ablation" "${q[@]}" --teacher "$(tdir deep_gpt2)" --data "$data/prepared" ;;
    # With LWCL closed by end-to-end KD on the last 0.75 of its budget, that stage in 16 micro-batches (the
    # share near the best on validation at 160 s, results/tune_closing; the micro-batches keep LWCL's memory).
    budget_scaling) printf '%s\n' "$p/budget_scaling" "${q[@]}" --teacher "$(tdir deep_gpt2)" --data "$data/prepared" \
                      --lwcl-kd-share 0.75 --kd-micro-batches 16 ;;
    # The regime of depth and a large vocabulary: the 16-layer teacher on 8192 tokens.
    deeper_teacher) printf '%s\n' "$p/efficiency_gpt2" "${q[@]}" --teacher "$(tdir deeper_gpt2)" --data "$deeper_data" \
                      --settings ratio0.5,depth0.5 ;;
  esac
  # shellcheck disable=SC2086
  [ -z "${job_args[$1]:-}" ] || printf '%s\n' ${job_args[$1]}
  printf '%s\n' --out "$out/$1"
}
# run_job <queue> <job> [part]: skipped when it finished before with the same command; otherwise run (the
# program itself skips the seeds it finished before), then marked finished with its command and seconds.
# With a part (0 or 1), that part's criteria alone (log <job>.part<part>.log), skipped too once the whole
# table has finished.
run_job() {
  local cpu=$1 name=$2 part=${3:-} cmd t0 marker whole log
  mapfile -t cmd < <(job_command "$name")
  whole=$out/$name/run_all.done marker=$whole log=$name
  if [ -n "$part" ]; then
    if [ -f "$whole" ] && [ "$(sed -n 's/^command //p' "$whole")" = "${cmd[*]}" ]; then return 0; fi
    cmd+=(--criteria "${part_criteria[$part]}")
    marker=$out/$name/run_all.part$part.done log=$name.part$part
  fi
  if [ -f "$marker" ] && [ "$(sed -n 's/^command //p' "$marker")" = "${cmd[*]}" ]; then
    echo "$log finished before with the same command: not run again" >> "$out/$log.log"
    return 0
  fi
  echo "$log" > "$out/.queue$cpu"
  echo "run_all command: OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive taskset -c $cpu ${cmd[*]}" >> "$out/$log.log"
  t0=$SECONDS
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive taskset -c "$cpu" "${cmd[@]}" >> "$out/$log.log" 2>&1 ||
    { echo "run_all: $log failed, see $out/$log.log" >&2; return 1; }
  mkdir -p "$out/$name"
  printf 'command %s\nseconds %d\nfinished %s\n' "${cmd[*]}" $((SECONDS - t0)) "$(date -u +%FT%TZ)" > "$marker.tmp"
  mv "$marker.tmp" "$marker"
}
queue() {  # queue <queue>: this queue's jobs (and one part of each split table), one after the other
  set +m
  local k=$1 j
  for j in "${jobs[@]}"; do
    if split "$j"; then run_job "$k" "$j" "$k" || return 1; continue; fi
    if [ "$(nproc)" -ge 2 ]; then [ "${job_queue[$j]}" = "$k" ] || continue; fi
    run_job "$([ "$(nproc)" -ge 2 ] && echo "$k" || echo 0)" "$j" || return 1
  done
  echo done > "$out/.queue$k"
}
say "running the tables: ${jobs[*]} ($([ $quick = 1 ] && echo quick || echo "full: $(time_left)"))"
tables_start=$SECONDS
start_queues queue
watch .queue '########' "${pids[@]}" || { echo "run_all: a table failed (see the logs in $out)" >&2; exit 1; }
# The split tables whole, once both parts have ended: every cell read back, the table written.
whole_table() { set +m; run_job 0 "$1"; }
for j in "${jobs[@]}"; do
  split "$j" || continue
  say "$j: its two parts done, the table whole"
  in_background whole_table "$j"
  wait_for "$bg" || { echo "run_all: $j failed (see $out/$j.log)" >&2; exit 1; }
done
say "the tables took $(( (SECONDS - tables_start) / 60 )) min; every table: $out/*/table.md"
for j in "${jobs[@]}"; do
  echo
  cat "$out/$j/table.md"
done
