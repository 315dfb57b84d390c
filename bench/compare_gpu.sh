#!/usr/bin/env bash
# One call on the GPU machine: conelab (LibTorch CUDA) against the PyTorch reference
# (bench/reference_torch.py, run on that machine's own PyTorch) in each of its modes — composed,
# fp32 (eager with SDPA, foreach AdamW), bf16 (autocast, fused AdamW), compile — same model, batch,
# steps. Prints tokens/s, ms/step, peak GPU memory (nvidia-smi, sampled every 100 ms, above the
# idle level, the same way for all) and MFU (6·params·tokens/s over the GPU's dense peak).
#
#   bench/compare_gpu.sh [--models small,gpt2-small] [--modes fp32,bf16,compile] [--steps 50]
#                        [--warmup 10] [--vocab 33278] [--batch 16] [--rounds 2] [--peak-tflops 66.9]
#                        [--peak-tflops-bf16 989.4] [--step-sync]
#
# --step-sync: conelab fp32 a second time with its steps synchronised (`bench train --step-sync`:
# every step's loss read back before the next is dispatched), beside the pipelined default.
# CONELAB: the binary (default gpu-bin/conelab from scripts/build-gpu-binary.sh);
# PYTHON: the python with torch (default /opt/torch/.venv/bin/python, else python3).
# --peak-tflops: the dense peak the fp32 rows' MFU is taken against: 66.9 (an H100/H200 SXM's fp32 on
# the CUDA cores; neither engine turns TF32 on), 494.7 if TF32 is on. --peak-tflops-bf16: the bf16
# and compile rows' peak (989.4, an H100/H200 SXM's dense bf16 tensor cores).
set -euo pipefail
cd "$(dirname "$0")/.."
models=small,gpt2-small modes=fp32,bf16,compile steps=50 warmup=10 vocab=33278 batch=16 rounds=2 peak=66.9 peak_bf16=989.4 step_sync=0
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --peak-tflops) peak=$2; shift 2 ;;
    --peak-tflops-bf16) peak_bf16=$2; shift 2 ;;
    --step-sync) step_sync=1; shift ;;
    *) echo "compare_gpu.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
conelab="${CONELAB:-gpu-bin/conelab}"
python="${PYTHON:-/opt/torch/.venv/bin/python}"
[ -x "$python" ] || python=python3
command -v nvidia-smi >/dev/null || { echo "compare_gpu.sh: no nvidia-smi: not a GPU machine" >&2; exit 1; }
[ -x "$conelab" ] || { echo "compare_gpu.sh: $conelab not found (scripts/build-gpu-binary.sh)" >&2; exit 1; }

mem_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
# Runs "$@" with its JSON on stdout; prints "JSON<TAB>peak MiB above idle".
sampled() {
  local idle peak file pid
  idle=$(mem_used); file=$(mktemp)
  ( while true; do mem_used; sleep 0.1; done ) > "$file" &
  pid=$!
  local json
  json=$("$@")
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  peak=$(sort -n "$file" | tail -1); rm -f "$file"
  printf '%s\t%s\n' "$(echo "$json" | tr -d '\n')" "$((peak - idle))"
}
row_py='
import json, sys
line = sys.stdin.read().rstrip("\n")
js, mem = line.rsplit("\t", 1)
r = json.loads(js)
peak = float(sys.argv[1]) * 1e12
mfu = 6 * r["parameters"] * r["tokens_per_sec"] / peak if r.get("parameters") else float("nan")
print(f"{r['"'"'engine'"'"']:<18} {r['"'"'model'"'"']:<11} {sys.argv[2]:<8} {r['"'"'tokens_per_sec'"'"']:>11.0f} {r['"'"'ms_per_step'"'"']:>9.2f} {int(mem):>9} {100*mfu:>6.1f}%")
'
printf '%-18s %-11s %-8s %11s %9s %9s %7s\n' engine model mode tokens/s ms/step "peak MiB" MFU
for round in $(seq "$rounds"); do
  for model in ${models//,/ }; do
    args=(--model "$model" --steps "$steps" --warmup "$warmup" --vocab "$vocab" --batch "$batch")
    sampled "$conelab" bench train "${args[@]}" --device cuda --format json | "$python" -c "$row_py" "$peak" fp32 \
      || echo "conelab            $model fp32: failed (its error above)"
    if [ "$step_sync" = 1 ]; then
      sampled "$conelab" bench train "${args[@]}" --device cuda --step-sync --format json \
        | "$python" -c "$row_py" "$peak" fp32 \
        || echo "conelab            $model fp32 step sync: failed (its error above)"
    fi
    sampled "$conelab" bench train "${args[@]}" --device cuda --precision bf16 --format json \
      | "$python" -c "$row_py" "$peak_bf16" bf16 \
      || echo "conelab            $model bf16: failed (its error above)"
    for mode in ${modes//,/ }; do
      sampled "$python" bench/reference_torch.py "${args[@]}" --device cuda --mode "$mode" --json \
        | "$python" -c "$row_py" "$([ "$mode" = bf16 ] || [ "$mode" = compile ] && echo "$peak_bf16" || echo "$peak")" "$mode" \
        || echo "PyTorch            $model $mode: failed (its error above)"
    done
  done
done
