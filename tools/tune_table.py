#!/usr/bin/env python3
"""Picks each method's setting on the validation sample and reports it on the test split: for every
method of lwcl_vs_kd seeds runs (one run directory per setting), the mean +- sd validation and test
perplexity at each setting, the setting with the lowest mean validation perplexity, and its test figure.
   tune_table.py <run dir per setting>..."""
import json
import os
import sys


def main(dirs):
    runs = {}
    for d in dirs:
        rep = json.load(open(os.path.join(d, "report.json")))
        cfg = json.load(open(os.path.join(d, "config.json")))
        runs[d] = (cfg, {m["name"]: m for m in rep["methods"]})
    names = [n for n in next(iter(runs.values()))[1] if n not in ("teacher", "pruned")]
    print("| method | setting | val ppl | test ppl |")
    print("|---|---|---:|---:|")
    best = {}
    for n in names:
        for d, (cfg, m) in sorted(runs.items(), key=lambda kv: kv[1][0]["lr"]):
            v, t = m[n]["val_ppl"], m[n]["test_ppl"]
            print(f"| {n} | lr {cfg['lr']:g} | {v['mean']:.3f} +- {v['sd']:.3f} | {t['mean']:.3f} +- {t['sd']:.3f} |")
            if n not in best or v["mean"] < best[n][1]["val_ppl"]["mean"]:
                best[n] = (cfg, m[n])
    print("\nchosen on validation, reported on test:\n")
    print("| method | lr | val ppl | test ppl |")
    print("|---|---:|---:|---:|")
    for n, (cfg, m) in best.items():
        print(f"| {n} | {cfg['lr']:g} | {m['val_ppl']['mean']:.3f} +- {m['val_ppl']['sd']:.3f} | "
              f"{m['test_ppl']['mean']:.3f} +- {m['test_ppl']['sd']:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
