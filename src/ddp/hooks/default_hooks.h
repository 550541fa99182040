// torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py (1.13), one hook each:
//   allreduce_hook      bucket.div_(world_size), then SUM all-reduce: a true division, not the built-in
//                       multiply by float(1/world_size), so at world sizes that are not powers of two the
//                       bits differ from DDP without a hook.
//   fp16_compress_hook  bucket cast to float16, div_(world_size) in float16, SUM all-reduce in float16
//                       (Gloo rounds to float16 at every addition), cast back into the float32 bucket.
//   bf16_compress_hook  the same in bfloat16 (PyTorch 1.13 runs it only with CUDA and NCCL >= 2.10).
//   noop_hook           returns the bucket as is: every rank keeps its own gradients (no averaging).
#pragma once

#include <memory>

#include "src/ddp/comm_hook.h"

namespace ddplab::ddp {

std::unique_ptr<CommHook> make_allreduce_hook();
std::unique_ptr<CommHook> make_fp16_compress_hook();
std::unique_ptr<CommHook> make_bf16_compress_hook();
std::unique_ptr<CommHook> make_noop_hook();

}  // namespace ddplab::ddp
