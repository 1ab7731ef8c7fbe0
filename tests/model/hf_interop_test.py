"""Every checkpoint class lwcl writes loads in Hugging Face transformers with lwcl's outputs: for each
folder of tests/support/hf_interop_writer's output, AutoModelForCausalLM (decoders) or AutoModel (BERT)
loads it (trust_remote_code where lwcl wrote its own module) and its logits or last hidden state agree
with lwcl's within 1e-5 relative (f32); AutoTokenizer gives lwcl's ids; transformers' greedy generate()
gives lwcl's tokens; and a folder in the plain form loads without remote code in the family's class.

    python tests/model/hf_interop_test.py <writer output dir>    (tests/support/hf_python.sh runs it)
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import Tally, rel_err  # noqa: E402

tally = Tally()
expect = tally.expect


def main(root):
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    with open(os.path.join(root, "index.json")) as f:
        index = json.load(f)
    for entry in index:
        name, kind = entry["name"], entry["kind"]
        folder = os.path.join(root, name)
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(folder, "lwcl.json")) as f:
            want = json.load(f)
        lwcl_form = cfg.get("model_type") == "lwcl"
        print("%s: %s form%s" % (name, "lwcl's" if lwcl_form else "the plain",
                                 " (%s)" % cfg.get("lwcl_form") if lwcl_form else ""), flush=True)
        ids = torch.tensor([want["ids"]])
        if kind == "encoder":
            model = AutoModel.from_pretrained(folder, trust_remote_code=lwcl_form, torch_dtype=torch.float32).eval()
            with torch.no_grad():
                got = model(ids).last_hidden_state.double().flatten()
            err = rel_err(got, torch.tensor(want["hidden"], dtype=torch.float64))
            print("  last hidden state relative error %.3g" % err)
            expect(err < 1e-5, "%s: last hidden state relative error %.3g" % (name, err))
            continue
        model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=lwcl_form, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            got = model(ids).logits.double().flatten()
        err = rel_err(got, torch.tensor(want["logits"], dtype=torch.float64))
        print("  logits relative error %.3g (%s weights)" % (err, want["weights"]))
        expect(err < 1e-5, "%s: logits relative error %.3g" % (name, err))
        cls = type(model).__name__
        expect(cls == cfg["architectures"][0], "%s: loaded as %s, config.json names %s" % (name, cls, cfg["architectures"][0]))
        if lwcl_form:
            # transformers' own tooling on lwcl's class: save_pretrained, then a reload gives the same logits.
            again_dir = os.path.join(folder, "saved_by_transformers")
            model.save_pretrained(again_dir)
            again = AutoModelForCausalLM.from_pretrained(again_dir, trust_remote_code=True,
                                                         torch_dtype=torch.float32).eval()
            with torch.no_grad():
                err2 = rel_err(again(ids).logits.double().flatten(), got)
            expect(err2 < 1e-6, "%s: logits after save_pretrained and reload differ by %.3g" % (name, err2))
        tok = AutoTokenizer.from_pretrained(folder)
        hf_ids = tok(want["sentence"], add_special_tokens=False)["input_ids"]
        expect(hf_ids == want["ids"], "%s: AutoTokenizer gave %s, lwcl %s" % (name, hf_ids, want["ids"]))
        prompt = ids[:, :6]
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=len(want["generated"]),
                                 min_new_tokens=len(want["generated"]), do_sample=False, pad_token_id=0,
                                 synced_gpus=False)
        gen = out[0, 6:].tolist()
        expect(gen == want["generated"], "%s: transformers generated %s, lwcl %s" % (name, gen, want["generated"]))
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
