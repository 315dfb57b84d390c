#!/usr/bin/env bash
# Side-by-side CPU training throughput in one run: conelab on burn-flex, conelab on LibTorch CPU,
# and the PyTorch reference (bench/reference_torch.py), same model, batch, vocabulary and steps.
#
#   bench/compare_cpu.sh [--model tiny|small|lstm|awd] [--steps 20] [--warmup 5] [--vocab 10000]
#                        [--rounds 2] [--no-libtorch]
#
# Needs the environment of scripts/setup-libtorch.sh (full mode: the Python reference needs
# torch's CUDA wheels to import), and for the LibTorch row a conelab built with `--features tch`
# (CONELAB=path/to/conelab); --no-libtorch compares the default build with PyTorch alone.
set -euo pipefail
cd "$(dirname "$0")/.."
model=tiny steps=20 warmup=5 vocab=10000 rounds=2 libtorch=1
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --no-libtorch) libtorch=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
conelab="${CONELAB:-target/release/conelab}"
# The flex numbers should come from a release build of the default features; a separate binary may
# be named for them (LibTorch's work happens inside libtorch, so its binary matters less).
conelab_flex="${CONELAB_FLEX:-$conelab}"
python="${CONELAB_TORCH_PYTHON:-python3}"
args=(--model "$model" --steps "$steps" --warmup "$warmup" --vocab "$vocab")

# One table row from a JSON result on stdin.
row_py='
import json, sys
r = json.load(sys.stdin)
engine = r["engine"]
print(f"{engine:<22} {r['"'"'device'"'"']:<14} {r['"'"'tokens_per_sec'"'"']:>10.0f} {r['"'"'ms_per_step'"'"']:>10.1f} {r['"'"'ms_per_step_std'"'"']:>8.1f} {r['"'"'peak_rss_mib'"'"']:>9.0f}")
'
row() { "$python" -c "$row_py"; }

printf '%-22s %-14s %10s %10s %8s %9s\n' engine device tokens/s ms/step "±std" "peak MiB"
for round in $(seq "$rounds"); do
  "$conelab_flex" bench train "${args[@]}" --device cpu --format json | row
  [ "$libtorch" = 0 ] || "$conelab" bench train "${args[@]}" --device libtorch-cpu --format json | row
  "$python" bench/reference_torch.py "${args[@]}" --device cpu --json | row
done
