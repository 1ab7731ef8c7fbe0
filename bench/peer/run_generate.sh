#!/usr/bin/env bash
# Greedy decoding speed of lwcl (experiments/generate, key/value cache) beside Hugging Face transformers'
# generate() on the same checkpoint folder, prompt and number of new tokens, alternating the two for
# several rounds in one environment (machines here are shared and noisy). Each side runs at every thread
# count from 1 to the number of processors in every round; the table gives each setting's median
# tokens/s, and the last line compares each side's best setting and says which won. Prints the CPU model
# and features first.
#   bench/peer/run_generate.sh <checkpoint folder> [--rounds R] [--new N] [--prompt TEXT]
set -euo pipefail
cd "$(dirname "$0")/../.."
folder=$1
shift
rounds=3 new=64 prompt="And it came to pass, when the king heard these words,"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    *) echo "run_generate.sh: unknown option '$1' (expected --rounds, --new or --prompt)" >&2; exit 2 ;;
  esac
done
tools/install_deps.sh --hf
cmake --preset host >/dev/null
cmake --build --preset host --target generate -j"$(nproc)" >/dev/null
source bench/peer/side_by_side.sh
machine_line
echo "model: $folder; $new new tokens, greedy"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
declare -A times
for r in $(seq "$rounds"); do
  for t in $(seq "$(nproc)"); do
    OMP_NUM_THREADS=$t build/host/experiments/generate "$folder" --prompt "$prompt" --max-new-tokens "$new" \
      --out "$work/lwcl.json" > "$work/lwcl.txt"
    lw=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['runs'][0]['tokens_per_second'])" "$work/lwcl.json")
    out=$(bash tests/support/hf_python.sh bench/peer/generate.py "$folder" "$work/lwcl.json" --threads "$t")
    hf=$(echo "$out" | sed -n 's/^transformers tokens\/s: //p')
    echo "$out" | grep -q "same as lwcl's" || echo "round $r, $t threads: transformers' greedy tokens differ from lwcl's" >&2
    times[lwcl_$t]+="$lw "
    times[hf_$t]+="$hf "
    echo "round $r, $t thread(s): lwcl $lw tokens/s, transformers $hf tokens/s"
  done
done
args=()
for t in $(seq "$(nproc)"); do args+=("$t" "${times[lwcl_$t]}" "${times[hf_$t]}"); done
python3 - "${args[@]}" <<'PY'
import statistics, sys
a = sys.argv[1:]
rows = [(int(a[i]), [float(x) for x in a[i + 1].split()], [float(x) for x in a[i + 2].split()]) for i in range(0, len(a), 3)]
print("| threads | lwcl tokens/s (median) | transformers tokens/s (median) |")
print("|---:|---:|---:|")
for t, l, h in rows:
    print("| %d | %.1f | %.1f |" % (t, statistics.median(l), statistics.median(h)))
bl = max(rows, key=lambda r: statistics.median(r[1]))
bh = max(rows, key=lambda r: statistics.median(r[2]))
ml, mh = statistics.median(bl[1]), statistics.median(bh[2])
print("best: lwcl %.1f tokens/s at %d thread(s), transformers %.1f at %d thread(s); lwcl/transformers %.2f: %s faster"
      % (ml, bl[0], mh, bh[0], ml / mh, "lwcl" if ml > mh else "transformers"))
PY
