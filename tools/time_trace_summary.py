#!/usr/bin/env python3
"""Summarises a clang -ftime-trace JSON file: front end (parsing, template instantiation) against back
end (optimisation, code generation), the headers that took longest to parse, and the templates that
took longest to instantiate, so that a build-time change starts from a measurement.

  clang++ ... -ftime-trace -c experiments/quickstart.cpp -o quickstart.o   # writes quickstart.json
  python3 tools/time_trace_summary.py quickstart.json [--top 15]"""
import argparse
import collections
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    try:
        events = json.load(open(args.trace))["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"time_trace_summary: cannot read {args.trace} as a clang -ftime-trace file: {e}")
    totals = {e["name"][len("Total "):]: e["dur"] / 1e6 for e in events if e.get("name", "").startswith("Total ")}
    print("| phase | seconds |\n|---|---:|")
    for k in ("ExecuteCompiler", "Frontend", "Source", "InstantiateFunction", "InstantiateClass", "Backend",
              "OptModule", "CodeGenPasses", "PerformPendingInstantiations"):
        if k in totals:
            print(f"| {k} | {totals[k]:.1f} |")
    for kind, label in (("Source", "header parse"), ("InstantiateFunction", "function instantiation"),
                        ("InstantiateClass", "class instantiation"), ("OptFunction", "optimisation of a function")):
        agg = collections.Counter()
        for e in events:
            if e.get("name") == kind and e.get("ph") == "X":
                agg[e.get("args", {}).get("detail", "?")] += e["dur"] / 1e6
        if not agg:
            continue
        print(f"\nlongest {label} (seconds, inclusive):")
        for name, s in agg.most_common(args.top):
            print(f"  {s:6.2f}  {name[:160]}")


if __name__ == "__main__":
    main()
