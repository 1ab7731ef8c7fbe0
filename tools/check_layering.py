#!/usr/bin/env python3
"""The layering check (run by ctest as `layering`): reads every include of the library, the study harness
and the programs, and fails on an arrow up or sideways.

The floors, from the ground up (DESIGN.md section 10):
  1 core | 2 tensor, data, report, codec | 3 ops, backend | 4 model, optim, quant, cache, dist
  5 prune, eval, train, search | 6 policies | 7 distill          (the library, include/lwcl/)
  8 studies                                                      (the study harness, studies/include/studies/)
  9 experiments, paper_repro, bench                              (the programs)
A library header stands on the floor of its first folder under include/lwcl/; backend/cuda/<room>/ holds
the CUDA-only parts of another room and stands on that room's floor (backend/cuda/cache/ on cache's,
backend/cuda/policies/ on policies'), or on the backend's where the room's is lower (backend/cuda/codec/
counts as backend). lwcl.hpp, the umbrella header, stands above the library.

What is reported:
- a header that includes one from a higher floor; two rooms of one floor that include each other (a circle);
- a library header that includes anything but "lwcl/..." with quotes (a forwarding header to the harness
  or a program would be an arrow up); a .cuh file in include/lwcl/ outside backend/cuda/;
- a harness header that includes a file of the programs;
- a program that includes another program folder's file, except paper_repro -> experiments (the shared
  host_instances.hpp and minilm_study.hpp: paper_repro/CMakeLists.txt puts experiments/ on its path);
- an include of "lwcl/..." or "studies/..." that does not exist, or a quoted include that none of the
  folders its CMake target searches holds. Angle-bracket includes of other libraries are not read.

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
PROGRAMS = ("experiments", "paper_repro", "bench")  # floor 9, one room each
FLOORS.update({"studies": 8, **{p: 9 for p in PROGRAMS}})
# The folders (besides the including file's own) that each program room's CMake targets search for a quoted
# include, and the sideways arrows between program rooms that are allowed.
SEARCH = {"paper_repro": ("experiments",)}
ALLOWED_SIDEWAYS = {("paper_repro", "experiments")}
any_include_re = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def room(rel):
    """The room (folder name that decides the floor) of a path relative to include/lwcl/."""
    parts = rel.parts
    if len(parts) == 1:
        return None  # lwcl.hpp
    if parts[0] == "backend" and len(parts) >= 4 and parts[1] == "cuda":
        # backend/cuda/<room>/file.cuh: the room's CUDA-only part, on the room's floor, or the backend's
        # where the room's is lower (its kernels build on the backend's CUDA basics).
        inner = parts[2]
        return "backend" if FLOORS.get(inner, 99) < FLOORS["backend"] else inner
    return parts[0]


def sources(root):
    """(file, its name as printed, its room) for every header of the library and the harness, and every
    source of the programs."""
    lwcl = root / "include" / "lwcl"
    for f in sorted(lwcl.rglob("*")):
        if f.is_file():
            yield f, f.relative_to(lwcl), "lib"
    studies = root / "studies" / "include" / "studies"
    for f in sorted(studies.rglob("*")) if studies.is_dir() else ():
        if f.is_file():
            yield f, f.relative_to(root), "studies"
    for prog in PROGRAMS:
        d = root / prog
        for f in sorted(d.rglob("*")) if d.is_dir() else ():
            if f.is_file() and f.suffix in (".cpp", ".cu", ".hpp", ".cuh", ".h") and "results" not in f.relative_to(d).parts:
                yield f, f.relative_to(root), prog


def check(root):
    problems = []
    edges = {}
    lwcl = root / "include" / "lwcl"

    def arrow(rel, src, dst, inc):
        if FLOORS[dst] > FLOORS[src]:
            problems.append(f"{rel} (floor {FLOORS[src]}, {src}) includes {inc} (floor {FLOORS[dst]}, {dst}): "
                            f"a lower floor may not include a higher one")
        if dst != src:
            edges.setdefault(src, set()).add(dst)

    for f, rel, kind in sources(root):
        if kind == "lib":
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
        else:
            src = kind
        text = f.read_text(errors="replace")
        for bracket, inc in any_include_re.findall(text):
            if inc.startswith("lwcl/"):
                target_rel = pathlib.Path(inc).relative_to("lwcl")
                dst = room(target_rel)
                if dst is None:
                    if kind == "lib":
                        problems.append(f"{rel}: includes the umbrella header {inc}")
                    continue
                if dst not in FLOORS:
                    problems.append(f"{rel}: includes {inc}, whose folder '{dst}' has no floor")
                    continue
                if not (lwcl / target_rel).is_file():
                    problems.append(f"{rel}: includes {inc}, which does not exist")
                arrow(rel, src, dst, inc)
            elif inc.startswith("studies/"):
                if kind == "lib":
                    problems.append(f"{rel} (floor {FLOORS[src]}, {src}) includes {inc}, the study harness (floor 8, "
                                    f"above the library): the library may not include it")
                    continue
                if not (root / "studies" / "include" / inc).is_file():
                    problems.append(f"{rel}: includes {inc}, which does not exist")
                arrow(rel, src, "studies", inc)
            elif bracket == '"':
                if kind == "lib":
                    problems.append(f"{rel} (floor {FLOORS[src]}, {src}) includes \"{inc}\": a library header includes "
                                    f"only lwcl/... (anything else is outside the library, above it)")
                    continue
                folders = [f.parent] + [root / d for d in SEARCH.get(src, ())]
                hit = next((d / inc for d in folders if (d / inc).is_file()), None)
                if hit is None:
                    problems.append(f"{rel}: includes \"{inc}\", which none of the folders its target searches holds "
                                    f"({', '.join(str(d.relative_to(root)) for d in folders)})")
                    continue
                hit_rel = hit.resolve().relative_to(root.resolve())
                dst = hit_rel.parts[0]
                if dst == "studies":
                    arrow(rel, src, "studies", inc)
                elif dst not in PROGRAMS:
                    problems.append(f"{rel}: includes {hit_rel}, outside the library, the harness and the programs")
                elif kind == "studies":
                    problems.append(f"{rel} (floor 8, studies) includes {hit_rel} (floor 9, {dst}): the harness may "
                                    f"not include a program's file")
                elif dst != src and (src, dst) not in ALLOWED_SIDEWAYS:
                    problems.append(f"{rel} ({src}) includes {hit_rel} ({dst}): a sideways arrow between program "
                                    f"folders (allowed: {', '.join(a + ' -> ' + b for a, b in sorted(ALLOWED_SIDEWAYS))})")
                elif dst != src:
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
    """Builds a small repository-shaped tree with one violation of each kind and expects each to be reported
    (and the allowed includes not to be)."""
    import tempfile
    L, S = "include/lwcl/", "studies/include/studies/"
    cases = {
        L + "core/up.hpp": ('#include "lwcl/distill/p.hpp"\n', "a lower floor may not include a higher one"),
        L + "ops/a.hpp": ('#include "lwcl/backend/b.hpp"\n', "reaches itself"),
        L + "backend/b.hpp": ('#include "lwcl/ops/a.hpp"\n', "reaches itself"),
        L + "policies/k.cuh": ("", "a .cuh outside backend/cuda/"),
        L + "backend/cuda/policies/ok.cuh": ('#include "lwcl/policies/concept.hpp"\n', None),
        L + "policies/concept.hpp": ("", None),
        L + "backend/cuda/codec/dev.cuh": ('#include "lwcl/backend/cuda/cuda.cuh"\n', None),
        L + "backend/cuda/cuda.cuh": ("", None),
        L + "distill/p.hpp": ('#include "lwcl/policies/concept.hpp"\n#include <vector>\n', None),
        L + "eval/h.hpp": ('#include "studies/comparison.hpp"\n', "the library may not include it"),
        L + "eval/fwd.hpp": ('#include "host_instances.hpp"\n', "a library header includes only lwcl/"),
        S + "comparison.hpp": ('#include "lwcl/distill/p.hpp"\n#include <CLI/CLI.hpp>\n', None),
        S + "sweep.hpp": ('#include "studies/comparison.hpp"\n', None),
        S + "up.hpp": ('#include "host_instances.hpp"\n', "none of the folders"),
        S + "gone.hpp": ('#include "studies/nothing.hpp"\n', "which does not exist"),
        "experiments/host_instances.hpp": ('#include "studies/comparison.hpp"\n', None),
        "experiments/side.cpp": ('#include "../paper_repro/table.hpp"\n', "a sideways arrow"),
        "experiments/t.cu": ('#include "side.cpp"\n', None),
        "paper_repro/table.hpp": ("", None),
        "paper_repro/a.cpp": ('#include "host_instances.hpp"\n#include "table.hpp"\n', None),
        "paper_repro/lost.cpp": ('#include "nowhere.hpp"\n', "none of the folders"),
        "bench/micro/cuda_bench.cuh": ("", None),
        "bench/micro/b.cu": ('#include "cuda_bench.cuh"\n', None),
        "bench/peer/x.cpp": ('#include "../../experiments/host_instances.hpp"\n', "a sideways arrow"),
    }
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        for rel, (text, _) in cases.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        problems, _ = check(root)
    failed = 0
    for rel, (_, expect) in cases.items():
        shown = rel[len(L):] if rel.startswith(L) else rel
        mine = [p for p in problems if p.startswith(shown)]
        if expect is None:
            if mine:
                print(f"self-test: {rel} is allowed but was reported: {mine}")
                failed += 1
        elif not any(expect in p for p in mine + [p for p in problems if f"'{pathlib.Path(shown).parts[0]}'" in p]):
            print(f"self-test: {rel} should be reported with '{expect}', got {problems}")
            failed += 1
    print(f"layering self-test: {len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    problems, edges = check(ROOT)
    if "--graph" in sys.argv:
        for a, targets in sorted(edges.items(), key=lambda kv: (FLOORS[kv[0]], kv[0])):
            print(f"{FLOORS[a]} {a} -> {', '.join(sorted(targets, key=lambda t: (FLOORS[t], t)))}")
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} problem(s)")
        return 1
    counts = {}
    for _, _, kind in sources(ROOT):
        counts[kind] = counts.get(kind, 0) + 1
    print("layering: " + ", ".join(f"{n} files in {'include/lwcl' if k == 'lib' else k}" for k, n in counts.items())
          + ", no problem")
    return 0


if __name__ == "__main__":
    sys.exit(main())
