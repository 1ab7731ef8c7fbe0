#!/usr/bin/env bash
# experiments/quantize end to end: trains a small llama (GQA) teacher on the project's docs, sweeps RTN and
# GPTQ at 4 bits per channel and in groups of 32 over two calibration seeds, and checks results.json
# (one row per setting, a perplexity per seed, packed sizes), table.md and the PNG; --save writes a packed
# folder and a dequantised Hugging Face folder that eval_model scores alike, and whose logits transformers
# reproduces; recover --fake-quant trains that model quantisation-aware; bad settings exit 2 with a clear message.
#   quantize_program.sh <build dir with experiments/> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
source "$src/tests/support/docs_corpus.sh"
source "$src/tests/support/expect_error.sh"
make_docs_data "$build" "$src" "$work"
"$build/experiments/train_teacher" --data "$work/data" --out "$work/teacher" --family llama --quiet --width 64 --layers 2 \
  --heads 4 --kv-heads 2 --ffn 128 --seq 32 --batch 8 --steps 30 >/dev/null
q=$build/experiments/quantize
common=(--data "$work/data" --splits validation --calib-batches 2 --batch 4 --seq 32
        --eval-tokens 2000)
"$q" --model "$work/teacher/model" "${common[@]}" --methods rtn,gptq --bits 4 --groups 0,32 --seeds 2 --out "$work/sweep" >"$work/sweep.log" 2>&1
python3 - "$work/sweep" <<'PY'
import json, math, sys
d = sys.argv[1]
doc = json.load(open(d + "/results.json"))
rows = doc["rows"]
assert [(r["method"], r["format"]) for r in rows] == [
    ("f32", "f32"), ("rtn", "int4 g0 sym f16"), ("gptq", "int4 g0 sym f16"), ("rtn", "int4 g32 sym f16"),
    ("gptq", "int4 g32 sym f16")], rows
f32 = rows[0]
for r in rows:
    n = 2 if r["method"] == "gptq" else 1
    assert len(r["validation_ppl"]) == n and all(math.isfinite(p) and p > 1 for p in r["validation_ppl"]), r
    if r["method"] != "f32":
        assert len(r["relative_output_error"]) == n and all(0 < e < 1 for e in r["relative_output_error"]), r
        assert r["model_bytes"] < f32["model_bytes"], r
        # 4-bit codes plus one f16 scale per 32 weights (g32), or per row of 64 or 128 weights (g0).
        if "g32" in r["format"]:
            assert abs(r["bits_per_weight"] - 4.5) < 1e-9, r
        else:
            assert 4 + 16 / 128 <= r["bits_per_weight"] <= 4 + 16 / 64, r
assert doc["protocols"].startswith("split=validation sample=62 windows of 32 over all 1 documents"), doc["protocols"]
table = open(d + "/table.md").read()
assert "| gptq | int4 g32 sym f16 | 4.50 |" in table and " +- " in table, table
assert open(d + "/perplexity.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
print("quantize_program: f32 %.2f; %s" % (f32["validation_ppl"][0], ", ".join(
    "%s %s %.2f" % (r["method"], r["format"], sum(r["validation_ppl"]) / len(r["validation_ppl"])) for r in rows[1:])))
PY

# One setting saved: the packed folder and the Hugging Face export score alike, and transformers reads the export.
"$q" --model "$work/teacher/model" "${common[@]}" --methods gptq --bits 4 --groups 32 --seeds 1 --out "$work/one" --save "$work/saved" >"$work/one.log" 2>&1
test -f "$work/saved/packed/model.packed.safetensors" && test ! -e "$work/saved/packed/model.safetensors"
test -f "$work/saved/hf/model.safetensors" && test -f "$work/saved/packed/config.json" && test -f "$work/saved/packed/vocab.json"
packed=$("$build/experiments/eval_model" "$work/saved/packed" "$src/README.md" --seq-len 32 | grep '^perplexity ')
hf=$("$build/experiments/eval_model" "$work/saved/hf" "$src/README.md" --seq-len 32 --dump-logits "$work/hf.logits" | grep '^perplexity ')
[ "$packed" = "$hf" ] || { echo "quantize_program: packed '$packed' but the export '$hf'" >&2; exit 1; }
ps=$(stat -c %s "$work/saved/packed/model.packed.safetensors") hs=$(stat -c %s "$work/saved/hf/model.safetensors")
[ "$((ps * 2))" -lt "$hs" ] || { echo "quantize_program: packed file $ps bytes, export $hs: not smaller" >&2; exit 1; }
echo "quantize_program: packed $ps bytes, f32 export $hs bytes; both score: $packed"
bash "$src/tests/support/hf_python.sh" "$src/tools/compare_logits.py" "$work/saved/hf" "$work/hf.logits"

# Quantisation-aware layer-wise recovery of the GPTQ model, then its RTN model at the same format.
r=$build/experiments/recover
rargs=(--teacher "$work/teacher/model" --student "$work/saved/hf" --data "$work/data" --batch 4 --seq 32 --budget steps:40)
"$r" "${rargs[@]}" --curriculum two_stage --fake-quant int4:g32 --out "$work/qat" >"$work/qat.log" 2>&1
grep -q '"fake_quant": "int4 g32 sym f16"' "$work/qat/config.json"
"$q" --model "$work/qat/student" "${common[@]}" --methods rtn --bits 4 --groups 32 --out "$work/qat_rtn" >"$work/qat_rtn.log" 2>&1
grep "^| rtn | int4 g32 sym f16 | 4.50 |" "$work/qat_rtn/table.md"
expect_error "fake quantisation (int4 g32 sym f16) trains the layer-wise visits" "$r" "${rargs[@]}" --curriculum lwcl \
  --fake-quant int4:g32 --out "$work/qat_kd"
expect_error "'int5' is not int4 or int8" "$r" "${rargs[@]}" --fake-quant int5 --out "$work/qat_bad"

expect_error "group size 48 is not a multiple of 32" "$q" --model "$work/teacher/model" "${common[@]}" --methods rtn --bits 4 --groups 48 --out "$work/bad"
expect_error "5 weight bits are not supported (expected 4 or 8)" "$q" --model "$work/teacher/model" "${common[@]}" --methods rtn --bits 5 --groups 0 \
  --out "$work/bad"
expect_error "method 'awq' (expected rtn, gptq or gptq_act)" "$q" --model "$work/teacher/model" "${common[@]}" --methods awq --out "$work/bad"
expect_error "save writes one model" "$q" --model "$work/teacher/model" "${common[@]}" --methods rtn,gptq --bits 4 --groups 0 --save "$work/bad"
echo "quantize_program: passed"
