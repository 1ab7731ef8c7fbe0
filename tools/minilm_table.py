#!/usr/bin/env python3
"""The Markdown table of experiments/minilm_compress runs over seeds: every method's figures as mean +-
sample sd over the seeds, read from each seed's report.json (with the test pool's cosine and top-10
agreement where the runs had --test-split).
   minilm_table.py <run dir with seed_*/report.json> [more run dirs]"""
import json
import os
import statistics
import sys


def cell(vals, fmt, scale=1.0):
    if not vals:
        return "-"
    v = [x / scale for x in vals]
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return f"{fmt.format(statistics.mean(v))} +- {fmt.format(sd)}"


def main(dirs):
    for d in dirs:
        seeds = sorted(s for s in os.listdir(d) if s.startswith("seed_"))
        reps = [json.load(open(os.path.join(d, s, "report.json"))) for s in seeds]
        cfg = json.load(open(os.path.join(d, "config.json")))
        first = {m["name"]: m for m in reps[0]["methods"]}
        pr = first["pruned"]
        print(f"### {os.path.basename(d.rstrip('/'))}: budget {cfg['budget']['amount']:g} {cfg['budget']['unit']}, ratio "
              f"{cfg['ratio']}, depth {cfg['depth']}; student {pr['layers']} layers, {100 * pr['removed_fraction']:.1f}% of "
              f"all parameters removed; {len(reps)} seeds; {reps[0]['val_protocol']}\n")
        test = "test_cosine" in first["lwcl"]
        print("| method | cosine | min cosine | top-10 agreement | " + ("test cosine | test top-10 | " if test else "") +
              "peak training MiB | run peak MiB | run + cache MiB | "
              "peak RSS MiB | wall s | CPU s | GFLOPs | wall x e2e to target | FLOPs x e2e to target | reached | reloads |")
        print("|---|---:|---:|---:|" + ("---:|---:|" if test else "") + "---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in first:
            ms = [{m["name"]: m for m in r["methods"]}[name] for r in reps]
            get = lambda k: [m[k] for m in ms if k in m] if all(k in m for m in ms) else []
            reached = get("reached_target")
            reloads = get("reloads_bitwise")
            print("| " + " | ".join([
                name, cell(get("cosine"), "{:.4f}"), cell(get("min_cosine"), "{:.4f}"), cell(get("top10_agreement"), "{:.4f}")] +
                ([cell(get("test_cosine"), "{:.4f}"), cell(get("test_top10_agreement"), "{:.4f}")] if test else []) + [
                cell(get("peak_compute_bytes"), "{:.1f}", 2**20), cell(get("run_peak_compute_bytes"), "{:.1f}", 2**20),
                cell(get("run_peak_total_bytes") or get("run_peak_compute_bytes") if name.startswith("e2e") else get("run_peak_total_bytes"), "{:.1f}", 2**20),
                cell(get("peak_resident_bytes"), "{:.1f}", 2**20), cell(get("wall_seconds"), "{:.1f}"),
                cell(get("cpu_seconds"), "{:.1f}"), cell(get("train_flops"), "{:.0f}", 1e9),
                cell(get("time_to_target_ratio"), "{:.3f}"), cell(get("flops_to_target_ratio"), "{:.3f}"),
                f"{int(sum(reached))}/{len(reached)}" if reached else "-",
                ("yes" if all(r == 1 for r in reloads) else "NO") if reloads else "-"]) + " |")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
