#!/usr/bin/env bash
# experiments/prune end to end: trains a small llama (GQA) teacher on the project's docs, prunes it with
# several criteria and granularities, and checks each summary.json (widths, parameter and FLOP
# reduction, perplexities with protocol) and that eval_model reloads every pruned checkpoint; bad
# arguments and an unsupported family fail with a clear message.
#   prune_program.sh <build dir with experiments/> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
source "$src/tests/support/docs_corpus.sh"
make_docs_data "$build" "$src" "$work"
"$build/experiments/train_teacher" --data "$work/data" --out "$work/teacher" --family llama --quiet --width 64 --layers 4 \
  --heads 8 --kv-heads 2 --ffn 96 --seq 32 --batch 8 --steps 30 >/dev/null

check_summary() {  # folder, expected parameter reduction: "less" or "none"
  python3 - "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["parameters_after"] < s["parameters_before"], s
assert s["flops_per_token_after"] < s["flops_per_token_before"], s
# The held-out sample: windows of --seq over every validation document (README.md is the one here).
assert s["perplexity_protocol"].startswith("split=validation sample=62 windows of 32 over all 1 documents"), s
assert s["perplexity_after"] > 1 and s["perplexity_before"] > 1, s
for l in s["layers_after"]:
    assert l["n_heads"] % l["n_kv_heads"] == 0 and l["ffn"] >= 1, l
print("%s: params %d -> %d, ppl %.2f -> %.2f" % (s["criterion"], s["parameters_before"], s["parameters_after"],
                                                 s["perplexity_before"], s["perplexity_after"]))
PY
}
run() {  # name, prune arguments...
  local name=$1
  shift
  "$build/experiments/prune" --model "$work/teacher/model" --data "$work/data" --calib-batches 2 --batch 4 --seq 32 \
    --eval-tokens 2000 --out "$work/$name" "$@" >"$work/$name.log"
  check_summary "$work/$name"
  "$build/experiments/eval_model" "$work/$name/model" "$src/README.md" --seq-len 32 | grep '^perplexity ' >/dev/null  # reads all: grep -q could end the pipe early (SIGPIPE under pipefail)
}
run wanda --criterion wanda_sp --ratio 0.5
run flap --criterion flap --global --joint --param-ratio 0.3
run taylor --criterion taylor --granularity heads --head-mode query_heads --ratio 0.5
run bi --criterion block_influence --granularity layers --ratio 0.5
run laco --criterion layer_collapse --threshold -1 --ratio 0.25

# The GQA widths: 50% of KV groups keeps 1 of 2 groups with its 4 query heads in every layer.
python3 - "$work/wanda/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert all(l == {"n_heads": 4, "n_kv_heads": 1, "ffn": 48} for l in s["layers_after"]), s["layers_after"]
PY
# FLAP as published: the joint ranking, recorded, with bias compensation.
python3 - "$work/flap/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["joint"] is True and s["global"] is True and s["bias_compensation"] is True, s
PY
# query_heads mode keeps both KV groups with 2 query heads each.
python3 - "$work/taylor/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert all(l == {"n_heads": 4, "n_kv_heads": 2, "ffn": 96} for l in s["layers_after"]), s["layers_after"]
PY

# Bad input: a clear error, exit status 2.
expect_error() {  # message, prune arguments...
  local msg=$1
  shift
  if "$build/experiments/prune" --model "$work/teacher/model" --data "$work/data" --out "$work/bad" "$@" >"$work/bad.log" 2>&1; then
    echo "prune_program: expected failure for $*" >&2
    exit 1
  fi
  grep -q "$msg" "$work/bad.log" || { echo "prune_program: missing '$msg' in:" >&2; cat "$work/bad.log" >&2; exit 1; }
}
expect_error "is outside \[0, 1)" --criterion magnitude_l1 --ratio 1.0
expect_error "would leave layer 0 with no KV group" --criterion magnitude_l1 --ratio 0.8
expect_error "criterion 'nope' is unknown" --criterion nope
expect_error "block_influence scores whole layers only" --criterion block_influence --ratio 0.5
expect_error "needs the global allocation" --criterion flap --joint --ratio 0.3
# An unsupported family (an encoder checkpoint).
if "$build/experiments/prune" --model "$src/tests/data/hf/bert" --data "$work/data" --out "$work/bad" >"$work/bad.log" 2>&1; then
  echo "prune_program: pruning a bert checkpoint should fail" >&2
  exit 1
fi
grep -q "family bert is an encoder" "$work/bad.log" || { cat "$work/bad.log" >&2; exit 1; }
echo "prune_program: all checks passed"
rm -rf "$work"
