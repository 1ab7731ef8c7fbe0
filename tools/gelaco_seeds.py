#!/usr/bin/env python3
"""The searches of experiments/gelaco over several seeds, side by side: for each run directory its
hypervolume, evaluations (and cache hits), evaluations per second and search seconds, and the quality and
perplexity of the best student it found at each removed count beside ShortGPT's and LaCo's at the same
count (each seed calibrates on its own batches, so the baselines move with the seed too); then the mean
and sample standard deviation over the runs. Prints Markdown.

  python3 tools/gelaco_seeds.py runs/gelaco_llama runs/gelaco_llama_s2 runs/gelaco_llama_s3
"""
import json
import os
import statistics
import sys


def load(run):
    path = os.path.join(run, "front.json")
    if not os.path.exists(path):
        sys.exit(f"gelaco_seeds: {path} does not exist (run experiments/gelaco --out {run} first)")
    with open(path) as f:
        return json.load(f)


def removed_counts(front):
    counts = []
    for s in front["students"]:
        name = s["name"]
        if name.startswith("gelaco_remove"):
            counts.append(int(name[len("gelaco_remove"):]))
    return sorted(counts)


def main(runs):
    if not runs:
        sys.exit(__doc__)
    fronts = [load(r) for r in runs]
    counts = removed_counts(fronts[0])
    methods = ("gelaco", "shortgpt", "laco")
    head = ["run", "seed", "hypervolume", "evaluations (cache hits)", "per s", "search s"]
    for n in counts:
        head += [f"{m} {n}: quality / ppl" for m in methods]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    figures = {}  # column -> values over the runs
    for run, j in zip(runs, fronts):
        by_name = {s["name"]: s for s in j["students"]}
        cells = [run, str(j["seed"]), "%.4f" % j["hypervolume"], "%d (%d)" % (j["evaluations"], j["cache_hits"]),
                 "%.2f" % j["evaluations_per_second"], "%.0f" % j["search_seconds"]]
        figures.setdefault("hypervolume", []).append(j["hypervolume"])
        for n in counts:
            for m in methods:
                s = by_name.get(f"{m}_remove{n}")
                if s is None:
                    cells.append("-")
                    continue
                cells.append("%.3f / %.2f" % (s["quality"], s["perplexity"]))
                figures.setdefault((m, n, "quality"), []).append(s["quality"])
                figures.setdefault((m, n, "ppl"), []).append(s["perplexity"])
        print("| " + " | ".join(cells) + " |")

    def ms(values):
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return statistics.mean(values), sd

    hv = ms(figures["hypervolume"])
    cells = ["mean +- sd", f"{len(runs)} seeds", "%.4f +- %.4f" % hv, "", "", ""]
    for n in counts:
        for m in methods:
            if (m, n, "quality") not in figures:
                cells.append("-")
                continue
            q, p = ms(figures[(m, n, "quality")]), ms(figures[(m, n, "ppl")])
            cells.append("%.3f +- %.3f / %.2f +- %.2f" % (q[0], q[1], p[0], p[1]))
    print("| " + " | ".join(cells) + " |")
    # How often the search's student beats each baseline on its own seed's calibration.
    for n in counts:
        g = figures.get(("gelaco", n, "quality"), [])
        for m in methods[1:]:
            b = figures.get((m, n, "quality"), [])
            if g and len(b) == len(g):
                wins = sum(1 for x, y in zip(g, b) if x > y + 1e-9)
                ties = sum(1 for x, y in zip(g, b) if abs(x - y) <= 1e-9)
                print(f"\nat {n} removed, GeLaCo's quality is above {m}'s in {wins} of {len(g)} seeds"
                      + (f" (equal in {ties})" if ties else ""), end="")
    print()


if __name__ == "__main__":
    main(sys.argv[1:])
