"""Every GGUF class lwcl writes, read by independent readers:
- the `gguf` package (llama.cpp's own Python reader) reads each file; its metadata says what llama.cpp needs
  (architecture, widths, per-layer arrays for deci, epsilon, RoPE, the gpt2 tokenizer with lwcl's tokens and
  merges in order), and every tensor, dequantised by the package, equals the same model's Hugging Face
  weights mapped here to llama.cpp's layout from the published conversion rules (llama's q and k rows put in
  interleaved RoPE order per head, gpt2's Conv1D weights transposed, names renamed), rounded to the
  tensor's type; Q8_0 and Q4_0 tensors equal the dequantised weights exactly;
- where transformers 4.46's GGUF loader holds the class, AutoModelForCausalLM loads the file and its logits
  agree with lwcl's (computed from the same file read back by lwcl) within 1e-5 relative; for gpt2 its
  tokenizer, rebuilt from the file, gives lwcl's ids.

    python tests/model/gguf_interop_test.py <writer output dir>    (tests/support/hf_python.sh runs it)
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import Tally, rel_err  # noqa: E402

tally = Tally()
expect = tally.expect


def field(reader, key):
    """A metadata value as Python data (scalar or list), read from the package's field parts."""
    from gguf import GGUFValueType

    f = reader.fields[key]
    def one(t, part):
        return bytes(part).decode("utf-8") if t == GGUFValueType.STRING else part.tolist()[0]
    if f.types[0] == GGUFValueType.ARRAY:
        return [one(f.types[1], f.parts[i]) for i in f.data]
    return one(f.types[0], f.parts[f.data[0]])


def interleave_rope_rows(w, heads):
    """Rows of each head of width d reordered so row 2i + s comes from row s * d/2 + i (llama.cpp's RoPE pairs)."""
    d = w.shape[0] // heads
    order = np.arange(w.shape[0]).reshape(heads, 2, d // 2).transpose(0, 2, 1).reshape(-1)
    return w[order]


def expected_tensors(hf_dir, cfg, arch):
    """The GGUF tensors (name -> float32 array, rows x cols) of a Hugging Face folder, by llama.cpp's layout."""
    from safetensors.numpy import load_file

    st = load_file(os.path.join(hf_dir, "model.safetensors"))
    layers = cfg["lwcl_layers"]
    out = {}
    if arch == "gpt2":
        names = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
                 "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
        out["token_embd.weight"] = st["transformer.wte.weight"]
        out["position_embd.weight"] = st["transformer.wpe.weight"]
        out["output_norm.weight"] = st["transformer.ln_f.weight"]
        out["output_norm.bias"] = st["transformer.ln_f.bias"]
        for i in range(len(layers)):
            for hf, gg in names.items():
                for kind in ("weight", "bias"):
                    w = st["transformer.h.%d.%s.%s" % (i, hf, kind)]
                    if kind == "weight" and w.ndim == 2 and not hf.startswith("ln"):
                        w = w.T  # Conv1D stores (in, out)
                    out["blk.%d.%s.%s" % (i, gg, kind)] = np.ascontiguousarray(w)
        return out
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    out["token_embd.weight"] = st["model.embed_tokens.weight"]
    out["output_norm.weight"] = st["model.norm.weight"]
    if "lm_head.weight" in st:
        out["output.weight"] = st["lm_head.weight"]
    for i, layer in enumerate(layers):
        for hf, gg in names.items():
            for kind in ("weight", "bias"):
                key = "model.layers.%d.%s.%s" % (i, hf, kind)
                if key not in st:
                    continue
                w = st[key]
                if arch in ("llama", "deci") and hf in ("self_attn.q_proj", "self_attn.k_proj"):
                    w = interleave_rope_rows(w, layer["n_heads"] if hf == "self_attn.q_proj" else layer["n_kv_heads"])
                out["blk.%d.%s.%s" % (i, gg, kind)] = w
    return out


def rounded(w, qtype):
    from gguf import GGMLQuantizationType as Q

    w = np.asarray(w, dtype=np.float32)
    if qtype == Q.F16:
        return w.astype(np.float16).astype(np.float32)
    if qtype == Q.BF16:  # round to nearest even on the top 16 bits
        b = w.view(np.uint32).astype(np.uint64)
        b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
        return b.astype(np.uint32).view(np.float32)
    return w  # F32 as is; Q8_0 and Q4_0 hold exactly the dequantised weights of the folder


def check_file(name, folder, want):
    from gguf import GGUFReader, GGMLQuantizationType as Q
    from gguf.quants import dequantize

    path = os.path.join(folder, "model.gguf")
    reader = GGUFReader(path)
    with open(os.path.join(folder, "hf", "config.json")) as f:
        cfg = json.load(f)
    arch = field(reader, "general.architecture")
    layers = cfg["lwcl_layers"]
    family = cfg.get("lwcl_family", cfg["model_type"])
    want_arch = family if family != "llama" else (
        "deci" if any(l != layers[0] for l in layers) else "llama")
    expect(arch == want_arch, "%s: architecture %s, expected %s" % (name, arch, want_arch))
    expect(field(reader, "%s.block_count" % arch) == len(layers), "%s: block_count" % name)
    heads = field(reader, "%s.attention.head_count" % arch)
    kv = field(reader, "%s.attention.head_count_kv" % arch)
    ffn = field(reader, "%s.feed_forward_length" % arch)
    if arch == "deci":
        expect(heads == [l["n_heads"] for l in layers] and kv == [l["n_kv_heads"] for l in layers]
               and ffn == [l["ffn"] for l in layers], "%s: per-layer arrays %s %s %s" % (name, heads, kv, ffn))
    else:
        expect((heads, kv, ffn) == (layers[0]["n_heads"], layers[0]["n_kv_heads"], layers[0]["ffn"]),
               "%s: widths %s %s %s" % (name, heads, kv, ffn))
    expect(field(reader, "%s.attention.key_length" % arch) == cfg["head_dim"], "%s: key_length" % name)
    eps_key = "%s.attention.layer_norm_epsilon" % arch if arch == "gpt2" else "%s.attention.layer_norm_rms_epsilon" % arch
    eps_cfg = cfg.get("layer_norm_epsilon", cfg.get("rms_norm_eps"))
    expect(abs(field(reader, eps_key) - eps_cfg) <= 1e-7 * eps_cfg + 1e-12, "%s: %s" % (name, eps_key))
    # The tokenizer: lwcl's tokens in id order and its merges best first.
    with open(os.path.join(folder, "hf", "vocab.json")) as f:
        vocab = json.load(f)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    with open(os.path.join(folder, "hf", "merges.txt")) as f:
        merges = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#version")]
    expect(field(reader, "tokenizer.ggml.model") == "gpt2", "%s: tokenizer model" % name)
    expect(field(reader, "tokenizer.ggml.pre") == "gpt-2", "%s: pre-tokenizer" % name)
    expect(field(reader, "tokenizer.ggml.tokens") == tokens, "%s: tokens differ from vocab.json's" % name)
    expect(field(reader, "tokenizer.ggml.merges") == merges, "%s: merges differ from merges.txt's" % name)
    # Every tensor, dequantised by the package, against the folder's weights in llama.cpp's layout.
    ref = expected_tensors(os.path.join(folder, "hf"), cfg, arch)
    got_names = {t.name for t in reader.tensors}
    expect(got_names == set(ref), "%s: tensors %s missing, %s unexpected" % (
        name, sorted(set(ref) - got_names), sorted(got_names - set(ref))))
    types = {}
    worst = 0.0
    for t in reader.tensors:
        if t.name not in ref:
            continue
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        r = ref[t.name]
        shape = [int(x) for x in t.shape]
        expect(shape == list(reversed(r.shape)), "%s: %s has shape %s, expected %s" % (name, t.name, shape, list(reversed(r.shape))))
        v = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)
        e = rounded(r, t.tensor_type).reshape(-1)
        same = v.shape == e.shape and np.array_equal(v, e)
        if not same and v.shape == e.shape:
            worst = max(worst, float(np.max(np.abs(v - e))))
        expect(same, "%s: %s (%s) differs from the reference (max |diff| %.3g)" % (
            name, t.name, t.tensor_type.name, float(np.max(np.abs(v - e))) if v.shape == e.shape else float("nan")))
        if r.ndim == 1:
            expect(t.tensor_type == Q.F32, "%s: vector %s is %s, expected F32" % (name, t.name, t.tensor_type.name))
    print("  gguf reader: %s, %d tensors (%s), every one equal to the reference" % (
        arch, len(reader.tensors), ", ".join("%d %s" % (n, k) for k, n in sorted(types.items()))), flush=True)


def check_transformers(name, folder, want):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file="model.gguf", torch_dtype=torch.float32).eval()
    ids = torch.tensor([want["ids"]])
    with torch.no_grad():
        got = model(ids).logits.double().flatten()
    err = rel_err(got, torch.tensor(want["logits"], dtype=torch.float64))
    print("  transformers' GGUF loader: %s, logits relative error %.3g" % (type(model).__name__, err), flush=True)
    expect(err < 1e-5, "%s: transformers' logits from the GGUF file differ from lwcl's by %.3g" % (name, err))
    if type(model).__name__ == "GPT2LMHeadModel":
        tok = AutoTokenizer.from_pretrained(folder, gguf_file="model.gguf")
        hf_ids = tok(want["sentence"], add_special_tokens=False)["input_ids"]
        expect(hf_ids == want["ids"], "%s: the tokenizer rebuilt from the file gave %s, lwcl %s" % (name, hf_ids, want["ids"]))


def main(root):
    torch.set_num_threads(1)
    with open(os.path.join(root, "index.json")) as f:
        index = json.load(f)
    for entry in index:
        name = entry["name"]
        folder = os.path.join(root, name)
        with open(os.path.join(folder, "lwcl.json")) as f:
            want = json.load(f)
        print("%s (%s weights%s):" % (name, want["weights"], ", " + want["quantise"] if want["quantise"] else ""), flush=True)
        check_file(name, folder, want)
        if want["transformers"]:
            check_transformers(name, folder, want)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
