"""Checks experiments/generate's greedy tokens against transformers' generate() on the same checkpoint
folders and prompt ids (min_new_tokens keeps transformers from stopping at an end-of-text id, where lwcl
does not stop).

    python tests/model/hf_generate_check.py <generate --out JSON>     (tests/support/hf_python.sh runs it)
"""
import json
import sys

import torch


def main(path):
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    with open(path) as f:
        run = json.load(f)
    if run["temperature"] != 0:
        sys.exit("hf_generate_check.py: %s was sampled; compare greedy runs (temperature 0)" % path)
    prompt = torch.tensor([run["prompt_tokens"]])
    passed = failed = 0
    for r in run["runs"]:
        model = AutoModelForCausalLM.from_pretrained(r["model"], trust_remote_code=True, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=len(r["tokens"]),
                                 min_new_tokens=len(r["tokens"]), do_sample=False, pad_token_id=0, synced_gpus=False)
        hf = out[0, prompt.shape[1]:].tolist()
        if hf == r["tokens"]:
            passed += 1
            print("%s: transformers' greedy generate gives lwcl's %d tokens" % (r["model"], len(hf)))
        else:
            failed += 1
            print("FAILED: %s: lwcl %s, transformers %s" % (r["model"], r["tokens"], hf))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
