// ddp_verify --model gpt: the tiny GPT's DDP run (src/gpt/) with one process per rank over Gloo, checked
// against the simulator (src/gpt/train.h simulate_gpt) in the same cmp tables.
#pragma once

namespace ddplab {

int run_gpt_verify(int argc, char** argv);

}  // namespace ddplab
