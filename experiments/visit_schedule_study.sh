#!/usr/bin/env bash
# The visit-schedule study of experiments/results.md: LWCL alone (lwcl_vs_kd --only lwcl, the default
# two-stage bundle) on the cached tiny gpt2 teacher at 50% width, 3 seeds, at 80 and 400 steps (8 visits of
# 10 and 50 steps), for warm-up lengths 0, 1, 3, 5 and 10 steps, each with a fresh AdamW every visit and with
# each segment's optimiser kept across its visits (--keep-optimizer-state); every run scored on validation
# and on test (--test-split). The warm-up is chosen on validation; test is read once, for the choice.
# Resumable: a cell with its report.json is skipped, and a cell stopped between seeds reads its finished
# seeds back. Ends with <out>/table.md.
#   experiments/visit_schedule_study.sh [build dir (build/host)] [out dir (runs/visit_schedule)]
set -euo pipefail
build=${1:-build/host}
out=${2:-runs/visit_schedule}
mkdir -p "$out"
for steps in 80 400; do
  for keep in fresh kept; do
    for warmup in 0 1 3 5 10; do
      cell=$out/steps${steps}_${keep}_warmup${warmup}
      [ -f "$cell/report.json" ] && continue
      flags=(--warmup-steps "$warmup")
      [ "$keep" = kept ] && flags+=(--keep-optimizer-state)
      echo "== $(date -u +%H:%M:%S) $cell"
      "$build/experiments/lwcl_vs_kd" --only lwcl --budget "steps:$steps" --seeds 3 --curve-points 2 --test-split \
        "${flags[@]}" --out "$cell" > "$cell.log" 2>&1 || { tail -20 "$cell.log" >&2; exit 1; }
    done
  done
done

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]

def fig(m, key):
    v = m.get(key)
    if isinstance(v, dict):
        return v["mean"], v["sd"]
    return (v, 0.0) if v is not None else (None, None)

rows, best = [], {}
for steps in (80, 400):
    for keep in ("fresh", "kept"):
        for warmup in (0, 1, 3, 5, 10):
            rep = json.load(open(os.path.join(out, f"steps{steps}_{keep}_warmup{warmup}", "report.json")))
            m = next(x for x in rep["methods"] if x["name"] == "lwcl")
            row = {k: fig(m, k) for k in ("val_ppl", "test_ppl", "kl_teacher", "top1_agreement", "recovered_share",
                                          "peak_compute_bytes", "run_peak_compute_bytes")}
            rows.append((steps, keep, warmup, row))
            key = (steps, keep)
            if key not in best or row["val_ppl"][0] < best[key][1]:
                best[key] = (warmup, row["val_ppl"][0])

def pm(v, digits):
    return f"{v[0]:.{digits}f} +- {v[1]:.{digits}f}"

lines = ["| steps | optimiser | warm-up | val ppl | test ppl | KL to teacher | top-1 | recovered | training peak MiB | run peak MiB |",
         "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
for steps, keep, warmup, r in rows:
    mark = " (chosen on val)" if best[(steps, keep)][0] == warmup else ""
    lines.append(f"| {steps} | {keep} | {warmup}{mark} | {pm(r['val_ppl'], 3)} | {pm(r['test_ppl'], 3)} | "
                 f"{pm(r['kl_teacher'], 4)} | {pm(r['top1_agreement'], 4)} | {pm(r['recovered_share'], 4)} | "
                 f"{r['peak_compute_bytes'][0] / 2**20:.2f} | {r['run_peak_compute_bytes'][0] / 2**20:.2f} |")
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
