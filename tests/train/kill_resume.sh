#!/usr/bin/env bash
# Kills experiments/train_teacher with SIGKILL at a random step, reruns the same command (which resumes
# from the last complete checkpoint) and checks that the final model and the per-step losses are bitwise
# those of an uninterrupted run; then scores the trained model with experiments/eval_model and checks its
# protocol line and logits dump. The corpus is the project's own docs/ (train) and README.md (validation).
#   kill_resume.sh <build dir with experiments/> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
source "$src/tests/support/docs_corpus.sh"
make_docs_data "$build" "$src" "$work"

steps=40
train=("$build/experiments/train_teacher" --data "$work/data" --quiet --width 64 --layers 2 --heads 4 --ffn 128
       --seq 64 --batch 8 --steps "$steps" --checkpoint-every 4 --eval-every 10)
"${train[@]}" --out "$work/a" >/dev/null

# Kill once the run has logged a random number of steps (1 .. steps-1).
target=$((1 + RANDOM % (steps - 1)))
"${train[@]}" --out "$work/b" >/dev/null &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  done_steps=$(wc -l < "$work/b/metrics.jsonl" 2>/dev/null || echo 0)
  [ "$done_steps" -ge "$target" ] && break
  sleep 0.01
done
if ! kill -9 "$pid" 2>/dev/null; then
  echo "kill_resume: the run finished before the kill at step $target; make it slower" >&2
  exit 1
fi
wait "$pid" 2>/dev/null || true
logged=$(wc -l < "$work/b/metrics.jsonl")
echo "kill_resume: killed after $logged logged steps (target $target); latest checkpoint: $(cat "$work/b/checkpoints/latest" 2>/dev/null || echo none)"
[ -e "$work/b/model" ] && { echo "kill_resume: the killed run already wrote its final model" >&2; exit 1; }
"${train[@]}" --out "$work/b" | grep -E "resum|trained" || true

cmp "$work/a/model/model.safetensors" "$work/b/model/model.safetensors"
strip() { sed -E 's/,?"seconds":[^,}]*//' "$1"; }
if ! diff <(strip "$work/a/metrics.jsonl") <(strip "$work/b/metrics.jsonl") >/dev/null; then
  echo "kill_resume: per-step records differ" >&2
  diff <(strip "$work/a/metrics.jsonl") <(strip "$work/b/metrics.jsonl") | head >&2
  exit 1
fi
echo "kill_resume: resumed run is bitwise identical to the uninterrupted one ($steps steps, killed at step $logged)"

# eval_model on the trained folder: perplexity with its protocol, and a logits dump of the right size.
out=$("$build/experiments/eval_model" "$work/a/model" "$src/README.md" --seq-len 64 --stride 32 --split readme \
      --dump-logits "$work/logits.bin")
echo "$out"
grep -Eq '^perplexity [0-9.]+ .*split=readme seq_len=64 stride=32 tokens=[0-9]+\)$' <<< "$out"  # no pipe: grep -q may exit before echo has written
vocab=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$work/a/model/config.json")
size=$(stat -c %s "$work/logits.bin")
[ "$size" -eq $((32 + 4 * 64 + 4 * 64 * vocab)) ] || { echo "eval_model: dump has $size bytes" >&2; exit 1; }
[ "$(head -c 8 "$work/logits.bin")" = "LWCLLGT1" ]
rm -rf "$work"
