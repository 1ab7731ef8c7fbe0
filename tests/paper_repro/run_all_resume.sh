#!/usr/bin/env bash
# paper_repro/run_all.sh --quick stopped mid-run and started again: stopped with SIGTERM once its tables
# have written their first seeds, no process of it may be left; the same command then finishes, reading
# back what the stopped run finished (its teacher, its seeds), and writes the tables an uninterrupted run
# writes (the quick budgets are optimiser steps, so every figure but the timings is the same to the bit).
# A small corpus made of the project's docs (docs_corpus.py), two jobs on the two queues cut short with
# --args (efficiency_gpt2 one setting of two seeds, ablation its segmentation part), the cache of
# teachers and corpora in the work folder.
#   run_all_resume.sh <build dir> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
jobs=efficiency_gpt2,ablation
rm -rf "$work"
python3 "$src/tests/paper_repro/docs_corpus.py" "$src" "$work/corpus"
export LWCL_CACHE_DIR=$work/cache
run_all=("$src/paper_repro/run_all.sh" --quick --build "$build" --corpus "$work/corpus" --data "$work/data" --mc-items 4
         --only "$jobs" --args "efficiency_gpt2=--settings ratio0.5" --args "ablation=--parts segmentation")

# The uninterrupted run (it also fills the cache with the tokenised corpus and the teacher).
bash "${run_all[@]}" "$work/whole" > "$work/whole.log" 2>&1 || { cat "$work/whole.log" >&2; exit 1; }

# The stopped run: SIGTERM to run_all.sh alone once some table has written a seed's report.
bash "${run_all[@]}" "$work/stopped" > "$work/stopped.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  if find "$work/stopped" -regex '.*/seed_[0-9]+/report\.json' 2>/dev/null | grep -q .; then break; fi
  kill -0 "$pid" 2>/dev/null || { cat "$work/stopped.log" >&2; echo "run_all_resume: the run ended before any seed" >&2; exit 1; }
  sleep 0.2
done
find "$work/stopped" -regex '.*/seed_[0-9]+/report\.json' | grep -q . ||
  { echo "run_all_resume: no seed finished in 120 s" >&2; exit 1; }
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -ne 0 ] || { echo "run_all_resume: the stopped run exited 0" >&2; exit 1; }
# Nothing of it left: every program it ran names the work folder on its command line.
sleep 1
left=$(pgrep -f -- "$work/" || true)
if [ -n "$left" ]; then
  echo "run_all_resume: processes of the stopped run are left:" >&2
  ps -o pid,pgid,etime,args -p "$(echo "$left" | paste -sd,)" >&2
  kill -KILL $left 2>/dev/null || true
  exit 1
fi
grep -q "every process it started has ended" "$work/stopped.log" || { cat "$work/stopped.log" >&2; exit 1; }

# Started again: it finishes, reading back what the stopped run finished.
bash "${run_all[@]}" "$work/stopped" > "$work/resumed.log" 2>&1 || { cat "$work/resumed.log" >&2; exit 1; }
cat "$work/stopped"/*.log > "$work/programs_resumed.txt"
grep -q "finished before with the same configuration" "$work/programs_resumed.txt" ||
  { echo "run_all_resume: the resumed run read no finished seed back" >&2; exit 1; }
grep -q "from the cache" "$work/stopped"/teacher_*.log ||
  { echo "run_all_resume: the teacher was not taken from the cache" >&2; exit 1; }
# A third start finds every table finished: nothing runs.
bash "${run_all[@]}" "$work/stopped" > "$work/again.log" 2>&1 || { cat "$work/again.log" >&2; exit 1; }
IFS=',' read -r -a job_list <<<"$jobs"
for j in "${job_list[@]}"; do
  grep -q "$j finished before with the same command: not run again" "$work/stopped/$j.log" ||
    { echo "run_all_resume: the third start ran $j again" >&2; exit 1; }
done

python3 - "$work" "${job_list[@]}" <<'PY'
import json, math, os, sys
work, jobs = sys.argv[1], sys.argv[2:]
# What a resumed run may differ in: the wall and CPU seconds, the wall-time ratio to end-to-end KD's
# target (time_to_target_ratio: wall seconds over wall seconds), and the process's resident peak (a
# resumed process reads some seeds back instead of running them, and runs the seed it was stopped in
# again). Every other figure, the tracker's memory and the FLOPs to the target included, must be the
# uninterrupted run's.
TIMED = ("seconds", "resident", "time_to_target")
def timed(key):
    return any(t in key for t in TIMED)
def numbers(rows):
    out = {}
    for r in rows:
        label = tuple(str(v) for k, v in r.items() if not isinstance(v, dict))
        for k, v in r.items():
            if isinstance(v, dict) and not timed(k):
                out[(label, k)] = (v["mean"], v["sd"], v["n"])
    return out
checked = 0
for j in jobs:
    a = json.load(open(os.path.join(work, "whole", j, "tables.json")))
    b = json.load(open(os.path.join(work, "stopped", j, "tables.json")))
    assert [t["title"] for t in a["tables"]] == [t["title"] for t in b["tables"]], j
    for ta, tb in zip(a["tables"], b["tables"]):
        na, nb = numbers(ta["rows"]), numbers(tb["rows"])
        assert na.keys() == nb.keys(), (j, ta["title"], set(na) ^ set(nb))
        for key in na:
            assert na[key] == nb[key], (j, ta["title"], key, na[key], nb[key])
        checked += len(na)
assert checked > 40, checked
print(f"run_all_resume: stopped, nothing left, resumed: {len(jobs)} tables, {checked} figures the uninterrupted run's")
PY
