#!/usr/bin/env bash
# Copies the header-only libraries oobleck builds with (CLI11, nlohmann_json,
# Eigen, doctest; and Gloo's headers, for a libtorch that ships none) from
# this Debian machine's packages into .deps/, laid out as under /usr, so
# that tools/build-cuda.sh can build on a machine that has a pip PyTorch but
# no Debian packages and no package registry. Copy .deps/ there with the
# source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
deps=${1:-.deps}

packages=(libcli11-dev nlohmann-json3-dev libeigen3-dev doctest-dev libgloo-dev)
tools/install-packages.sh vendor-deps "${packages[@]}"

rm -rf "$deps"
mkdir -p "$deps/include" "$deps/share/cmake" "$deps/share/eigen3" "$deps/lib/cmake" "$deps/gloo/include"
cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/doctest /usr/include/eigen3 "$deps/include/"
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$deps/share/cmake/"
cp -r /usr/share/eigen3/cmake "$deps/share/eigen3/"
cp -r /usr/lib/cmake/doctest "$deps/lib/cmake/"
# Gloo's headers stay apart: libtorch's own, where it has them, come first.
cp -r /usr/include/gloo "$deps/gloo/include/"
echo "vendor-deps: wrote $deps ($(du -sh "$deps" | cut -f1))" >&2
