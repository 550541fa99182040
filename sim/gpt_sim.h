// ddp_sim --model gpt: the tiny GPT's DDP run (src/gpt/) in one process.
#pragma once

namespace ddplab {

int run_gpt_sim(int argc, char** argv);

}  // namespace ddplab
