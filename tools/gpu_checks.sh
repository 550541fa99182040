#!/usr/bin/env bash
# Every GPU claim of the NCCL path, in one run of at most 8 minutes on one GPU machine (tools/gpu_bundle.sh packs
# the binaries into .gpu/bundle.tar.xz, ~16 MB, for a machine without Bazel; copy .gpu/ there with the checkout;
# the device tool's carry [".gpu"] does). Here:  tools/gpu_checks.sh bundle
# There (repo root):  tools/gpu_checks.sh run OUTDIR [steps...]   (unpacks the bundle first; docs/gpu.md)
# Steps, in this order (the most wanted first): tests (gpu_trainer_test, nccl_test); paths (ddp_verify --backend
# nccl with the model on the host, --share-gpus --nccl-exact: the CNN, the GPT, a comm hook, ZeRO, Join, world sizes
# 2-4: every sim-vs-real row exact); faults (timed fault runs, the device trainer at 2, 4, 8); labs (001-004 on
# NCCL; 005-007 at 2 ranks print the simulator's every line, at 3 pinned they run); order
# (nccl_order for ws 2-8 -> OUTDIR/nccl_order.tar.gz holding nccl/wsN.json, the goldens of tests/golden/nccl/);
# check (the machine's torch 2.x DDP over NCCL, 3 ranks sharing the GPU, traced by verify/ddplab_trace with the
# ring pinned and unpinned -> OUTDIR/check_{pinned,unpinned}.tar.xz; unpinned, the recorder measures NCCL's order
# at close() (measure_order, issue 41); back here: bazel run //verify:ddp_check -- DIR for each: pinned says
# "pinned", unpinned "measured on the run's own communicator" and exact where NCCL summed along rings);
# bench (//bench:gpu_step, both kernel tables); questions (sim/questions/*_gpu.py: SyncBatchNorm against one
# device, non-deterministic kernels; their JSON lines in questions.log). Default: all, within BUDGET_S (480) seconds: each command's limit
# is cut to what is left, and what the budget does not reach is listed as not run. Each step's log goes to
# OUTDIR/<step>.log; the run ends with one table (OUTDIR/claims.txt): each claim, pass or fail, and its figure.
# A GPU machine returns at most 8 files of 16 MiB: OUTDIR ends as claims.txt, logs.tar.gz (every step's log),
# nccl_order.tar.gz, check_pinned.tar.xz and check_unpinned.tar.xz.
set -uo pipefail
targets=(//verify:ddp_verify //verify:nccl_order //tests:gpu_trainer_test //tests:nccl_test //bench:gpu_step
         //notebooks_ported/001_toy_ddp:001_toy_ddp //notebooks_ported/002_checkpoint:002_checkpoint
         //notebooks_ported/003_trainer:003_trainer
         //notebooks_ported/004_parallelism:004_parallelism //notebooks_ported/005_cnn_digits:005_cnn_digits
         //notebooks_ported/006_tiny_gpt:006_tiny_gpt //notebooks_ported/007_comm_hooks:007_comm_hooks)

case "${1:-}" in
  bundle)
    exec "$(dirname "$0")/gpu_bundle.sh" "${targets[@]}" ;;
  run)
    out=${2:?usage: $0 run OUTDIR [steps...]}; shift 2 ;;
  *)
    echo "usage: $0 bundle | run OUTDIR [tests|paths|faults|labs|order|check|bench ...]" >&2; exit 2 ;;
esac
steps=("$@"); [ ${#steps[@]} -gt 0 ] || steps=(tests paths faults labs order check questions bench)
budget=${BUDGET_S:-480}
start=$(date +%s)
root=$(pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -f .gpu/bundle.tar.xz ] || [ -f .gpu/env.sh ] || { echo "no .gpu/bundle.tar.xz: run $0 bundle here first" >&2; exit 2; }
# Unpack with tar, or with Python's tarfile where the machine has no xz.
[ -f .gpu/env.sh ] || tar -C .gpu -xJf .gpu/bundle.tar.xz 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpu/bundle.tar.xz .gpu || exit 2
# shellcheck disable=SC1091
source .gpu/env.sh
cd .gpu/bin || exit 2
nvidia-smi -L | tee "$out/device.txt"

claims=()
step() {  # name, limit in seconds, command...: one claim, passed when the command exits 0
  claim_if "" "$@"
}
fault() {  # name, limit, command...: a run with an injected fault passes when it ends in an error, not a hang
  want_error=1 claim_if "" "$@"
}
claim_if() {  # pattern that must not appear in the output ("" : none), name, limit, command...
  local bad=$1 name=$2 limit=$3; shift 3
  local left=$(( budget - ($(date +%s) - start) ))
  if [ "$left" -le 5 ]; then claims+=("not run|$name: $*|budget of ${budget} s spent"); return; fi
  [ "$limit" -le "$left" ] || limit=$left
  echo "== $name: $*" | tee -a "$out/$name.log"
  local t0 one; t0=$(date +%s.%N); one=$(mktemp)
  timeout -k 5 "$limit" "$@" >"$one" 2>&1
  local rc=$?
  cat "$one" >>"$out/$name.log"
  local secs; secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b - a}')
  echo "== $name: exit $rc after $secs s" | tee -a "$out/$name.log"
  local verdict=pass figure="${secs} s"
  if [ -n "${want_error:-}" ]; then
    figure="exit $rc after ${secs} s"
    { [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; } || verdict=FAIL
  elif [ "$rc" -ne 0 ]; then
    verdict=FAIL figure="exit $rc after ${secs} s"
  fi
  if [ -n "$bad" ] && grep -q -- "$bad" "$one"; then verdict=FAIL figure="'$bad' in the output"; fi
  local exact; exact=$(grep -c "exact: True" "$one")
  [ "$exact" -eq 0 ] || figure="$figure, $exact rows exact"
  claims+=("$verdict|$name: $*|$figure")
  rm -f "$one"
}

for s in "${steps[@]}"; do
  case "$s" in
    tests)
      step tests 200 ./tests/gpu_trainer_test
      step tests 400 ./tests/nccl_test ;;
    paths)  # the model on the host, every collective through NCCL (issue 32): pinned, so every row exact
      v=(./verify/ddp_verify --backend nccl --share-gpus --nccl-exact --quiet)
      claim_if "exact: False" paths 90 "${v[@]}" --nproc 3 --model cnn --dataset digits
      claim_if "exact: False" paths 90 "${v[@]}" --nproc 2 --model gpt --steps 2
      claim_if "exact: False" paths 90 "${v[@]}" --nproc 4 --layers 8,32,16,4 --activation relu --comm-hook fp16-compress
      claim_if "exact: False" paths 90 "${v[@]}" --nproc 3 --layers 8,32,16,4 --optimizer adam --zero true
      claim_if "exact: False" paths 90 "${v[@]}" --nproc 3 --layers 8,32,16,4 --uneven 1 --join true
      claim_if "exact: False" paths 90 "${v[@]}" --nproc 4 --model cnn --dataset digits --comm-hook bf16-compress
      # SyncBatchNorm's all_gather and all_reduce inside forward and backward, on NCCL (question 12)
      claim_if "exact: False" paths 90 "${v[@]}" --nproc 3 --model cnn --dataset digits --sync-batchnorm true ;;
    order)
      mkdir -p "$out/nccl"
      for ws in 2 3 4 5 6 7 8; do
        step order 60 ./verify/nccl_order --backend nccl --share-gpus --nccl-exact --nproc "$ws" \
          --out "$out/nccl/ws$ws.json"
      done
      tar -C "$out" -czf "$out/nccl_order.tar.gz" nccl && rm -r "$out/nccl" ;;  # the device tool returns few files
    faults)
      fault faults 60 ./verify/ddp_verify --backend nccl --share-gpus --nproc 3 --fault exit --fault-rank 1 \
        --fault-at 2 --timeout 5 --quiet
      fault faults 60 ./verify/ddp_verify --backend nccl --share-gpus --nproc 3 --fault hang --fault-rank 2 \
        --fault-at 3 --timeout 5 --quiet
      for ws in 2 4 8; do
        claim_if "exact: False" faults 120 ./verify/ddp_verify --backend nccl --compute device --share-gpus \
          --nccl-exact --kernels reference --nproc "$ws" --epochs 2 --layers 8,32,16,4 --activation relu --quiet
      done ;;
    bench)
      step bench 240 ./bench/gpu_step --kernels fast --reference "$root/bench/gpu_step_reference.py"
      step bench 240 ./bench/gpu_step --kernels reference --steps 10 --reference "$root/bench/gpu_step_reference.py" ;;
    labs)
      step labs 60 ./notebooks_ported/001_toy_ddp/001_toy_ddp --backend nccl --share-gpus --nproc 2
      step labs 60 ./notebooks_ported/002_checkpoint/002_checkpoint --backend nccl --share-gpus --nproc 2
      step labs 60 ./notebooks_ported/003_trainer/003_trainer --backend nccl --share-gpus --nproc 4
      step labs 60 ./notebooks_ported/004_parallelism/004_parallelism --backend nccl --share-gpus --nproc 2
      for lab in 005_cnn_digits 006_tiny_gpt 007_comm_hooks; do
        # 2 ranks add a + b in any order: every line the simulator's (less the title and where-it-ran notes)
        step labs 60 bash -c 'numbers() { grep -v -e "^Lab [0-9]*:" -e "^nccl: " -e "^  (simulated in this process" |
          sed "s/ (simulated by rank 0)//"; }
          diff <("$1" --world-size 2 | numbers) <("$1" --backend nccl --share-gpus --nproc 2 | numbers)' \
          _ "./notebooks_ported/$lab/$lab"
        step labs 60 "./notebooks_ported/$lab/$lab" --backend nccl --share-gpus --nccl-exact --nproc 3
      done ;;
    check)  # python3 there is its torch 2.x; the traces come back for ddp_check (no Bazel there)
      step check 120 env -u LD_LIBRARY_PATH NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=1 NCCL_MAX_NCHANNELS=1 \
        python3 "$root/tests/ddp_check/nccl_mlp.py" --out "$out/check_pinned"
      step check 120 env -u LD_LIBRARY_PATH python3 "$root/tests/ddp_check/nccl_mlp.py" --out "$out/check_unpinned"
      for t in check_pinned check_unpinned; do  # one archive each: a file comes back only under 16 MiB
        tar -C "$out" -cf - "$t" | xz -T0 -6 > "$out/$t.tar.xz" && rm -r "${out:?}/$t"
      done ;;
    questions)  # python3 there is its torch 2.x on the GPU: facts for docs/questions.md
      # without the bundle's LD_LIBRARY_PATH, whose CUDA folders may hold a cuDNN older than torch's own
      step questions 120 env -u LD_LIBRARY_PATH python3 "$root/sim/questions/syncbn_gpu.py"
      step questions 90 env -u LD_LIBRARY_PATH python3 "$root/sim/questions/nondeterminism_gpu.py" ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done

{
  echo "# GPU claims ($(head -1 "$out/device.txt" 2>/dev/null), $(( $(date +%s) - start )) s of a ${budget} s budget)"
  printf '%-8s | %s | %s\n' verdict claim figure
  for c in "${claims[@]}"; do IFS='|' read -r v what fig <<<"$c"; printf '%-8s | %s | %s\n' "$v" "$what" "$fig"; done
} | tee "$out/claims.txt"
# At most 8 files come back from a GPU machine: the table stays readable, the logs travel as one archive.
( cd "$out" && ls ./*.log device.txt >/dev/null 2>&1 && tar -czf logs.tar.gz ./*.log device.txt && rm -f ./*.log device.txt )
