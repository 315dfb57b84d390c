#!/usr/bin/env bash
# Builds a release conelab with the LibTorch engine (CUDA) for a GPU machine that has PyTorch but
# no Rust toolchain: compiled here against the *exact* torch version of that machine (a binary built
# against libtorch 2.9 crashes on 2.11's libraries), with an rpath to that machine's torch/lib so it
# runs there without LD_LIBRARY_PATH. The result goes to gpu-bin/conelab.xz (ignored by git), small
# enough to travel with the working tree; unpack it there with `xz -dk gpu-bin/conelab.xz`.
#
#   scripts/build-gpu-binary.sh [--torch 2.11.0] [--rpath DIR] [--out gpu-bin] [--with-deps]
#
#   --torch      torch version of the target machine (default 2.11.0, the CUDA-13 wheel on PyPI)
#   --rpath      where that machine keeps libtorch_cuda.so, libtorch_cpu.so, libc10.so
#                (default /opt/torch/.venv/lib/python3.12/site-packages/torch/lib)
#   --with-deps  also install torch's nvidia-* wheels (~3 GB more); without them the link leaves
#                the CUDA libraries' symbols to be resolved on the target machine
#
# Cache: ${CONELAB_CACHE:-~/.cache/conelab} (the torch wheel and, unless CONELAB_GPU_TARGET names
# one, a target folder). Needs python3 with venv/pip and a C++ compiler.
set -euo pipefail
cd "$(dirname "$0")/.."

torch_version=2.11.0
rpath=/opt/torch/.venv/lib/python3.12/site-packages/torch/lib
out=gpu-bin
with_deps=0
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) torch_version=$2; shift 2 ;;
    --rpath) rpath=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --with-deps) with_deps=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build-gpu-binary.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

cache="${CONELAB_CACHE:-$HOME/.cache/conelab}"
venv="$cache/torch-$torch_version-build"
python="${PYTHON:-python3}"

if ! [ -f "$venv/.complete" ]; then
  echo "installing torch==$torch_version (headers and libraries) into $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  if [ "$with_deps" = 1 ]; then
    "$venv/bin/python" -m pip install -q "torch==$torch_version"
  else
    "$venv/bin/python" -m pip install -q --no-deps "torch==$torch_version"
  fi
  touch "$venv/.complete"
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torch_dir="$site/torch"
if ! [ -f "$torch_dir/lib/libtorch_cuda.so" ]; then
  echo "build-gpu-binary.sh: $torch_dir/lib has no libtorch_cuda.so: torch==$torch_version from PyPI is not a CUDA build here" >&2
  exit 1
fi

# LIBTORCH points at the wheel's torch/ (include/ and lib/): torch-sys does not need to import
# torch, which would need the nvidia wheels. The version check knows only 2.9.
export LIBTORCH="$torch_dir"
export LIBTORCH_BYPASS_VERSION_CHECK=1
export LD_LIBRARY_PATH="$torch_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The rpath and the undefined-symbol allowance go to the final link only (`cargo rustc … --`), not
# through RUSTFLAGS: RUSTFLAGS would make every dependency a new build, while these leave the
# dependencies shareable with a plain `cargo build --release` in the same target folder.
link_args=(-C "link-arg=-Wl,-rpath,$rpath")
if [ "$with_deps" = 0 ]; then
  link_args+=(-C link-arg=-Wl,--allow-shlib-undefined)
fi
target="${CONELAB_GPU_TARGET:-$cache/gpu-target-$torch_version}"
echo "building conelab --features tch against torch $torch_version (target $target)" >&2
cargo rustc --release --locked --features tch --bin conelab --target-dir "$target" -- "${link_args[@]}"

mkdir -p "$out"
cp "$target/release/conelab" "$out/conelab"
strip "$out/conelab" 2>/dev/null || true
printf '%s\n' "$torch_version" > "$out/TORCH_VERSION"
# The device tool carries at most 64 MiB in all (the binary is ~50 MiB, the corpora beside it
# ~15 MiB): what travels is the xz'd binary (~11 MiB), unpacked on the device by
# bench/gpu_session.sh or `xz -dk gpu-bin/conelab.xz`. It cannot run here anyway (no CUDA).
xz -T0 -6 -f "$out/conelab"
size=$(du -m "$out/conelab.xz" | cut -f1)
echo "wrote $out/conelab.xz ($size MiB), linked against torch $torch_version, rpath $rpath" >&2
if [ "$size" -ge 48 ]; then
  echo "warning: $out/conelab.xz is $size MiB; the device tool carries at most 64 MiB in all" >&2
fi
