#!/usr/bin/env bash
# experiments/nas_mp end to end: trains a small gpt2 teacher on the project's docs, runs the joint search
# and the width-then-int4 baseline at two latency targets over two seeds, and checks results.json (every
# run's choices, a subnet no larger than the teacher, finite perplexities, 4.5 bits a weight for the int4
# baseline, choices from the space), table.md, latency_table.json and the PNG; a run with the two-sided
# latency term; bad settings exit 2.
#   nas_mp_program.sh <build dir with experiments/> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
source "$src/tests/support/docs_corpus.sh"
source "$src/tests/support/expect_error.sh"
make_docs_data "$build" "$src" "$work"
"$build/experiments/train_teacher" --data "$work/data" --out "$work/teacher" --family gpt2 --quiet --width 64 --layers 2 \
  --heads 2 --ffn 128 --seq 32 --batch 8 --steps 30 >/dev/null
n=$build/experiments/nas_mp
common=(--model "$work/teacher/model" --data "$work/data" --splits validation --batch 4 --seq 32 --batches 2 --steps 6
        --finetune 2 --calib-batches 2 --eval-tokens 2000)
"$n" "${common[@]}" --methods joint,width_int4 --targets 0.4,0.9 --seeds 2 --out "$work/run" >"$work/run.log" 2>&1
python3 - "$work/run" <<'PY'
import json, math, sys
d = sys.argv[1]
doc = json.load(open(d + "/results.json"))
refs, runs = doc["references"], doc["runs"]
assert [r["method"] for r in refs] == ["teacher f32", "GPTQ int8 g32", "GPTQ int4 g32"], refs
assert len(runs) == 8, len(runs)
assert sorted({(r["method"], r["target"]) for r in runs}) == [("joint", 0.4), ("joint", 0.9), ("width_int4", 0.4), ("width_int4", 0.9)]
teacher = refs[0]
teacher_params = teacher["parameters"]
lat = json.load(open(d + "/latency_table.json"))
assert len(lat) > 0 and all(e["seconds"] > 0 and e["stream_bytes"] > 0 and e["tokens"] == 1 for e in lat), lat[:3]
entry = {(e["rows"], e["cols"], e["weight_bits"], e["group"], e["act_bits"]): e["seconds"] for e in lat}
for r in runs:
    assert len(r["choices"]) == 2 and all(math.isfinite(p) and p > 1 for p in r["ppl"]), r
    assert r["measured_step_seconds"] > 0 and r["search_resident_bytes"] > 0, r
    for c in r["choices"]:
        assert c["kv_groups"] in (1, 2) and c["ffn"] in (32, 64, 96, 128), c
        assert len(c["weight_bits"]) == 6 and len(c["act_bits"]) == 4, c
        if r["method"] == "width_int4":
            assert set(c["weight_bits"].values()) == {4} and set(c["act_bits"].values()) == {32}, c
        else:
            assert set(c["weight_bits"].values()) <= {4, 8, 32} and set(c["act_bits"].values()) <= {8, 32}, c
    if r["method"] == "width_int4":
        assert abs(r["bits_per_weight"] - 4.5) < 1e-9, r
    # The subnet is no larger than the teacher, and its predicted latency is the sum of the table's entries
    # for its linears (width 64, head dim 32, one query head per KV group): recomputed here from the table.
    assert r["parameters"] <= teacher_params, r
    want = 0.0
    for c in r["choices"]:
        k, f, wb, ab = c["kv_groups"], c["ffn"], c["weight_bits"], c["act_bits"]
        shapes = {"attn.q.weight": (32 * k, 64, "qkv"), "attn.k.weight": (32 * k, 64, "qkv"), "attn.v.weight": (32 * k, 64, "qkv"),
                  "attn.o.weight": (64, 32 * k, "o"), "mlp.fc.weight": (f, 64, "mlp_in"), "mlp.proj.weight": (64, f, "mlp_out")}
        for name, (rows, cols, site) in shapes.items():
            want += entry[(rows, cols, wb[name], 0 if wb[name] == 32 else 32, ab[site])]
    assert abs(r["predicted_linear_seconds"] - want) <= 1e-9 * want, (r["predicted_linear_seconds"], want)
table = open(d + "/table.md").read()
assert "| joint | 0.40 |" in table and "| width_int4 | 0.90 |" in table and " +- " in table, table
assert open(d + "/pareto.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
print("nas_mp_program: teacher %.2f; " % teacher["ppl"][0] + ", ".join(
    "%s %.1f seed %d: %.2f" % (r["method"], r["target"], r["seed"], r["ppl"][0]) for r in runs))
PY
# The two-sided latency term: recorded, and a joint search under it runs to the same outputs.
"$n" "${common[@]}" --methods joint --targets 0.9 --seeds 1 --latency-loss two_sided --timing-rounds 1 --out "$work/two" >"$work/two.log" 2>&1
python3 - "$work/two" <<'PY'
import json, math, sys
doc = json.load(open(sys.argv[1] + "/results.json"))
assert doc["latency_loss"] == "two_sided", doc.get("latency_loss")
(r,) = doc["runs"]
assert r["method"] == "joint" and len(r["choices"]) == 2 and all(math.isfinite(p) for p in r["ppl"]), r
assert "lambda 1 (two_sided)" in open(sys.argv[1] + "/table.md").read()
PY
expect_error "latency target 1.5 (expected a fraction in (0, 1])" "$n" "${common[@]}" --targets 1.5 --out "$work/bad"
expect_error "3 KV groups in layer 0, which has 2" "$n" "${common[@]}" --kv 3 --out "$work/bad"
expect_error "FFN candidate 48 is not a multiple of the group 32" "$n" "${common[@]}" --ffn 128,48 --out "$work/bad"
expect_error "method 'nas' (expected joint, width_int8, width_int4 or width_f32)" "$n" "${common[@]}" --methods nas --out "$work/bad"
echo "nas_mp_program: passed"
