#!/usr/bin/env python3
"""The layering check (run by ctest as `layering`): reads every include under include/lwcl/ and fails when
a header includes one from a higher floor, when two folders of one floor include each other (a circle),
or when a .cuh file sits outside backend/cuda/.

The floors, from the ground up (DESIGN.md section 10):
  1 core | 2 tensor, data, report, codec | 3 ops, backend | 4 model, optim, quant, cache, dist
  5 prune, eval, train, search | 6 policies | 7 distill
(8 is the study harness, studies/include/studies/, and above it experiments, paper_repro and bench,
outside include/: a library header that includes "studies/..." is reported.) A header stands on the floor of its first
folder under include/lwcl/; backend/cuda/<room>/ holds the CUDA-only parts of a higher room and stands
on that room's floor (backend/cuda/cache/ on cache's, backend/cuda/policies/ on policies'). lwcl.hpp,
the umbrella header, stands above them all.

  python3 tools/check_layering.py            # prints each violation, exits 1 if there is any
  python3 tools/check_layering.py --graph    # also prints which room includes which
  python3 tools/check_layering.py --self-test  # checks that a tree with each kind of violation fails
"""
import pathlib
import re
import sys

FLOORS = {
    "core": 1,
    "tensor": 2, "data": 2, "report": 2, "codec": 2,
    "ops": 3, "backend": 3,
    "model": 4, "optim": 4, "quant": 4, "cache": 4, "dist": 4,
    "prune": 5, "eval": 5, "train": 5, "search": 5,
    "policies": 6,
    "distill": 7,
}
ROOT = pathlib.Path(__file__).resolve().parent.parent
LWCL = ROOT / "include" / "lwcl"
include_re = re.compile(r'^\s*#\s*include\s*[<"](lwcl/[^>"]+)[>"]', re.M)
studies_re = re.compile(r'^\s*#\s*include\s*[<"](studies/[^>"]+)[>"]', re.M)


def room(rel):
    """The room (folder name that decides the floor) of a path relative to include/lwcl/."""
    parts = rel.parts
    if len(parts) == 1:
        return None  # lwcl.hpp
    if parts[0] == "backend" and len(parts) >= 4 and parts[1] == "cuda":
        return parts[2]  # backend/cuda/<room>/file.cuh
    return parts[0]


def check(LWCL):
    problems = []
    edges = {}
    for f in sorted(LWCL.rglob("*")):
        if not f.is_file():
            continue
        rel = f.relative_to(LWCL)
        if f.suffix == ".cuh" and rel.parts[:2] != ("backend", "cuda"):
            problems.append(f"{rel}: a .cuh outside backend/cuda/ (only nvcc builds .cuh files; host code must not need one)")
        if f.suffix not in (".hpp", ".cuh", ".h"):
            continue
        src = room(rel)
        if src is None:
            continue
        if src not in FLOORS:
            problems.append(f"{rel}: folder '{src}' has no floor; add it to FLOORS in tools/check_layering.py and DESIGN.md")
            continue
        text = f.read_text()
        for inc in studies_re.findall(text):
            problems.append(f"{rel} (floor {FLOORS[src]}, {src}) includes {inc}, the study harness (floor 8, above the "
                            f"library): the library may not include it")
        for inc in include_re.findall(text):
            target_rel = pathlib.Path(inc).relative_to("lwcl")
            dst = room(target_rel)
            if dst is None:
                problems.append(f"{rel}: includes the umbrella header {inc}")
                continue
            if dst not in FLOORS:
                problems.append(f"{rel}: includes {inc}, whose folder '{dst}' has no floor")
                continue
            if not (LWCL / target_rel).is_file():
                problems.append(f"{rel}: includes {inc}, which does not exist")
            if FLOORS[dst] > FLOORS[src]:
                problems.append(f"{rel} (floor {FLOORS[src]}, {src}) includes {inc} (floor {FLOORS[dst]}, {dst}): "
                                f"a lower floor may not include a higher one")
            if dst != src:
                edges.setdefault(src, set()).add(dst)
    # A circle among rooms of one floor: some room reaches itself through same-floor includes.
    def reaches(start, goal, seen):
        for nxt in edges.get(start, ()):
            if FLOORS[nxt] != FLOORS[goal] or nxt in seen:
                continue
            if nxt == goal:
                return True
            seen.add(nxt)
            if reaches(nxt, goal, seen):
                return True
        return False
    for a in sorted(edges):
        if reaches(a, a, set()):
            problems.append(f"room '{a}' (floor {FLOORS[a]}) reaches itself through rooms of its floor: a circle")
    return problems, edges


def self_test():
    """Builds a small tree with one violation of each kind and expects each to be reported."""
    import tempfile
    cases = {
        "core/up.hpp": ('#include "lwcl/distill/p.hpp"\n', "a lower floor may not include a higher one"),
        "ops/a.hpp": ('#include "lwcl/backend/b.hpp"\n', "reaches itself"),
        "backend/b.hpp": ('#include "lwcl/ops/a.hpp"\n', "reaches itself"),
        "policies/k.cuh": ("", "a .cuh outside backend/cuda/"),
        "backend/cuda/policies/ok.cuh": ('#include "lwcl/policies/concept.hpp"\n', None),
        "policies/concept.hpp": ("", None),
        "distill/p.hpp": ('#include "lwcl/policies/concept.hpp"\n', None),
        "eval/h.hpp": ('#include "studies/comparison.hpp"\n', "the library may not include it"),
    }
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        for rel, (text, _) in cases.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        problems, _ = check(root)
    failed = 0
    for rel, (_, expect) in cases.items():
        hits = [p for p in problems if p.startswith(rel) or f"'{pathlib.Path(rel).parts[0]}'" in p]
        if expect is None:
            if any(p.startswith(rel) for p in problems):
                print(f"self-test: {rel} is allowed but was reported: {problems}")
                failed += 1
        elif not any(expect in p for p in hits):
            print(f"self-test: {rel} should be reported with '{expect}', got {problems}")
            failed += 1
    print(f"layering self-test: {len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    problems, edges = check(LWCL)
    if "--graph" in sys.argv:
        for a, targets in sorted(edges.items(), key=lambda kv: (FLOORS[kv[0]], kv[0])):
            print(f"{FLOORS[a]} {a} -> {', '.join(sorted(targets, key=lambda t: (FLOORS[t], t)))}")
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} problem(s)")
        return 1
    print(f"layering: {sum(1 for _ in LWCL.rglob('*.hpp')) + sum(1 for _ in LWCL.rglob('*.cuh'))} headers, no problem")
    return 0


if __name__ == "__main__":
    sys.exit(main())
