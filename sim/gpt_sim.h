// ddp_sim --model gpt: the tiny GPT's run and what it prints (its flags are the one table's, read by ddp_sim).
#pragma once

#include "src/ddp/config.h"
#include "src/base/flags.h"

namespace ddplab {

// `cfg` read from `flags` by ddp_sim (vocab_size still 0: the data are read here).
int run_gpt_sim(const Flags& flags, ddp::Config cfg);

}  // namespace ddplab
