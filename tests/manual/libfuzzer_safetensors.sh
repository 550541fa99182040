#!/usr/bin/env bash
# Builds tests/manual/libfuzzer_safetensors.cc with clang's libFuzzer, AddressSanitizer and UBSan, seeds a
# corpus with a valid checkpoint, and fuzzes for SECONDS (default 60) with a 64 MB allocation limit.
#   tests/manual/libfuzzer_safetensors.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v clang++ >/dev/null || { echo "needs clang (Debian: apt-get install clang)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
  -isystem /usr/include/eigen3 tests/manual/libfuzzer_safetensors.cc src/base/safetensors.cc src/base/io.cc -lfmt \
  -o "$out/fuzz"
mkdir -p "$out/corpus"
bazel build //notebooks_ported/002_checkpoint >/dev/null 2>&1
bazel-bin/notebooks_ported/002_checkpoint/002_checkpoint --world-size 1 --checkpoint "$out/corpus/seed.safetensors" >/dev/null
"$out/fuzz" -max_total_time="${1:-60}" -rss_limit_mb=2048 -malloc_limit_mb=64 "$out/corpus"
