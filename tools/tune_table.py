#!/usr/bin/env python3
"""Picks each method's setting on the validation sample and reports it on the test split: for every
method of lwcl_vs_kd seeds runs (one run directory per setting; a setting's flags are read from
<dir>.flags beside it, or are the run's --lr), the mean +- sd validation and test perplexity at each
setting and, with --base METHOD=DIR, the change of the mean against that method's run in DIR (what the
setting bought); then the setting with the lowest mean validation perplexity, and its test figure.
minilm_compress runs are read the same way with the embedding cosine with the teacher in place of
perplexity (the highest mean validation cosine chosen).
   tune_table.py [--base METHOD=DIR]... <run dir per setting>..."""
import json
import os
import sys


def setting(d, cfg):
    flags = d.rstrip("/") + ".flags"
    if os.path.exists(flags):
        text = open(flags).read().strip()
        return text if text else "(defaults)"
    return f"--lr {cfg['lr']:g}"


def pm(s, digits=3):
    return f"{s['mean']:.{digits}f} +- {s['sd']:.{digits}f}"


# (validation key, test key, column name, better: +1 higher, -1 lower, digits) of a method's figures.
PPL = ("val_ppl", "test_ppl", "ppl", -1, 3)
COSINE = ("cosine", "test_cosine", "cosine", +1, 4)


def main(args):
    bases, dirs = {}, []
    while args:
        a = args.pop(0)
        if a == "--base":
            method, d = args.pop(0).split("=", 1)
            bases[method] = os.path.normpath(d)
        else:
            dirs.append(a)
    runs = []
    for d in dirs:
        if not os.path.exists(os.path.join(d, "report.json")):
            print(f"(skipped {d}: no report.json yet)", file=sys.stderr)
            continue
        rep = json.load(open(os.path.join(d, "report.json")))
        cfg = json.load(open(os.path.join(d, "config.json")))
        runs.append((os.path.normpath(d), setting(d, cfg), {m["name"]: m for m in rep["methods"]}))
    names = []
    for _, _, m in runs:
        names += [n for n in m if n not in ("teacher", "pruned") and n not in names]
    if not runs:
        sys.exit("tune_table.py: no run with a report.json")
    vk, tk, col, sign, digits = PPL if any("val_ppl" in x for _, _, m in runs for x in m.values()) else COSINE
    print(f"| method | run | setting | val {col} | test {col} | val change |")
    print("|---|---|---|---:|---:|---:|")
    best = {}
    for n in names:
        base = next((m[n] for d, _, m in runs if d == bases.get(n) and n in m), None)
        for d, label, m in runs:
            if n not in m:
                continue
            v, t = m[n][vk], m[n][tk]
            change = f"{100 * (v['mean'] / base[vk]['mean'] - 1):+.2f}%" if base else "-"
            print(f"| {n} | {os.path.basename(d)} | `{label}` | {pm(v, digits)} | {pm(t, digits)} | {change} |")
            if n not in best or sign * (v["mean"] - best[n][2][vk]["mean"]) > 0:
                best[n] = (d, label, m[n])
    print("\nchosen on validation, reported on test:\n")
    print(f"| method | run | setting | val {col} | test {col} |")
    print("|---|---|---|---:|---:|")
    for n, (d, label, m) in best.items():
        print(f"| {n} | {os.path.basename(d)} | `{label}` | {pm(m[vk], digits)} | {pm(m[tk], digits)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
