#!/usr/bin/env bash
# kill -9 anywhere: train_teacher, prune and recover (the pipeline, on a disk feature cache) are each run
# once uninterrupted, then again into a second directory that is killed with SIGKILL several times and
# restarted after each kill: at a random moment of the run, and inside a chosen file write
# (LWCL_KILL_IN_WRITE=N: the process kills itself in its N-th atomic_file commit, after the temporary is
# written and before the rename, so checkpoint writes, cache records and the final model are all hit).
# The last restart runs to the end. Then the result must be bitwise the uninterrupted one and the
# directory must hold no temporary file (*.tmp*). Then a full disk for train_teacher and recover (full,
# below).
#   kill_anywhere.sh <build dir with experiments/> <source dir> <work dir> [kills per program (default 4)]
set -euo pipefail
build=$1 src=$2 work=$3 kills=${4:-4}
rm -rf "$work"
source "$src/tests/support/docs_corpus.sh"
make_docs_teacher "$build" "$src" "$work"
x=$build/experiments

now_ms() { date +%s%3N; }

# cycle <name> <max write> <files to compare> -- <command without --out>
cycle() {
  local name=$1 writes=$2 files=$3
  shift 4
  local ref=$work/$name/ref out=$work/$name/killed log=$work/$name/log t0 t1 span i pid delay n rc killed=0 what=()
  mkdir -p "$work/$name"
  t0=$(now_ms)
  "$@" --out "$ref" > "$log" 2>&1 || { echo "kill_anywhere: $name's uninterrupted run failed:" >&2; tail -20 "$log" >&2; exit 1; }
  t1=$(now_ms)
  span=$((t1 - t0 > 50 ? t1 - t0 : 50))
  for ((i = 1; i <= kills; i++)); do
    if ((i % 2 == 1)); then
      # A random moment early enough that the restarted run (which resumes, so it has less to do) is still
      # running: between 5% of the uninterrupted run's wall time and 5% plus 90% of it over the kills.
      delay=$((span / 20 + RANDOM * (span * 9 / 10 / kills) / 32768))
      "$@" --out "$out" >> "$log" 2>&1 &
      pid=$!
      sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
      if kill -9 "$pid" 2>/dev/null; then killed=$((killed + 1)); what+=("at ${delay} ms"); else what+=("(ended before ${delay} ms)"); fi
      wait "$pid" 2>/dev/null || true
    else
      # One of the first writes left: the uninterrupted run's commits spread over the kills.
      n=$((1 + RANDOM % (writes / kills > 1 ? writes / kills : 1)))
      rc=0
      LWCL_KILL_IN_WRITE=$n "$@" --out "$out" >> "$log" 2>&1 || rc=$?
      if [ "$rc" = 137 ]; then
        killed=$((killed + 1))
        what+=("in write $n")
      elif [ "$rc" = 0 ]; then
        what+=("(ended before write $n)")
      else
        echo "kill_anywhere: $name exited $rc after a kill; its log:" >&2
        tail -20 "$log" >&2
        exit 1
      fi
    fi
  done
  "$@" --out "$out" >> "$log" 2>&1 || { echo "kill_anywhere: $name did not finish after the kills:" >&2; tail -20 "$log" >&2; exit 1; }
  ((killed * 2 >= kills)) || { echo "kill_anywhere: $name was killed only $killed times of $kills tries (${what[*]:-}):" \
                                    "every run ended first" >&2; exit 1; }
  local f
  for f in $files; do
    cmp "$ref/$f" "$out/$f" || { echo "kill_anywhere: $name: $f differs from the uninterrupted run's" >&2; exit 1; }
  done
  local left
  left=$(find "$out" -name '*.tmp*')
  [ -z "$left" ] || { echo "kill_anywhere: $name left temporary files: $left" >&2; exit 1; }
  echo "kill_anywhere: $name: $killed kills (${what[*]:-}; uninterrupted run ${span} ms); bitwise the same $files;" \
       "no temporaries"
}

# full <name> <file of a checkpoint> <files to compare> -- <command without --out>: a full disk. The
# run is killed once it has a checkpoint, then restarted under a file-size limit of half that checkpoint
# file (SIGXFSZ ignored, so a write past it fails with EFBIG, as a full disk fails a writer): it must stop
# with an error naming the file and the reason, leaving its last checkpoint, from which a restart without
# the limit resumes and ends bitwise as the uninterrupted run.
full() {
  local name=$1 big=$2 files=$3
  shift 4
  local ref=$work/$name/ref out=$work/$name/full log=$work/$name/full.log pid latest limit rc=0
  "$@" --out "$out" > "$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ ! -e "$out/checkpoints/latest" ]; do sleep 0.01; done
  kill -9 "$pid" 2>/dev/null || { echo "kill_anywhere: $name finished before its first checkpoint" >&2; exit 1; }
  wait "$pid" 2>/dev/null || true
  latest=$(cat "$out/checkpoints/latest")
  limit=$(( $(stat -c %s "$ref/checkpoints/$(cat "$ref/checkpoints/latest")/$big") / 2048 ))
  ((limit > 0)) || { echo "kill_anywhere: $name's $big is too small for a file-size limit of half of it" >&2; exit 1; }
  (trap '' XFSZ; ulimit -f "$limit"; exec "$@" --out "$out") >> "$log" 2> "$work/$name/full.err" || rc=$?
  [ "$rc" != 0 ] || { echo "kill_anywhere: $name finished under a $limit KiB file-size limit" >&2; exit 1; }
  grep -q "the file-size limit was reached" "$work/$name/full.err" && grep -q "cannot write '" "$work/$name/full.err" || {
    echo "kill_anywhere: $name under the file-size limit exited $rc without naming it:" >&2
    cat "$work/$name/full.err" >&2
    exit 1
  }
  [ -s "$out/checkpoints/$(cat "$out/checkpoints/latest")/state.json" ] ||
    { echo "kill_anywhere: $name: no readable checkpoint after the failed write" >&2; exit 1; }
  "$@" --out "$out" > "$work/$name/resume.log" 2>&1 ||
    { echo "kill_anywhere: $name did not resume after the full disk:" >&2; tail "$work/$name/resume.log" >&2; exit 1; }
  grep -q "resum" "$work/$name/resume.log" || { echo "kill_anywhere: $name started afresh after the full disk" >&2; exit 1; }
  local f
  for f in $files; do
    cmp "$ref/$f" "$out/$f" || { echo "kill_anywhere: $name: $f differs after the full disk" >&2; exit 1; }
  done
  [ -z "$(find "$out" -name '*.tmp*')" ] || { echo "kill_anywhere: $name left temporaries after the full disk" >&2; exit 1; }
  echo "kill_anywhere: $name: killed with checkpoint $latest, then under a $limit KiB file-size limit: $(head -c 300 "$work/$name/full.err" | tr '\n' ' ')"
  echo "kill_anywhere: $name: resumed without the limit to bitwise the same $files"
}

teacher=("$x/train_teacher" --data "$work/data" --quiet --width 64 --layers 2 --heads 4 --ffn 128 --seq 32 --batch 8
         --steps 40 --checkpoint-every 4 --eval-every 10)
cycle train_teacher 60 "model/model.safetensors model/config.json" -- "${teacher[@]}"
full train_teacher model.safetensors "model/model.safetensors" -- "${teacher[@]}"
cycle prune 8 "model/model.safetensors model/config.json" -- \
  "$x/prune" --model "$work/teacher/model" --data "$work/data" --criterion wanda_sp --ratio 0.5 --calib-batches 2 \
  --batch 4 --seq 32 --eval-tokens 1000
recover=("$x/recover" --teacher "$work/teacher/model" --student "$work/prune/ref/model" --data "$work/data"
         --budget steps:60 --curriculum lwcl --cache disk --batch 4 --seq 32 --feature-batches 3 --checkpoint-every 5)
cycle recover 120 "student/model.safetensors" -- "${recover[@]}"
full recover student.bin "student/model.safetensors" -- "${recover[@]}"
rm -rf "$work"
