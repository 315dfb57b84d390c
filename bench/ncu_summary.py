"""Kernels by kind from Nsight Compute CSVs, side by side: launches and GPU milliseconds.

    ncu --csv --metrics gpu__time_duration.sum --log-file conelab.csv gpu-bin/conelab bench train ...
    python3 bench/ncu_summary.py conelab.csv torch.csv[.xz] [--names conelab,pytorch]

Each file is one `ncu --csv --metrics gpu__time_duration.sum` log (plain or xz); every kernel of
the process counts, so give the same number of steps to both engines. The kinds are read from the
kernel's name (the first rule that matches, in the order of KINDS), so a kernel nobody foresaw lands
in "other" rather than being lost.
"""

import argparse
import csv
import lzma
import sys
from collections import defaultdict

# (kind, substrings of the kernel name); the first kind with a matching substring wins.
KINDS = [
    ("attention (fused)", ("fmha", "flash", "attention")),
    ("optimizer and clipping (foreach / fused)", ("multi_tensor_apply", "lpnorm", "fused_adam")),
    ("softmax / cross-entropy (fused)", ("softmax", "nll_loss")),
    ("layer norm (fused)", ("layer_norm", "gammabeta")),
    ("dropout (fused)", ("dropout",)),
    ("matmul (GEMM)", ("gemm", "splitkreduce", "cublas", "cutlass")),
    ("reductions", ("reduce_kernel",)),
    ("elementwise", ("elementwise", "copy", "cat", "gather", "scatter", "index")),
]
OTHER = "other"


def kind_of(name):
    low = name.lower()
    for kind, needles in KINDS:
        if any(n in low for n in needles):
            return kind
    return OTHER


def read_kernels(path):
    """[(kernel name, nanoseconds)] of one ncu CSV log; lines before the header are ncu's own."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", newline="") as f:
        rows = csv.reader(line for line in f if line.startswith('"'))
        header = next(rows, None)
        if header is None:
            raise ValueError(f"{path}: no CSV rows (was ncu run with --csv?)")
        try:
            name_at, metric_at, value_at = (
                header.index("Kernel Name"),
                header.index("Metric Name"),
                header.index("Metric Value"),
            )
        except ValueError:
            raise ValueError(f"{path}: not an ncu --csv log (no Kernel Name / Metric columns)") from None
        out = []
        for row in rows:
            if row[metric_at] == "gpu__time_duration.sum":
                out.append((row[name_at], float(row[value_at].replace(",", ""))))
        return out


def summarise(kernels):
    """{kind: [launches, ms]} over the given kernels."""
    out = defaultdict(lambda: [0, 0.0])
    for name, ns in kernels:
        cell = out[kind_of(name)]
        cell[0] += 1
        cell[1] += ns / 1e6
    return out


def table(summaries, names):
    kinds = [k for k, _ in KINDS] + [OTHER]
    head = "| kernels by kind | " + " | ".join(f"{n}: launches | {n}: GPU ms" for n in names) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(names)]
    for kind in kinds:
        if all(kind not in s for s in summaries):
            continue
        cells = " | ".join(f"{s.get(kind, [0, 0.0])[0]:,} | {s.get(kind, [0, 0.0])[1]:.2f}" for s in summaries)
        lines.append(f"| {kind} | {cells} |")
    totals = " | ".join(
        f"**{sum(c[0] for c in s.values()):,}** | **{sum(c[1] for c in s.values()):.2f}**" for s in summaries
    )
    lines.append(f"| **all** | {totals} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--names", help="one column name per file, comma-separated (default: the file names)")
    args = ap.parse_args(argv)
    names = args.names.split(",") if args.names else args.files
    if len(names) != len(args.files):
        ap.error(f"--names gives {len(names)} names for {len(args.files)} files")
    try:
        summaries = [summarise(read_kernels(p)) for p in args.files]
    except (OSError, ValueError, lzma.LZMAError) as e:
        print(f"ncu_summary.py: {e}", file=sys.stderr)
        return 1
    print(table(summaries, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
