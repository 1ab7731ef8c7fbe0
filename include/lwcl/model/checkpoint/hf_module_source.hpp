#pragma once
// tools/hf/lwcl_modeling.py as text, written by tools/hf/embed_module.py (do not edit: edit the module and
// rerun the tool; ctest hf_module_embedded fails when the two differ). save_hf copies it into a
// checkpoint folder whose shapes transformers' own classes cannot express.

#include <string_view>

namespace lwcl::checkpoint {

inline constexpr std::string_view hf_module_file = "lwcl_modeling.py";
inline constexpr std::string_view hf_module_source =
    R"lwclpy("""Hugging Face transformers classes for the checkpoints lwcl writes whose shapes the families' own
classes cannot express: per-layer query-head, KV-head and FFN widths (global ranking, FLAP's adaptive
structure, collapsed layers), a head width other than hidden_size / heads (gpt2, qwen2 and BERT with
heads removed), and bias on the output projections of llama and qwen2 (FLAP's bias compensation).

lwcl copies this file into such a checkpoint folder and registers it through `auto_map` in
config.json (model_type "lwcl", the family in `lwcl_family`, the per-layer widths in `lwcl_layers`), so

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)   # gpt2, llama, qwen2
    AutoModel.from_pretrained(folder, trust_remote_code=True)              # bert (last hidden state)

load it. Tensor names are the family's own (transformer.h.N.attn.c_attn for gpt2, model.layers.N.* for
llama and qwen2, encoder.layer.N.* for BERT), so the weights are the family's layout with narrower
layers. Decoders generate with a key/value cache (`generate`); `save_pretrained` writes the same
layout back. Written for transformers 4.46 and PyTorch 1.13 or later.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutputWithPast

try:  # transformers >= 4.45 exports it at the top; PreTrainedModel stops inheriting it later on
    from transformers import GenerationMixin
except ImportError:  # pragma: no cover
    from transformers.generation import GenerationMixin

FAMILIES = ("gpt2", "llama", "qwen2", "bert")


class LwclConfig(PretrainedConfig):
    """The family's own config fields, plus lwcl_family, head_dim and lwcl_layers
    ([{"n_heads", "n_kv_heads", "ffn"}] per layer). Unknown fields are kept as they are."""

    model_type = "lwcl"

    def __init__(self, lwcl_family="llama", lwcl_layers=None, head_dim=None, lwcl_output_bias=False, **kwargs):
        if lwcl_family not in FAMILIES:
            raise ValueError("lwcl config: lwcl_family %r is not one of %s" % (lwcl_family, ", ".join(FAMILIES)))
        self.lwcl_family = lwcl_family
        self.lwcl_layers = list(lwcl_layers or [])
        self.head_dim = head_dim
        self.lwcl_output_bias = bool(lwcl_output_bias)
        if lwcl_family == "gpt2":
            kwargs.setdefault("tie_word_embeddings", True)
        elif lwcl_family in ("llama", "qwen2"):
            kwargs.setdefault("tie_word_embeddings", False)
        kwargs.setdefault("num_hidden_layers", len(self.lwcl_layers))  # read by transformers' generation utilities
        kwargs.setdefault("use_cache", True)
        super().__init__(**kwargs)
        self._refuse_unsupported()
        for i, layer in enumerate(self.lwcl_layers):
            h, kv, ffn = layer.get("n_heads", 0), layer.get("n_kv_heads", 0), layer.get("ffn", 0)
            if h < 1 or kv < 1 or h % kv or ffn < 1:
                raise ValueError("lwcl config: layer %d has %s query heads, %s KV heads and FFN width %s; expected at "
                                 "least one of each, with the KV heads dividing the query heads" % (i, h, kv, ffn))

    def _refuse_unsupported(self):
        """What lwcl's own reader refuses is refused here too, rather than silently ignored."""
        fam = self.lwcl_family
        act = getattr(self, "activation_function", None) if fam == "gpt2" else getattr(self, "hidden_act", None)
        allowed = {"gpt2": ("gelu_new", "gelu_pytorch_tanh"), "bert": ("gelu",), "llama": ("silu",), "qwen2": ("silu",)}
        if act is not None and act not in allowed[fam]:
            raise ValueError("lwcl config: %s activation %r is not supported (expected %s)"
                             % (fam, act, " or ".join(allowed[fam])))
        if getattr(self, "rope_scaling", None):
            raise ValueError("lwcl config: rope_scaling is not supported")
        if getattr(self, "use_sliding_window", False):
            raise ValueError("lwcl config: sliding-window attention is not supported")
        for flag in ("attention_bias", "mlp_bias"):
            if getattr(self, flag, False):
                raise ValueError("lwcl config: %s is not supported (lwcl's output biases are lwcl_output_bias)" % flag)
        if fam == "bert" and getattr(self, "position_embedding_type", "absolute") != "absolute":
            raise ValueError("lwcl config: position_embedding_type %r is not supported (expected absolute)"
                             % self.position_embedding_type)

    # Normalised views of the family's fields.
    def _field(self, *names, default=None):
        for n in names:
            v = getattr(self, n, None)
            if v is not None:
                return v
        if default is not None:
            return default
        raise ValueError("lwcl config: none of %s is set" % ", ".join(names))

    @property
    def d_model(self):
        return self._field("n_embd", "hidden_size")

    @property
    def n_layers(self):
        return len(self.lwcl_layers)

    @property
    def max_positions(self):
        return self._field("n_positions", "max_position_embeddings")

    @property
    def eps(self):
        if self.lwcl_family == "gpt2":
            return self._field("layer_norm_epsilon", default=1e-5)
        if self.lwcl_family == "bert":
            return self._field("layer_norm_eps", default=1e-12)
        return self._field("rms_norm_eps", default=1e-6)


class _LayerNorm(nn.LayerNorm):
    pass


class _RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        wide = x.to(_wide(x.dtype))
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * wide.to(x.dtype)


class _Conv1D(nn.Module):
    """GPT-2's linear layer: weight stored (in, out)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], -1)


def _wide(dtype):
    """The type a reduction runs in: float32 for the half types, the input's own type otherwise."""
    return torch.promote_types(dtype, torch.float32)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(x, positions, theta):
    """Rotary embedding of x (B, H, T, D) at positions (B, T), pairs (i, i + D/2) as in the llama family."""
    d = x.shape[-1]
    wide = _wide(x.dtype)
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64, device=x.device).to(wide) / d))
    angles = positions[:, :, None].to(wide) * inv_freq[None, None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos()[:, None].to(x.dtype), emb.sin()[:, None].to(x.dtype)
    return x * cos + _rotate_half(x) * sin


class _Attention(nn.Module):
    """Self-attention of one layer with its own query-head and KV-head counts and a fixed head width."""

    def __init__(self, config, layer):
        super().__init__()
        fam = config.lwcl_family
        spec = config.lwcl_layers[layer]
        self.family = fam
        self.n_heads, self.n_kv = spec["n_heads"], spec["n_kv_heads"]
        self.head_dim = config.head_dim
        c = config.d_model
        q, kv = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        self.theta = float(getattr(config, "rope_theta", None) or 10000.0)
        if fam == "gpt2":
            self.c_attn = _Conv1D(c, q + 2 * kv)
            self.c_proj = _Conv1D(q, c)
        else:
)lwclpy"
    R"lwclpy(            qkv_bias = fam == "qwen2"
            self.q_proj = nn.Linear(c, q, bias=qkv_bias)
            self.k_proj = nn.Linear(c, kv, bias=qkv_bias)
            self.v_proj = nn.Linear(c, kv, bias=qkv_bias)
            self.o_proj = nn.Linear(q, c, bias=config.lwcl_output_bias)

    def forward(self, x, positions, mask, past):
        b, t, _ = x.shape
        q_w, kv_w = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        if self.family == "gpt2":
            q, k, v = self.c_attn(x).split([q_w, kv_w, kv_w], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        if self.family in ("llama", "qwen2"):
            q, k = _rope(q, positions, self.theta), _rope(k, positions, self.theta)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
        present = (k, v)
        rep = self.n_heads // self.n_kv
        kk = k.repeat_interleave(rep, dim=1) if rep > 1 else k
        vv = v.repeat_interleave(rep, dim=1) if rep > 1 else v
        scores = torch.matmul(q, kk.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        probs = torch.softmax(scores.to(_wide(scores.dtype)), dim=-1).to(q.dtype)
        out = torch.matmul(probs, vv).transpose(1, 2).reshape(b, t, q_w)
        return (self.c_proj(out) if self.family == "gpt2" else self.o_proj(out)), present


class _GPT2MLP(nn.Module):
    def __init__(self, c, ffn):
        super().__init__()
        self.c_fc = _Conv1D(c, ffn)
        self.c_proj = _Conv1D(ffn, c)

    def forward(self, x):
        return self.c_proj(_gelu_tanh(self.c_fc(x)))


class _GatedMLP(nn.Module):
    def __init__(self, c, ffn, out_bias):
        super().__init__()
        self.gate_proj = nn.Linear(c, ffn, bias=False)
        self.up_proj = nn.Linear(c, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, c, bias=out_bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _GPT2Block(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        c = config.d_model
        self.ln_1 = _LayerNorm(c, eps=config.eps)
        self.attn = _Attention(config, layer)
        self.ln_2 = _LayerNorm(c, eps=config.eps)
        self.mlp = _GPT2MLP(c, config.lwcl_layers[layer]["ffn"])

    def forward(self, x, positions, mask, past):
        a, present = self.attn(self.ln_1(x), positions, mask, past)
        x = x + a
        return x + self.mlp(self.ln_2(x)), present


class _LlamaBlock(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        c = config.d_model
        self.input_layernorm = _RMSNorm(c, config.eps)
        self.self_attn = _Attention(config, layer)
        self.post_attention_layernorm = _RMSNorm(c, config.eps)
        self.mlp = _GatedMLP(c, config.lwcl_layers[layer]["ffn"], config.lwcl_output_bias)

    def forward(self, x, positions, mask, past):
        a, present = self.self_attn(self.input_layernorm(x), positions, mask, past)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), present


class LwclPreTrainedModel(PreTrainedModel):
    config_class = LwclConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _no_split_modules = ["_GPT2Block", "_LlamaBlock", "_BertLayer"]

    def _init_weights(self, module):
        std = float(getattr(self.config, "initializer_range", 0.02) or 0.02)
        if isinstance(module, (nn.Linear, _Conv1D)):
            module.weight.data.normal_(0.0, std)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(0.0, std)
        elif isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()


def _decoder_mask(attention_mask, t, past_len, dtype, device):
    """Additive mask (B or 1, 1, t, past_len + t): causal, and padding where attention_mask is 0."""
    total = past_len + t
    causal = torch.ones(t, total, dtype=torch.bool, device=device).tril(diagonal=past_len)
    allowed = causal[None, None]
    if attention_mask is not None:
        allowed = allowed & attention_mask[:, None, None, :total].bool()
    zero = torch.zeros((), dtype=dtype, device=device)
    return torch.where(allowed, zero, torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=device))


class _GPT2Body(nn.Module):
    def __init__(self, config):
        super().__init__()
        c = config.d_model
        self.wte = nn.Embedding(config.vocab_size, c)
        self.wpe = nn.Embedding(config.max_positions, c)
        self.h = nn.ModuleList(_GPT2Block(config, i) for i in range(config.n_layers))
        self.ln_f = _LayerNorm(c, eps=config.eps)

    def embed(self, ids, positions):
        return self.wte(ids) + self.wpe(positions)


class _LlamaBody(nn.Module):
    def __init__(self, config):
        super().__init__()
        c = config.d_model
        self.embed_tokens = nn.Embedding(config.vocab_size, c)
        self.layers = nn.ModuleList(_LlamaBlock(config, i) for i in range(config.n_layers))
        self.norm = _RMSNorm(c, config.eps)

    def embed(self, ids, positions):
        return self.embed_tokens(ids)


class LwclForCausalLM(LwclPreTrainedModel, GenerationMixin):
    """gpt2, llama or qwen2 with per-layer widths: logits, and a key/value cache for generate()."""

    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config):
        super().__init__(config)
        if config.lwcl_family == "bert":
            raise ValueError("lwcl: a bert checkpoint has no language-model head; load it with AutoModel")
        self.gpt2 = config.lwcl_family == "gpt2"
        if self.gpt2:
            self.transformer = _GPT2Body(config)
        else:
            self.model = _LlamaBody(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def _body(self):
        return self.transformer if self.gpt2 else self.model

    def get_input_embeddings(self):
        return self._body().wte if self.gpt2 else self.model.embed_tokens

    def set_input_embeddings(self, value):
        if self.gpt2:
            self.transformer.wte = value
        else:
            self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, labels=None,
                use_cache=None, return_dict=None, **unused):
        if input_ids is None:
            raise ValueError("lwcl: forward needs input_ids")
        body = self._body()
        b, t = input_ids.shape
        past_len = 0 if not past_key_values else past_key_values[0][0].shape[2]
        if past_len + t > self.config.max_positions:
            raise ValueError("lwcl: %d positions, more than the model's %d" % (past_len + t, self.config.max_positions))
        if position_ids is None:
            position_ids = torch.arange(past_len, past_len + t, device=input_ids.device)[None].expand(b, t)
        x = body.embed(input_ids, position_ids)
        mask = _decoder_mask(attention_mask, t, past_len, x.dtype, x.device)
        blocks = body.h if self.gpt2 else body.layers
        presents = []
        for i, block in enumerate(blocks):
            x, present = block(x, position_ids, mask, past_key_values[i] if past_key_values else None)
            presents.append(present)
        x = body.ln_f(x) if self.gpt2 else body.norm(x)
        logits = self.lm_head(x)
        loss = None
)lwclpy"
    R"lwclpy(        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        use_cache = getattr(self.config, "use_cache", True) if use_cache is None else use_cache
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=tuple(presents) if use_cache else None)

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None, use_cache=True,
                                      **kwargs):
        past_len = 0 if not past_key_values else past_key_values[0][0].shape[2]
        if attention_mask is not None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        else:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None].expand_as(input_ids)
        return {"input_ids": input_ids[:, past_len:], "position_ids": position_ids[:, past_len:],
                "past_key_values": past_key_values, "attention_mask": attention_mask, "use_cache": use_cache}

    def _reorder_cache(self, past_key_values, beam_idx):
        return tuple((k.index_select(0, beam_idx), v.index_select(0, beam_idx)) for k, v in past_key_values)


class _BertSelfAttention(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        self.n_heads, self.head_dim = config.lwcl_layers[layer]["n_heads"], config.head_dim
        w = self.n_heads * self.head_dim
        c = config.d_model
        self.query = nn.Linear(c, w)
        self.key = nn.Linear(c, w)
        self.value = nn.Linear(c, w)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = (m(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2) for m in (self.query, self.key, self.value))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        probs = torch.softmax(scores.to(_wide(scores.dtype)), dim=-1).to(q.dtype)
        return torch.matmul(probs, v).transpose(1, 2).reshape(b, t, -1)


class _BertSelfOutput(nn.Module):
    def __init__(self, config, width):
        super().__init__()
        self.dense = nn.Linear(width, config.d_model)
        self.LayerNorm = nn.LayerNorm(config.d_model, eps=config.eps)


class _BertAttention(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        self.self = _BertSelfAttention(config, layer)
        self.output = _BertSelfOutput(config, self.self.n_heads * config.head_dim)

    def forward(self, x, mask):
        return self.output.LayerNorm(x + self.output.dense(self.self(x, mask)))


class _BertIntermediate(nn.Module):
    def __init__(self, config, ffn):
        super().__init__()
        self.dense = nn.Linear(config.d_model, ffn)


class _BertLayer(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        ffn = config.lwcl_layers[layer]["ffn"]
        self.attention = _BertAttention(config, layer)
        self.intermediate = _BertIntermediate(config, ffn)
        self.output = _BertSelfOutput(config, ffn)

    def forward(self, x, mask):
        x = self.attention(x, mask)
        h = F.gelu(self.intermediate.dense(x))
        return self.output.LayerNorm(x + self.output.dense(h))


class _BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        c = config.d_model
        self.word_embeddings = nn.Embedding(config.vocab_size, c)
        self.position_embeddings = nn.Embedding(config.max_positions, c)
        self.token_type_embeddings = nn.Embedding(int(getattr(config, "type_vocab_size", 2) or 2), c)
        self.LayerNorm = nn.LayerNorm(c, eps=config.eps)


class _BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList(_BertLayer(config, i) for i in range(config.n_layers))


class LwclModel(LwclPreTrainedModel):
    """A BERT encoder with per-layer widths; returns the last hidden state (no pooler, as lwcl writes none)."""

    base_model_prefix = "bert"

    def __init__(self, config):
        super().__init__(config)
        if config.lwcl_family != "bert":
            raise ValueError("lwcl: AutoModel loads lwcl's bert checkpoints; a %s decoder loads with "
                             "AutoModelForCausalLM" % config.lwcl_family)
        self.embeddings = _BertEmbeddings(config)
        self.encoder = _BertEncoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, return_dict=None,
                **unused):
        if input_ids is None:
            raise ValueError("lwcl: forward needs input_ids")
        b, t = input_ids.shape
        if t > self.config.max_positions:
            raise ValueError("lwcl: %d positions, more than the model's %d" % (t, self.config.max_positions))
        if position_ids is None:
            position_ids = torch.arange(t, device=input_ids.device)[None].expand(b, t)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        e = self.embeddings
        x = e.word_embeddings(input_ids) + e.position_embeddings(position_ids) + e.token_type_embeddings(token_type_ids)
        x = e.LayerNorm(x)
        mask = None
        if attention_mask is not None:
            zero = torch.zeros((), dtype=x.dtype, device=x.device)
            low = torch.tensor(torch.finfo(x.dtype).min, dtype=x.dtype, device=x.device)
            mask = torch.where(attention_mask[:, None, None, :].bool(), zero, low)
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return BaseModelOutput(last_hidden_state=x)
)lwclpy";

}  // namespace lwcl::checkpoint
