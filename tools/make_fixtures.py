#!/usr/bin/python3
"""Regenerates every oracle fixture under tests/data from PyTorch.

Run from anywhere:  /usr/bin/python3 tools/make_fixtures.py [module ...]
Each module in tools/fixtures/ with a generate(out_dir) function writes its own files; name modules
to regenerate only those. Needs PyTorch and NumPy (tools/install_deps.sh --python installs Debian's
python3-torch and python3-numpy). Outputs are deterministic for a given PyTorch version.
"""
import importlib
import os
import pkgutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def main(argv):
    import torch

    torch.set_num_threads(1)
    out_dir = os.path.join(ROOT, "tests", "data")
    names = argv or sorted(m.name for m in pkgutil.iter_modules([os.path.join(HERE, "fixtures")])
                           if m.name != "fixture_io")
    for name in names:
        module = importlib.import_module("fixtures." + name)
        if not hasattr(module, "generate"):
            continue
        print("fixtures:", name, flush=True)
        module.generate(out_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
