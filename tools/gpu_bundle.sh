#!/usr/bin/env bash
# Packs Bazel-built binaries for a GPU machine that has CUDA, NCCL and cuBLAS but no Bazel and no Debian
# libraries (the machine gets a copy of this checkout, not the build tree). Run from the repository root:
#   tools/gpu_bundle.sh //verify:ddp_verify //tests:gpu_trainer_test ...
# (tools/gpu_checks.sh bundle calls it with every GPU target.)
# Result: .gpu/bundle.tar.xz (git-ignored through .git/info/exclude), about 16 MB: a GPU machine is sent at
# most 64 MiB of working tree, and the unpacked tree is ~100 MB (oneDNN and OpenBLAS). It holds bin/<package>/
# <name>, lib/, data/digits.csv.gz and env.sh. Binaries keep their package path under bin/, so a test that
# runs verify/ddp_verify finds it from .gpu/bin.
# On the GPU machine, from the checkout:
#   tar -C .gpu -xJf .gpu/bundle.tar.xz && source .gpu/env.sh && cd .gpu/bin && ./tests/gpu_trainer_test
# (tools/gpu_checks.sh run unpacks it itself.)
# env.sh puts the carried libraries first, then the machine's own libnccl.so.2, libcublas.so.13 and
# libcudart.so.13, found under /usr or /opt (CUDA 13; edit _find's names for another CUDA major version).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 //pkg:target ..." >&2; exit 2; }
[ -f WORKSPACE ] || { echo "run from the repository root (no WORKSPACE here)" >&2; exit 2; }
ex=$(git rev-parse --git-common-dir)/info/exclude; mkdir -p "$(dirname "$ex")"
grep -qx "/.gpu/" "$ex" 2>/dev/null || echo "/.gpu/" >> "$ex"
bazel build -c opt "$@"
bin=$(bazel info -c opt bazel-bin)
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
for t in "$@"; do
  rel=${t#//}; rel=${rel/://}
  mkdir -p ".gpu/bin/$(dirname "$rel")"; cp -L "$bin/$rel" ".gpu/bin/$rel"
  # Libraries the GPU machine lacks: everything but the C runtime and the CUDA stack it brings itself.
  ldd "$bin/$rel" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    case "$name" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*) ;;
      libcuda.so*|libcudart.so*|libnccl.so*|libcublas*.so*) ;;
      *) cp -Ln "$path" ".gpu/lib/$name" ;;
    esac
  done
done
# The digits (--dataset digits, lab 005): that machine's sklearn is not at Debian's path.
digits=/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
mkdir -p .gpu/data; [ ! -f "$digits" ] || cp "$digits" .gpu/data/
cat > .gpu/env.sh <<'ENV'
# source .gpu/env.sh on the GPU machine: the carried libraries, then that machine's CUDA, NCCL and cuBLAS.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_find() { find /usr /opt -name "$1" 2>/dev/null | grep -v stubs | head -1; }
export LD_LIBRARY_PATH="$here/lib:$(dirname "$(_find libnccl.so.2)"):$(dirname "$(_find libcublas.so.13)"):$(dirname "$(_find libcudart.so.13)")"
[ -f /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz ] || export DDPLAB_DIGITS="$here/data/digits.csv.gz"
ENV
du -sh .gpu | awk '{print "unpacked: " $1}'
tar -C .gpu -cf - bin lib data env.sh | xz -T0 -6 > .gpu/bundle.tar.xz.tmp
rm -rf .gpu/bin .gpu/lib .gpu/data .gpu/env.sh && mv .gpu/bundle.tar.xz.tmp .gpu/bundle.tar.xz
size=$(stat -c %s .gpu/bundle.tar.xz)
echo "bundle: .gpu/bundle.tar.xz, $((size >> 20)) MiB: carry .gpu to the GPU machine with the checkout"
[ "$size" -lt $((60 << 20)) ] || { echo "bundle over 60 MiB: a GPU machine is sent at most 64 MiB" >&2; exit 1; }
