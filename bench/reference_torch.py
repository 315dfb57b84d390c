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

Modes (--mode), from the way conelab composes a step today to what a user would run:

    composed  attention from matmul, mask, softmax and dropout, layer norm and cross-entropy from
              their parts, AdamW and clipping per tensor
    fp32      PyTorch eager as written today: F.scaled_dot_product_attention (dropout inside),
              multi-tensor (foreach) AdamW and clipping
    bf16      fp32's model under bf16 autocast, with the fused AdamW
    compile   bf16 with torch.compile(model)

--count-ops profiles one step after the warm-up and counts its top-level ATen operators (those
no other ATen operator called: the ones the model's code, autograd's backward nodes and the
optimizer dispatch), by kind (bench/op_kinds.tsv, shared with `conelab bench ops`).

    python3 bench/reference_torch.py --model tiny --device cpu --steps 20 --warmup 5 [--json]
    python3 bench/reference_torch.py --model small --mode fp32 --steps 1 --warmup 2 --count-ops
"""
import argparse
import collections
import json
import math
import os
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


MODES = ("composed", "fp32", "bf16", "compile")
OP_KINDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "op_kinds.tsv")


def read_op_kinds(path=OP_KINDS):
    """(pattern, kind) pairs from bench/op_kinds.tsv, in order."""
    rules = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                raise ValueError(f"{path}:{n}: expected OPERATOR<TAB>KIND, got {line!r}")
            rules.append((parts[0], parts[1]))
    return rules


def kind_of(name, rules):
    for pattern, kind in rules:
        if pattern.endswith("*") and name.startswith(pattern[:-1]) or name == pattern:
            return kind
    return "elementwise"


def top_level_ops(events):
    """Counts of the ATen operators among profiler `events` that no other ATen operator called."""
    counts = collections.Counter()
    for e in events:
        if not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if parent is None:
            counts[e.name] += 1
    return counts


def op_summary(counts, rules):
    by_kind = collections.Counter()
    for name, n in counts.items():
        by_kind[kind_of(name, rules)] += n
    total = sum(counts.values())
    return dict(
        total=total,
        kernels=total - by_kind.get("view", 0),
        by_kind=dict(sorted(by_kind.items())),
        by_name=dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
    )


def layer_norm(ln, x, composed):
    """`ln` applied fused (one ATen op) or composed from mean, variance and elementwise ops."""
    if not composed:
        return ln(x)
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def cross_entropy(logits, targets, composed):
    """Mean negative log-likelihood, fused or composed from logsumexp and a gather."""
    if not composed:
        return F.cross_entropy(logits, targets)
    log_z = torch.logsumexp(logits, dim=-1)
    return (log_z - logits.gather(1, targets.unsqueeze(1)).squeeze(1)).mean()


class Block(nn.Module):
    def __init__(self, d, heads, dropout, sdpa=False):
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.dropout = dropout
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
        composed = not self.sdpa
        qkv = self.qkv(layer_norm(self.ln_attn, x, composed)).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.sdpa:
            p = self.dropout if self.training else 0.0
            ctx = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // h)
            scores = scores.masked_fill(mask, float("-inf"))
            ctx = self.drop(F.softmax(scores, dim=-1)) @ v
        ctx = ctx.transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(ctx))
        return x + self.drop(self.fc_out(F.gelu(self.fc(layer_norm(self.ln_mlp, x, composed)))))


class TiedTransformer(nn.Module):
    def __init__(self, vocab, d, layers, heads, context, dropout=0.1, std=0.02, sdpa=False):
        super().__init__()
        self.sdpa = sdpa
        self.embedding = nn.Embedding(vocab, d)
        self.positions = nn.Parameter(torch.zeros(context, d))
        self.blocks = nn.ModuleList([Block(d, heads, dropout, sdpa) for _ in range(layers)])
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
        mask = None if self.sdpa else torch.triu(torch.ones(t, t, dtype=torch.bool, device=ids.device), 1)
        for block in self.blocks:
            x = block(x, mask)
        h = layer_norm(self.ln_f, x, not self.sdpa).reshape(b * t, -1)
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
    ap.add_argument("--mode", default="fp32", choices=MODES, help="see above (default fp32)")
    ap.add_argument("--count-ops", action="store_true", help="count one step's top-level ATen operators")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.batch < 1:
        ap.error("--steps and --batch must be at least 1, --warmup at least 0")
    composed = args.mode == "composed"
    bf16 = args.mode in ("bf16", "compile")

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
        model = TiedTransformer(args.vocab, p["d"], p["layers"], p["heads"], t, sdpa=not composed).to(dev)
    # composed: one update a tensor (foreach=False); fp32: the multi-tensor update PyTorch picks on
    # CUDA (asked for, so the CPU runs it too); bf16 and compile: the fused update.
    adamw = dict(foreach=False) if composed else dict(fused=True) if bf16 else dict(foreach=True)
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, **adamw
    )
    forward = torch.compile(model) if args.mode == "compile" else model
    n_tokens = (args.warmup + args.steps + 2) * args.batch * t + 1
    data = torch.randint(0, args.vocab, (n_tokens,), device=dev)
    per_stream = (n_tokens - 1) // args.batch
    streams = data[: args.batch * per_stream + 1]
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16)

    def step(k):
        start = k * t
        x = torch.stack([streams[s * per_stream + start : s * per_stream + start + t] for s in range(args.batch)])
        y = torch.stack([streams[s * per_stream + start + 1 : s * per_stream + start + t + 1] for s in range(args.batch)])
        with autocast:
            logits = forward(x)
            loss = cross_entropy(logits.float(), y.reshape(-1), composed)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=not composed)
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
    ops = None
    if args.count_ops:
        k = args.warmup + args.steps
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step(k).item()
            sync()
        ops = op_summary(top_level_ops(prof.events()), read_op_kinds())
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
        mode=args.mode,
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
    if ops is not None:
        r["ops"] = ops
    if args.json:
        json.dump(r, sys.stdout, indent=2)
        print()
    else:
        print(
            f"{r['engine']:<14} {r['model']:<6} {r['device']:<6} B={r['batch']} T={t} N={r['vocab']} "
            f"params={params} tokens/s={r['tokens_per_sec']:.0f} ms/step={mean:.1f}±{std:.1f} "
            f"peak MiB={peak:.0f} threads={r['threads']} mode={args.mode}"
        )
        if ops is not None:
            kinds = " ".join(f"{k}={n}" for k, n in ops["by_kind"].items())
            print(f"top-level ATen ops per step: {ops['total']} ({ops['kernels']} launch a kernel): {kinds}")


if __name__ == "__main__":
    main()
