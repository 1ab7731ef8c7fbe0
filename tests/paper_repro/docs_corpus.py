#!/usr/bin/env python3
"""A small corpus for run_all.sh's tests, made of the project's docs: docs/*.md in name order, alternately
kjv and austen (the corpora run_all.sh expects); per corpus the first two are test, the next two
validation, the rest train (Markdown splits into few of make_mc_tasks.py's sentences: 4 items a task).
    docs_corpus.py <source dir> <corpus dir>"""
import json
import os
import shutil
import sys

src, root = sys.argv[1], sys.argv[2]
docs, seen = [], {"kjv": 0, "austen": 0}
for corpus in seen:
    os.makedirs(os.path.join(root, corpus), exist_ok=True)
for i, f in enumerate(sorted(os.listdir(os.path.join(src, "docs")))):
    if not f.endswith(".md"):
        continue
    corpus = ("kjv", "austen")[i % 2]
    k = seen[corpus]
    seen[corpus] += 1
    shutil.copy(os.path.join(src, "docs", f), os.path.join(root, corpus, f))
    docs.append({"path": f"{corpus}/{f}", "corpus": corpus, "split": "test" if k < 2 else "validation" if k < 4 else "train"})
json.dump({"documents": docs}, open(os.path.join(root, "manifest.json"), "w"))
