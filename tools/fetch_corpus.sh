#!/usr/bin/env bash
# Produces lwcl's plain-text corpora from Debian packages, one file per document (book), and a
# manifest assigning whole documents to train / validation / test splits:
#   <out>/kjv/NN_<book>.txt        the King James Bible (package bible-kjv), verse references removed
#   <out>/austen/N_<title>.txt     Jane Austen's six novels (package r-cran-janeaustenr, via Rscript)
#   <out>/manifest.json            {"documents": [{"path", "corpus", "split", "bytes"}...]}
# Splits never cut a document. KJV: book index i (0-based, canonical order) with i % 11 == 3 is
# validation, i % 11 == 8 test, the rest train; Austen: Northanger Abbey validation, Persuasion test.
#   tools/fetch_corpus.sh [out_dir]      (default: data/corpus; data/ is outside git)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-data/corpus}
tools/install_deps.sh --corpus
tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/kjv" "$tmp/austen"

bible -f "Gen1:1-Rev22:21" | awk -v dir="$tmp/kjv" '
  {
    ref = $1; book = ref; sub(/[0-9]+:[0-9]+$/, "", book)
    if (book != last) { n++; last = book; file = sprintf("%s/%02d_%s.txt", dir, n, book) }
    sub(/^[^ ]+ /, ""); print > file
  }'
[ "$(ls "$tmp/kjv" | wc -l)" -eq 66 ] || { echo "fetch_corpus.sh: expected 66 books of the KJV" >&2; exit 1; }

Rscript --vanilla -e '
  suppressMessages(library(janeaustenr))
  b <- austen_books(); dir <- commandArgs(trailingOnly = TRUE)[1]
  titles <- levels(b$book)
  for (i in seq_along(titles)) {
    name <- gsub("[^A-Za-z]+", "_", titles[i])
    writeLines(b$text[b$book == titles[i]], file.path(dir, sprintf("%d_%s.txt", i, name)))
  }' "$tmp/austen"
[ "$(ls "$tmp/austen" | wc -l)" -eq 6 ] || { echo "fetch_corpus.sh: expected 6 Austen novels" >&2; exit 1; }

python3 - "$tmp" <<'PY'
import json, os, sys
root = sys.argv[1]
docs = []
for i, name in enumerate(sorted(os.listdir(os.path.join(root, "kjv")))):
    split = "validation" if i % 11 == 3 else "test" if i % 11 == 8 else "train"
    docs.append({"path": "kjv/" + name, "corpus": "kjv", "split": split})
for name in sorted(os.listdir(os.path.join(root, "austen"))):
    split = "validation" if "Northanger" in name else "test" if "Persuasion" in name else "train"
    docs.append({"path": "austen/" + name, "corpus": "austen", "split": split})
for d in docs:
    d["bytes"] = os.path.getsize(os.path.join(root, d["path"]))
with open(os.path.join(root, "manifest.json"), "w") as f:
    json.dump({"documents": docs}, f, indent=1)
for s in ("train", "validation", "test"):
    n = sum(d["bytes"] for d in docs if d["split"] == s)
    print("fetch_corpus.sh: %-10s %3d documents, %8d bytes" % (s, sum(d["split"] == s for d in docs), n))
PY
rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$tmp" "$out"
echo "fetch_corpus.sh: wrote $out"
