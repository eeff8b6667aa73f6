#!/usr/bin/env bash
# Builds oobleck on a CUDA machine against a pip-installed PyTorch: its
# libtorch (torch.utils.cmake_prefix_path) and the NCCL of its nvidia-nccl
# package, with CUDA from /usr/local/cuda (or CUDA_HOME). Such a machine has
# no Debian packages: the header-only libraries come from .deps/, made by
# tools/vendor-deps.sh on a Debian machine. Builds into build-cuda/ (or $1).
#
#   tools/build-cuda.sh [BUILD_DIR]     PYTHON=python3 OOBLECK_DEPS=.deps TARGETS="oobleck-run ..."
#
# TARGETS builds only those targets (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
python=${PYTHON:-python3}
deps=$(realpath -m "${OOBLECK_DEPS:-.deps}")
cuda=${CUDA_HOME:-/usr/local/cuda}

die() {
  echo "build-cuda: $*" >&2
  exit 2
}
[ -d "$deps/include/nlohmann" ] || die "$deps: no header-only libraries: run tools/vendor-deps.sh on a Debian 12 machine and copy .deps/ here"
[ -x "$cuda/bin/nvcc" ] || die "$cuda/bin/nvcc: not found (set CUDA_HOME)"
torch_prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
  die "$python cannot import torch (set PYTHON to the Python that has PyTorch)"
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
# nvidia-nccl-cu*: site-packages/nvidia/nccl (or a cu13/ folder) with include/ and lib/.
nccl_home=
while IFS= read -r header; do
  home=$(dirname "$(dirname "$header")")
  if compgen -G "$home/lib/libnccl.so*" > /dev/null; then
    nccl_home=$home
    break
  fi
done < <(find "$(dirname "$torch_dir")/nvidia" -name nccl.h 2>/dev/null | LC_ALL=C sort)
gloo=()
if [ ! -f "$torch_dir/include/gloo/config.h" ]; then
  gloo=(-DOOBLECK_GLOO_INCLUDE_DIR="$deps/gloo/include")
fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi

echo "build-cuda: libtorch from $torch_prefix, NCCL from ${nccl_home:-nowhere (the NCCL communicator is left out)}" >&2
export NCCL_HOME=${nccl_home}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$deps" \
  -DCUDAToolkit_ROOT="$cuda" -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 \
  "${gloo[@]}"
targets=()
for target in ${TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
echo "build-cuda: built $build/bin/oobleck-run" >&2
