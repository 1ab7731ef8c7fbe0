"""Checks tools/hf/lwcl_modeling.py against transformers' own classes.

For each family (gpt2, llama, qwen2, bert) a small random model is built with transformers' class, and
a student is cut from it with per-layer widths: whole query heads (whole KV groups under GQA) and FFN
channels removed, different in every layer. The reference is transformers' own model with the removed
structures' output weights zeroed (a removed head or channel then contributes nothing, the published
meaning of structured pruning); the candidate is the physically smaller student saved in lwcl's form
(model_type "lwcl", lwcl_layers, auto_map) and loaded through AutoModelForCausalLM / AutoModel with
trust_remote_code. Their logits (or last hidden states) must agree in float64, greedy generate() must
give the same tokens, and save_pretrained must round-trip.

    python tests/model/hf_module_test.py        (a Python with transformers; docs/testing.md)
"""
import json
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import Tally, rel_err  # noqa: E402

tally = Tally()
expect = tally.expect

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = os.path.join(HERE, "..", "..", "tools", "hf", "lwcl_modeling.py")

# Debian's PyTorch 1.13 cannot import torch.distributed.fsdp under Python 3.11, which generate() in
# transformers 4.46 probes unless it is told that no process group synchronises generation.
GEN = {"synced_gpus": False}




def plan(n_layers, n_heads, n_kv, ffn, gen):
    """Per layer: kept KV groups, kept FFN channels (each layer different)."""
    layers = []
    for layer in range(n_layers):
        keep_kv = max(1, n_kv - 1 - (layer % max(1, n_kv - 1)))
        groups = sorted(torch.randperm(n_kv, generator=gen)[:keep_kv].tolist())
        keep_ffn = ffn // 2 + 3 * layer + 1
        channels = sorted(torch.randperm(ffn, generator=gen)[:keep_ffn].tolist())
        layers.append((groups, channels))
    return layers


def heads_of(groups, n_heads, n_kv):
    rep = n_heads // n_kv
    return [g * rep + r for g in groups for r in range(rep)]


def rows(idx, d):
    return [i * d + j for i in idx for j in range(d)]


def write_lwcl(folder, config, state, family, layers_spec, head_dim):
    """Saves a student state dict in lwcl's layout and config form."""
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    j = dict(config)
    j.update({"model_type": "lwcl", "lwcl_family": family, "head_dim": head_dim, "lwcl_layers": layers_spec,
              "auto_map": {"AutoConfig": "lwcl_modeling.LwclConfig",
                           ("AutoModel" if family == "bert" else "AutoModelForCausalLM"):
                               "lwcl_modeling.LwclModel" if family == "bert" else "lwcl_modeling.LwclForCausalLM"}})
    j.pop("architectures", None)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(j, f, indent=2)
    shutil.copy(MODULE, os.path.join(folder, "lwcl_modeling.py"))


def decoder_case(family, tmp):
    import transformers as tf

    gen = torch.Generator().manual_seed({"gpt2": 1, "llama": 2, "qwen2": 3}[family])
    torch.manual_seed(7)
    n_layers, c, ffn, vocab = 3, 64, 96, 97
    if family == "gpt2":
        n_heads, n_kv = 4, 4
        cfg = tf.GPT2Config(vocab_size=vocab, n_positions=64, n_embd=c, n_layer=n_layers, n_head=n_heads, n_inner=ffn,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new")
        ref = tf.GPT2LMHeadModel(cfg)
    else:
        n_heads, n_kv = 8, 4
        kw = dict(vocab_size=vocab, hidden_size=c, intermediate_size=ffn, num_hidden_layers=n_layers,
                  num_attention_heads=n_heads, num_key_value_heads=n_kv, max_position_embeddings=64,
                  rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
        cfg = tf.LlamaConfig(**kw) if family == "llama" else tf.Qwen2Config(**kw)
        ref = (tf.LlamaForCausalLM if family == "llama" else tf.Qwen2ForCausalLM)(cfg)
    ref = ref.double().eval()
    d = c // n_heads
    with torch.no_grad():  # random biases and norms, so that every parameter is exercised
        for name, p in ref.named_parameters():
            if name.endswith("bias") or "norm" in name or "ln_" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    layers = plan(n_layers, n_heads, n_kv, ffn, gen)
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    student = {}
    spec = []
    for i, (groups, channels) in enumerate(layers):
        heads = heads_of(groups, n_heads, n_kv)
        spec.append({"n_heads": len(heads), "n_kv_heads": len(groups), "ffn": len(channels)})
        q_rows, kv_rows = rows(heads, d), rows(groups, d)
        gone_q = [r for r in range(n_heads * d) if r not in set(q_rows)]
        gone_f = [r for r in range(ffn) if r not in set(channels)]
        if family == "gpt2":
            h = "transformer.h.%d." % i
            w, b = state[h + "attn.c_attn.weight"], state[h + "attn.c_attn.bias"]  # (c, 3c)
            cols = q_rows + [c + r for r in kv_rows] + [2 * c + r for r in kv_rows]
            student[h + "attn.c_attn.weight"], student[h + "attn.c_attn.bias"] = w[:, cols], b[cols]
            student[h + "attn.c_proj.weight"] = state[h + "attn.c_proj.weight"][q_rows]
            student[h + "attn.c_proj.bias"] = state[h + "attn.c_proj.bias"]
            student[h + "mlp.c_fc.weight"] = state[h + "mlp.c_fc.weight"][:, channels]
            student[h + "mlp.c_fc.bias"] = state[h + "mlp.c_fc.bias"][channels]
            student[h + "mlp.c_proj.weight"] = state[h + "mlp.c_proj.weight"][channels]
            student[h + "mlp.c_proj.bias"] = state[h + "mlp.c_proj.bias"]
            for n in ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias"):
                student[h + n] = state[h + n]
            state[h + "attn.c_proj.weight"][gone_q] = 0  # the reference: removed structures contribute nothing
            state[h + "mlp.c_proj.weight"][gone_f] = 0
        else:
            h = "model.layers.%d." % i
            student[h + "self_attn.q_proj.weight"] = state[h + "self_attn.q_proj.weight"][q_rows]
            student[h + "self_attn.k_proj.weight"] = state[h + "self_attn.k_proj.weight"][kv_rows]
            student[h + "self_attn.v_proj.weight"] = state[h + "self_attn.v_proj.weight"][kv_rows]
            if family == "qwen2":
                student[h + "self_attn.q_proj.bias"] = state[h + "self_attn.q_proj.bias"][q_rows]
                student[h + "self_attn.k_proj.bias"] = state[h + "self_attn.k_proj.bias"][kv_rows]
                student[h + "self_attn.v_proj.bias"] = state[h + "self_attn.v_proj.bias"][kv_rows]
            student[h + "self_attn.o_proj.weight"] = state[h + "self_attn.o_proj.weight"][:, q_rows]
            student[h + "mlp.gate_proj.weight"] = state[h + "mlp.gate_proj.weight"][channels]
            student[h + "mlp.up_proj.weight"] = state[h + "mlp.up_proj.weight"][channels]
            student[h + "mlp.down_proj.weight"] = state[h + "mlp.down_proj.weight"][:, channels]
            for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
                student[h + n] = state[h + n]
            state[h + "self_attn.o_proj.weight"][:, gone_q] = 0
            state[h + "mlp.down_proj.weight"][:, gone_f] = 0
    for k, v in state.items():
        if ".h." not in k and ".layers." not in k and not (family == "gpt2" and k == "lm_head.weight"):
            student[k] = v
    ref.load_state_dict(state)
    folder = os.path.join(tmp, family)
    config = cfg.to_dict()
    write_lwcl(folder, config, {k: v.float() for k, v in student.items()}, family, spec, d)

    model = tf.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, torch_dtype=torch.float64).eval()
    expect(type(model).__name__ == "LwclForCausalLM", "%s: AutoModelForCausalLM gave %s" % (family, type(model).__name__))
    # The student was saved in float32: compare with the reference rounded the same way.
    ref.load_state_dict({k: v.float().double() for k, v in state.items()})
    ids = torch.randint(0, vocab - 1, (2, 20), generator=gen)  # vocab - 1 is the padding id below
    with torch.no_grad():
        want, got = ref(ids).logits, model(ids).logits
    err = rel_err(got, want)
    # transformers' llama and qwen2 round the RMSNorm input and the rotary angles to float32 even in a
    # float64 model; gpt2 runs in float64 throughout.
    tol = 1e-12 if family == "gpt2" else 1e-6
    print("%s: per-layer student against transformers' masked model: logits relative error %.3g" % (family, err))
    expect(err < tol, "%s: logits relative error %.3g, expected below %g in float64" % (family, err, tol))
    # Incremental decoding with the cache equals the full forward at every position.
    with torch.no_grad():
        out = model(ids[:, :7], use_cache=True)
        steps = [out.logits]
        past = out.past_key_values
        for t in range(7, 20):
            out = model(ids[:, t:t + 1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            steps.append(out.logits)
        inc = torch.cat(steps, dim=1)
    err = rel_err(inc, got)
    expect(err < 1e-12, "%s: cached decoding differs from the full forward by %.3g" % (family, err))
    # Greedy generate() against the reference's.
    prompt = ids[:1, :5]
    with torch.no_grad():
        g_ref = ref.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=vocab - 1, **GEN)
        g_got = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=vocab - 1, **GEN)
    expect(torch.equal(g_ref, g_got), "%s: greedy generate differs: %s against %s" % (family, g_got.tolist(), g_ref.tolist()))
    # Left-padded batch: the padded row gives the same tokens as alone.
    batch = torch.cat([torch.full((1, 2), vocab - 1, dtype=torch.long), prompt[:, :3]], dim=1)
    batch = torch.cat([batch, prompt], dim=0)
    mask = torch.ones_like(batch)
    mask[0, :2] = 0
    with torch.no_grad():
        g_batch = model.generate(batch, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=vocab - 1, **GEN)
        g_alone = model.generate(prompt[:, :3], max_new_tokens=6, do_sample=False, pad_token_id=vocab - 1, **GEN)
    expect(torch.equal(g_batch[0, 2:], g_alone[0]), "%s: a left-padded row generates other tokens than alone" % family)
    # save_pretrained round trip.
    again = os.path.join(tmp, family + "_again")
    model.save_pretrained(again)
    back = tf.AutoModelForCausalLM.from_pretrained(again, trust_remote_code=True, torch_dtype=torch.float64).eval()
    with open(os.path.join(again, "config.json")) as f:
        saved = json.load(f)
    expect(type(back).__name__ == "LwclForCausalLM" and saved.get("model_type") == "lwcl" and
           saved.get("lwcl_layers") == spec and "auto_map" in saved,
           "%s: save_pretrained wrote model_type %s, lwcl_layers %s" % (family, saved.get("model_type"),
                                                                        saved.get("lwcl_layers")))
    with torch.no_grad():
        expect(torch.equal(back(ids).logits, got), "%s: save_pretrained did not round-trip" % family)


def bert_case(tmp):
    import transformers as tf

    gen = torch.Generator().manual_seed(4)
    torch.manual_seed(8)
    n_layers, c, n_heads, ffn, vocab = 3, 64, 4, 96, 101
    cfg = tf.BertConfig(vocab_size=vocab, hidden_size=c, num_hidden_layers=n_layers, num_attention_heads=n_heads,
                        intermediate_size=ffn, max_position_embeddings=64, type_vocab_size=2, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    ref = tf.BertModel(cfg, add_pooling_layer=False).double().eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    d = c // n_heads
    layers = plan(n_layers, n_heads, n_heads, ffn, gen)
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    student, spec = {}, []
    for i, (heads, channels) in enumerate(layers):
        spec.append({"n_heads": len(heads), "n_kv_heads": len(heads), "ffn": len(channels)})
        q_rows = rows(heads, d)
        gone_q = [r for r in range(c) if r not in set(q_rows)]
        gone_f = [r for r in range(ffn) if r not in set(channels)]
        h = "encoder.layer.%d." % i
        for n in ("query", "key", "value"):
            student[h + "attention.self.%s.weight" % n] = state[h + "attention.self.%s.weight" % n][q_rows]
            student[h + "attention.self.%s.bias" % n] = state[h + "attention.self.%s.bias" % n][q_rows]
        student[h + "attention.output.dense.weight"] = state[h + "attention.output.dense.weight"][:, q_rows]
        student[h + "intermediate.dense.weight"] = state[h + "intermediate.dense.weight"][channels]
        student[h + "intermediate.dense.bias"] = state[h + "intermediate.dense.bias"][channels]
        student[h + "output.dense.weight"] = state[h + "output.dense.weight"][:, channels]
        for n in ("attention.output.dense.bias", "attention.output.LayerNorm.weight", "attention.output.LayerNorm.bias",
                  "output.dense.bias", "output.LayerNorm.weight", "output.LayerNorm.bias"):
            student[h + n] = state[h + n]
        state[h + "attention.output.dense.weight"][:, gone_q] = 0
        state[h + "output.dense.weight"][:, gone_f] = 0
    for k, v in state.items():
        if k.startswith("embeddings.") and "position_ids" not in k and "token_type_ids" not in k:
            student[k] = v
    ref.load_state_dict({k: v.float().double() if v.is_floating_point() else v for k, v in state.items()})
    folder = os.path.join(tmp, "bert")
    write_lwcl(folder, cfg.to_dict(), {k: v.float() for k, v in student.items()}, "bert", spec, d)
    model = tf.AutoModel.from_pretrained(folder, trust_remote_code=True, torch_dtype=torch.float64).eval()
    expect(type(model).__name__ == "LwclModel", "bert: AutoModel gave %s" % type(model).__name__)
    ids = torch.randint(0, vocab, (2, 16), generator=gen)
    types = torch.zeros_like(ids)
    types[:, 9:] = 1
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    with torch.no_grad():
        want = ref(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        got = model(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    err = rel_err(got, want)
    print("bert: per-layer student against transformers' masked model: last hidden state relative error %.3g" % err)
    expect(err < 1e-12, "bert: last hidden state relative error %.3g, expected below 1e-12 in float64" % err)


def errors_case(tmp):
    import transformers as tf

    folder = os.path.join(tmp, "llama")
    with open(os.path.join(folder, "config.json")) as f:
        j = json.load(f)
    kv1 = j["lwcl_layers"][1]["n_kv_heads"]
    j["lwcl_layers"][1]["n_kv_heads"] = 3
    bad = os.path.join(tmp, "bad")
    shutil.copytree(folder, bad)
    with open(os.path.join(bad, "config.json"), "w") as f:
        json.dump(j, f)
    try:
        tf.AutoModelForCausalLM.from_pretrained(bad, trust_remote_code=True)
        expect(False, "a layer whose KV heads do not divide its query heads was accepted")
    except ValueError as e:
        expect("layer 1" in str(e), "the error names the layer: %s" % e)
    j["lwcl_layers"][1]["n_kv_heads"] = kv1
    j["rope_scaling"] = {"type": "linear", "factor": 2.0}
    with open(os.path.join(bad, "config.json"), "w") as f:
        json.dump(j, f)
    try:
        tf.AutoModelForCausalLM.from_pretrained(bad, trust_remote_code=True)
        expect(False, "rope_scaling was accepted and would have been ignored")
    except ValueError as e:
        expect("rope_scaling" in str(e), "the error names rope_scaling: %s" % e)
    model = tf.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    try:
        model(torch.zeros(1, 65, dtype=torch.long))
        expect(False, "a sequence longer than the positions was accepted")
    except ValueError as e:
        expect("65 positions" in str(e), "the error names the length: %s" % e)


def main():
    torch.set_num_threads(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tmp = tempfile.mkdtemp(prefix="lwcl_hf_module_")
    try:
        for family in ("gpt2", "llama", "qwen2"):
            decoder_case(family, tmp)
        bert_case(tmp)
        errors_case(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
