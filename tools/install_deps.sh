#!/usr/bin/env bash
# Installs every Debian package ddplab needs to build, test and run its PyTorch oracle.
# Idempotent: packages already present are skipped; nothing is downloaded at build time afterwards.
set -euo pipefail

PKGS=(
  bazel-bootstrap bazel-platforms      # Bazel 4.2.3 (WORKSPACE era) + @platforms, offline
  g++ libeigen3-dev libfmt-dev libgtest-dev libbenchmark-dev
  libgloo-dev libopenmpi-dev openmpi-bin redis-server libhiredis-dev
  python3-torch python3-numpy libopenblas0-pthread
  nlohmann-json3-dev                   # reads PyTorch goldens in tests
  chromium-headless-shell              # report_test loads --report's HTML in a real browser (skips without)
  zlib1g-dev                           # report_test decodes the browser's PNG screenshot
  libdnnl-dev libsleef-dev             # oneDNN 2.6.3 and SLEEF 3.5.1: the libraries torch 1.13 calls for Conv2d and
                                       # its vectorised exp/tanh/erf
  python3-sklearn                      # ships the 8x8 digits (--dataset digits)
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
  [ "${p:0:1}" = "#" ] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_deps: all ${#PKGS[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
