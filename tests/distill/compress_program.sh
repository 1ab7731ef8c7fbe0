#!/usr/bin/env bash
# experiments/compress end to end on a small gpt2 teacher trained on the project's docs: one command
# prunes (the criterion named on the command line, in the bundle's pruning slot) and recovers; the run
# directory holds pruning.json, report.json and a student that is smaller than the teacher; the same
# command again resumes the finished run and leaves the same student; a layer criterion gives a shorter
# student and its layer map; a bad criterion or ratio is refused in words.
#   compress_program.sh <build dir with experiments/> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
source "$src/tests/support/docs_corpus.sh"
source "$src/tests/support/expect_error.sh"
make_docs_teacher "$build" "$src" "$work"
x=$build/experiments
common=(--teacher "$work/teacher/model" --data "$work/data" --batch 4 --seq 32 --feature-batches 3 --calib-batches 2
        --budget steps:16)
"$x/compress" "${common[@]}" --criterion wanda_sp --ratio 0.5 --out "$work/c" > "$work/c.txt"
grep -q "compress: wanda_sp removed" "$work/c.txt" || { cat "$work/c.txt"; echo "compress printed no cut" >&2; exit 1; }
python3 - "$work" <<'PY'
import json, sys, os
w = sys.argv[1]
p = json.load(open(os.path.join(w, "c", "pruning.json")))
r = json.load(open(os.path.join(w, "c", "report.json")))
assert p["criterion"] == "wanda_sp", p
assert p["group_ratio"] == 0.5, p
assert p["calibration_tokens"] == 2 * 4 * 32, p
assert 0 < p["student_parameters"] < p["teacher_parameters"], p
assert p["boundaries"] == [0, 1, 2, 3, 4], p
assert r["policies"]["pruning"] == "wanda_sp", r["policies"]
assert r["segment_steps"] == 16, r["segment_steps"]
assert r["cumulative_error"][-1] < r["cumulative_error_before"][-1], (r["cumulative_error_before"], r["cumulative_error"])
for f in ("model.safetensors", "config.json", "vocab.json", "merges.txt"):
    assert os.path.exists(os.path.join(w, "c", "student", f)), f
PY
sum1=$(sha256sum < "$work/c/student/model.safetensors")
"$x/compress" "${common[@]}" --criterion wanda_sp --ratio 0.5 --out "$work/c" > "$work/c2.txt"
grep -q "(resumed)" "$work/c2.txt" || { cat "$work/c2.txt"; echo "the same command did not resume" >&2; exit 1; }
[ "$(sha256sum < "$work/c/student/model.safetensors")" = "$sum1" ] || { echo "the resumed run changed the student" >&2; exit 1; }

# Whole layers: block influence removes half of the four.
"$x/compress" "${common[@]}" --criterion block_influence --granularity layers --ratio 0.5 --out "$work/d" > "$work/d.txt"
python3 - "$work" <<'PY'
import json, sys, os
w = sys.argv[1]
p = json.load(open(os.path.join(w, "d", "pruning.json")))
c = json.load(open(os.path.join(w, "d", "student", "config.json")))
assert len(p["kept_layers"]) == 2 and p["granularity"] == "layers", p
assert len(p["boundaries"]) == 3 and p["boundaries"][0] == 0 and p["boundaries"][-1] == 4, p
assert c["n_layer"] == 2, c
PY

expect_bad_option "--criterion: must be one of" "$x/compress" "${common[@]}" --criterion nonsense --out "$work/e"
expect_bad_option "--ratio: must be from 0 to 0.95 (got 2)" "$x/compress" "${common[@]}" --ratio 2 --out "$work/e"
expect_error "block_influence" "$x/compress" "${common[@]}" --criterion block_influence --out "$work/e"
echo "compress_program: ok"
