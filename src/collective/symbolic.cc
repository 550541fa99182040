#include "src/collective/symbolic.h"

#include <stdexcept>
#include <utility>
#include <vector>

namespace ddplab::collective {
namespace {

constexpr uint32_t kLeaf = UINT32_MAX;

// Node id -> (left, right), or (kLeaf, rank) for a rank's value. One pool per thread: --explain runs an
// algorithm on a few dozen elements, so the pool stays small.
thread_local std::vector<std::pair<uint32_t, uint32_t>> pool;

}  // namespace

void sym_reset(int world_size) {
  pool.clear();
  for (int r = 0; r < world_size; ++r) pool.emplace_back(kLeaf, static_cast<uint32_t>(r));
}

Sym sym_leaf(int rank) { return Sym{static_cast<uint32_t>(rank)}; }

Sym operator+(Sym a, Sym b) {
  pool.emplace_back(a.id, b.id);
  return Sym{static_cast<uint32_t>(pool.size() - 1)};
}

bool sym_parts(Sym s, int* rank, Sym* left, Sym* right) {
  const auto& [l, r] = pool.at(s.id);
  if (l == kLeaf) {
    *rank = static_cast<int>(r);
    return true;
  }
  *left = Sym{l}, *right = Sym{r};
  return false;
}

std::string sym_text(Sym s) {
  const auto& [l, r] = pool.at(s.id);
  if (l == kLeaf) return "x" + std::to_string(r);
  const auto part = [](Sym x) {
    const std::string t = sym_text(x);
    return pool.at(x.id).first == kLeaf ? t : "(" + t + ")";
  };
  return part(Sym{l}) + " + " + part(Sym{r});
}

float sym_eval(Sym s, const float* values_by_rank) {
  const auto& [l, r] = pool.at(s.id);
  if (l == kLeaf) return values_by_rank[r];
  return sym_eval(Sym{l}, values_by_rank) + sym_eval(Sym{r}, values_by_rank);
}

}  // namespace ddplab::collective
