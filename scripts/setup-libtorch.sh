#!/usr/bin/env bash
# Installs the libtorch that burn-tch 0.22 is built against (PyTorch 2.9.0 from PyPI) into a cache
# folder outside the clone, so repeated builds and CI runs reuse it, and prints the environment for
# building and running conelab with `--features tch`.
#
#   scripts/setup-libtorch.sh            # full CUDA build of torch (~4 GB, with its nvidia wheels)
#   scripts/setup-libtorch.sh --cpu-only # lean CPU-only set (~0.9 GB): enough for --device libtorch-cpu
#   eval "$(scripts/setup-libtorch.sh --cpu-only)"   # export the variables into this shell
#
# Cache: ${CONELAB_CACHE:-~/.cache/conelab}. Progress goes to stderr; stdout is only the exports.
set -euo pipefail

TORCH_VERSION=2.9.0
mode=full
case "${1:-}" in
  --cpu-only) mode=cpu ;;
  "" ) ;;
  *) echo "usage: $0 [--cpu-only]" >&2; exit 2 ;;
esac

cache="${CONELAB_CACHE:-$HOME/.cache/conelab}"
venv="$cache/torch-$TORCH_VERSION-$mode"
python="${PYTHON:-python3}"

have_torch() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - <<PY 2>/dev/null
import importlib.util, sys, pathlib
spec = importlib.util.find_spec("torch")
sys.exit(0 if spec and (pathlib.Path(spec.origin).parent / "lib" / "libtorch_cpu.so").exists() else 1)
PY
}

if ! have_torch; then
  echo "installing torch==$TORCH_VERSION ($mode) into $venv" >&2
  "$python" -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  if [ "$mode" = cpu ]; then
    # libtorch_cpu.so itself needs libcudart.so.12 (and cupti) even when no GPU is used.
    "$venv/bin/python" -m pip install -q --no-deps "torch==$TORCH_VERSION" \
      nvidia-cuda-runtime-cu12==12.8.90 nvidia-cuda-cupti-cu12==12.8.90 >&2
    # The reference benchmark imports these; they are small.
    "$venv/bin/python" -m pip install -q numpy typing_extensions sympy filelock jinja2 networkx fsspec >&2
  else
    "$venv/bin/python" -m pip install -q "torch==$TORCH_VERSION" numpy >&2
  fi
fi

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torch_dir="$site/torch"
nvidia_libs="$site/nvidia/cuda_runtime/lib:$site/nvidia/cuda_cupti/lib"

if [ "$mode" = cpu ]; then
  # A libtorch folder without libtorch_cuda.so, so the build links the CPU libraries only and the
  # binary does not need the whole CUDA stack at run time.
  libtorch="$cache/libtorch-$TORCH_VERSION-cpu"
  rm -rf "$libtorch"
  mkdir -p "$libtorch/lib"
  ln -s "$torch_dir/include" "$libtorch/include"
  for f in "$torch_dir"/lib/*; do
    case "$(basename "$f")" in libtorch_cuda.so) continue ;; esac
    ln -s "$f" "$libtorch/lib/"
  done
else
  libtorch="$torch_dir"
fi

cat <<ENV
export LIBTORCH="$libtorch"
export LIBTORCH_BYPASS_VERSION_CHECK=1
export LD_LIBRARY_PATH="$libtorch/lib:$nvidia_libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export CONELAB_TORCH_PYTHON="$venv/bin/python"
ENV
