#!/usr/bin/env bash
# Regenerates tests/golden/nccl/ws2.json .. ws8.json: real NCCL's all-reduce order, recorded on a GPU by
# verify/nccl_order (see its header for the probes and the seeded sums). Needs a machine with a GPU,
# CUDA and NCCL; these files were written on one NVIDIA H100 with NCCL 2.28.3, every rank sharing it
# (--share-gpus), NCCL pinned by --nccl-exact.
#   here:    tools/gpu_checks.sh bundle
#   there:   tools/gpu_checks.sh run OUT order     (then: tar -xzf OUT/nccl_order.tar.gz; cp nccl/ws*.json here)
# or, on a machine with a GPU and Bazel, directly:
set -euo pipefail
cd "$(dirname "$0")/../../.."
bazel build //verify:nccl_order
for ws in 2 3 4 5 6 7 8; do
  bazel-bin/verify/nccl_order --backend nccl --share-gpus --nccl-exact --nproc "$ws" \
    --out "tests/golden/nccl/ws$ws.json"
done
