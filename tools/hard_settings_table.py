#!/usr/bin/env python3
"""The Markdown table of tools/hard_settings.sh's runs: for each teacher family and setting, every
method's figures as mean +- sample sd over the seeds (from each run's seeds report.json), with the
time to end-to-end KD's final quality read off the held-out curves.
   hard_settings_table.py <out of hard_settings.sh>"""
import json
import os
import sys


def mib(x):
    return f"{x / 2**20:.1f}"


def pm(m, key, fmt="{:.2f}", scale=None):
    if key not in m:
        return "-"
    s = m[key]
    mean, sd = s["mean"], s["sd"]
    if scale:
        mean, sd = scale(mean), scale(sd)
        return f"{mean} +- {sd}"
    return f"{fmt.format(mean)} +- {fmt.format(sd)}"


def main(out):
    settings = sorted(d for d in os.listdir(out) if os.path.isfile(os.path.join(out, d, "report.json")))
    print("Every figure is mean +- sample standard deviation over 3 seeds (each its own calibration sample and data "
          "order). ppl: perplexity on the held-out test sample (windows of 128 over every test document); memory in "
          "MiB from the tracker (training: the largest segment visit or end-to-end KD's step; run: the whole run, "
          "teacher pass included; +cache: with the host feature cache) and the process's peak resident set; cost in "
          "training wall seconds, processor seconds and model FLOPs, evaluations excluded. 'x e2e to target': what "
          "the method spent until its held-out curve first reached end-to-end KD's final perplexity, over what "
          "end-to-end KD spent to reach it (seeds where it never did are left out: 'reached' counts them).\n")
    for name in settings:
        rep = json.load(open(os.path.join(out, name, "report.json")))
        if "seeds" not in rep:
            continue
        cfg = json.load(open(os.path.join(out, name, "config.json")))
        methods = {m["name"]: m for m in rep["methods"]}
        pr = methods.get("pruned", {})
        removed = pr.get("removed_fraction", {}).get("mean", 0)
        block = pr.get("block_removed_fraction", {}).get("mean", 0)
        layers = pr.get("layers", {}).get("mean", 0)
        print(f"### {name}: budget {cfg['budget']['amount']:g} {cfg['budget']['unit']}, ratio {cfg['ratio']}, depth "
              f"{cfg.get('depth', 0)}; student {int(layers)} layers, {100 * block:.1f}% of block parameters and "
              f"{100 * removed:.1f}% of all parameters removed\n")
        print("| method | test ppl | val ppl | peak training MiB | run peak MiB | run + cache MiB | peak RSS MiB | "
              "wall s | CPU s | GFLOPs | wall x e2e to target | FLOPs x e2e to target | reached | ppl / e2e at equal budget |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for mname in ("teacher", "pruned", "lwcl", "layerwise_no_curriculum", "e2e_kd"):
            if mname not in methods:
                continue
            m = methods[mname]
            trained = mname not in ("teacher", "pruned")
            reached = "-"
            if "reached_target" in m:
                reached = f"{round(sum(m['reached_target']['values']))}/{len(m['reached_target']['values'])}"
            cells = [mname, pm(m, "test_ppl", "{:.3f}"), pm(m, "val_ppl", "{:.3f}")]
            if trained:
                cells += [pm(m, "peak_compute_bytes", scale=mib), pm(m, "run_peak_compute_bytes", scale=mib),
                          pm(m, "run_peak_total_bytes", scale=mib), pm(m, "peak_resident_bytes", scale=mib),
                          pm(m, "wall_seconds", "{:.1f}"), pm(m, "cpu_seconds", "{:.1f}"),
                          pm(m, "train_flops", scale=lambda v: f"{v / 1e9:.0f}"),
                          pm(m, "time_to_target_ratio", "{:.3f}"), pm(m, "flops_to_target_ratio", "{:.3f}"), reached,
                          pm(m, "equal_budget_ppl_ratio", "{:.3f}")]
            else:
                cells += ["-"] * 11
            print("| " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
