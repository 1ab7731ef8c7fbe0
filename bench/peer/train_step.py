#!/usr/bin/env python3
"""Side-by-side benchmark, PyTorch half: the same teacher-training step as train_step.cpp on a whole
GPT-2 decoder LM written out in torch (pre-LN, tanh GELU, learned positions, tied head): forward, mean
cross-entropy, backward, clip_grad_norm_ at 1.0 and torch.optim.AdamW, float32 on the CPU (or the
forward under CPU bf16 autocast with --autocast bf16, f32 weights and optimiser), on the same token
batch. Prints the median step time and tokens/s. Run through bench/peer/run_train_step.sh."""
import argparse
import contextlib
import math
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, C, H, Fw, T):
        super().__init__()
        self.H = H
        self.ln1 = torch.nn.LayerNorm(C)
        self.c_attn = torch.nn.Linear(C, 3 * C)  # GPT-2's fused q/k/v: one GEMM, PyTorch's fastest form
        self.c_proj = torch.nn.Linear(C, C)
        self.ln2 = torch.nn.LayerNorm(C)
        self.fc = torch.nn.Linear(C, Fw)
        self.proj = torch.nn.Linear(Fw, C)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1), persistent=False)

    def attention(self, h):
        B, T, C = h.shape
        D = C // self.H
        q, k, v = self.c_attn(h).split(C, dim=2)
        q = q.view(B, T, self.H, D).transpose(1, 2)
        k = k.view(B, T, self.H, D).transpose(1, 2)
        v = v.view(B, T, self.H, D).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch >= 2.0: fused kernel
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            a = s.masked_fill(self.mask[:T, :T], float("-inf")).softmax(-1) @ v
        return self.c_proj(a.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(torch.nn.Module):
    def __init__(self, V, max_seq, C, layers, H, Fw):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(max_seq, C)
        self.blocks = torch.nn.ModuleList([Block(C, H, Fw, max_seq) for _ in range(layers)])
        self.ln_f = torch.nn.LayerNorm(C)
        # GPT-2's initialisation, as model::init_parameters: N(0, 0.02), residual output projections
        # N(0, 0.02 / sqrt(2 L)), biases 0, norm weights 1.
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                torch.nn.init.zeros_(p)
            elif "ln" in name:
                torch.nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight", "proj.weight")) else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, ids, targets):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe.weight[:T]
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def token_stream(n, vocab):
    """The same 64-bit mixing hash of the position as train_step.cpp's token_at."""
    mask = (1 << 64) - 1
    out = []
    for i in range(n):
        x = (i * 0x9E3779B97F4A7C15) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        x ^= x >> 31
        out.append(x % vocab)
    return torch.tensor(out, dtype=torch.int64)


def make_adamw(params, impl):
    """torch.optim.AdamW in the requested implementation; "auto" takes the fused CPU kernel where this
    PyTorch has one (2.4 and later), else the multi-tensor (foreach) one, the faster of the two 1.13
    offers here."""
    kw = dict(lr=3e-4, weight_decay=0.01)  # decay on every parameter, as lwcl's one adamw over the flat buffer
    if impl in ("auto", "fused"):
        try:
            return torch.optim.AdamW(params, fused=True, **kw), "fused"
        except (TypeError, RuntimeError):
            if impl == "fused":
                raise
    if impl == "loop":
        return torch.optim.AdamW(params, foreach=False, **kw), "loop"
    return torch.optim.AdamW(params, foreach=True, **kw), "foreach"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--adamw", choices=["auto", "fused", "foreach", "loop"], default="auto")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: the forward pass under torch.autocast('cpu', torch.bfloat16)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, T, V = args.batch, args.seq, args.vocab
    model = GPT2(V, max(T, 128), args.width, args.layers, args.heads, args.ffn)
    opt, adamw_impl = make_adamw(list(model.parameters()), args.adamw)
    stream = token_stream(B * (T + 1), V).view(B, T + 1)
    ids, targets = stream[:, :T].contiguous(), stream[:, 1:].contiguous()
    times = []
    first = 0.0
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with (torch.autocast("cpu", dtype=torch.bfloat16) if args.autocast == "bf16" else contextlib.nullcontext()):
            loss = model(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
        if step == 0:
            first = loss.item()
    log_v = math.log(V)
    if abs(first - log_v) >= 0.05 * log_v:
        raise SystemExit("train_step.py: first loss %.4f is not near log(vocab) = %.4f" % (first, log_v))
    times.sort()
    step_s = times[len(times) // 2]
    n_params = sum(p.numel() for p in model.parameters())
    print("pytorch %s (threads %d, AdamW %s, autocast %s): gpt2 LM, %d parameters, B=%d T=%d"
          % (torch.__version__, torch.get_num_threads(), adamw_impl, args.autocast, n_params, B, T))
    print("pytorch loss: first %.4f (log vocab %.4f), final %.4f" % (first, log_v, loss.item()))
    print("pytorch step seconds (median of %d): %.5f" % (args.steps, step_s))
    print("pytorch tokens/s: %.0f" % (B * T / step_s))


if __name__ == "__main__":
    main()
