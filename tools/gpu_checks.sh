#!/usr/bin/env bash
# Every GPU claim of the NCCL path, in one run on a GPU machine (tools/gpu_bundle.sh packs the binaries into
# .gpu/ for a machine without Bazel; copy .gpu/ there with the checkout). Here:      tools/gpu_checks.sh bundle
# There (repo root):          tools/gpu_checks.sh run OUTDIR [steps...]
# Steps: tests (gpu_trainer_test, nccl_test), order (nccl_order for ws 2-8 -> OUTDIR/nccl_order.tar holding
# nccl/wsN.json, the goldens of tests/golden/nccl/), faults (timed fault runs), bench (//bench:gpu_step, both kernel tables),
# check (the machine's torch 2.x DDP over NCCL, 3 ranks sharing the GPU, traced by verify/ddplab_trace.py with the ring
# pinned and unpinned -> OUTDIR/check_traces.tar; back here: bazel run //verify:ddp_check -- DIR for each). Default: all.
# Each step's log goes to OUTDIR/<step>.log; a step that runs past its limit is stopped and says so.
set -uo pipefail
targets=(//verify:ddp_verify //verify:nccl_order //tests:gpu_trainer_test //tests:nccl_test //bench:gpu_step
         //notebooks_ported/001_toy_ddp:001_toy_ddp //notebooks_ported/002_checkpoint:002_checkpoint
         //notebooks_ported/003_trainer:003_trainer
         //notebooks_ported/004_parallelism:004_parallelism)

case "${1:-}" in
  bundle)
    exec "$(dirname "$0")/gpu_bundle.sh" "${targets[@]}" ;;
  run)
    out=${2:?usage: $0 run OUTDIR [steps...]}; shift 2 ;;
  *)
    echo "usage: $0 bundle | run OUTDIR [tests|order|faults|bench|labs|check ...]" >&2; exit 2 ;;
esac
steps=("$@"); [ ${#steps[@]} -gt 0 ] || steps=(tests order faults bench labs check)
root=$(pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
# shellcheck disable=SC1091
source .gpu/env.sh
cd .gpu/bin || exit 2
nvidia-smi -L | tee "$out/device.txt"

step() {  # name, limit in seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name: $*" | tee -a "$out/$name.log"
  local t0; t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >>"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b - a}') s" | tee -a "$out/$name.log"
}

for s in "${steps[@]}"; do
  case "$s" in
    tests)
      step tests 200 ./tests/gpu_trainer_test
      step tests 400 ./tests/nccl_test ;;
    order)
      mkdir -p "$out/nccl"
      for ws in 2 3 4 5 6 7 8; do
        step order 60 ./verify/nccl_order --backend nccl --share-gpus --nccl-exact --nproc "$ws" \
          --out "$out/nccl/ws$ws.json"
      done
      tar -C "$out" -cf "$out/nccl_order.tar" nccl && rm -r "$out/nccl" ;;  # the device tool returns few files
    faults)
      step faults 60 ./verify/ddp_verify --backend nccl --share-gpus --nproc 3 --fault exit --fault-rank 1 \
        --fault-at 2 --timeout 5 --quiet
      step faults 60 ./verify/ddp_verify --backend nccl --share-gpus --nproc 3 --fault hang --fault-rank 2 \
        --fault-at 3 --timeout 5 --quiet
      for ws in 2 4 8; do
        step faults 120 ./verify/ddp_verify --backend nccl --share-gpus --nccl-exact --kernels reference \
          --nproc "$ws" --epochs 2 --layers 8,32,16,4 --activation relu --quiet
      done ;;
    bench)
      step bench 240 ./bench/gpu_step --kernels fast --reference "$root/bench/gpu_step_reference.py"
      step bench 240 ./bench/gpu_step --kernels reference --steps 10 --reference "$root/bench/gpu_step_reference.py" ;;
    labs)
      step labs 60 ./notebooks_ported/001_toy_ddp/001_toy_ddp --backend nccl --share-gpus --nproc 2
      step labs 60 ./notebooks_ported/002_checkpoint/002_checkpoint --backend nccl --share-gpus --nproc 2
      step labs 60 ./notebooks_ported/003_trainer/003_trainer --backend nccl --share-gpus --nproc 4
      step labs 60 ./notebooks_ported/004_parallelism/004_parallelism --backend nccl --share-gpus --nproc 2 ;;
    check)  # python3 there is its torch 2.x; the traces come back for ddp_check (no Bazel there)
      step check 120 env NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=1 NCCL_MAX_NCHANNELS=1 \
        python3 "$root/tests/ddp_check/nccl_mlp.py" --out "$out/check_pinned"
      step check 120 python3 "$root/tests/ddp_check/nccl_mlp.py" --out "$out/check_unpinned"
      tar -C "$out" -cf "$out/check_traces.tar" check_pinned check_unpinned && rm -r "$out/check_pinned" "$out/check_unpinned" ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
