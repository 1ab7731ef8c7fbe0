#!/usr/bin/env python3
"""Builds small zero-shot multiple-choice tasks from lwcl's public-domain corpora, in the jsonl layout
lm-eval-harness reads for such tasks: one object per line with "context", "choices" (a list of
strings) and "gold" (the index of the right choice), plus where the item came from ("doc", "index").

    python3 tools/make_mc_tasks.py [--corpus data/corpus] [--out data/mc] [--items 400] [--seed 1234]

Tasks, each from one split of the corpora (data/corpus/manifest.json; whole documents, so the test
items come from documents no teacher trained on):
  kjv_next_verse        which of four verses follows this one (the other three: verses of the same book)
  austen_next_sentence  which of four sentences follows this one (the other three: sentences of the same
                        novel)
written to <out>/<task>.<split>.jsonl for the validation and test splits. The draw is fixed by --seed,
so the files are the same on every machine; each is written to a temporary name and renamed.
"""
import argparse
import json
import os
import random
import re
import sys

ABBREVIATIONS = ("Mr", "Mrs", "Dr", "St", "Col", "Capt", "Lt", "Messrs")


def verses(text):
    return [line.strip() for line in text.splitlines() if line.strip()]


def sentences(text):
    """Austen's prose as sentences: paragraphs joined, split after . ! ? before a capital or a quote."""
    body = re.sub(r"\s+", " ", text)
    body = re.sub(r"^.*?Chapter 1 ", "", body)  # title page
    body = re.sub(r"\s*(CHAPTER|Chapter) [0-9IVXLC]+\s*", " ", body)
    out, start = [], 0
    for m in re.finditer(r"[.!?][\"']?\s+(?=[\"'A-Z])", body):
        end = m.end()
        words = body[start:end].rstrip().rstrip("\"'").split()
        if words and words[-1].rstrip(".") in ABBREVIATIONS:
            continue  # "Mr. Elliot": not a sentence end
        out.append(body[start:end].strip())
        start = end
    if body[start:].strip():
        out.append(body[start:].strip())
    return out


def usable(s):
    return 20 <= len(s) <= 240


def build(units_by_doc, items, rng):
    """Items whose context and right answer are consecutive units of one document; the three wrong
    choices are other units of that document, neither the context nor the answer."""
    candidates = []
    for doc, units in units_by_doc:
        for i in range(len(units) - 1):
            if usable(units[i]) and usable(units[i + 1]):
                candidates.append((doc, i))
    if len(candidates) < items:
        sys.exit("make_mc_tasks.py: only %d usable consecutive pairs, asked for %d items" % (len(candidates), items))
    units = dict(units_by_doc)
    out = []
    for doc, i in sorted(rng.sample(candidates, items)):
        pool = [j for j, u in enumerate(units[doc]) if usable(u) and j not in (i, i + 1) and u != units[doc][i + 1]]
        wrong = [units[doc][j] for j in rng.sample(pool, 3)]
        gold = rng.randrange(4)
        choices = wrong[:gold] + [units[doc][i + 1]] + wrong[gold:]
        out.append({"context": units[doc][i], "choices": choices, "gold": gold, "doc": doc, "index": i})
    return out


def write_jsonl(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--out", default="data/mc")
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    manifest_path = os.path.join(a.corpus, "manifest.json")
    if not os.path.exists(manifest_path):
        sys.exit("make_mc_tasks.py: no %s (tools/fetch_corpus.sh writes it)" % manifest_path)
    with open(manifest_path) as f:
        docs = json.load(f)["documents"]
    os.makedirs(a.out, exist_ok=True)
    for split in ("validation", "test"):
        for task, corpus, cut in (("kjv_next_verse", "kjv", verses), ("austen_next_sentence", "austen", sentences)):
            chosen = [d["path"] for d in docs if d["split"] == split and d["corpus"] == corpus]
            units = []
            for p in chosen:
                with open(os.path.join(a.corpus, p), encoding="utf-8") as f:
                    units.append((p, cut(f.read())))
            rng = random.Random("%s/%s/%d" % (task, split, a.seed))
            rows = build(units, a.items, rng)
            path = os.path.join(a.out, "%s.%s.jsonl" % (task, split))
            write_jsonl(path, rows)
            print("make_mc_tasks.py: %-22s %-10s %d items from %d documents -> %s" % (task, split, len(rows), len(chosen), path))


if __name__ == "__main__":
    main()
