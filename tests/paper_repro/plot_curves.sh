#!/usr/bin/env bash
# paper_repro/plot_curves on two hand-made sweeps (two run directories of seed reports, as tools/tune.sh
# leaves them): the PNG is written, each line's last-point mean and sd are the seeds' own, and bad
# sources are refused with a message naming them.
#   plot_curves.sh <build dir> <work dir>
set -euo pipefail
build=$1 work=$2
x=$build/paper_repro/plot_curves
rm -rf "$work"
mkdir -p "$work"
python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
def run(name, finals):
    for k, f in enumerate(finals):
        d = os.path.join(work, name, "seed_%d" % k)
        os.makedirs(d)
        curve = [{"step": s, "seconds": 10.0 * s, "ppl": 0.5 - (0.5 - f) * s / 4} for s in range(5)]
        rep = {"methods": [{"name": "teacher"}, {"name": "lwcl_kd", "curve": curve}, {"name": "lwcl"}]}
        json.dump(rep, open(os.path.join(d, "report.json"), "w"))
run("kd", [0.11, 0.12, 0.13])
run("e2e", [0.2, 0.3])
PY
"$x" --out "$work/curves.png" --title "two sweeps" --y-label "1 - cosine" "closing=$work/kd:lwcl_kd" \
  "e2e alone=$work/e2e:lwcl_kd" > "$work/out.txt"
head -c 8 "$work/curves.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" ||
  { echo "plot_curves: no PNG written" >&2; exit 1; }
grep -q "^closing  *3 seeds, last point 0.12 +- 0.01$" "$work/out.txt" &&
  grep -q "^e2e alone  *2 seeds, last point 0.25 +- 0.071$" "$work/out.txt" ||
  { echo "plot_curves: wrong summaries: $(cat "$work/out.txt")" >&2; exit 1; }
refused() {  # refused <expected text> <sources...>
  local want=$1 rc
  shift
  set +e
  "$x" --out "$work/bad.png" --title t "$@" > /dev/null 2> "$work/err.txt"
  rc=$?
  set -e
  [ "$rc" -eq 2 ] && grep -q -- "$want" "$work/err.txt" && [ ! -e "$work/bad.png" ] ||
    { echo "plot_curves: '$*' gave $rc: $(cat "$work/err.txt")" >&2; exit 1; }
}
refused "is not LABEL=DIR:METHOD" "$work/kd:lwcl_kd"
refused "is not a directory" "a=$work/nowhere:lwcl_kd"
refused "has no method 'e2e_hidden'" "a=$work/kd:e2e_hidden"
refused "has no curve (run it with --curve-points)" "a=$work/kd:lwcl"
refused "holds no report.json" "a=$work:lwcl"
echo "plot_curves: chart, seed summaries and refusals checked"
