#!/usr/bin/env bash
# experiments/gelaco end to end on a small trained teacher: the front (JSON and PNG), the students with
# their summaries, a student recovered by `recover` through its layer map, the students recovered by
# gelaco_recover (LWCL and end-to-end KD, two seeds) with its errors, and a search killed inside
# its checkpoint write and rerun, which must end with bitwise the same checkpoint and the same front.
#   gelaco_program.sh <build dir with experiments/> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
source "$src/tests/support/docs_corpus.sh"
make_docs_teacher "$build" "$src" "$work"
x=$build/experiments
run=("$x/gelaco" --model "$work/teacher/model" --data "$work/data" --population 12 --generations 4 --seq 32 --batch 4
     --calib-batches 1 --eval-tokens 500 --sample-tokens 6 --threads 2)
"${run[@]}" --out "$work/ref" > "$work/ref.log" 2>&1 || { tail -30 "$work/ref.log" >&2; exit 1; }
for f in front.json front.png search.json; do
  [ -s "$work/ref/$f" ] || { echo "gelaco_program: no $f" >&2; exit 1; }
done
python3 - "$work/ref" <<'PY'
import json, os, sys
out = sys.argv[1]
j = json.load(open(os.path.join(out, "front.json")))
assert j["front"], "an empty front"
front = j["front"]
for a, b in zip(front, front[1:]):  # by compression; quality falls as compression rises
    assert a["compression"] < b["compression"] and a["quality"] > b["quality"], (a["key"], b["key"])
assert j["hypervolume"] > 0, j["hypervolume"]
assert j["evaluations"] > 0 and j["evaluations_per_second"] > 0
names = {s["name"] for s in j["students"]}
for want in ("gelaco_remove1", "gelaco_remove2", "shortgpt_remove1", "shortgpt_remove2", "gelaco_knee"):
    assert want in names, (want, names)
for s in j["students"]:
    d = os.path.join(out, "students", s["name"])
    summ = json.load(open(os.path.join(d, "summary.json")))
    b = summ["boundaries"]
    cfg = json.load(open(os.path.join(d, "model", "config.json")))
    layers = cfg.get("n_layer", cfg.get("num_hidden_layers"))
    assert len(b) == layers + 1 and b[0] == 0 and b[-1] == 4, (s["name"], b, layers)
    assert summ["layers_removed"] == 4 - layers
    assert summ["perplexity_after"] > 0 and summ["parameters_after"] < summ["parameters_before"]
print("gelaco_program: front of %d points, hypervolume %.4f, %d students" % (len(front), j["hypervolume"], len(j["students"])))
PY
# A student recovered by the layer-wise pipeline through its layer map (summary.json beside it).
"$x/recover" --teacher "$work/teacher/model" --student "$work/ref/students/gelaco_remove2/model" --data "$work/data" \
  --budget steps:12 --curriculum lwcl --batch 4 --seq 32 --feature-batches 2 --out "$work/recovered" > "$work/recover.log" 2>&1 ||
  { tail -20 "$work/recover.log" >&2; exit 1; }
want=$(python3 -c "import json,sys; print(', '.join(map(str, json.load(open(sys.argv[1]))['boundaries'])))" \
       "$work/ref/students/gelaco_remove2/summary.json")
grep -qF "recover: layer map [$want]" "$work/recover.log" ||
  { echo "gelaco_program: recover did not take the layer map [$want] of summary.json" >&2; tail -20 "$work/recover.log" >&2; exit 1; }
[ -s "$work/recovered/student/model.safetensors" ] || { echo "gelaco_program: recover wrote no student" >&2; exit 1; }
# The search's students recovered by LWCL through their layer maps (also closing with end-to-end KD on
# half its budget: lwcl_kd) and by end-to-end KD, two seeds: the table's rows and columns, every figure
# finite, each run on the student's own layer map; bad input named.
"$x/gelaco_recover" --search "$work/ref" --students gelaco_remove2,shortgpt_remove2 --data "$work/data" --budget steps:8 \
  --seeds 2 --batch 4 --seq 32 --feature-batches 2 --eval-tokens 500 --no-test-split --lwcl-kd-share 0.5 \
  > "$work/gr.log" 2>&1 ||
  { tail -30 "$work/gr.log" >&2; exit 1; }
[ -s "$work/ref/recovery/perplexity.png" ] || { echo "gelaco_program: gelaco_recover wrote no perplexity.png" >&2; exit 1; }
python3 - "$work/ref" <<'PY'
import json, math, os, sys
ref = sys.argv[1]
t = json.load(open(os.path.join(ref, "recovery", "tables.json")))
rows = t["tables"][0]["rows"]
assert [r["student"] for r in rows] == ["gelaco_remove2", "shortgpt_remove2"], rows
for r in rows:
    for k in ("pruned_val_ppl", "lwcl_val_ppl", "lwcl_kd_val_ppl", "e2e_val_ppl", "lwcl_peak_compute_bytes",
              "lwcl_kd_peak_compute_bytes", "e2e_peak_compute_bytes", "lwcl_kd_wall_seconds"):
        v = r[k]
        assert v["n"] == 2 and math.isfinite(v["mean"]) and math.isfinite(v["sd"]) and v["mean"] > 0, (r["student"], k, v)
    assert 1 < r["lwcl_val_ppl"]["mean"] < 1e4, r
    summ = json.load(open(os.path.join(ref, "students", r["student"], "summary.json")))
    for seed in (0, 1):
        rep = json.load(open(os.path.join(ref, "recovery", r["student"], "seed_%d" % seed, "report.json")))
        pruned = [m for m in rep["methods"] if m["name"] == "pruned"][0]
        assert pruned["boundaries"] == summ["boundaries"], (r["student"], pruned["boundaries"], summ["boundaries"])
        assert {m["name"] for m in rep["methods"]} == {"teacher", "pruned", "lwcl", "lwcl_kd", "e2e_kd"}, rep["methods"]
        kd = [m for m in rep["methods"] if m["name"] == "lwcl_kd"][0]
        assert kd["kd_steps"] == 4 and kd["segment_steps"] == 4, (kd["kd_steps"], kd["segment_steps"])
print("gelaco_program: gelaco_recover recovered %d students over 2 seeds through their layer maps" % len(rows))
PY
bad() {  # bad <what the message must say> <args...>
  local want=$1; shift
  if "$x/gelaco_recover" --data "$work/data" --budget steps:2 --seeds 1 --batch 4 --seq 32 --feature-batches 2 \
       --eval-tokens 500 --no-test-split --out "$work/gr_bad" "$@" > "$work/gr_bad.log" 2>&1; then
    echo "gelaco_program: gelaco_recover $* was accepted" >&2; exit 1
  fi
  grep -qF -- "$want" "$work/gr_bad.log" || { echo "gelaco_program: gelaco_recover $* did not say '$want'" >&2;
                                              cat "$work/gr_bad.log" >&2; exit 1; }
}
bad "has no front.json" --search "$work/nowhere"
bad "student 'nobody' has no" --search "$work/ref" --students nobody
make_docs_data "$build" "$src" "$work/other"
"$build/experiments/train_teacher" --data "$work/other/data" --out "$work/other/teacher" --quiet --width 32 --layers 4 \
  --heads 2 --ffn 64 --seq 32 --batch 4 --steps 2 >/dev/null
bad "is not the teacher the students were collapsed from" --search "$work/ref" --students gelaco_remove2 \
  --teacher "$work/other/teacher"
# Killed in its third checkpoint write (after the second generation, before the rename), then rerun.
rc=0
LWCL_KILL_IN_WRITE=3 "${run[@]}" --out "$work/killed" > "$work/killed.log" 2>&1 || rc=$?
[ "$rc" = 137 ] || { echo "gelaco_program: the search was not killed in its third write (exit $rc)" >&2; exit 1; }
"${run[@]}" --out "$work/killed" >> "$work/killed.log" 2>&1 || { tail -30 "$work/killed.log" >&2; exit 1; }
grep -q "resuming from" "$work/killed.log" || { echo "gelaco_program: the rerun did not resume" >&2; exit 1; }
cmp "$work/ref/search.json" "$work/killed/search.json" ||
  { echo "gelaco_program: the resumed search's checkpoint differs from the uninterrupted one" >&2; exit 1; }
python3 - "$work/ref/front.json" "$work/killed/front.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["front"] == b["front"] and a["hypervolume"] == b["hypervolume"], "the resumed front differs"
print("gelaco_program: killed in a checkpoint write and resumed to the same front and checkpoint")
PY
[ -z "$(find "$work/killed" -name '*.tmp*')" ] || { echo "gelaco_program: temporaries left" >&2; exit 1; }
rm -rf "$work"
