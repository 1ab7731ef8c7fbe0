#!/usr/bin/python3
"""Side-by-side benchmark, PyTorch half: the same layer-wise distillation step as segment_step.cpp on a
2-block GPT-2-small segment: teacher forward (no grad) + student forward and backward + MSE + AdamW,
float32 on the CPU. Prints the median step time. Run through bench/peer/run_segment_step.sh."""
import argparse
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
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        p = s.masked_fill(mask, float("-inf")).softmax(-1)
        a = (p @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.o(a)
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


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
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    C, Fw = args.width, 4 * args.width
    teacher = torch.nn.Sequential(*[Block(C, args.heads, Fw) for _ in range(args.layers)])
    student = torch.nn.Sequential(*[Block(C, args.heads, Fw) for _ in range(args.layers)])
    opt = torch.optim.AdamW(student.parameters(), lr=1e-4, weight_decay=0.01)
    x = torch.randn(args.batch, args.seq, C)
    times = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        with torch.no_grad():
            ty = teacher(x)
        opt.zero_grad(set_to_none=False)
        loss = F.mse_loss(student(x), ty)
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    print("pytorch %s (threads %d), final loss %.6f" % (torch.__version__, torch.get_num_threads(), float(loss)))
    print("pytorch step seconds (median of %d): %.4f" % (args.steps, times[len(times) // 2]))


if __name__ == "__main__":
    main()
