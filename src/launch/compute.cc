#include "src/launch/compute.h"

#include "src/base/errors.h"
#include "src/nccl/gpu_trainer.h"

namespace ddplab::dist {

Compute compute_from_flags(const Flags& flags, Backend backend) {
  const std::string c = flags.get_string("compute", "host");
  if (c != "host" && c != "device") throw UsageError("--compute must be host or device (got '" + c + "')");
  if (c == "device" && backend != Backend::nccl) {
    throw UsageError("--compute device needs --backend nccl: it keeps the model in the GPU's memory");
  }
  return c == "device" ? Compute::device : Compute::host;
}

std::string backend_refusal(const ddp::Config& cfg, Backend backend, Compute compute) {
  if (cfg.inject_nan_rank >= 0) {
    return "--inject-nan is ddp_sim's (where one rank's NaN goes): ddp_verify compares the real ranks with the "
           "simulator, and NaN equals nothing, so there is nothing to verify; run it in bazel-bin/sim/ddp_sim";
  }
  if (backend == Backend::gloo && cfg.comm_hook.name == "bf16-compress") {
    return "--comm-hook bf16-compress does not run on Gloo: torch 1.13's register_comm_hook refuses it without "
           "CUDA and NCCL (\"BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+.\") and "
           "ProcessGroupGloo has no bfloat16 all-reduce; ddp_sim and --backend nccl run it";
  }
  if (compute != Compute::device) return "";
  if (cfg.is_gpt()) {
    return "--compute device keeps the model on the GPU for Linear and ReLU layers only (got --model gpt: "
           "Embedding, LayerNorm, causal attention, GELU); --compute host (the default) runs it on NCCL";
  }
  if (std::string why = gpu_trainer_unsupported(cfg); !why.empty()) return why;
  if (cfg.uneven > 0 || cfg.join) {
    return "--compute device has no Join (--uneven, --join): --compute host (the default) runs them on NCCL";
  }
  return "";
}

}  // namespace ddplab::dist
