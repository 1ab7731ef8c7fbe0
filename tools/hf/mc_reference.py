"""Zero-shot multiple-choice scores of a checkpoint computed by Hugging Face transformers, with
lm-eval-harness's protocol, as the independent reference for lwcl's own evaluator.

    python tools/hf/mc_reference.py <checkpoint folder> <task.jsonl> [--limit N] [--out scores.json]
    (a Python with transformers: tests/support/hf_python.sh runs it)

The protocol, as lm-eval-harness defines its multiple_choice output type:
- each choice is a log-likelihood request (context, " " + choice): the target delimiter is one space;
  whitespace that ends the context moves to the front of the continuation;
- the pair is encoded as lm-eval's HF model does: the continuation's tokens are the tokens of
  context + continuation after the first len(encode(context)) of them;
- the request's score is the sum of log p(token | everything before it) over the continuation's tokens,
  the input cut from the left to the model's last max_length + 1 tokens (a continuation longer than
  max_length tokens is an error);
- acc = [argmax_i ll_i == gold]; acc_norm = [argmax_i ll_i / len(choice_i) == gold] with len the
  choice's length in characters (the first maximum wins a tie);
- each metric is reported as its mean over the items with the standard error of the mean (sample
  standard deviation / sqrt(n)).
Reads the jsonl layout of tools/make_mc_tasks.py (context or query, choices, gold).
"""
import argparse
import json
import math
import os
import sys

import torch


def read_items(path, limit):
    items = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            d = json.loads(line)
            context = d.get("context", d.get("query"))
            if context is None or not isinstance(d.get("choices"), list) or not d["choices"] or "gold" not in d:
                sys.exit("mc_reference.py: %s line %d lacks context, a non-empty choices list or gold" % (path, n))
            items.append((context, d["choices"], int(d["gold"])))
            if limit and len(items) == limit:
                break
    return items


def encode_pair(tok, context, continuation):
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation = context[-spaces:] + continuation
        context = context[:-spaces]
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    ctx = tok(context, add_special_tokens=False)["input_ids"]
    return ctx, whole[len(ctx):]


def loglikelihood(model, ctx, cont, max_length):
    if not ctx:
        raise ValueError("mc_reference.py: an empty context (lm-eval would prefix an end-of-text token)")
    if not cont:
        raise ValueError("mc_reference.py: a choice that encodes to no token")
    if len(cont) > max_length:
        raise ValueError("mc_reference.py: a continuation of %d tokens, longer than the model's window of %d"
                         % (len(cont), max_length))
    ids = (ctx + cont)[-(max_length + 1):][:-1]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    first = len(ids) - len(cont)
    return sum(float(logp[first + i, t]) for i, t in enumerate(cont))


def mean_and_stderr(xs):
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return mean, float("nan")
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return mean, math.sqrt(var / n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("task")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    tok = AutoTokenizer.from_pretrained(a.checkpoint)
    model = AutoModelForCausalLM.from_pretrained(a.checkpoint, trust_remote_code=True,
                                                 torch_dtype=torch.float64).eval()
    cfg = model.config
    max_length = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings")
    rows, acc, acc_norm = [], [], []
    for context, choices, gold in read_items(a.task, a.limit):
        if any(not c for c in choices):
            sys.exit("mc_reference.py: %s: an empty choice (every choice needs some text)" % a.task)
        lls = [loglikelihood(model, *encode_pair(tok, context, " " + c), max_length) for c in choices]
        normed = [ll / len(c) for ll, c in zip(lls, choices)]
        acc.append(1.0 if max(range(len(lls)), key=lambda i: (lls[i], -i)) == gold else 0.0)
        acc_norm.append(1.0 if max(range(len(normed)), key=lambda i: (normed[i], -i)) == gold else 0.0)
        rows.append({"loglikelihoods": lls, "gold": gold})
    m, se = mean_and_stderr(acc)
    mn, sen = mean_and_stderr(acc_norm)
    result = {"task": os.path.basename(a.task), "n": len(rows), "acc": m, "acc_stderr": se, "acc_norm": mn,
              "acc_norm_stderr": sen, "protocol": "lm-eval multiple_choice, zero-shot, target delimiter ' ', "
              "acc_norm by characters", "items": rows}
    text = json.dumps(result, indent=1)
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(a.out + ".tmp", a.out)
    print("%s: n=%d acc=%.4f +- %.4f acc_norm=%.4f +- %.4f" % (result["task"], len(rows), m, se, mn, sen))


if __name__ == "__main__":
    main()
