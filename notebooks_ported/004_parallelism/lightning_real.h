// Lab 004's Lightning section for real: the notebook's own Lightning code (lightning_ddp.py beside this file)
// run on 2 CPU ranks by torch 2.x + Lightning (tools/install_deps.sh --with-torch2), traced by
// ddplab_trace.LightningCallback and checked by ddp_check's library.
#pragma once

#include <string>

namespace ddplab::lab004 {

// The section's text; where torch 2.x and Lightning are absent, one line saying why it was skipped.
std::string lightning_real();

}  // namespace ddplab::lab004
