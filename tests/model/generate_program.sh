#!/usr/bin/env bash
# experiments/generate end to end: greedy text from the transformers-made llama of tests/data/mc/ (it
# carries a BPE tokenizer) equals transformers' own greedy generate() on the same folder and prompt
# ids; a seed fixes sampled text; bad requests exit 2 with a clear message.
#   generate_program.sh <build dir> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
gen=$build/experiments/generate
model=$src/tests/data/mc/llama
source "$src/tests/support/expect_error.sh"

"$gen" "$model" "$model" --prompt "The river ran past the mill and" --max-new-tokens 12 --out "$work/greedy.json" \
  > "$work/greedy.txt"
grep -q "tokens/s" "$work/greedy.txt" || { echo "generate_program: no speed printed" >&2; exit 1; }
bash "$src/tests/support/hf_python.sh" "$src/tests/model/hf_generate_check.py" "$work/greedy.json"

for i in 1 2; do
  "$gen" "$model" --prompt "In the beginning" --max-new-tokens 8 --temperature 0.9 --top-k 50 --top-p 0.95 --seed 7 \
    --out "$work/sampled_$i.json" > /dev/null
done
python3 - "$work/sampled_1.json" "$work/sampled_2.json" "$work/greedy.json" <<'PY'
import json, sys
a, b, g = (json.load(open(p)) for p in sys.argv[1:])
assert a["runs"][0]["tokens"] == b["runs"][0]["tokens"], "the same seed sampled other tokens"
assert len(a["runs"][0]["tokens"]) == 8, a
assert g["runs"][0]["tokens"] == g["runs"][1]["tokens"], "the same model twice gave other greedy tokens"
print("generate_program: a seed fixes the sampled tokens")
PY

expect_error "top_p 0 must be in (0, 1]" "$gen" "$model" --prompt "a" --temperature 1 --top-p 0
expect_error "top_p 1.5 must be in (0, 1]" "$gen" "$model" --prompt "a" --temperature 1 --top-p 1.5
expect_error "exceed the model's context of 48" "$gen" "$model" --prompt "The river ran past the mill and on" \
  --max-new-tokens 40
expect_error "give the prompt with" "$gen" "$model"
