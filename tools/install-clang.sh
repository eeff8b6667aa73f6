#!/usr/bin/env bash
# Installs clang and libFuzzer's runtime (Debian 12's clang 14) where they are
# missing: the fuzz targets need them (tools/fuzz.sh), and so does the
# sanitizer build that also makes those targets (tools/sanitize.sh
# --with-fuzz-targets).
set -euo pipefail
packages=(clang libclang-rt-14-dev)
missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then missing+=("$package"); fi
done
if ((${#missing[@]})); then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "install-clang: installing ${missing[*]}" >&2
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi
