#!/usr/bin/env python3
"""Compares a logits dump written by `experiments/eval_model --dump-logits FILE` with the logits that
Hugging Face transformers computes for the same token ids from the same checkpoint folder.

    python tools/compare_logits.py <checkpoint folder> <dump file>

Needs transformers (see docs/testing.md for the virtual environment). The dump format is described in
docs/file-formats.md: a 32-byte header (magic LWCLLGT1, uint32 version, uint32 dtype 0 = float32,
int64 T, int64 V), then T int32 token ids, then T x V float32 logits.
"""
import struct
import sys

import numpy as np


def read_dump(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] != b"LWCLLGT1":
        sys.exit("%s: not an lwcl logits dump (bad magic)" % path)
    version, dtype, t, v = struct.unpack_from("<IIqq", raw, 8)
    if version != 1 or dtype != 0:
        sys.exit("%s: version %d dtype %d, expected version 1 dtype 0 (float32)" % (path, version, dtype))
    ids = np.frombuffer(raw, dtype="<i4", count=t, offset=32)
    logits = np.frombuffer(raw, dtype="<f4", count=t * v, offset=32 + 4 * t).reshape(t, v)
    if 32 + 4 * t + 4 * t * v != len(raw):
        sys.exit("%s: %d bytes, expected %d for T=%d V=%d" % (path, len(raw), 32 + 4 * t + 4 * t * v, t, v))
    return ids, logits


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    folder, dump = sys.argv[1], sys.argv[2]
    ids, ours = read_dump(dump)
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        theirs = model(torch.tensor(ids, dtype=torch.long)[None]).logits[0].numpy()
    diff = np.abs(ours.astype(np.float64) - theirs)
    rel = np.linalg.norm(diff) / np.linalg.norm(theirs)
    print("tokens %d, vocab %d" % ours.shape)
    print("max |lwcl - transformers| = %.3e; relative (Frobenius) error = %.3e" % (diff.max(), rel))
    print("argmax agreement: %.4f" % np.mean(ours.argmax(-1) == theirs.argmax(-1)))


if __name__ == "__main__":
    main()
