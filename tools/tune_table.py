#!/usr/bin/env python3
"""Picks each method's setting on the validation sample and reports it on the test split: for every
method of lwcl_vs_kd seeds runs (one run directory per setting; a setting's flags are read from
<dir>.flags beside it, or are the run's --lr), the mean +- sd validation and test perplexity at each
setting and, with --base METHOD=DIR, the change of the mean against that method's run in DIR (what the
setting bought); then the setting with the lowest mean validation perplexity, and its test figure.
minilm_compress runs are read the same way with the embedding cosine with the teacher in place of
perplexity (the highest mean validation cosine chosen).
   tune_table.py [--base METHOD=DIR]... <run dir per setting>...
   tune_table.py --self-test"""
import json
import os
import sys


def setting(d, cfg):
    flags = d.rstrip("/") + ".flags"
    if os.path.exists(flags):
        text = open(flags).read().strip()
        return text if text else "(defaults)"
    return f"--lr {cfg['lr']:g}"


def pm(s, digits=3):
    return f"{s['mean']:.{digits}f} +- {s['sd']:.{digits}f}"


# (validation key, test key, column name, better: +1 higher, -1 lower, digits) of a method's figures.
PPL = ("val_ppl", "test_ppl", "ppl", -1, 3)
COSINE = ("cosine", "test_cosine", "cosine", +1, 4)


def main(args):
    bases, dirs = {}, []
    while args:
        a = args.pop(0)
        if a == "--base":
            method, d = args.pop(0).split("=", 1)
            bases[method] = os.path.normpath(d)
        else:
            dirs.append(a)
    runs = []
    for d in dirs:
        if not os.path.exists(os.path.join(d, "report.json")):
            print(f"(skipped {d}: no report.json yet)", file=sys.stderr)
            continue
        rep = json.load(open(os.path.join(d, "report.json")))
        cfg = json.load(open(os.path.join(d, "config.json")))
        runs.append((os.path.normpath(d), setting(d, cfg), {m["name"]: m for m in rep["methods"]}))
    names = []
    for _, _, m in runs:
        names += [n for n in m if n not in ("teacher", "pruned") and n not in names]
    if not runs:
        sys.exit("tune_table.py: no run with a report.json")
    vk, tk, col, sign, digits = PPL if any("val_ppl" in x for _, _, m in runs for x in m.values()) else COSINE
    print(f"| method | run | setting | val {col} | test {col} | val change |")
    print("|---|---|---|---:|---:|---:|")
    best = {}
    for n in names:
        base = next((m[n] for d, _, m in runs if d == bases.get(n) and n in m), None)
        for d, label, m in runs:
            if n not in m:
                continue
            v, t = m[n][vk], m[n][tk]
            change = f"{100 * (v['mean'] / base[vk]['mean'] - 1):+.2f}%" if base else "-"
            print(f"| {n} | {os.path.basename(d)} | `{label}` | {pm(v, digits)} | {pm(t, digits)} | {change} |")
            if n not in best or sign * (v["mean"] - best[n][2][vk]["mean"]) > 0:
                best[n] = (d, label, m[n])
    print("\nchosen on validation, reported on test:\n")
    print(f"| method | run | setting | val {col} | test {col} |")
    print("|---|---|---|---:|---:|")
    for n, (d, label, m) in best.items():
        print(f"| {n} | {os.path.basename(d)} | `{label}` | {pm(m[vk], digits)} | {pm(m[tk], digits)} |")


def self_test():
    """Two sweeps written the way the programs write them, one of perplexities (lower is better) and one
    of cosines (higher is better): the choice, the columns and the change against a base run."""
    import contextlib
    import io
    import tempfile

    def fig(mean, sd=0.01):
        return {"mean": mean, "sd": sd, "values": [mean]}

    def write(root, name, flags, methods, cfg):
        d = os.path.join(root, name)
        os.makedirs(d)
        json.dump({"methods": methods}, open(os.path.join(d, "report.json"), "w"))
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        if flags is not None:
            open(d + ".flags", "w").write(flags + "\n")
        return d

    def run(args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(list(args))
        return out.getvalue()

    def chosen(text):
        rows = text.split("chosen on validation, reported on test:")[1].strip().splitlines()[2:]
        return {r.split("|")[1].strip(): r.split("|")[2].strip() for r in rows}

    with tempfile.TemporaryDirectory() as root:
        ppl = [write(root, "a", "--lr 1e-3", [{"name": "teacher"}, {"name": "lwcl", "val_ppl": fig(30.0), "test_ppl": fig(31.0)}],
                     {"lr": 1e-3}),
               write(root, "b", None, [{"name": "lwcl", "val_ppl": fig(29.0), "test_ppl": fig(29.5)},
                                       {"name": "e2e_kd", "val_ppl": fig(28.0), "test_ppl": fig(28.5)}], {"lr": 4e-3})]
        text = run(["--base", "lwcl=" + ppl[0]] + ppl)
        assert "| val ppl | test ppl |" in text, text
        assert chosen(text) == {"lwcl": "b", "e2e_kd": "b"}, chosen(text)
        assert "`--lr 0.004`" in text and "`--lr 1e-3`" in text, text  # flags beside the run, or its rate
        assert "| -3.33% |" in text, text  # b's lwcl against a's: 29 / 30 - 1
        cos = [write(root, "c", "--e2e-lr 3e-4", [{"name": "e2e_embedding", "cosine": fig(0.80), "test_cosine": fig(0.81)}],
                     {"lr": 1e-3}),
               write(root, "d", "--e2e-lr 1e-3", [{"name": "e2e_embedding", "cosine": fig(0.77), "test_cosine": fig(0.78)}],
                     {"lr": 1e-3})]
        text = run(cos)
        assert "| val cosine | test cosine |" in text, text
        assert chosen(text) == {"e2e_embedding": "c"}, chosen(text)  # the higher cosine
        assert "0.8100 +- 0.0100" in text, text
    print("tune_table.py: self-test passed")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        main(sys.argv[1:])
