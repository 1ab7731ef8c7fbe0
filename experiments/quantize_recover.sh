#!/usr/bin/env bash
# Quantisation followed by quantisation-aware layer-wise recovery, against quantisation alone, on one
# teacher: for each format and calibration seed, experiments/quantize writes the GPTQ (and the RTN)
# model, experiments/recover trains it segment by segment on its fake-quantised weights against the
# teacher's cached features (--fake-quant, curriculum two_stage, no final KD), and experiments/quantize
# --methods rtn quantises the recovered f32 weights to the format the training saw. Every model is scored
# on the same held-out validation and test samples. Writes <out>/table.md and <out>/results.csv (mean +-
# sample sd over the seeds) beside each step's own run directory.
#   experiments/quantize_recover.sh <teacher folder> <out> [formats (int4:g0,int4:g32)] [seeds (3)] [steps (600)] [lr (1e-4)]
set -euo pipefail
teacher=$1 out=$2 formats=${3:-int4:g0,int4:g32} seeds=${4:-3} steps=${5:-600} lr=${6:-1e-4}
build=${LWCL_BUILD:-build/host}
data=${LWCL_DATA:-data/prepared}
mkdir -p "$out"
for f in ${formats//,/ }; do
  bits=${f#int}; bits=${bits%%:*}
  group=${f#*:g}; group=${group%%:*}
  for ((s = 0; s < seeds; s++)); do
    for init in gptq rtn; do
      run=$out/${f//:/_}_${init}_seed$s
      [ -f "$run/after/results.json" ] && continue
      echo "quantize_recover: $f, $init, seed $s"
      "$build/experiments/quantize" --model "$teacher" --data "$data" --methods "$init" --bits "$bits" --groups "$group" \
        --seeds 1 --first-seed "$s" --out "$run/before" --save "$run/model" >"$run.before.log" 2>&1
      "$build/experiments/recover" --teacher "$teacher" --student "$run/model/hf" --data "$data" --batch 8 --seq 128 \
        --budget "steps:$steps" --lr "$lr" --seed "$s" --curriculum two_stage --fake-quant "$f" --out "$run/recover" \
        >"$run.recover.log" 2>&1
      "$build/experiments/quantize" --model "$run/recover/student" --data "$data" --methods rtn --bits "$bits" \
        --groups "$group" --seeds 1 --first-seed "$s" --out "$run/after" >"$run.after.log" 2>&1
    done
  done
done
python3 - "$out" "$teacher" "$steps" "$lr" <<'PY'
import glob, json, math, os, sys
out, teacher, steps, lr = sys.argv[1:]
rows = {}
f32 = None
for d in sorted(glob.glob(os.path.join(out, "*_seed*"))):
    if not os.path.isdir(d):
        continue
    name = os.path.basename(d)
    fmt, init = name.split("_")[0] + ":" + name.split("_")[1], name.split("_")[2]
    b = json.load(open(os.path.join(d, "before", "results.json")))
    a = json.load(open(os.path.join(d, "after", "results.json")))
    rep = json.load(open(os.path.join(d, "recover", "report.json")))
    f32 = b["rows"][0]
    for key, res, secs in (("%s" % init, b["rows"][1], b["rows"][1]["seconds"][0]),
                           ("%s + LWCL-QAT" % init, a["rows"][1], b["rows"][1]["seconds"][0] + rep["seconds"])):
        r = rows.setdefault((fmt, key), {"format": res["format"], "val": [], "test": [], "sec": []})
        r["val"] += res["validation_ppl"]
        r["test"] += res["test_ppl"]
        r["sec"].append(secs)
def ms(v):
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return m, sd
lines = ["# Quantisation, then quantisation-aware layer-wise recovery: %s" % teacher, "",
         "Recovery: experiments/recover --fake-quant (curriculum two_stage, no final KD), %s segment steps at lr %s, "
         "8 x 128 tokens a step; the recovered f32 weights quantised by RTN at the training's format. Seconds: "
         "quantisation, plus recovery for the recovered rows (one core). Mean +- sample sd over calibration seeds." % (steps, lr), "",
         "| method | format | validation ppl | test ppl | seconds | n |", "|---|---|---|---|---|---|"]
csv = ["method,format,val_ppl,val_ppl_sd,test_ppl,test_ppl_sd,seconds,n"]
if f32:
    lines.append("| f32 teacher | f32 | %.3f | %.3f | | 1 |" % (f32["validation_ppl"][0], f32["test_ppl"][0]))
    csv.append("f32,f32,%.6f,0,%.6f,0,0,1" % (f32["validation_ppl"][0], f32["test_ppl"][0]))
for (fmt, key), r in sorted(rows.items()):
    v, t, s = ms(r["val"]), ms(r["test"]), ms(r["sec"])
    lines.append("| %s | %s | %.3f +- %.3f | %.3f +- %.3f | %.1f | %d |" % (key, r["format"], v[0], v[1], t[0], t[1], s[0], len(r["val"])))
    csv.append("%s,%s,%.6f,%.6f,%.6f,%.6f,%.3f,%d" % (key, r["format"], v[0], v[1], t[0], t[1], s[0], len(r["val"])))
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
open(os.path.join(out, "results.csv"), "w").write("\n".join(csv) + "\n")
print("\n".join(lines))
PY
