#!/usr/bin/env python3
"""Side-by-side benchmark, PyTorch half: the same layer-wise distillation step as segment_step.cpp on a
2-block GPT-2-small segment: teacher forward (no grad) + student forward and backward + MSE + AdamW,
float32 on the CPU, or under CPU bf16 autocast with --autocast bf16 (f32 weights and optimiser). Each
piece takes the fastest form the running PyTorch offers: fused attention (scaled_dot_product_attention,
2.0 and later) and the fused CPU AdamW (2.4 and later). Prints the median step time. Run through
bench/peer/run_segment_step.sh."""
import argparse
import contextlib
import math
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, C, H, Fw):
        super().__init__()
        self.H = H
        self.ln1 = torch.nn.LayerNorm(C)
        self.q = torch.nn.Linear(C, C)
        self.k = torch.nn.Linear(C, C)
        self.v = torch.nn.Linear(C, C)
        self.o = torch.nn.Linear(C, C)
        self.ln2 = torch.nn.LayerNorm(C)
        self.fc = torch.nn.Linear(C, Fw)
        self.proj = torch.nn.Linear(Fw, C)

    def forward(self, x):
        B, T, C = x.shape
        D = C // self.H
        h = self.ln1(x)
        q = self.q(h).view(B, T, self.H, D).transpose(1, 2)
        k = self.k(h).view(B, T, self.H, D).transpose(1, 2)
        v = self.v(h).view(B, T, self.H, D).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch >= 2.0: fused kernel
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
            mask = torch.ones(T, T, dtype=torch.bool).triu(1)
            a = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        a = a.transpose(1, 2).reshape(B, T, C)
        x = x + self.o(a)
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def make_adamw(params):
    """torch.optim.AdamW, the fused CPU kernel where this PyTorch has one (2.4 and later), else the
    multi-tensor (foreach) form."""
    kw = dict(lr=1e-4, weight_decay=0.01)
    try:
        return torch.optim.AdamW(params, fused=True, **kw), "fused"
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(params, foreach=True, **kw), "foreach"


def autocast(kind):
    """The forward passes' context: CPU bf16 autocast, or nothing."""
    if kind == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: the forward passes under torch.autocast('cpu', torch.bfloat16)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    C, Fw = args.width, 4 * args.width
    teacher = torch.nn.Sequential(*[Block(C, args.heads, Fw) for _ in range(args.layers)])
    student = torch.nn.Sequential(*[Block(C, args.heads, Fw) for _ in range(args.layers)])
    opt, adamw_impl = make_adamw(list(student.parameters()))
    x = torch.randn(args.batch, args.seq, C)
    times = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        with autocast(args.autocast):
            with torch.no_grad():
                ty = teacher(x)
            opt.zero_grad(set_to_none=False)
            loss = F.mse_loss(student(x).float(), ty.float())
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    print("pytorch %s (threads %d, AdamW %s, autocast %s), final loss %.6f"
          % (torch.__version__, torch.get_num_threads(), adamw_impl, args.autocast, loss.item()))
    print("pytorch step seconds (median of %d): %.4f" % (args.steps, times[len(times) // 2]))


if __name__ == "__main__":
    main()
