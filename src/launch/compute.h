// Where a real run's model lives, and what each backend refuses before any rank starts. The rule: every
// configuration Gloo runs also runs on NCCL with the model on the host (--compute host, the default), each
// collective through NCCL staged on the rank's GPU; only the device trainer (--compute device) has limits.
#pragma once

#include <string>

#include "src/ddp/config.h"
#include "src/base/flags.h"
#include "src/launch/run_flags.h"

namespace ddplab::dist {

enum class Compute { host, device };

// --compute host|device (host by default). Throws UsageError for another value, or device without NCCL.
Compute compute_from_flags(const Flags& flags, Backend backend);

// "" when cfg may start on `backend` with `compute`, else the one line that refuses it: Gloo has no bfloat16
// all-reduce (--comm-hook bf16-compress); the device trainer runs Linear and ReLU, MSE, no hook, ZeRO, Join or
// --uneven, and no GPT.
std::string backend_refusal(const ddp::Config& cfg, Backend backend, Compute compute);

}  // namespace ddplab::dist
