#!/usr/bin/env python3
"""Picks each method's setting on the validation sample and reports it on the test split: for every
method of lwcl_vs_kd seeds runs (one run directory per setting; a setting's flags are read from
<dir>.flags beside it, or are the run's --lr), the mean +- sd validation and test perplexity at each
setting and, with --base METHOD=DIR, the change of the mean against that method's run in DIR (what the
setting bought); then the setting with the lowest mean validation perplexity, and its test figure.
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


def pm(s):
    return f"{s['mean']:.3f} +- {s['sd']:.3f}"


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
    print("| method | run | setting | val ppl | test ppl | val change |")
    print("|---|---|---|---:|---:|---:|")
    best = {}
    for n in names:
        base = next((m[n] for d, _, m in runs if d == bases.get(n) and n in m), None)
        for d, label, m in runs:
            if n not in m:
                continue
            v, t = m[n]["val_ppl"], m[n]["test_ppl"]
            change = f"{100 * (v['mean'] / base['val_ppl']['mean'] - 1):+.2f}%" if base else "-"
            print(f"| {n} | {os.path.basename(d)} | `{label}` | {pm(v)} | {pm(t)} | {change} |")
            if n not in best or v["mean"] < best[n][2]["val_ppl"]["mean"]:
                best[n] = (d, label, m[n])
    print("\nchosen on validation, reported on test:\n")
    print("| method | run | setting | val ppl | test ppl |")
    print("|---|---|---|---:|---:|")
    for n, (d, label, m) in best.items():
        print(f"| {n} | {os.path.basename(d)} | `{label}` | {pm(m['val_ppl'])} | {pm(m['test_ppl'])} |")


if __name__ == "__main__":
    main(sys.argv[1:])
