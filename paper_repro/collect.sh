#!/usr/bin/env bash
# Copies the tables and figures of a full run of paper_repro/run_all.sh beside their programs, in
# paper_repro/results/<program>/ (table.md, table.csv, tables.json, the PNG figures, and each setting's
# report.json under reports/, which tables.json's `sources` name), with run.md saying the command, the
# date the table was written, the machine and the git revision that built the programs.
#   bash paper_repro/collect.sh [run dir] [revision]      (run dir: runs/paper_repro; revision: HEAD)
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:-runs/paper_repro}
rev=${2:-$(git rev-parse --short HEAD)}
dest=paper_repro/results
found=0
for dir in "$run"/*/; do
  name=$(basename "$dir")
  [ -f "$dir/table.md" ] || continue
  found=1
  out="$dest/$name"
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp/reports"
  cp "$dir/table.md" "$dir/table.csv" "$dir/tables.json" "$out.tmp/"
  find "$dir" -maxdepth 1 -name '*.png' -exec cp {} "$out.tmp/" \;
  python3 - "$dir" "$out.tmp/reports" <<'PY'
import json, os, shutil, sys
run_dir, reports = sys.argv[1], sys.argv[2]
tables = json.load(open(os.path.join(run_dir, "tables.json")))
for src in tables.get("sources", []):
    rel = os.path.relpath(src, os.path.dirname(os.path.normpath(run_dir)))
    target = os.path.join(reports, rel.replace(os.sep, "__"))
    shutil.copy(src, target)
PY
  written=$(date -u -r "$dir/table.md" '+%Y-%m-%d %H:%M UTC')
  machine=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('machine', 'unknown'))" "$dir/tables.json")
  wall=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1])).get('wall_seconds', 0) / 60, 1))" "$dir/tables.json")
  cmd=$(grep -a -m1 '^run_all command: ' "$run/$name.log" 2>/dev/null | sed 's/^run_all command: //' || true)
  {
    echo "# $name"
    echo
    echo "- command: \`${cmd:-bash paper_repro/run_all.sh}\` (from \`bash paper_repro/run_all.sh\`)"
    # A table run_all.sh split over the processors: each part's command and minutes, then the whole
    # run above (every cell read back).
    for k in 0 1; do
      part=$dir/run_all.part$k.done
      [ -f "$part" ] || continue
      pcmd=$(grep -a -m1 '^run_all command: ' "$run/$name.part$k.log" 2>/dev/null | sed 's/^run_all command: //' || true)
      pmin=$(awk '/^seconds / { printf "%.1f", $2 / 60 }' "$part")
      echo "  - part $k, its criteria alone, before the whole run read every cell back: \`$pcmd\` ($pmin min)"
    done
    echo "- written: $written, after $wall min"
    echo "- machine: $machine"
    echo "- revision: $rev"
    echo
    cat "$dir/table.md"
  } > "$out.tmp/run.md"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  echo "collect.sh: $out"
done
[ $found = 1 ] || { echo "collect.sh: no table.md under $run" >&2; exit 1; }
