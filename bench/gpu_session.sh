#!/usr/bin/env bash
# The GPU plan of docs/GPU.md in a few device calls of at most 10 minutes each (the device tool's
# limit): every stage writes what it measured under $OUT (at most 8 files come back, so runs travel
# as one tar), and the WikiText-2 runs stop on SIGINT before the call's limit (exit 75, a checkpoint
# saved) and continue with --resume in the next call on the same warm machine.
#
#   bench/gpu_session.sh pending               # what gpu-engine still needs measured, in one call of
#                                              # about 5 minutes (docs/GPU.md, "Built since the last
#                                              # GPU session"): run it first on a 15-minute budget
#   bench/gpu_session.sh smoke                 # 200 steps of tiny on cuda, a mid-run unfreeze; eval
#   bench/gpu_session.sh compare               # bench/compare_gpu.sh, fp32, small and gpt2-small
#   bench/gpu_session.sh engine                # the gpu-engine matrix: small, gpt2-small at B = 16 and 64,
#                                              # lstm, awd at B = 64, every reference mode; ops per step
#                                              # on CUDA; kernels per step (ncu)
#   bench/gpu_session.sh objectives            # conelab bench objectives on the device
#   bench/gpu_session.sh wt2 SECONDS [sc]      # start or continue the WikiText-2 runs for SECONDS;
#                                              # `sc` switches spectrum control on in run `sc`
#   bench/gpu_session.sh collect               # eval (test) + export of every WikiText-2 run, a tar
#
# CONELAB (default gpu-bin/conelab), DEVICE (default cuda), CORPUS (default gpu-data/wikitext-2),
# WT2_SEED and WT2_DIR (default checkpoints/wt2; it names the files under $OUT) give more seeds;
# WT2_STEPS, WT2_BATCH, WT2_MODEL, WT2_EVAL and NAMES (runs) let a CPU rehearsal run the same commands small.
set -uo pipefail
cd "$(dirname "$0")/.."
conelab="${CONELAB:-gpu-bin/conelab}"
device="${DEVICE:-cuda}"
corpus="${CORPUS:-gpu-data/wikitext-2}"
out="${OUT:-/tmp/gpu-session-out}"
# scripts/build-gpu-binary.sh leaves the binary xz'd (the device tool carries 64 MiB at most).
if [ ! -x "$conelab" ] && [ -f "$conelab.xz" ]; then
  xz -dk "$conelab.xz" && chmod +x "$conelab" || exit 1
fi
runs="${WT2_DIR:-checkpoints/wt2}"
tag=$(basename "$runs")
mkdir -p "$out" "$runs"

# Yu et al.'s AGG α = 0.03 occurrences per update at 32,768 tokens per update; ours has
# B·T = 64·128 = 8,192, so the same rarity threshold is α = 0.03·8192/32768 = 0.0075.
wt2_steps="${WT2_STEPS:-3000}" wt2_batch="${WT2_BATCH:-64}" wt2_model="${WT2_MODEL:-small}"
wt2_eval="${WT2_EVAL:-254}" wt2_seed="${WT2_SEED:-1}"
declare -A flags=(
  [mle]=""
  [agg]="--reg agg=0.0075"
  [freeze-rare]="--freeze rare"
  [gate-b]="--gate-freeze b"
  [cosreg]="--reg cos=1"
  [sc]=""
  [dev]="--reg dev=0.1"
)
names="${NAMES:-mle agg freeze-rare gate-b cosreg sc dev}"

stage_smoke() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
  "$conelab" --version
  ldd "$conelab" | grep -i 'not found' || echo "ldd: every library resolved"
  rm -rf checkpoints/gpu-smoke
  "$conelab" train synthetic --model tiny --device "$device" --steps 200 --freeze rare@100 \
    --eval-every 100 --checkpoint-every 100 --headless --run-dir checkpoints/gpu-smoke \
    > "$out/smoke-train.log" 2>&1
  echo "smoke train exit $?"
  tail -5 "$out/smoke-train.log"
  "$conelab" eval checkpoints/gpu-smoke --device "$device" --format json > "$out/smoke-eval.json"
  echo "smoke eval exit $?"
  tar czf "$out/smoke-run.tar.gz" -C checkpoints gpu-smoke
  du -h "$out/smoke-run.tar.gz"
}

# The figures docs/GPU.md lists as "built since the last GPU session", most wanted first, each part
# under its own timeout (a part that overruns costs its own figure, not the rest) and written
# under $OUT as it completes. The timeouts add up to 8.5 minutes (a call with timeout_s 540 ends
# it whatever happens); the parts themselves should take about 5 on an H100.
stage_pending() {
  local py=/opt/torch/.venv/bin/python
  [ -x "$py" ] || py=python3
  local t0=$SECONDS
  part() { echo "== [$((SECONDS - t0)) s] $*"; }
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
    "$conelab" --version
    ldd "$conelab" | grep -i 'not found' || echo "ldd: every library resolved"
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  } | tee "$out/pending-machine.txt"
  # Kernels per step with the stacked LSTM gates, native_dropout and unlikelihood in the head,
  # beside PyTorch eager's (LibTorch CPU: small 258/373, lstm 71/76, awd 87/102).
  part "bench ops"
  for model in small lstm awd; do
    timeout 60 "$conelab" bench ops --model "$model" --device "$device" --batch 16 --warmup 1 \
      --python "$py" 2>&1 | tee -a "$out/pending-ops.txt"
  done
  timeout 45 "$conelab" bench ops --model small --device "$device" --batch 16 --warmup 1 \
    --reg ul=1 --python "$py" 2>&1 | tee -a "$out/pending-ops.txt"
  # Unlikelihood's step against MLE's (1.79x on CUDA before the head took its gradient).
  part "bench objectives"
  timeout 60 "$conelab" bench objectives --device "$device" --vocab 10000,33278 --rounds 5 2>&1 \
    | tee "$out/pending-objectives.txt"
  # Time per step beside PyTorch eager, pipelined and step-synchronised, at B = 16 then 64.
  part "compare B = 16"
  CONELAB="$conelab" timeout 150 bench/compare_gpu.sh --models small,gpt2-small --batch 16 \
    --modes fp32,bf16 --step-sync --rounds 1 --steps 40 --warmup 8 2>&1 | tee "$out/pending-compare-b16.txt"
  part "compare lstm, awd, B = 64"
  CONELAB="$conelab" timeout 75 bench/compare_gpu.sh --models lstm,awd --batch 64 \
    --modes fp32 --rounds 1 --steps 40 --warmup 8 2>&1 | tee "$out/pending-compare-lstm.txt"
  part "done"
}

stage_compare() {
  # Neither engine turns TF32 on, so fp32 matmuls run on the CUDA cores: H100 SXM 66.9 TFLOP/s.
  CONELAB="$conelab" bench/compare_gpu.sh --models small,gpt2-small --modes fp32,bf16,compile --rounds 1 \
    --steps 50 --warmup 10 --peak-tflops 66.9 2>&1 | tee "$out/compare.txt"
}

stage_engine() {
  local py=/opt/torch/.venv/bin/python
  [ -x "$py" ] || py=python3
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
  "$conelab" --version
  ldd "$conelab" | grep -i 'not found' || echo "ldd: every library resolved"
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  # What the CUDA path dispatches, beside what `bench ops --device libtorch-cpu` counts on a CPU.
  for model in small lstm; do
    "$conelab" bench ops --model "$model" --device cuda --batch 16 --warmup 1 --python "$py" \
      2>&1 | tee "$out/ops-$model-cuda.txt"
  done
  local common=(--rounds 1 --steps 40 --warmup 8)
  CONELAB="$conelab" bench/compare_gpu.sh --models small,gpt2-small --batch 16 \
    --modes composed,fp32,bf16 "${common[@]}" 2>&1 | tee "$out/compare-b16.txt"
  CONELAB="$conelab" bench/compare_gpu.sh --models small,gpt2-small --batch 64 \
    --modes fp32,bf16 "${common[@]}" 2>&1 | tee "$out/compare-b64.txt"
  CONELAB="$conelab" bench/compare_gpu.sh --models lstm,awd --batch 64 \
    --modes fp32,bf16 "${common[@]}" 2>&1 | tee "$out/compare-lstm.txt"
  # torch.compile is a fixed reference (docs/BENCHMARKS.md): ENGINE_COMPILE=0 spares its minute.
  if [ "${ENGINE_COMPILE:-1}" = 1 ]; then
    CONELAB="$conelab" bench/compare_gpu.sh --models small,gpt2-small --batch 16 \
      --modes compile "${common[@]}" 2>&1 | tee "$out/compare-compile.txt"
  fi
  # cuDNN's "weights are not part of single contiguous chunk" warning is filtered on the calling
  # thread; autograd's device threads run the LSTM backward, so look at what they print too.
  "$conelab" bench train --model lstm --steps 3 --warmup 1 --batch 16 --device cuda \
    > "$out/lstm-stderr.txt" 2>&1
  echo "lstm warning lines: $(grep -ci 'contiguous chunk' "$out/lstm-stderr.txt")"
  # Every kernel of one warm-up and one timed step of `small`, each engine (kernels per step).
  if command -v ncu >/dev/null; then
    local args=(--model small --steps 1 --warmup 1 --vocab 33278 --batch 16)
    timeout 120 ncu --csv --metrics gpu__time_duration.sum --log-file "$out/ncu-conelab.csv" \
      "$conelab" bench train "${args[@]}" --device cuda > /dev/null 2>&1
    echo "ncu conelab: exit $?"
    timeout 90 ncu --csv --metrics gpu__time_duration.sum --log-file "$out/ncu-torch.csv" \
      "$py" bench/reference_torch.py "${args[@]}" --device cuda --mode fp32 > /dev/null 2>&1
    echo "ncu torch: exit $?"
    xz -f "$out"/ncu-*.csv 2>/dev/null || true
  fi
}

stage_objectives() {
  timeout 240 "$conelab" bench objectives --device "$device" 2>&1 | tee "$out/objectives.txt"
}

stage_wt2() {
  local seconds=$1 switch=${2:-}
  local pids=()
  # Seven runs share the machine's 16 cores (host-side metrics, LibTorch's CPU thread pools).
  export OMP_NUM_THREADS=2 RAYON_NUM_THREADS=2
  for name in $names; do
    local dir="$runs/$name" extra=${flags[$name]}
    if [ "$name" = sc ] && [ "$switch" = sc ]; then extra="--reg sc=exp:1"; fi
    if ls -d "$dir"/step-* >/dev/null 2>&1; then
      # shellcheck disable=SC2086
      timeout --preserve-status -s INT "$seconds" "$conelab" train --resume "$dir" --device "$device" --headless \
        --steps "$wt2_steps" $extra >> "$dir.log" 2>&1 &
    else
      rm -rf "$dir" # stopped before its first checkpoint: nothing to continue
      # shellcheck disable=SC2086
      timeout --preserve-status -s INT "$seconds" "$conelab" train "$corpus" --model "$wt2_model" --device "$device" \
        --headless --steps "$wt2_steps" --batch "$wt2_batch" --eval-every "$wt2_eval" \
        --snapshot-every "$wt2_eval" --checkpoint-every 1000 --keep 1 --seed "$wt2_seed" \
        --run-dir "$dir" $extra > "$dir.log" 2>&1 &
    fi
    pids+=($!)
  done
  local i=0
  for name in $names; do
    wait "${pids[$i]}"
    echo "$name: exit $? ($(tail -1 "$runs/$name.log"))"
    i=$((i + 1))
  done
  nvidia-smi --query-gpu=memory.used --format=csv 2>/dev/null || true
  tar czf "$out/$tag-logs.tar.gz" "$runs"/*.log
}

stage_collect() {
  local dirs=()
  for name in $names; do dirs+=("$runs/$name"); done
  "$conelab" eval "${dirs[@]}" --split test --device "$device" --format json > "$out/$tag-eval-test.json"
  echo "eval exit $?"
  "$conelab" export "${dirs[@]}" --table groups --split valid --format md | tee "$out/$tag-groups.md"
  "$conelab" export "${dirs[@]}" --table groups --step best --split valid --format md \
    > "$out/$tag-groups-best.md"
  "$conelab" export "${dirs[@]}" --table curves \
    --metric valid/ppl,embedding/i1,train/loss --format csv > "$out/$tag-curves.csv"
  # The stores (compacted when a run ends) and logs, without the checkpoints (too big to travel).
  tar czf "$out/$tag-stores.tar.gz" --exclude='step-*' "$runs"
  du -h "$out"/*
}

stage=${1:-}
shift || true
case "$stage" in
  pending) stage_pending ;;
  smoke) stage_smoke ;;
  compare) stage_compare ;;
  engine) stage_engine ;;
  objectives) stage_objectives ;;
  wt2) stage_wt2 "$@" ;;
  collect) stage_collect ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
