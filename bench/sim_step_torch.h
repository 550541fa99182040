// bench/sim_step's PyTorch side: bench/sim_step_reference.py run on the same case and thread count, and
// the hooked DDP step (--comm-hook) against torch 1.13 DDP on real Gloo ranks, compared bitwise.
#pragma once

#include <string>
#include <vector>

#include "bench/sim_step_measure.h"

namespace ddplab::bench {

// PyTorch's median step in ms (-1 when the reference printed none).
double torch_ms(const std::string& reference, const Case& c, int threads);
double torch_gpt_ms(const std::string& reference, const GptCase& c, int threads);
// Prints one line per hook: ddplab's and PyTorch's step times, and whether the parameters agree bitwise.
void run_hooks(const std::string& reference, const std::vector<std::string>& hooks);

}  // namespace ddplab::bench
