#!/usr/bin/env python3
"""Counts what a source file pulls in: the lwcl headers it includes transitively (and their lines), and
whether the chain reaches the heavy system headers (cblas.h, omp.h, nlohmann/json.hpp, ...).

  python3 tools/include_report.py include/lwcl/policies/curriculum/front_to_back.hpp tests/distill/test_pipeline.cpp
  python3 tools/include_report.py --default      # the headers and units the build notes track

Only the project's own includes are followed ("lwcl/..." under include/, or a file beside the includer);
system headers are recorded where they are named, not expanded."""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "include"
HEAVY = ("cblas.h", "omp.h", "nlohmann/json.hpp", "boost/hana.hpp", "png.h", "zstd.h", "cuda_runtime_api.h")
DEFAULT = [
    "include/lwcl/policies/curriculum/front_to_back.hpp",
    "include/lwcl/policies/segmentation/uniform.hpp",
    "include/lwcl/policies/cache/host.hpp",
    "include/lwcl/distill/pipeline.hpp",
    "experiments/quickstart.cpp",
    "tests/distill/test_pipeline.cpp",
]
pattern = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def includes(path):
    try:
        text = path.read_text()
    except OSError as e:
        sys.exit(f"include_report: cannot read {path}: {e}")
    return pattern.findall(text)


def walk(start):
    seen, system, stack = {}, set(), [start]
    while stack:
        f = stack.pop()
        for name in includes(f):
            target = INCLUDE / name
            if not (name.startswith("lwcl/") and target.is_file()):
                target = f.parent / name  # a quoted include beside the file (experiments/common.hpp)
            if target.is_file() and (name.startswith("lwcl/") or target.resolve().is_relative_to(ROOT)):
                target = target.resolve()
                if target not in seen:
                    seen[target] = len(target.read_text().splitlines())
                    stack.append(target)
            else:
                system.add(name)
    return seen, system


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--default", action="store_true", help="report the tracked headers and units")
    args = ap.parse_args()
    files = args.files or ([] if not args.default else DEFAULT)
    if not files:
        files = DEFAULT
    print(f"| file | lwcl headers | their lines | heavy system headers reached |")
    print(f"|---|---:|---:|---|")
    for name in files:
        p = (ROOT / name) if not pathlib.Path(name).is_absolute() else pathlib.Path(name)
        if not p.is_file():
            sys.exit(f"include_report: {name} is not a file (expected a path relative to the repository root)")
        seen, system = walk(p)
        heavy = sorted(h for h in system if h in HEAVY)
        print(f"| {name} | {len(seen)} | {sum(seen.values())} | {', '.join(heavy) or '-'} |")


if __name__ == "__main__":
    main()
