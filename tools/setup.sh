#!/usr/bin/env bash
# Installs the Debian 12 packages oobleck needs (when missing) and builds it
# into build/. Safe to run again: it installs nothing twice and rebuilds only
# what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake ninja-build ccache pkg-config
  libeigen3-dev libcli11-dev nlohmann-json3-dev doctest-dev libbenchmark-dev
  libbenchmark-tools python3-scipy  # tools/bench-compare.sh: Google Benchmark's compare.py and its U test
  libtorch-dev libgloo-dev libopenblas0-openmp
  jupyter-nbconvert python3-ipykernel python3-matplotlib  # notebooks/, run headless by the tests
  python3-pytest  # tests/scripts: the tests of tools/oobleck-tools
  pybind11-dev python3-dev  # python/: import oobleck
  python3-torch  # tools/bench-train-efficiency.sh: the same training in plain PyTorch (the same libtorch)
  openssh-client  # agents on other hosts (--hostfile)
  openssh-server iproute2 nftables slurm-wlm munge  # tests/cluster: namespace hosts with sshd and Slurm
  clang libclang-rt-14-dev  # tools/fuzz.sh: the libFuzzer targets of fuzz/
)

tools/install-packages.sh setup "${packages[@]}"

build_type="${OOBLECK_BUILD_TYPE:-Release}"
# ccache keys on paths relative to the checkout, so that the trees
# tools/bench-compare.sh builds under build-bench/ share build/'s entries.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type"
cmake --build build -j "$(nproc)"
echo "setup: built build/bin/oobleck-plan" >&2
