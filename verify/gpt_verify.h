// ddp_verify --model gpt: the tiny GPT's real ranks over Gloo, compared with the simulator (its flags are the
// one table's, read by ddp_verify).
#pragma once

#include "src/ddp/config.h"
#include "src/base/flags.h"
#include "src/launch/run_flags.h"

namespace ddplab {

int run_gpt_verify(const Flags& flags, const dist::RunFlags& run, int argc, char** argv, ddp::Config cfg);

}  // namespace ddplab
