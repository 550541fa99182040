// The parallelism schemes of seed notebook 004, each next to the single-device computation it replaces,
// on the Communicator interface (threads in the simulator, processes over Gloo/NCCL for real).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/base/compare.h"
#include "src/tensor/tensor.h"

namespace ddplab::lab004 {

struct Section {
  std::string title;
  std::vector<CmpResult> rows;
  std::string note;
  std::map<std::string, std::vector<float>> tensors;  // what --dump writes, for the tests against PyTorch
};
std::string render(const Section& s);  // its text; its table also goes to --report (lab::record_table)

// nn.DataParallel(Linear(100, 10), device_ids = 0..n-1) on toy_x randn(1000, 100): scatter the batch in
// chunks, replicate the module, gather the outputs on device 0, MSE on device 0, backward: each replica's
// gradient from its chunk, summed into device 0's module in device order. One process, n "devices".
Section data_parallel(int devices);

// Model parallelism, 2 ranks: net1 = Linear(10, 10) + ReLU on rank 0, net2 = Linear(10, 5) on rank 1;
// activations go forward and their gradient comes back through the communicator.
Section model_parallel(comm::Communicator& c);

// Tensor parallelism over every rank: ColumnParallelLinear (weight rows = output columns sharded; the
// backward all-reduces grad_input) and RowParallelLinear (input columns sharded; the forward all-reduces
// the partial outputs), each against one unsharded Linear. `async_race` reproduces the notebook's
// all_reduce(async_op=True) that is never waited on: grad_input is used before the reduction lands.
Section column_parallel(comm::Communicator& c, bool async_race);
Section row_parallel(comm::Communicator& c);

// ZeRO-1 as torch's ZeroRedundancyOptimizer (src/ddp/zero.h) with Adam against DDP + Adam: each rank keeps
// and steps the state of its partition, then broadcasts it. The arithmetic per element is DDP's, so the result
// is bitwise DDP's (and torch's ZeroRedundancyOptimizer's: reference.py --zero); what changes is the memory each
// rank holds: the partition and state per rank, and the memory of stages 1-3. Tensors: "zero.<name>" (rank 0's
// final parameters) and "zero.state_numel" (Adam's state floats per rank).
Section zero(comm::Communicator& c);

}  // namespace ddplab::lab004
