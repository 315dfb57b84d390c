#!/usr/bin/env python3
"""PyTorch reference for `conelab bench train`: the same model, batch and optimizer, the same figures.

The Transformer presets mirror conelab's exactly: learned positions, pre-LN blocks (fused qkv
projection, causal softmax attention, GELU MLP with 4·d hidden units), a final LayerNorm, the output
layer tied to the embedding, N(0, 0.02) initialisation (residual projections 0.02/sqrt(2·layers)),
zero biases, dropout 0.1. The LSTM presets (`lstm`, `awd`) mirror conelab's LSTM: dropout on the
embedding and after every layer, a projection back to the embedding width when the hidden size
differs, an output bias, uniform initialisation, the state carried (detached) from window to
window; PyTorch's LSTM has two bias vectors per layer where burn's has one (4·hidden parameters more
per layer, 0.04 % of `lstm`). AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0.01) with global-norm
clipping at 1.0; uniformly random tokens; B contiguous streams of T tokens.

    python3 bench/reference_torch.py --model tiny --device cpu --steps 20 --warmup 5 [--json]
"""
import argparse
import json
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    "tiny": dict(d=128, layers=2, heads=4, context=64),
    "small": dict(d=256, layers=4, heads=4, context=128),
    "gpt2-small": dict(d=768, layers=12, heads=12, context=256),
    "lstm": dict(lstm=True, embed=650, hidden=650, layers=2, context=35, dropout=0.5, init=0.05),
    "awd": dict(lstm=True, embed=400, hidden=1150, layers=3, context=70, dropout=0.4, init=0.1),
}


class TiedLstm(nn.Module):
    def __init__(self, vocab, embed, hidden, layers, dropout, init, **_):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.layers = nn.ModuleList(
            [nn.LSTM(embed if i == 0 else hidden, hidden, batch_first=True) for i in range(layers)]
        )
        self.projection = nn.Linear(hidden, embed) if hidden != embed else None
        self.bias = nn.Parameter(torch.zeros(vocab))
        self.drop = nn.Dropout(dropout)
        for p in self.parameters():
            nn.init.uniform_(p, -init, init)
        nn.init.zeros_(self.bias)
        self.state = None

    def forward(self, ids):
        b, t = ids.shape
        x = self.drop(self.embedding(ids))
        state = self.state or [None] * len(self.layers)
        carried = []
        for layer, s in zip(self.layers, state):
            x, (h, c) = layer(x, s)
            carried.append((h.detach(), c.detach()))
            x = self.drop(x)
        self.state = carried
        if self.projection is not None:
            x = self.projection(x)
        return x.reshape(b * t, -1) @ self.embedding.weight.t() + self.bias


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads = heads
        self.ln_attn = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln_mlp = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_out = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        b, t, d = x.shape
        h = self.heads
        qkv = self.qkv(self.ln_attn(x)).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // h)
        scores = scores.masked_fill(mask, float("-inf"))
        attn = self.drop(F.softmax(scores, dim=-1))
        ctx = (attn @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(ctx))
        return x + self.drop(self.fc_out(F.gelu(self.fc(self.ln_mlp(x)))))


class TiedTransformer(nn.Module):
    def __init__(self, vocab, d, layers, heads, context, dropout=0.1, std=0.02):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d)
        self.positions = nn.Parameter(torch.zeros(context, d))
        self.blocks = nn.ModuleList([Block(d, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)
        residual = std / math.sqrt(2 * layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                continue
            elif name.endswith("proj.weight") or name.endswith("fc_out.weight"):
                nn.init.normal_(p, 0.0, residual)
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(self, ids):
        b, t = ids.shape
        x = self.drop(self.embedding(ids) + self.positions[:t])
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=ids.device), 1)
        for block in self.blocks:
            x = block(x, mask)
        h = self.ln_f(x).reshape(b * t, -1)
        return h @ self.embedding.weight.t()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--bptt", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    p = dict(PRESETS[args.model])
    if args.bptt:
        p["context"] = args.bptt
    t = p["context"]
    dev = torch.device(args.device)
    if p.get("lstm"):
        model = TiedLstm(args.vocab, **p).to(dev)
    else:
        model = TiedTransformer(args.vocab, p["d"], p["layers"], p["heads"], t).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    n_tokens = (args.warmup + args.steps + 2) * args.batch * t + 1
    data = torch.randint(0, args.vocab, (n_tokens,), device=dev)
    per_stream = (n_tokens - 1) // args.batch
    streams = data[: args.batch * per_stream + 1]
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    def step(k):
        start = k * t
        x = torch.stack([streams[s * per_stream + start : s * per_stream + start + t] for s in range(args.batch)])
        y = torch.stack([streams[s * per_stream + start + 1 : s * per_stream + start + t + 1] for s in range(args.batch)])
        with autocast:
            logits = model(x)
            loss = F.cross_entropy(logits.float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    for k in range(args.warmup):
        step(k).item()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    start = time.perf_counter()
    for k in range(args.warmup, args.warmup + args.steps):
        t0 = time.perf_counter()
        step(k).item()  # the loss is read back every step, as conelab does
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    total = time.perf_counter() - start
    mean = sum(times) / len(times)
    std = math.sqrt(sum((x - mean) ** 2 for x in times) / len(times))
    params = sum(q.numel() for q in model.parameters())
    peak = (
        torch.cuda.max_memory_allocated() / 2**20
        if dev.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    r = dict(
        engine=f"pytorch {torch.__version__}",
        model=args.model,
        device=args.device,
        batch=args.batch,
        window=t,
        vocab=args.vocab,
        parameters=params,
        steps=args.steps,
        tokens_per_sec=args.steps * args.batch * t / total,
        ms_per_step=mean,
        ms_per_step_std=std,
        peak_rss_mib=peak,
        threads=torch.get_num_threads(),
    )
    if args.json:
        json.dump(r, sys.stdout, indent=2)
        print()
    else:
        print(
            f"{r['engine']:<14} {r['model']:<6} {r['device']:<6} B={r['batch']} T={t} N={r['vocab']} "
            f"params={params} tokens/s={r['tokens_per_sec']:.0f} ms/step={mean:.1f}±{std:.1f} "
            f"peak MiB={peak:.0f} threads={r['threads']}"
        )


if __name__ == "__main__":
    main()
