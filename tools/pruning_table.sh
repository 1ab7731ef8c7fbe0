#!/usr/bin/env bash
# Prunes one teacher with every criterion at 20%, 35% and 50% of its parameters (no recovery) and
# prints a Markdown table of validation perplexities with the protocol, parameters removed and the
# calibration throughput. Each run's summary.json stays under <out>/.
#   tools/pruning_table.sh [teacher model folder] [prepared data] [out]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-runs/teacher_tiny_gpt2/model}
data=${2:-data/prepared}
out=${3:-runs/pruning_table}
prune=build/host/experiments/prune
[ -x "$prune" ] || { cmake --preset host >/dev/null && cmake --build --preset host --target prune -j"$(nproc)" >/dev/null; }
mkdir -p "$out"
# criterion | granularity | extra flags
runs=(
  "random|heads_and_ffn|"
  "magnitude_l1|heads_and_ffn|"
  "magnitude_l2|heads_and_ffn|"
  "wanda_sp|heads_and_ffn|"
  "wanda_sp_in_out|heads_and_ffn|"
  "flap|heads_and_ffn|--global --joint"
  "flap_pooled|heads_and_ffn|--global"
  "taylor|heads_and_ffn|"
  "activation|heads_and_ffn|"
  "block_influence|layers|"
  "layer_collapse|layers|--threshold -1"
)
for r in "${runs[@]}"; do
  IFS='|' read -r crit gran extra <<<"$r"
  for p in 0.20 0.35 0.50; do
    dir="$out/${crit}_${p}"
    # shellcheck disable=SC2086
    "$prune" --model "$model" --data "$data" --criterion "$crit" --granularity "$gran" --param-ratio "$p" $extra \
      --out "$dir" >"$dir.log" 2>&1 || { echo "pruning_table: $crit at $p failed, see $dir.log" >&2; exit 1; }
    echo "pruning_table: $crit $p done" >&2
  done
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = {}
proto = before = None
for name in sorted(os.listdir(out)):
    f = os.path.join(out, name, "summary.json")
    if not os.path.exists(f):
        continue
    s = json.load(open(f))
    crit, p = name.rsplit("_", 1)
    rows.setdefault(crit, {})[p] = s
    proto, before = s["perplexity_protocol"], s["perplexity_before"]
order = ["random", "magnitude_l1", "magnitude_l2", "wanda_sp", "wanda_sp_in_out", "flap", "flap_pooled", "taylor", "activation",
         "block_influence", "layer_collapse"]
print("teacher perplexity %.2f (%s)\n" % (before, proto))
print("| criterion | granularity | 20%: ppl (params removed) | 35% | 50% | calibration tokens/s |")
print("|---|---|---:|---:|---:|---:|")
for c in order:
    if c not in rows:
        continue
    cells = []
    for p in ("0.20", "0.35", "0.50"):
        s = rows[c].get(p)
        cells.append("%.2f (%.1f%%)" % (s["perplexity_after"], 100 * s["parameters_removed_fraction"]) if s else "-")
    s = next(iter(rows[c].values()))
    gran = s["granularity"] + (", joint" if s.get("joint") else ", global" if s.get("global") else "")
    tps = s["calibration_tokens_per_second"]
    print("| %s | %s | %s | %s |" % (c, gran, " | ".join(cells), "%.0f" % tps if tps > 0 else "- (weights only)"))
PY
