#!/usr/bin/env bash
# Installs those of the given Debian packages that are missing (apt-get
# update first; sudo when not root). Daemons the packages bring (sshd) are
# not started: the tests start their own, inside namespaces.
#
# Usage: tools/install-packages.sh WHO PACKAGE...   (WHO names the caller in the message)
set -euo pipefail
who=$1
shift
missing=()
for package in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
((${#missing[@]})) || exit 0
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "$who: installing ${missing[*]}" >&2
$sudo apt-get update
no_daemons=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  no_daemons=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$no_daemons" > /dev/null
  $sudo chmod +x "$no_daemons"
fi
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
if [ -n "$no_daemons" ]; then $sudo rm -f "$no_daemons"; fi
