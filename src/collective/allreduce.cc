#include "src/collective/allreduce.h"

#include <stdexcept>

namespace ddplab::collective {

const std::vector<std::string>& algorithm_names() {
  static const std::vector<std::string> names = {"naive", "ring", "halving-doubling", "tree", "nccl-ring"};
  return names;
}

Algorithm parse_algorithm(const std::string& name) {
  if (name == "naive") return Algorithm::naive;
  if (name == "ring") return Algorithm::ring;
  if (name == "halving-doubling") return Algorithm::halving_doubling;
  if (name == "tree") return Algorithm::tree;
  if (name == "nccl-ring") return Algorithm::nccl_ring;
  throw std::invalid_argument("unknown all-reduce algorithm '" + name + "'");
}

std::string algorithm_name(Algorithm a) { return algorithm_names()[static_cast<size_t>(a)]; }

void allreduce_sum(Algorithm a, const std::vector<float*>& bufs, size_t n) {
  switch (a) {
    case Algorithm::naive:
      return naive_allreduce(bufs, n);
    case Algorithm::ring:
      return ring_allreduce(bufs, n);
    case Algorithm::halving_doubling:
      return halving_doubling_allreduce(bufs, n);
    case Algorithm::tree:
      return tree_allreduce(bufs, n);
    case Algorithm::nccl_ring:
      return nccl_ring_allreduce(bufs, n);
  }
}

}  // namespace ddplab::collective
