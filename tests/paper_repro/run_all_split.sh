#!/usr/bin/env bash
# paper_repro/run_all.sh --quick on a pruning table, which it runs in two parts at once on two processors
# (half the criteria each, into the table's folder) and then whole: each part ran its own criteria on its
# own processor, the whole run read every cell back (it trained nothing), the table has every criterion,
# and its cells are those of pruning_methods run alone on the same criteria (the quick budgets are
# optimiser steps: the same to the bit but for the timings). Started again, nothing runs.
#   run_all_split.sh <build dir> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
job=pruning_methods_qwen2
if [ "$(nproc)" -lt 2 ]; then
  echo "run_all_split: one processor, where run_all.sh runs every table whole: nothing to test"
  exit 77
fi
rm -rf "$work"
python3 "$src/tests/paper_repro/docs_corpus.py" "$src" "$work/corpus"
export LWCL_CACHE_DIR=$work/cache
run_all=("$src/paper_repro/run_all.sh" --quick --build "$build" --corpus "$work/corpus" --data "$work/data" --only "$job")
bash "${run_all[@]}" "$work/run" > "$work/first.log" 2>&1 || { cat "$work/first.log" >&2; exit 1; }
out=$work/run
fail() { echo "run_all_split: $*" >&2; exit 1; }

# Each part: its command on its processor with its criteria, and its marker.
criteria=(random,wanda_sp,magnitude_l1,magnitude_l2,wanda_sp_in_out flap,block_influence,flap_pooled,taylor,activation)
for k in 0 1; do
  [ -f "$out/$job/run_all.part$k.done" ] || fail "part $k has no marker"
  grep -q -- "^run_all command: .*taskset -c $k .*--criteria ${criteria[$k]}\$" "$out/$job.part$k.log" ||
    fail "part $k did not run its criteria on processor $k: $(grep -a '^run_all command' "$out/$job.part$k.log")"
done
# The whole run: no criterion named, every one of the 10 cells read back, nothing trained.
grep -q -- "^run_all command: .*taskset -c 0 " "$out/$job.log" || fail "the whole run has no command line"
if grep -a '^run_all command' "$out/$job.log" | grep -q -- --criteria; then fail "the whole run named criteria"; fi
n=$(grep -c "finished before with the same configuration" "$out/$job.log" || true)
[ "$n" = 10 ] || { cat "$out/$job.log" >&2; fail "the whole run read $n cells back, expected 10"; }
[ -f "$out/$job/run_all.done" ] || fail "the whole run has no marker"

# The same cells run alone by pruning_methods (two criteria, one of each part), in another folder.
# (The whole run's program and arguments from its marker; the work folder's path has no spaces.)
read -r -a cmd <<<"$(sed -n 's/^command //p' "$out/$job/run_all.done")"
alone=()
for a in "${cmd[@]}"; do [ "$a" = "$out/$job" ] && alone+=("$work/alone") || alone+=("$a"); done
OMP_NUM_THREADS=1 "${alone[@]}" --criteria wanda_sp,flap > "$work/alone.log" 2>&1 || { cat "$work/alone.log" >&2; fail "the alone run failed"; }

python3 - "$out/$job/tables.json" "$work/alone/tables.json" <<'PY'
import json, sys
split, alone = (json.load(open(p)) for p in sys.argv[1:])
rows = split["tables"][0]["rows"]
crit = sorted(r["criterion"] for r in rows)
want = sorted("random wanda_sp magnitude_l1 magnitude_l2 wanda_sp_in_out flap block_influence flap_pooled taylor activation".split())
assert crit == want, crit
recovered = [r for r in rows if isinstance(r.get("lwcl_steps"), dict)]
assert sorted(r["criterion"] for r in recovered) == ["block_influence", "flap", "random", "wanda_sp"], recovered
TIMED = ("seconds", "resident")
checked = 0
for a in alone["tables"][0]["rows"]:
    s = next(r for r in rows if r["criterion"] == a["criterion"] and r["removed"] == a["removed"])
    for k, v in a.items():
        if isinstance(v, dict) and not any(t in k for t in TIMED):
            assert s[k] == v, (a["criterion"], k, s[k], v)
            checked += 1
assert checked >= 20, checked
print(f"run_all_split: 2 parts on 2 processors, the whole run read 10 cells back; {checked} figures of 2 cells as run alone")
PY

# Started again: the table finished, nothing runs (no part either).
bash "${run_all[@]}" "$work/run" > "$work/again.log" 2>&1 || { cat "$work/again.log" >&2; exit 1; }
grep -q "$job finished before with the same command: not run again" "$out/$job.log" || fail "the second start ran the table again"
for k in 0 1; do
  [ "$(grep -c '^run_all command' "$out/$job.part$k.log")" = 1 ] || fail "the second start ran part $k again"
done
