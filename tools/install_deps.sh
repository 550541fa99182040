#!/usr/bin/env bash
# Installs every Debian package ddplab needs to build, test and run its PyTorch oracle.
# Idempotent: packages already present are skipped; nothing is downloaded at build time afterwards.
#
#   tools/install_deps.sh                 the Debian packages (torch 1.13 is the oracle)
#   tools/install_deps.sh --with-torch2   also a virtual environment with today's torch 2.x and Lightning from
#                                         PyPI, pinned below, for ddp_check's second oracle (about 5 GB: a CUDA
#                                         build of torch; made once per machine, outside the clone, at
#                                         $DDPLAB_TORCH2_VENV, default /opt/ddplab-torch2)
set -euo pipefail

TORCH2_PINS=(torch==2.15.0 lightning==2.6.6 accelerate==1.15.0)
WITH_TORCH2=0
for arg in "$@"; do
  case "$arg" in
    --with-torch2) WITH_TORCH2=1 ;;
    *) echo "install_deps: unknown argument '$arg' (the only one is --with-torch2)" >&2; exit 2 ;;
  esac
done

# The torch 2.x venv: made, or checked, after the Debian packages (python3-venv is one of them).
install_torch2() {
  local venv="${DDPLAB_TORCH2_VENV:-/opt/ddplab-torch2}"
  if "$venv/bin/python" - "${TORCH2_PINS[@]}" 2>/dev/null <<'PY'
import sys, importlib.metadata as md
sys.exit(0 if all(md.version(p.split("==")[0]) == p.split("==")[1] for p in sys.argv[1:]) else 1)
PY
  then
    echo "install_deps: $venv has ${TORCH2_PINS[*]}"
    return 0
  fi
  echo "install_deps: making $venv with ${TORCH2_PINS[*]} (PyPI; about 5 GB)"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${TORCH2_PINS[@]}"
}

PKGS=(
  bazel-bootstrap bazel-platforms      # Bazel 4.2.3 (WORKSPACE era) + @platforms, offline
  g++ libeigen3-dev libfmt-dev libgtest-dev libbenchmark-dev
  libgloo-dev libopenmpi-dev openmpi-bin redis-server libhiredis-dev
  python3-torch python3-numpy libopenblas0-pthread
  nlohmann-json3-dev                   # reads PyTorch goldens in tests
  chromium-headless-shell              # report_test loads --report's HTML in a real browser (skips without)
  zlib1g-dev                           # report_test decodes the browser's PNG screenshot
  libcpuinfo-dev                       # the kernel family torch 1.13 picks (AVX2 or AVX-512): its sum order
  libdnnl-dev libsleef-dev             # oneDNN 2.6.3 and SLEEF 3.5.1: the libraries torch 1.13 calls for Conv2d and
                                       # its vectorised exp/tanh/erf
  python3-sklearn                      # ships the 8x8 digits (--dataset digits)
  python3-venv                         # --with-torch2: the torch 2.x virtual environment
  python3-pip python3-setuptools       # recorder_test: `pip install ./verify`, as a learner installs the recorder
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
else
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "$WITH_TORCH2" = 1 ]; then install_torch2; fi

