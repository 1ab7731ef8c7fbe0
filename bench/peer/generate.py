"""Hugging Face transformers' greedy generate() on a checkpoint folder, timed the way
experiments/generate times lwcl: tokens per second after the prompt. generate() does not report the
prompt's step apart, so the decode time is the time of generate(N new tokens) less the time of
generate(1 new token) (the prompt's forward and the first choice), each the median of --repeats runs.

    python bench/peer/generate.py <folder> <lwcl generate --out JSON> --threads T [--repeats 5]
(a Python with transformers: tests/support/hf_python.sh runs it)
"""
import argparse
import json
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("lwcl_json")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(a.threads)
    with open(a.lwcl_json) as f:
        run = json.load(f)
    prompt = torch.tensor([run["prompt_tokens"]])
    n_new = len(run["runs"][0]["tokens"])
    model = AutoModelForCausalLM.from_pretrained(a.folder, trust_remote_code=True, torch_dtype=torch.float32).eval()

    def timed(n):
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                                     do_sample=False, pad_token_id=0, synced_gpus=False)
            times.append(time.perf_counter() - t0)
        return statistics.median(times), out[0, prompt.shape[1]:].tolist()

    timed(2)  # warm-up
    t_all, tokens = timed(n_new)
    t_one, _ = timed(1)
    decode = max(t_all - t_one, 1e-9)
    print("transformers tokens: %s" % ("same as lwcl's" if tokens == run["runs"][0]["tokens"] else "DIFFERENT from lwcl's"))
    print("transformers tokens/s: %.2f" % ((n_new - 1) / decode))


if __name__ == "__main__":
    main()
